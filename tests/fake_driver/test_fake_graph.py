"""Stream capture and graphs in the fake driver, with the real drivers' rules
(README, "Stream capture and graphs"): captured work does not run; calls
that are illegal during capture fail, invalidate it and are recorded as
violations; forks must be joined back before the capture ends; a launch runs
the nodes in capture order, after the previous launch of the same
executable graph.  Every test runs on both fronts (the ``api`` fixture)."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

from .fakelib import (
    CAPTURE_IMPLICIT,
    CAPTURE_INVALIDATED,
    CAPTURE_ISOLATION,
    CAPTURE_MERGE,
    CAPTURE_UNJOINED,
    CAPTURE_UNMATCHED,
    CAPTURE_UNSUPPORTED,
    CAPTURE_WRONG_THREAD,
    CAPTURED_EVENT,
    INVALID_VALUE,
    MODE_GLOBAL,
    MODE_RELAXED,
    NOT_READY,
    STATUS_ACTIVE,
    STATUS_INVALIDATED,
    STATUS_NONE,
    SUCCESS,
    P,
    pattern,
    pinned,
    take_violations,
    wait_until,
)

NOT_YET = 0.1  # long enough for work that (wrongly) runs to have run


def _graph(api, s):
    """Ends the capture on ``s`` and instantiates it: the executable graph."""
    rc, g = api.end_capture(s)
    assert rc == SUCCESS and g.value
    rc, e = api.instantiate(g)
    assert rc == SUCCESS
    assert api.graph_destroy(g) == SUCCESS  # the executable graph is its own
    return e


def test_captured_work_does_not_run_until_launched(api):
    s = api.stream()
    ran = []
    assert api.host_fn(s, lambda: ran.append("plain")) == SUCCESS  # control
    assert wait_until(lambda: ran == ["plain"])
    assert api.begin_capture(s) == SUCCESS
    assert api.capture_status(s) == (SUCCESS, STATUS_ACTIVE)
    assert api.host_fn(s, lambda: ran.append("captured")) == SUCCESS
    time.sleep(NOT_YET)
    assert ran == ["plain"]
    e = _graph(api, s)
    assert api.capture_status(s) == (SUCCESS, STATUS_NONE)
    assert api.query(s) == SUCCESS  # captured work is no work of the stream
    assert ran == ["plain"]
    for _ in range(2):
        assert api.launch(e, s) == SUCCESS
    assert api.sync(s) == SUCCESS
    assert ran == ["plain", "captured", "captured"]
    assert api.exec_destroy(e) == SUCCESS
    assert api.destroy(s) == SUCCESS


def test_launch_runs_nodes_in_order_with_current_contents(api):
    """Copies read their source when the launch runs, not at capture."""
    s = api.stream()
    n = 64
    src, src_view = pinned(api, pattern(n, 1))
    dst, dst_view = pinned(api, bytes(n))
    _, dsrc = api.device_ptr(src)
    _, ddst = api.device_ptr(dst)
    rc, dev = api.malloc(n)
    assert rc == SUCCESS
    order = []
    assert api.begin_capture(s) == SUCCESS
    assert api.host_fn(s, lambda: order.append(1)) == SUCCESS
    assert api.h2d(dev, dsrc, n, s) == SUCCESS  # pinned: asynchronous
    assert api.d2h(ddst, dev, n, s) == SUCCESS
    assert api.host_fn(s, lambda: order.append(bytes(dst_view))) == SUCCESS
    e = _graph(api, s)
    assert bytes(dst_view) == bytes(n)
    src_view[:] = pattern(n, 2)  # after the capture, before the launch
    assert api.launch(e, s) == SUCCESS
    assert api.sync(s) == SUCCESS
    assert order == [1, pattern(n, 2)]
    assert api.exec_destroy(e) == SUCCESS
    assert api.free(dev) == SUCCESS
    for host in (src, dst):
        assert api.free_host(host) == SUCCESS
    assert api.destroy(s) == SUCCESS


def test_fork_and_join(api):
    s1, s2 = api.stream(), api.stream()
    fork, join = api.event(), api.event()
    ran = []
    assert api.begin_capture(s1) == SUCCESS
    assert api.record(fork, s1) == SUCCESS
    assert api.event_query(fork) == CAPTURED_EVENT  # not work that runs
    take_violations(api.lib)
    # ... which invalidated the capture: start again.
    assert api.end_capture(s1)[0] == CAPTURE_INVALIDATED
    assert api.begin_capture(s1) == SUCCESS
    assert api.host_fn(s1, lambda: ran.append("a")) == SUCCESS
    assert api.record(fork, s1) == SUCCESS
    assert api.wait_event(s2, fork) == SUCCESS  # s2 joins the capture
    assert api.capture_status(s2) == (SUCCESS, STATUS_ACTIVE)
    assert api.host_fn(s2, lambda: ran.append("b")) == SUCCESS
    assert api.record(join, s2) == SUCCESS
    assert api.wait_event(s1, join) == SUCCESS  # joined back
    e = _graph(api, s1)
    assert api.capture_status(s2) == (SUCCESS, STATUS_NONE)
    assert api.launch(e, s1) == SUCCESS
    assert api.sync(s1) == SUCCESS
    assert ran == ["a", "b"]
    assert api.exec_destroy(e) == SUCCESS
    for ev in (fork, join):
        assert api.event_destroy(ev) == SUCCESS
    for s in (s1, s2):
        assert api.destroy(s) == SUCCESS


def test_unjoined_fork_fails_end_capture(api):
    s1, s2 = api.stream(), api.stream()
    fork = api.event()
    assert api.begin_capture(s1) == SUCCESS
    assert api.record(fork, s1) == SUCCESS
    assert api.wait_event(s2, fork) == SUCCESS
    assert api.host_fn(s2, lambda: None) == SUCCESS  # never joined back
    rc, g = api.end_capture(s1)
    assert rc == CAPTURE_UNJOINED and not g.value
    for s in (s1, s2):  # both out of capture, usable
        assert api.capture_status(s) == (SUCCESS, STATUS_NONE)
        assert api.sync(s) == SUCCESS
    assert api.event_destroy(fork) == SUCCESS
    for s in (s1, s2):
        assert api.destroy(s) == SUCCESS


def test_end_on_a_forked_stream_and_merge(api):
    s1, s2, s3 = api.stream(), api.stream(), api.stream()
    fork, other = api.event(), api.event()
    assert api.begin_capture(s1) == SUCCESS
    assert api.record(fork, s1) == SUCCESS
    assert api.wait_event(s2, fork) == SUCCESS
    assert api.end_capture(s2)[0] == CAPTURE_UNMATCHED
    assert api.capture_status(s1) == (SUCCESS, STATUS_INVALIDATED)
    assert api.end_capture(s1)[0] == CAPTURE_INVALIDATED
    assert api.begin_capture(s1) == SUCCESS
    assert api.begin_capture(s3) == SUCCESS
    assert api.record(other, s3) == SUCCESS
    assert api.wait_event(s1, other) == CAPTURE_MERGE
    assert [api.end_capture(s)[0] for s in (s1, s3)] == [CAPTURE_INVALIDATED] * 2
    assert len(take_violations(api.lib)) == 2
    for ev in (fork, other):
        assert api.event_destroy(ev) == SUCCESS
    for s in (s1, s2, s3):
        assert api.destroy(s) == SUCCESS


def _legacy(api):
    return P(1) if api.api == "cuda" else P(0)


ILLEGAL = {
    "stream query": lambda api, s, ctx: api.query(s),
    "stream synchronize": lambda api, s, ctx: api.sync(s),
    "event query": lambda api, s, ctx: api.event_query(ctx["captured"]),
    "event synchronize": lambda api, s, ctx: api.event_sync(ctx["captured"]),
    "pageable copy": lambda api, s, ctx: api.h2d(ctx["dev"], ctx["pageable"], 8, s),
    "host to host copy": lambda api, s, ctx: api.d2h(
        ctx["pinned_dev"], ctx["pinned_dev"], 8, s
    ),
    "outside event": lambda api, s, ctx: api.wait_event(s, ctx["outside"]),
    "stream-ordered allocation": lambda api, s, ctx: api.malloc_async(8, s)[0],
    "stream-ordered free": lambda api, s, ctx: api.free_async(ctx["dev"], s),
}
CODES = {
    "event query": CAPTURED_EVENT,
    "event synchronize": CAPTURED_EVENT,
    "outside event": CAPTURE_ISOLATION,
}


@pytest.mark.parametrize("what", sorted(ILLEGAL))
def test_illegal_call_fails_and_invalidates(api, what):
    s, plain = api.stream(), api.stream()
    captured, outside = api.event(), api.event()
    assert api.record(outside, plain) == SUCCESS
    rc, dev = api.malloc(8)
    assert rc == SUCCESS
    host = api.host_alloc(8)
    pageable = ctypes.create_string_buffer(8)
    ctx = {
        "captured": captured,
        "outside": outside,
        "dev": dev,
        "pageable": ctypes.addressof(pageable),
        "pinned_dev": api.device_ptr(host)[1],
    }
    ran = []
    assert api.begin_capture(s) == SUCCESS
    assert api.host_fn(s, lambda: ran.append(1)) == SUCCESS
    assert api.record(captured, s) == SUCCESS
    assert ILLEGAL[what](api, s, ctx) == CODES.get(what, CAPTURE_UNSUPPORTED)
    assert any(
        "during stream capture" in v or "capture" in v for v in take_violations(api.lib)
    )
    assert api.capture_status(s) == (SUCCESS, STATUS_INVALIDATED)
    assert api.host_fn(s, lambda: ran.append(2)) == CAPTURE_INVALIDATED
    rc, g = api.end_capture(s)
    assert rc == CAPTURE_INVALIDATED and not g.value
    assert api.capture_status(s) == (SUCCESS, STATUS_NONE)
    assert api.host_fn(s, lambda: ran.append(3)) == SUCCESS  # usable again
    assert api.sync(s) == SUCCESS
    assert ran == [3]  # nothing captured ran
    # Stricter than documented: the event stays unusable after the capture.
    assert api.event_query(captured) == CAPTURED_EVENT
    take_violations(api.lib)
    assert api.record(captured, plain) == SUCCESS  # re-recorded: usable
    assert api.event_sync(captured) == SUCCESS
    assert api.free(dev) == SUCCESS
    assert api.free_host(host) == SUCCESS
    for ev in (captured, outside):
        assert api.event_destroy(ev) == SUCCESS
    for st in (s, plain):
        assert api.destroy(st) == SUCCESS


def test_legacy_stream_while_a_blocking_stream_captures(api):
    blocking, other = api.stream(flags=0), api.stream()
    assert api.begin_capture(blocking) == SUCCESS
    assert api.begin_capture(_legacy(api)) == CAPTURE_UNSUPPORTED
    assert api.capture_status(_legacy(api))[0] == CAPTURE_IMPLICIT
    assert api.host_fn(_legacy(api), lambda: None) == CAPTURE_IMPLICIT
    assert take_violations(api.lib)
    assert api.end_capture(blocking)[0] == CAPTURE_INVALIDATED
    # A non-blocking capture leaves the legacy stream alone.
    assert api.begin_capture(other) == SUCCESS
    assert api.host_fn(_legacy(api), lambda: None) == SUCCESS
    assert api.sync(_legacy(api)) == SUCCESS
    e = _graph(api, other)
    assert api.exec_destroy(e) == SUCCESS
    for s in (blocking, other):
        assert api.destroy(s) == SUCCESS


def test_unsafe_calls_by_capture_mode(api):
    """Global mode forbids allocation that is not stream ordered to every
    thread; relaxed mode to none."""
    s = api.stream()
    assert api.begin_capture(s, MODE_RELAXED) == SUCCESS
    rc, dev = api.malloc(8)
    assert rc == SUCCESS and api.free(dev) == SUCCESS
    assert api.exec_destroy(_graph(api, s)) == SUCCESS
    assert api.begin_capture(s, MODE_GLOBAL) == SUCCESS
    out = []
    worker = threading.Thread(target=lambda: out.append(_malloc_elsewhere(api)))
    worker.start()
    worker.join()
    assert out == [CAPTURE_UNSUPPORTED]
    assert take_violations(api.lib)
    assert api.end_capture(s)[0] == CAPTURE_INVALIDATED
    assert api.destroy(s) == SUCCESS


def _malloc_elsewhere(api):
    with api.on_device(0):
        return api.malloc(8)[0]


def test_wrong_thread_ends_a_global_capture(api):
    s = api.stream()
    assert api.begin_capture(s, MODE_GLOBAL) == SUCCESS
    out = []
    worker = threading.Thread(target=lambda: out.append(api.end_capture(s)[0]))
    worker.start()
    worker.join()
    assert out == [CAPTURE_WRONG_THREAD]
    assert api.capture_status(s) == (SUCCESS, STATUS_ACTIVE)
    e = _graph(api, s)
    assert api.exec_destroy(e) == SUCCESS
    assert api.destroy(s) == SUCCESS


def test_launches_of_one_graph_are_serialized(api):
    """Each launch is ordered behind the previous launch of the executable
    graph, even on another stream; a second instantiation runs at once."""
    s1, s2, s3 = api.stream(), api.stream(), api.stream()
    release = threading.Event()
    ran = []
    assert api.begin_capture(s1) == SUCCESS
    assert api.host_fn(s1, lambda: (release.wait(10), ran.append("g"))) == SUCCESS
    rc, g = api.end_capture(s1)
    assert rc == SUCCESS
    (rc1, e1), (rc2, e2) = api.instantiate(g), api.instantiate(g)
    assert rc1 == rc2 == SUCCESS
    assert api.graph_destroy(g) == SUCCESS
    assert api.launch(e1, s1) == SUCCESS
    assert api.launch(e1, s2) == SUCCESS
    time.sleep(NOT_YET)
    assert api.query(s2) == NOT_READY  # behind the first launch
    release.set()
    assert api.sync(s2) == SUCCESS and ran == ["g", "g"]
    release.clear()
    assert api.launch(e1, s1) == SUCCESS
    assert api.launch(e2, s3) == SUCCESS  # another executable graph
    assert wait_until(lambda: ran == ["g", "g"]) and api.query(s3) == NOT_READY
    assert api.exec_destroy(e1) == SUCCESS  # in flight: still completes
    release.set()
    for s in (s1, s3):
        assert api.sync(s) == SUCCESS
    assert ran == ["g"] * 4
    assert api.exec_destroy(e2) == SUCCESS
    assert api.lib.fake_gpu_live(b"graph") == 0
    assert api.lib.fake_gpu_live(b"graph_exec") == 0
    for s in (s1, s2, s3):
        assert api.destroy(s) == SUCCESS


def test_bad_arguments(api):
    s = api.stream()
    assert api.begin_capture(s, 3) == INVALID_VALUE
    assert api.end_capture(s)[0] == INVALID_VALUE  # not capturing
    assert api.begin_capture(s) == SUCCESS
    assert api.begin_capture(s) == INVALID_VALUE  # already capturing
    rc, g = api.end_capture(s)
    assert rc == SUCCESS
    assert api.launch(g, s) == INVALID_VALUE  # a graph is not executable
    assert api.instantiate(P(12345))[0] == INVALID_VALUE
    assert api.graph_destroy(g) == SUCCESS
    assert api.graph_destroy(g) == INVALID_VALUE
    assert api.destroy(s) == SUCCESS
