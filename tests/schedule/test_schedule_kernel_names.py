"""Every kernel name plait reports is a `kernels:` key, at the sizes it was reported at
and at any other, and the entry under it takes effect (split reductions' `.finish` and
`.then` stages any number deep, gradient kernels, split-K finishes, streamed kernels)."""
import pytest

from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, max, mean, sum
from plait.lowering.pipeline import lower
from plait.schedule import Schedule, validate
from plait.schedule.validate import check_kernel_keys

from examples_catalog import ATTENTION_SHAPES, load


@algorithm
def centered(x: Tensor["M", "N"]):
    return x - mean(x, over="N")


@algorithm
def colmax(x: Tensor["M", "N"]):
    return max(x * 1.3, over="M")


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")


# (algorithm, dtype, sizes at which it splits or streams, small sizes, target)
CASES = {
    "split row": (centered, DType.FP32, {"M": 50, "N": 150050}, {"M": 3, "N": 5}, "sm_80"),
    "split grad": (grad(colmax), DType.BF16, {"M": 300, "N": 5}, {"M": 3, "N": 5}, "sm_80"),
    "layernorm.bwd": (grad(load("layernorm")), DType.FP32, {"M": 37, "N": 3001},
                      {"M": 2, "N": 3}, "sm_90a"),
    "split-K": (matmul, DType.BF16, {"M": 37, "N": 70, "K": 5000},
                {"M": 3, "N": 5, "K": 7}, "sm_90a"),
    # Other sizes that still stream: a head of 5 is not streamed and has other kernels.
    "attention.bwd": (grad(load("attention")), DType.BF16, ATTENTION_SHAPES,
                      {**ATTENTION_SHAPES, "S": 3, "T": 5, "D": 8}, "sm_90a"),
}


def _kernels(graph, schedule, sizes, target):
    low = lower(graph, schedule, sizes, True, target)
    return {k.name: k.schedule for k in low.kernel_graph.kernels}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_reported_name_is_a_key_that_takes_effect(case):
    algo, dtype, sizes, small, target = CASES[case]
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    names = list(_kernels(graph, None, sizes, target))
    assert len(names) > 1, names
    at_small = list(_kernels(graph, None, small, target))
    for name in names:
        short = name[len(graph.name) + 1:] if name != graph.name else name
        for key in (name, short):
            schedule = validate(Schedule.from_dict(
                {"algorithm": graph.name, "kernels": {key: {"occupancy": 1}}}), graph)
            check_kernel_keys(schedule, at_small)     # the name stays a key at other sizes
            assert _kernels(graph, schedule, sizes, target)[name].occupancy == 1, key


def test_a_stage_of_a_stage_is_a_key_where_nothing_splits():
    """'centered.then.finish', printed where N is long, named at N = 5."""
    schedule = Schedule.from_dict({"algorithm": "centered", "kernels": {
        "centered.then.finish": {"grid": {"M": 1}}, "then.then": {"occupancy": 2}}})
    _kernels(centered.graph(), schedule, {"M": 3, "N": 5}, "sm_80")


def test_the_printed_schedule_of_a_finish_kernel_is_a_valid_entry():
    """A `.finish` kernel's printed schedule names the axis the kernel graph derives
    (`M_blocks0`, the blocks of M): written back under `kernels:`, it validates and takes
    effect; under the top-level keys, or of an axis the algorithm lacks, it is refused."""
    bwd = grad(load("layernorm"))
    graph = bwd.graph({p.name: DType.FP32 for p in bwd.tensor_params})
    sizes = {"M": 37, "N": 300}
    finish = next(k for k in lower(graph, None, sizes, True, "sm_90a").kernel_graph.kernels
                  if k.name.endswith(".finish"))
    printed = finish.schedule.to_dict()
    derived = next(a for a in printed["block"] if a.endswith("_blocks0"))
    printed["block"][derived]["threads"] = 32
    s = Schedule.from_dict({"algorithm": bwd.name, "kernels": {finish.name: printed}})
    validate(s, graph)
    again = next(k for k in lower(graph, s, sizes, True, "sm_90a").kernel_graph.kernels
                 if k.name == finish.name)
    assert again.schedule.block_axes[derived].threads == 32
    for bad in ({"block": {derived: {"threads": 32}}},
                {"kernels": {finish.name: {"block": {"Q_blocks0": {"threads": 32}}}}}):
        with pytest.raises(Exception, match="unknown axis"):
            validate(Schedule.from_dict({"algorithm": bwd.name, **bad}), graph)
