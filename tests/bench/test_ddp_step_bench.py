"""bench/ddp_step.py without a GPU: it imports, and the models its contenders train (at sizes
other than the DDP tests') compute the block as float64 plain torch does, plait's ops running
through the CPU executor."""
import argparse
import copy
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    spec = importlib.util.spec_from_file_location("plait_bench_ddp_step", BENCH / "ddp_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel(got, want) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("contender", ["plait_ops", "torch_eager"])
def test_contender_model_matches_float64(contender):
    bench = _load()
    args = argparse.Namespace(dim=45, hidden=70, dtype="fp32")
    run, model = bench.build(contender, args, "cpu", 1)
    assert run is model                         # one process: no DDP around it
    wide = copy.deepcopy(model).double()
    wide.ops = None                             # plain torch in float64
    gen = torch.Generator().manual_seed(3)
    x, dy = torch.randn(29, 45, generator=gen), torch.randn(29, 45, generator=gen)
    want = wide(x.double())
    got = run(x)
    assert got.dtype == torch.float32 and got.shape == (29, 45)
    # fp32 against float64, relative to the largest magnitude: measured 4e-8 forward and
    # under 5e-7 for the gradients (sums over 29 rows and 70 hidden units)
    assert _rel(got, want) <= 1e-6
    # the gradients the step's backward feeds to DDP
    (got * dy).sum().backward()
    (want * dy.double()).sum().backward()
    for (name, p), q in zip(model.named_parameters(), wide.parameters()):
        assert _rel(p.grad, q.grad) <= 5e-6, name
