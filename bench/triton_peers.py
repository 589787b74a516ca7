"""Hand-written Triton kernels: what a Triton user would write for each workload.

One row per program, the whole row in registers (BLOCK = next power of two of
N), which is the layout Triton's own tutorials use for these kernels.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_fwd(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_fwd(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * N + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _swiglu(g_ptr, u_ptr, y_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    tl.store(y_ptr + offs, (g * tl.sigmoid(g) * u).to(y_ptr.dtype.element_ty), mask=mask)


def _row_warps(block):
    return 4 if block <= 2048 else 8 if block <= 8192 else 16


def layernorm(x, w, b, eps=1e-5):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    _layernorm_fwd[(M,)](x, w, b, y, N, eps, BLOCK=block, num_warps=_row_warps(block))
    return y


def rmsnorm(x, w, eps=1e-6):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    _rmsnorm_fwd[(M,)](x, w, y, N, eps, BLOCK=block, num_warps=_row_warps(block))
    return y


def softmax(x):
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    _softmax[(M,)](x, y, N, BLOCK=block, num_warps=_row_warps(block))
    return y


def swiglu(g, u):
    y = torch.empty_like(g)
    total = g.numel()
    _swiglu[(triton.cdiv(total, 4096),)](g, u, y, total, BLOCK=4096, num_warps=8)
    return y
