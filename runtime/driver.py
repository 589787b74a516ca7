"""The CUDA driver through cuda-bindings: the only module of plait that imports it.

Kernels run in the primary context of their device (the one torch and CuPy use),
so that pointers from their tensors are valid here and kernels can go on their
streams. Device 0's context is made current on a thread that has none; another
device's is pushed for the call that needs it and popped after, so that plait
never changes which device torch thinks is current. Pointers and stream handles cross this module's boundary as plain ints.
Every failure raises `CudaError` with CUDA's own error name and description.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading

from plait.dsl.errors import PlaitError
from plait.lowering.target import DEFAULT_TARGET, get_target


class CudaError(PlaitError):
    """A CUDA driver call failed (or there is no driver / GPU at all)."""

    def __init__(self, message: str, code: str | None = None, log: str = ""):
        self.code = code          # e.g. 'CUDA_ERROR_INVALID_PTX'; None when CUDA never answered
        self.log = log            # the JIT compiler's error log, for module loads
        super().__init__(message + (f"\n{log}" if log else ""))


_lock = threading.RLock()
_local = threading.local()        # the context is current per thread: remember which threads set it
_state: dict = {}                 # 'drv', 'device', 'context' once initialised; 'error' if that failed
_modules: dict[tuple[int, str], object] = {}  # (device, sha256(ptx)) -> CUmodule
_functions: dict[tuple[int, str, str], object] = {}
_devices: dict[int, tuple[object, object, int]] = {}  # device -> (CUdevice, context, its address)
_streams: dict[int, object] = {}  # raw stream handle -> CUstream (made once, reused per launch)
_dynamic_shared: dict[tuple[str, str], int] = {}

_DEFAULT_SHARED_LIMIT = 48 * 1024   # above this a kernel must opt in to dynamic shared memory
_LOG_BYTES = 64 * 1024


def _import_driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise CudaError("no GPU support: the cuda-bindings package is not installed "
                        "(pip install cuda-bindings)") from e
    return driver


def _describe(drv, err) -> str:
    """'CUDA_ERROR_X: what it means', from the driver itself where it can say."""
    name, text = getattr(err, "name", str(err)), ""
    try:
        e, raw = drv.cuGetErrorName(err)
        if e == drv.CUresult.CUDA_SUCCESS and raw:
            name = raw.decode()
        e, raw = drv.cuGetErrorString(err)
        if e == drv.CUresult.CUDA_SUCCESS and raw:
            text = raw.decode()
    except Exception:  # the error path must never hide the original error
        pass
    return f"{name}: {text}" if text else name


def _check(drv, result, what: str, kernel: str | None = None, log: str = ""):
    """Unpack a cuda-bindings result tuple, raising CudaError unless it is CUDA_SUCCESS."""
    err, rest = result[0], result[1:]
    if err != drv.CUresult.CUDA_SUCCESS:
        where = f" (kernel {kernel})" if kernel else ""
        raise CudaError(f"{what}{where} failed: {_describe(drv, err)}",
                        code=getattr(err, "name", str(err)), log=log)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _init():
    """cuInit, device 0, its primary context retained; once per process."""
    with _lock:
        if "error" in _state:
            raise _state["error"]
        if "context" in _state:
            return _state
        try:
            drv = _import_driver()
            try:
                res = drv.cuInit(0)
            except Exception as e:  # no libcuda.so: cuda-bindings raises instead of returning
                raise CudaError(f"no GPU: the NVIDIA driver library could not be loaded ({e})") \
                    from e
            if res[0] != drv.CUresult.CUDA_SUCCESS:
                raise CudaError(f"no GPU: cuInit failed: {_describe(drv, res[0])}",
                                code=getattr(res[0], "name", None))
            count = _check(drv, drv.cuDeviceGetCount(), "cuDeviceGetCount")
            if count < 1:
                raise CudaError("no GPU: the CUDA driver sees no device")
            device = _check(drv, drv.cuDeviceGet(0), "cuDeviceGet(0)")
            context = _check(drv, drv.cuDevicePrimaryCtxRetain(device),
                             "cuDevicePrimaryCtxRetain")
        except CudaError as e:
            _state["error"] = e
            raise
        from .fast_launch import load
        _state.update(drv=drv, device=device, context=context, count=int(count),
                      success=drv.CUresult.CUDA_SUCCESS, fast=load())
        _devices[0] = (device, context, int(context))
        return _state


def _device(index: int) -> tuple[object, object, int]:
    """(CUdevice, primary context, its address) of device `index`, retained on first use."""
    hit = _devices.get(index)
    if hit is not None:
        return hit
    st = _init()
    drv = st["drv"]
    with _lock:
        if index not in _devices:
            if not 0 <= index < st["count"]:
                raise CudaError(f"no CUDA device {index}: the driver sees {st['count']}")
            dev = _check(drv, drv.cuDeviceGet(index), f"cuDeviceGet({index})")
            ctx = _check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _devices[index] = (dev, ctx, int(ctx))
        return _devices[index]


def enter(index: int) -> bool:
    """Make device `index`'s primary context current for what follows; True when the caller
    must `leave()` afterwards (another context was current and has to come back).
    Called per launch, so the common case is one driver call and no lock."""
    hit = _devices.get(index)
    if hit is None:
        _init()                   # not _ready(): that would make device 0 current for good
        hit = _device(index)
    _, ctx, address = hit
    drv = _state["drv"]
    fast = _state.get("fast")
    if fast is not None:
        err, now = fast.current_context()
        if err:
            _check(drv, (drv.CUresult(err),), "cuCtxGetCurrent")
    else:
        err, current = drv.cuCtxGetCurrent()
        if err != _state["success"]:
            _check(drv, (err,), "cuCtxGetCurrent")
        now = int(current) if current is not None else 0
    if now == address:
        return False
    if now == 0:                  # this thread had none: keep ours
        _check(drv, drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return False
    _check(drv, drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    return True


def leave() -> None:
    drv = _state["drv"]
    _check(drv, drv.cuCtxPopCurrent(), "cuCtxPopCurrent")


class on_device:
    """`with on_device(i):` device i's context is current inside, the previous one after."""

    def __init__(self, index: int):
        self.index = index
        self.pushed = False

    def __enter__(self):
        self.pushed = enter(self.index)   # device 0 too: torch may have made another current
        return self

    def __exit__(self, *exc):
        if self.pushed:
            leave()
        return False


def _ready():
    """The driver module, with the primary context current on this thread."""
    st = _init()
    if not getattr(_local, "current", False):
        _check(st["drv"], st["drv"].cuCtxSetCurrent(st["context"]), "cuCtxSetCurrent")
        _local.current = True
    return st["drv"]


def require_gpu() -> None:
    """Raise the CudaError saying why there is no usable GPU; return quietly when there is one.
    (Makes no context current: torch's current device stays what it was.)"""
    _init()


def gpu_available() -> bool:
    """Whether a CUDA GPU can be used; False (never an exception) without driver or device."""
    try:
        _init()
        return True
    except Exception:
        return False


def device_count() -> int:
    """How many CUDA devices the driver sees (0 without driver or device)."""
    try:
        return _init()["count"]
    except CudaError:
        return 0


def device_capability(index: int = 0) -> tuple[int, int]:
    """Compute capability (major, minor) of a device, e.g. (9, 0) on an H200."""
    drv = _init()["drv"]             # attributes need no current context
    dev = _device(index)[0]
    attr = drv.CUdevice_attribute
    major = _check(drv, drv.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(drv, drv.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    return int(major), int(minor)


def device_attribute(name: str, index: int = 0) -> int:
    """Any CU_DEVICE_ATTRIBUTE_<name> of a device (e.g. 'MULTIPROCESSOR_COUNT')."""
    drv = _init()["drv"]
    attr = getattr(drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
    return int(_check(drv, drv.cuDeviceGetAttribute(attr, _device(index)[0]),
                      f"cuDeviceGetAttribute({name})"))


def device_name(index: int = 0) -> str:
    """The device's marketing name and driver version, e.g. 'NVIDIA H200, driver 12080'."""
    drv = _init()["drv"]
    raw = _check(drv, drv.cuDeviceGetName(256, _device(index)[0]), "cuDeviceGetName")
    name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
    version = _check(drv, drv.cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{name}, driver {int(version)}"


def multiprocessors(index: int = 0) -> int:
    """The multiprocessor count of a device (how many blocks a persistent kernel launches)."""
    key = ("multiprocessors", index)
    if key not in _state:
        _state[key] = device_attribute("MULTIPROCESSOR_COUNT", index)
    return _state[key]


# ---------------------------------------------------------------- modules and kernels

def _ptx_key(ptx: str | bytes) -> tuple[str, bytes]:
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    return hashlib.sha256(data).hexdigest(), data


def load_module(ptx: str | bytes, kernel: str | None = None, device: int = 0):
    """Load PTX (or a cubin) into a device's context, once per distinct text; JIT errors
    carry the log."""
    key, data = _ptx_key(ptx)
    with _lock, on_device(device):
        if (device, key) in _modules:
            return _modules[(device, key)]
        drv = _state["drv"]
        if not data.endswith(b"\0"):
            data += b"\0"          # the driver reads PTX as a NUL-terminated string
        errors, info = bytearray(_LOG_BYTES), bytearray(_LOG_BYTES)
        opt = drv.CUjit_option
        options = [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
        values = [errors, _LOG_BYTES, info, _LOG_BYTES]
        res = drv.cuModuleLoadDataEx(data, len(options), options, values)
        log = bytes(errors).split(b"\0", 1)[0].decode(errors="replace").strip()
        module = _check(drv, res, "loading PTX (cuModuleLoadDataEx)", kernel, log)
        _modules[(device, key)] = module
        return module


def get_function(ptx: str | bytes, entry: str, kernel: str | None = None, device: int = 0):
    """The CUfunction `entry` of the module for `ptx` on a device (loaded on first use)."""
    key, _ = _ptx_key(ptx)
    with _lock:
        if (device, key, entry) not in _functions:
            module = load_module(ptx, kernel or entry, device)
            drv = _state["drv"]
            with on_device(device):
                _functions[(device, key, entry)] = _check(
                    drv, drv.cuModuleGetFunction(module, entry.encode()),
                    f"finding entry {entry!r} in its module (cuModuleGetFunction)",
                    kernel or entry)
        return _functions[(device, key, entry)]


def set_dynamic_shared(func, nbytes: int, kernel: str | None = None, device: int = 0) -> None:
    """Let `func` use `nbytes` of dynamic shared memory (needed past 48 KiB)."""
    if nbytes <= _DEFAULT_SHARED_LIMIT:
        return
    key = (id(func), kernel or "")
    if _dynamic_shared.get(key, 0) >= nbytes:
        return
    drv = _init()["drv"]
    limit = device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", device)
    if nbytes > limit:
        raise CudaError(f"kernel {kernel} asks for {nbytes} bytes of shared memory per block; "
                        f"this GPU allows at most {limit}")
    with on_device(device):
        _check(drv, drv.cuFuncSetAttribute(
            func, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            nbytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", kernel)
    _dynamic_shared[key] = nbytes


def _dim3(value) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if len(dims) != 3 or any(d < 1 for d in dims):
        raise CudaError(f"bad launch dimensions {value!r}")
    return dims


def launch(func, grid, block, args: list[tuple[object, type]], *, shared: int = 0,
           stream: int = 0, kernel: str | None = None) -> None:
    """Launch `func` on the stream with this handle (0: the legacy default stream).

    `args` are (value, ctypes type) pairs in the kernel's parameter order; pointers
    are ints with ctypes.c_void_p. We build the void** array ourselves, which every
    cuda-bindings version accepts as a plain address.
    """
    drv = _ready()
    (gx, gy, gz), (bx, by, bz) = check_launch(grid, block, kernel)
    set_dynamic_shared(func, shared, kernel)
    # keep alive until the launch returns; a ctypes array (a tensor map) goes as it is
    holders = [value if isinstance(value, ctypes.Array) else ctype(value) for value, ctype in args]
    params = (ctypes.c_void_p * max(len(holders), 1))(
        *[ctypes.addressof(h) for h in holders])
    _check(drv, drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, int(shared),
                                   drv.CUstream(int(stream)), ctypes.addressof(params), 0),
           f"launching {gx}x{gy}x{gz} blocks of {bx * by * bz} threads (cuLaunchKernel)", kernel)


def check_launch(grid, block, kernel: str | None = None,
                 target: str = DEFAULT_TARGET) -> tuple[tuple, tuple]:
    """The launch dimensions as two 3-tuples, refused when past the GPU's limits (the
    target table's)."""
    gx, gy, gz = _dim3(grid)
    bx, by, bz = _dim3(block)
    t = get_target(target)
    if gx > t.max_grid_x or gy > t.max_grid_yz or gz > t.max_grid_yz:
        raise CudaError(f"kernel {kernel}: grid {gx}x{gy}x{gz} exceeds the GPU's grid limits")
    if bx * by * bz > 1024:
        raise CudaError(f"kernel {kernel}: {bx * by * bz} threads per block; the limit is 1024")
    return (gx, gy, gz), (bx, by, bz)


def stream_handle(stream: int):
    """The CUstream for a raw stream handle, made once: a hot launch constructs nothing."""
    hit = _streams.get(stream)
    if hit is None:
        if len(_streams) > 256:
            _streams.clear()
        hit = _streams[stream] = _init()["drv"].CUstream(int(stream))
    return hit


def launcher(device: int, launches: list[tuple], sync: bool = False):
    """A function of a raw stream handle (an int) that launches each of `launches` in order
    on that stream, with device `device`'s primary context current (made so only when it
    is not). Each launch is (CUfunction, grid, block, shared bytes, params address,
    kernel name): dimensions from `check_launch`, dynamic shared memory already allowed,
    params the address of a void* array (runtime/packing.py). Built once per handle, so
    a hot call is this function and nothing else; `sync` waits after each launch
    (PLAIT_SYNC). Not reentrant: call it under the caller's lock."""
    st = _init()
    address = _device(device)[2]
    wait = synchronize if sync else None
    fast = st.get("fast")
    if fast is not None:
        rows = [(int(func), *rest) for func, *rest in launches]
        return fast.launcher(address, rows, lambda: enter(device), leave, _launch_failed,
                             wait)
    drv, success = st["drv"], st["success"]
    launches = tuple(launches)

    def run(stream: int) -> None:
        pushed = enter(device)
        try:
            handle = stream_handle(stream)
            for func, grid, block, shared, params, name in launches:
                err = drv.cuLaunchKernel(func, grid[0], grid[1], grid[2], block[0], block[1],
                                         block[2], shared, handle, params, 0)[0]
                if err != success:
                    _launch_failed(err, name, grid, block)
                if wait is not None:
                    wait(stream, name)
        finally:
            if pushed:
                leave()
    return run


def _launch_failed(err, kernel: str, grid: tuple, block: tuple) -> None:
    """Raise the CudaError for a failed cuLaunchKernel (`err` a CUresult or its int code)."""
    drv = _state["drv"]
    if not isinstance(err, drv.CUresult):
        try:
            err = drv.CUresult(err)
        except ValueError:          # a code cuda-bindings has no name for: keep the number
            pass
    _check(drv, (err,), f"launching {grid[0]}x{grid[1]}x{grid[2]} blocks of "
           f"{block[0] * block[1] * block[2]} threads (cuLaunchKernel)", kernel)


# ---------------------------------------------------------------- memory and streams

def alloc(nbytes: int) -> int:
    """Device memory of at least `nbytes` (1 byte for empty tensors); returns its address."""
    drv = _ready()
    ptr = _check(drv, drv.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes} bytes)")
    return int(ptr)


def free(ptr: int) -> None:
    drv = _ready()
    _check(drv, drv.cuMemFree(drv.CUdeviceptr(int(ptr))), "cuMemFree")


def memcpy_htod(dst: int, src_host: int, nbytes: int) -> None:
    """Copy from a host address to a device address (synchronous)."""
    if nbytes:
        drv = _ready()
        _check(drv, drv.cuMemcpyHtoD(drv.CUdeviceptr(int(dst)), int(src_host), int(nbytes)),
               f"cuMemcpyHtoD({nbytes} bytes)")


def memcpy_dtoh(dst_host: int, src: int, nbytes: int) -> None:
    """Copy from a device address to a host address (synchronous)."""
    if nbytes:
        drv = _ready()
        _check(drv, drv.cuMemcpyDtoH(int(dst_host), drv.CUdeviceptr(int(src)), int(nbytes)),
               f"cuMemcpyDtoH({nbytes} bytes)")


def memset(ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
    """Fill device memory with one byte value, ordered on `stream`."""
    if nbytes:
        drv = _ready()
        _check(drv, drv.cuMemsetD8Async(drv.CUdeviceptr(int(ptr)), int(byte), int(nbytes),
                                        drv.CUstream(int(stream))), f"cuMemsetD8Async({nbytes})")


def synchronize(stream: int | None = None, kernel: str | None = None) -> None:
    """Wait for one stream, or (None) for all work in the context; surfaces kernel faults,
    naming `kernel` when the caller knows which one was just launched (PLAIT_SYNC)."""
    drv = _ready()
    if stream is None:
        _check(drv, drv.cuCtxSynchronize(), "cuCtxSynchronize", kernel)
    else:
        _check(drv, drv.cuStreamSynchronize(drv.CUstream(int(stream))), "cuStreamSynchronize",
               kernel)


# ---------------------------------------------------------------- tensor maps

_TENSOR_MAP_TYPES = {"bf16": "BFLOAT16", "fp16": "FLOAT16", "fp32": "FLOAT32",
                     "fp8_e4m3": "UINT8", "fp8_e5m2": "UINT8"}


def encode_tensor_map(ptr: int, dtype, dims: tuple[int, ...], strides: tuple[int, ...],
                      box: tuple[int, ...], kernel: str | None = None) -> bytes:
    """cuTensorMapEncodeTiled, innermost dimension first: `dims` in elements, `strides` in
    bytes for dims[1:], `box` in elements; 128-byte swizzle, zero fill. The map's bytes.
    Host-only encoding: it leaves the current context alone (a launch on another device
    has pushed its own)."""
    drv = _init()["drv"]
    if dtype.short not in _TENSOR_MAP_TYPES:
        raise CudaError(f"kernel {kernel}: no tensor map for {dtype} elements")
    kind = getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _TENSOR_MAP_TYPES[dtype.short])
    rank = len(dims)
    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    tmap = _check(drv, drv.cuTensorMapEncodeTiled(
        kind, u32(rank), int(ptr), [u64(int(d)) for d in dims], [u64(int(s)) for s in strides],
        [u32(int(b)) for b in box], [u32(1)] * rank,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"encoding a tensor map (dims {dims}, box {box})", kernel)
    return ctypes.string_at(int(tmap.getPtr()), 128)
