"""Kernel parameters packed once per (kernel, sizes, scalars): what a hot launch reuses.

cuLaunchKernel takes an array of pointers, one per parameter, each pointing at the
parameter's value. `PackedArgs` builds that array and a ctypes holder per value once;
a launch passes its address. A buffer parameter points into the program's buffer array
(`buffer_array`, one address per buffer, shared by all its kernels), so a call writes
each address once, whatever the number of kernels reading it; a tensor map (a TMA
descriptor, runtime/tensormap.py) is encoded again only when the address it describes
changed (`refresh_maps`). Sizes are fixed when the holders are made; scalars are
rewritten only when a call gives a different value.

Everything here is plain ctypes: it is built and checked without a GPU (the tests read
the packed values back and compare them with `binding.kernel_arguments`).
"""
from __future__ import annotations

import ctypes

from plait.dsl.errors import PlaitError

from . import binding
from .tensormap import TensorMapParam


_SLOT = ctypes.sizeof(ctypes.c_void_p)


def buffer_array(n: int):
    """The addresses of a program's `n` buffers, indexed by slot (Program.buffers' order)."""
    return (ctypes.c_void_p * max(n, 1))()


def _tensor_map(ptr, dtype, shape, box, kernel):
    from .tensormap import tensor_map   # the driver encodes it: only on a GPU
    return tensor_map(ptr, dtype, shape, box, kernel)


class PackedArgs:
    """The parameter array of one kernel. `slots` maps buffer names to positions in
    `buffers` (the program's buffer array, `buffer_array`; by default one of its own)."""

    def __init__(self, kernel, sizes: dict[str, int], scalars: dict[str, float],
                 slots: dict[str, int], buffers=None):
        self.kernel = kernel
        n = len(kernel.args)
        self.buffers = buffer_array(max(slots.values(), default=0) + 1) \
            if buffers is None else buffers
        self.params = (ctypes.c_void_p * max(n, 1))()
        self.address = ctypes.addressof(self.params)
        self.holders: list = []
        self.slots: list[int] = []   # the buffer slots this kernel reads, for set_pointers
        self.maps: list[list] = []   # [param index, buffer slot, dtype, shape, box, ptr, map]
        self.scalars: dict[str, tuple[int, object]] = {}          # name -> (index, value)
        for i, arg in enumerate(kernel.args):
            if arg.kind == "buffer":
                slot = self._slot(slots, arg.name)
                # a view of the buffer array's slot: what the parameter points at
                holder = ctypes.c_void_p.from_buffer(self.buffers, slot * _SLOT)
                self.slots.append(slot)
            elif arg.kind == "size":
                holder = ctypes.c_int32(binding.size_parameter(kernel, arg.name, sizes))
            elif arg.kind == "scalar":
                value, ctype = binding.scalar_argument(kernel, arg, scalars)
                holder = ctype(value)
                self.scalars[arg.name] = (i, scalars[arg.name])
            elif arg.kind == "tensormap":
                shape, box = binding.tensormap_geometry(arg, sizes)
                holder = TensorMapParam()   # encoded at the first call, from its address
                self.maps.append([i, self._slot(slots, arg.name), arg.dtype, shape, box,
                                  None, holder])
            else:
                raise PlaitError(f"kernel {kernel.name}: unknown argument kind {arg.kind!r}")
            self.holders.append(holder)
            self.params[i] = ctypes.addressof(holder)

    def _slot(self, slots: dict[str, int], name: str) -> int:
        if name not in slots:
            raise PlaitError(f"kernel {self.kernel.name} reads buffer {name!r}, which the "
                             f"program does not define (have: {sorted(slots)})")
        return slots[name]

    def set_pointers(self, pointers: list[int]) -> None:
        """Write the addresses of this kernel's buffers (by slot) into the buffer array and
        refresh its tensor maps. (A handle writes the shared array itself, once per call.)"""
        buffers = self.buffers
        for slot in self.slots:
            buffers[slot] = pointers[slot]
        for entry in self.maps:
            buffers[entry[1]] = pointers[entry[1]]
        self.refresh_maps()

    def refresh_maps(self) -> None:
        """Re-encode each tensor map whose buffer address moved since it was encoded."""
        for entry in self.maps:
            ptr = self.buffers[entry[1]] or 0
            if ptr != entry[5]:
                tmap = _tensor_map(ptr, entry[2], entry[3], entry[4], self.kernel.name)
                entry[5], entry[6] = ptr, tmap        # keep it alive while it is pointed at
                self.holders[entry[0]] = tmap
                self.params[entry[0]] = ctypes.addressof(tmap)

    def set_scalars(self, scalars: dict[str, float]) -> None:
        """Rewrite the scalar parameters whose value differs from the packed one."""
        for name, (index, packed) in self.scalars.items():
            value = scalars.get(name, packed)
            if value != packed:
                arg = self.kernel.args[index]
                new, ctype = binding.scalar_argument(self.kernel, arg, scalars)
                holder = ctype(new)
                self.holders[index] = holder
                self.params[index] = ctypes.addressof(holder)
                self.scalars[name] = (index, value)

    def values(self) -> list:
        """The packed parameters read back (ints, floats, tensor-map bytes): for tests."""
        out = []
        for i, holder in enumerate(self.holders):
            if isinstance(holder, ctypes.Array):
                out.append(bytes(holder))
            elif isinstance(holder, ctypes.c_void_p):
                out.append(holder.value or 0)
            else:
                out.append(holder.value)
        return out

    def pointed_at(self) -> list[int]:
        """The addresses in the parameter array (each must be its holder's)."""
        return [self.params[i] for i in range(len(self.kernel.args))]
