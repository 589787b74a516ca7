"""How a contraction (`sum(A * B, over="K")`) maps onto tensor cores: the `contraction:` key.

    contraction:
      tile: {M: 128, N: 256, K: 64}   # block tile per axis, by the algorithm's axis names
      stages: 4                        # shared-memory pipeline depth (TMA or cp.async)
      warpgroups: 2                    # consumer warpgroups (sm_90a; a producer one is added)
      raster: 8                        # grouped rasterization: 8 row-blocks walked together
      instruction: wgmma               # wgmma | mma_sync; chosen by the target when absent
      persistent: true                 # one block per SM walks the tiles (wgmma)
      split_k: 4                       # K cut in 4 ranges summed by a finish kernel;
                                       # chosen for few tiles over a long K when absent

Which axis plays M, N or K is found in the algorithm (the recognizer names
the roles); the tile is given by name so that a schedule reads like the math.
What the target's instruction cannot take is refused by the lowering, with the
reason, before any code is generated.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

INSTRUCTIONS = ("wgmma", "mma_sync")
# The values a schedule may give (what the target takes is the lowering's check).
# Tensor-core tiles are at most 256 along M and N; K tiles a few swizzle rows.
RANGES = {"tile": (1, 1024), "stages": (1, 16), "warpgroups": (1, 4), "raster": (1, 64),
          "split_k": (1, 256)}
KEYS = ("tile", "stages", "warpgroups", "raster", "instruction", "persistent", "split_k",
        "tf32")


@dataclass(frozen=True)
class ContractionSchedule:
    tile: tuple[tuple[str, int], ...] = ()
    stages: int | None = None
    warpgroups: int | None = None
    raster: int | None = None
    instruction: str | None = None
    persistent: bool | None = None
    split_k: int | None = None
    tf32: bool = False         # fp32 operands may run as tf32 (10-bit mantissa products)

    @property
    def tiles(self) -> dict[str, int]:
        return dict(self.tile)

    def to_dict(self) -> dict:
        out: dict = {}
        if self.tile:
            out["tile"] = dict(self.tile)
        for key in ("stages", "warpgroups", "raster", "instruction", "persistent", "split_k"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.tf32:
            out["tf32"] = True
        return out

    @staticmethod
    def from_dict(d: Mapping | None) -> "ContractionSchedule | None":
        if d is None:
            return None

        def opt_int(key):
            return None if d.get(key) is None else int(d[key])
        return ContractionSchedule(
            tile=tuple((k, int(v)) for k, v in (d.get("tile") or {}).items()),
            stages=opt_int("stages"), warpgroups=opt_int("warpgroups"),
            raster=opt_int("raster"), instruction=d.get("instruction"),
            split_k=opt_int("split_k"),
            persistent=None if d.get("persistent") is None else bool(d["persistent"]),
            tf32=bool(d.get("tf32", False)))

    def merged(self, override: "ContractionSchedule | None") -> "ContractionSchedule":
        if override is None:
            return self
        return ContractionSchedule(
            tile=override.tile or self.tile,
            **{k: getattr(override, k) if getattr(override, k) is not None else getattr(self, k)
               for k in ("stages", "warpgroups", "raster", "instruction", "persistent",
                         "split_k")},
            tf32=self.tf32 or override.tf32)


def check_contraction(p, path: str, d) -> None:
    """Key names and value types of a `contraction:` mapping (schema only; the lowering
    checks what the target can do)."""
    from .schema import _int, _keys, _kind, _mapping
    if not _mapping(p, path, d):
        return
    _keys(p, path, d, KEYS)
    tile = d.get("tile")
    if _mapping(p, f"{path}.tile", tile):
        for axis, size in tile.items():
            if not isinstance(axis, str):
                p.add(f"{path}.tile.{axis}", f"an axis name must be a string, not {_kind(axis)}")
            if _int(p, f"{path}.tile.{axis}", size) and size < 1:
                p.add(f"{path}.tile.{axis}", f"a tile is at least 1, not {size}")
    for key in ("stages", "warpgroups", "raster", "split_k"):
        if d.get(key) is not None and _int(p, f"{path}.{key}", d[key]) and d[key] < 1:
            p.add(f"{path}.{key}", f"{key} is at least 1, not {d[key]}")
    inst = d.get("instruction")
    if inst is not None and inst not in INSTRUCTIONS:
        p.unknown(f"{path}.instruction", inst, INSTRUCTIONS, "instruction")
    for key in ("tf32", "persistent"):
        if d.get(key) is not None and not isinstance(d[key], bool):
            p.add(f"{path}.{key}", f"must be true or false, not {_kind(d[key])}")


def check_contraction_values(p, path: str, cs: ContractionSchedule) -> None:
    """Every integer of a contraction schedule within RANGES."""
    from .errors import in_range
    lo, hi = RANGES["tile"]
    for axis, size in cs.tile:
        in_range(p, f"{path}.tile.{axis}", size, lo, hi, "a contraction tile")
    for key in ("stages", "warpgroups", "raster", "split_k"):
        if getattr(cs, key) is not None:
            in_range(p, f"{path}.{key}", getattr(cs, key), *RANGES[key], key)
