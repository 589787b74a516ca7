"""Stage 3: tile programs (the IR builder, lowering/ir/, writes them as IR kernels)."""
