"""Self-test of the fake driver's real-driver rules of the GPU memory path
(README, "Real-driver rules" from 8 on), one section per rule.

Fixtures are in conftest.py and helpers in fakelib.py.  Whatever needs
other environment variables, or changes state for good (peer access cannot
be disabled), runs in a child interpreter.
"""

from __future__ import annotations

import ctypes
import threading

import pytest

from .fakelib import (
    CALLBACK,
    DEVICEMAP,
    DISABLE_TIMING,
    HOST_FN,
    INVALID_CONTEXT,
    INVALID_HANDLE,
    SUCCESS,
    WAIT,
    WAIT_EQ,
    Ctx,
    Memcpy2D,
    P,
    ref,
    run_child,
    violations,
)


def take_violations(lib):
    v = violations(lib)
    lib.fake_gpu_clear_violations()
    return v


# --------------------------------------------------------------------------
# Rule 8: an event recorded on a stream of another device


def test_cross_device_event_record_is_a_violation(api):
    e = api.event(DISABLE_TIMING)  # device 0's
    with api.on_device(1):
        s = api.stream()
        assert api.record(e, s) == INVALID_HANDLE
    assert api.event_query(e) == SUCCESS  # not recorded
    name = "cuEventRecord" if api.api == "cuda" else "hipEventRecord"
    assert take_violations(api.lib) == [
        f"{name}: an event of device 0 recorded on a stream of device 1; real "
        "drivers refuse it (CUDA_ERROR_INVALID_HANDLE / hipErrorInvalidHandle)"
    ]
    assert api.event_destroy(e) == SUCCESS
    assert api.destroy(s) == SUCCESS


# --------------------------------------------------------------------------
# Rule 9: CUDA work is enqueued under the stream's context


@pytest.fixture
def on_device_1(cu):
    """CUDA objects of device 1, made with its context current: a stream,
    an event, device memory (plain and from the pool), a mapped pinned flag
    and a pinned buffer."""
    lib = cu
    o = {}
    with Ctx(lib, 1) as ctx:
        o["ctx"] = ctx.ctx
        o["s"], o["e"] = P(), P()
        assert lib.cuStreamCreate(ref(o["s"]), 1) == SUCCESS
        assert lib.cuEventCreate(ref(o["e"]), DISABLE_TIMING) == SUCCESS
        a, b, pool = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        assert lib.cuMemAlloc_v2(ref(a), 256) == SUCCESS
        assert lib.cuMemAlloc_v2(ref(b), 256) == SUCCESS
        assert lib.cuMemAllocAsync(ref(pool), 256, o["s"]) == SUCCESS
        o["a"], o["b"], o["pool"] = a.value, b.value, pool.value
        o["flag"], o["host"] = P(), P()
        for h in (o["flag"], o["host"]):
            assert lib.cuMemHostAlloc(ref(h), 256, DEVICEMAP) == SUCCESS
        d = ctypes.c_uint64()
        assert lib.cuMemHostGetDevicePointer_v2(ref(d), o["flag"], 0) == SUCCESS
        o["flag_dev"] = d.value
        ctypes.memset(o["host"], 0x5A, 256)
        assert lib.cuMemsetD8Async(o["a"], 0x11, 256, o["s"]) == SUCCESS
        assert lib.cuStreamSynchronize(o["s"]) == SUCCESS
    yield o
    with Ctx(lib, 1):
        assert lib.cuMemFreeAsync(o["pool"], o["s"]) == SUCCESS
        assert lib.cuStreamSynchronize(o["s"]) == SUCCESS
        for p in (o["a"], o["b"]):
            assert lib.cuMemFree_v2(p) == SUCCESS
        for h in (o["flag"], o["host"]):
            assert lib.cuMemFreeHost(h) == SUCCESS
    assert lib.cuEventDestroy_v2(o["e"]) == SUCCESS  # no context needed
    assert lib.cuStreamDestroy_v2(o["s"]) == SUCCESS


def cuda_enqueues(lib, o, ran):
    """Every CUDA entry point that enqueues work on a stream, as a call on
    device 1's stream: ``({name: call}, keep)``, where ``keep`` holds what
    the calls need alive; ``keep["new"]`` is what cuMemAllocAsync
    allocates."""
    s, n = o["s"], 256
    keep = {
        "host_fn": HOST_FN(lambda _: ran.append("host fn")),
        "callback": CALLBACK(lambda *_: ran.append("callback")),
        "2d": Memcpy2D(
            srcMemoryType=2,
            srcDevice=o["a"],
            srcPitch=n,
            dstMemoryType=2,
            dstDevice=o["b"],
            dstPitch=n,
            WidthInBytes=n,
            Height=1,
        ),
        "new": ctypes.c_uint64(),
    }
    calls = {
        "cuEventRecord": lambda: lib.cuEventRecord(o["e"], s),
        "cuStreamWaitEvent": lambda: lib.cuStreamWaitEvent(s, o["e"], 0),
        "cuStreamWaitValue64": lambda: lib.cuStreamWaitValue64_v2(
            s, o["flag_dev"], 1, WAIT_EQ
        ),
        "cuLaunchHostFunc": lambda: lib.cuLaunchHostFunc(s, keep["host_fn"], None),
        "cuStreamAddCallback": lambda: lib.cuStreamAddCallback(
            s, keep["callback"], None, 0
        ),
        "cuMemcpyHtoDAsync": lambda: lib.cuMemcpyHtoDAsync_v2(o["b"], o["host"], n, s),
        "cuMemcpyDtoHAsync": lambda: lib.cuMemcpyDtoHAsync_v2(o["host"], o["a"], n, s),
        "cuMemcpyDtoDAsync": lambda: lib.cuMemcpyDtoDAsync_v2(o["b"], o["a"], n, s),
        "cuMemcpyPeerAsync": lambda: lib.cuMemcpyPeerAsync(
            o["b"], o["ctx"], o["a"], o["ctx"], n, s
        ),
        "cuMemcpy2DAsync": lambda: lib.cuMemcpy2DAsync_v2(ref(keep["2d"]), s),
        "cuMemsetD8Async": lambda: lib.cuMemsetD8Async(o["b"], 1, n, s),
        "cuMemsetD16Async": lambda: lib.cuMemsetD16Async(o["b"], 1, n // 2, s),
        "cuMemsetD32Async": lambda: lib.cuMemsetD32Async(o["b"], 1, n // 4, s),
        "cuMemAllocAsync": lambda: lib.cuMemAllocAsync(ref(keep["new"]), n, s),
        "cuMemFreeAsync": lambda: lib.cuMemFreeAsync(o["pool"], s),
    }
    return calls, keep


def no_context(fn):
    """fn() on a thread with no current context."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(WAIT)
    return out[0]


def test_cuda_enqueues_need_the_streams_context(cu, on_device_1):
    lib, o, ran = cu, on_device_1, []
    calls, keep = cuda_enqueues(lib, o, ran)
    allocs = lib.fake_gpu_live(b"device_alloc")
    expected = []
    for name, call in calls.items():
        # Device 0's context is current (the fixture's).
        assert call() == INVALID_CONTEXT, name
        expected.append(
            f"{name} enqueued work on a stream of device 1 while the context of "
            "device 0 is current; real drivers refuse it "
            "(CUDA_ERROR_INVALID_CONTEXT)"
        )
        assert no_context(call) == INVALID_CONTEXT, name
        expected.append(
            f"{name} enqueued work on a stream of device 1 with no current "
            "context; real drivers refuse it (CUDA_ERROR_INVALID_CONTEXT)"
        )
    assert take_violations(lib) == expected
    # Without any effect: nothing ran, nothing was copied, filled, recorded,
    # allocated or freed.
    assert lib.cuStreamQuery(o["s"]) == SUCCESS
    with Ctx(lib, 1):
        assert lib.cuStreamSynchronize(o["s"]) == SUCCESS
        back = ctypes.create_string_buffer(256)
        assert lib.cuMemcpyDtoHAsync_v2(back, o["b"], 256, o["s"]) == SUCCESS
    assert back.raw == b"\xa5" * 256  # b was never written
    assert ctypes.string_at(o["host"], 256) == b"\x5a" * 256
    assert ran == [] and lib.fake_gpu_live(b"device_alloc") == allocs
    assert lib.cuEventQuery(o["e"]) == SUCCESS  # never recorded
    # Queries, synchronizes and destroys are no enqueues: any context, or
    # none.
    for check in (
        lambda: lib.cuStreamQuery(o["s"]),
        lambda: lib.cuStreamSynchronize(o["s"]),
        lambda: lib.cuEventQuery(o["e"]),
        lambda: lib.cuEventSynchronize(o["e"]),
    ):
        assert check() == SUCCESS
        assert no_context(check) == SUCCESS
    assert take_violations(lib) == []
    # With the stream's context current every call works.
    ctypes.c_uint64.from_address(o["flag"].value).value = 1  # the wait passes
    with Ctx(lib, 1):
        for name, call in calls.items():
            assert call() == SUCCESS, name
        assert lib.cuStreamSynchronize(o["s"]) == SUCCESS
    o["pool"] = keep["new"].value  # the old one was freed
    assert ran == ["host fn", "callback"]


def test_hip_has_no_contexts(hip):
    # A stream of device 1 takes work whatever device is current.
    s, e = P(), P()
    assert hip.hipSetDevice(1) == SUCCESS
    assert hip.hipStreamCreateWithFlags(ref(s), 1) == SUCCESS
    assert hip.hipEventCreateWithFlags(ref(e), DISABLE_TIMING) == SUCCESS
    assert hip.hipSetDevice(0) == SUCCESS
    assert hip.hipEventRecord(e, s) == SUCCESS
    assert hip.hipStreamSynchronize(s) == SUCCESS
    assert hip.hipEventDestroy(e) == SUCCESS
    assert hip.hipStreamDestroy(s) == SUCCESS


CONTEXT_CHECK_OFF = r"""
api = t.child_api(lib, "cuda")  # device 0's context current
with t.Ctx(lib, 1):
    s = api.stream()
    e = api.event(t.DISABLE_TIMING)
out["record"] = api.record(e, s)
out["host_fn"] = api.host_fn(s, lambda: None)
out["sync"] = api.sync(s)
out["violations"] = t.violations(lib)
"""


def test_context_check_can_be_turned_off(lib_path):
    out, _ = run_child(lib_path, CONTEXT_CHECK_OFF, FAKE_GPU_CONTEXT_CHECK=0)
    assert out == {
        "record": SUCCESS,
        "host_fn": SUCCESS,
        "sync": SUCCESS,
        "violations": [],
    }
