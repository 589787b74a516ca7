"""Shared helpers: schedule files in tmp_path and small algorithms to validate against."""
import textwrap

import pytest

from plait.dsl import Tensor, algorithm, mean, rsqrt, sum


@algorithm(name="layernorm")
def _layernorm(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
    mu = mean(x, over="N")
    xc = x - mu
    var = mean(xc * xc, over="N")
    return xc * rsqrt(var + eps) * w + b


@algorithm(name="layernorm.bwd")
def _layernorm_bwd(x: Tensor["M", "N"], w: Tensor["N"], dy: Tensor["M", "N"]):
    # Not the true gradient: just a two-output algorithm named like one.
    xhat = (x - mean(x, over="N")) * rsqrt(mean(x * x, over="N") + 1e-5)
    return {"dx": dy * w * xhat, "dw": sum(dy * xhat, over="M")}


@pytest.fixture
def write(tmp_path):
    """write(text, name='s.yaml') -> path of a dedented YAML file in tmp_path."""
    def _write(text: str, name: str = "s.yaml"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path
    return _write


@pytest.fixture
def layernorm():
    """The graph of layernorm over (M, N) with weight and bias."""
    return _layernorm.graph()


@pytest.fixture
def layernorm_bwd():
    """The graph of a two-output algorithm named 'layernorm.bwd' (outputs dx, dw)."""
    return _layernorm_bwd.graph()
