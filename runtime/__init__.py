"""plait's runtime: CUDA driver, array interop, compile cache, ptxas, `plait.run` and the CLI.

Submodules are imported on use so that `import plait` never loads cuda-bindings.
"""
