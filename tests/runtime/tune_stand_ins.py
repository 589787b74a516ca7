"""Stand-ins for the device in tuning tests: the CPU executor runs each candidate (so
the check against float64 is real) and a timer gives a deterministic "time" (timing
belongs to the GPU). Top-level and picklable: spawned tuning workers build them too."""
import os
import signal
import time

import plait

CALLS_ENV = "PLAIT_TEST_TIMER_CALLS"     # a file each timer call appends a line to


def stand_in_ms(schedule) -> float:
    """Smaller tiles 'faster', persistent a little faster, mma_sync slower; default 9."""
    if schedule is None:
        return 9.0
    c = schedule.to_dict()["contraction"]
    return c["tile"]["M"] * c["tile"]["N"] / 1e4 - 0.1 * bool(c.get("persistent")) \
        + (1.0 if c["instruction"] == "mma_sync" else 0.0)


class CpuPair:
    """make(algo, graph, target) -> (runner, timer). `sleep_s`: each timing sleeps (a
    stand-in for GPU time); `kill_marker`: the first worker to reach a candidate's timing
    creates this file and kills itself with SIGKILL (only one worker ever does)."""

    def __init__(self, sleep_s: float = 0.0, kill_marker: str | None = None):
        self.sleep_s, self.kill_marker = sleep_s, kill_marker

    def __call__(self, algo, graph, target):
        names = list(graph.outputs)

        def runner(schedule, inputs):
            out = plait.run(algo, schedule=schedule, device="cpu", target=target, **inputs)
            return out if isinstance(out, dict) else {names[0]: out}

        def timer(schedule, inputs):
            if schedule is not None and self.kill_marker:
                try:
                    os.close(os.open(self.kill_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    os.kill(os.getpid(), signal.SIGKILL)
                except FileExistsError:
                    pass
            log = os.environ.get(CALLS_ENV)
            if log:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()}\n")
            time.sleep(self.sleep_s)
            return stand_in_ms(schedule)
        return runner, timer


def timer_calls(path) -> list[int]:
    """The pids of the timer calls logged so far."""
    return [int(line) for line in open(path)] if os.path.exists(path) else []


class NumpyMatmulPair(CpuPair):
    """A cheaper stand-in for matmul alone: numpy computes the product (so the check still
    runs) and the timer sleeps; for tests of speed-up, where CPU-bound runs on a shared
    machine would not scale."""

    def __call__(self, algo, graph, target):
        import numpy as np
        _, timer = super().__call__(algo, graph, target)

        def runner(schedule, inputs):
            return {"out": np.asarray(inputs["a"], np.float64) @ np.asarray(inputs["b"],
                                                                            np.float64)}
        return runner, timer
