"""Fixtures of the torch interop tests. torch is imported inside them: this file is
collected without torch too, where every test module here skips."""
import pytest


@pytest.fixture
def fresh_backend():
    """A fresh torch.compile state and plait backend statistics around a test."""
    import torch
    import plait.runtime.torch_backend as backend
    torch._dynamo.reset()
    backend.reset_stats()
    yield backend
    torch._dynamo.reset()
