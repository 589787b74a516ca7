"""Fixtures for the autodiff tests: fresh random inputs, with the seed shown on failure."""
import secrets

import numpy as np
import pytest


@pytest.fixture
def seed():
    value = secrets.randbits(32)
    print(f"random seed: {value}")  # pytest shows captured output of failing tests
    return value


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)
