"""The Triton peer for contractions: a plain tiled matmul kernel, autotuned over the usual
Hopper configurations, with an optional fused bias + GELU epilogue."""
import torch
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=8),
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
    triton.Config({"BM": 64, "BN": 256, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul(a, b, c, bias, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr,
            GELU: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = G * grid_n
    first = (pid // width) * G
    rows = min(grid_m - first, G)
    pm = first + (pid % width) % rows
    pn = (pid % width) // rows
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None] * sam + rk[None, :] * sak
    pb = b + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        x = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK * sak
        pb += BK * sbk
    if GELU:
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        acc = 0.5 * acc * (1 + tl.erf(acc * 0.7071067811865476))
    pc = c + rm[:, None] * scm + rn[None, :] * scn
    tl.store(pc, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b, bias=None):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    _matmul[grid](a, b, c, bias if bias is not None else c, M, N, K, a.stride(0), a.stride(1),
                  b.stride(0), b.stride(1), c.stride(0), c.stride(1), GELU=bias is not None)
    return c
