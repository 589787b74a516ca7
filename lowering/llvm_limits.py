"""Hardware limits the lowering plans around (shared by the backend and the pipeline)."""

# Statically declared shared memory per block; more must be dynamic, asked for at launch.
STATIC_SHARED_LIMIT = 48 * 1024
