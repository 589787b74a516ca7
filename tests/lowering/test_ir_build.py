"""Every kernel of every example and gradient is built into the one IR for sm_80 and sm_90a,
passes the verifier, prints the same text twice, and spells out its path: SIMT kernels in
blocked layouts, GEMMs and streamed kernels in tensor-core fragments fed from shared
memory. A few kernels are kept as golden text (--update-golden rewrites them)."""
import pytest
from golden import check_golden
from ir_cases import every_algorithm, lowered

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.lowering.ir.build import build_program
from plait.lowering.ir.layouts import Blocked, Mma, Shared
from plait.lowering.ir.nodes import Block, Kernel, Op, Type, walk
from plait.lowering.ir.printer import kernel_text
from plait.lowering.ir.verify import verify

CASES = every_algorithm()


def kernels(algo, target):
    low = lowered(algo, target)
    return low, build_program(low.threads, low.tiles, target, low.sizes)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("label,algo", CASES, ids=[c[0] for c in CASES])
def test_every_kernel_builds_verifies_and_prints(label, algo, target):
    low, ks = kernels(algo, target)
    assert len(ks) == len(low.threads)
    again = build_program(low.threads, low.tiles, target, low.sizes)
    for k, k2 in zip(ks, again):
        verify(k)
        assert kernel_text(k) == kernel_text(k2)
        ops = list(walk(k.body))
        stores = [op for op in ops if op.name in ("store", "atomic_add", "scatter_add")]
        assert stores, f"{k.name} stores nothing"
        layouts = [k.type_of(v).layout for op in ops for v in op.results]
        if k.path == "simt":
            assert all(lay is None or isinstance(lay, Blocked) for lay in layouts)
        else:
            assert any(op.name == "for" for op in ops) and any(op.name == "dot" for op in ops)
            dots = [op for op in ops if op.name == "dot"]
            for d in dots:
                assert isinstance(k.type_of(d.result).layout, Mma)
            assert any(isinstance(lay, Shared) for lay in layouts)


def test_wgmma_reads_shared_operands_and_mma_sync_converts_them():
    algo = dict(CASES)["matmul:matmul"]
    for target, converted in (("sm_90a", 0), ("sm_80", 2)):
        _, ks = kernels(algo, target)
        gemm = next(k for k in ks if k.path == "gemm")
        ops = list(walk(gemm.body))
        assert sum(op.name == "convert_layout" for op in ops) == converted
        dot = next(op for op in ops if op.name == "dot")
        lay = gemm.type_of(dot.result).layout
        assert lay.instruction == ("wgmma" if target == "sm_90a" else "mma_sync")


@pytest.mark.parametrize("case,target", [("layernorm:layernorm", "sm_90a"),
                                         ("rmsnorm:rmsnorm.bwd", "sm_80"),
                                         ("matmul_bias_gelu:matmul_bias_gelu", "sm_90a"),
                                         ("attention:causal_attention", "sm_90a")])
def test_golden_text(request, case, target):
    _, ks = kernels(dict(CASES)[case], target)
    text = "\n".join(kernel_text(k) for k in ks)
    check_golden(request, f"ir/{case.split(':')[1]}.{target}.txt", text)


def _kernel(ops, types, params=()):
    from plait.lowering.artifact import Buffer
    out = Buffer("y", DType.FP32, ("N",), "output")
    return Kernel("k", "sm_90a", "simt", (out,), (), (("N", 128),), 128,
                  tuple(sorted(types.items())), Block(params, tuple(ops)))


def test_verifier_rejects_broken_kernels():
    f32 = DType.FP32
    blocked = Blocked((), 128)
    t = {0: Type(("N",), f32, blocked), 1: Type(("N",), f32, blocked)}
    ok = [Op("iota", (0,), (), (("axis", "N"),)), Op("store", (), (0,), (("buffer", "y"),))]
    verify(_kernel(ok, t))
    bad_use = [Op("store", (), (1,), (("buffer", "y"),))]
    with pytest.raises(PlaitError, match="not defined before"):
        verify(_kernel(bad_use, t))
    twice = [Op("iota", (0,), (), (("axis", "N"),)), Op("iota", (0,), (), (("axis", "N"),))]
    with pytest.raises(PlaitError, match="defined twice"):
        verify(_kernel(twice, t))
    t2 = {**t, 2: Type(("M", "N"), f32, blocked)}
    wide = [Op("iota", (2,), (), (("axis", "N"),)), Op("store", (), (2,), (("buffer", "y"),))]
    with pytest.raises(PlaitError, match="stores a value over"):
        verify(_kernel(wide, t2))
    keeps = [Op("iota", (0,), (), (("axis", "N"),)),
             Op("reduce", (1,), (0,), (("axis", "N"), ("combine", "sum")))]
    with pytest.raises(PlaitError, match="keeps it"):
        verify(_kernel(keeps, t))
    # A for whose body yields a value of another type than it carries.
    t3 = {0: Type((), f32), 1: Type(("N",), f32), 2: Type(("N",), DType.INT32),
          3: Type(("N",), f32)}
    body = Block((1,), (Op("iota", (2,), (), (("axis", "N"),)), Op("yield", (), (2,))))
    loop = [Op("const", (0,), (), (("value", 0.0),)),
            Op("for", (3,), (0,), (("axis", "N"), ("step", 1)), body)]
    with pytest.raises(PlaitError, match="carried"):
        verify(_kernel(loop, t3))
