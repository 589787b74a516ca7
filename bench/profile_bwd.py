"""Run one derived backward once, for a profiler (ncu) to look at its kernels, or
time it (--time, GB/s counted as bench/backward.py counts them).

    ncu --section SpeedOfLight --section WarpStateStats -k regex:layernorm_bwd \\
        python bench/profile_bwd.py layernorm '{grid: {M: 125}, prefetch: 2}'
"""
import os
import sys

import torch
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.schedule import Schedule  # noqa: E402


def main():
    name = sys.argv[1]
    algo = getattr(__import__(name), name)
    g = grad(algo)
    sched = None
    if len(sys.argv) > 2 and sys.argv[2] and not sys.argv[2].startswith("--"):
        d = {"algorithm": g.name, "block": {"N": {"threads": 256, "vector": 8}}}
        d.update(yaml.safe_load(sys.argv[2]))
        sched = Schedule.from_dict(d)
    M, N = 16384, 8192
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    ins = (x, w) if name == "rmsnorm" else (x, w, torch.randn_like(w))
    dy = torch.randn_like(x)
    for _ in range(2):
        plait.run(g, *ins, dout=dy, schedule=sched)
    torch.cuda.synchronize()
    if "--time" in sys.argv:
        sys.path.insert(0, HERE)
        from timing import graph_ms
        nbytes = 3 * M * N * 2 + (len(ins) + 1) * N * 2
        ms = graph_ms(lambda: plait.run(g, *ins, dout=dy, schedule=sched))
        print(f"{name} {sched.to_dict() if sched else 'shipped schedule'}: "
              f"{nbytes / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
