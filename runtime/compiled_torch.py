"""The hot path of a plait.compile handle built for torch tensors on a GPU.

`TorchPath` is a part of `Compiled` (runtime/compiled.py): `_prepare_torch` works out,
when the handle is built, how each output and temporary is allocated and where its
address goes; a call then checks each tensor (`_torch_matches`, what `Compiled._check`
checks, read straight off the tensors) and `_launch_torch` writes the addresses,
allocates and launches on torch's current stream. Nothing synchronizes, so a call can
be captured in a CUDA graph.
"""
from __future__ import annotations

from . import arrays, binding


def torch_raw_stream():
    """torch's function of a device index giving the raw handle of its current stream
    (what torch's kernels use)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw or (lambda i: torch.cuda.current_stream(i).cuda_stream)


def torch_signature(t) -> tuple:
    """What a handle compares per torch tensor: cheap attribute reads, no objects made."""
    return (t.dtype, t.shape, t.get_device(), t.is_contiguous())


class TorchPath:
    """Compiled's methods for torch tensors on the GPU (it provides the rest)."""

    def _prepare_torch(self, device, raw_stream) -> None:
        """The hot path's tables: for each output or temporary how torch allocates it, on
        `device` (a GPU but for tests); launches go on `raw_stream(device index)`."""
        import torch
        self._torch_fast = True
        self._torch_device = device
        self._raw_stream = raw_stream
        # shapes as separate ints: torch parses `empty(3, 5)` faster than `empty((3, 5))`
        self._torch_allocs = [
            (slot, tuple(map(int, shape)) if shape else ((),),
             getattr(torch, arrays._TORCH_BACK[dtype]), torch.zeros if zero else torch.empty)
            for slot, _name, shape, dtype, zero in self._allocs]
        made = [name for _slot, name, *_ in self._allocs]
        self._torch_single = made.index(self._single) if self._single else None
        self._torch_outputs = [(n, made.index(n)) for n in self.outputs]

    def _torch_matches(self, values) -> bool:
        """Each check of `_check`, made on attributes read straight off the tensors."""
        wanted = self._built_for          # torch_signature of each tensor built for
        if len(values) != len(wanted):
            return False
        for t, (dtype, shape, device, contiguous) in zip(values, wanted):
            try:
                if not (t.dtype is dtype and t.shape == shape and t.get_device() == device
                        and t.is_contiguous() is contiguous):
                    return False
            except AttributeError:        # not a tensor
                return False
        return True

    def _launch_torch(self, values, scalars):
        """The hot path's launch, on checked torch tensors: everything but the buffer
        addresses and the stream was worked out when the handle was built."""
        with self._lock:                  # the packed parameters are shared state
            pointers = self._pointers
            for i, slot in self._reads:
                ptr = values[i].data_ptr()
                if ptr & 15 and self.aligned:
                    self._refuse_misaligned(self.names[i], ptr)
                pointers[slot] = ptr
            made = []
            device = self._torch_device
            for slot, shape, dtype, make in self._torch_allocs:
                t = make(*shape, dtype=dtype, device=device)
                pointers[slot] = t.data_ptr()
                made.append(t)
            if scalars or self._packed_scalars is not self.scalars:
                self._set_scalars(scalars)
            for packed in self._maps:
                packed.refresh_maps()
            self._run(self._raw_stream(self.device_index))
        # temporaries go back to torch's stream-ordered allocator when `made` does
        if self._torch_single is not None:
            return made[self._torch_single]
        return binding.package_outputs(self.outputs, {n: made[i] for n, i in
                                                      self._torch_outputs})
