"""check_grads must fail when a gradient rule is wrong: the tests can catch bugs."""
import dataclasses

import pytest

from ad_cases import clipped, inputs_for, layernorm, row_max_min, softmax_rows, swiglu
from plait.autodiff import GradientCheckError, check_grads, from_source, grad, to_source
from plait.dsl import OPS


def _break_rule(monkeypatch, op, rule):
    monkeypatch.setitem(OPS, op, dataclasses.replace(OPS[op], vjp=rule))


def test_wrong_rsqrt_rule_is_caught(monkeypatch, rng, seed):
    # -0.45 instead of -0.5: a plausible slip, off by 10 %
    _break_rule(monkeypatch, "rsqrt", lambda n, g, y, x: (g * -0.45 * y * y * y,))
    with pytest.raises(GradientCheckError, match=r"layernorm.*\bx\b") as info:
        check_grads(layernorm, inputs_for(layernorm, rng), seed=seed)
    assert "finite differences" in str(info.value)
    assert "dw" not in str(info.value).split("for ")[1].split(":")[0]  # w's gradient is fine


def test_swapped_mul_rule_is_caught(monkeypatch, rng, seed):
    _break_rule(monkeypatch, "mul", lambda n, g, y, a, b: (g * a, g * b))
    with pytest.raises(GradientCheckError):
        check_grads(swiglu, inputs_for(swiglu, rng), seed=seed)


def test_missing_sign_in_sub_rule_is_caught(monkeypatch, rng, seed):
    _break_rule(monkeypatch, "sub", lambda n, g, y, a, b: (g, g))
    with pytest.raises(GradientCheckError, match=r"for y:"):
        check_grads(clipped, inputs_for(clipped, rng), seed=seed)


def test_softmax_is_blind_to_the_shift_so_the_check_is_not_overeager(monkeypatch, rng, seed):
    """softmax(x - max x) does not depend on the shift: a wrong sign on the max branch
    changes nothing, and check_grads must not flag it (no false alarms)."""
    _break_rule(monkeypatch, "sub", lambda n, g, y, a, b: (g, g))
    check_grads(softmax_rows, inputs_for(softmax_rows, rng), seed=seed)


def test_max_rule_ignoring_the_argmax_is_caught(monkeypatch, rng, seed):
    from plait.dsl.tensor import broadcast
    _break_rule(monkeypatch, "max", lambda n, g, y, x: (broadcast(g, x.axes),))
    with pytest.raises(GradientCheckError, match="x"):
        check_grads(row_max_min, inputs_for(row_max_min, rng), seed=seed)


def test_a_wrong_gradient_algorithm_is_caught(rng, seed):
    """An edited gradient source (dropping the mean correction) fails the check."""
    source = to_source(grad(layernorm, wrt="x"))
    assert " - " in source
    lines = source.splitlines()
    ret = next(i for i, line in enumerate(lines) if line.strip().startswith("return"))
    var = lines[ret].split('"dx": ')[1].rstrip("}")
    lines[ret] = lines[ret].replace(var, f"{var} * 1.001")
    broken = from_source("\n".join(lines) + "\n")
    broken.save, broken.wrt = (), ("x",)
    with pytest.raises(GradientCheckError):
        check_grads(layernorm, inputs_for(layernorm, rng), seed=seed, grad_algo=broken)
