"""plait.compile's handle without a GPU: the CPU executor through it, mismatch errors, and the
launch path with the driver faked (parameters packed once, only pointers patched)."""
import ctypes

import numpy as np
import pytest

import fake_gpu
import plait
from plait.dsl import PlaitError
from plait.runtime import api, binding, compiled, packing
from rt_algorithms import axpb, two_out
from rt_handwritten import axpb_program


def _inputs(rng, m=7, n=13):
    return (rng.standard_normal((m, n)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def test_cpu_handle_matches_plait_run_and_numpy(rng):
    x, b = _inputs(rng)
    k = plait.compile(axpb, like=(x, b), device="cpu", a=-1.5)
    want = x.astype(np.float64) * -1.5 + b
    np.testing.assert_allclose(k(x, b), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(k(x, b), plait.run(axpb, x, b, a=-1.5, device="cpu"))
    x2, b2 = _inputs(rng)                   # same shapes, new data: the same handle
    np.testing.assert_allclose(k(x2, b2), x2.astype(np.float64) * -1.5 + b2, rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(k(x2, b2, a=0.25), x2 * 0.25 + b2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(k(b=b2, x=x2), x2 * -1.5 + b2, rtol=1e-6, atol=1e-6)


def test_cpu_handle_on_torch_tensors_returns_torch(rng):
    torch = pytest.importorskip("torch")
    x, b = _inputs(rng, 5, 31)
    tx, tb = torch.from_numpy(x), torch.from_numpy(b)
    k = plait.compile(two_out, like=(tx,), device="cpu")
    doubled, total = k(tx)
    assert isinstance(doubled, torch.Tensor) and doubled.dtype == torch.float32
    torch.testing.assert_close(doubled, tx * 2)
    torch.testing.assert_close(total, tx.double().sum(1).float(), rtol=1e-5, atol=1e-5)
    run_doubled, run_total = plait.run(two_out, tx, device="cpu")
    assert torch.equal(doubled, run_doubled) and torch.equal(total, run_total)


def test_mismatches_are_refused_by_name(rng):
    x, b = _inputs(rng)
    k = plait.compile(axpb, like=(x, b), device="cpu")
    with pytest.raises(PlaitError, match=r"argument 'b' is fp32 \[14\] numpy on the host, but "
                                         r"this compiled handle was built for fp32 \[13\]"):
        k(x, np.ones(14, np.float32))
    with pytest.raises(PlaitError, match=r"argument 'x' is fp16 \[7, 13\].*built for fp32"):
        k(x.astype(np.float16), b)
    with pytest.raises(PlaitError, match=r"'x' is not C-contiguous"):
        k(np.asfortranarray(x), b)
    with pytest.raises(PlaitError, match=r"missing tensor argument 'b'"):
        k(x)
    with pytest.raises(PlaitError, match=r"has no argument 'c'"):
        k(x, b, c=1.0)
    with pytest.raises(PlaitError, match=r"'a' is a scalar"):
        k(x, b, a="big")
    with pytest.raises(PlaitError, match=r"like= needs 2 arrays \(x, b\), got 1"):
        plait.compile(axpb, like=(x,))


def test_torch_mismatch_names_family_and_dtype(rng):
    torch = pytest.importorskip("torch")
    x, b = _inputs(rng)
    k = plait.compile(axpb, like=(torch.from_numpy(x), torch.from_numpy(b)), device="cpu")
    with pytest.raises(PlaitError, match=r"'x' is fp32 \[7, 13\] numpy.*built for fp32 "
                                         r"\[7, 13\] torch"):
        k(x, torch.from_numpy(b))
    with pytest.raises(PlaitError, match=r"'b' is bf16"):
        k(torch.from_numpy(x), torch.from_numpy(b).bfloat16())
    with pytest.raises(PlaitError, match=r"'x' is not C-contiguous"):
        k(torch.from_numpy(x).T.contiguous().T, torch.from_numpy(b))


def test_handle_keeps_no_argument_alive(rng):
    torch = pytest.importorskip("torch")
    import weakref
    x, b = (torch.from_numpy(a) for a in _inputs(rng))
    k = plait.compile(axpb, like=(x, b), device="cpu")
    ref = weakref.ref(x)
    del x
    assert ref() is None, "the handle holds the array it was built from"
    assert "axpb" in repr(k)


# ---------------------------------------------------------------- the launch path, faked

@pytest.fixture
def counted_packing(monkeypatch):
    made = []

    class Counted(packing.PackedArgs):
        def __init__(self, *a, **k):
            made.append(a[0].name)
            super().__init__(*a, **k)
    monkeypatch.setattr(packing, "PackedArgs", Counted)
    return made


def test_parameters_are_packed_once_and_pointers_patched(monkeypatch, rng, counted_packing):
    gpu = fake_gpu.install(monkeypatch)
    x, b = _inputs(rng, 5, 9)
    k = plait.compile(axpb, like=(x, b), device="gpu", a=0.5)
    assert counted_packing == ["axpb.copy", "axpb"]
    for call in range(3):
        before = len(gpu.allocated)
        k(x, b) if call != 2 else k(x, b, a=4.0)
        x_dev, b_dev, tmp, out = gpu.allocated[before:]
        pointers = {"x": x_dev.ptr, "b": b_dev.ptr, "tmp": tmp.ptr, "out": out.ptr}
        a = 4.0 if call == 2 else 0.5
        for kernel, (name, grid, block, values) in zip(gpu.program.kernels, gpu.launches[-2:]):
            want = binding.kernel_arguments(kernel, pointers, {"M": 5, "N": 9}, {"a": a})
            assert values == [v for v, _ in want], (call, name)
    assert counted_packing == ["axpb.copy", "axpb"], "packing code ran again on a later call"
    assert len(gpu.compiles) == 1
    k(x, b)                                   # a per-call scalar does not stick
    assert gpu.launches[-1][3][-1] == 0.5


def test_plait_run_reuses_its_handle(monkeypatch, rng, counted_packing):
    gpu = fake_gpu.install(monkeypatch)
    built = []
    real_init = compiled.Compiled.__init__

    def counting_init(self, *a, **k):
        built.append(a[0].name)
        real_init(self, *a, **k)
    monkeypatch.setattr(compiled.Compiled, "__init__", counting_init)
    x, b = _inputs(rng, 4, 6)
    for _ in range(2):                        # each way of calling builds once, then reuses
        plait.run(axpb, x, b)
        plait.run(axpb, x, b, a=3.0)          # a scalar's value is a parameter, not a key
        assert gpu.launches[-1][3][-1] == 3.0
        plait.run(axpb, x, b)                 # and the default comes back
        assert gpu.launches[-1][3][-1] == 2.0
        plait.run(axpb, b=b, x=x, a=-1.0)
        assert gpu.launches[-1][3][-1] == -1.0
        plait.run(axpb, b=b, x=x, a=5.0)
        assert gpu.launches[-1][3][-1] == 5.0
        assert built == ["axpb"] * 3
    assert counted_packing == ["axpb.copy", "axpb"] * 3
    plait.run(axpb, *_inputs(rng, 3, 6))
    assert len(built) == 4 and gpu.compiles[-1][0] == {"M": 3, "N": 6}


def test_run_cache_key_separates_what_changes_the_program(rng):
    torch = pytest.importorskip("torch")
    x, b = _inputs(rng)
    key = api._run_key(axpb, (x, b), {}, None, "auto", None)
    assert key == api._run_key(axpb, (x.copy(), b.copy()), {}, None, "auto", None)
    for other in [(x.astype(np.float16), b), (x[:3], b), (np.asfortranarray(x), b)]:
        assert api._run_key(axpb, other, {}, None, "auto", None) != key
    assert api._run_key(axpb, (x, b), {}, None, "cpu", None) != key
    assert api._run_key(axpb, (x, b), {}, "s.yaml", "auto", None) != key
    assert api._run_key(axpb, (x, b), {}, {"grid": {}}, "auto", None) is None
    t = torch.from_numpy(x)
    assert api._run_key(axpb, (t, b), {}, None, "auto", None) != key
    assert api._run_key(axpb, (x, [1.0]), {}, None, "auto", None) is None


# ---------------------------------------------------------------- packing on its own

def test_packed_values_are_what_kernel_arguments_gives():
    prog = axpb_program()
    slots = {b.name: i for i, b in enumerate(prog.buffers)}
    pointers = [16 * (i + 3) for i in range(len(prog.buffers))]
    sizes, scalars = {"M": 37, "N": 301}, {"a": -0.75}
    for kernel in prog.kernels:
        packed = packing.PackedArgs(kernel, sizes, scalars, slots)
        packed.set_pointers(pointers)
        by_name = {b.name: pointers[slots[b.name]] for b in prog.buffers}
        want = binding.kernel_arguments(kernel, by_name, sizes, scalars)
        assert packed.values() == [v for v, _ in want]
        assert packed.pointed_at() == [ctypes.addressof(h) for h in packed.holders]
        assert fake_gpu.decode(kernel, packed.address) == [v for v, _ in want]
    with pytest.raises(PlaitError, match="32-bit"):
        packing.PackedArgs(prog.kernels[0], {"M": 2**31, "N": 5}, {}, slots)
    with pytest.raises(PlaitError, match="reads buffer 'tmp'"):
        packing.PackedArgs(prog.kernels[0], sizes, {}, {"x": 0})
    with pytest.raises(PlaitError, match="scalar 'a'"):
        packing.PackedArgs(prog.kernels[1], sizes, {}, slots)


def test_tensor_maps_are_encoded_only_when_their_address_moves(monkeypatch):
    from plait.dsl.dtypes import DType
    from plait.lowering.artifact import CompiledKernel, KernelArg
    from plait.runtime.tensormap import TensorMapParam
    encoded = []

    def fake_map(ptr, dtype, shape, box, kernel):
        encoded.append((ptr, shape, box))
        return TensorMapParam.from_buffer_copy(ptr.to_bytes(8, "little") * 16)
    monkeypatch.setattr(packing, "_tensor_map", fake_map)
    kernel = CompiledKernel("mm", "mm_k", "sm_90a", "", (
        KernelArg("a", "tensormap", DType.BF16, (("M", 128), ("K", 64))),
        KernelArg("c", "buffer", DType.BF16), KernelArg("M", "size", DType.INT32)),
        threads=384, grid=(("M", 128),))
    packed = packing.PackedArgs(kernel, {"M": 300, "K": 70}, {}, {"a": 0, "c": 1})
    packed.set_pointers([4096, 8192])
    packed.set_pointers([4096, 12288])        # only the plain pointer moved
    assert encoded == [(4096, (300, 70), (128, 64))]
    assert packed.values()[1:] == [12288, 300]
    packed.set_pointers([8192, 12288])
    assert [e[0] for e in encoded] == [4096, 8192]
    assert fake_gpu.decode(kernel, packed.address)[0] == (8192).to_bytes(8, "little") * 16


# ---------------------------------------------------------------- the torch hot path, faked

def _torch_inputs(rng, m=5, n=9):
    torch = pytest.importorskip("torch")
    return tuple(torch.from_numpy(a) for a in _inputs(rng, m, n))


def test_torch_hot_path_writes_addresses_once_and_launches_on_torch_stream(monkeypatch, rng):
    gpu = fake_gpu.install(monkeypatch)
    x, b = _torch_inputs(rng)
    k = fake_gpu.torch_handle(axpb, (x, b), a=0.5)
    outs = []
    for call in range(4):
        out = k(x, b, a=4.0) if call == 2 else k(x, b)
        outs.append(out)
        assert out.shape == (5, 9) and out.dtype == x.dtype
        a = 4.0 if call == 2 else 0.5
        (copy, grid, _, copy_args), (name, _, _, args) = gpu.launches[-2:]
        assert (copy, name, grid) == ("axpb.copy", "axpb", (5, 1, 1))
        tmp = copy_args[0]
        assert copy_args == [tmp, x.data_ptr(), 5, 9]      # one address per buffer, shared
        assert args == [tmp, b.data_ptr(), out.data_ptr(), 5, 9, a]
    assert gpu.streams == [fake_gpu.TORCH_STREAM] * 8
    assert len({o.data_ptr() for o in outs}) == 4, "a call reused an earlier call's output"
    assert gpu.allocated == [], "the hot path went through plait's own allocations"


def test_torch_hot_path_refuses_what_the_handle_was_not_built_for(monkeypatch, rng):
    torch = pytest.importorskip("torch")
    gpu = fake_gpu.install(monkeypatch)
    x, b = _torch_inputs(rng)
    k = fake_gpu.torch_handle(axpb, (x, b))
    cases = [((x, torch.ones(10)), r"argument 'b' is fp32 \[10\] torch on the host, but this "
                                   r"compiled handle was built for fp32 \[9\]"),
             ((x.bfloat16(), b), r"argument 'x' is bf16 \[5, 9\].*built for fp32"),
             ((x.T.contiguous().T, b), r"'x' is not C-contiguous"),
             ((x.numpy(), b), r"'x' is fp32 \[5, 9\] numpy.*built for fp32 \[5, 9\] torch"),
             ((x, [1.0] * 9), r"'b' is a Python list"),
             ((x,), r"this handle takes 2 arrays \(x, b\), got 1")]
    for args, message in cases:
        with pytest.raises(PlaitError, match=message):
            k.call(args)
    base = torch.zeros(9 + 1)
    with pytest.raises(PlaitError, match=r"argument 'b' is at 0x[0-9a-f]+, not 16-byte aligned"):
        k(x, base[1:])                      # 4 bytes past the allocation's alignment
    assert gpu.launches == []
    k(x, base[:-1])
    assert len(gpu.launches) == 2
