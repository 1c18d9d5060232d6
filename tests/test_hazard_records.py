"""Hazard records on the CPU (SPEC §12.6): buffer work is ordered by the
memory it touches, never by whole queues.

Each storage records the last write this module enqueued into it and the
reads since.  A read waits for the last write; a write for the last write and
every read since; nothing else.  So a gate on a queue holds back only the
operations that touch memory written or read there.

Every test that shows something does *not* wait carries a positive control:
the gate it relies on really holds its queue (a host function behind it has
not run), so the test cannot pass because nothing was gated.
"""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
from buffer_support import ENQ, NOT_YET, WAIT, Call, open_later, returns_promptly

from max import driver
from max.driver import (
    CPU,
    Buffer,
    DevicePinnedBuffer,
    DeviceQueue,
    HostHazardCompletion,
    HostHazardError,
    Usage,
)
from max.dtype import DType

N = 256


def _enq(queue, fn):
    getattr(queue, ENQ)(fn)


def held(queue, gate, rec, tag):
    """Gates ``queue`` and enqueues a host function behind the gate that
    records ``tag``: the positive control that the gate holds the queue."""
    flag = gate(queue)
    _enq(queue, rec.fn(tag))
    return flag


def assert_still_held(rec, tag):
    assert not rec.has(tag), "the gate did not hold its queue: the test is vacuous"


def filled(values, queue=None):
    """A CPU buffer holding ``values`` (int32), bound to ``queue``."""
    buf = Buffer(DType.int32, (len(values),), queue or DeviceQueue(CPU()))
    buf.to_numpy()[:] = values
    return buf


def gated_write(cpu, gate, rec, value, n=N):
    """A buffer whose last write is a copy of ``value``s enqueued behind a
    gate (its producer), and the gate's flag.  The producer runs on another
    queue than the buffer's own (through a ``to(queue)`` alias of the same
    storage), so only the record links them: host access to the buffer
    must wait for the producer, and waiting for the buffer's queue (idle)
    would not do."""
    buf = Buffer.zeros((n,), DType.int32).to(DeviceQueue(cpu))
    producer_queue = DeviceQueue(cpu)
    alias = buf.to(producer_queue)
    flag = held(producer_queue, gate, rec, "producer-gate")
    alias.inplace_copy_from(filled([value] * n))
    return buf, flag


# --------------------------------------------------------------------------
# The two programs of the issue that hung under queue joins


ISSUE_PROGRAM = r"""
import numpy as np
from max import driver as d
from max.dtype import DType
cpu = d.CPU()
q = d.DeviceQueue(cpu); f = d.CompletionFlag(cpu)
src = d.Buffer.from_numpy(np.arange(4096, dtype=np.int32))
dst = d.Buffer(DType.int32, (4096,), q)
q.wait_for_host_value(f, 1)
dst.inplace_copy_from(src)
if VARIANT == "zeros":
    print(d.Buffer.zeros((64,), DType.int32).to_numpy().sum(), flush=True)
else:
    print(src[::2].copy(q).shape, flush=True)
print("DONE", flush=True)
"""


@pytest.mark.parametrize("variant", ["zeros", "strided"])
def test_the_programs_that_hung_return_and_exit(run_py, variant):
    """A copy into a gated queue held back the CPU's default queue (the
    source's) under the old rule: a later fill, or the staging of a strided
    copy, waited for ever, and the process could not exit."""
    r = run_py(f"VARIANT = {variant!r}\n" + ISSUE_PROGRAM, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------
# Host access waits for the record only


@pytest.mark.parametrize(
    "access",
    [
        lambda b: b.to_numpy(),
        lambda b: b[3].item(),
        lambda b: b.__setitem__(3, 1),
        lambda b: str(b),
        lambda b: np.asarray(b),
        lambda b: np.from_dlpack(b),
        lambda b: b.copy(),
        lambda b: Buffer(DType.int32, b.shape).inplace_copy_from(b),
    ],
    ids=[
        "to_numpy",
        "item",
        "setitem",
        "str",
        "asarray",
        "dlpack",
        "copy",
        "copy_from",
    ],
)
def test_host_access_not_blocked_by_unrelated_gated_work(cpu, gate, rec, access):
    """A gate and a host function on the buffer's own queue: neither touches
    the buffer's record, so host access returns at once."""
    q = DeviceQueue(cpu)
    buf = Buffer.zeros((N,), DType.int32).to(q)
    held(q, gate, rec, "gated")
    returns_promptly(lambda: access(buf))
    assert_still_held(rec, "gated")


@pytest.mark.parametrize(
    "access",
    [
        lambda b: b.to_numpy().tolist(),
        lambda b: [b[5].item()],
        lambda b: str(b),
        lambda b: b.copy().to_numpy().tolist(),
        lambda b: b.contiguous().to_numpy().tolist(),
    ],
    ids=["to_numpy", "item", "str", "copy", "contiguous"],
)
def test_host_reads_wait_for_the_last_write(cpu, gate, rec, access):
    buf, flag = gated_write(cpu, gate, rec, 7)
    call = Call(lambda: access(buf))
    assert call.blocked(), "read before its producer ran"
    flag.signal(1)
    got = call.value()
    assert "7" in got if isinstance(got, str) else set(got) == {7}


def test_host_write_waits_for_the_last_write(cpu, gate, rec):
    """The element written lands after the producer, so it is not lost."""
    buf, flag = gated_write(cpu, gate, rec, 7, n=4)
    call = Call(lambda: buf.__setitem__(0, 1))
    assert call.blocked()
    flag.signal(1)
    call.value()
    assert buf.to_numpy().tolist() == [1, 7, 7, 7]


def test_host_write_waits_for_pending_reads(cpu, gate, rec):
    """Write after read: a read of the buffer declared on a gated queue
    (a stamp) holds a host write until the read has passed; a host read
    does not wait for it."""
    q = DeviceQueue(cpu)
    buf = filled([1, 2, 3, 4])
    flag = held(q, gate, rec, "gated")
    buf._stamp_read(HostHazardCompletion.record_on(q))
    assert returns_promptly(lambda: buf[0].item()) == 1
    call = Call(lambda: buf.__setitem__(0, 9))
    assert call.blocked(), "wrote before the pending read"
    flag.signal(1)
    call.value()
    assert rec.wait("gated")
    assert buf.to_numpy().tolist() == [9, 2, 3, 4]


def test_a_host_read_of_a_view_waits_for_the_storage(cpu, gate, rec):
    """The record is per storage: a view of another part waits too."""
    buf, flag = gated_write(cpu, gate, rec, 5, n=8)
    call = Call(lambda: buf[6:].to_numpy().tolist())
    assert call.blocked()
    open_later(flag)
    assert call.value() == [5, 5]


def test_host_waits_release_the_gil(cpu, gate, rec):
    buf, flag = gated_write(cpu, gate, rec, 3, n=4)
    counter = [0]

    def spin():
        for _ in range(200_000):
            counter[0] += 1
        flag.signal(1)

    t = threading.Thread(target=spin)
    t.start()
    try:
        assert buf.to_numpy().tolist() == [3, 3, 3, 3]
    finally:
        flag.signal(1)
        t.join(WAIT)
    assert counter[0] == 200_000


def test_a_host_function_sees_its_queue_as_earlier_work_left_it(cpu):
    """Inside a host function of the queue that holds a pending write (one
    enqueued after the function), host access does not wait for it: it
    could not run before the function returns."""
    q = DeviceQueue(cpu)
    buf = Buffer.zeros((4,), DType.int32).to(q)
    seen = []
    release = threading.Event()
    _enq(q, lambda: (release.wait(WAIT), seen.append(buf.to_numpy().tolist())))
    buf.inplace_copy_from(filled([8, 8, 8, 8]))  # behind the host function
    release.set()
    q.synchronize(timeout=WAIT)
    assert seen == [[0, 0, 0, 0]]
    assert buf.to_numpy().tolist() == [8, 8, 8, 8]


# --------------------------------------------------------------------------
# Copies


def test_copy_does_not_hold_back_its_source_queue(cpu, gate, rec):
    """A copy into a gated queue leaves the source's queue free: work
    enqueued there afterwards runs at once."""
    src = filled(list(range(N)))
    dst = Buffer.zeros((N,), DType.int32).to(DeviceQueue(cpu))
    held(dst.stream, gate, rec, "dst-gated")
    dst.inplace_copy_from(src)
    _enq(src.stream, rec.fn("after"))
    assert rec.wait("after", WAIT), "the source's queue waited for the copy"
    assert_still_held(rec, "dst-gated")


def test_source_may_be_overwritten_when_a_gated_copy_returns(cpu, gate, rec):
    """From pageable memory the source has been read on return: it may be
    written at once (no pending read), and the destination gets the old
    values."""
    src = filled([7] * N)
    dst = Buffer.zeros((N,), DType.int32).to(DeviceQueue(cpu))
    flag = held(dst.stream, gate, rec, "dst-gated")
    returns_promptly(lambda: dst.inplace_copy_from(src))
    returns_promptly(lambda: src.__setitem__(0, 99))
    src.to_numpy()[1:] = 99
    assert_still_held(rec, "dst-gated")
    flag.signal(1)
    assert (dst.to_numpy() == 7).all()


def test_copy_waits_for_the_source_last_write(cpu, gate, rec):
    """A producer on a gated queue: a copy from its buffer (which reads the
    source during the call) waits for it, then sees its values."""
    src, flag = gated_write(cpu, gate, rec, 4)
    dst = Buffer(DType.int32, (N,), DeviceQueue(cpu))
    call = Call(lambda: dst.inplace_copy_from(src))
    assert call.blocked(), "copied before the source's producer ran"
    flag.signal(1)
    call.value()
    assert (dst.to_numpy() == 4).all()


def test_copy_does_not_wait_for_unrelated_work_on_the_source_queue(cpu, gate, rec):
    src = filled([6] * N)
    held(src.stream, gate, rec, "src-gated")
    dst = Buffer(DType.int32, (N,), DeviceQueue(cpu))
    returns_promptly(lambda: dst.inplace_copy_from(src))
    assert (dst.to_numpy() == 6).all()
    assert_still_held(rec, "src-gated")


def test_write_after_write_across_queues(cpu, gate, rec):
    """Two copies into one storage through aliases on two queues: the
    second (on an idle queue) waits for the first (gated), so the second's
    values win."""
    dst = Buffer.zeros((N,), DType.int32).to(DeviceQueue(cpu))
    first, second = dst.to(DeviceQueue(cpu)), dst.to(DeviceQueue(cpu))
    flag = held(first.stream, gate, rec, "first-gated")
    first.inplace_copy_from(filled([1] * N))
    returns_promptly(lambda: second.inplace_copy_from(filled([2] * N)))
    flag.signal(1)
    first.stream.synchronize(timeout=WAIT)
    assert (dst.to_numpy() == 2).all()


def test_write_after_read_across_queues(cpu, gate, rec):
    """A declared read of A on a gated queue: a copy into A on an idle queue
    is held until the read passed (its item waits behind a wait)."""
    q = DeviceQueue(cpu)
    a = filled([1] * N, DeviceQueue(cpu))
    alias = a.to_numpy()  # plain memory: shows what was written so far
    flag = held(q, gate, rec, "reader")
    a._stamp_read(HostHazardCompletion.record_on(q))
    writer = DeviceQueue(cpu)
    a_on_writer = a.to(writer)
    returns_promptly(lambda: a_on_writer.inplace_copy_from(filled([2] * N)))
    _enq(writer, rec.fn("writer-after"))
    assert not rec.wait("writer-after", NOT_YET), "the write did not wait"
    assert (alias == 1).all()
    flag.signal(1)
    assert rec.wait("writer-after", WAIT)
    assert (a.to_numpy() == 2).all()


def test_chain_of_copies_waits_for_a_gated_producer(cpu, gate, rec):
    """a -> b -> c -> d over four queues, a's producer gated on a fifth:
    every copy waits for its producer, and the end holds the start's
    values."""
    queues = [DeviceQueue(cpu) for _ in range(4)]
    bufs = [Buffer.zeros((N,), DType.int64).to(q) for q in queues]
    producer = bufs[0].to(DeviceQueue(cpu))
    flag = held(producer.stream, gate, rec, "first")
    producer.inplace_copy_from(Buffer.from_numpy(np.full(N, 5, np.int64)))
    chain = Call(
        lambda: [b.inplace_copy_from(a) for a, b in zip(bufs, bufs[1:], strict=False)]
    )
    assert chain.blocked()  # b reads a during the call: a's producer is gated
    flag.signal(1)
    chain.value()
    assert (bufs[-1].to_numpy() == 5).all()


def test_to_stream_shares_the_record(cpu, gate, rec):
    """buf.to(q2) is the same storage with the same record: host access to
    the alias waits for a write pending on the original's queue, and work on
    the two queues is not linked otherwise."""
    buf, flag = gated_write(cpu, gate, rec, 9, n=4)
    q2 = DeviceQueue(cpu)
    moved = returns_promptly(lambda: buf.to(q2))
    assert moved.stream is q2 and moved._data_ptr() == buf._data_ptr()
    _enq(q2, rec.fn("q2"))
    assert rec.wait("q2", WAIT), "q2 waited for the original's queue"
    read = Call(lambda: moved.to_numpy().tolist())
    assert read.blocked()
    flag.signal(1)
    assert read.value() == [9] * 4


EXIT_CHILD = r"""
from max.driver import CPU, Buffer, CompletionFlag, DeviceQueue, HostHazardCompletion
from max.dtype import DType
cpu = CPU()
q = DeviceQueue(cpu)
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
keep = []
for _ in range(50):
    dst = Buffer(DType.int8, (1 << 16,), q)
    dst.inplace_copy_from(Buffer(DType.int8, (1 << 16,)))
    dst._stamp_read(HostHazardCompletion.record_on(q))
    keep.append(dst)
print("EXITING", flush=True)
"""


def test_interpreter_exit_with_gated_copies_and_records(run_py):
    """SPEC §12.7: pending or gated copies, and records holding their
    completions, never delay interpreter exit."""
    t0 = time.monotonic()
    r = run_py(EXIT_CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "EXITING" in r.stdout
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30


# --------------------------------------------------------------------------
# Stamps and completions


def test_stamp_write_orders_host_access_after_unseen_work(cpu, gate, rec):
    """A host function writes the buffer through a NumPy alias (work the
    module does not see); a write stamp makes host access wait for it."""
    q = DeviceQueue(cpu)
    buf = Buffer.zeros((4,), DType.int32)
    alias = buf.to_numpy()
    flag = gate(q)
    _enq(q, lambda: alias.__setitem__(slice(None), 3))
    buf._stamp_write(HostHazardCompletion.record_on(q))
    call = Call(lambda: buf.to_numpy().tolist())
    assert call.blocked()
    flag.signal(1)
    assert call.value() == [3, 3, 3, 3]


def test_a_write_stamp_supersedes_only_what_is_before_it(cpu, gate, rec):
    """A write stamp is the new last write and clears the reads (MAX's rule)
    as far as they are before it: a completed read, or one of the stamp's
    own queue, goes; a read still pending on another queue stays, and a
    later host write still waits for it (no module operation may race)."""
    q, other = DeviceQueue(cpu), DeviceQueue(cpu)
    buf = filled([1, 2])
    flag = held(q, gate, rec, "reader")
    buf._stamp_read(HostHazardCompletion.record_on(q))
    buf._stamp_write(HostHazardCompletion.record_on(other))  # other is idle
    write = Call(lambda: buf.__setitem__(0, 5))
    assert write.blocked(), "the pending read on another queue was dropped"
    flag.signal(1)
    write.value()
    assert rec.wait("reader")
    held(q, gate, rec, "second")
    buf._stamp_read(HostHazardCompletion.record_on(other))  # complete at once
    buf._stamp_write(HostHazardCompletion.record_on(other))
    returns_promptly(lambda: buf.__setitem__(1, 6))
    assert buf.to_numpy().tolist() == [5, 6]
    assert_still_held(rec, "second")


def test_completion_record_on_is_ready_when_its_queue_passed(cpu, gate):
    q = DeviceQueue(cpu)
    flag = gate(q)
    c = HostHazardCompletion.record_on(q)
    assert not c.is_ready()
    with pytest.raises(TimeoutError):
        c.wait(timeout=0.05)
    flag.signal(1)
    c.wait(timeout=WAIT)
    assert c.is_ready()
    assert HostHazardCompletion.record_on(DeviceQueue(cpu)).is_ready()


def test_completions_compare_and_hash_by_identity(cpu):
    q = DeviceQueue(cpu)
    a, b = HostHazardCompletion.record_on(q), HostHazardCompletion.record_on(q)
    assert a is not b and a != b and a == a
    assert len({a, b, a}) == 2
    assert "HostHazardCompletion" in repr(a) and "cpu[0]:queue@0x" in repr(a)


def test_a_poisoned_completion_never_blocks_and_raises(cpu, gate):
    q = DeviceQueue(cpu)
    gate(q)  # a gated queue: a poisoned completion still never blocks
    c = HostHazardCompletion.poisoned(q, "producer blew up")
    assert c.is_ready()
    with pytest.raises(HostHazardError, match="producer blew up"):
        returns_promptly(c.wait)
    assert issubclass(HostHazardError, RuntimeError)
    assert "poisoned: producer blew up" in repr(c)


def test_poison_outranks_the_point_and_the_first_message_stays(cpu):
    c = HostHazardCompletion.record_on(DeviceQueue(cpu))
    c.wait()
    c.poison("executor failed")
    c.poison("a later failure")
    with pytest.raises(HostHazardError, match="executor failed"):
        c.wait()
    assert c.is_ready()


def test_host_access_to_poisoned_memory_raises_until_a_successful_write(cpu):
    buf = filled([1, 2, 3])
    buf._stamp_write(HostHazardCompletion.poisoned(buf.stream, "the kernel failed"))
    for access in (
        buf.to_numpy,
        lambda: buf[0].item(),
        lambda: buf.__setitem__(0, 1),
        lambda: str(buf),
        buf.copy,
        lambda: np.from_dlpack(buf),
    ):
        with pytest.raises(HostHazardError, match="the kernel failed"):
            access()
    buf.inplace_copy_from(filled([4, 5, 6]))  # a later write that succeeds
    assert buf.to_numpy().tolist() == [4, 5, 6]


def test_a_poisoned_read_does_not_poison_the_memory(cpu):
    buf = filled([1, 2])
    buf._stamp_read(HostHazardCompletion.poisoned(buf.stream, "reader failed"))
    buf[0] = 3
    assert buf.to_numpy().tolist() == [3, 2]


def test_completion_arguments_are_checked(cpu):
    q = DeviceQueue(cpu)
    with pytest.raises(TypeError, match="DeviceQueue"):
        HostHazardCompletion.record_on(cpu)
    with pytest.raises(TypeError, match="'error'"):  # MAX 26.7's name
        HostHazardCompletion.poisoned(q, 3)
    with pytest.raises(TypeError):
        HostHazardCompletion()
    with pytest.raises(TypeError, match="HostHazardCompletion"):
        Buffer(DType.int8, (1,))._stamp_write(q)
    c = HostHazardCompletion.record_on(q)
    with pytest.raises(TypeError):
        c.poison(None)
    with pytest.raises(ValueError):
        c.wait(timeout=-1)
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(c)
    fresh = HostHazardCompletion.__new__  # refused, as the constructor is
    with pytest.raises(TypeError):
        fresh(HostHazardCompletion)


def test_host_hazard_names_are_exported():
    assert driver.HostHazardError is HostHazardError
    assert "HostHazardError" in driver.__all__
    assert "HostHazardCompletion" not in driver.__all__  # as MAX: max._core
    from max._core.driver import HostHazardCompletion as core_completion

    assert core_completion is HostHazardCompletion


# --------------------------------------------------------------------------
# Usage.UNTRACKED


def test_tracked_by_default_and_views_share_the_answer(cpu):
    assert Usage.UNTRACKED.value == 2
    buf = Buffer(DType.float32, (8,), cpu)
    assert buf._host_hazard_tracked and buf[2:4]._host_hazard_tracked
    assert Buffer.from_numpy(np.zeros(4))._host_hazard_tracked
    assert Buffer.zeros((4,), DType.int8)._host_hazard_tracked
    un = Buffer(DType.float32, (8,), cpu, Usage.UNTRACKED)
    assert not un._host_hazard_tracked and not un[2:4]._host_hazard_tracked
    assert not un.view(DType.uint8)._host_hazard_tracked
    assert un[2:4].usage is Usage.UNTRACKED
    both = Buffer(DType.int8, (2,), cpu, Usage.STAGING | Usage.UNTRACKED)
    assert not both._host_hazard_tracked and both.usage is (
        Usage.STAGING | Usage.UNTRACKED
    )
    with pytest.raises(ValueError, match="non-host"):
        DevicePinnedBuffer(DType.int8, (2,), cpu)


def test_untracked_host_access_waits_for_nothing_but_item(cpu, gate, rec):
    """Untracked storage: a gated producer does not hold to_numpy, a write
    or a stamp; item() waits for the buffer's queue (as MAX's pinned)."""
    q = DeviceQueue(cpu)
    un = Buffer.zeros((4,), DType.int32, q, Usage.UNTRACKED)
    flag = held(q, gate, rec, "gated")
    un.inplace_copy_from(filled([5] * 4))  # pending behind the gate
    un._stamp_write(HostHazardCompletion.poisoned(q, "ignored"))
    assert returns_promptly(un.to_numpy).tolist() == [0] * 4
    returns_promptly(lambda: un.__setitem__(1, 1))
    item = Call(lambda: un[0].item())
    assert item.blocked(), "item() did not wait for the untracked buffer's queue"
    flag.signal(1)
    assert item.value() == 5


def test_untracked_copies_are_ordered_by_queue_order(cpu, gate, rec):
    """A copy from untracked memory waits for its queue so far (work the
    module cannot tell apart from its writes)."""
    q = DeviceQueue(cpu)
    un = Buffer.zeros((4,), DType.int32, q, Usage.UNTRACKED)
    alias = un.to_numpy()
    flag = gate(q)
    _enq(q, lambda: alias.__setitem__(slice(None), 8))
    dst = Buffer(DType.int32, (4,))
    call = Call(lambda: dst.inplace_copy_from(un))
    assert call.blocked()
    flag.signal(1)
    call.value()
    assert dst.to_numpy().tolist() == [8] * 4


# --------------------------------------------------------------------------
# batch_inplace_copy and copy_pinned_to_destinations


def test_batch_inplace_copy_copies_every_pair():
    srcs = [filled([i] * 4) for i in range(5)]
    dsts = [Buffer(DType.int32, (4,)) for _ in range(5)]
    driver.batch_inplace_copy(dsts, srcs)
    driver.batch_inplace_copy(dsts=dsts[:1], srcs=dsts[:1])  # dst is src
    assert [d.to_numpy().tolist() for d in dsts] == [[i] * 4 for i in range(5)]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Buffer(DType.int16, (4,)),
        lambda: Buffer(DType.int32, (5,)),
        lambda: Buffer(DType.int32, (8,))[::2],
    ],
    ids=["dtype", "count", "strided"],
)
def test_batch_inplace_copy_checks_everything_before_copying(bad):
    dsts = [Buffer.zeros((4,), DType.int32), bad()]
    srcs = [filled([1] * 4), filled([2] * 4)]
    with pytest.raises(ValueError, match="pair 1"):
        driver.batch_inplace_copy(dsts, srcs)
    assert dsts[0].to_numpy().tolist() == [0] * 4, "a pair was copied"


def test_batch_inplace_copy_bad_arguments():
    a = Buffer(DType.int32, (4,))
    with pytest.raises(ValueError, match="same length"):
        driver.batch_inplace_copy([a, a], [a])
    with pytest.raises(TypeError, match="pair 0"):
        driver.batch_inplace_copy([a], [np.zeros(4)])
    with pytest.raises(TypeError):
        driver.batch_inplace_copy(a, a)
    with pytest.raises(TypeError):
        driver.batch_inplace_copy([a])


def test_copy_pinned_to_destinations(cpu):
    source = filled([3, 1, 4])
    dsts = [Buffer(DType.int32, (3,), DeviceQueue(cpu)) for _ in range(3)]
    driver.copy_pinned_to_destinations(source, dsts)
    assert all(d.to_numpy().tolist() == [3, 1, 4] for d in dsts)
    with pytest.raises(ValueError, match="pair 1"):
        driver.copy_pinned_to_destinations(source, [dsts[0], Buffer(DType.int32, (4,))])
    with pytest.raises(TypeError, match="source"):
        driver.copy_pinned_to_destinations([source], dsts)
    assert driver.copy_pinned_to_destinations.__text_signature__ == (
        "(source, destinations)"
    )
    assert driver.batch_inplace_copy.__text_signature__ == "(dsts, srcs)"
