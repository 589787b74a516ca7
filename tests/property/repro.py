"""A failing case written out so that anyone can run it again: DSL source, shapes,
dtypes, schedule YAML, the structure and the seed of its inputs."""
from __future__ import annotations

from plait.autodiff import to_source
from plait.schedule import Schedule

from programs import build


def source_of(algo, dtypes) -> str:
    """The DSL source of `algo` at `dtypes`, or a comment saying why there is none."""
    try:
        return to_source(algo.graph(dtypes)).rstrip()
    except Exception as e:           # a program plait cannot trace or print: say so
        return f"# (no DSL source: {type(e).__name__}: {e})"


def reproducer(case, kind: str) -> str:
    lines = [source_of(build(case.structure, "repro"), case.dtypes()), f"# sizes: {case.sizes}",
             f"# dtypes: {({k: v.short for k, v in case.dtypes().items()})}",
             f"# inputs: draws.make_inputs(case) with seed {case.seed}"]
    if kind == "gradient":
        lines.append("# checked: plait.autodiff.grad(repro) (cotangents seeded seed + 1)")
    if case.schedule is not None:
        yaml = Schedule.from_dict({"algorithm": "repro", **case.schedule}).to_yaml()
        lines.append("# schedule:\n" + "\n".join("#   " + ln for ln in yaml.splitlines()))
    lines.append(f"# structure: {case.structure!r}")
    return "\n".join(lines)
