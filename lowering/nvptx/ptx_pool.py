"""Child processes that turn LLVM IR into PTX (`ptx_worker`), each retired after
KERNELS_PER_WORKER kernels, so that what llvmlite leaks per compile leaves with it and
a process that compiles without end (a tuning run, torch.compile) stays bounded.

A worker is taken per compile and given back after, so threads compile side by side,
each in its own worker. Where no child can be started, compiles run in this process.
"""
from __future__ import annotations

import atexit
import builtins
import os
import subprocess
import sys
import threading
import warnings

from . import ptx_worker

KERNELS_PER_WORKER = 200      # at about 90 KB leaked per kernel: under 20 MB per worker

# Run the worker file by path, with llvmlite's folder on sys.path in place of the current
# directory (nothing there may shadow a module it imports).
_BOOT = ("import sys; sys.path[0] = sys.argv[2]; import runpy; "
         "runpy.run_path(sys.argv[1], run_name='__main__')")


class WorkerDied(RuntimeError):
    pass


class _Worker:
    def __init__(self):
        import llvmlite
        site = os.path.dirname(os.path.dirname(os.path.abspath(llvmlite.__file__)))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, os.path.abspath(ptx_worker.__file__), site],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.owner = os.getpid()
        self.served = 0
        self.pending = False          # a request sent whose reply is not read yet

    def compile(self, llvm_ir: str, cpu: str, features: str) -> str:
        self.pending = True
        try:
            for text in (llvm_ir, cpu, features):
                ptx_worker.write_string(self.process.stdin, text)
            self.process.stdin.flush()
            status = self.process.stdout.read(1)
            text = ptx_worker.read_string(self.process.stdout)
        except OSError:
            status, text = b"", None
        if status not in (b"\0", b"\1") or text is None:
            self.close()
            raise WorkerDied(f"the PTX code generator (a child process) exited with status "
                             f"{self.process.returncode} while compiling for {cpu}")
        self.pending = False
        self.served += 1
        if status == b"\1":
            raise _error(text)
        return text

    def reusable(self) -> bool:
        return (not self.pending and self.served < KERNELS_PER_WORKER
                and self.owner == os.getpid() and self.process.poll() is None)

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)     # it leaves at the end of its input
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _error(text: str) -> Exception:
    """The worker's exception again: a builtin type by name, else a RuntimeError."""
    name, _, message = text.partition(": ")
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(message)
    return RuntimeError(text)


_idle: list[_Worker] = []
_lock = threading.Lock()
_in_process = False           # set once starting a child has failed


def to_ptx(llvm_ir: str, cpu: str, features: str) -> str:
    worker = _take()
    if worker is None:
        return ptx_worker.compile_ptx(llvm_ir, cpu, features)
    fresh = worker.served == 0
    try:
        return worker.compile(llvm_ir, cpu, features)
    except WorkerDied:
        # An idle worker may die (killed, out of memory) after `_take` saw it alive: try
        # once more on a fresh one. A fresh worker dying is the compile's own failure.
        if fresh:
            raise
    finally:
        _give_back(worker)
    return to_ptx(llvm_ir, cpu, features)


def _take() -> _Worker | None:
    global _in_process
    with _lock:
        while _idle:
            worker = _idle.pop()
            if worker.process.poll() is None:
                return worker
            worker.close()            # it died while idle (killed): start another
        if _in_process:
            return None
    try:
        return _Worker()
    except OSError as error:
        _in_process = True
        warnings.warn(f"plait: cannot start a PTX code generator process ({error}); "
                      "compiling in this process, which grows by about 90 KB a kernel",
                      RuntimeWarning, stacklevel=3)
        return None


def _give_back(worker: _Worker) -> None:
    if worker.reusable():
        with _lock:
            _idle.append(worker)
    elif worker.owner == os.getpid():
        worker.close()


def shutdown() -> None:
    """Stop the idle workers (the next compile starts a fresh one)."""
    with _lock:
        workers = list(_idle)
        _idle.clear()
    for worker in workers:
        worker.close()


def _after_fork() -> None:
    # The workers (and a lock held at the fork) belong to the parent.
    global _lock
    _lock = threading.Lock()
    _idle.clear()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_after_fork)
