"""Gradients of the scans against torch CPU autograd in float64, on fresh random inputs:
cumsum's reverse cumsum, cumprod's with zeros (one and several per row, as torch handles
them), cummax / cummin routed to the latest position holding the running extreme (many
ties from small integers, NaN), both directions, an outer axis; the derived algorithms
run in the reference and through the CPU executor (whose programs conftest assembles);
and the generic scan refused by name."""
import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import (PlaitError, Tensor, algorithm, cummax, cummin, cumprod, cumsum,
                       evaluate, scan)

torch = pytest.importorskip("torch")


def _algo(fn, over, reverse):
    @algorithm
    def scanned(x: Tensor["M", "N"]):
        return fn(x, over=over, reverse=reverse)
    return scanned


def _torch(name, t, dim, reverse):
    t = t.flip(dim) if reverse else t
    out = {"cumsum": lambda: torch.cumsum(t, dim), "cumprod": lambda: torch.cumprod(t, dim),
           "cummax": lambda: torch.cummax(t, dim).values,
           "cummin": lambda: torch.cummin(t, dim).values}[name]()
    return out.flip(dim) if reverse else out


def _inputs(rng, name, shape):
    if name in ("cummax", "cummin"):             # many ties, some NaN
        x = rng.integers(-3, 4, shape).astype(np.float64)
        x[rng.random(shape) < 0.05] = np.nan
        return x
    x = rng.standard_normal(shape)
    if name == "cumprod":                         # rows with one zero, two, none
        x[0, shape[1] // 3] = 0.0
        x[1, 2], x[1, shape[1] - 2] = 0.0, 0.0
    return x


FNS = {"cumsum": cumsum, "cumprod": cumprod, "cummax": cummax, "cummin": cummin}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("over", ["N", "M"])
@pytest.mark.parametrize("name", sorted(FNS))
def test_gradient_matches_torch_autograd(name, over, reverse):
    rng = np.random.default_rng()
    shape = (4, 37) if over == "N" else (37, 4)
    x = _inputs(rng, name, shape if over == "N" else shape[::-1]).T.copy() \
        if over == "M" else _inputs(rng, name, shape)
    g = rng.standard_normal(shape)
    t = torch.tensor(x, requires_grad=True)
    _torch(name, t, 1 if over == "N" else 0, reverse).backward(torch.tensor(g))
    want = t.grad.numpy()
    derived = grad(_algo(FNS[name], over, reverse), wrt=["x"])
    ref = evaluate(derived.graph(), {"x": x, "dout": g})["dx"]
    np.testing.assert_allclose(ref, want, rtol=1e-10, atol=1e-10)
    got = plait.run(derived, x.astype(np.float32), dout=g.astype(np.float32),
                    device="cpu")["dx"]
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)


def test_cumprod_gradient_at_the_first_zero_is_the_product_of_the_others():
    x = np.array([[2.0, 3.0, 0.0, 5.0, 0.0, 7.0]])
    dx = evaluate(grad(_algo(cumprod, "N", False), wrt=["x"]).graph(),
                  {"x": x, "dout": np.ones_like(x)})["dx"]
    # d/dx2 of sum(y) = 2*3 + 2*3*5 (y3 = 2*3*x2*5); nothing flows past the first zero
    np.testing.assert_array_equal(dx, [[1 + 3 + 0, 2 + 2 * 0, 6 + 30, 0.0, 0.0, 0.0]])


def test_the_generic_scan_is_refused_by_name():
    @algorithm
    def running(x: Tensor["N"]):
        return scan(lambda s, t: s * t, 1.0, x, over="N")
    with pytest.raises(PlaitError, match=r"cannot differentiate through 'scan'"):
        grad(running, wrt=["x"]).graph()
