"""PTX made in worker processes is the PTX made in this process; workers retire after a
fixed number of kernels, a dead one is replaced, LLVM's errors come back as they were."""
import os
import signal
import threading

import pytest

from plait.dsl import DType, Tensor, algorithm, softmax
from plait.lowering.nvptx import ptx_pool, ptx_worker
from plait.lowering.nvptx.backend import emit_llvm_ir
from plait.lowering.pipeline import lower


@algorithm
def rows(x: Tensor["M", "N"]):
    return softmax(x, over="N")


def _llvm_ir(n: int) -> str:
    low = lower(rows.graph({"x": DType.FP32}), None, {"M": 5, "N": n}, True, "sm_90a")
    return emit_llvm_ir(low.threads[0], "plait_rows")


def _features():
    from plait.lowering.target import get_target
    return get_target("sm_90a").ptx_feature


def _pids():
    return {w.process.pid for w in ptx_pool._idle}


@pytest.fixture
def fresh_pool():
    ptx_pool.shutdown()
    yield
    ptx_pool.shutdown()


def test_a_worker_makes_the_ptx_this_process_makes(fresh_pool):
    for n in (3, 77, 1531):
        text = _llvm_ir(n)
        assert ptx_pool.to_ptx(text, "sm_90a", _features()) == \
            ptx_worker.compile_ptx(text, "sm_90a", _features())


def test_workers_retire_after_their_kernels(fresh_pool, monkeypatch):
    monkeypatch.setattr(ptx_pool, "KERNELS_PER_WORKER", 2)
    seen = set()
    for n in range(5):
        ptx_pool.to_ptx(_llvm_ir(9 + n), "sm_90a", _features())
        seen |= _pids()
    assert len(seen) == 3 and len(ptx_pool._idle) == 1


def test_a_killed_worker_is_replaced(fresh_pool):
    ptx_pool.to_ptx(_llvm_ir(5), "sm_90a", _features())
    (pid,) = _pids()
    os.kill(pid, signal.SIGKILL)
    assert "plait_rows" in ptx_pool.to_ptx(_llvm_ir(6), "sm_90a", _features())
    assert _pids() and pid not in _pids()


def test_llvm_errors_come_back_and_the_worker_stays(fresh_pool):
    with pytest.raises(RuntimeError, match="expected"):
        ptx_pool.to_ptx("this is not LLVM IR", "sm_90a", _features())
    (pid,) = _pids()
    ptx_pool.to_ptx(_llvm_ir(7), "sm_90a", _features())
    assert _pids() == {pid}


def test_threads_compile_side_by_side(fresh_pool):
    texts = [_llvm_ir(n) for n in (11, 12, 13, 14)]
    want = [ptx_worker.compile_ptx(t, "sm_90a", _features()) for t in texts]
    got = [None] * len(texts)

    def work(i):
        got[i] = ptx_pool.to_ptx(texts[i], "sm_90a", _features())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_a_worker_that_dies_after_it_was_taken_is_replaced(fresh_pool):
    """The kill lands between `_take` seeing the worker alive and the compile using it
    (under load, SIGKILL is not instant): the compile goes to a fresh worker."""
    ptx_pool.to_ptx(_llvm_ir(8), "sm_90a", _features())
    (worker,) = ptx_pool._idle
    worker.process.kill()
    worker.process.wait()
    worker.process.poll = lambda: None        # still looks alive to `_take`
    assert "plait_rows" in ptx_pool.to_ptx(_llvm_ir(9), "sm_90a", _features())
    assert worker not in ptx_pool._idle
