"""Hand-written PTX and a Program around it: tests the runtime without the compiler.

axpb_k(x, b, out, M, N, a): out[m, n] = x[m, n] * a + b[n]; one block per row m.
addto_k(dst, src, M, N):    dst[m, n] += src[m, n];        one block per row m.
"""
from plait.dsl.dtypes import DType
from plait.lowering.artifact import Buffer, CompiledKernel, KernelArg, Program

PTX = r"""
.version 7.8
.target sm_80
.address_size 64

.visible .entry axpb_k(
    .param .u64 p_x, .param .u64 p_b, .param .u64 p_out,
    .param .u32 p_M, .param .u32 p_N, .param .f32 p_a)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<10>;
    .reg .f32 %f<5>;
    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd2, [p_b];
    ld.param.u64 %rd3, [p_out];
    ld.param.u32 %r1, [p_M];
    ld.param.u32 %r2, [p_N];
    ld.param.f32 %f1, [p_a];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r3, %ctaid.x;
    setp.ge.u32 %p1, %r3, %r1;
    @%p1 bra DONE;
    mov.u32 %r4, %tid.x;
    mov.u32 %r6, %ntid.x;
LOOP:
    setp.ge.u32 %p2, %r4, %r2;
    @%p2 bra DONE;
    mad.lo.s32 %r5, %r3, %r2, %r4;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.f32 %f2, [%rd5];
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f2, %f1, %f3;
    add.s64 %rd8, %rd3, %rd4;
    st.global.f32 [%rd8], %f4;
    add.s32 %r4, %r4, %r6;
    bra.uni LOOP;
DONE:
    ret;
}

.visible .entry addto_k(
    .param .u64 p_dst, .param .u64 p_src, .param .u32 p_M, .param .u32 p_N)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
    ld.param.u64 %rd1, [p_dst];
    ld.param.u64 %rd2, [p_src];
    ld.param.u32 %r1, [p_M];
    ld.param.u32 %r2, [p_N];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r3, %ctaid.x;
    setp.ge.u32 %p1, %r3, %r1;
    @%p1 bra DONE;
    mov.u32 %r4, %tid.x;
    mov.u32 %r6, %ntid.x;
LOOP:
    setp.ge.u32 %p2, %r4, %r2;
    @%p2 bra DONE;
    mad.lo.s32 %r5, %r3, %r2, %r4;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    ld.global.f32 %f2, [%rd5];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd4], %f3;
    add.s32 %r4, %r4, %r6;
    bra.uni LOOP;
DONE:
    ret;
}
"""

BAD_PTX = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry broken_k()
{
    this is not an instruction;
    ret;
}
"""

F32, I32 = DType.FP32, DType.INT32


def axpb_program(target: str = "sm_90a") -> Program:
    """Two kernels through a zero-filled temporary: tmp += x; out = tmp * a + b."""
    addto = CompiledKernel(
        "axpb.copy", "addto_k", target, PTX,
        (KernelArg("tmp", "buffer", F32), KernelArg("x", "buffer", F32),
         KernelArg("M", "size", I32), KernelArg("N", "size", I32)),
        threads=128, grid=(("M", 1),))
    axpb = CompiledKernel(
        "axpb", "axpb_k", target, PTX,
        (KernelArg("tmp", "buffer", F32), KernelArg("b", "buffer", F32),
         KernelArg("out", "buffer", F32), KernelArg("M", "size", I32),
         KernelArg("N", "size", I32), KernelArg("a", "scalar", F32)),
        threads=128, grid=(("M", 1),))
    buffers = (Buffer("x", F32, ("M", "N"), "input"), Buffer("b", F32, ("N",), "input"),
               Buffer("tmp", F32, ("M", "N"), "temp", zero=True),
               Buffer("out", F32, ("M", "N"), "output"))
    return Program("axpb", target, buffers, (addto, axpb))
