"""What a kernel name is: the one definition the kernel graph names kernels by and a
schedule's `kernels:` keys are read against.

A kernel is named `<algorithm>` (the only kernel) or `<algorithm>.<part>` (one of
several: an output, a staged temporary), followed by the stages a split reduction adds
after it, any number deep: `<kernel>.finish` completes the reduction over the blocks'
partial rows (`.finish1`, `.finish2`, ... where the totals of one split lie over different
axes: each set of axes is a kernel of its own), `<kernel>.then` computes what follows it
over the whole iteration space again. A key may drop the `<algorithm>.` head ('dx' for
'layernorm.bwd.dx').

    >>> kernel_name("layernorm.bwd", "dx"), stage("f.then", FINISH), stage("f", FINISH, 2)
    ('layernorm.bwd.dx', 'f.then.finish', 'f.finish2')
    >>> base_of("f.then.finish"), base_of("f.finish1.then")
    ('f', 'f')
    >>> names_key("then.finish", "f", ["f"]), names_key("finsh", "f", ["f"])
    (True, False)
"""
from __future__ import annotations

from collections.abc import Iterable

FINISH, THEN = "finish", "then"
STAGES = (FINISH, THEN)


def kernel_name(algorithm: str, part: str | None = None) -> str:
    """The kernel of `part` of the algorithm, or the algorithm's only kernel."""
    return algorithm if part is None else f"{algorithm}.{part}"


def stage(kernel: str, which: str, index: int = 0) -> str:
    """The kernel a split reduction of `kernel` adds (`which` is FINISH or THEN); `index`
    numbers the finishes of totals over different axes after the first."""
    assert which in STAGES, which
    return f"{kernel}.{which}{index or ''}"


def _is_stage(part: str) -> bool:
    return part.rstrip("0123456789") in STAGES


def base_of(name: str) -> str:
    """`name` without the stages a split added ('f.then.finish' -> 'f')."""
    head, dot, last = name.rpartition(".")
    while dot and _is_stage(last):
        name = head
        head, dot, last = name.rpartition(".")
    return name


def full_name(key: str, algorithm: str) -> str:
    """A `kernels:` key as a full kernel name ('dx' -> 'layernorm.bwd.dx')."""
    return key if key == algorithm or key.startswith(algorithm + ".") else \
        kernel_name(algorithm, key)


def short_name(name: str, algorithm: str) -> str:
    """A kernel's name without the `<algorithm>.` head, as a key may write it."""
    return name[len(algorithm) + 1:] if name.startswith(algorithm + ".") else name


def key_candidates(name: str, algorithm: str) -> tuple[str, ...]:
    """The keys that schedule kernel `name`, the full one first."""
    short = short_name(name, algorithm)
    return (name,) if short == name else (name, short)


def names_key(key: str, algorithm: str, kernels: Iterable[str]) -> bool:
    """Whether `kernels:` key `key` names a kernel: one of `kernels` (the kernels the
    algorithm was cut into) or a stage of one. Stages count at sizes where the reduction
    is not split: a name plait printed at one size stays a valid key at every other."""
    bases = {base_of(n) for n in kernels}
    return any(base_of(candidate) in bases for candidate in (key, full_name(key, algorithm)))
