"""Helpers of the fake driver's self-test: ctypes signatures, the few calls
the tests make spelled once for CUDA and once for HIP, gates, and child
interpreters for configurations that need other environment variables.

No pytest here: child interpreters import this module too
(``import fake_driver.fakelib`` with ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent

WAIT = 10.0
# Extra compiler flags for the library under test, e.g. a ThreadSanitizer
# run: FAKE_DRIVER_CFLAGS=-fsanitize=thread LD_PRELOAD=$(cc
# -print-file-name=libtsan.so) python -m pytest tests/fake_driver
CFLAGS = tuple(os.environ.get("FAKE_DRIVER_CFLAGS", "").split())

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NOT_INITIALIZED = 0, 1, 2, 3
NO_DEVICE, INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE = 100, 101, 201, 400
NOT_FOUND, NOT_READY, ILLEGAL_ADDRESS, LAUNCH_FAILED = 500, 600, 700, 719
NOT_PERMITTED, NOT_SUPPORTED = 800, 801
# Stream capture (the same values in CUDA and HIP).
CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED, CAPTURE_MERGE = 900, 901, 902
CAPTURE_UNMATCHED, CAPTURE_UNJOINED, CAPTURE_ISOLATION = 903, 904, 905
CAPTURE_IMPLICIT, CAPTURED_EVENT, CAPTURE_WRONG_THREAD = 906, 907, 908
MODE_GLOBAL, MODE_THREAD_LOCAL, MODE_RELAXED = 0, 1, 2
STATUS_NONE, STATUS_ACTIVE, STATUS_INVALIDATED = 0, 1, 2
NON_BLOCKING, DISABLE_TIMING, PORTABLE, DEVICEMAP, WAIT_EQ = 1, 2, 1, 2, 1
BLOCKING_SYNC = 1

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p)
P = ctypes.c_void_p
U = ctypes.c_uint
INT = ctypes.c_int
U64 = ctypes.c_uint64
SIZE = ctypes.c_size_t
U8 = ctypes.c_ubyte
U16 = ctypes.c_ushort

SIGNATURES = {
    # CUDA
    "cuInit": [U],
    "cuGetErrorName": [U, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [U, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGetCount": [P],
    "cuDeviceGet": [P, INT],
    "cuDeviceGetName": [ctypes.c_char_p, INT, INT],
    "cuDeviceGetAttribute": [P, U, INT],
    "cuDeviceTotalMem_v2": [P, INT],
    "cuDeviceCanAccessPeer": [P, INT, INT],
    "cuDevicePrimaryCtxRetain": [P, INT],
    "cuCtxPushCurrent_v2": [P],
    "cuCtxPopCurrent_v2": [P],
    "cuCtxGetCurrent": [P],
    "cuCtxEnablePeerAccess": [P, U],
    "cuMemGetInfo_v2": [P, P],
    "cuDeviceGetGraphMemAttribute": [INT, U, P],
    "cuStreamCreate": [P, U],
    "cuStreamDestroy_v2": [P],
    "cuStreamQuery": [P],
    "cuStreamSynchronize": [P],
    "cuStreamWaitEvent": [P, P, U],
    "cuEventCreate": [P, U],
    "cuEventDestroy_v2": [P],
    "cuEventRecord": [P, P],
    "cuEventQuery": [P],
    "cuEventSynchronize": [P],
    "cuEventElapsedTime": [P, P, P],
    "cuMemHostAlloc": [P, ctypes.c_size_t, U],
    "cuMemHostGetDevicePointer_v2": [P, P, U],
    "cuMemFreeHost": [P],
    "cuStreamWaitValue64_v2": [P, U64, U64, U],
    "cuLaunchHostFunc": [P, HOST_FN, P],
    "cuStreamAddCallback": [P, CALLBACK, P, U],
    "cuGetProcAddress_v2": [ctypes.c_char_p, P, INT, U64, P],
    "cuMemAlloc_v2": [P, SIZE],
    "cuMemFree_v2": [U64],
    "cuMemAllocAsync": [P, SIZE, P],
    "cuMemFreeAsync": [U64, P],
    "cuMemcpyHtoDAsync_v2": [U64, P, SIZE, P],
    "cuMemcpyDtoHAsync_v2": [P, U64, SIZE, P],
    "cuMemcpyDtoDAsync_v2": [U64, U64, SIZE, P],
    "cuMemcpyPeerAsync": [U64, P, U64, P, SIZE, P],
    "cuMemcpy2DAsync_v2": [P, P],
    "cuMemsetD8Async": [U64, U8, SIZE, P],
    "cuMemsetD16Async": [U64, U16, SIZE, P],
    "cuMemsetD32Async": [U64, U, SIZE, P],
    "cuPointerGetAttribute": [P, U, U64],
    "cuDeviceGetDefaultMemPool": [P, INT],
    "cuMemPoolSetAttribute": [P, U, P],
    "cuMemPoolSetAccess": [P, P, SIZE],
    "cuStreamBeginCapture_v2": [P, U],
    "cuStreamEndCapture": [P, P],
    "cuStreamIsCapturing": [P, P],
    "cuGraphInstantiateWithFlags": [P, P, U64],
    "cuGraphLaunch": [P, P],
    "cuGraphExecDestroy": [P],
    "cuGraphDestroy": [P],
    # HIP
    "hipInit": [U],
    "hipGetDeviceCount": [P],
    "hipGetDevice": [P],
    "hipSetDevice": [INT],
    "hipDeviceGetName": [ctypes.c_char_p, INT, INT],
    "hipDeviceGetAttribute": [P, U, INT],
    "hipGetDevicePropertiesR0000": [P, INT],
    "hipDeviceTotalMem": [P, INT],
    "hipMemGetInfo": [P, P],
    "hipStreamCreateWithFlags": [P, U],
    "hipStreamDestroy": [P],
    "hipStreamQuery": [P],
    "hipStreamSynchronize": [P],
    "hipStreamWaitEvent": [P, P, U],
    "hipEventCreateWithFlags": [P, U],
    "hipEventDestroy": [P],
    "hipEventRecord": [P, P],
    "hipEventQuery": [P],
    "hipEventSynchronize": [P],
    "hipEventElapsedTime": [P, P, P],
    "hipHostMalloc": [P, ctypes.c_size_t, U],
    "hipHostGetDevicePointer": [P, P, U],
    "hipHostFree": [P],
    "hipStreamWaitValue64": [P, P, U64, U, U64],
    "hipLaunchHostFunc": [P, HOST_FN, P],
    "hipStreamAddCallback": [P, CALLBACK, P, U],
    "hipMalloc": [P, SIZE],
    "hipFree": [P],
    "hipMallocAsync": [P, SIZE, P],
    "hipFreeAsync": [P, P],
    "hipMemcpyHtoDAsync": [P, P, SIZE, P],
    "hipMemcpyDtoHAsync": [P, P, SIZE, P],
    "hipMemcpyDtoDAsync": [P, P, SIZE, P],
    "hipMemcpyPeerAsync": [P, INT, P, INT, SIZE, P],
    "hipMemcpy2DAsync": [P, SIZE, P, SIZE, SIZE, SIZE, U, P],
    "hipMemsetD8Async": [P, U8, SIZE, P],
    "hipMemsetD16Async": [P, U16, SIZE, P],
    "hipMemsetD32Async": [P, INT, SIZE, P],
    "hipPointerGetAttribute": [P, U, P],
    "hipDeviceEnablePeerAccess": [INT, U],
    "hipDeviceGetDefaultMemPool": [P, INT],
    "hipMemPoolSetAttribute": [P, U, P],
    "hipMemPoolSetAccess": [P, P, SIZE],
    "hipStreamBeginCapture": [P, U],
    "hipStreamEndCapture": [P, P],
    "hipStreamIsCapturing": [P, P],
    "hipGraphInstantiateWithFlags": [P, P, U64],
    "hipGraphLaunch": [P, P],
    "hipGraphExecDestroy": [P],
    "hipGraphDestroy": [P],
    # Control API
    "fake_gpu_fail": [ctypes.c_char_p, INT, INT],
    "fake_gpu_reset": [],
    "fake_gpu_calls": [ctypes.c_char_p],
    "fake_gpu_live": [ctypes.c_char_p],
    "fake_gpu_async_error": [P, INT],
    "fake_gpu_stream_flags": [P],
    "fake_gpu_special_stream": [ctypes.c_char_p, INT],
    "fake_gpu_threads": [],
    "fake_gpu_violations": [],
    "fake_gpu_violation": [INT],
    "fake_gpu_clear_violations": [],
    "fake_gpu_peer_access": [INT, INT],
    "fake_gpu_pool_access": [INT, INT],
    "fake_gpu_pool_release_threshold": [INT],
    "fake_gpu_pinned_bytes": [INT],
    "fake_gpu_reset_pinned_peak": [],
}
RESTYPES = {
    "hipGetErrorName": ctypes.c_char_p,
    "hipGetErrorString": ctypes.c_char_p,
    "fake_gpu_reset": None,
    "fake_gpu_stream_flags": ctypes.c_uint,
    "fake_gpu_special_stream": ctypes.c_void_p,
    "fake_gpu_violation": ctypes.c_char_p,
    "fake_gpu_clear_violations": None,
    "fake_gpu_pool_release_threshold": ctypes.c_ulonglong,
    "fake_gpu_pinned_bytes": ctypes.c_ulonglong,
    "fake_gpu_reset_pinned_peak": None,
}

CUDA_NAMES = """cuInit cuGetErrorName cuGetErrorString cuDeviceGetCount cuDeviceGet
cuDeviceGetName cuDeviceGetAttribute cuDeviceTotalMem cuDeviceCanAccessPeer
cuDevicePrimaryCtxRetain cuCtxPushCurrent cuCtxPopCurrent cuCtxGetCurrent
cuCtxEnablePeerAccess cuMemGetInfo
cuDeviceGetGraphMemAttribute cuStreamCreate cuStreamDestroy cuStreamQuery
cuStreamSynchronize cuStreamWaitEvent cuEventCreate cuEventDestroy cuEventRecord
cuEventQuery cuEventSynchronize cuEventElapsedTime cuMemHostAlloc
cuMemHostGetDevicePointer cuMemFreeHost cuStreamWaitValue64 cuLaunchHostFunc
cuStreamAddCallback cuMemAlloc cuMemFree cuMemAllocAsync cuMemFreeAsync
cuMemcpyHtoDAsync cuMemcpyDtoHAsync cuMemcpyDtoDAsync cuMemcpyPeerAsync
cuMemcpy2DAsync cuMemsetD8Async cuMemsetD16Async cuMemsetD32Async
cuPointerGetAttribute cuDeviceGetDefaultMemPool cuMemPoolSetAttribute
cuMemPoolSetAccess""".split()
CUDA_V2 = """cuDeviceTotalMem cuCtxPushCurrent cuCtxPopCurrent cuMemGetInfo
cuStreamDestroy cuEventDestroy cuMemHostGetDevicePointer cuStreamWaitValue64
cuEventElapsedTime cuMemAlloc cuMemFree cuMemcpyHtoDAsync cuMemcpyDtoHAsync
cuMemcpyDtoDAsync cuMemcpy2DAsync""".split()
HIP_NAMES = """hipInit hipGetErrorName hipGetErrorString hipGetDeviceCount hipGetDevice
hipSetDevice hipDeviceGetName hipDeviceGetAttribute hipGetDeviceProperties
hipGetDevicePropertiesR0000 hipDeviceTotalMem hipDeviceCanAccessPeer hipMemGetInfo
hipDeviceGetGraphMemAttribute hipStreamCreateWithFlags hipStreamDestroy
hipStreamQuery hipStreamSynchronize hipStreamWaitEvent hipEventCreateWithFlags
hipEventDestroy hipEventRecord hipEventQuery hipEventSynchronize
hipEventElapsedTime hipHostMalloc hipHostGetDevicePointer hipHostFree
hipStreamWaitValue64 hipLaunchHostFunc hipStreamAddCallback hipMalloc hipFree
hipMallocAsync hipFreeAsync hipMemcpyHtoDAsync hipMemcpyDtoHAsync
hipMemcpyDtoDAsync hipMemcpyPeerAsync hipMemcpy2DAsync hipMemsetD8Async
hipMemsetD16Async hipMemsetD32Async hipPointerGetAttribute hipDeviceEnablePeerAccess
hipDeviceGetDefaultMemPool hipMemPoolSetAttribute hipMemPoolSetAccess""".split()


class Memcpy2D(ctypes.Structure):
    """CUDA_MEMCPY2D (cu_memcpy2d)."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t),
        ("srcY", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_uint),
        ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64),
        ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t),
        ("dstY", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_uint),
        ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64),
        ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t),
        ("Height", ctypes.c_size_t),
    ]


class MemAccessDesc(ctypes.Structure):
    """CUmemAccessDesc / hipMemAccessDesc (one layout)."""

    _fields_ = [("type", U), ("id", INT), ("flags", U)]


MEMORYTYPE_HOST, MEMORYTYPE_DEVICE = 1, 2
ACCESS_NONE, ACCESS_READWRITE = 0, 3
LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE / hipMemLocationTypeDevice
RELEASE_THRESHOLD = 4  # CU_MEMPOOL_ATTR_ / hipMemPoolAttrReleaseThreshold


def load(path: Path | str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for name, args in SIGNATURES.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = RESTYPES.get(name, ctypes.c_int)
    for name, restype in RESTYPES.items():
        if hasattr(lib, name):
            getattr(lib, name).restype = restype
    lib.hipGetErrorName.argtypes = [U]
    lib.hipGetErrorString.argtypes = [U]
    return lib


def ref(value):
    return ctypes.byref(value)


class Ctx:
    """cuCtxPushCurrent / cuCtxPopCurrent of a device's primary context."""

    def __init__(self, lib, device=0):
        self.lib = lib
        self.ctx = P()
        assert lib.cuDevicePrimaryCtxRetain(ref(self.ctx), device) == SUCCESS

    def __enter__(self):
        assert self.lib.cuCtxPushCurrent_v2(self.ctx) == SUCCESS
        return self

    def __exit__(self, *exc):
        popped = P()
        assert self.lib.cuCtxPopCurrent_v2(ref(popped)) == SUCCESS
        assert popped.value == self.ctx.value


class Api:
    """The few calls the tests make, spelled once for CUDA and once for HIP."""

    def __init__(self, lib, api):
        self.lib, self.api = lib, api
        self._keep = []

    def call(self, cu_name, hip_name, *args):
        return getattr(self.lib, cu_name if self.api == "cuda" else hip_name)(*args)

    def stream(self, flags=NON_BLOCKING):
        s = P()
        rc = self.call("cuStreamCreate", "hipStreamCreateWithFlags", ref(s), flags)
        assert rc == SUCCESS
        return s

    def destroy(self, s):
        return self.call("cuStreamDestroy_v2", "hipStreamDestroy", s)

    def query(self, s):
        return self.call("cuStreamQuery", "hipStreamQuery", s)

    def sync(self, s):
        return self.call("cuStreamSynchronize", "hipStreamSynchronize", s)

    def event(self, flags=0):
        e = P()
        assert self.call("cuEventCreate", "hipEventCreateWithFlags", ref(e), flags) == 0
        return e

    def event_destroy(self, e):
        return self.call("cuEventDestroy_v2", "hipEventDestroy", e)

    def record(self, e, s):
        return self.call("cuEventRecord", "hipEventRecord", e, s)

    def event_query(self, e):
        return self.call("cuEventQuery", "hipEventQuery", e)

    def event_sync(self, e):
        return self.call("cuEventSynchronize", "hipEventSynchronize", e)

    def elapsed(self, a, b):
        ms = ctypes.c_float(-1)
        rc = self.call("cuEventElapsedTime", "hipEventElapsedTime", ref(ms), a, b)
        return rc, ms.value

    def wait_event(self, s, e):
        return self.call("cuStreamWaitEvent", "hipStreamWaitEvent", s, e, 0)

    def host_fn(self, s, fn):
        c = HOST_FN(lambda _data: fn())
        self._keep.append(c)
        return self.call("cuLaunchHostFunc", "hipLaunchHostFunc", s, c, None)

    def callback(self, s, fn):
        c = CALLBACK(lambda stream, status, _data: fn(stream, status))
        self._keep.append(c)
        return self.call("cuStreamAddCallback", "hipStreamAddCallback", s, c, None, 0)

    def host_alloc(self, size=8):
        p = P()
        flags = PORTABLE | DEVICEMAP
        assert self.call("cuMemHostAlloc", "hipHostMalloc", ref(p), size, flags) == 0
        return p.value

    def device_ptr(self, host):
        if self.api == "cuda":
            d = ctypes.c_uint64()
            rc = self.lib.cuMemHostGetDevicePointer_v2(ref(d), P(host), 0)
        else:
            d = P()
            rc = self.lib.hipHostGetDevicePointer(ref(d), P(host), 0)
        return rc, d.value

    def free_host(self, host):
        return self.call("cuMemFreeHost", "hipHostFree", P(host))

    @contextlib.contextmanager
    def on_device(self, device):
        """Makes ``device`` current (CUDA: its primary context) meanwhile."""
        if self.api == "cuda":
            with Ctx(self.lib, device):
                yield
            return
        old = ctypes.c_int()
        assert self.lib.hipGetDevice(ref(old)) == 0
        assert self.lib.hipSetDevice(device) == 0
        try:
            yield
        finally:
            assert self.lib.hipSetDevice(old.value) == 0

    def value_gate(self, s):
        """Blocks stream ``s`` on a pinned flag: a gate that, unlike a host
        function, keeps the device's callback thread free.  Returns
        ``(flag, release)``; free ``flag`` once ``s`` is past the gate."""
        flag = self.host_alloc(8)
        return flag, self.hold(s, flag)

    def hold(self, s, flag):
        """The gate of value_gate on an existing mapped pinned ``flag`` (8
        bytes, reusable once ``s`` is past it): returns ``release``."""
        _, dev = self.device_ptr(flag)
        word = ctypes.c_uint64.from_address(flag)
        word.value = 0
        assert self.wait_value(s, dev, 1) == 0

        def release():
            word.value = 1

        return release

    # Device memory: pointers are ints, results (rc, value) where a value
    # comes back.

    def malloc(self, size):
        if self.api == "cuda":
            d = ctypes.c_uint64()
            return self.lib.cuMemAlloc_v2(ref(d), size), d.value
        p = P()
        return self.lib.hipMalloc(ref(p), size), p.value

    def free(self, ptr):
        return self.call("cuMemFree_v2", "hipFree", ptr)

    def malloc_async(self, size, s):
        if self.api == "cuda":
            d = ctypes.c_uint64()
            return self.lib.cuMemAllocAsync(ref(d), size, s), d.value
        p = P()
        return self.lib.hipMallocAsync(ref(p), size, s), p.value

    def free_async(self, ptr, s):
        return self.call("cuMemFreeAsync", "hipFreeAsync", ptr, s)

    def h2d(self, dst, src, n, s):
        return self.call("cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync", dst, src, n, s)

    def d2h(self, dst, src, n, s):
        return self.call("cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync", dst, src, n, s)

    def d2d(self, dst, src, n, s):
        return self.call("cuMemcpyDtoDAsync_v2", "hipMemcpyDtoDAsync", dst, src, n, s)

    def peer(self, dst, dst_device, src, src_device, n, s):
        if self.api == "hip":
            return self.lib.hipMemcpyPeerAsync(dst, dst_device, src, src_device, n, s)
        ctx = [P(), P()]
        for c, d in zip(ctx, (dst_device, src_device), strict=True):
            assert self.lib.cuDevicePrimaryCtxRetain(ref(c), d) == 0
        return self.lib.cuMemcpyPeerAsync(dst, ctx[0], src, ctx[1], n, s)

    def memset(self, bits, dst, value, count, s):
        name = {8: "D8", 16: "D16", 32: "D32"}[bits]
        return self.call(
            f"cuMemset{name}Async", f"hipMemset{name}Async", dst, value, count, s
        )

    def pointer_device(self, ptr, attribute=9):
        d = ctypes.c_int(-1)
        fn = "cuPointerGetAttribute" if self.api == "cuda" else "hipPointerGetAttribute"
        return getattr(self.lib, fn)(ref(d), attribute, ptr), d.value

    def copy_2d(self, dst, dst_pitch, src, src_pitch, width, height, s, kind):
        """A 2-D copy; ``kind`` as hipMemcpyKind: bit 0 says the destination
        is device memory, bit 1 the source (0 host to host ... 3 device to
        device)."""
        if self.api == "hip":
            return self.lib.hipMemcpy2DAsync(
                dst, dst_pitch, src, src_pitch, width, height, kind, s
            )
        c = Memcpy2D(WidthInBytes=width, Height=height)
        for side, ptr, pitch, device in (
            ("dst", dst, dst_pitch, kind & 1),
            ("src", src, src_pitch, kind & 2),
        ):
            setattr(
                c, side + "MemoryType", MEMORYTYPE_DEVICE if device else MEMORYTYPE_HOST
            )
            setattr(c, side + ("Device" if device else "Host"), ptr)
            setattr(c, side + "Pitch", pitch)
        return self.lib.cuMemcpy2DAsync_v2(ref(c), s)

    def enable_peer(self, peer):
        """The current device enables access to ``peer``'s memory."""
        if self.api == "hip":
            return self.lib.hipDeviceEnablePeerAccess(peer, 0)
        ctx = P()
        assert self.lib.cuDevicePrimaryCtxRetain(ref(ctx), peer) == 0
        return self.lib.cuCtxEnablePeerAccess(ctx, 0)

    def default_pool(self, device):
        pool = P()
        rc = self.call(
            "cuDeviceGetDefaultMemPool", "hipDeviceGetDefaultMemPool", ref(pool), device
        )
        assert rc == SUCCESS
        return pool

    def pool_access(self, pool, device, flags):
        desc = MemAccessDesc(LOCATION_DEVICE, device, flags)
        return self.call(
            "cuMemPoolSetAccess", "hipMemPoolSetAccess", pool, ref(desc), 1
        )

    def pool_threshold(self, pool, value):
        v = ctypes.c_uint64(value)
        return self.call(
            "cuMemPoolSetAttribute",
            "hipMemPoolSetAttribute",
            pool,
            RELEASE_THRESHOLD,
            ref(v),
        )

    # Stream capture and graphs: results (rc, value) where a value comes
    # back.

    def begin_capture(self, s, mode=MODE_RELAXED):
        return self.call("cuStreamBeginCapture_v2", "hipStreamBeginCapture", s, mode)

    def end_capture(self, s):
        g = P()
        rc = self.call("cuStreamEndCapture", "hipStreamEndCapture", s, ref(g))
        return rc, g

    def capture_status(self, s):
        status = ctypes.c_uint(99)
        rc = self.call("cuStreamIsCapturing", "hipStreamIsCapturing", s, ref(status))
        return rc, status.value

    def instantiate(self, g):
        e = P()
        rc = self.call(
            "cuGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags", ref(e), g, 0
        )
        return rc, e

    def launch(self, e, s):
        return self.call("cuGraphLaunch", "hipGraphLaunch", e, s)

    def graph_destroy(self, g):
        return self.call("cuGraphDestroy", "hipGraphDestroy", g)

    def exec_destroy(self, e):
        return self.call("cuGraphExecDestroy", "hipGraphExecDestroy", e)

    def wait_value(self, s, addr, value):
        if self.api == "cuda":
            return self.lib.cuStreamWaitValue64_v2(s, addr, value, WAIT_EQ)
        return self.lib.hipStreamWaitValue64(s, P(addr), value, WAIT_EQ, 2**64 - 1)


def gate():
    """A host function that blocks its stream until ``release.set()``."""
    release = threading.Event()
    return release, lambda: release.wait(WAIT)


def wait_until(cond, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def violations(lib) -> list[str]:
    """The violations kept since the last clear (the first 64)."""
    out = []
    for i in range(lib.fake_gpu_violations()):
        text = lib.fake_gpu_violation(i)
        if text is None:
            break
        out.append(text.decode())
    return out


def take_violations(lib) -> list[str]:
    """violations(lib), then clears them."""
    v = violations(lib)
    lib.fake_gpu_clear_violations()
    return v


def pattern(n, seed=1) -> bytes:
    """``n`` bytes that differ with ``seed``."""
    return bytes((i * 7 + seed) % 251 for i in range(n))


def pinned(api, data):
    """A pinned host buffer holding ``data``: (address, ctypes view)."""
    host = api.host_alloc(len(data))
    view = (ctypes.c_char * len(data)).from_address(host)
    view[:] = data
    return host, view


# A child interpreter's prologue: ``lib`` (initialised) and this module as
# ``t``; the code under test fills ``out``, printed as JSON at the end.
CHILD_PROLOGUE = """
import ctypes, json, sys, threading, time
sys.path.insert(0, sys.argv[2])
import fake_driver.fakelib as t
lib = t.load(sys.argv[1])
assert lib.cuInit(0) == 0
out = {}
"""


def child_api(lib, api: str) -> Api:
    """An Api for a child interpreter, with device 0 current for good."""
    if api == "cuda":
        Ctx(lib, 0).__enter__()
    else:
        assert lib.hipSetDevice(0) == 0
    return Api(lib, api)


def run_child(lib_path, code: str, timeout: float = 60, **env):
    """Runs ``code`` after CHILD_PROLOGUE in a fresh interpreter whose only
    FAKE_GPU_* variables are ``env``; returns ``(out, stderr)``."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    e.update({k: str(v) for k, v in env.items()})
    script = CHILD_PROLOGUE + code + "\nprint(json.dumps(out))\n"
    r = subprocess.run(
        [sys.executable, "-c", script, str(lib_path), str(TESTS_DIR)],
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1]), r.stderr
