"""Hardware limits the lowering plans around (shared by the backend and the pipeline)."""

# Statically declared shared memory per block; more must be dynamic, asked for at launch.
STATIC_SHARED_LIMIT = 48 * 1024

# Multiprocessors the lowering plans one wave of blocks for (an H100 SXM / H200: 132).
# Kernels are compiled ahead of the device they meet, so this is a planning figure.
SMS = 132

# Shared memory one block may opt in to, per target family.
SHARED_LIMIT = {"sm_90": 227 * 1024, "sm_80": 163 * 1024}
SHARED_LIMIT_OTHER = 99 * 1024          # sm_86 / sm_89


def shared_limit(target: str) -> int:
    return SHARED_LIMIT.get(target.rstrip("a"), SHARED_LIMIT_OTHER)
