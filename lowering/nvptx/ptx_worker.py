"""LLVM IR -> PTX through llvmlite: `compile_ptx`, and a process that serves it over pipes.

llvmlite's pass builder never frees the instrumentation callbacks it allocates, and each
run adds more (about 90 KB per kernel, llvmlite 0.50), so a process that optimises many
modules grows without bound. `ptx_pool` runs this file as a child process and replaces
the child after a fixed number of kernels, which returns that memory to the system.

Run as a script, this module imports only llvmlite and the standard library, so that the
child starts fast and needs nothing of plait. The protocol on stdin/stdout: a request is
three length-prefixed UTF-8 strings (LLVM IR, cpu, features); a reply is one status byte
(0 ok, 1 error) then one length-prefixed string (the PTX, or "ExceptionType: message").
"""
from __future__ import annotations

import os
import struct
import sys

_LENGTH = struct.Struct("<Q")
_ready = False


def compile_ptx(llvm_ir: str, cpu: str, features: str) -> str:
    """Verify, optimise at O3 and emit PTX for `cpu` (e.g. sm_90a) with `features`."""
    from llvmlite import binding as llvm
    global _ready
    if not _ready:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _ready = True
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    machine = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu=cpu, features=features, opt=3)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(module, pb)
    return machine.emit_assembly(module)


def write_string(stream, text: str) -> None:
    data = text.encode()
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)


def read_string(stream) -> str | None:
    """The next string, or None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return data.decode()


def serve(requests, replies) -> None:
    """Answer requests until the parent closes the pipe."""
    while True:
        fields = [read_string(requests) for _ in range(3)]
        if any(f is None for f in fields):
            return
        try:
            status, text = b"\0", compile_ptx(*fields)
        except Exception as error:        # the parent raises it again, by name
            status, text = b"\1", f"{type(error).__name__}: {error}"
        replies.write(status)
        write_string(replies, text)
        replies.flush()


if __name__ == "__main__":
    # Replies get a private copy of stdout; whatever LLVM prints goes to stderr.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, replies)
