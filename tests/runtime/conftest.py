"""Each runtime test starts without the handles plait.run made in another (several tests
swap the compiler, the executor or the driver for fakes)."""
import pytest

from plait.runtime import api


@pytest.fixture(autouse=True)
def fresh_run_handles():
    api.clear_run_cache()
    yield
    api.clear_run_cache()
