"""The partitioner's table under PLAIT_TORCH_DEBUG (the logger at DEBUG): one row per
region with its op count, its kernel count and why it stopped."""
import logging
import re

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _rows(text: str, kind: str) -> list[list[str]]:
    """The rows of the first table of a `kind` graph ("fw" or "bw"; graphs are numbered
    per process)."""
    found = re.search(rf"({kind}\d+) regions:\n", text)
    assert found, text[-2000:]
    label = found.group(1)
    lines = text[found.end():].splitlines()
    assert re.match(r"region\s+ops\s+kernels\s+stopped at", lines[0]), lines[0]
    rows = []
    for line in lines[1:]:
        m = re.match(rf"({label}_plait_region_\d+)\s+(\d+)\s+(\S+)\s+(.*)$", line)
        if not m:
            break
        rows.append(list(m.groups()))
    return rows


def test_table_names_regions_ops_kernels_and_the_op_that_cut_them(caplog):
    def f(x):
        y = torch.exp(x) * 0.5 + 1.0              # mul, add, exp: 3 ops
        z = torch.cumsum(y, dim=-1)               # not plait's: cuts the graph
        return torch.tanh(z) - z.sum(-1, keepdim=True)
    caplog.set_level(logging.DEBUG, logger="plait.torch_backend")
    x = torch.randn(5, 37)
    y = torch.compile(f, backend="plait", options={"cpu": True})(x)
    torch.testing.assert_close(y.double(), f(x.double()), rtol=2e-4, atol=2e-5)
    rows = sorted(_rows(caplog.text, "fw"), key=lambda r: int(r[1]))
    assert len(rows) == 2, caplog.text
    (_, ops_a, kernels_a, why_a), (_, ops_b, kernels_b, why_b) = rows
    assert (int(ops_a), int(ops_b)) == (3, 3)          # exp, mul, add | tanh, sum, sub
    assert int(kernels_a) == 1 and int(kernels_b) >= 1
    for why in (why_a, why_b):
        assert "aten.cumsum.default is not in plait's op table" in why
        assert "graph input/output" in why


def test_no_table_without_debug(caplog):
    caplog.set_level(logging.INFO, logger="plait.torch_backend")
    torch.compile(lambda x: torch.exp(x) * 2.0, backend="plait",
                  options={"cpu": True})(torch.randn(3, 7))
    assert "regions:" not in caplog.text
