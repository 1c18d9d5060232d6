"""Self-test of the fake GPU driver, through ctypes only (no max.driver).

Fixtures are in conftest.py and helpers in fakelib.py.  Configurations
that need other environment variables run in a child interpreter.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from .build import build_fake_driver
from .fakelib import (
    BLOCKING_SYNC,
    CFLAGS,
    CUDA_NAMES,
    CUDA_V2,
    DEVICEMAP,
    DISABLE_TIMING,
    HIP_NAMES,
    ILLEGAL_ADDRESS,
    INVALID_CONTEXT,
    INVALID_DEVICE,
    INVALID_HANDLE,
    INVALID_VALUE,
    LAUNCH_FAILED,
    NO_DEVICE,
    NON_BLOCKING,
    NOT_FOUND,
    NOT_INITIALIZED,
    NOT_PERMITTED,
    NOT_READY,
    NOT_SUPPORTED,
    OUT_OF_MEMORY,
    PORTABLE,
    SIGNATURES,
    SUCCESS,
    WAIT,
    WAIT_EQ,
    Ctx,
    P,
    gate,
    ref,
    run_child,
    violations,
    wait_until,
)

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
    rc, fn, _ = proc(lib, "cuGetProcAddress")
    assert rc == SUCCESS
    assert fn == ctypes.cast(lib.cuGetProcAddress_v2, P).value


def test_get_proc_address_versions(lib):
    elapsed = ctypes.cast(lib.cuEventElapsedTime_v2, P).value
    wait = ctypes.cast(lib.cuStreamWaitValue64_v2, P).value
    # Between its introduction and the declared ABI, the same function.
    assert proc(lib, "cuEventElapsedTime", 2000) == (SUCCESS, elapsed, 0)
    assert proc(lib, "cuStreamWaitValue64", 9000) == (SUCCESS, wait, 0)
    # Older than the entry point: "version not sufficient".
    assert proc(lib, "cuEventElapsedTime", 1999) == (NOT_FOUND, None, 2)
    assert proc(lib, "cuStreamWaitValue64", 8000) == (NOT_FOUND, None, 2)
    assert proc(lib, "cuLaunchHostFunc", 9020) == (NOT_FOUND, None, 2)
    assert proc(lib, "cuMemHostGetDevicePointer", 3000) == (NOT_FOUND, None, 2)
    assert proc(lib, "cuLaunchHostFunc", 10000)[0] == SUCCESS
    # Newer than the driver (13.0): refused, and counted.
    before = lib.fake_gpu_live(b"proc_too_new")
    pfn, status = P(1234), ctypes.c_int(-1)
    rc = lib.cuGetProcAddress_v2(b"cuInit", ref(pfn), 13010, 0, ref(status))
    assert rc == INVALID_VALUE and pfn.value == 1234  # nothing written
    assert proc(lib, "cuInit", 13000)[0] == SUCCESS
    assert lib.fake_gpu_live(b"proc_too_new") == before + 1


OLD_DRIVER = r"""
def proc(symbol, version):
    pfn, status = ctypes.c_void_p(), ctypes.c_int(-1)
    rc = lib.cuGetProcAddress_v2(
        symbol.encode(), ctypes.byref(pfn), version, 0, ctypes.byref(status))
    return [rc, pfn.value is not None, status.value]
v = ctypes.c_int(-1)
lib.cuDriverGetVersion(ctypes.byref(v)); out["version"] = v.value
out["graph"] = proc("cuDeviceGetGraphMemAttribute", 11000)
out["wait"] = proc("cuStreamWaitValue64", 11000)
out["elapsed"] = proc("cuEventElapsedTime", 11000)
out["host_fn"] = proc("cuLaunchHostFunc", 11000)
out["too_new"] = proc("cuLaunchHostFunc", 11010)
out["refused"] = lib.fake_gpu_live(b"proc_too_new")
out["attr122"] = [lib.cuDeviceGetAttribute(ctypes.byref(v), 122, 0)]
out["attr93"] = [lib.cuDeviceGetAttribute(ctypes.byref(v), 93, 0), v.value]
"""


def test_get_proc_address_on_an_older_driver(lib_path):
    out, _ = run_child(lib_path, OLD_DRIVER, FAKE_GPU_DRIVER_VERSION=11000)
    assert out["version"] == 11000
    # Newer than the driver: it does not exist there.
    assert out["graph"] == [NOT_FOUND, False, 1]
    # Requests clamped to the driver's version resolve everything else.
    assert out["wait"] == out["elapsed"] == out["host_fn"] == [SUCCESS, True, 0]
    assert out["too_new"][0] == INVALID_VALUE and out["refused"] == 1
    # CUDA 11 has only the ..._V1 name of 64-bit stream memory operations.
    assert out["attr122"] == [INVALID_VALUE]
    assert out["attr93"] == [SUCCESS, 1]


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
    assert hip.hipSetDevice(0) == SUCCESS


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
    # CUDA's NULL stream is refused on purpose; HIP's 0 is its null stream
    # (test_fake_special_streams.py).
    assert api.query(None) == (INVALID_HANDLE if api.api == "cuda" else SUCCESS)


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
    flag, release = api.value_gate(a)
    ran = []
    api.host_fn(a, lambda: ran.append("a"))
    api.host_fn(b, lambda: ran.append("b"))
    assert api.sync(b) == SUCCESS  # b is not held up by a
    assert ran == ["b"]
    assert api.query(a) == NOT_READY
    release()
    assert api.sync(a) == SUCCESS
    assert api.query(a) == SUCCESS
    assert ran == ["b", "a"]
    api.destroy(a)
    api.destroy(b)
    api.free_host(flag)


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
# Real-driver rules: what hangs or fails on a real GPU fails here too


def test_callbacks_of_a_device_run_on_one_thread(api):
    a, b = api.stream(), api.stream()
    with api.on_device(1):
        c = api.stream()
    release, blocker = gate()
    ran, idents = [], {0: set(), 1: set()}

    def note(device, what):
        idents[device].add(threading.get_ident())
        ran.append(what)

    api.host_fn(a, lambda: (note(0, "a"), blocker()))
    assert wait_until(lambda: ran == ["a"])
    after = api.event(DISABLE_TIMING)
    api.record(after, a)
    api.host_fn(b, lambda: note(0, "b host fn"))
    api.callback(b, lambda st, status: note(0, "b callback"))
    time.sleep(0.05)
    # b's callbacks wait for a's host function: one thread per device, and
    # a's next item waits for its host function to return.
    assert ran == ["a"] and api.query(b) == NOT_READY
    assert api.event_query(after) == NOT_READY
    # Another device has a callback thread of its own.
    with api.on_device(1):
        api.host_fn(c, lambda: note(1, "c"))
    assert api.sync(c) == SUCCESS and ran == ["a", "c"]
    release.set()
    assert api.sync(b) == SUCCESS and api.sync(a) == SUCCESS
    assert ran == ["a", "c", "b host fn", "b callback"]
    assert len(idents[0]) == len(idents[1]) == 1 and idents[0] != idents[1]
    assert threading.get_ident() not in idents[0]
    assert api.lib.fake_gpu_live(b"callback_thread") == 2
    api.event_destroy(after)
    for s in (a, b, c):
        api.destroy(s)


def test_callback_thread_blocks_signals(api):
    s = api.stream()
    masks = []

    def read_mask():
        path = f"/proc/self/task/{threading.get_native_id()}/status"
        with open(path) as f:
            masks.extend(int(ln.split()[1], 16) for ln in f if ln.startswith("SigBlk"))

    api.host_fn(s, read_mask)
    assert api.sync(s) == SUCCESS
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1):
        assert masks[0] >> (sig - 1) & 1, sig
    api.destroy(s)


def test_api_calls_from_callbacks_are_refused(api):
    lib, cuda = api.lib, api.api == "cuda"
    s, e = api.stream(), api.event(DISABLE_TIMING)
    seen = {}

    def inside():
        seen["record"] = api.record(e, s)
        seen["query"] = api.query(s)
        seen["create"] = api.call(
            "cuStreamCreate", "hipStreamCreateWithFlags", ref(P()), NON_BLOCKING
        )
        seen["live"] = lib.fake_gpu_live(b"stream")  # control calls stay allowed
        if cuda:
            name = ctypes.c_char_p()
            seen["name"] = (lib.cuGetErrorName(0, ref(name)), name.value)
        else:
            seen["name"] = lib.hipGetErrorName(0)

    streams = lib.fake_gpu_live(b"stream")
    api.host_fn(s, inside)
    api.callback(s, lambda st, status: seen.setdefault("sync", api.sync(s)))
    assert api.sync(s) == SUCCESS
    code, err = (
        (NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED")
        if cuda
        else (NOT_SUPPORTED, "hipErrorNotSupported")
    )
    assert seen["record"] == seen["query"] == seen["create"] == seen["sync"] == code
    # Without any effect: nothing recorded, nothing created.
    assert api.event_query(e) == SUCCESS
    assert seen["live"] == streams == lib.fake_gpu_live(b"stream")
    if cuda:
        assert seen["name"] == (NOT_PERMITTED, None)
    else:
        assert seen["name"] == b"hipSuccess"  # returns a string: cannot fail
    names = (
        ["cuEventRecord", "cuStreamQuery", "cuStreamCreate", "cuGetErrorName"]
        if cuda
        else ["hipEventRecord", "hipStreamQuery", "hipStreamCreateWithFlags"]
    )
    expected = [f"{n} called from a host-function callback ({err})" for n in names]
    if not cuda:
        expected.append(
            "hipGetErrorName called from a host-function callback (not "
            "permitted; it returns a string, so it cannot fail)"
        )
    sync = "cuStreamSynchronize" if cuda else "hipStreamSynchronize"
    expected.append(f"{sync} called from a stream callback ({err})")
    assert violations(lib) == expected
    lib.fake_gpu_reset()  # does not clear them
    assert lib.fake_gpu_violations() == len(expected)
    assert lib.fake_gpu_violation(len(expected)) is None
    assert lib.fake_gpu_violation(-1) is None
    lib.fake_gpu_clear_violations()
    assert lib.fake_gpu_violations() == 0 and lib.fake_gpu_violation(0) is None
    api.event_destroy(e)
    api.destroy(s)


def test_violations_keep_the_first_64_and_print_them(api, capfd):
    s = api.stream()
    api.host_fn(s, lambda: [api.query(s) for _ in range(70)])
    assert api.sync(s) == SUCCESS
    lib = api.lib
    assert lib.fake_gpu_violations() == 70
    assert lib.fake_gpu_violation(63) is not None
    assert lib.fake_gpu_violation(64) is None
    err = capfd.readouterr().err
    assert err.count("fake_gpu: violation: ") == 65  # 64, then a note
    assert "(more violations are counted but not printed)" in err
    lib.fake_gpu_clear_violations()
    api.destroy(s)


def test_freeing_pinned_memory_synchronizes_its_device(api):
    s = api.stream()
    with api.on_device(1):
        far = api.host_alloc(8)  # device 1: idle
    near = api.host_alloc(8)
    release, blocker = gate()
    api.host_fn(s, blocker)
    assert api.free_host(far) == SUCCESS
    done = []

    def free_near():
        with api.on_device(0):
            done.append(api.free_host(near))

    t = threading.Thread(target=free_near)
    t.start()
    time.sleep(0.1)
    assert done == []  # waits for device 0's stream
    release.set()
    t.join(WAIT)
    assert done == [SUCCESS]
    assert api.free_host(near) == INVALID_VALUE
    api.destroy(s)


def test_cuda_free_host_needs_a_context(lib):
    host = P()
    with Ctx(lib):
        assert lib.cuMemHostAlloc(ref(host), 8, DEVICEMAP) == SUCCESS
    assert lib.cuMemFreeHost(host) == INVALID_CONTEXT
    with Ctx(lib, 1):  # any context will do
        assert lib.cuMemFreeHost(host) == SUCCESS


FREE_HANG = r"""
api = t.child_api(lib, API)
s = api.stream()
other = api.host_alloc(8)  # before the gate: allocating would wait too
flag, release = api.value_gate(s)  # waits for the host to set the flag
t0 = time.monotonic()
out["free_other"] = api.free_host(other)  # a real driver hangs here
out["waited"] = time.monotonic() - t0
out["free_flag"] = api.free_host(flag)  # and the stream polls freed memory
out["sync"] = api.sync(s)
out["violations"] = t.violations(lib)
"""


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
def test_freeing_pinned_memory_under_a_host_wait_would_deadlock(lib_path, api_name):
    out, err = run_child(
        lib_path, f"API = {api_name!r}\n" + FREE_HANG, FAKE_GPU_HANG_SECONDS=1
    )
    free = "cuMemFreeHost" if api_name == "cuda" else "hipHostFree"
    message = (
        f"{free} would deadlock: device 0 still busy after 1 s; "
        "a real driver hangs here"
    )
    assert out["free_other"] == out["free_flag"] == SUCCESS
    assert out["waited"] >= 0.9
    assert out["sync"] == ILLEGAL_ADDRESS
    assert out["violations"] == [message, message]
    assert f"fake_gpu: violation: {message}" in err


FULL_QUEUE = r"""
api = t.child_api(lib, API)
s = api.stream()
flag, release = api.value_gate(s)  # pending item 1
for _ in range(3):  # 2 to 4: the queue is full
    assert api.host_fn(s, lambda: None) == 0
done = []
def enqueue():
    with api.on_device(0):  # CUDA: the stream's context, on this thread too
        done.append(api.host_fn(s, lambda: None))
th = threading.Thread(target=enqueue)
th.start()
time.sleep(0.3)
out["blocked"] = not done
release()
th.join(10)
out["after_release"] = done
out["sync"] = api.sync(s)
# Never drained: bounded by FAKE_GPU_HANG_SECONDS.
flag2, release2 = api.value_gate(s)
for _ in range(3):
    api.host_fn(s, lambda: None)
t0 = time.monotonic()
out["full"] = api.host_fn(s, lambda: None)
out["waited"] = time.monotonic() - t0
out["violations"] = t.violations(lib)
release2()
out["sync2"] = api.sync(s)
api.free_host(flag)
api.free_host(flag2)
"""


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
def test_full_queues_block(lib_path, api_name):
    out, _ = run_child(
        lib_path,
        f"API = {api_name!r}\n" + FULL_QUEUE,
        FAKE_GPU_QUEUE_DEPTH=4,
        FAKE_GPU_HANG_SECONDS=2,
    )
    assert out["blocked"] is True
    assert out["after_release"] == [SUCCESS] and out["sync"] == SUCCESS
    assert out["full"] == SUCCESS and out["waited"] >= 1.9
    launch = "cuLaunchHostFunc" if api_name == "cuda" else "hipLaunchHostFunc"
    assert out["violations"] == [
        f"{launch} blocked 2 s on a full stream; a real driver would deadlock"
    ]
    assert out["sync2"] == SUCCESS


def test_stream_memory_operations_are_reported(lib):
    v = ctypes.c_int(-1)
    for attrib in (92, 93, 122):  # CUDA 12+: the ..._V1 names and the new one
        v.value = -1
        assert lib.cuDeviceGetAttribute(ref(v), attrib, 0) == SUCCESS
        assert v.value == 1, attrib
    v.value = -1
    assert lib.hipDeviceGetAttribute(ref(v), 10013, 0) == SUCCESS and v.value == 1
    assert lib.hipDeviceGetAttribute(ref(v), 12345, 0) == INVALID_VALUE
    assert lib.hipDeviceGetAttribute(ref(v), 10013, 7) == INVALID_DEVICE


NO_MEM_OPS = r"""
v = ctypes.c_int(-1)
def attr(get, a):
    v.value = -1
    return [get(ctypes.byref(v), a, 0), v.value]
out["cu"] = [attr(lib.cuDeviceGetAttribute, a) for a in (92, 93, 122)]
out["hip"] = attr(lib.hipDeviceGetAttribute, 10013)
for name in ("cuda", "hip"):
    api = t.child_api(lib, name)
    s = api.stream()
    flag = api.host_alloc(8)
    out[name + "_wait"] = api.wait_value(s, api.device_ptr(flag)[1], 0)
"""


def test_stream_memory_operations_can_be_absent(lib_path):
    out, _ = run_child(lib_path, NO_MEM_OPS, FAKE_GPU_STREAM_MEM_OPS=0)
    assert out["cu"] == [[SUCCESS, 0]] * 3
    assert out["hip"] == [SUCCESS, 0]
    assert out["cuda_wait"] == out["hip_wait"] == NOT_SUPPORTED


def test_blocking_sync_events(api):
    s = api.stream()
    e = api.event(BLOCKING_SYNC | DISABLE_TIMING)
    flag, release = api.value_gate(s)
    assert api.record(e, s) == SUCCESS
    done = []
    t = threading.Thread(target=lambda: done.append(api.event_sync(e)))
    t.start()
    time.sleep(0.05)
    assert done == []  # blocks until the stream reaches the record
    release()
    t.join(WAIT)
    assert done == [SUCCESS]
    api.event_destroy(e)
    api.destroy(s)
    api.free_host(flag)


# --------------------------------------------------------------------------
# Last: nothing the tests made is left behind


def test_everything_released(lib):
    kinds = ("stream", "event", "host_alloc", "device_alloc", "device_bytes")
    assert {k: lib.fake_gpu_live(k.encode()) for k in kinds} == dict.fromkeys(kinds, 0)
    assert wait_until(lambda: lib.fake_gpu_threads() == 0)
