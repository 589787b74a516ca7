"""Tier 2: contractions on the H200's tensor cores against torch in float64, odd shapes."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, cast, sum  # noqa: E402
from plait.runtime.api import compile as plait_compile  # noqa: E402
from plait.runtime.tolerance import max_rel_err  # noqa: E402
from plait.schedule.lookup import find_schedule  # noqa: E402

import contraction_cases as cc  # noqa: E402
from matmul import matmul  # noqa: E402
from matmul_bias_gelu import matmul_bias_gelu  # noqa: E402
from matmul_fp8 import matmul_fp8  # noqa: E402
from bmm import bmm  # noqa: E402

TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float8_e4m3fn: 2e-2}
SHAPES = [(257, 136, 72), (1000, 520, 264), (128, 256, 64), (2048, 1536, 2048), (64, 8, 8),
          (264, 136, 8200)]      # the last splits K by itself (few tiles, long K)
DT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8_e4m3",
      torch.float8_e5m2: "fp8_e5m2", torch.float32: "fp32"}


def rand(gen, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)


def on_tensor_cores(algo, args: dict, sizes, schedule=None, target="sm_90a"):
    dtypes = {k: DT[v.dtype] for k, v in args.items() if isinstance(v, torch.Tensor)}
    program = plait_compile(algo, dtypes, sizes, schedule=schedule, target=target)
    return any("wgmma" in k.ptx or "mma.sync" in k.ptx for k in program.kernels)


def check(out, ref, tol):
    torch.cuda.synchronize()
    err = max_rel_err(out.double().cpu().numpy(), ref.cpu().numpy())
    assert err < tol, f"max rel err {err:.3g} over {tol}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
def test_matmul(shape, dtype):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    a, b = rand(gen, M, K, dtype=dtype), rand(gen, K, N, dtype=dtype)
    assert on_tensor_cores(matmul, {"a": a, "b": b}, {"M": M, "N": N, "K": K})
    out = plait.run(matmul, a, b)
    check(out, a.double() @ b.double(), TOL[dtype])


@pytest.mark.parametrize("name", ["mm_nt", "mm_tn", "mm_out_t"])
@pytest.mark.parametrize("shape", [(264, 136, 72), (640, 384, 520)])
def test_storage_orders(name, shape):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + N + K)
    a, b = rand(gen, M, K), rand(gen, K, N)
    ref = a.double() @ b.double()
    algo = getattr(cc, name)
    args = {"mm_nt": {"a": a, "b": b.t().contiguous()},
            "mm_tn": {"a": a.t().contiguous(), "b": b},
            "mm_out_t": {"b": b, "a": a}}[name]
    assert on_tensor_cores(algo, args, {"M": M, "N": N, "K": K})
    out = plait.run(algo, **args)
    check(out.t() if name == "mm_out_t" else out, ref, TOL[torch.bfloat16])


@pytest.mark.parametrize("shape", [(257, 136, 72), (1024, 1024, 1024)])
def test_bias_gelu(shape):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(3)
    a, b, bias = rand(gen, M, K), rand(gen, K, N), rand(gen, N)
    schedule = find_schedule("matmul_bias_gelu", "sm_90a")
    assert on_tensor_cores(matmul_bias_gelu, {"a": a, "b": b, "bias": bias},
                           {"M": M, "N": N, "K": K}, schedule)
    out = plait.run(matmul_bias_gelu, a, b, bias)
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    check(out, ref, TOL[torch.bfloat16])


def test_residual_and_row_scale():
    M, N, K = 333, 200, 136
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b, c, s = rand(gen, M, K), rand(gen, K, N), rand(gen, M, N), rand(gen, M)
    out = plait.run(cc.mm_residual, a, b, c, alpha=0.25)
    check(out, (a.double() @ b.double()) * 0.25 + c.double(), TOL[torch.bfloat16])
    assert on_tensor_cores(cc.mm_residual, {"a": a, "b": b, "c": c}, {"M": M, "N": N, "K": K})
    out = plait.run(cc.mm_silu_rows, a, b, s)
    y = (a.double() @ b.double()) * s.double()[:, None]
    check(out, y * torch.sigmoid(y), TOL[torch.bfloat16])


@algorithm
def matmul_fp8_mixed(a: Tensor["M", "K"], b: Tensor["N", "K"], scale_a: float = 1.0,
                     scale_b: float = 1.0):
    """The example's math with undeclared operand dtypes (it declares e4m3 for both)."""
    return cast(sum(a * b, over="K") * (scale_a * scale_b), "bf16")


@pytest.mark.parametrize("kinds", [(torch.float8_e4m3fn, torch.float8_e4m3fn),
                                   (torch.float8_e5m2, torch.float8_e4m3fn)])
@pytest.mark.parametrize("shape", [(257, 136, 144), (2048, 2048, 2048)])
def test_fp8(shape, kinds):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(11)
    a, b = rand(gen, M, K, dtype=kinds[0]), rand(gen, N, K, dtype=kinds[1])
    algo = matmul_fp8 if kinds[0] == kinds[1] else matmul_fp8_mixed
    assert on_tensor_cores(algo, {"a": a, "b": b}, {"M": M, "N": N, "K": K})
    out = plait.run(algo, a, b, scale_a=0.5, scale_b=0.25)
    ref = (a.double() @ b.double().t()) * 0.125
    check(out, ref, TOL[torch.bfloat16])


def test_batched():
    B, M, N, K = 3, 200, 136, 88
    gen = torch.Generator(device="cuda").manual_seed(13)
    a, b = rand(gen, B, M, K), rand(gen, B, K, N)
    assert on_tensor_cores(bmm, {"a": a, "b": b}, {"B": B, "M": M, "N": N, "K": K})
    out = plait.run(bmm, a, b)
    check(out, a.double() @ b.double(), TOL[torch.bfloat16])


# Rows the TMA cannot address (not whole 16-byte units): K, N or both ragged, every
# storage order; threads copy them in 8-, 4- or 2-byte pieces and the output is stored
# from registers.
EVERY_SHAPE = [(129, 65, 77), (257, 136, 209), (300, 135, 208), (1000, 3001, 777),
               (64, 8, 5), (3, 517, 1030), (517, 3, 66), (517, 5, 130)]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(["matmul", "mm_nt", "mm_tn", "mm_out_t"]))
@pytest.mark.parametrize("shape", EVERY_SHAPE)
def test_every_shape_on_tensor_cores(shape, name, target):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + 5 * N + 7 * K)
    a, b = rand(gen, M, K), rand(gen, K, N)
    args, ref = MMA_CASES[name](a, b)
    algo = matmul if name == "matmul" else getattr(cc, name)
    assert on_tensor_cores(algo, args, {"M": M, "N": N, "K": K}, target=target)
    check(plait.run(algo, **args, target=target), ref, TOL[torch.bfloat16])


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_every_shape_epilogue_batch_and_split(target):
    M, N, K = 333, 201, 1031
    gen = torch.Generator(device="cuda").manual_seed(29)
    a, b, bias = rand(gen, M, K), rand(gen, K, N), rand(gen, N)
    out = plait.run(matmul_bias_gelu, a, b, bias, target=target)
    check(out, torch.nn.functional.gelu(a.double() @ b.double() + bias.double()), 2e-2)
    a3, b3 = rand(gen, 3, M, K), rand(gen, 3, K, N)
    check(plait.run(bmm, a3, b3, target=target), a3.double() @ b3.double(), 2e-2)
    if target == "sm_90a":
        schedule = {"algorithm": "matmul_bias_gelu", "contraction": {"split_k": 3}}
        out = plait.run(matmul_bias_gelu, a, b, bias, schedule=schedule)
        check(out, torch.nn.functional.gelu(a.double() @ b.double() + bias.double()), 2e-2)


def test_every_shape_fp8_and_misaligned_addresses():
    """fp8 rows of 2-byte pieces, and operands whose base is 2 bytes off 16: all on
    tensor cores, none through the TMA."""
    M, N, K = 257, 135, 146
    gen = torch.Generator(device="cuda").manual_seed(31)
    a = rand(gen, M, K, dtype=torch.float8_e4m3fn)
    b = rand(gen, N, K, dtype=torch.float8_e4m3fn)
    assert on_tensor_cores(matmul_fp8, {"a": a, "b": b}, {"M": M, "N": N, "K": K})
    check(plait.run(matmul_fp8, a, b), a.double() @ b.double().t(), TOL[torch.float8_e4m3fn])
    a16, b16 = rand(gen, M * 64 + 1), rand(gen, 64 * 136 + 1)
    a, b = a16[1:].view(M, 64), b16[1:].view(64, 136)      # 2-byte aligned bases
    check(plait.run(matmul, a, b), a.double() @ b.double(), TOL[torch.bfloat16])


MMA_CASES = {
    "matmul": lambda a, b: ({"a": a, "b": b}, a.double() @ b.double()),
    "mm_nt": lambda a, b: ({"a": a, "b": b.t().contiguous()}, a.double() @ b.double()),
    "mm_tn": lambda a, b: ({"a": a.t().contiguous(), "b": b}, a.double() @ b.double()),
    "mm_out_t": lambda a, b: ({"b": b, "a": a}, (a.double() @ b.double()).t()),
}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(MMA_CASES))
@pytest.mark.parametrize("shape", [(264, 136, 72), (1000, 520, 264), (2048, 1024, 1024)])
def test_mma_sync(name, shape, dtype, target):
    """The sm_80 kernels (cp.async, ldmatrix, mma.sync), as PTX for sm_80 that the driver
    compiles for the H200, and picked by a schedule on sm_90a."""
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + 3 * N + K)
    a, b = rand(gen, M, K, dtype=dtype), rand(gen, K, N, dtype=dtype)
    args, ref = MMA_CASES[name](a, b)
    algo = matmul if name == "matmul" else getattr(cc, name)
    schedule = {"algorithm": algo.name, "contraction": {"instruction": "mma_sync"}}
    dtypes = {k: DT[v.dtype] for k, v in args.items()}
    program = plait_compile(algo, dtypes, {"M": M, "N": N, "K": K}, schedule=schedule,
                            target=target)
    assert all("mma.sync" in k.ptx for k in program.kernels)
    out = plait.run(algo, **args, schedule=schedule, target=target)
    check(out, ref, TOL[dtype])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_mma_sync_epilogues_and_batch(target):
    M, N, K = 333, 200, 136
    gen = torch.Generator(device="cuda").manual_seed(23)
    a, b, bias = rand(gen, M, K), rand(gen, K, N), rand(gen, N)
    mma = {"instruction": "mma_sync"}
    out = plait.run(matmul_bias_gelu, a, b, bias, target=target,
                    schedule={"algorithm": "matmul_bias_gelu", "contraction": mma})
    check(out, torch.nn.functional.gelu(a.double() @ b.double() + bias.double()), 2e-2)
    a3, b3 = rand(gen, 3, M, K), rand(gen, 3, K, N)
    out = plait.run(bmm, a3, b3, target=target, schedule={"algorithm": "bmm", "contraction": mma})
    check(out, a3.double() @ b3.double(), 2e-2)


@pytest.mark.parametrize("split", [2, 5])
@pytest.mark.parametrize("shape", [(257, 136, 1000), (128, 256, 8192)])
def test_split_k(shape, split):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(split * 31 + M)
    a, b, bias = rand(gen, M, K), rand(gen, K, N), rand(gen, N)
    schedule = {"algorithm": "matmul_bias_gelu", "contraction": {"split_k": split}}
    assert on_tensor_cores(matmul_bias_gelu, {"a": a, "b": b, "bias": bias},
                           {"M": M, "N": N, "K": K}, schedule)
    out = plait.run(matmul_bias_gelu, a, b, bias, schedule=schedule)
    check(out, torch.nn.functional.gelu(a.double() @ b.double() + bias.double()), 2e-2)


@pytest.mark.parametrize("shape", [(264, 136, 72), (1024, 1024, 2048)])
def test_tf32(shape):
    """fp32 operands as tf32 (10-bit mantissas): within 5e-3 of the float64 product."""
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(41)
    a, b = rand(gen, M, K, dtype=torch.float32), rand(gen, N, K, dtype=torch.float32)
    schedule = {"algorithm": "mm_nt", "contraction": {"tf32": True}}
    program = plait_compile(cc.mm_nt, {"a": "fp32", "b": "fp32"}, {"M": M, "N": N, "K": K},
                            schedule=schedule)
    assert "tf32.tf32" in program.kernels[0].ptx
    out = plait.run(cc.mm_nt, a, b, schedule=schedule)
    check(out, a.double() @ b.double().t(), 5e-3)
