"""A failing case written out so that anyone can run it again: DSL source, shapes,
dtypes, schedule YAML, the structure and the seed of its inputs."""
from __future__ import annotations

from plait.autodiff import to_source
from plait.schedule import Schedule

from programs import build


def reproducer(case, kind: str) -> str:
    algo = build(case.structure, "repro")
    try:
        source = to_source(algo.graph(case.dtypes()))
    except Exception as e:           # a program plait cannot trace or print: say so
        source = f"# (no DSL source: {type(e).__name__}: {e})\n"
    lines = [source.rstrip(), f"# sizes: {case.sizes}",
             f"# dtypes: {({k: v.short for k, v in case.dtypes().items()})}",
             f"# inputs: draws.make_inputs(case) with seed {case.seed}"]
    if kind == "gradient":
        lines.append("# checked: plait.autodiff.grad(repro) (cotangents seeded seed + 1)")
    if case.schedule is not None:
        yaml = Schedule.from_dict({"algorithm": "repro", **case.schedule}).to_yaml()
        lines.append("# schedule:\n" + "\n".join("#   " + ln for ln in yaml.splitlines()))
    lines.append(f"# structure: {case.structure!r}")
    return "\n".join(lines)
