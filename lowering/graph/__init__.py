"""Stage 2: the kernel graph and the rewrites that cut and shape its kernels."""
