"""The tuner's winner as a schedule file, its provenance in comments, reviewable in a diff.

    # plait tune: matmul on NVIDIA H200 (sm_90a), driver 580.159, 2026-12-03
    # shapes M=4096 N=4095 K=4096, dtypes a=bf16 b=bf16
    # best 0.871 ms; runner-up 0.884 ms {...}; default 0.902 ms; 37 tried, 11 refused
    algorithm: matmul
    contraction: {...}

Tuned over several shapes (`write_shapes_schedule`), each shape's figure, its own best
and what it gives up are listed instead. A file that exists is never overwritten without
`force`.
"""
from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from plait.dsl.errors import PlaitError


def provenance(result, device: str, dtypes: dict) -> list[str]:
    ranked = result.ranked
    best = ranked[0]
    tried = sum(1 for t in result.trials if t.ms is not None)
    refused = len(result.trials) - tried
    lines = [f"plait tune: {result.algorithm} on {device} ({result.target}), "
             f"{datetime.date.today()}",
             "shapes " + " ".join(f"{a}={n}" for a, n in result.sizes.items())
             + ", dtypes " + " ".join(f"{k}={v}" for k, v in dtypes.items()),
             f"best {best.ms:.4f} ms (max_rel_err {best.rel_err:.2g})"]
    if len(ranked) > 1:
        lines.append(f"runner-up {ranked[1].ms:.4f} ms: {_flow(ranked[1].keys)}")
    if result.default_ms is not None:
        lines.append(f"default schedule {result.default_ms:.4f} ms")
    lines.append(f"{tried} timed, {refused} refused, failed or not tried")
    return lines


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()


def target_path(folder: Path, algorithm: str, target: str, force: bool) -> Path:
    """Where the schedule goes; an existing file is refused unless `force` (checked before
    any tuning, so that no budget is spent on a result that cannot be written)."""
    path = Path(folder) / target / f"{algorithm}.yaml"
    if path.exists() and not force:
        raise PlaitError(f"{path} exists; plait tune never overwrites a schedule without "
                         "--force")
    return path


def write_schedule(folder: Path, result, device: str, dtypes: dict, force: bool = False) -> Path:
    """`folder/<arch>/<algorithm>.yaml` holding the best trial's keys (`contraction:`,
    or the streamed kernels' `kernels:`)."""
    if result.best is None:
        raise PlaitError(f"plait tune: no candidate for {result.algorithm} was both correct "
                         "and timed; nothing to write")
    path = target_path(folder, result.algorithm, result.target, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"algorithm": result.algorithm, **result.best.keys}
    text = "".join(f"# {line}\n" for line in provenance(result, device, dtypes))
    text += yaml.safe_dump(body, sort_keys=False)
    path.write_text(text)
    return path


def write_shapes_schedule(folder: Path, sr, device: str, dtypes: dict,
                          force: bool = False) -> Path:
    """The schedule chosen over several shapes (`tune_shapes.py`), with each shape's time,
    its own best and what it gives up, in comments."""
    path = target_path(folder, sr.algorithm, sr.target, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"plait tune: {sr.algorithm} on {device} ({sr.target}), {datetime.date.today()}, "
             f"one schedule for {len(sr.costs)} shapes (the least geometric-mean loss)",
             "dtypes " + " ".join(f"{k}={v}" for k, v in dtypes.items())]
    for c in sr.costs:
        shape = " ".join(f"{a}={n}" for a, n in c.sizes.items())
        default = f", default {c.default_ms:.4f} ms" if c.default_ms is not None else ""
        lines.append(f"shape {shape}: {c.chosen_ms:.4f} ms, its own best {c.best_ms:.4f} ms "
                     f"({100 * c.sacrifice:.1f}% slower){default}")
    text = "".join(f"# {line}\n" for line in lines)
    text += yaml.safe_dump({"algorithm": sr.algorithm, **sr.keys}, sort_keys=False)
    path.write_text(text)
    return path
