"""DeviceQueue (SPEC §4, §10) on the CPU backend."""

from __future__ import annotations

import re
import threading
import time

import pytest

from max.driver import CPU, CompletionFlag, Device, DeviceEvent, DeviceQueue

WAIT = 20.0

# Long enough that work which is (wrongly) not blocked would have run.
NOT_YET = 0.1


def _not_run_yet(rec, item):
    time.sleep(NOT_YET)
    return not rec.has(item)


# --------------------------------------------------------------------------
# Construction, identity, text


def test_new_queue(cpu):
    q = DeviceQueue(cpu)
    assert isinstance(q, DeviceQueue)
    assert q.device is cpu
    assert q != cpu.default_queue
    assert not (q == cpu.default_queue)
    q2 = DeviceQueue(device=cpu)
    assert q2.device is cpu
    assert q2 != q


@pytest.mark.parametrize("bad", [None, 0, "cpu", object()])
def test_new_queue_type_error(bad):
    with pytest.raises(TypeError):
        DeviceQueue(bad)


def test_new_queue_requires_device():
    with pytest.raises(TypeError):
        DeviceQueue()


def test_new_queue_from_queue_type_error(cpu):
    with pytest.raises(TypeError):
        DeviceQueue(cpu.default_queue)


def test_native_stream_handle_is_zero_on_cpu(cpu, queue):
    assert queue.native_stream_handle == 0
    assert type(queue.native_stream_handle) is int
    assert cpu.default_queue.native_stream_handle == 0


def test_no_cuda_stream_protocol_on_cpu(cpu, queue):
    assert not hasattr(queue, "__cuda_stream__")
    assert not hasattr(cpu.default_queue, "__cuda_stream__")


def test_eq_hash(cpu):
    a, b = DeviceQueue(cpu), DeviceQueue(cpu)
    assert a == a
    assert a != b
    assert hash(a) == hash(a)
    assert len({a, b, a, cpu.default_queue, cpu.default_queue}) == 3
    assert {a: "a", b: "b"}[a] == "a"
    assert a != 0
    assert a != cpu
    assert cpu.default_queue == cpu.default_queue


QUEUE_RE = re.compile(r"^cpu\[0\]:queue@0x[0-9a-fA-F]+$")
DEFAULT_RE = re.compile(r"^cpu\[0\]:queue@0x[0-9a-fA-F]+ \(default\)$")


def test_repr(cpu):
    a, b = DeviceQueue(cpu), DeviceQueue(cpu)
    assert QUEUE_RE.match(repr(a)), repr(a)
    assert QUEUE_RE.match(repr(b)), repr(b)
    assert repr(a) != repr(b)
    assert repr(a) == repr(a)
    assert DEFAULT_RE.match(repr(cpu.default_queue)), repr(cpu.default_queue)


def test_device_context_ptr(cpu):
    a, b = DeviceQueue(cpu), DeviceQueue(cpu)
    pa, pb, pd = (
        a._device_context_ptr(),
        b._device_context_ptr(),
        cpu.default_queue._device_context_ptr(),
    )
    assert all(type(p) is int and p != 0 for p in (pa, pb, pd))
    assert len({pa, pb, pd}) == 3
    assert a._device_context_ptr() == pa
    assert cpu.default_queue._device_context_ptr() == pd


# --------------------------------------------------------------------------
# Ordering and concurrency


def test_in_order_on_one_queue(queue, enqueue, rec):
    for i in range(200):
        enqueue(queue, rec.fn(i))
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == list(range(200))


def test_in_order_on_default_queue_via_device(cpu, enqueue, rec):
    for i in range(50):
        enqueue(cpu, rec.fn(("dev", i)))
        enqueue(cpu.default_queue, rec.fn(("q", i)))
    cpu.default_queue.synchronize(timeout=WAIT)
    expected = []
    for i in range(50):
        expected += [("dev", i), ("q", i)]
    assert rec.snapshot() == expected


def test_work_runs_asynchronously_after_gate(queue, enqueue, rec, gate):
    flag = gate(queue)
    enqueue(queue, rec.fn("x"))
    assert _not_run_yet(rec, "x")
    flag.signal(1)
    assert rec.wait("x")


def test_queues_run_concurrently_released_in_reverse(cpu, enqueue, rec):
    """Each queue's first host function blocks on its own threading.Event;
    releasing B first must let B finish while A is still blocked."""
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    ea, eb = threading.Event(), threading.Event()
    started = {"a": threading.Event(), "b": threading.Event()}

    def blocker(name, ev):
        def fn():
            started[name].set()
            ev.wait(WAIT)
            rec.add(name)

        return fn

    enqueue(qa, blocker("a", ea))
    enqueue(qb, blocker("b", eb))
    enqueue(qa, rec.fn("a2"))
    enqueue(qb, rec.fn("b2"))
    try:
        # Both are running at the same time.
        assert started["a"].wait(WAIT)
        assert started["b"].wait(WAIT)
        eb.set()
        assert rec.wait("b2"), "queue B did not progress while A was blocked"
        assert not rec.has("a")
        ea.set()
        qa.synchronize(timeout=WAIT)
        qb.synchronize(timeout=WAIT)
        items = rec.snapshot()
        assert (
            items.index("b") < items.index("b2") < items.index("a") < items.index("a2")
        )
    finally:
        ea.set()
        eb.set()


def test_flag_gated_queues_complete_in_release_order(cpu, enqueue, rec, gate):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    fa, fb = gate(qa), gate(qb)
    enqueue(qa, rec.fn("a"))
    enqueue(qb, rec.fn("b"))
    fb.signal(1)
    assert rec.wait("b")
    assert not rec.has("a")
    fa.signal(1)
    assert rec.wait("a")
    assert rec.snapshot() == ["b", "a"]


def test_host_fn_on_one_queue_may_wait_for_later_queue(cpu, enqueue, rec):
    """SPEC §10: a host function on one queue may block until a host
    function on another queue (enqueued later) runs."""
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    b_ran = threading.Event()

    def a():
        rec.add(("a-saw-b", b_ran.wait(WAIT)))

    def b():
        b_ran.set()

    enqueue(qa, a)
    enqueue(qb, b)
    qa.synchronize(timeout=WAIT * 2)
    assert rec.snapshot() == [("a-saw-b", True)]


@pytest.mark.timeout(120)
def test_256_live_queues_all_make_progress(cpu, enqueue):
    n = 256
    barrier = threading.Barrier(n, timeout=WAIT * 2)
    errors = []
    passed = []
    lock = threading.Lock()

    def fn():
        try:
            barrier.wait()
            with lock:
                passed.append(1)
        except threading.BrokenBarrierError as exc:
            with lock:
                errors.append(exc)

    queues = [DeviceQueue(cpu) for _ in range(n)]
    for q in queues:
        enqueue(q, fn)
    try:
        for q in queues:
            q.synchronize(timeout=WAIT * 3)
    finally:
        barrier.abort()
    assert not errors, "not all 256 queues ran at the same time"
    assert len(passed) == n


def test_enqueue_from_many_threads(queue, enqueue):
    per_thread, nthreads = 200, 8
    logs = {t: [] for t in range(nthreads)}

    def producer(t):
        for i in range(per_thread):
            enqueue(queue, lambda t=t, i=i: logs[t].append(i))

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(WAIT)
    queue.synchronize(timeout=WAIT)
    for t in range(nthreads):
        assert logs[t] == list(range(per_thread))


# --------------------------------------------------------------------------
# wait_for


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_wait_for_stream(cpu, enqueue, rec, gate, how):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    fa = gate(qa)
    enqueue(qa, rec.fn("a"))
    if how == "keyword":
        assert qb.wait_for(stream=qa) is None
    else:
        assert qb.wait_for(qa) is None
    enqueue(qb, rec.fn("b"))
    assert _not_run_yet(rec, "b")
    with pytest.raises(TimeoutError):
        qb.synchronize(timeout=0.05)
    fa.signal(1)
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["a", "b"]


def test_wait_for_stream_only_covers_work_before_the_call(cpu, enqueue, rec, gate):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    qb.wait_for(stream=qa)  # qa is idle: nothing to wait for
    gate(qa)
    enqueue(qa, rec.fn("a"))
    enqueue(qb, rec.fn("b"))
    assert rec.wait("b")
    assert not rec.has("a")


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_wait_for_device(cpu, enqueue, rec, gate, how):
    q = DeviceQueue(cpu)
    f = gate(cpu.default_queue)
    enqueue(cpu.default_queue, rec.fn("default"))
    if how == "keyword":
        assert q.wait_for(device=cpu) is None
    else:
        assert q.wait_for(cpu) is None
    enqueue(q, rec.fn("q"))
    assert _not_run_yet(rec, "q")
    f.signal(1)
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["default", "q"]


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_wait_for_event(cpu, enqueue, rec, gate, how):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    fa = gate(qa)
    enqueue(qa, rec.fn("a"))
    ev = qa.record_event()
    if how == "keyword":
        assert qb.wait_for(event=ev) is None
    else:
        assert qb.wait_for(ev) is None
    enqueue(qb, rec.fn("b"))
    assert _not_run_yet(rec, "b")
    fa.signal(1)
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["a", "b"]


def test_wait_for_unrecorded_event_is_complete(cpu, queue, enqueue, rec):
    ev = DeviceEvent(cpu)
    queue.wait_for(event=ev)
    enqueue(queue, rec.fn("x"))
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_wait_for_self_is_noop(queue, enqueue, rec, gate):
    queue.wait_for(queue)
    queue.wait_for(stream=queue)
    enqueue(queue, rec.fn(1))
    queue.synchronize(timeout=WAIT)
    f = gate(queue)
    enqueue(queue, rec.fn(2))
    queue.wait_for(queue)  # while gated: must not deadlock
    enqueue(queue, rec.fn(3))
    f.signal(1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == [1, 2, 3]


def test_default_queue_wait_for_own_device_is_noop(cpu, enqueue, rec):
    cpu.default_queue.wait_for(device=cpu)
    enqueue(cpu, rec.fn("x"))
    cpu.default_queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue": "Q"},
        {"stream": "DEV"},
        {"device": "Q"},
        {"event": "Q"},
        {"stream": "Q", "device": "DEV"},
    ],
)
def test_wait_for_wrong_keyword_or_type(cpu, queue, kwargs):
    other = DeviceQueue(cpu)
    objs = {"Q": other, "DEV": cpu}
    with pytest.raises(TypeError):
        queue.wait_for(**{k: objs[v] for k, v in kwargs.items()})


WAIT_FOR_MSG = (
    "wait_for(): incompatible function arguments. The following argument types"
    " are supported:\n"
    "    1. wait_for(self, stream: DeviceQueue) -> None\n"
    "    2. wait_for(self, device: Device) -> None\n"
    "    3. wait_for(self, event: DeviceEvent) -> None\n"
    "\n"
    "Invoked with types: DeviceQueue, int"
)


def test_wait_for_type_error_message_exact(queue):
    with pytest.raises(TypeError) as exc:
        queue.wait_for(1)
    assert str(exc.value) == WAIT_FOR_MSG


@pytest.mark.parametrize("args", [(), (None,), ("x",), (1, 2)])
def test_wait_for_type_error_message_style(queue, args):
    with pytest.raises(TypeError) as exc:
        queue.wait_for(*args)
    msg = str(exc.value)
    assert msg.startswith(
        "wait_for(): incompatible function arguments. The following argument"
        " types are supported:\n"
    )
    assert "    1. wait_for(self, stream: DeviceQueue) -> None" in msg
    assert "    3. wait_for(self, event: DeviceEvent) -> None" in msg
    assert "\n\nInvoked with types: DeviceQueue" in msg


def test_record_event_type_error_message(queue):
    with pytest.raises(TypeError) as exc:
        queue.record_event(1)
    msg = str(exc.value)
    lines = msg.split("\n")
    assert lines[0] == (
        "record_event(): incompatible function arguments. The following argument"
        " types are supported:"
    )
    assert re.fullmatch(r"    1\. record_event\(self\) -> DeviceEvent", lines[1])
    assert re.fullmatch(
        r"    2\. record_event\(self, event: DeviceEvent\) -> None", lines[2]
    )
    assert lines[3] == ""
    assert lines[4] == "Invoked with types: DeviceQueue, int"
    assert len(lines) == 5


@pytest.mark.parametrize("args", [(None,), ("e",), (1, 2)])
def test_record_event_type_error_style(queue, args):
    with pytest.raises(TypeError) as exc:
        queue.record_event(*args)
    msg = str(exc.value)
    assert msg.startswith("record_event(): incompatible function arguments.")
    assert "Invoked with types: DeviceQueue" in msg


def test_record_event_wrong_keyword(queue, cpu):
    with pytest.raises(TypeError):
        queue.record_event(ev=DeviceEvent(cpu))


# --------------------------------------------------------------------------
# record_event


def test_record_event_overload_new(queue):
    ev = queue.record_event()
    assert isinstance(ev, DeviceEvent)
    assert ev.device is queue.device
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    # Timing is disabled on events made by record_event().
    ev2 = queue.record_event()
    ev2.synchronize(timeout=WAIT)
    with pytest.raises(RuntimeError):
        ev.elapsed_time(ev2)


def test_record_event_returns_distinct_events(queue):
    a, b = queue.record_event(), queue.record_event()
    assert a is not b
    assert a != b


def test_record_event_overload_existing(cpu, queue, gate):
    ev = DeviceEvent(cpu)
    assert queue.record_event(ev) is None
    assert queue.record_event(event=ev) is None
    ev.synchronize(timeout=WAIT)
    f = gate(queue)
    queue.record_event(event=ev)
    assert not ev.is_ready()
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_record_event_tracks_pending_work(queue, gate):
    f = gate(queue)
    ev = queue.record_event()
    assert ev.is_ready() is False
    with pytest.raises(TimeoutError):
        ev.synchronize(timeout=0.05)
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready() is True


def test_rerecording_moves_the_point(cpu, gate):
    gated, idle = DeviceQueue(cpu), DeviceQueue(cpu)
    f = gate(gated)
    ev = DeviceEvent(cpu)
    gated.record_event(ev)
    assert not ev.is_ready()
    idle.record_event(ev)  # moves the event to a point that is complete
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    gated.record_event(ev)  # and back to a pending point
    assert not ev.is_ready()
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


# --------------------------------------------------------------------------
# wait_for_host_value


def test_wait_for_host_value_returns_at_once(queue):
    f = CompletionFlag(queue.device)
    assert queue.wait_for_host_value(f, 1) is None
    f.signal(1)
    queue.synchronize(timeout=WAIT)


def test_wait_for_host_value_keywords(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(flag=f, value=2)
    enqueue(queue, rec.fn("x"))
    assert _not_run_yet(rec, "x")
    f.signal(value=2)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_released_from_another_thread(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, 7)
    enqueue(queue, rec.fn("x"))
    assert _not_run_yet(rec, "x")
    t = threading.Thread(target=f.signal, args=(7,))
    t.start()
    t.join(WAIT)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_needs_equal_value(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, 5)
    enqueue(queue, rec.fn("x"))
    f.signal(4)
    assert _not_run_yet(rec, "x")
    f.signal(6)
    assert _not_run_yet(rec, "x")
    f.signal(5)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_already_equal_passes_at_once(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    f.signal(3)
    queue.wait_for_host_value(f, 3)
    enqueue(queue, rec.fn("x"))
    queue.synchronize(timeout=WAIT)
    g = CompletionFlag(queue.device)
    queue.wait_for_host_value(g, 0)  # a fresh flag holds 0
    enqueue(queue, rec.fn("y"))
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x", "y"]


def test_gate_max_u64(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, 2**64 - 1)
    enqueue(queue, rec.fn("x"))
    assert _not_run_yet(rec, "x")
    f.signal(2**64 - 1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_synchronize_blocks_while_gated(cpu, queue, gate):
    f = gate(queue)
    with pytest.raises(TimeoutError):
        queue.synchronize(timeout=0.1)
    with pytest.raises(TimeoutError):
        cpu.synchronize(timeout=0.1)
    f.signal(1)
    queue.synchronize(timeout=WAIT)
    cpu.synchronize(timeout=WAIT)


def test_gate_only_affects_later_work(queue, enqueue, rec):
    enqueue(queue, rec.fn("before"))
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, 1)
    enqueue(queue, rec.fn("after"))
    assert rec.wait("before")
    assert _not_run_yet(rec, "after")
    f.signal(1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["before", "after"]


@pytest.mark.parametrize("bad_flag", [None, 1, "flag", object()])
def test_wait_for_host_value_bad_flag(queue, bad_flag):
    with pytest.raises(TypeError):
        queue.wait_for_host_value(bad_flag, 1)


def test_wait_for_host_value_event_as_flag(cpu, queue):
    with pytest.raises(TypeError):
        queue.wait_for_host_value(DeviceEvent(cpu), 1)


@pytest.mark.parametrize("bad", [-1, 2**64, 2**100, -(2**70), 1.5, "1", None, 1j])
def test_wait_for_host_value_u64_check(queue, enqueue, rec, bad):
    f = CompletionFlag(queue.device)
    with pytest.raises(TypeError) as exc:
        queue.wait_for_host_value(f, bad)
    assert "value" in str(exc.value)
    # A call that raises changes nothing: the queue is not gated.
    enqueue(queue, rec.fn("x"))
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_wait_for_host_value_index_object(queue, enqueue, rec):
    class Idx:
        def __index__(self):
            return 9

    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, Idx())
    enqueue(queue, rec.fn("x"))
    assert _not_run_yet(rec, "x")
    f.signal(9)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_wait_for_host_value_missing_args(queue):
    f = CompletionFlag(queue.device)
    with pytest.raises(TypeError):
        queue.wait_for_host_value(f)
    with pytest.raises(TypeError):
        queue.wait_for_host_value()
    with pytest.raises(TypeError):
        queue.wait_for_host_value(f, 1, 2)
    with pytest.raises(TypeError):
        queue.wait_for_host_value(f, val=1)


def test_device_and_queue_are_distinct_types(cpu):
    assert not isinstance(cpu, DeviceQueue)
    assert not isinstance(cpu.default_queue, Device)
    assert CPU() is cpu
