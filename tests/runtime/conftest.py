"""Each runtime test starts without the handles plait.run made in another (several tests
swap the compiler, the executor or the driver for fakes)."""
import pytest

from plait.runtime import api


@pytest.fixture(autouse=True)
def fresh_run_handles():
    api.clear_run_cache()
    yield
    api.clear_run_cache()


@pytest.fixture
def rng():
    import secrets

    import numpy as np
    seed = secrets.randbits(32)
    print(f"random seed: {seed}")   # shown with a failing test's captured output
    return np.random.default_rng(seed)
