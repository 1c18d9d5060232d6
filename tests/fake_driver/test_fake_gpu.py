"""Self-test of the fake GPU driver, through ctypes only (no max.driver).

The library is built once per session into a private directory, so this
process is the first to load it and its environment-derived configuration
is the default one (2 devices); configurations that need other environment
variables run in a child interpreter.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .build import build_fake_driver

WAIT = 10.0
# Extra compiler flags for the library under test, e.g. a ThreadSanitizer
# run: FAKE_DRIVER_CFLAGS=-fsanitize=thread LD_PRELOAD=$(cc
# -print-file-name=libtsan.so) python -m pytest tests/fake_driver
CFLAGS = tuple(os.environ.get("FAKE_DRIVER_CFLAGS", "").split())

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NOT_INITIALIZED = 0, 1, 2, 3
NO_DEVICE, INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE = 100, 101, 201, 400
NOT_FOUND, NOT_READY, ILLEGAL_ADDRESS, LAUNCH_FAILED = 500, 600, 700, 719
NON_BLOCKING, DISABLE_TIMING, PORTABLE, DEVICEMAP, WAIT_EQ = 1, 2, 1, 2, 1

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p)
P = ctypes.c_void_p
U = ctypes.c_uint
INT = ctypes.c_int
U64 = ctypes.c_uint64

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
    # Control API
    "fake_gpu_fail": [ctypes.c_char_p, INT, INT],
    "fake_gpu_reset": [],
    "fake_gpu_calls": [ctypes.c_char_p],
    "fake_gpu_live": [ctypes.c_char_p],
    "fake_gpu_async_error": [P, INT],
    "fake_gpu_stream_flags": [P],
    "fake_gpu_threads": [],
}
RESTYPES = {
    "hipGetErrorName": ctypes.c_char_p,
    "hipGetErrorString": ctypes.c_char_p,
    "fake_gpu_reset": None,
    "fake_gpu_stream_flags": ctypes.c_uint,
}

CUDA_NAMES = """cuInit cuGetErrorName cuGetErrorString cuDeviceGetCount cuDeviceGet
cuDeviceGetName cuDeviceGetAttribute cuDeviceTotalMem cuDeviceCanAccessPeer
cuDevicePrimaryCtxRetain cuCtxPushCurrent cuCtxPopCurrent cuMemGetInfo
cuDeviceGetGraphMemAttribute cuStreamCreate cuStreamDestroy cuStreamQuery
cuStreamSynchronize cuStreamWaitEvent cuEventCreate cuEventDestroy cuEventRecord
cuEventQuery cuEventSynchronize cuEventElapsedTime cuMemHostAlloc
cuMemHostGetDevicePointer cuMemFreeHost cuStreamWaitValue64 cuLaunchHostFunc
cuStreamAddCallback""".split()
CUDA_V2 = """cuDeviceTotalMem cuCtxPushCurrent cuCtxPopCurrent cuMemGetInfo
cuStreamDestroy cuEventDestroy cuMemHostGetDevicePointer cuStreamWaitValue64
cuEventElapsedTime""".split()
HIP_NAMES = """hipInit hipGetErrorName hipGetErrorString hipGetDeviceCount hipGetDevice
hipSetDevice hipDeviceGetName hipDeviceGetAttribute hipGetDeviceProperties
hipGetDevicePropertiesR0000 hipDeviceTotalMem hipDeviceCanAccessPeer hipMemGetInfo
hipDeviceGetGraphMemAttribute hipStreamCreateWithFlags hipStreamDestroy
hipStreamQuery hipStreamSynchronize hipStreamWaitEvent hipEventCreateWithFlags
hipEventDestroy hipEventRecord hipEventQuery hipEventSynchronize
hipEventElapsedTime hipHostMalloc hipHostGetDevicePointer hipHostFree
hipStreamWaitValue64 hipLaunchHostFunc hipStreamAddCallback""".split()


def load(path: Path) -> ctypes.CDLL:
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


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fake_gpu")


@pytest.fixture(scope="session")
def lib_path(build_dir):
    return build_fake_driver(build_dir, extra_cflags=CFLAGS)


@pytest.fixture(scope="session")
def lib(lib_path):
    # The first call reads the environment: make it the default one.
    saved = {
        k: os.environ.pop(k) for k in list(os.environ) if k.startswith("FAKE_GPU_")
    }
    try:
        lib = load(lib_path)
        assert lib.cuInit(0) == SUCCESS
    finally:
        os.environ.update(saved)
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


@pytest.fixture
def cu(lib):
    lib.fake_gpu_reset()
    with Ctx(lib):
        yield lib
    lib.fake_gpu_reset()


@pytest.fixture
def hip(lib):
    lib.fake_gpu_reset()
    assert lib.hipSetDevice(0) == SUCCESS
    yield lib
    lib.fake_gpu_reset()


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

    def wait_value(self, s, addr, value):
        if self.api == "cuda":
            return self.lib.cuStreamWaitValue64_v2(s, addr, value, WAIT_EQ)
        return self.lib.hipStreamWaitValue64(s, P(addr), value, WAIT_EQ, 2**64 - 1)


@pytest.fixture(params=["cuda", "hip"])
def api(request, lib):
    lib.fake_gpu_reset()
    if request.param == "cuda":
        with Ctx(lib):
            yield Api(lib, "cuda")
    else:
        assert lib.hipSetDevice(0) == SUCCESS
        yield Api(lib, "hip")
    lib.fake_gpu_reset()


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


# --------------------------------------------------------------------------
# Exports


def test_exports_every_entry_point(lib):
    for name in CUDA_NAMES + HIP_NAMES:
        assert hasattr(lib, name), name
    for name in CUDA_V2:
        assert hasattr(lib, name + "_v2"), name
    assert hasattr(lib, "cuGetProcAddress_v2")
    assert hasattr(lib, "cuGetProcAddress")
    for name in SIGNATURES:
        if name.startswith("fake_gpu_"):
            assert hasattr(lib, name)
    assert not hasattr(lib, "fake_enter")  # internals stay hidden
    assert not hasattr(lib, "fake_stream_create")


def test_versioned_symbols_are_the_same_code(lib):
    for name in CUDA_V2:
        plain = ctypes.cast(getattr(lib, name), P).value
        assert ctypes.cast(getattr(lib, name + "_v2"), P).value == plain, name


def proc(lib, symbol, version=12080):
    pfn, status = P(), ctypes.c_int(-1)
    rc = lib.cuGetProcAddress_v2(symbol.encode(), ref(pfn), version, 0, ref(status))
    return rc, pfn.value, status.value


# Exported for the self-test's own use, not in the project's entry-point
# list, so cuGetProcAddress does not resolve them.
FAKE_ONLY = {"cuDeviceTotalMem", "cuStreamSynchronize", "cuEventSynchronize"}


def test_get_proc_address_resolves_base_names(lib):
    for name in sorted(set(CUDA_NAMES) - FAKE_ONLY):
        rc, fn, status = proc(lib, name)
        assert (rc, status) == (SUCCESS, 0), name
        expected = name + "_v2" if name in CUDA_V2 else name
        assert fn == ctypes.cast(getattr(lib, expected), P).value, name
    assert proc(lib, "cuNoSuchThing") == (NOT_FOUND, None, 1)
    assert proc(lib, "cuStreamDestroy_v2")[0] == NOT_FOUND  # base names only
    # Older than the ABI the project declares: not sufficient.
    assert proc(lib, "cuEventElapsedTime", 12000) == (NOT_FOUND, None, 2)
    rc, fn, _ = proc(lib, "cuGetProcAddress")
    assert rc == SUCCESS
    assert fn == ctypes.cast(lib.cuGetProcAddress_v2, P).value


# --------------------------------------------------------------------------
# Devices


def test_cuda_devices(cu):
    n = ctypes.c_int()
    assert cu.cuDeviceGetCount(ref(n)) == SUCCESS and n.value == 2
    d = ctypes.c_int()
    assert cu.cuDeviceGet(ref(d), 1) == SUCCESS and d.value == 1
    assert cu.cuDeviceGet(ref(d), 2) == INVALID_DEVICE
    name = ctypes.create_string_buffer(64)
    assert cu.cuDeviceGetName(name, 64, 1) == SUCCESS
    assert name.value == b"Fake GPU 1"
    v = ctypes.c_int()
    assert cu.cuDeviceGetAttribute(ref(v), 75, 0) == SUCCESS and v.value == 9
    assert cu.cuDeviceGetAttribute(ref(v), 76, 0) == SUCCESS and v.value == 0
    assert cu.cuDeviceGetAttribute(ref(v), 18, 0) == SUCCESS and v.value == 0
    assert cu.cuDeviceGetAttribute(ref(v), 9999, 0) == INVALID_VALUE
    total, free = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuDeviceTotalMem_v2(ref(total), 0) == SUCCESS
    assert total.value == 80 << 30
    assert cu.cuDeviceCanAccessPeer(ref(v), 0, 1) == SUCCESS and v.value == 1
    assert cu.cuDeviceCanAccessPeer(ref(v), 1, 1) == SUCCESS and v.value == 0
    graph = ctypes.c_uint64(123)
    assert cu.cuDeviceGetGraphMemAttribute(0, 2, ref(graph)) == SUCCESS
    assert graph.value == 0
    # Free memory drops by what is allocated on the current context's device.
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    before = free.value
    host = P()
    assert cu.cuMemHostAlloc(ref(host), 1 << 20, DEVICEMAP) == SUCCESS
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    assert free.value == before - (1 << 20)
    assert cu.cuMemFreeHost(host) == SUCCESS
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    assert free.value == before


def test_hip_devices(hip):
    n = ctypes.c_int()
    assert hip.hipGetDeviceCount(ref(n)) == SUCCESS and n.value == 2
    prop = ctypes.create_string_buffer(8192)
    assert hip.hipGetDevicePropertiesR0000(prop, 1) == SUCCESS
    assert prop.raw[:16].rstrip(b"\0") == b"Fake GPU 1"
    # gcnArchName follows name[256], 8 size_t/int fields ...: find it by value.
    assert b"gfx942\0" in prop.raw
    assert hip.hipGetDevicePropertiesR0000(prop, 5) == INVALID_DEVICE
    v = ctypes.c_int(-1)
    assert hip.hipDeviceGetAttribute(ref(v), 16, 0) == SUCCESS and v.value == 0
    # The current device is per thread.
    assert hip.hipSetDevice(1) == SUCCESS
    seen, other = [], ctypes.c_int(-1)
    t = threading.Thread(
        target=lambda: (hip.hipGetDevice(ref(other)), seen.append(other.value))
    )
    t.start()
    t.join()
    d = ctypes.c_int(-1)
    assert hip.hipGetDevice(ref(d)) == SUCCESS and d.value == 1
    assert seen == [0]
    assert hip.hipSetDevice(2) == INVALID_DEVICE
    s = P()
    assert hip.hipStreamCreateWithFlags(ref(s), NON_BLOCKING) == SUCCESS
    assert hip.hipSetDevice(0) == SUCCESS
    e = P()
    assert hip.hipEventCreateWithFlags(ref(e), DISABLE_TIMING) == SUCCESS
    # Event of device 0, stream of device 1: like CUDA, an invalid handle.
    assert hip.hipEventRecord(e, s) == INVALID_HANDLE
    assert hip.hipEventDestroy(e) == SUCCESS
    assert hip.hipStreamDestroy(s) == SUCCESS


def test_hip_device_properties_layout(hip):
    class Prop(ctypes.Structure):
        _fields_ = [
            ("name", ctypes.c_char * 256),
            ("totalGlobalMem", ctypes.c_size_t),
            ("sharedMemPerBlock", ctypes.c_size_t),
            ("ints", ctypes.c_int * 12),
            ("totalConstMem", ctypes.c_size_t),
            ("major", ctypes.c_int),
            ("minor", ctypes.c_int),
            ("more", ctypes.c_int * 10),
            ("maxSharedMemoryPerMultiProcessor", ctypes.c_size_t),
            ("isMultiGpuBoard", ctypes.c_int),
            ("canMapHostMemory", ctypes.c_int),
            ("gcnArch", ctypes.c_int),
            ("gcnArchName", ctypes.c_char * 256),
        ]

    buf = ctypes.create_string_buffer(8192)
    assert hip.hipGetDevicePropertiesR0000(buf, 0) == SUCCESS
    p = Prop.from_buffer(buf)
    assert p.name == b"Fake GPU 0"
    assert p.totalGlobalMem == 80 << 30
    assert (p.major, p.minor) == (9, 0)
    assert p.gcnArchName == b"gfx942"
    assert buf.raw[ctypes.sizeof(Prop) :] == b"\0" * (8192 - ctypes.sizeof(Prop))


def test_error_names(lib):
    s = ctypes.c_char_p()
    for code, name in [
        (0, b"CUDA_SUCCESS"),
        (1, b"CUDA_ERROR_INVALID_VALUE"),
        (201, b"CUDA_ERROR_INVALID_CONTEXT"),
        (600, b"CUDA_ERROR_NOT_READY"),
        (719, b"CUDA_ERROR_LAUNCH_FAILED"),
    ]:
        assert lib.cuGetErrorName(code, ref(s)) == SUCCESS
        assert s.value == name
    assert lib.cuGetErrorString(400, ref(s)) == SUCCESS
    assert s.value == b"invalid resource handle"
    assert lib.cuGetErrorName(12345, ref(s)) == INVALID_VALUE
    assert s.value is None
    assert lib.hipGetErrorName(400) == b"hipErrorInvalidHandle"
    assert lib.hipGetErrorName(719) == b"hipErrorLaunchFailure"
    assert lib.hipGetErrorName(12345) == b"hipErrorUnknown"
    assert lib.hipGetErrorString(600) == b"device not ready"


# --------------------------------------------------------------------------
# Contexts


def test_cuda_calls_need_a_current_context(lib):
    lib.fake_gpu_reset()
    assert lib.fake_gpu_live(b"context_push") == 0
    out = P()
    size = ctypes.c_size_t()
    assert lib.cuStreamCreate(ref(out), NON_BLOCKING) == INVALID_CONTEXT
    assert lib.cuEventCreate(ref(out), 0) == INVALID_CONTEXT
    assert lib.cuMemHostAlloc(ref(out), 8, DEVICEMAP) == INVALID_CONTEXT
    assert lib.cuMemGetInfo_v2(ref(size), ref(size)) == INVALID_CONTEXT
    assert lib.cuCtxPopCurrent_v2(ref(out)) == INVALID_CONTEXT
    with Ctx(lib, 1):
        assert lib.fake_gpu_live(b"context_push") == 1
        with Ctx(lib, 0):
            assert lib.fake_gpu_live(b"context_push") == 2
        # The stack is per thread.
        depth = []
        t = threading.Thread(
            target=lambda: depth.append(lib.fake_gpu_live(b"context_push"))
        )
        t.start()
        t.join()
        assert depth == [0]
    assert lib.fake_gpu_live(b"context_push") == 0
    assert lib.cuCtxPushCurrent_v2(P(12345)) == INVALID_CONTEXT


# --------------------------------------------------------------------------
# Streams


def test_stream_flags_are_recorded(api):
    s = api.stream(NON_BLOCKING)
    t = api.stream(0)
    assert api.lib.fake_gpu_stream_flags(s) == NON_BLOCKING
    assert api.lib.fake_gpu_stream_flags(t) == 0
    assert api.destroy(s) == api.destroy(t) == SUCCESS
    assert api.lib.fake_gpu_stream_flags(s) == 0xFFFFFFFF
    assert api.destroy(s) == INVALID_HANDLE
    assert api.query(None) == INVALID_HANDLE  # no legacy NULL stream


def test_fifo_order_on_a_thread_of_its_own(api):
    s = api.stream()
    ran, idents = [], set()
    for i in range(200):
        assert (
            api.host_fn(
                s, lambda i=i: (ran.append(i), idents.add(threading.get_ident()))
            )
            == 0
        )
    assert api.callback(s, lambda st, status: ran.append(("cb", st, status))) == 0
    assert api.sync(s) == SUCCESS
    assert ran[:200] == list(range(200))
    assert ran[200] == ("cb", s.value, 0)
    assert len(idents) == 1 and threading.get_ident() not in idents
    assert api.query(s) == SUCCESS
    assert api.destroy(s) == SUCCESS


def test_streams_run_concurrently_and_query(api):
    a, b = api.stream(), api.stream()
    release, blocker = gate()
    ran = []
    api.host_fn(a, blocker)
    api.host_fn(a, lambda: ran.append("a"))
    api.host_fn(b, lambda: ran.append("b"))
    assert api.sync(b) == SUCCESS  # b is not held up by a
    assert ran == ["b"]
    assert api.query(a) == NOT_READY
    release.set()
    assert api.sync(a) == SUCCESS
    assert api.query(a) == SUCCESS
    assert ran == ["b", "a"]
    api.destroy(a)
    api.destroy(b)


def test_destroy_with_pending_work_completes_it(api):
    # Threads of streams destroyed by earlier tests may still be exiting.
    base_threads = api.lib.fake_gpu_threads()
    base_streams = api.lib.fake_gpu_live(b"stream")
    s = api.stream()
    assert api.lib.fake_gpu_threads() <= base_threads + 1
    release, blocker = gate()
    done = threading.Event()
    api.host_fn(s, blocker)
    api.host_fn(s, done.set)
    assert api.destroy(s) == SUCCESS
    assert api.lib.fake_gpu_live(b"stream") == base_streams
    assert api.query(s) == INVALID_HANDLE
    assert not done.is_set()
    release.set()
    assert done.wait(WAIT)
    assert wait_until(lambda: api.lib.fake_gpu_threads() <= base_threads)


def test_no_thread_growth(api):
    base = api.lib.fake_gpu_threads()
    for _ in range(100):
        s = api.stream()
        api.host_fn(s, lambda: None)
        api.destroy(s)
    assert wait_until(lambda: api.lib.fake_gpu_threads() <= base)


# --------------------------------------------------------------------------
# Events


def test_event_completion_and_rerecord(api):
    s, other = api.stream(), api.stream()
    e = api.event(DISABLE_TIMING)
    assert api.event_query(e) == SUCCESS  # never recorded
    assert api.event_sync(e) == SUCCESS
    release, blocker = gate()
    api.host_fn(s, blocker)
    assert api.record(e, s) == SUCCESS
    assert api.event_query(e) == NOT_READY
    api.record(e, other)  # re-recording moves it
    assert api.event_sync(e) == SUCCESS
    api.record(e, s)
    assert api.event_query(e) == NOT_READY
    release.set()
    assert api.event_sync(e) == SUCCESS
    assert api.event_query(e) == SUCCESS
    assert api.event_destroy(e) == SUCCESS
    assert api.event_query(e) == INVALID_HANDLE
    api.destroy(s)
    api.destroy(other)


def test_cross_stream_wait_takes_the_record_in_effect(api):
    a, b, c = api.stream(), api.stream(), api.stream()
    e = api.event(DISABLE_TIMING)
    unrecorded = api.event(DISABLE_TIMING)
    ran = []
    assert api.wait_event(b, unrecorded) == SUCCESS  # no wait at all
    release, blocker = gate()
    api.host_fn(a, blocker)
    api.record(e, a)
    assert api.wait_event(b, e) == SUCCESS
    api.host_fn(b, lambda: ran.append("b"))
    api.record(e, c)  # a later re-record does not release b
    assert api.event_sync(e) == SUCCESS
    time.sleep(0.05)
    assert ran == [] and api.query(b) == NOT_READY
    release.set()
    assert api.sync(b) == SUCCESS
    assert ran == ["b"]
    for x in (a, b, c):
        api.destroy(x)
    api.event_destroy(e)
    api.event_destroy(unrecorded)


def test_elapsed_time(api):
    s = api.stream()
    t0, t1, untimed, unrecorded = (
        api.event(),
        api.event(),
        api.event(DISABLE_TIMING),
        api.event(),
    )
    release, blocker = gate()
    api.host_fn(s, blocker)
    api.record(t0, s)
    api.host_fn(s, lambda: time.sleep(0.05))
    api.record(t1, s)
    api.record(untimed, s)
    assert api.elapsed(t0, t1)[0] == NOT_READY
    assert api.elapsed(t0, unrecorded)[0] == INVALID_HANDLE
    release.set()
    assert api.sync(s) == SUCCESS
    rc, ms = api.elapsed(t0, t1)
    assert rc == SUCCESS and 45.0 <= ms < 5000.0, ms
    assert api.elapsed(t0, untimed)[0] == INVALID_HANDLE
    assert api.elapsed(untimed, t1)[0] == INVALID_HANDLE
    assert api.elapsed(t0, unrecorded)[0] == INVALID_HANDLE
    for e in (t0, t1, untimed, unrecorded):
        api.event_destroy(e)
    api.destroy(s)


# --------------------------------------------------------------------------
# Mapped host memory and 64-bit value waits


def test_device_pointer_aliases_host_memory(api):
    host = api.host_alloc(64)
    rc, dev = api.device_ptr(host)
    assert rc == SUCCESS and dev and dev != host
    ctypes.c_uint64.from_address(host + 8).value = 42
    assert ctypes.c_uint64.from_address(dev + 8).value == 42
    ctypes.c_uint64.from_address(dev).value = 7
    assert ctypes.c_uint64.from_address(host).value == 7
    assert api.device_ptr(host + 8) == (SUCCESS, dev + 8)
    assert api.device_ptr(12345)[0] == INVALID_VALUE
    assert api.lib.fake_gpu_live(b"host_alloc") >= 1
    assert api.free_host(host) == SUCCESS
    assert api.free_host(host) == INVALID_VALUE


def test_cuda_device_pointer_needs_devicemap(cu):
    host = P()
    assert cu.cuMemHostAlloc(ref(host), 8, PORTABLE) == SUCCESS
    dev = ctypes.c_uint64()
    assert cu.cuMemHostGetDevicePointer_v2(ref(dev), host, 0) == INVALID_VALUE
    assert cu.cuMemFreeHost(host) == SUCCESS


def test_wait_value_gates_the_stream(api):
    s = api.stream()
    host = api.host_alloc(8)
    _, dev = api.device_ptr(host)
    word = ctypes.c_uint64.from_address(host)
    # The host address is refused: only the device view is valid.
    assert api.wait_value(s, host, 5) == INVALID_VALUE
    assert api.wait_value(s, dev + 4, 5) == INVALID_VALUE  # misaligned
    assert api.wait_value(s, dev, 5) == SUCCESS
    ran = []
    api.host_fn(s, lambda: ran.append(1))
    time.sleep(0.02)
    assert api.query(s) == NOT_READY and ran == []
    word.value = 4
    time.sleep(0.02)
    assert ran == []
    word.value = 5  # plain store, no notification: the fake polls
    assert api.sync(s) == SUCCESS
    assert ran == [1]
    assert api.wait_value(s, dev, 5) == SUCCESS  # already equal: passes
    assert api.sync(s) == SUCCESS
    api.destroy(s)
    api.free_host(host)


def test_hip_wait_value_mask(hip):
    s, host = P(), P()
    assert hip.hipStreamCreateWithFlags(ref(s), NON_BLOCKING) == SUCCESS
    assert hip.hipHostMalloc(ref(host), 8, 0) == SUCCESS
    dev = P()
    assert hip.hipHostGetDevicePointer(ref(dev), host, 0) == SUCCESS
    word = ctypes.c_uint64.from_address(host.value)
    word.value = 0xFF00
    assert hip.hipStreamWaitValue64(s, dev, 0x1, WAIT_EQ, 0xFF) == SUCCESS
    time.sleep(0.02)
    assert hip.hipStreamQuery(s) == NOT_READY
    word.value = 0xAB01  # masked: 0x01
    assert hip.hipStreamSynchronize(s) == SUCCESS
    assert hip.hipStreamWaitValue64(s, host, 0, WAIT_EQ, 2**64 - 1) == INVALID_VALUE
    hip.hipStreamDestroy(s)
    assert hip.hipHostFree(host) == SUCCESS
    assert hip.hipHostFree(None) == SUCCESS


def test_freeing_memory_under_a_wait_is_an_illegal_address(api):
    s = api.stream()
    host = api.host_alloc(8)
    _, dev = api.device_ptr(host)
    api.wait_value(s, dev, 1)
    assert api.free_host(host) == SUCCESS
    assert api.sync(s) == ILLEGAL_ADDRESS
    assert api.query(s) == ILLEGAL_ADDRESS
    api.destroy(s)


# --------------------------------------------------------------------------
# Faults


def test_fault_injection_and_counters(api):
    lib = api.lib
    create = "cuStreamCreate" if api.api == "cuda" else "hipStreamCreateWithFlags"
    destroy = "cuStreamDestroy" if api.api == "cuda" else "hipStreamDestroy"
    assert lib.fake_gpu_calls(create.encode()) == 0
    assert lib.fake_gpu_fail(create.encode(), 2, OUT_OF_MEMORY) == 0
    assert lib.fake_gpu_fail(create.encode(), 4, LAUNCH_FAILED) == 0
    base = lib.fake_gpu_live(b"stream")
    results = []
    for _ in range(5):
        s = P()
        results.append(
            api.call("cuStreamCreate", "hipStreamCreateWithFlags", ref(s), 1)
        )
        if results[-1] == SUCCESS:
            api.destroy(s)
        else:
            assert s.value is None  # "without doing anything"
    assert results == [0, OUT_OF_MEMORY, 0, LAUNCH_FAILED, 0]
    assert lib.fake_gpu_calls(create.encode()) == 5
    assert lib.fake_gpu_live(b"stream") == base
    # A _v2 symbol shares its base name's bookkeeping.
    assert lib.fake_gpu_calls(destroy.encode()) == 3
    if api.api == "cuda":
        assert lib.fake_gpu_calls(b"cuStreamDestroy_v2") == 3
    assert lib.fake_gpu_fail(b"cuNoSuchThing", 1, 1) == -1
    assert lib.fake_gpu_fail(create.encode(), 0, 1) == -1
    assert lib.fake_gpu_fail(b"hipGetErrorName", 1, 1) == -1
    assert lib.fake_gpu_calls(b"cuNoSuchThing") == -1
    assert lib.fake_gpu_fail(create.encode(), 1, INVALID_VALUE) == 0
    lib.fake_gpu_reset()  # disarms
    assert lib.fake_gpu_calls(create.encode()) == 0
    s = api.stream()
    api.destroy(s)


def test_async_error_is_sticky(api):
    s = api.stream()
    ok = api.stream()
    before, after = api.event(), api.event()
    ran, statuses = [], []
    api.record(before, s)
    assert api.sync(s) == SUCCESS
    assert api.lib.fake_gpu_async_error(s, LAUNCH_FAILED) == 0
    assert api.lib.fake_gpu_async_error(None, LAUNCH_FAILED) == -1
    assert api.query(s) == SUCCESS  # nothing has failed yet
    api.host_fn(s, lambda: ran.append("failed item"))
    api.host_fn(s, lambda: ran.append("later host fn"))  # not called, as CUDA
    api.callback(s, lambda st, status: statuses.append(status))  # called
    api.record(after, s)
    assert api.sync(s) == LAUNCH_FAILED
    assert api.query(s) == LAUNCH_FAILED
    assert ran == [] and statuses == [LAUNCH_FAILED]
    assert api.event_query(after) == LAUNCH_FAILED
    assert api.event_sync(after) == LAUNCH_FAILED
    assert api.event_query(before) == SUCCESS
    # Other streams are unaffected.
    api.host_fn(ok, lambda: ran.append("ok"))
    assert api.sync(ok) == SUCCESS and ran == ["ok"]
    for e in (before, after):
        api.event_destroy(e)
    api.destroy(s)
    api.destroy(ok)


def test_live_counts(api):
    base = {
        k: api.lib.fake_gpu_live(k.encode()) for k in ("stream", "event", "host_alloc")
    }
    s, e, h = api.stream(), api.event(), api.host_alloc()
    now = {k: api.lib.fake_gpu_live(k.encode()) for k in base}
    assert now == {k: v + 1 for k, v in base.items()}
    api.destroy(s)
    api.event_destroy(e)
    api.free_host(h)
    assert {k: api.lib.fake_gpu_live(k.encode()) for k in base} == base
    assert api.lib.fake_gpu_live(b"nonsense") == -1


# --------------------------------------------------------------------------
# Omission (older drivers)


OPTIONAL = [
    "cuLaunchHostFunc",
    "hipLaunchHostFunc",
    "cuStreamWaitValue64",
    "hipStreamWaitValue64",
    "cuStreamAddCallback",
    "hipStreamAddCallback",
    "cuGetErrorString",
    "hipGetErrorString",
    "cuDeviceGetGraphMemAttribute",
    "hipDeviceGetGraphMemAttribute",
]


def test_omitted_entry_points(build_dir):
    path = build_fake_driver(build_dir, omit=OPTIONAL, extra_cflags=CFLAGS)
    again = build_fake_driver(build_dir, omit=OPTIONAL[::-1], extra_cflags=CFLAGS)
    assert again == path  # cached
    lib = ctypes.CDLL(str(path))
    for name in OPTIONAL:
        assert not hasattr(lib, name), name
    assert not hasattr(lib, "cuStreamWaitValue64_v2")
    assert hasattr(lib, "cuStreamAddCallback") is False
    assert hasattr(lib, "cuStreamCreate") and hasattr(lib, "hipStreamCreateWithFlags")
    lib.cuGetProcAddress_v2.argtypes = SIGNATURES["cuGetProcAddress_v2"]
    for name in OPTIONAL:
        if name.startswith("cu"):
            assert proc(lib, name) == (NOT_FOUND, None, 1), name
    rc, fn, status = proc(lib, "cuStreamCreate")
    assert (rc, status) == (SUCCESS, 0) and fn == ctypes.cast(
        lib.cuStreamCreate, P
    ).value


def test_omitted_get_proc_address(build_dir):
    path = build_fake_driver(build_dir, omit=["cuGetProcAddress"], extra_cflags=CFLAGS)
    lib = ctypes.CDLL(str(path))
    assert not hasattr(lib, "cuGetProcAddress_v2")
    assert not hasattr(lib, "cuGetProcAddress")
    assert hasattr(lib, "cuLaunchHostFunc")


# --------------------------------------------------------------------------
# Configuration from the environment (child interpreters)

CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
out = {}
n = ctypes.c_int(-1)
s = P()
out["create_before_init"] = lib.cuStreamCreate(ctypes.byref(s), 1)
out["count_before_init"] = lib.cuDeviceGetCount(ctypes.byref(n))
out["init"] = lib.cuInit(0)
out["cu_count_rc"] = lib.cuDeviceGetCount(ctypes.byref(n))
out["cu_count"] = n.value
n.value = -1
out["hip_count_rc"] = lib.hipGetDeviceCount(ctypes.byref(n))
out["hip_count"] = n.value
name = ctypes.create_string_buffer(64)
lib.cuDeviceGetName(name, 64, 0)
out["name"] = name.value.decode()
v = ctypes.c_int(-1)
lib.cuDeviceGetAttribute(ctypes.byref(v), 75, 0); out["major"] = v.value
lib.cuDeviceGetAttribute(ctypes.byref(v), 76, 0); out["minor"] = v.value
lib.cuDeviceGetAttribute(ctypes.byref(v), 18, 0); out["integrated"] = v.value
lib.cuDeviceCanAccessPeer(ctypes.byref(v), 0, 1); out["peer"] = v.value
t = ctypes.c_size_t(0)
lib.cuDeviceTotalMem_v2(ctypes.byref(t), 0); out["total"] = t.value
prop = ctypes.create_string_buffer(8192)
out["props_rc"] = lib.hipGetDevicePropertiesR0000(prop, 0)
out["gcn"] = prop.raw[prop.raw.find(b"gfx"):].split(b"\0")[0].decode()
out["fail_calls"] = lib.fake_gpu_calls(b"hipGetDevicePropertiesR0000")
print(json.dumps(out))
"""


def child(lib_path, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    e.update({k: str(v) for k, v in env.items()})
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(lib_path)],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_environment_configuration(lib_path):
    out, _ = child(
        lib_path,
        FAKE_GPU_DEVICES=3,
        FAKE_GPU_NAME="Test Card",
        FAKE_GPU_CC="8.6",
        FAKE_GPU_GCN="gfx90a:sramecc+:xnack-",
        FAKE_GPU_TOTAL_MEM=1 << 30,
        FAKE_GPU_INTEGRATED=1,
        FAKE_GPU_PEER=0,
        FAKE_GPU_FAIL="hipGetDeviceProperties:1:999,bogus:1:1",
    )
    assert out["create_before_init"] == NOT_INITIALIZED
    assert out["count_before_init"] == NOT_INITIALIZED
    assert out["init"] == SUCCESS
    assert (out["cu_count_rc"], out["cu_count"]) == (SUCCESS, 3)
    assert (out["hip_count_rc"], out["hip_count"]) == (SUCCESS, 3)
    assert out["name"] == "Test Card 0"
    assert (out["major"], out["minor"]) == (8, 6)
    assert out["integrated"] == 1 and out["peer"] == 0
    assert out["total"] == 1 << 30
    assert out["props_rc"] == 999  # armed from FAKE_GPU_FAIL
    assert out["fail_calls"] == 1


def test_no_devices_and_init_errors(lib_path):
    out, _ = child(lib_path, FAKE_GPU_DEVICES=0)
    assert out["init"] == SUCCESS
    assert (out["cu_count_rc"], out["cu_count"]) == (SUCCESS, 0)
    assert (out["hip_count_rc"], out["hip_count"]) == (NO_DEVICE, 0)
    out, _ = child(lib_path, FAKE_GPU_INIT_ERROR=100)
    assert out["init"] == NO_DEVICE
    assert out["cu_count_rc"] == NOT_INITIALIZED
    assert (out["hip_count_rc"], out["hip_count"]) == (NO_DEVICE, 0)


# --------------------------------------------------------------------------
# Last: nothing the tests made is left behind


def test_everything_released(lib):
    kinds = ("stream", "event", "host_alloc")
    assert {k: lib.fake_gpu_live(k.encode()) for k in kinds} == dict.fromkeys(kinds, 0)
    assert wait_until(lambda: lib.fake_gpu_threads() == 0)
