"""The LLVM/PTX layer all emitters share, and the emitter of SIMT kernels' thread-level IR."""
