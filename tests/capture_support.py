"""Graph capture checks (SPEC §16) shared by the CPU suite (tests/test_capture.py)
and the accelerator suite (tests/accelerator/test_accel_capture.py): each check
takes a ``Kit`` that makes queues and float32 buffers bound to them on one
device.  Not a test module."""

from __future__ import annotations

import contextlib
import gc
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from max import driver
from max.driver import CPU, Buffer, CompletionFlag, DeviceQueue, Usage
from max.dtype import DType

WAIT = 20.0
NOT_YET = 0.15  # long enough for work that (wrongly) runs to have run
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
INTACT = "the capture is still intact"


class Kit:
    """Queues and buffers of one device for the checks.  ``staging`` says
    whether buffers can be pinned host memory (accelerators)."""

    def __init__(self, device: driver.Device) -> None:
        self.device = device
        self.staging = not device.is_host

    def queue(self) -> DeviceQueue:
        return DeviceQueue(self.device)

    def filled(self, q: DeviceQueue, values, pinned: bool = False) -> Buffer:
        """A buffer bound to ``q`` holding ``values`` (complete on return)."""
        data = np.asarray(values, dtype=np.float32)
        if pinned:
            buf = Buffer(DType.float32, data.shape, q, usage=Usage.STAGING)
            buf.inplace_copy_from(Buffer.from_numpy(data))
        else:
            buf = Buffer.from_numpy(data).to(q)
        q.synchronize(timeout=WAIT)
        return buf

    def empty(self, q: DeviceQueue, n: int, pinned: bool = False) -> Buffer:
        usage = Usage.STAGING if pinned else Usage.DEFAULT
        return (
            self.filled(q, np.zeros(n), pinned)
            if pinned
            else Buffer(DType.float32, (n,), q, usage=usage)
        )


def enqueue(q: DeviceQueue, fn: Callable[[], object]) -> None:
    getattr(q, ENQ)(fn)


def read(buf: Buffer) -> list[float]:
    return buf.to_numpy().tolist()


@contextlib.contextmanager
def capturing(q: DeviceQueue) -> Iterator[list[driver.DeviceGraph]]:
    """begin/end around the block; the graph lands in the yielded list, and
    a failure inside the block never leaves the queue capturing."""
    out: list[driver.DeviceGraph] = []
    q.begin_capture()
    try:
        yield out
    finally:
        if q.is_capturing:
            out.append(q.end_capture())


# --------------------------------------------------------------------------
# What capture records, and replay


def check_captured_work_runs_only_when_launched(kit: Kit) -> None:
    q = kit.queue()
    src, dst = kit.filled(q, [1, 2, 3, 4]), kit.empty(q, 4)
    ran = []
    enqueue(q, lambda: ran.append("plain"))  # positive control
    q.synchronize(timeout=WAIT)
    assert ran == ["plain"]
    with capturing(q) as made:
        assert q.is_capturing
        dst.inplace_copy_from(src)
        enqueue(q, lambda: ran.append("captured"))
        time.sleep(NOT_YET)
        assert ran == ["plain"]
    (graph,) = made
    assert not q.is_capturing
    q.synchronize(timeout=WAIT)
    assert ran == ["plain"]
    graph.launch()
    graph.launch(q)
    q.synchronize(timeout=WAIT)
    assert ran == ["plain", "captured", "captured"]
    assert read(dst) == [1, 2, 3, 4]


def check_each_launch_copies_current_contents(kit: Kit) -> None:
    q = kit.queue()
    pinned = kit.staging
    src = kit.filled(q, [0, 0], pinned)
    mid = kit.empty(q, 2)
    dst = kit.empty(q, 2, pinned)
    with driver.capture(q) as graph:
        mid.inplace_copy_from(src)
        dst.inplace_copy_from(mid)
    for i in range(3):
        src.inplace_copy_from(kit.filled(q, [i, i + 10]))
        graph.launch()
        assert read(dst) == [i, i + 10]  # host access waits for the launch


def check_graph_description(kit: Kit) -> None:
    q = kit.queue()
    src, dst = kit.filled(q, [1.0]), kit.empty(q, 1)
    flag = CompletionFlag(kit.device)
    with driver.capture(q) as graph:
        with pytest.raises(RuntimeError, match="has not ended"):
            graph.launch()
        dst.inplace_copy_from(src)
        enqueue(q, lambda: None)
        q.wait_for_host_value(flag, 5)
    assert graph.num_nodes == 3
    assert graph.device is kit.device
    assert "3 nodes" in repr(graph) and repr(q).split(" ")[0] in repr(graph)
    dot = graph.to_dot()
    assert dot.startswith("digraph")
    for label in ("copy", "4 B", "host function", "wait for host value", "== 5"):
        assert label in dot, (label, dot)
    assert len(re.findall(r"n\d+ -> n\d+", dot)) == 2  # queue order
    with pytest.raises(TypeError):
        driver.DeviceGraph()
    with pytest.raises(TypeError, match="pickle"):
        __import__("pickle").dumps(graph)


def check_launch_on_other_queue_and_bad_arguments(kit: Kit) -> None:
    q, other = kit.queue(), kit.queue()
    ran = []
    with driver.capture(q) as graph:
        enqueue(q, lambda: ran.append(1))
    graph.launch(queue=other)
    other.synchronize(timeout=WAIT)
    assert ran == [1]
    with pytest.raises(TypeError, match="queue"):
        graph.launch(kit.device)
    with pytest.raises(RuntimeError, match="not capturing"):
        q.end_capture()
    q.begin_capture()
    with pytest.raises(RuntimeError, match="capturing already"):
        q.begin_capture()
    with pytest.raises(RuntimeError, match="graphs are not captured"):
        graph.launch(q)
    assert q.end_capture().num_nodes == 0
    with pytest.raises(TypeError, match="DeviceQueue"):
        driver.capture(kit.device).__enter__()


def check_capture_context_discards_on_error(kit: Kit) -> None:
    q = kit.queue()
    ran = []
    with pytest.raises(KeyError), driver.capture(q) as graph:
        enqueue(q, lambda: ran.append(1))
        raise KeyError("boom")
    assert not q.is_capturing
    with pytest.raises(RuntimeError, match="has not ended"):
        graph.launch()
    q.synchronize(timeout=WAIT)
    assert ran == []


# --------------------------------------------------------------------------
# Refusals: each leaves the capture intact and usable


def _alloc(kit, q, ctx):
    Buffer(DType.float32, (4,), q)


def _copy_new(kit, q, ctx):
    ctx["src"].copy(q)


def _sync_queue(kit, q, ctx):
    q.synchronize()


def _sync_device(kit, q, ctx):
    kit.device.synchronize()


def _host_read(kit, q, ctx):
    ctx["dst"].to_numpy()


def _host_item(kit, q, ctx):
    ctx["src"][0].item()


def _host_write(kit, q, ctx):
    ctx["dst"][0] = 1.0


def _await_queue(kit, q, ctx):
    import asyncio

    async def main():
        await q

    asyncio.run(main())


def _event_ready(kit, q, ctx):
    ctx["event"].is_ready()


def _event_sync(kit, q, ctx):
    ctx["event"].synchronize()


def _other_thread(kit, q, ctx):
    errors = []

    def other():
        try:
            enqueue(q, lambda: ctx["ran"].append("other"))
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join(WAIT)
    raise errors[0]


def _pageable_copy(kit, q, ctx):
    ctx["dst"].inplace_copy_from(Buffer.from_numpy(np.zeros(4, np.float32)))


REFUSALS = {
    "allocation": (_alloc, "allocating a buffer"),
    "copy into a new buffer": (_copy_new, "allocating a buffer"),
    "queue synchronize": (_sync_queue, "synchronize()"),
    "device synchronize": (_sync_device, "synchronize() of its device"),
    "await queue": (_await_queue, "await is not allowed"),
    "host read": (_host_read, "host access"),
    "item": (_host_item, "host access"),
    "element write": (_host_write, "host access"),
    "event is_ready": (_event_ready, "event recorded during an active capture"),
    "event synchronize": (_event_sync, "event recorded during an active capture"),
    "enqueue from another thread": (_other_thread, "only the thread"),
}
ACCELERATOR_REFUSALS = {
    "pageable copy": (_pageable_copy, "pageable CPU memory"),
}


def check_refusal(kit: Kit, act, message: str) -> None:
    q = kit.queue()
    src, dst = kit.filled(q, [1, 2, 3, 4]), kit.empty(q, 4)
    ran: list[str] = []
    ctx = {"src": src, "dst": dst, "ran": ran}
    with capturing(q) as made:
        dst.inplace_copy_from(src)
        ctx["event"] = q.record_event()
        with pytest.raises(RuntimeError, match=re.escape(message)) as info:
            act(kit, q, ctx)
        assert INTACT in str(info.value)
        assert q.is_capturing
        enqueue(q, lambda: ran.append("after"))  # the capture goes on
    (graph,) = made
    assert graph.num_nodes == 3  # copy, record, host function
    graph.launch()
    q.synchronize(timeout=WAIT)
    assert ran == ["after"]
    assert read(dst) == [1, 2, 3, 4]
    assert ctx["event"].is_ready()  # its capture ended: never recorded


# --------------------------------------------------------------------------
# Several queues


def check_fork_and_join(kit: Kit) -> None:
    q, q2 = kit.queue(), kit.queue()
    src, dst = kit.filled(q2, [7, 8]), kit.empty(q2, 2)
    ran = []
    with driver.capture(q) as graph:
        enqueue(q, lambda: ran.append("a"))
        q2.wait_for(q.record_event())  # q2 joins the capture
        assert q2.is_capturing
        dst.inplace_copy_from(src)
        enqueue(q2, lambda: ran.append("b"))
        q.wait_for(q2)  # joined back
        enqueue(q, lambda: ran.append("c"))
    assert not q2.is_capturing
    assert graph.num_nodes == 6  # a, record, copy, b, join, c
    assert "style=dashed" in graph.to_dot()
    graph.launch()
    q.synchronize(timeout=WAIT)
    assert ran == ["a", "b", "c"]
    assert read(dst) == [7, 8]


def check_unjoined_queue_is_named(kit: Kit) -> None:
    q, q2 = kit.queue(), kit.queue()
    ran = []
    q.begin_capture()
    ev = q.record_event()
    q2.wait_for(event=ev)
    enqueue(q2, lambda: ran.append("forked"))
    with pytest.raises(RuntimeError, match="not joined back") as info:
        q.end_capture()
    assert repr(q2).split(" ")[0] in str(info.value)
    assert "discarded" in str(info.value)
    assert not q.is_capturing and not q2.is_capturing
    for queue in (q, q2):  # usable again
        enqueue(queue, lambda: ran.append("later"))
        queue.synchronize(timeout=WAIT)
    assert ran == ["later", "later"]
    assert ev.is_ready()


def check_fork_rules(kit: Kit) -> None:
    q, q2, q3 = kit.queue(), kit.queue(), kit.queue()
    with capturing(q) as made, capturing(q3):
        with pytest.raises(RuntimeError, match="end it there"):
            q2.wait_for(q)  # joins q's capture...
            q2.end_capture()  # ...which only q may end
        with pytest.raises(RuntimeError, match="another capture"):
            q3.wait_for(q)
        q.wait_for(q2)
    assert made[0].num_nodes == 1  # the join
    outside = kit.queue()
    ran = []
    enqueue(outside, lambda: ran.append("outside"))
    with driver.capture(q) as graph:
        q.wait_for(outside)  # outside the capture: at each launch
        enqueue(q, lambda: ran.append("graph"))
    enqueue(outside, lambda: ran.append("outside 2"))
    graph.launch()
    q.synchronize(timeout=WAIT)
    assert ran == ["outside", "outside 2", "graph"]


# --------------------------------------------------------------------------
# Lifetime, hazard records, the launch trace


def check_operands_kept_alive(kit: Kit) -> None:
    q = kit.queue()
    dst = kit.empty(q, 3)
    seen = []

    def capture_with_temporaries():
        src = kit.filled(q, [4, 5, 6])
        flag = CompletionFlag(kit.device)

        def fn():
            seen.append(1)

        with driver.capture(q) as graph:
            q.wait_for(q.record_event())
            getattr(q, ENQ_ASYNC)(fn, flag, 3, CPU())
            q.wait_for_host_value(flag, 3)
            dst.inplace_copy_from(src)
            enqueue(q, fn)
        return graph, weakref.ref(fn)

    graph, fn_ref = capture_with_temporaries()
    gc.collect()
    assert fn_ref() is not None
    graph.launch()
    graph.launch()
    q.synchronize(timeout=WAIT)
    assert seen == [1] * 4 and read(dst) == [4, 5, 6]
    del graph
    deadline = time.monotonic() + WAIT
    while fn_ref() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert fn_ref() is None  # released once the graph is gone


def check_launch_is_one_hazard_operation(kit: Kit) -> None:
    """Host access and other queues order themselves after a launch as after
    a copy; the launch waits for the records of what it touches."""
    q, other = kit.queue(), kit.queue()
    src, dst = kit.filled(q, [1, 2]), kit.empty(q, 2)
    flag = CompletionFlag(kit.device)
    with driver.capture(q) as graph:
        q.wait_for_host_value(flag, 1)
        dst.inplace_copy_from(src)
    graph.launch()
    got = []
    reader = threading.Thread(target=lambda: got.append(read(dst)))
    reader.start()
    reader.join(NOT_YET)
    assert reader.is_alive() and got == []  # waits for the gated launch
    flag.signal(1)
    reader.join(WAIT)
    assert got == [[1, 2]]  # positive control: then it reads
    # A launch waits for the last write of what it reads, on another queue.
    late = kit.filled(other, [9, 9])
    gate = CompletionFlag(kit.device)
    other.wait_for_host_value(gate, 1)
    src.to(other).inplace_copy_from(late)  # src written on `other`, gated
    flag.reset()
    flag.signal(1)
    graph.launch()
    time.sleep(NOT_YET)
    gate.signal(1)
    assert read(dst) == [9, 9]  # the launch came after the write
    # The same for a graph of copies only (which a CPU queue runs at once
    # when it is idle and nothing is pending).
    with driver.capture(q) as copies:
        dst.inplace_copy_from(src)
    later = kit.filled(other, [3, 4])
    gate.reset()
    other.wait_for_host_value(gate, 1)
    src.to(other).inplace_copy_from(later)  # gated again
    copies.launch()
    time.sleep(NOT_YET)
    gate.signal(1)
    assert read(dst) == [3, 4]


def check_launch_trace(kit: Kit) -> None:
    q = kit.queue()
    src, dst = kit.filled(q, [1, 2, 3]), kit.empty(q, 3)
    with driver.launch_trace() as captured_entries, driver.capture(q) as graph:
        dst.inplace_copy_from(src)
        dst.inplace_copy_from(src)
    assert captured_entries == []  # capturing runs no copy
    with driver.launch_trace() as entries:
        graph.launch()
    assert len(entries) == 2
    kinds = {e.kind for e in entries}
    assert kinds == {driver.LaunchTraceEntry.OperationKind.MEMCPY}
    assert [e.memcpy_byte_size for e in entries] == [12, 12]
    q.synchronize(timeout=WAIT)


# --------------------------------------------------------------------------
# MAX's documented scenario


def check_host_task_gates_copy_over_100_launches(kit: Kit) -> None:
    """An async host function signals a CompletionFlag that a
    wait_for_host_value node gates a copy on; captured once, launched 100
    times with the flag re-armed between launches."""
    q = kit.queue()
    src = kit.filled(q, [0.0] * 4, kit.staging)  # host-visible
    dst = kit.empty(q, 4)
    flag = CompletionFlag(kit.device)
    step = {"i": -1}

    def produce():  # the host task: fills the host-visible source
        np.copyto(np.asarray(src), np.full(4, step["i"], np.float32))

    with driver.capture(q) as graph:
        getattr(q, ENQ_ASYNC)(produce, flag, 1, CPU())
        q.wait_for_host_value(flag, 1)
        dst.inplace_copy_from(src)
    assert graph.num_nodes == 3
    for i in range(100):
        step["i"] = i
        flag.reset()  # re-armed (each launch's kickoff resets it too)
        graph.launch()
        assert read(dst) == [i] * 4


def check_dropped_queue_ends_its_capture(kit: Kit) -> None:
    """Nobody could end a capture once the queue that began it is gone: it
    ends there, thrown away, and the queues that joined it are free."""
    q, joined = kit.queue(), kit.queue()
    ran = []
    q.begin_capture()
    joined.wait_for(q)
    enqueue(joined, lambda: ran.append(1))
    del q
    gc.collect()
    assert not joined.is_capturing
    kit.device.synchronize(timeout=WAIT)  # refused while anything captures
    assert ran == []


# Every check above that takes only a Kit, for the suites to parametrize.
CHECKS = sorted(
    name
    for name in list(globals())
    if name.startswith("check_") and name != "check_refusal"
)
