"""Differential fuzzing of plait: random programs x schedules x storage orders x odd shapes.

    python tools/fuzz.py --cases 10000 --workers 16 --kind all --seed 0

Case i is drawn from seed `--seed + i` by the grammar of tests/property (programs.py,
draws.py) and checked as checks.py says: `forward` runs the CPU executor against the
float64 reference and the reference against an independent torch float64
interpretation; `grad` checks plait.autodiff.grad against torch autograd and runs the
gradient program on the CPU executor; `all` does both per case; `tc` draws programs that
lower to tensor-core kernels (GEMM epilogues, attention score modifiers: tc_programs.py)
and runs their forward check, `tc-grad` their gradients' (tc_checks.py). Every program the
executor runs is also compiled for sm_80 and sm_90a and assembled by ptxas (the wrapper
tests/conftest.py installs). Each case runs in a worker process under a time limit (a
case past it is a hang; the worker is replaced) and a memory limit. Every failure prints
its seed and a reproducer; `--replay SEED` runs one case again in this process.
"""
from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import resource
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
KINDS = ("forward", "grad", "all", "tc", "tc-grad")


def setup() -> None:
    """The property grammar on the path, and emulate wrapped to compile and assemble."""
    sys.path[:0] = [os.path.join(TESTS, "property"), TESTS]
    spec = importlib.util.spec_from_file_location("plait_tests_conftest",
                                                  os.path.join(TESTS, "conftest.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def draw_case(strategy, seed: int):
    """The case hypothesis draws for `seed` (the same on every machine and run)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    got = []

    # The first example hypothesis tries is the simplest one; the second is the seed's.
    @seeded(seed)
    @settings(max_examples=2, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def capture(case):
        got.append(case)
    capture()
    return got[-1]


def run_case(kind: str, seed: int) -> tuple[str, str]:
    """(status, report): status ok | skip | wrong | crash."""
    import checks
    import draws
    from repro import reproducer
    if kind in ("tc", "tc-grad"):
        return _run_tc_case(seed, kind == "tc-grad")
    parts = ("forward", "grad") if kind == "all" else (kind,)
    status, report = "ok", []
    for part in parts:
        case = draw_case(draws.cases(grad=part == "grad"), seed)
        label = "gradient" if part == "grad" else "forward"
        try:
            if part == "grad":
                problems = checks.gradients(case)
            else:
                problems = checks.forward(case) + [f"reference vs torch: {p}"
                                                   for p in checks.against_torch(case)]
        except checks.NotATestCase:
            status = "skip" if status == "ok" else status
            continue
        except Exception:
            status = "crash"
            report.append(f"{label} crash:\n{traceback.format_exc(limit=-8)}"
                          f"{reproducer(case, label)}")
            continue
        if problems:
            status = "crash" if status == "crash" else "wrong"
            report.append(f"{label} wrong:\n  " + "\n  ".join(problems) + "\n"
                          + reproducer(case, label))
    return status, "\n".join(report)


def _run_tc_case(seed: int, gradient: bool) -> tuple[str, str]:
    """A tensor-core program (tests/property/tc_programs.py): its forward or gradient check."""
    import checks
    import tc_checks
    from tc_programs import tc_cases
    case = draw_case(tc_cases(grad=gradient), seed)
    try:
        problems = (tc_checks.gradients if gradient else tc_checks.forward)(case)
    except checks.NotATestCase:
        return "skip", ""
    except Exception:
        return "crash", (f"tensor-core crash:\n{traceback.format_exc(limit=-8)}"
                         f"{tc_checks.reproducer(case)}")
    if problems:
        return "wrong", ("tensor-core wrong:\n  " + "\n  ".join(problems) + "\n"
                         + tc_checks.reproducer(case))
    return "ok", ""


def worker(conn, kind: str, memory_gb: float) -> None:
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    setup()
    import warnings
    warnings.simplefilter("ignore")
    while True:
        seed = conn.recv()
        if seed is None:
            return
        conn.send(run_case(kind, seed))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--kind", choices=KINDS, default="all")
    ap.add_argument("--seed", type=int, default=0, help="case i uses seed SEED + i")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a case hangs")
    ap.add_argument("--seconds", type=float, default=None,
                    help="send no new case after this many seconds (the summary says how many ran)")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address space per worker")
    ap.add_argument("--replay", type=int, help="run the case of this seed here and print it")
    args = ap.parse_args(argv)
    if args.cases < 0 or args.workers < 1 or args.seed < 0 or args.timeout <= 0:
        ap.error("--cases, --seed >= 0; --workers >= 1; --timeout > 0")
    setup()
    from plait.runtime.ptxas import find_ptxas
    if find_ptxas() is None:
        print("fuzz: no ptxas on PATH (or from the nvidia-cuda-nvcc wheel)", file=sys.stderr)
        return 2
    if args.replay is not None:
        status, report = run_case(args.kind, args.replay)
        print(f"seed {args.replay}: {status}\n{report}")
        return 0 if status in ("ok", "skip") else 1
    return Pool(args).run()


class Pool:
    """Workers fed one seed at a time through their own pipe, so that a hung or dead one
    is replaced without disturbing the others."""

    def __init__(self, args):
        self.args = args
        self.ctx = mp.get_context("spawn")
        self.counts = {"ok": 0, "skip": 0, "wrong": 0, "crash": 0, "hang": 0}
        self.busy = {}    # connection -> (process, seed, start time)
        self.idle = []

    def spawn(self):
        mine, theirs = self.ctx.Pipe()
        p = self.ctx.Process(target=worker, args=(theirs, self.args.kind,
                                                  self.args.memory_gb), daemon=True)
        p.start()
        theirs.close()
        self.idle.append((mine, p))

    def record(self, seed, status, report):
        self.counts[status] += 1
        if status not in ("ok", "skip"):
            print(f"=== seed {seed}: {status} (rerun: python tools/fuzz.py --kind "
                  f"{self.args.kind} --replay {seed})\n{report}\n", flush=True)

    def run(self) -> int:
        a = self.args
        start = time.time()
        self.sent = 0
        for _ in range(min(a.workers, a.cases)):
            self.spawn()
        # A timeout's SIGTERM still prints the summary of the cases that finished.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self.loop(iter(range(a.seed, a.seed + a.cases)), start)
        except KeyboardInterrupt:
            print(f"fuzz: stopped by a signal; {len(self.busy)} cases unfinished", flush=True)
            for p, _, _ in self.busy.values():
                p.kill()
            self.busy.clear()
        for conn, p in self.idle:
            conn.send(None)
            p.join(timeout=10)
        c = self.counts
        print(f"({c['ok']} agreed, {c['skip']} no test case: an answer out of its dtype's "
              "range, or a NaN output under a gradient)")
        print(f"fuzz: {self.done} cases (seeds {a.seed}..{a.seed + self.sent - 1}, kind {a.kind}), "
              f"{c['wrong']} wrong, {c['crash']} crashes, {c['hang']} hangs in "
              f"{time.time() - start:.0f} s")
        return 0 if c["wrong"] + c["crash"] + c["hang"] == 0 else 1

    def loop(self, seeds, start):
        a = self.args
        pending = True
        self.done = 0
        while self.busy or (pending and self.idle):
            while pending and self.idle:
                late = a.seconds is not None and time.time() - start > a.seconds
                seed = None if late else next(seeds, None)
                if seed is None:
                    pending = False
                    break
                conn, p = self.idle.pop()
                conn.send(seed)
                self.sent += 1
                self.busy[conn] = (p, seed, time.time())
            for conn in wait(list(self.busy), timeout=1.0):
                p, seed, _ = self.busy.pop(conn)
                try:
                    status, report = conn.recv()
                    self.idle.append((conn, p))
                except (EOFError, OSError):   # the worker died (signal, out of memory)
                    status, report = "crash", f"worker exited with code {p.exitcode}"
                    p.join()
                    self.spawn()
                self.record(seed, status, report)
                self.done += 1
                if self.done % max(1, a.cases // 20) == 0:
                    print(f"fuzz: {self.done}/{a.cases} cases, {time.time() - start:.0f} s",
                          file=sys.stderr, flush=True)
            now = time.time()
            for conn, (p, seed, began) in list(self.busy.items()):
                if now - began > a.timeout:
                    del self.busy[conn]
                    p.kill()        # the worker this pool started for this case
                    p.join()
                    self.record(seed, "hang", f"no result after {a.timeout:.0f} s")
                    self.done += 1
                    self.spawn()


def _interrupt(signum, frame):
    # Ignore any further one first: `timeout` passes on a second, which arriving inside the
    # cleanup of the first would lose the summary.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
