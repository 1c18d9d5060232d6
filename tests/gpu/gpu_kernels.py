"""Real device work for the GPU tests: the kernels of ``spin_kernels.cu``
(committed as ``spin.ptx``) loaded and launched with the CUDA driver API
through ctypes, on the streams of max.driver queues.

Nothing here needs a CUDA SDK: the driver library (``libcuda.so.1``) is the
one max.driver itself opened.  Module load, memory allocation and launches
run with the device's primary context pushed (the context max.driver's
streams belong to) and popped again, so the calling thread's current context
is left as it was.

The subprocess tests import it too, with ``tests/gpu`` on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from pathlib import Path

from max import driver

HERE = Path(__file__).resolve().parent
PTX_PATH = HERE / "spin.ptx"
REPO_ROOT = HERE.parent.parent

CU_MEMHOSTALLOC_PORTABLE = 0x1
CU_MEMHOSTALLOC_DEVICEMAP = 0x2

MS = 1_000_000  # nanoseconds


def cuda_skip_reason() -> str | None:
    """Why the real-GPU tests cannot run here, or None when they can."""
    count = driver.accelerator_count()
    if count == 0:
        return (
            "needs a real NVIDIA GPU: max.driver.accelerator_count() == 0 "
            "(no accelerator backend was chosen at import)"
        )
    api = driver.accelerator_api()
    if api != "cuda":
        return f"needs the CUDA backend; max.driver.accelerator_api() is {api!r}"
    library = driver_library()
    try:
        lib = ctypes.CDLL(library)
        for needed in ("cuModuleLoadData", "cuLaunchKernel"):
            getattr(lib, needed)
    except (OSError, AttributeError) as exc:
        # The test-only fake driver (tests/fake_driver) runs no kernels.
        return f"needs a real CUDA driver that launches kernels; {library}: {exc}"
    return None


def driver_library() -> str:
    """The CUDA driver library max.driver chose (and this helper shares)."""
    for entry in driver.backend_selection():
        if entry["chosen"] and entry["library"]:
            return entry["library"]
    return "libcuda.so.1"


class CudaError(RuntimeError):
    """A CUDA driver call made by this helper (not by max.driver) failed."""


class Driver:
    """The few CUDA driver entry points the tests call, through ctypes."""

    def __init__(self, path: str | None = None) -> None:
        self.lib = ctypes.CDLL(path or driver_library())
        vp, u64, uint = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint
        pp = ctypes.POINTER
        # The ABI-stable exported names (<cuda.h> maps the plain names of
        # some entry points onto their _v2 variants).
        self._declare("cuInit", [uint])
        self._declare("cuDeviceGet", [pp(ctypes.c_int), ctypes.c_int])
        self._declare("cuDevicePrimaryCtxRetain", [pp(vp), ctypes.c_int])
        self._declare("cuCtxPushCurrent_v2", [vp])
        self._declare("cuCtxPopCurrent_v2", [pp(vp)])
        self._declare("cuModuleLoadData", [pp(vp), ctypes.c_char_p])
        self._declare("cuModuleGetFunction", [pp(vp), vp, ctypes.c_char_p])
        self._declare(
            "cuLaunchKernel",
            [vp, uint, uint, uint, uint, uint, uint, uint, vp, pp(vp), pp(vp)],
        )
        self._declare("cuMemHostAlloc", [pp(vp), ctypes.c_size_t, uint])
        self._declare("cuMemHostGetDevicePointer_v2", [pp(u64), vp, uint])
        self._declare("cuMemFreeHost", [vp])
        self.lib.cuGetErrorName.argtypes = [ctypes.c_int, pp(ctypes.c_char_p)]
        self.lib.cuGetErrorName.restype = ctypes.c_int

    def _declare(self, name: str, argtypes: list) -> None:
        fn = getattr(self.lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int

    def error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(name)) != 0 or not name.value:
            return f"CUDA error {rc}"
        return name.value.decode()

    def __call__(self, name: str, *args: object) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaError(f"{name} failed: {self.error_name(rc)} ({rc})")


class Buffer:
    """``count`` u64 slots of pinned host memory mapped into the device.

    ``buf[i]`` reads slot i from the host, ``buf[i] = v`` writes it and
    ``buf.dev(i)`` is its device address, for kernel arguments.  Slot 0 is
    the buffer's stop slot: kernels launched with ``stop=buf`` end their spin
    early once it is non-zero (see ``Kernels.stop_all``)."""

    def __init__(self, kernels: Kernels, count: int) -> None:
        self._kernels = kernels
        self.count = count
        host = ctypes.c_void_p()
        dev = ctypes.c_uint64()
        with kernels.context():
            kernels.cu(
                "cuMemHostAlloc",
                ctypes.byref(host),
                8 * count,
                CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
            )
            kernels.cu("cuMemHostGetDevicePointer_v2", ctypes.byref(dev), host, 0)
        self.host = host.value
        self.device = dev.value
        self.slots = (ctypes.c_uint64 * count).from_address(self.host)
        ctypes.memset(self.host, 0, 8 * count)

    def __getitem__(self, i: int) -> int:
        return self.slots[i]

    def __setitem__(self, i: int, value: int) -> None:
        self.slots[i] = value

    def dev(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self.device + 8 * i

    def free(self) -> None:
        """Only once no kernel can still touch the buffer."""
        if self.host:
            with self._kernels.context():
                self._kernels.cu("cuMemFreeHost", ctypes.c_void_p(self.host))
            self.host = 0


class Kernels:
    """spin.ptx loaded into the primary context of CUDA device ``ordinal``."""

    def __init__(self, ordinal: int = 0, ptx: Path = PTX_PATH) -> None:
        # Open the device through max.driver first: the backend retains the
        # primary context its streams are created in.
        self.device = driver.Accelerator(ordinal)
        self.cu = Driver()
        self.cu("cuInit", 0)
        dev = ctypes.c_int()
        self.cu("cuDeviceGet", ctypes.byref(dev), ordinal)
        self._ordinal = dev.value
        ctx = ctypes.c_void_p()
        self.cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self._ordinal)
        self.ctx = ctx
        module = ctypes.c_void_p()
        self.functions: dict[str, ctypes.c_void_p] = {}
        with self.context():  # the driver JIT-compiles the PTX for this GPU
            self.cu("cuModuleLoadData", ctypes.byref(module), ptx.read_bytes() + b"\0")
            for name in ("spin_write", "spin_trap"):
                fn = ctypes.c_void_p()
                self.cu("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
                self.functions[name] = fn
        self.module = module
        self.buffers: list[Buffer] = []

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """The primary context made current on this thread, then popped."""
        self.cu("cuCtxPushCurrent_v2", self.ctx)
        try:
            yield
        finally:
            popped = ctypes.c_void_p()
            self.cu("cuCtxPopCurrent_v2", ctypes.byref(popped))

    def buffer(self, count: int = 16) -> Buffer:
        buf = Buffer(self, count)
        self.buffers.append(buf)
        return buf

    def _launch(self, name: str, queue: driver.DeviceQueue, *args: int) -> None:
        values = [ctypes.c_uint64(a) for a in args]
        params = (ctypes.c_void_p * len(values))(
            *(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values)
        )
        stream = ctypes.c_void_p(queue.native_stream_handle)
        grid = block = (1, 1, 1)  # one thread
        with self.context():
            self.cu(
                "cuLaunchKernel",
                self.functions[name],
                *grid,
                *block,
                0,  # dynamic shared memory
                stream,
                params,
                None,
            )

    def spin_write(
        self,
        queue: driver.DeviceQueue,
        ns: int,
        *,
        out: int = 0,
        value: int = 0,
        stop: Buffer | None = None,
        watch: int = 0,
        seen: int = 0,
    ) -> None:
        """Enqueue on ``queue``: spin ``ns`` ns (ended early by ``stop``'s slot
        0), copy the u64 at device address ``watch`` to ``seen``, then store
        ``value`` at ``out`` (addresses from ``Buffer.dev``; 0 skips)."""
        stop_ptr = stop.dev(0) if stop is not None else 0
        self._launch("spin_write", queue, ns, stop_ptr, watch, seen, out, value)

    def spin_trap(self, queue: driver.DeviceQueue, ns: int = 0) -> None:
        """Enqueue a kernel that spins ``ns`` ns and then traps."""
        self._launch("spin_trap", queue, ns)

    def stop_all(self) -> None:
        """Ends the spin of every kernel launched with a stop buffer."""
        for buf in self.buffers:
            if buf.host:
                buf[0] = 1
