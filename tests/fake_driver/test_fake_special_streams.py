"""Self-test of the drivers' special stream handles in the fake
(fake_special.c): CUDA's CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD
(0x2), resolved in the current context, and HIP's null stream (0), resolved
in the current device; the legacy / null stream's implicit synchronisation
with blocking streams; and the control call that names them.
"""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

from .fakelib import (
    INVALID_CONTEXT,
    INVALID_HANDLE,
    NON_BLOCKING,
    NOT_READY,
    SUCCESS,
    WAIT,
    Api,
    Ctx,
    P,
    ref,
    violations,
    wait_until,
)

LEGACY, PER_THREAD, NULL = 0x100, 0x200, 0x400  # fake_gpu_stream_flags bits
NOT_YET = 0.1


def legacy_handle(api) -> int:
    """The API's handle of the device's legacy default stream."""
    return 1 if api.api == "cuda" else 0


def special_handles(api) -> list[int]:
    return [1, 2] if api.api == "cuda" else [0]


def special(lib, which: str, device: int = 0) -> int | None:
    """fake_gpu_special_stream: the engine's handle of a special stream."""
    return lib.fake_gpu_special_stream(which.encode(), device)


@pytest.fixture
def gates():
    """``gates(api, stream) -> release``: a value gate on ``stream``, opened
    and freed when the test ends even if it failed, since the special
    streams outlive the test (a gate left closed would hold up the next)."""
    made = []

    def make(api, stream):
        flag, release = api.value_gate(stream)
        made.append((api, flag, release))
        return release

    yield make
    for _, _, release in made:
        release()
    for api, flag, _ in made:
        with api.on_device(0):
            api.free_host(flag)


def run_in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(WAIT)
    assert out, "thread did not finish"
    return out[0]


# --------------------------------------------------------------------------
# Handles


def test_special_handles_are_streams(api):
    for h in special_handles(api):
        assert api.query(P(h)) == SUCCESS
        assert api.sync(P(h)) == SUCCESS
        ran: list[int] = []
        assert api.host_fn(P(h), lambda h=h, ran=ran: ran.append(h)) == SUCCESS
        assert api.sync(P(h)) == SUCCESS
        assert ran == [h]


def test_other_small_handles_are_not(api):
    others = [0, 3] if api.api == "cuda" else [1, 2, 3]
    # A destroyed handle leaves a tombstone (1) in the registry, which the
    # handle 1 must not be mistaken for wherever one lies on its probe path.
    for _ in range(100):
        api.destroy(api.stream())
        for h in others:
            assert api.query(P(h)) == INVALID_HANDLE, h
    for h in others:
        assert api.query(P(h)) == INVALID_HANDLE, h
    e = api.event()
    for h in others:
        assert api.record(e, P(h)) == INVALID_HANDLE, h
    api.event_destroy(e)


def test_special_streams_cannot_be_destroyed(api):
    for h in special_handles(api):
        assert api.destroy(P(h)) == INVALID_HANDLE
        assert api.query(P(h)) == SUCCESS  # still there


def test_cuda_special_handles_need_a_current_context(lib):
    # A thread with no current context, as in the real driver.
    def calls():
        return [lib.cuStreamQuery(P(h)) for h in (1, 2)]

    assert run_in_thread(calls) == [INVALID_CONTEXT, INVALID_CONTEXT]


@pytest.mark.parametrize("device", [0, 1])
def test_resolved_in_the_current_device(api, device):
    # An event records only on a stream of its own device: the special
    # handle names the current device's stream.
    with api.on_device(device):
        mine = api.event()
    with api.on_device(1 - device):
        other = api.event()
    with api.on_device(device):
        for h in special_handles(api):
            assert api.record(mine, P(h)) == SUCCESS
            assert api.record(other, P(h)) == INVALID_HANDLE
    # Each refusal is a violation too (rule 8).
    found = violations(api.lib)
    api.lib.fake_gpu_clear_violations()
    assert len(found) == len(special_handles(api))
    assert all(
        f"an event of device {1 - device} recorded on a stream of device {device}" in v
        for v in found
    ), found
    api.event_destroy(mine)
    api.event_destroy(other)


def test_callbacks_are_told_the_special_handle(api):
    seen = []
    for h in special_handles(api):
        assert api.callback(P(h), lambda st, status: seen.append(st)) == SUCCESS
        assert api.sync(P(h)) == SUCCESS
    assert seen == [h or None for h in special_handles(api)]


# --------------------------------------------------------------------------
# The control call and the counters


def test_control_call_names_them_with_their_flags(api):
    lib = api.lib
    pairs = [("legacy", LEGACY), ("per_thread", PER_THREAD), ("null", NULL)]
    for which, bit in pairs:
        for device in (0, 1):
            s = special(lib, which, device)
            assert s is not None
            assert lib.fake_gpu_stream_flags(P(s)) == bit
    assert special(lib, "legacy", 0) != special(lib, "legacy", 1)
    assert special(lib, "legacy", 0) == special(lib, "legacy", 0)
    assert special(lib, "legacy", 0) != special(lib, "null", 0)
    assert special(lib, "bogus", 0) is None
    assert special(lib, "legacy", 2) is None  # two devices
    assert special(lib, "legacy", -1) is None
    # A stream the application creates never carries those bits.
    s = api.stream(NON_BLOCKING)
    assert lib.fake_gpu_stream_flags(s) == NON_BLOCKING
    assert s.value not in (0, 1, 2)
    assert s.value not in {special(lib, w, 0) for w, _ in pairs}
    api.destroy(s)


def test_control_call_and_handle_name_the_same_stream(api, gates):
    name = "legacy" if api.api == "cuda" else "null"
    s = special(api.lib, name, 0)
    release = gates(api, P(legacy_handle(api)))
    assert api.query(P(s)) == NOT_READY  # the gate is on that stream
    release()
    assert api.sync(P(s)) == SUCCESS


def test_not_counted_as_application_streams(api):
    lib = api.lib
    streams, threads = lib.fake_gpu_live(b"stream"), lib.fake_gpu_threads()
    for which in ("legacy", "per_thread", "null"):
        for device in (0, 1):
            assert special(lib, which, device) is not None
    run_in_thread(lambda: special(lib, "per_thread", 0))
    assert lib.fake_gpu_live(b"stream") == streams
    # Threads of streams destroyed by earlier tests may still be draining.
    assert lib.fake_gpu_threads() <= threads


# --------------------------------------------------------------------------
# Per-thread streams


def test_cuda_per_thread_stream_is_the_calling_threads(cu, lib, gates):
    api = Api(lib, "cuda")
    gated = threading.Event()
    released = threading.Event()
    ran = []
    result = {}

    def owner():
        with Ctx(lib, 0):
            release = gates(api, P(2))
            api.host_fn(P(2), lambda: ran.append("owner"))
            result["stream"] = special(lib, "per_thread", 0)
            gated.set()
            released.wait(WAIT)
            release()
            result["sync"] = api.sync(P(2))

    t = threading.Thread(target=owner)
    t.start()
    assert gated.wait(WAIT)
    # This thread's per-thread stream is another one: not held up.
    assert api.host_fn(P(2), lambda: ran.append("main")) == SUCCESS
    assert api.sync(P(2)) == SUCCESS
    assert ran == ["main"]
    assert special(lib, "per_thread", 0) != result["stream"]
    released.set()
    t.join(WAIT)
    assert result["sync"] == SUCCESS
    assert ran == ["main", "owner"]


def test_cuda_per_thread_stream_retired_at_thread_exit_after_its_work(cu, lib, gates):
    api = Api(lib, "cuda")
    word = {}
    ran = threading.Event()

    def owner():
        with Ctx(lib, 0):
            release = gates(api, P(2))
            api.host_fn(P(2), ran.set)
            word["stream"] = special(lib, "per_thread", 0)
            word["release"] = release

    t = threading.Thread(target=owner)
    t.start()
    t.join(WAIT)
    # The thread is gone: its stream is retired (no handle reaches it any
    # more) but its pending work still runs.
    # (Thread.join returns before the thread's TLS destructors have run.)
    retired = 0xFFFFFFFF
    assert wait_until(lambda: lib.fake_gpu_stream_flags(P(word["stream"])) == retired)
    assert not ran.wait(NOT_YET)
    word["release"]()
    assert ran.wait(WAIT)


# --------------------------------------------------------------------------
# Implicit synchronisation of the legacy / null stream


def test_legacy_waits_for_blocking_streams(api, gates):
    blocking = api.stream(0)
    release = gates(api, blocking)
    e = api.event()
    assert api.record(e, P(legacy_handle(api))) == SUCCESS
    time.sleep(NOT_YET)
    assert api.event_query(e) == NOT_READY
    release()
    assert api.event_sync(e) == SUCCESS
    api.event_destroy(e)
    api.destroy(blocking)


def test_legacy_does_not_wait_for_non_blocking_streams(api, gates):
    s = api.stream(NON_BLOCKING)
    release = gates(api, s)
    e = api.event()
    assert api.record(e, P(legacy_handle(api))) == SUCCESS
    assert api.event_sync(e) == SUCCESS
    release()
    assert api.sync(s) == SUCCESS
    api.event_destroy(e)
    api.destroy(s)


def test_blocking_streams_wait_for_legacy(api, gates):
    release = gates(api, P(legacy_handle(api)))
    blocking, free = api.stream(0), api.stream(NON_BLOCKING)
    ran = []
    api.host_fn(blocking, lambda: ran.append("blocking"))
    api.host_fn(free, lambda: ran.append("free"))
    assert api.sync(free) == SUCCESS
    time.sleep(NOT_YET)
    assert ran == ["free"]
    release()
    assert api.sync(blocking) == SUCCESS
    assert ran == ["free", "blocking"]
    for s in (blocking, free):
        api.destroy(s)


def test_legacy_of_one_device_ignores_the_other(api, gates):
    with api.on_device(1):
        blocking = api.stream(0)
        release = gates(api, blocking)
    e = api.event()  # device 0, current
    assert api.record(e, P(legacy_handle(api))) == SUCCESS
    assert api.event_sync(e) == SUCCESS
    release()
    assert api.sync(blocking) == SUCCESS
    api.event_destroy(e)
    api.destroy(blocking)


def test_cuda_per_thread_stream_synchronises_with_legacy(cu, lib, gates):
    api = Api(lib, "cuda")
    release = gates(api, P(2))
    e = api.event()
    assert api.record(e, P(1)) == SUCCESS
    time.sleep(NOT_YET)
    assert api.event_query(e) == NOT_READY
    release()
    assert api.event_sync(e) == SUCCESS
    api.event_destroy(e)


def test_pageable_copy_on_legacy_waits_for_blocking_streams(api):
    blocking = api.stream(0)
    done = []
    api.host_fn(blocking, lambda: (time.sleep(0.2), done.append(1)))
    rc, d = api.malloc(64)
    assert rc == SUCCESS
    src = ctypes.create_string_buffer(b"x" * 64, 64)
    assert api.h2d(d, ctypes.addressof(src), 64, P(legacy_handle(api))) == SUCCESS
    assert done == [1]  # the synchronous copy ran after the blocking work
    assert api.sync(blocking) == SUCCESS
    assert api.free(d) == SUCCESS
    api.destroy(blocking)


def test_copies_and_waits_take_special_handles(api, gates):
    h = P(legacy_handle(api))
    rc, d = api.malloc(256)
    assert rc == SUCCESS
    assert api.memset(8, d, 7, 256, h) == SUCCESS
    out = ctypes.create_string_buffer(256)
    assert api.d2h(ctypes.addressof(out), d, 256, h) == SUCCESS
    assert out.raw == b"\x07" * 256
    s = api.stream()
    e = api.event()
    release = gates(api, s)
    assert api.record(e, s) == SUCCESS
    assert api.wait_event(h, e) == SUCCESS  # the legacy stream waits for s
    marker = api.event()
    assert api.record(marker, h) == SUCCESS
    time.sleep(NOT_YET)
    assert api.event_query(marker) == NOT_READY
    release()
    assert api.event_sync(marker) == SUCCESS
    for ev in (e, marker):
        api.event_destroy(ev)
    api.destroy(s)
    assert api.free(d) == SUCCESS


def test_stream_ordered_allocation_on_a_special_stream(api):
    h = P(legacy_handle(api))
    rc, d = api.malloc_async(512, h)
    assert rc == SUCCESS
    assert api.memset(8, d, 1, 512, h) == SUCCESS
    assert api.free_async(d, h) == SUCCESS
    assert api.sync(h) == SUCCESS


def test_the_hip_null_stream_ignores_cuda_handles(hip, lib):
    # Only 0 is special on HIP.
    assert lib.hipStreamQuery(P(0)) == SUCCESS
    assert lib.hipStreamQuery(P(1)) == INVALID_HANDLE
    e = P()
    assert lib.hipEventCreateWithFlags(ref(e), 0) == SUCCESS
    assert lib.hipEventRecord(e, P(0)) == SUCCESS
    assert lib.hipEventSynchronize(e) == SUCCESS
    assert lib.hipEventDestroy(e) == SUCCESS
