"""One schedule for several shapes: `plait tune FILE --shape A --shape B ...`.

A schedule file holds one schedule per algorithm and target, so over several shapes the
tuner picks the candidate that loses least across them. Each shape is tuned as `tune`
does (with its share of the budget); among the candidates correct and timed at every
shape, the one with the lowest geometric mean of (its time / that shape's best time)
wins, and the file's provenance says what each shape gives up for it:

    # shape M=4096 N=4096 K=4096: 0.2010 ms, its own best 0.1980 ms (1.5% slower)

A candidate refused or wrong at one shape is never chosen; if none is timed at every
shape, nothing is chosen and the error says which shape kept each out.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from plait.dsl.errors import PlaitError

from .tune import TuneResult, tune


@dataclass
class ShapeCost:
    sizes: dict
    chosen_ms: float
    best_ms: float
    default_ms: float | None

    @property
    def sacrifice(self) -> float:
        """How much slower than this shape's own best the chosen schedule is (0.015: 1.5%)."""
        return self.chosen_ms / self.best_ms - 1.0


@dataclass
class ShapesResult:
    algorithm: str
    target: str
    results: list[TuneResult]
    keys: dict | None = None             # the chosen schedule's top-level keys
    costs: list[ShapeCost] = field(default_factory=list)


def key_of(keys: dict) -> str:
    """A schedule's top-level keys as one comparable string."""
    return json.dumps(keys, sort_keys=True)


def choose(results: list[TuneResult]) -> tuple[dict, list[ShapeCost]]:
    """The keys timed at every shape with the lowest geometric mean of time over each
    shape's best, and what each shape pays for it."""
    timed = [{key_of(t.keys): t for t in r.trials if t.ms is not None} for r in results]
    for r, by_key in zip(results, timed):
        if not by_key:
            raise PlaitError(f"plait tune: no candidate for {r.algorithm} was correct and "
                             f"timed at {_shape(r.sizes)}")
    common = set(timed[0]).intersection(*timed[1:])
    if not common:
        raise PlaitError(f"plait tune: no candidate for {results[0].algorithm} was correct "
                         "and timed at every shape (" + "; ".join(
                             f"{_shape(r.sizes)}: {len(t)} timed" for r, t in zip(results, timed))
                         + "); tune them one at a time")
    best = [min(t.ms for t in by_key.values()) for by_key in timed]

    def loss(key: str) -> float:
        return math.fsum(math.log(by_key[key].ms / b) for by_key, b in zip(timed, best))
    chosen = min(sorted(common), key=loss)
    costs = [ShapeCost(dict(r.sizes), by_key[chosen].ms, b, r.default_ms)
             for r, by_key, b in zip(results, timed, best)]
    return json.loads(chosen), costs


def tune_shapes(algo, shapes: list[dict], dtypes: dict, target: str, runner, timer,
                budget_s: float = 60.0, search=tune, **kwargs) -> ShapesResult:
    """`search` (`tune`, or one that files and recalls its results) at each shape (budget
    shared evenly), then `choose`."""
    if not shapes:
        raise PlaitError("plait tune: no shape given")
    results = [search(algo, sizes, dtypes, target, runner, timer, budget_s / len(shapes),
                    **kwargs) for sizes in shapes]
    keys, costs = choose(results)
    return ShapesResult(algo.name, target, results, keys, costs)


def _shape(sizes: dict) -> str:
    return " ".join(f"{a}={n}" for a, n in sizes.items())
