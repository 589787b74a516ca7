"""The LLVM/PTX layer all emitters share, and the generic thread-program emitter."""
