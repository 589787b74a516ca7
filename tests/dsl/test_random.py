"""rand, dropout and philox in the language: Philox4x32-10 against Random123's published
known-answer vectors (tests/random_cases.py cites them; the test's own Python-int Philox
is checked against them first, so nothing here trusts plait's code), the float64
reference against that independent Philox, typing, errors with the user's file:line, and
the statistics of 10**6 draws."""
import os

import numpy as np
import pytest

from plait.dsl import DType, PlaitError, Tensor, algorithm, dropout, evaluate, index, philox, rand
from plait.dsl.counter_rng import philox4x32 as reference_philox
from plait.lowering.cpu.philox import philox4x32 as executor_philox
from random_cases import KAT, MASK32, dropout_want, philox_py, uniform_want


@pytest.mark.parametrize("counter, key, want", KAT)
def test_the_tests_own_philox_gives_the_published_vectors(counter, key, want):
    assert philox_py(counter, key) == want


@pytest.mark.parametrize("implementation", [reference_philox, executor_philox],
                         ids=["reference", "cpu_executor"])
@pytest.mark.parametrize("counter, key, want", KAT)
def test_plaits_philox_gives_the_published_vectors(implementation, counter, key, want):
    words = implementation([np.array([w], np.uint32) for w in counter],
                           [np.array([w], np.uint32) for w in key])
    assert tuple(int(w[0]) for w in words) == want


@pytest.mark.parametrize("implementation", [reference_philox, executor_philox],
                         ids=["reference", "cpu_executor"])
def test_plaits_philox_agrees_with_python_ints_on_random_words(implementation):
    rng = np.random.default_rng()
    n = 500
    counter = [rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(4)]
    key = [rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    counter[1][:5] = MASK32                    # carries through every product's top word
    got = implementation(counter, key)
    for i in range(n):
        want = philox_py(tuple(int(c[i]) for c in counter), tuple(int(k[i]) for k in key))
        assert tuple(int(w[i]) for w in got) == want


@algorithm
def draws(x: Tensor["M", "N"], seed: int = 0, offset: int = 0):
    return {"mn": rand(seed, over=("M", "N"), offset=offset),
            "nm": rand(seed, over=("N", "M"), offset=offset),
            "n": rand(seed, over="N", offset=offset),
            "literal": rand(3_000_000_000, over=("M", "N"), offset=2 ** 32 - 3)}


@pytest.mark.parametrize("M, N", [(37, 129), (300, 7), (1, 1)])
@pytest.mark.parametrize("seed, offset", [(0, 0), (12345, 7), (-5, 2 ** 31 - 100)])
def test_the_reference_is_the_documented_function_of_seed_offset_and_position(M, N, seed,
                                                                            offset):
    x = np.random.default_rng().standard_normal((M, N))
    got = evaluate(draws.graph(), {"x": x, "seed": seed, "offset": offset})
    np.testing.assert_array_equal(got["mn"], uniform_want((M, N), seed, offset))
    np.testing.assert_array_equal(got["nm"], uniform_want((N, M), seed, offset).T)
    np.testing.assert_array_equal(got["n"], uniform_want((N,), seed, offset))
    np.testing.assert_array_equal(got["literal"], uniform_want((M, N), 3_000_000_000,
                                                               2 ** 32 - 3))


def test_typing_and_axes():
    @algorithm
    def typed(x: Tensor["M", "N", "bf16"], h: Tensor["N", "M", "fp16"], seed: int = 0):
        return {"u": rand(seed, over=("N", "M")), "dx": dropout(x, 0.5, seed),
                "dh": dropout(h, 0.5, seed), "bits": philox(index("M"), seed)}

    g = typed.graph()
    u, dx, dh, bits = (g.outputs[k] for k in ("u", "dx", "dh", "bits"))
    assert (u.dtype, u.axes) == (DType.FP32, ("M", "N"))      # canonical axes, fp32
    assert (dx.dtype, dx.axes) == (DType.BF16, ("M", "N"))
    assert dh.dtype == DType.FP16 and set(dh.axes) == {"M", "N"}
    assert (bits.dtype, bits.axes) == (DType.INT32, ("M",))


def test_dropout_with_p_zero_is_x_itself_and_draws_nothing():
    @algorithm
    def keep_all(x: Tensor["M", "N"], seed: int = 0):
        return dropout(x, 0.0, seed) * 1.0

    g = keep_all.graph()
    assert not any(n.op == "philox" for n in g.nodes)
    x = np.random.default_rng().standard_normal((5, 9))
    np.testing.assert_array_equal(evaluate(g, {"x": x, "seed": 3})["out"], x)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1e-7, 0.3])
def test_dropout_reference_keeps_where_u_is_at_least_p_and_scales(p):
    @algorithm
    def drop(x: Tensor["M", "N"], seed: int = 0):
        return {"y": dropout(x, p, seed, offset=99)}

    x = np.random.default_rng().standard_normal((41, 67)) + 0.01
    got = evaluate(drop.graph(), {"x": x, "seed": 77})["y"]
    want = dropout_want(x, p, 77, 99)
    np.testing.assert_array_equal(got == 0, want == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)    # the scale is fp32's 1/(1-p)


def _error(fn) -> PlaitError:
    with pytest.raises(PlaitError) as info:
        fn()
    return info.value


@pytest.mark.parametrize("body, words", [
    (lambda x, s: rand(s, over=()), "over=AXIS"),
    (lambda x, s: rand(s, over=("M", "M")), "names an axis twice"),
    (lambda x, s: rand(s, over=("M", "Q")), "unknown axis 'Q'"),
    (lambda x, s: rand(1.5, over="M"), "seed must be an int"),
    (lambda x, s: rand(x, over="M"), "seed must be an int scalar"),
    (lambda x, s: rand(2 ** 32, over="M"), "outside the 32-bit range"),
    (lambda x, s: rand(s, over="M", offset=-2 ** 31 - 1), "offset -2147483649 is outside"),
    (lambda x, s: dropout(x, 1.0, s), "p=1 drops everything"),
    (lambda x, s: dropout(x, -0.1, s), "outside [0, 1)"),
    (lambda x, s: dropout(x, x, s), "p must be a Python number"),
    (lambda x, s: dropout(x > 0.0, 0.5, s), "x must be a float tensor"),
    (lambda x, s: dropout(3.0, 0.5, s), "x must be a float tensor"),
    (lambda x, s: dropout(x, 0.0, 0.5), "seed must be an int"),
    (lambda x, s: philox(x, s), "counter must be an int32 tensor"),
])
def test_bad_arguments_are_refused_at_the_users_line(body, words):
    @algorithm
    def bad(x: Tensor["M", "N"], seed: int = 0):
        return body(x, seed)

    err = _error(bad.graph)
    assert words in str(err), str(err)
    assert err.loc is not None and os.path.basename(err.loc.file) == "test_random.py"


def test_ten_to_the_six_draws_are_uniform():
    """Mean, variance, the extremes and a 64-bin chi-square within 5 standard deviations
    (a failure is a 1-in-10**6 event for a true uniform)."""
    @algorithm
    def many(x: Tensor["M", "N"], seed: int = 0):
        return rand(seed, over=("M", "N"))

    n = 1000 * 1000
    u = evaluate(many.graph(), {"x": np.zeros((1000, 1000)), "seed": 2024})["out"].ravel()
    assert u.min() >= 0 and u.max() < 1 and u.min() < 1e-4 and u.max() > 1 - 1e-4
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    var_sd = np.sqrt((1 / 80 - 1 / 144) / n)        # sd of a sample variance of U(0, 1)
    assert abs(u.var() - 1 / 12) < 5 * var_sd
    counts = np.bincount((u * 64).astype(int), minlength=64)
    chi2 = ((counts - n / 64) ** 2 / (n / 64)).sum()
    assert chi2 < 63 + 5 * np.sqrt(2 * 63)
    lag = np.corrcoef(u[:-1], u[1:])[0, 1]          # neighbours are not correlated
    assert abs(lag) < 5 / np.sqrt(n)


def test_seeds_and_offsets_give_other_streams_and_offset_shifts_the_counter():
    @algorithm
    def two(x: Tensor["M", "N"], seed: int = 0, offset: int = 0):
        return rand(seed, over=("M", "N"), offset=offset)

    x = np.zeros((64, 64))
    base = evaluate(two.graph(), {"x": x, "seed": 1, "offset": 0})["out"].ravel()
    other_seed = evaluate(two.graph(), {"x": x, "seed": 2, "offset": 0})["out"].ravel()
    shifted = evaluate(two.graph(), {"x": x, "seed": 1, "offset": 5})["out"].ravel()
    assert np.mean(base == other_seed) < 0.01
    assert np.mean(base == shifted) < 0.01
    np.testing.assert_array_equal(shifted[:-5], base[5:])   # counter = index + offset
