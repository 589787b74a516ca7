"""A `save:` name must label an intermediate of the forward graph (or name one of its
outputs); a typo used to be accepted and the backward then recomputed, or failed later
without saying which file and line."""
import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.autodiff.torch_bridge import saved_by_schedule
from plait.dsl import Tensor, algorithm, mean, name, rsqrt
from plait.schedule import ScheduleError, load_schedule, validate


@algorithm
def norm(x: Tensor["M", "N"], w: Tensor["N"]):
    mu = name(mean(x, over="N"), "mu")
    xc = x - mu
    return xc * name(rsqrt(mean(xc * xc, over="N") + 1e-5), "rstd") * w


BWD = "algorithm: norm.bwd\ngrid: {M: 1}\nblock: {N: {threads: 32}}\n"


def test_a_typo_in_the_backward_schedule_names_file_line_and_the_nearest_name(write):
    path = write(BWD + "save: [rstd, muu]\n")
    with pytest.raises(ScheduleError) as info:
        validate(load_schedule(path), grad(norm).graph())
    assert info.value.problems == [
        f"{path}:4: save.1: 'muu' names no intermediate of norm (known: mu, rstd, out); "
        "label one with name(x, 'muu') (did you mean 'mu'?)"]


def test_the_check_reads_the_forward_graph_not_the_simplified_backward(write):
    """The backward keeps no `name` nodes: its own graph would refuse every label."""
    assert not any(n.op == "name" for n in grad(norm).graph().nodes)
    validate(load_schedule(write(BWD + "save: [rstd, mu, out]\n")), grad(norm).graph())


@pytest.mark.parametrize("label", ["rsdt", "rstd"])
def test_a_per_kernel_save_is_refused_not_ignored(write, label):
    """Only the top-level save: decides what is saved; one under kernels: did nothing."""
    path = write(BWD + f"kernels:\n  norm.bwd:\n    save: [{label}]\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:6: kernels.norm.bwd.save: save: "
                       r"decides .* write it at the top level"):
        validate(load_schedule(path), grad(norm).graph())


def test_a_forward_schedule_names_its_own_intermediates(write):
    path = write("algorithm: norm\nsave: [sigma]\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:2: save.0: 'sigma' names no "
                       r"intermediate of norm"):
        validate(load_schedule(path), norm.graph())


def test_the_torch_bridge_refuses_the_typo_where_it_reads_it(write):
    """to_torch takes the list to save from the backward schedule: refused there, by line,
    before any gradient is built."""
    path = write(BWD + "save: [rstd, mu]\n")
    assert saved_by_schedule(norm, str(path)) == ("rstd", "mu")
    bad = write(BWD + "save: [rstd,\n       mean]\n", "bad.yaml")
    with pytest.raises(ScheduleError, match=rf"^{bad}:5: save.1: 'mean' names no "):
        saved_by_schedule(norm, str(bad))


def test_plait_run_refuses_the_typo(write):
    rng = np.random.default_rng(1)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((3, 37), 37, (3, 37)))
    path = write(BWD + "save: [rstdd]\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:4: save.0: .*did you mean 'rstd'"):
        plait.run(grad(norm), x, w, dout=dy, schedule=str(path), device="cpu")
