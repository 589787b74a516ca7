"""Hand-written Triton backward kernels: what a Triton user writes for each gradient.

Normalizations: each program walks ROWS rows, writes dx row by row and keeps
dw (and db) partial sums in registers; torch.sum finishes the partials.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _norm_bwd(x_ptr, w_ptr, dy_ptr, dx_ptr, pdw_ptr, pdb_ptr, M, N, eps,
              ROWS: tl.constexpr, BLOCK: tl.constexpr, CENTER: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    db = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ROWS):
        row = pid * ROWS + i
        if row < M:
            off = row.to(tl.int64) * N + cols
            x = tl.load(x_ptr + off, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + off, mask=mask, other=0.0).to(tl.float32)
            if CENTER:
                x = tl.where(mask, x - tl.sum(x, axis=0) / N, 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
            xhat = x * rstd
            g = dy * w
            c2 = tl.sum(xhat * g, axis=0) / N
            if CENTER:
                c1 = tl.sum(g, axis=0) / N
                dx = (g - c1 - xhat * c2) * rstd
            else:
                dx = (g - xhat * c2) * rstd
            tl.store(dx_ptr + off, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * xhat
            db += dy
    tl.store(pdw_ptr + pid * N + cols, dw, mask=mask)
    if CENTER:
        tl.store(pdb_ptr + pid * N + cols, db, mask=mask)


@triton.jit
def _swiglu_bwd(g_ptr, u_ptr, dy_ptr, dg_ptr, du_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    s = tl.sigmoid(g)
    tl.store(du_ptr + offs, (dy * g * s).to(du_ptr.dtype.element_ty), mask=mask)
    tl.store(dg_ptr + offs, (dy * u * s * (1 + g * (1 - s))).to(dg_ptr.dtype.element_ty),
             mask=mask)


def _norm(x, w, dy, eps, center, rows=32):
    M, N = x.shape
    block = triton.next_power_of_2(N)
    programs = triton.cdiv(M, rows)
    dx = torch.empty_like(x)
    pdw = torch.empty(programs, N, device=x.device, dtype=torch.float32)
    pdb = torch.empty(programs, N, device=x.device, dtype=torch.float32) if center else pdw
    _norm_bwd[(programs,)](x, w, dy, dx, pdw, pdb, M, N, eps, ROWS=rows, BLOCK=block,
                           CENTER=center, num_warps=8)
    dw = pdw.sum(0).to(w.dtype)
    return (dx, dw, pdb.sum(0).to(w.dtype)) if center else (dx, dw)


def layernorm_bwd(x, w, dy, eps=1e-5):
    return _norm(x, w, dy, eps, True)


def rmsnorm_bwd(x, w, dy, eps=1e-6):
    return _norm(x, w, dy, eps, False)


def swiglu_bwd(g, u, dy):
    dg, du = torch.empty_like(g), torch.empty_like(u)
    total = g.numel()
    _swiglu_bwd[(triton.cdiv(total, 2048),)](g, u, dy, dg, du, total, BLOCK=2048, num_warps=4)
    return dg, du
