"""The dtype policy as lowering applies it (and as the reference mirrors it).

Defaults, documented in the README: storage is what the arrays are; compute
and accumulate are fp32. A compute dtype narrower than fp32 (bf16, fp16) means
every arithmetic result is rounded to it, exactly as the reference does with
`rounding_for`; the registers still hold fp32 because no GPU does fp8/bf16
scalar arithmetic faster in a memory-bound kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.node import Node
from plait.schedule.model import DTypePolicy


@dataclass(frozen=True)
class ResolvedPolicy:
    compute: DType
    accumulate: DType
    storage: tuple[tuple[str, DType], ...]

    def storage_of(self, name: str, logical: DType) -> DType:
        table = dict(self.storage)
        return table.get(name, table.get("default", logical))

    def compute_of(self, node: Node) -> DType:
        """The dtype a node's value is rounded to in registers."""
        if not node.dtype.is_float:
            return node.dtype
        if node.op == "cast":
            return node.dtype if node.dtype.bits < self.compute.bits else self.compute
        if node.op in ("sum",):
            return self.accumulate if self.accumulate.bits >= self.compute.bits else self.compute
        return self.compute


def resolve(policy: DTypePolicy | None) -> ResolvedPolicy:
    policy = policy or DTypePolicy()
    compute = policy.compute or DType.FP32
    accumulate = policy.accumulate or DType.FP32
    for what, d in (("compute", compute), ("accumulate", accumulate)):
        if not d.is_float or d.bits == 8:
            raise PlaitError(f"dtype policy: {what} must be fp32, bf16 or fp16, not {d}")
    return ResolvedPolicy(compute, accumulate, policy.storage)


def rounding_for(policy: ResolvedPolicy):
    """A `rounding` function for plait.dsl.evaluate that mirrors the kernels."""
    def rounding(node: Node):
        if node.op in ("input", "param", "size", "const"):
            return node.dtype if node.op == "input" else None
        return policy.compute_of(node)
    return rounding
