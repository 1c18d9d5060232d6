"""SPEC §15 on an accelerator: `await` through the watcher thread, the
buffer protocol's refusal of device memory (pinned memory exports), and
pickling accelerator buffers.  Runs on a real GPU and on the fake driver;
the device-error checks need the fake's fault injection."""

from __future__ import annotations

import asyncio
import gc
import pickle
import sys
import threading

import numpy as np
import pytest
from accel_support import ENQ, FAKE_LIBRARY, WAIT

from max._core import driver as core
from max.driver import (
    CPU,
    Buffer,
    CompletionFlag,
    DeviceEvent,
    DevicePinnedBuffer,
    DeviceQueue,
)
from max.dtype import DType


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT))


async def _await(x):
    return await x


def settled():
    s = core._async_stats()
    return s["armed_watches"] == 0 and s["waiters"] == 0


@pytest.fixture
def gated(acc):
    """A new queue of the accelerator, held behind a flag; released at the
    end of the test."""
    made = []

    def make(device=None):
        q = DeviceQueue(device or acc)
        flag = CompletionFlag(q.device)
        q.wait_for_host_value(flag, 1)
        made.append(flag)
        return q, flag

    yield make
    for flag in made:
        flag.signal(1)


# --------------------------------------------------------------------------
# await


def test_await_event_and_queue_on_an_accelerator(gated):
    q, flag = gated()
    ran = []
    getattr(q, ENQ)(lambda: ran.append(1))
    ev = q.record_event()

    async def main():
        asyncio.get_running_loop().call_later(
            0.05, lambda: threading.Thread(target=flag.signal, args=(1,)).start()
        )
        waiting = asyncio.ensure_future(_await(ev))
        await asyncio.sleep(0)
        assert core._async_stats()["watcher_thread"]  # a pool thread polls
        await waiting
        assert ran == [1] and ev.is_ready()
        await q
        await DeviceEvent(q.device)  # unrecorded: at once

    run(main())
    assert settled()


def test_await_a_completion_on_an_accelerator(gated):
    """SPEC §15: ``await completion`` on an accelerator queue, through the
    watcher (its event mark recorded when the await starts), and of a
    buffer copy's point (the completion a record holds) as stamped."""
    from max.driver import HostHazardCompletion, HostHazardError

    q, flag = gated()
    ran = []
    getattr(q, ENQ)(lambda: ran.append(1))
    c = HostHazardCompletion.record_on(q)

    async def main():
        asyncio.get_running_loop().call_later(
            0.05, lambda: threading.Thread(target=flag.signal, args=(1,)).start()
        )
        assert not c.is_ready()
        await c
        assert ran == [1] and c.is_ready()
        with pytest.raises(HostHazardError, match="it broke"):
            await HostHazardCompletion.poisoned(q, "it broke")

    run(main())
    assert settled()


def test_many_awaits_share_one_watcher_thread(gated, acc):
    q, flag = gated()
    evs = [q.record_event() for _ in range(20)]

    async def main():
        tasks = [asyncio.ensure_future(_await(e)) for e in evs]
        tasks += [asyncio.ensure_future(_await(q)) for _ in range(200)]
        await asyncio.sleep(0.05)
        threads = threading.active_count()
        assert core._async_stats()["armed_watches"] == 220
        more = [asyncio.ensure_future(_await(q)) for _ in range(200)]
        await asyncio.sleep(0.05)
        assert threading.active_count() == threads
        flag.signal(1)
        await asyncio.gather(*tasks, *more)

    run(main())
    assert settled()


def test_cancel_and_timeout_leave_nothing_armed(gated):
    q, flag = gated()
    ev = q.record_event()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(ev, 0.05)
        tasks = [asyncio.ensure_future(_await(x)) for x in (q, ev, q)]
        await asyncio.sleep(0.01)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)
        assert settled(), core._async_stats()

    run(main())
    assert not ev.is_ready()
    flag.signal(1)
    ev.synchronize(timeout=WAIT)


def test_awaits_on_two_devices(gated, acc1):
    a, fa = gated()
    b, fb = gated(acc1)

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, fb.signal, 1)
        loop.call_later(0.04, fa.signal, 1)
        await asyncio.gather(_await(a), _await(b.record_event()))

    run(main())


ERROR_CHILD = r"""
import asyncio, ctypes, os, sys
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_async_error.argtypes = [ctypes.c_void_p, ctypes.c_int]
from max.driver import Accelerator, CompletionFlag, DeviceQueue
acc = Accelerator()
code = int(sys.argv[1])

def broken(during):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    if during:
        q.wait_for_host_value(f, 1)
    assert lib.fake_gpu_async_error(ctypes.c_void_p(q.native_stream_handle), code) == 0
    getattr(q, "__unsafe_enqueue_py_host_func")(lambda: None)
    return q, f

async def main():
    for during in (False, True):
        for what in ("queue", "event"):
            q, f = broken(during)
            target = q if what == "queue" else q.record_event()
            if during:
                asyncio.get_running_loop().call_later(0.1, f.signal, 1)
            try:
                await asyncio.wait_for(target, 10)
                print("NO ERROR", what, during)
            except ValueError as e:
                print("ValueError", what, during, str(e).replace("\n", " "))
            f.signal(1)

asyncio.run(main())
"""


@pytest.mark.skipif(FAKE_LIBRARY is None, reason="needs the fake driver's faults")
def test_a_device_error_raises_value_error_as_synchronize_does(api, run_acc_py):
    """In a child: a stream with an asynchronous error stays broken."""
    r = run_acc_py(ERROR_CHILD, "719", timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("Value", "NO"))]
    assert len(lines) == 4, r.stdout
    for line in lines:
        assert line.startswith("ValueError") and "719" in line, line


# --------------------------------------------------------------------------
# The buffer protocol


def test_device_memory_refuses_the_buffer_protocol_naming_the_copy(acc):
    buf = Buffer.zeros((4,), DType.float32, acc)
    for consumer in (memoryview, bytes, lambda b: np.frombuffer(b, np.float32)):
        with pytest.raises(BufferError, match=r"to\(CPU\(\)\)"):
            consumer(buf)
    assert memoryview(buf.to(CPU())).tolist() == [0.0] * 4


def test_pinned_memory_exports_its_host_bytes(acc):
    pinned = DevicePinnedBuffer.zeros((2, 3), DType.int32, acc)
    m = memoryview(pinned)
    assert m.shape == (2, 3) and m.format == "i"
    m[1, 2] = 5
    assert pinned[1, 2].item() == 5
    assert np.frombuffer(pinned, np.int32).tolist() == [0, 0, 0, 0, 0, 5]


# --------------------------------------------------------------------------
# Pickling


@pytest.mark.parametrize("protocol", [2, 5])
def test_accelerator_buffers_unpickle_on_their_accelerator(acc, protocol):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = Buffer.from_numpy(values).to(acc)
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert back.device is acc and not back.pinned
    assert np.array_equal(back.to_numpy(), values)
    view = pickle.loads(pickle.dumps(buf[:, ::2], protocol=protocol))
    assert view.device is acc and np.array_equal(view.to_numpy(), values[:, ::2])


def test_out_of_band_data_of_device_memory_is_a_host_copy(acc):
    buf = Buffer.from_numpy(np.arange(8, dtype=np.int16)).to(acc)
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=oob.append)
    assert np.frombuffer(oob[0].raw(), np.int16).tolist() == list(range(8))
    back = pickle.loads(data, buffers=oob)
    assert back.device is acc and back.to_numpy().tolist() == list(range(8))


def test_second_accelerator_and_pinned_buffers(acc, acc1):
    b1 = Buffer.from_numpy(np.ones(3, np.float64)).to(acc1)
    back = pickle.loads(pickle.dumps(b1))
    assert back.device is acc1 and back.to_numpy().tolist() == [1.0] * 3
    pinned = DevicePinnedBuffer.zeros((3,), DType.uint8, acc)
    pinned[1] = 9
    back = pickle.loads(pickle.dumps(pinned, protocol=5))
    assert type(back) is DevicePinnedBuffer and back.pinned and back.device is acc
    assert back.to_numpy().tolist() == [0, 9, 0]


UNPICKLE_CHILD = r"""
import pickle, sys
try:
    pickle.loads(sys.stdin.buffer.read())
except RuntimeError as e:
    print("RuntimeError", e)
"""


def test_unpickling_where_that_accelerator_is_missing(acc, run_acc_py):
    data = pickle.dumps(Buffer.zeros((2,), DType.float32, acc))
    import subprocess

    from accel_support import REPO_ROOT, child_env

    r = subprocess.run(
        [sys.executable, "-c", UNPICKLE_CHILD],
        input=data,
        capture_output=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=child_env(MAX_DRIVER_BACKEND="cpu"),
    )
    out = r.stdout.decode()
    assert r.returncode == 0, (out, r.stderr.decode())
    assert out.startswith("RuntimeError") and "Device(type=gpu,id=0)" in out, out


def test_queues_and_events_of_accelerators_refuse_pickling(acc):
    for obj in (
        DeviceQueue(acc),
        acc.default_queue.record_event(),
        CompletionFlag(acc),
    ):
        with pytest.raises(TypeError, match="resource of one process"):
            pickle.dumps(obj)
    gc.collect()
