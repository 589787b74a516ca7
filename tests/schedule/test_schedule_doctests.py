"""The examples in the schedule modules' docstrings run."""
import doctest
import importlib

import pytest

MODULES = ["__init__", "default", "dump", "errors", "loader", "lookup", "schema", "thread_load",
           "validate", "yaml_limits"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module("plait.schedule" + ("" if name == "__init__" else f".{name}"))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
