"""Hardware limits the lowering plans around (shared by the backend and the pipeline),
and the checks that refuse, when compiling, what a launch could not run."""
import math

from plait.dsl.errors import PlaitError

from .target import DEFAULT_TARGET, get_target

# Statically declared shared memory per block; more must be dynamic, asked for at launch.
STATIC_SHARED_LIMIT = 48 * 1024

# Multiprocessors the lowering plans one wave of blocks for when no GPU says otherwise:
# the default target's figure (kernels are compiled ahead of the device they meet).
SMS = get_target(DEFAULT_TARGET).sms

# Kernels take axis extents as int32 parameters and index with 32-bit integers.
MAX_EXTENT = 2**31 - 1


def shared_limit(target: str) -> int:
    """Shared memory one block may opt in to on `target` (the target table's figure)."""
    return get_target(target).shared_per_block


def check_extents(sizes: dict[str, int]) -> None:
    """PlaitError for an axis longer than the generated code can index (it would wrap)."""
    for axis, extent in sizes.items():
        if extent > MAX_EXTENT:
            raise PlaitError(f"axis {axis} has extent {extent}; kernels index with 32-bit "
                             f"integers, so an extent is at most {MAX_EXTENT} (2**31 - 1)")


def check_grids(program, sizes: dict[str, int], multiprocessors: int | None = None) -> None:
    """PlaitError for a kernel of `program` whose launch at these sizes would have more
    blocks along x, y or z than the target allows (the target table's max_grid_*)."""
    target = get_target(program.target)
    full = program.complete_sizes(sizes)
    for k in program.kernels:
        dims = k.blocks(full, multiprocessors if k.persistent else None)
        x, y, z = dims if isinstance(dims, tuple) else (dims, 1, 1)
        axes = [a for a, _ in k.grid]
        # On x: the innermost grid axis when split over x, y and z, else every axis.
        on_x, outer = (axes[-1:], axes[:-1]) if isinstance(dims, tuple) else (axes, [])
        if x > target.max_grid_x:
            _refuse(k, on_x, x, "x", target.max_grid_x)
        if max(y, z) > target.max_grid_yz:      # y is full, so z holds the rest
            rest = math.prod(-(-full[a] // t) for a, t in k.grid if a in outer)
            _refuse(k, outer, rest, "y and z", f"{target.max_grid_yz} x {target.max_grid_yz}")


def _refuse(kernel, axes: list[str], blocks: int, where: str, limit) -> None:
    tiles = ", ".join(f"{a} in tiles of {t}" for a, t in kernel.grid if a in axes)
    raise PlaitError(f"kernel {kernel.name}: {blocks} blocks over {where} ({tiles}); "
                     f"{kernel.target} launches at most {limit} there: give "
                     f"{' or '.join(axes)} a larger grid tile")
