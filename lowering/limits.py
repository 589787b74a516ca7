"""Hardware limits the lowering plans around (shared by the backend and the pipeline)."""
from .target import DEFAULT_TARGET, get_target

# Statically declared shared memory per block; more must be dynamic, asked for at launch.
STATIC_SHARED_LIMIT = 48 * 1024

# Multiprocessors the lowering plans one wave of blocks for when no GPU says otherwise:
# the default target's figure (kernels are compiled ahead of the device they meet).
SMS = get_target(DEFAULT_TARGET).sms



def shared_limit(target: str) -> int:
    """Shared memory one block may opt in to on `target` (the target table's figure)."""
    return get_target(target).shared_per_block
