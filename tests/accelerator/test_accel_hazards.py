"""Hazard records on accelerators (SPEC §12.6): buffer work is ordered by the
memory it touches, across queues and devices, never by whole queues.

Runs on a real GPU and on the fake driver (both APIs, through
tests/test_fake_backends.py).  Device memory cannot be read from the host
without a host read, which itself waits for the record, so a gate is
observed through host functions behind it (the positive control that it
holds its queue) and through host reads that must or must not wait.
"""

from __future__ import annotations

import numpy as np
import pytest
from accel_support import NOT_YET, WAIT, enqueue, held
from buffer_support import Call, host_source, returns_promptly

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

N = 4096


def on(queue, value, n=N):
    """A device buffer bound to ``queue`` whose last write, an upload of
    ``value``s, is enqueued there (behind whatever the queue holds)."""
    buf = Buffer(DType.int32, (n,), queue)
    buf.inplace_copy_from(host_source(np.full(n, value, np.int32)))
    return buf


def test_copy_does_not_hold_back_its_source_queue(acc, gate, rec):
    qs, qd = DeviceQueue(acc), DeviceQueue(acc)
    src = on(qs, 3)
    dst = Buffer(DType.int32, (N,), qd)
    flag = held(qd, gate, rec, "dst-held")
    returns_promptly(lambda: dst.inplace_copy_from(src))
    enqueue(qs, rec.fn("source-queue"))
    assert rec.wait("source-queue", WAIT), "the source's queue waited for the copy"
    read = Call(dst.to_numpy)
    assert read.blocked() and not rec.has("dst-held")
    flag.signal(1)
    assert (read.value() == 3).all()


def test_copy_does_not_wait_for_unrelated_work_on_the_source_queue(acc, gate, rec):
    qs, qd = DeviceQueue(acc), DeviceQueue(acc)
    src = on(qs, 4)
    src.stream.synchronize(timeout=WAIT)
    held(qs, gate, rec, "src-held")
    dst = Buffer(DType.int32, (N,), qd)
    dst.inplace_copy_from(src)
    assert (returns_promptly(dst.to_numpy) == 4).all()
    assert not rec.has("src-held"), "the gate did not hold the source's queue"


def test_a_producer_is_waited_for_across_devices(acc, acc1, gate, rec):
    """The producer runs on another queue than the source's own (an alias
    of the same storage): only the record links the peer copy to it."""
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    src = Buffer(DType.int32, (N,), DeviceQueue(acc))
    producer = src.to(q0)
    flag = held(q0, gate, rec, "producer-held")
    producer.inplace_copy_from(host_source(np.full(N, 5, np.int32)))
    dst = Buffer(DType.int32, (N,), q1)
    returns_promptly(lambda: dst.inplace_copy_from(src))  # a peer copy
    enqueue(q1, rec.fn("after-peer"))
    assert not rec.wait("after-peer", NOT_YET), "the peer copy did not wait"
    flag.signal(1)
    assert (dst.to_numpy() == 5).all()
    assert rec.wait("after-peer", WAIT)


def test_write_after_read_across_queues(acc, gate, rec):
    """A copy out of A into a held queue is a pending read of A: a write
    into A on another queue waits for it, so the copy gets A's old values."""
    qa, qb, qc = DeviceQueue(acc), DeviceQueue(acc), DeviceQueue(acc)
    a = on(qa, 1)
    a.stream.synchronize(timeout=WAIT)
    writer = a.to(qc)  # the same storage; the write goes through qc
    b = Buffer(DType.int32, (N,), qb)
    flag = held(qb, gate, rec, "reader-held")
    b.inplace_copy_from(a)  # reads A, behind the gate
    returns_promptly(
        lambda: writer.inplace_copy_from(host_source(np.full(N, 2, np.int32)))
    )
    enqueue(qc, rec.fn("writer-queue-after"))
    assert not rec.wait("writer-queue-after", NOT_YET), "the write did not wait"
    flag.signal(1)
    assert (b.to_numpy() == 1).all()
    assert (a.to_numpy() == 2).all()


def test_write_after_write_across_queues(acc, gate, rec):
    qa, qb = DeviceQueue(acc), DeviceQueue(acc)
    flag = held(qa, gate, rec, "first-held")
    buf = on(qa, 1)
    later = buf.to(qb)
    returns_promptly(
        lambda: later.inplace_copy_from(host_source(np.full(N, 2, np.int32)))
    )
    flag.signal(1)
    assert (buf.to_numpy() == 2).all()


def test_host_read_of_device_memory_is_not_queued_behind_its_queue(acc, gate, rec):
    """SPEC §12.6: a host read of device memory is a device-to-host copy that
    waits for the record only, not for unrelated work on the buffer's
    queue (a gate, a host function)."""
    q = DeviceQueue(acc)
    buf = on(q, 6)
    q.synchronize(timeout=WAIT)
    held(q, gate, rec, "held")
    assert (returns_promptly(buf.to_numpy) == 6).all()
    assert returns_promptly(lambda: buf[7].item()) == 6
    returns_promptly(lambda: buf.__setitem__(7, 1))
    assert returns_promptly(lambda: buf[7].item()) == 1
    assert not rec.has("held"), "the gate did not hold the queue"


def test_untracked_device_memory_is_read_on_its_queue(acc, gate, rec):
    """Usage.UNTRACKED device memory: host reads are queued on the buffer's
    queue (so they wait for its gate even with nothing in a record)."""
    q = DeviceQueue(acc)
    buf = Buffer.zeros((N,), DType.int32, q, Usage.UNTRACKED)
    assert not buf._host_hazard_tracked
    q.synchronize(timeout=WAIT)
    flag = held(q, gate, rec, "held")
    read = Call(buf.to_numpy)
    assert read.blocked()
    flag.signal(1)
    assert (read.value() == 0).all()


def test_staging_is_tracked_and_device_pinned_is_not(acc, gate, rec):
    q = DeviceQueue(acc)
    staging = Buffer.zeros((8,), DType.int32, q, Usage.STAGING)
    pinned = DevicePinnedBuffer.zeros((8,), DType.int32, q)
    q.synchronize(timeout=WAIT)
    flag = held(q, gate, rec, "held")
    staging.inplace_copy_from(host_source(np.full(8, 9, np.int32)))
    pinned.inplace_copy_from(host_source(np.full(8, 9, np.int32)))
    assert returns_promptly(pinned.to_numpy).tolist() == [0] * 8  # no record
    read = Call(staging.to_numpy)
    assert read.blocked(), "a staging read did not wait for its last write"
    flag.signal(1)
    assert read.value().tolist() == [9] * 8


def test_a_stamp_of_a_cpu_point_orders_a_gpu_copy(acc, gate, rec):
    """A GPU queue waits for a CPU queue's point (a worker thread holds the
    stream, never a driver thread): device memory stamped as written by
    work on a gated CPU queue is copied only after that work."""
    cq = DeviceQueue(CPU())
    dev = on(acc.default_queue, 1)
    acc.default_queue.synchronize(timeout=WAIT)
    flag = held(cq, gate, rec, "cpu-held")
    dev._stamp_write(HostHazardCompletion.record_on(cq))
    out = Buffer(DType.int32, (N,), DeviceQueue(acc))
    returns_promptly(lambda: out.inplace_copy_from(dev))
    enqueue(out.stream, rec.fn("after-copy"))
    assert not rec.wait("after-copy", NOT_YET), "the copy did not wait"
    flag.signal(1)
    assert (out.to_numpy() == 1).all()


def test_a_cpu_queue_waits_for_a_gpu_point(acc, gate, rec):
    """A CPU buffer stamped as read by a gated GPU queue: a copy into it
    from pageable memory returns at once, and its write waits on a pool
    thread for the GPU point."""
    gq = DeviceQueue(acc)
    host = Buffer.zeros((4,), DType.int32, DeviceQueue(CPU()))
    alias = host.to_numpy()
    flag = held(gq, gate, rec, "gpu-held")
    host._stamp_read(HostHazardCompletion.record_on(gq))
    returns_promptly(
        lambda: host.inplace_copy_from(host_source(np.full(4, 8, np.int32)))
    )
    assert alias.tolist() == [0] * 4, "written before the GPU read passed"
    flag.signal(1)
    assert host.to_numpy().tolist() == [8] * 4


def test_gpu_completions(acc, gate):
    q = DeviceQueue(acc)
    flag = gate(q)
    c = HostHazardCompletion.record_on(q)
    assert not c.is_ready()
    with pytest.raises(TimeoutError):
        c.wait(timeout=0.05)
    flag.signal(1)
    c.wait(timeout=WAIT)
    assert c.is_ready()
    p = HostHazardCompletion.poisoned(q, "the kernel failed")
    with pytest.raises(HostHazardError, match="the kernel failed"):
        p.wait()


POISON_CHILD = r"""
import ctypes, os, sys
import numpy as np
from max.driver import Accelerator, Buffer, DeviceQueue, HostHazardError
from max.dtype import DType
fake = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
fake.fake_gpu_async_error.argtypes = [ctypes.c_void_p, ctypes.c_int]
acc = Accelerator()
which = sys.argv[1]
q = DeviceQueue(acc)
dst = Buffer(DType.int32, (16,), q)
src = Buffer.from_numpy(np.arange(16, dtype=np.int32)).to(acc)
src.stream.synchronize(timeout=10)
q.synchronize(timeout=10)
fake.fake_gpu_async_error(ctypes.c_void_p(q.native_stream_handle), 700)
if which == "copy":
    dst.inplace_copy_from(src)  # fails on the device
else:
    dst = Buffer.zeros((16,), DType.int32, q)  # the fill fails
for access in (dst.to_numpy, lambda: dst[0].item(), lambda: str(dst)):
    try:
        access()
        print("NO-RAISE")
    except HostHazardError as exc:
        print("HAZARD:", exc)
# A later write that succeeds (on a healthy queue) clears it.
healthy = dst.to(DeviceQueue(acc))
healthy.inplace_copy_from(Buffer.from_numpy(np.full(16, 7, np.int32)))
print("AFTER", healthy.to_numpy().tolist()[:3])
"""


@pytest.mark.parametrize("which", ["copy", "fill"])
def test_an_asynchronous_failure_poisons_the_memory_it_wrote(
    fake, run_acc_py, api, which
):
    """SPEC §12.6: a copy or fill that fails on the device (the fake's
    injected asynchronous error) poisons its completion: host access to the
    memory raises HostHazardError naming the operation and the driver's
    error, until a later successful write."""
    r = run_acc_py(POISON_CHILD, which, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("HAZARD")]
    assert len(lines) == 3 and "NO-RAISE" not in r.stdout, r.stdout + r.stderr
    op = {"copy": "Memcpy", "fill": "Memset"}[which]
    error = {"cuda": "CUDA_ERROR_ILLEGAL_ADDRESS", "hip": "hipErrorIllegalAddress"}
    for line in lines:
        assert op in line and "failed" in line and error[api] in line, line
    assert "AFTER [7, 7, 7]" in r.stdout, r.stdout + r.stderr
