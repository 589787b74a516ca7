"""plait under torch DistributedDataParallel on the CPU: two spawned processes over gloo, each
training tests/torch_interop/ddp_training.GatedBlock on its shard of each batch (plait.torch_op
for the norm and the activation, or torch.compile(backend="plait") on the CPU executor, its
graph split at DDP's buckets), then compared with each other (identical), with the same model
trained in this process on the whole batch, and with float64 plain torch. no_sync gradient
accumulation over two micro-batches (with find_unused_parameters and a parameter forward
never uses) must equal one step on the whole batch."""
import dataclasses
import zlib

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from ddp_training import SCENARIOS, assert_plait_ran, float64_reference, free_port, \
    one_process, run_rank, spawn_ranks  # noqa: E402

WORLD = 2
# Measured differences are one or two float32 ulps of the parameters (1.5e-8 on weights of
# order 0.1, 7e-8 on the norm's weight of order 1), where the two runs differ only in the
# order the rows' gradients are summed (two half-batch sums averaged by the all-reduce,
# against one sum over 52 rows) and float64 in the float32 roundings of every op.
SAME_MODEL = dict(rtol=1e-6, atol=1e-7)      # a few ulps: any lost or doubled term is far more
FLOAT64 = dict(rtol=1e-6, atol=2e-7)         # float32 storage of the parameters: ulp 6e-8 at 1


def _rank_main(rank, world, *args):
    """A spawned rank, with the parent's backend check: tests/conftest.py compiles every
    program the CPU executor runs for sm_80 and sm_90a and assembles it. A rank is a fresh
    interpreter, so it imports that check too; both ranks run the same shard-sized programs,
    so each assembles the half whose key hashes to it (the two halves run side by side)."""
    import conftest
    check = conftest.compile_and_assemble

    def my_half(graph, schedule, sizes):
        key = f"{graph.text()}|{sorted(sizes.items())}"
        if zlib.crc32(key.encode()) % world == rank:
            check(graph, schedule, sizes)
    conftest.compile_and_assemble = my_half
    run_rank(rank, world, *args)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    spawn_ranks(_rank_main, WORLD, (WORLD, free_port(), "gloo", "cpu", list(SCENARIOS),
                                    str(out)), timeout_s=240)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_ranks_end_with_identical_parameters_and_buffers(ranks, name):
    first, second = (r[name]["params"] for r in ranks)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_ddp_matches_one_process_on_the_whole_batch(ranks, name):
    got = ranks[0][name]["params"]
    one = one_process(SCENARIOS[name], "cpu")
    wide = float64_reference(SCENARIOS[name])
    assert got.keys() == one["params"].keys() == wide["params"].keys()
    for key in got:
        torch.testing.assert_close(got[key], one["params"][key], **SAME_MODEL, msg=key)
        torch.testing.assert_close(got[key].double(), wide["params"][key], **FLOAT64, msg=key)
    # training moved the parameters: a step that changed nothing would match as well
    start = one_process(dataclasses.replace(SCENARIOS[name], steps=0), "cpu")["params"]
    assert not torch.allclose(got["gate.weight"], start["gate.weight"], atol=1e-4)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_plait_ran_on_every_rank(ranks, name):
    for rank in ranks:
        assert_plait_ran(SCENARIOS[name], rank[name])
