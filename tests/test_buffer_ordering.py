"""Buffer operations and CPU queues (SPEC §12.6, §12.7, §8): what the caller
may rely on when a copy returns, copies in the order of the destination's
queue, pending copies survive dropped buffers, waits are interruptible, and
a million small buffers do not grow memory.  The hazard-record rules (what
a copy or a host access waits for, and what it does not) are in
test_hazard_records.py.

CPU queues really run their work on host threads here **[beyond MAX]**, so
a gate (``queue.wait_for_host_value``) holds a queue and host functions
observe the order.  Each buffer gets its own queue unless a test says
otherwise.  A NumPy alias taken with ``to_numpy()`` before a gate is plain
memory (SPEC §12.6): it shows what has been written so far, without
waiting.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import time

import numpy as np
import pytest
from buffer_support import (
    ENQ,
    NOT_YET,
    WAIT,
    host_source,
    open_later,
    returns_promptly,
)

from max.driver import CPU, Buffer, DeviceQueue
from max.dtype import DType

N = 1024


def _enq(queue, fn):
    getattr(queue, ENQ)(fn)


def _pair(cpu, src_values=7, dst_values=0):
    """A source and a destination on two fresh queues, with NumPy aliases
    taken while both queues are idle."""
    qs, qd = DeviceQueue(cpu), DeviceQueue(cpu)
    src = Buffer(DType.int32, (N,), qs)
    dst = Buffer(DType.int32, (N,), qd)
    src_alias, dst_alias = src.to_numpy(), dst.to_numpy()
    src_alias[:] = src_values
    dst_alias[:] = dst_values
    return src, dst, src_alias, dst_alias


# --------------------------------------------------------------------------
# From pageable CPU memory: the source is read when the call returns


def test_source_read_on_return_while_destination_gated(cpu, gate):
    """SPEC §12.6: from pageable CPU memory the source has been read when
    the call returns and it never waits for the destination's queue; the
    destination later gets the OLD values."""
    src, dst, src_alias, dst_alias = _pair(cpu)
    flag = gate(dst.stream)
    returns_promptly(lambda: dst.inplace_copy_from(src))
    # Overwrite at once, through NumPy and as a host write: the copy has
    # read the source, so nothing in its record is pending.
    src_alias[:] = 99
    returns_promptly(lambda: src.__setitem__(0, 99))
    time.sleep(NOT_YET)
    assert (dst_alias == 0).all(), "written while its queue is gated"
    flag.signal(1)
    dst.stream.synchronize(timeout=WAIT)
    assert (dst_alias == 7).all()
    assert (dst.to_numpy() == 7).all()


def test_source_read_on_return_from_a_strided_view(cpu, gate):
    qs, qd = DeviceQueue(cpu), DeviceQueue(cpu)
    src = Buffer(DType.int64, (8, 8), qs)
    src_alias = src.to_numpy()
    src_alias[...] = np.arange(64).reshape(8, 8)
    expected = src_alias[::-2, 1::3].copy()
    flag = gate(qd)
    copy = returns_promptly(lambda: src[::-2, 1::3].copy(qd))
    src_alias[...] = -1
    flag.signal(1)
    assert np.array_equal(copy.to_numpy(), expected)


def test_copy_to_a_gated_queue_returns_and_reads_the_source(cpu, gate):
    """``copy(stream)`` into a gated queue: returns at once, old values."""
    src, _, src_alias, _ = _pair(cpu, src_values=3)
    q = DeviceQueue(cpu)
    flag = gate(q)
    copy = returns_promptly(lambda: src.copy(q))
    assert copy.stream is q
    src_alias[:] = -3
    open_later(flag)
    assert (copy.to_numpy() == 3).all()


# --------------------------------------------------------------------------
# Pageable CPU to pageable CPU: written in the destination queue's order


def test_destination_written_at_once_when_idle(cpu, wait_until):
    """SPEC §12.6: at once when the destination's queue is idle (no
    synchronize needed for the write to land)."""
    src, dst, _, dst_alias = _pair(cpu, src_values=4)
    dst.inplace_copy_from(src)
    assert wait_until(lambda: (dst_alias == 4).all(), timeout=WAIT)


def test_destination_written_in_its_queue_order(cpu, gate, rec):
    """Host functions enqueued on the destination's queue before the copy
    see the old values, those enqueued after it the new ones."""
    src, dst, _, dst_alias = _pair(cpu, src_values=6)
    seen = {}
    flag = gate(dst.stream)
    _enq(dst.stream, lambda: seen.__setitem__("before", dst_alias.copy()))
    dst.inplace_copy_from(src)
    _enq(dst.stream, lambda: seen.__setitem__("after", dst_alias.copy()))
    _enq(dst.stream, rec.fn("done"))
    time.sleep(NOT_YET)
    assert not rec.has("done") and (dst_alias == 0).all()
    flag.signal(1)
    assert rec.wait("done")
    assert (seen["before"] == 0).all()
    assert (seen["after"] == 6).all()


def test_copy_runs_after_earlier_work_on_the_destination_queue(cpu, gate):
    """A host function enqueued on the destination's queue before the copy
    writes the destination first; the copy overwrites it."""
    src, dst, _, dst_alias = _pair(cpu, src_values=9)
    flag = gate(dst.stream)
    _enq(dst.stream, lambda: dst_alias.__setitem__(slice(None), -9))
    dst.inplace_copy_from(src)
    flag.signal(1)
    dst.stream.synchronize(timeout=WAIT)
    assert (dst_alias == 9).all()


def test_chain_of_copies_across_queues_needs_no_synchronization(cpu):
    """a -> b -> c -> d over four queues, repeatedly, with no user
    synchronization: every copy sees the previous one's result."""
    queues = [DeviceQueue(cpu) for _ in range(4)]
    bufs = [Buffer(DType.int64, (N,), q) for q in queues]
    for round_ in range(50):
        bufs[0].to_numpy()[:] = round_
        for a, b in zip(bufs, bufs[1:], strict=False):
            b.inplace_copy_from(a)
        assert (bufs[-1].to_numpy() == round_).all(), round_


def test_copies_in_both_directions_between_two_queues(cpu, gate):
    src, dst, src_alias, dst_alias = _pair(cpu, src_values=1, dst_values=2)
    flag = gate(dst.stream)
    dst.inplace_copy_from(src)  # behind the gate: dst <- 1
    open_later(flag)
    # The source is now dst: the call first waits for dst's queue (the gate,
    # then the first copy), so it reads 1, not 2.
    src.inplace_copy_from(dst)
    assert (src.to_numpy() == 1).all()
    assert (dst.to_numpy() == 1).all()


# --------------------------------------------------------------------------
# to(stream): zero-copy, the same record; the queues stay independent


def test_to_stream_does_not_order_later_work(cpu, gate, rec):
    """SPEC §12.6: later work on the two queues is ordered by the user."""
    q1, q2 = DeviceQueue(cpu), DeviceQueue(cpu)
    buf = Buffer(DType.int32, (4,), q1)
    moved = buf.to(q2)
    flag = gate(q1)
    _enq(q1, rec.fn("q1"))
    _enq(moved.stream, rec.fn("q2"))
    assert rec.wait("q2")
    assert not rec.has("q1")
    flag.signal(1)
    assert rec.wait("q1")


# --------------------------------------------------------------------------
# Host reads wait for a pending copy (its producer)


def test_host_reads_wait_for_a_pending_copy(cpu, gate):
    src, dst, _, _ = _pair(cpu, src_values=11)
    flag = gate(dst.stream)
    dst.inplace_copy_from(src)
    open_later(flag)
    assert (dst.to_numpy() == 11).all()
    assert dst[0].item() == 11


CTRL_C_CHILD = r"""
import sys, time
import numpy as np
from max.driver import CPU, Buffer, CompletionFlag, DeviceQueue
from max.dtype import DType
kind = sys.argv[1]
cpu = CPU()
q = DeviceQueue(cpu)
buf = Buffer(DType.int32, (4,), q)
other = Buffer(DType.int32, (4,))
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
buf.inplace_copy_from(other)  # buf's producer, behind the gate
waits = {
    "to_numpy": lambda: buf.to_numpy(),
    "item": lambda: buf[0].item(),
    "setitem": lambda: buf.__setitem__(0, 1),
    "str": lambda: str(buf),
    "copy": lambda: buf.copy(),
    "inplace_copy_from": lambda: other.inplace_copy_from(buf),
}
print("READY", flush=True)
t0 = time.monotonic()
try:
    waits[kind]()
    print("NOT-INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED %.3f" % (time.monotonic() - t0), flush=True)
f.signal(1)
q.synchronize(timeout=20)
buf[0] = 3
print("AFTER", buf[0].item(), flush=True)
"""


def _readline(proc, timeout):
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if r else None


@pytest.mark.parametrize(
    "kind", ["to_numpy", "item", "setitem", "str", "copy", "inplace_copy_from"]
)
def test_ctrl_c_interrupts_buffer_waits(kind, popen_py):
    """SPEC §12.6: every wait is interruptible by Ctrl-C; the buffer and its
    queue stay usable."""
    proc = popen_py(CTRL_C_CHILD, kind)
    try:
        line = _readline(proc, 30)
        assert line is not None and line.strip() == "READY", (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "INTERRUPTED" in out and "NOT-INTERRUPTED" not in out, out + err
    assert float(out.split("INTERRUPTED", 1)[1].split()[0]) < 5.0, out
    assert "AFTER 3" in out, out + err


# --------------------------------------------------------------------------
# Lifetime: a dropped buffer never loses a pending copy (SPEC §12.7)


def test_dropped_buffers_keep_a_pending_copy(cpu, gate):
    src, dst, _, dst_alias = _pair(cpu, src_values=12)
    qd = dst.stream
    flag = gate(qd)
    dst.inplace_copy_from(src)
    del src, dst
    gc.collect()
    flag.signal(1)
    qd.synchronize(timeout=WAIT)
    assert (dst_alias == 12).all()


def test_dropped_destination_seen_through_a_view(cpu, gate):
    qd = DeviceQueue(cpu)
    src = Buffer.from_numpy(np.arange(N, dtype=np.int32))
    dst = Buffer.zeros((N,), DType.int32).to(qd)
    tail = dst[N - 4 :]
    flag = gate(qd)
    dst.inplace_copy_from(src)
    del src, dst
    gc.collect()
    open_later(flag)
    assert tail.to_numpy().tolist() == list(range(N - 4, N))


def test_dropped_source_and_destination_queue_objects(cpu, gate):
    """The queues' Python objects may go too: the copy still runs."""
    src, dst, _, dst_alias = _pair(cpu, src_values=13)
    flag = gate(dst.stream)
    dst.inplace_copy_from(src)
    del src, dst
    gc.collect()
    flag.signal(1)
    cpu.synchronize(timeout=WAIT)
    assert (dst_alias == 13).all()


def test_many_dropped_pending_copies(cpu, gate):
    qd = DeviceQueue(cpu)
    dsts = [Buffer.zeros((16,), DType.int64).to(qd) for _ in range(200)]
    aliases = [dst.to_numpy() for dst in dsts]  # while qd is idle
    srcs = [host_source(np.full(16, i, np.int64)) for i in range(200)]
    flag = gate(qd)
    for src, dst in zip(srcs, dsts, strict=True):
        dst.inplace_copy_from(src)
    del srcs, src
    del dsts, dst
    gc.collect()
    flag.signal(1)
    qd.synchronize(timeout=WAIT)
    for i, alias in enumerate(aliases):
        assert (alias == i).all(), i


EXIT_CHILD = r"""
from max.driver import CPU, Buffer, CompletionFlag, DeviceQueue
from max.dtype import DType
cpu = CPU()
q = DeviceQueue(cpu)
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
for _ in range(50):
    dst = Buffer(DType.int8, (1 << 16,), q)
    dst.inplace_copy_from(Buffer(DType.int8, (1 << 16,), DeviceQueue(cpu)))
print("EXITING", flush=True)
"""


def test_interpreter_exit_with_pending_copies(run_py):
    """SPEC §10: exit with copies still gated is prompt and clean."""
    r = run_py(EXIT_CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "EXITING" in r.stdout
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------
# Memory growth


def _rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")  # pragma: no cover


def _churn(n, q):
    for i in range(n):
        buf = Buffer(DType.float32, (4,))
        if i % 8 == 0:
            _ = buf[1:3], buf.view(DType.uint8)
        if i % 64 == 0:
            _ = Buffer.zeros((16,), DType.int8, CPU()), buf.to(q)
        del buf


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
@pytest.mark.skipif(
    os.environ.get("MAX_DRIVER_SANITIZER") == "asan",
    reason="ASan's quarantine keeps freed memory: RSS growth would not be ours",
)
def test_a_million_small_buffers_do_not_grow_memory(cpu):
    """DESIGN's target: 1,000,000 small buffers created and dropped, no
    memory growth (bounded RSS)."""
    q = DeviceQueue(cpu)
    _churn(100_000, q)  # warm up caches, pools and allocator arenas
    cpu.synchronize(timeout=WAIT)
    gc.collect()
    rss0 = _rss_bytes()
    _churn(1_000_000, q)
    for _ in range(10_000):
        src = Buffer.from_numpy(np.zeros(8, np.int32))
        dst = Buffer(DType.int32, (8,), q)
        dst.inplace_copy_from(src)
        src.to_numpy()
    cpu.synchronize(timeout=WAIT)
    gc.collect()
    growth = _rss_bytes() - rss0
    assert growth < 50 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB"
