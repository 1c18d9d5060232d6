"""Self-test of the fake driver's real-driver rules of the GPU memory path
(README, "Real-driver rules" from 8 on), one section per rule.

Fixtures are in conftest.py and helpers in fakelib.py.  Whatever needs
other environment variables, or changes state for good (peer access cannot
be disabled), runs in a child interpreter.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import pytest

from .build import _compiler
from .fakelib import (
    CALLBACK,
    CHILD_PROLOGUE,
    DEVICEMAP,
    DISABLE_TIMING,
    HOST_FN,
    ILLEGAL_ADDRESS,
    INVALID_CONTEXT,
    INVALID_HANDLE,
    INVALID_VALUE,
    NOT_READY,
    SUCCESS,
    TESTS_DIR,
    WAIT,
    WAIT_EQ,
    Ctx,
    Memcpy2D,
    P,
    gate,
    pattern,
    pinned,
    ref,
    run_child,
    take_violations,
)


def returns_late(api, call, release, not_yet=0.1):
    """Runs ``call`` in a thread with device 0 current: it must not have
    returned after ``not_yet`` s, and must return once ``release()`` ran.
    Its result."""
    done = []

    def run():
        with api.on_device(0):
            done.append(call())

    t = threading.Thread(target=run)
    t.start()
    time.sleep(not_yet)
    early = list(done)
    release()
    t.join(WAIT)
    assert early == [], "returned before the stream's earlier work was done"
    assert len(done) == 1, "did not return after the release"
    return done[0]


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


# --------------------------------------------------------------------------
# Rule 10: a copy between host memory is synchronous


def host_copies(api, dst, src, n):
    """Copies of ``n`` bytes from the pinned buffer ``src`` into the pinned
    buffer ``dst``, each through another entry point or view, with both
    sides host memory: {name: call(stream)}."""
    _, dst_dev = api.device_ptr(dst)
    _, src_dev = api.device_ptr(src)
    return {
        "h2d into a device view": lambda s: api.h2d(dst_dev, src, n, s),
        "d2h from a device view": lambda s: api.d2h(dst, src_dev, n, s),
        "d2d between device views": lambda s: api.d2d(dst_dev, src_dev, n, s),
        "2-D between host views": lambda s: api.copy_2d(dst, n, src, n, n, 1, s, 0),
        "2-D between device views": lambda s: api.copy_2d(
            dst_dev, n, src_dev, n, n, 1, s, 3
        ),
    }


def test_copies_between_host_memory_are_synchronous(api):
    s, n = api.stream(), 256
    src, _ = pinned(api, pattern(n))
    dst, view = pinned(api, bytes(n))
    flag = api.host_alloc(8)
    for seed, (what, copy) in enumerate(host_copies(api, dst, src, n).items()):
        ctypes.memmove(src, pattern(n, seed), n)
        release = api.hold(s, flag)
        assert returns_late(api, lambda c=copy: c(s), release) == SUCCESS, what
        assert view.raw == pattern(n, seed), what  # done when it returns
    # A pageable side: the older rule, synchronous too.
    pageable = ctypes.create_string_buffer(pattern(n, 9), n)
    _, dst_dev = api.device_ptr(dst)
    release = api.hold(s, flag)
    rc = returns_late(
        api, lambda: api.h2d(dst_dev, ctypes.addressof(pageable), n, s), release
    )
    assert rc == SUCCESS and view.raw == pattern(n, 9)
    # A side in device memory keeps a copy asynchronous.
    rc, d = api.malloc(n)
    assert rc == SUCCESS
    release = api.hold(s, flag)
    assert api.h2d(d, src, n, s) == SUCCESS  # returns at once
    assert api.query(s) == NOT_READY
    release()
    assert api.sync(s) == SUCCESS
    assert api.free(d) == SUCCESS
    for h in (src, dst, flag):
        assert api.free_host(h) == SUCCESS
    api.destroy(s)


# --------------------------------------------------------------------------
# Rule 11: pinned allocation synchronises its device


def test_pinned_allocation_synchronizes_its_device(api):
    s = api.stream()
    release, blocker = gate()
    api.host_fn(s, blocker)
    with api.on_device(1):
        far = api.host_alloc(8)  # device 1 is idle: at once

    near = returns_late(api, lambda: api.host_alloc(8), release.set)
    assert near
    with api.on_device(1):
        assert api.free_host(far) == SUCCESS
    assert api.free_host(near) == SUCCESS
    api.destroy(s)


RULES_OFF = r"""
for name in ("cuda", "hip"):
    api = t.child_api(lib, name)
    s = api.stream()
    src, dst = api.host_alloc(64), api.host_alloc(64)
    _, dst_dev = api.device_ptr(dst)
    ctypes.memmove(src, b"x" * 64, 64)
    flag, release = api.value_gate(s)
    t0 = time.monotonic()
    copy = api.h2d(dst_dev, src, 64, s)  # queued behind the gate
    queued = api.query(s) == t.NOT_READY
    alloc = bool(api.host_alloc(8))  # at once
    waited = time.monotonic() - t0
    e = api.event(t.DISABLE_TIMING)
    with api.on_device(1):
        s1 = api.stream()
        record = api.record(e, s1)  # refused, not a violation
    release()
    out[name] = [copy, queued, alloc, waited < 0.5, record, api.sync(s),
                 ctypes.string_at(dst, 64) == b"x" * 64]
out["violations"] = t.violations(lib)
"""


def test_rules_can_be_turned_off(lib_path):
    out, _ = run_child(
        lib_path,
        RULES_OFF,
        FAKE_GPU_HANG_SECONDS=1,
        FAKE_GPU_HOST_COPY_SYNC=0,
        FAKE_GPU_PINNED_ALLOC_SYNC=0,
        FAKE_GPU_CROSS_DEVICE_EVENTS=0,
    )
    expected = [SUCCESS, True, True, True, INVALID_HANDLE, SUCCESS, True]
    assert out == {"cuda": expected, "hip": expected, "violations": []}


# --------------------------------------------------------------------------
# Rule 12: peer access and the default memory pools

PEER_ACCESS_UNSUPPORTED, PEER_ACCESS_ALREADY_ENABLED = 217, 704

PEER = r"""
api = t.child_api(lib, API)
s = api.stream()  # device 0's
rc, a = api.malloc(256)
with api.on_device(1):
    rc, b = api.malloc(256)
    s1 = api.stream()
    rc, p = api.malloc_async(256, s1)  # from device 1's pool
    assert api.sync(s1) == 0
out["before"] = [api.d2d(a, b, 256, s), api.sync(s)]
s = api.stream()  # the other has an error now
out["self"] = api.enable_peer(0)
out["enable"] = api.enable_peer(1)
out["again"] = api.enable_peer(1)
out["access"] = [lib.fake_gpu_peer_access(0, 1), lib.fake_gpu_peer_access(1, 0)]
out["after"] = [api.d2d(a, b, 256, s), api.memset(8, b, 7, 256, s),
                api.d2d(b, a, 256, s), api.sync(s)]
with api.on_device(1):  # one way: device 1 did not enable device 0
    out["reverse"] = [api.d2d(b, a, 256, s1), api.sync(s1)]
pool = api.default_pool(1)
out["pool_before"] = [api.d2d(a, p, 256, s), api.sync(s)]
s = api.stream()
out["grant"] = [api.pool_access(pool, 0, t.ACCESS_READWRITE),
                lib.fake_gpu_pool_access(1, 0), lib.fake_gpu_pool_access(1, 1)]
out["pool_after"] = [api.d2d(a, p, 256, s), api.sync(s)]
out["revoke"] = [api.pool_access(pool, 0, t.ACCESS_NONE),
                 lib.fake_gpu_pool_access(1, 0)]
out["own"] = api.pool_access(pool, 1, t.ACCESS_NONE)  # the owner keeps it
out["pool_revoked"] = [api.d2d(a, p, 256, s), api.sync(s)]
out["threshold"] = [lib.fake_gpu_pool_release_threshold(1),
                    api.pool_threshold(pool, 1 << 40),
                    lib.fake_gpu_pool_release_threshold(1),
                    lib.fake_gpu_pool_release_threshold(0),
                    lib.fake_gpu_pool_release_threshold(7)]
out["violations"] = t.violations(lib)
"""


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
def test_peer_and_pool_access(lib_path, api_name):
    out, _ = run_child(lib_path, f"API = {api_name!r}\n" + PEER)
    failed = [SUCCESS, ILLEGAL_ADDRESS]
    assert out["before"] == failed
    assert out["self"] == PEER_ACCESS_UNSUPPORTED
    assert out["enable"] == SUCCESS
    assert out["again"] == PEER_ACCESS_ALREADY_ENABLED
    assert out["access"] == [1, 0]
    assert out["after"] == [SUCCESS] * 4
    assert out["reverse"] == failed
    # Memory of device 1's pool needs access to the pool as well.
    assert out["pool_before"] == failed
    assert out["grant"] == [SUCCESS, 1, 1]
    assert out["pool_after"] == [SUCCESS, SUCCESS]
    assert out["revoke"] == [SUCCESS, 0]
    assert out["own"] == INVALID_VALUE
    assert out["pool_revoked"] == failed
    assert out["threshold"] == [0, SUCCESS, 1 << 40, 0, 0]
    used = "memory of device {} used on a stream of device {}"
    assert [v.split(": ", 1)[1] for v in out["violations"]] == [
        used.format(1, 0),
        used.format(0, 1),
        used.format(1, 0),
        used.format(1, 0),
    ]


NO_PEER = r"""
for name in ("cuda", "hip"):
    api = t.child_api(lib, name)
    out[name] = api.enable_peer(1)
out["access"] = lib.fake_gpu_peer_access(0, 1)
"""


def test_peer_access_can_be_unsupported(lib_path):
    out, _ = run_child(lib_path, NO_PEER, FAKE_GPU_PEER=0)
    assert out == {
        "cuda": PEER_ACCESS_UNSUPPORTED,
        "hip": PEER_ACCESS_UNSUPPORTED,
        "access": 0,
    }


# --------------------------------------------------------------------------
# Rule 13: the maximum pitch

MAX_PITCH = 2**31 - 1


def max_pitch_attribute(lib):
    cu, hip = ctypes.c_int(-1), ctypes.c_int(-1)
    assert lib.cuDeviceGetAttribute(ref(cu), 11, 0) == SUCCESS
    assert lib.hipDeviceGetAttribute(ref(hip), 58, 1) == SUCCESS
    return cu.value, hip.value


def pitch_checks(api, limit):
    """2-D copies of one row from pinned into device memory with pitches
    at and above ``limit``: their results (nothing copied above it)."""
    s, n = api.stream(), 64
    rc, d = api.malloc(n)
    src, _ = pinned(api, pattern(n))
    results = [
        api.copy_2d(d, limit, src, n, n, 1, s, 1),
        api.copy_2d(d, n, src, limit, n, 1, s, 1),
        api.copy_2d(d, limit + 1, src, n, n, 1, s, 1),
        api.copy_2d(d, n, src, limit + 1, n, 1, s, 1),
        api.sync(s),
    ]
    api.free(d)
    api.free_host(src)
    api.destroy(s)
    return results


def test_max_pitch(api):
    assert max_pitch_attribute(api.lib) == (MAX_PITCH, MAX_PITCH)
    assert pitch_checks(api, MAX_PITCH) == [SUCCESS, SUCCESS] + [INVALID_VALUE] * 2 + [
        SUCCESS
    ]


SMALL_PITCH = r"""
from fake_driver.test_fake_rules import max_pitch_attribute, pitch_checks
out["attribute"] = list(max_pitch_attribute(lib))
for name in ("cuda", "hip"):
    out[name] = pitch_checks(t.child_api(lib, name), 4096)
"""


def test_max_pitch_is_configurable(lib_path):
    out, _ = run_child(lib_path, SMALL_PITCH, FAKE_GPU_MAX_PITCH=4096)
    expected = [SUCCESS, SUCCESS, INVALID_VALUE, INVALID_VALUE, SUCCESS]
    assert out == {"attribute": [4096, 4096], "cuda": expected, "hip": expected}


# --------------------------------------------------------------------------
# The modelled copy engine (FAKE_GPU_COPY_MIB_PER_S): not a rule, a time model

ENGINE_TIME = r"""
import time
from fake_driver.fakelib import pattern, pinned
for name in ("cuda", "hip"):
    api = t.child_api(lib, name)
    s, n = api.stream(), 64 << 10
    src, _ = pinned(api, pattern(n))
    back, view = pinned(api, bytes(n))
    _, a = api.malloc(n)
    _, b = api.malloc(n)
    start = time.monotonic()
    rcs = [api.h2d(a, src, n, s), api.d2d(b, a, n, s), api.d2h(back, b, n, s),
           api.memset(8, a, 7, n, s), api.sync(s)]
    out[name] = [rcs, time.monotonic() - start, view.raw == pattern(n)]
    for p in (a, b):
        api.free(p)
    for h in (src, back):
        api.free_host(h)
    api.destroy(s)
"""


def test_copy_engine_time_model(lib_path):
    """At 1 MiB/s, each of four 64 KiB transfers (three copies and a fill)
    takes at least 62.5 ms of its stream's time, and the bytes still
    arrive.  (A lower bound only: a sleep never ends early.)"""
    out, _ = run_child(lib_path, ENGINE_TIME, FAKE_GPU_COPY_MIB_PER_S=1)
    for name in ("cuda", "hip"):
        rcs, seconds, same = out[name]
        assert rcs == [SUCCESS] * 5, (name, rcs)
        assert same, name
        assert seconds >= 4 * 0.0625, (name, seconds)


# --------------------------------------------------------------------------
# Rule 14: pinned bytes


def test_pinned_bytes(api):
    lib = api.lib
    lib.fake_gpu_reset_pinned_peak()
    base = lib.fake_gpu_pinned_bytes(0)
    assert lib.fake_gpu_pinned_bytes(1) == base

    def now_and_peak():
        return lib.fake_gpu_pinned_bytes(0) - base, lib.fake_gpu_pinned_bytes(1) - base

    a = api.host_alloc(1000)
    with api.on_device(1):
        b = api.host_alloc(5000)  # every device's count
    assert now_and_peak() == (6000, 6000)
    assert api.free_host(a) == SUCCESS
    assert now_and_peak() == (5000, 6000)
    lib.fake_gpu_reset_pinned_peak()
    assert now_and_peak() == (5000, 5000)
    with api.on_device(1):
        assert api.free_host(b) == SUCCESS
    assert now_and_peak() == (0, 5000)
    lib.fake_gpu_reset_pinned_peak()
    assert now_and_peak() == (0, 0)


# --------------------------------------------------------------------------
# Rule 15: calls after the driver shut down at process exit

DEINITIALIZED = 4

# A thread of the application that keeps polling the driver (as a cleanup
# thread might): it calls `query(stream)` every millisecond and reports each
# new result on stderr.  Native, because Python threads stop before the
# libraries' destructors run.
POLLER_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <time.h>
typedef unsigned (*query_fn)(void *);
static query_fn query;
static void *stream;
static void *poll_main(void *unused)
{
    unsigned last = ~0u;
    (void)unused;
    for (;;) {
        unsigned rc = query(stream);
        if (rc != last)
            fprintf(stderr, "poller: %u\n", rc);
        last = rc;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return NULL;
}
int start_poller(void *fn, void *s)
{
    pthread_t t;
    query = (query_fn)fn;
    stream = s;
    return pthread_create(&t, NULL, poll_main, NULL);
}
"""

EXIT = r"""
poller = ctypes.CDLL(sys.argv[3])
poller.start_poller.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
api = t.child_api(lib, API)
s = api.stream()
query = lib.cuStreamQuery if API == "cuda" else lib.hipStreamQuery
# Work the fake's own threads are busy with at exit: a stream held by a
# gate, a host function on the device's callback thread, a per-thread
# stream.
held = api.stream()
flag, release = api.value_gate(held)
api.host_fn(held, lambda: None)
assert api.host_fn(s, lambda: None) == 0 and api.sync(s) == 0
assert poller.start_poller(ctypes.cast(query, ctypes.c_void_p), s) == 0
time.sleep(0.05)
out["violations"] = t.violations(lib)
"""


@pytest.fixture(scope="module")
def poller(build_dir):
    src = build_dir / "poller.c"
    src.write_text(POLLER_C)
    out = build_dir / "libpoller.so"
    cmd = [_compiler(), "-shared", "-fPIC", "-pthread", str(src), "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def run_exit_child(lib_path, poller, api_name, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_GPU_")}
    e.update({k: str(v) for k, v in env.items()})
    script = (
        CHILD_PROLOGUE + f"API = {api_name!r}\n" + EXIT + "\nprint(json.dumps(out))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(lib_path), str(TESTS_DIR), str(poller)],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
def test_calls_after_the_driver_shut_down(lib_path, poller, api_name):
    r = run_exit_child(lib_path, poller, api_name)
    assert r.returncode == 0, r.stderr
    assert '"violations": []' in r.stdout  # none while the process ran
    query = "cuStreamQuery" if api_name == "cuda" else "hipStreamQuery"
    lines = r.stderr.splitlines()
    assert f"poller: {SUCCESS}" in lines
    assert f"poller: {DEINITIALIZED}" in lines, r.stderr
    # Only the poller's calls: not the fake's own threads.
    found = [ln for ln in lines if ln.startswith("fake_gpu: violation: ")]
    assert found and set(found) == {
        f"fake_gpu: violation: {query} called after the driver shut down at "
        "process exit; a real driver may crash or hang here"
    }, r.stderr


def test_exit_check_can_be_turned_off(lib_path, poller):
    r = run_exit_child(lib_path, poller, "cuda", FAKE_GPU_EXIT_CHECK=0)
    assert r.returncode == 0, r.stderr
    assert f"poller: {DEINITIALIZED}" not in r.stderr.splitlines()
    assert "fake_gpu: violation" not in r.stderr, r.stderr


# --------------------------------------------------------------------------
# Rule 16: unordered accesses of the same memory

UNORDERED = r"""
api = t.child_api(lib, API)
N = 1 << 18  # 0.25 s on the modelled 1 MiB/s copy engine
reader, writer, busy = api.stream(), api.stream(), api.stream()
x, y, z, w = (api.malloc(N)[1] for _ in range(4))
p = api.host_alloc(N)  # (pinned: it synchronises the device)
_, p_dev = api.device_ptr(p)
host = (ctypes.c_ubyte * N)()

# A read of `src` into y pending for 0.25 s behind other work (a copy
# between other memory, no host gate): it starts after what the case does
# next, so that the two never move bytes at once (ThreadSanitizer runs of
# this file would see the fake's threads race on them).
def slow_read(src=x):
    assert api.d2d(z, w, N, busy) == 0
    e = api.event(2)
    assert api.record(e, busy) == 0 and api.wait_event(reader, e) == 0
    assert api.d2d(y, src, 64, reader) == 0

CASE
out["sync"] = [api.sync(s) for s in (reader, writer, busy)]
out["violations"] = t.violations(lib)
"""

UNORDERED_CASES = {
    # Nothing orders the write after the pending read: a violation, though
    # the fake happens to run the read after the write.
    "write while a read is pending": """
slow_read()
assert api.h2d(x, host, 64, writer) == 0
""",
    "write into pinned memory read by a pending copy": """
slow_read(p_dev)
assert api.d2d(p_dev, w, 64, writer) == 0
""",
    "stream-ordered free while a read is pending": """
slow_read()
assert api.free_async(x, writer) == 0
""",
    # Ordered: after an event recorded behind the read.
    "write after an event": """
slow_read()
e = api.event(2)
assert api.record(e, reader) == 0 and api.wait_event(writer, e) == 0
assert api.h2d(x, host, 64, writer) == 0
""",
    # The host orders them: the read waits for a value the host writes
    # after the write (as a backend's host step does).
    "read behind a host gate": """
flag, release = api.value_gate(reader)
assert api.d2d(y, x, 64, reader) == 0
assert api.h2d(x, host, 64, writer) == 0
assert api.sync(writer) == 0
release()
""",
    "reads only": """
slow_read()
assert api.d2h(host, x, 64, writer) == 0
""",
}


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
@pytest.mark.parametrize("case", sorted(UNORDERED_CASES))
def test_unordered_accesses_are_violations(lib_path, api_name, case):
    code = UNORDERED.replace("CASE", UNORDERED_CASES[case])
    out, _ = run_child(
        lib_path, f"API = {api_name!r}\n" + code, FAKE_GPU_COPY_MIB_PER_S=1
    )
    racy = case.startswith(("write while", "write into", "stream-ordered"))
    if not racy:
        assert out == {"sync": [SUCCESS] * 3, "violations": []}, out
        return
    # (A free may also take effect before the read starts: that read then
    # faults, a second violation.)
    v = out["violations"][0]
    assert "enqueued earlier on another stream" in v, v
    assert "nothing orders the two" in v, v
