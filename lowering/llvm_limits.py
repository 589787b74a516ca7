"""Hardware limits the lowering plans around (shared by the backend and the pipeline)."""

# Statically declared shared memory per block; more must be dynamic, asked for at launch.
STATIC_SHARED_LIMIT = 48 * 1024

# Multiprocessors the lowering plans one wave of blocks for (an H100 SXM / H200: 132).
# Kernels are compiled ahead of the device they meet, so this is a planning figure.
SMS = 132



def shared_limit(target: str) -> int:
    """Shared memory one block may opt in to on `target` (the target table's figure)."""
    from .target import get_target
    return get_target(target).shared_per_block
