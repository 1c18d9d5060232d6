"""SPEC §15: awaiting events and queues in asyncio, on CPU queues.

`await event` completes when the recorded point is complete, `await queue`
when everything enqueued before the await is; the event loop is never
blocked and no thread is taken per waiter; cancelling the awaiting task
leaves nothing armed (``max._core.driver._async_stats()``);
``asyncio.wait_for`` timeouts work; outside a running loop ``await`` is a
RuntimeError.  Also under anyio's asyncio backend and uvloop when they are
installed.  The accelerator side (the watcher thread, device errors) is in
tests/accelerator/test_accel_async.py.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from max._core import driver as core
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

ENQ = "__unsafe_enqueue_py_host_func"
WAIT = 20.0


def stats() -> dict:
    return core._async_stats()


def settled() -> bool:
    s = stats()
    return s["armed_watches"] == 0 and s["waiters"] == 0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT))


def gated(cpu=None):
    """A new CPU queue held behind a flag: (queue, flag)."""
    q = DeviceQueue(cpu or CPU())
    flag = CompletionFlag(q.device)
    q.wait_for_host_value(flag, 1)
    return q, flag


def release_soon(loop: asyncio.AbstractEventLoop, flag, delay=0.05):
    """Opens the gate from another thread, as a device would."""
    loop.call_later(
        delay, lambda: threading.Thread(target=flag.signal, args=(1,)).start()
    )


@pytest.fixture(autouse=True)
def _nothing_left_armed():
    yield
    gc.collect()
    assert settled(), stats()


def test_await_a_recorded_event_completes_when_its_point_does():
    q, flag = gated()
    ran = []
    getattr(q, ENQ)(lambda: ran.append("work"))
    ev = q.record_event()

    async def main():
        release_soon(asyncio.get_running_loop(), flag)
        assert not ev.is_ready()
        result = await ev
        assert ev.is_ready() and ran == ["work"]
        return result

    assert run(main()) is None


def test_await_an_unrecorded_or_complete_event_returns_at_once():
    cpu = CPU()
    q = DeviceQueue(cpu)

    async def main():
        await DeviceEvent(cpu)
        await q.record_event()  # an idle queue: complete already
        await q
        return stats()

    s = run(main())
    assert s["waiters"] == 0 and s["armed_watches"] == 0


def test_await_queue_waits_for_the_work_enqueued_before_the_await():
    q, flag = gated()
    order = []
    getattr(q, ENQ)(lambda: order.append("before"))

    async def main():
        task = asyncio.ensure_future(awaiting(q))
        await asyncio.sleep(0)  # the await has started
        hold = CompletionFlag(q.device)
        q.wait_for_host_value(hold, 1)  # enqueued after the await
        getattr(q, ENQ)(lambda: order.append("after"))
        flag.signal(1)
        await task
        order.append("awaited")
        hold.signal(1)
        await q
        return order

    async def awaiting(queue):
        await queue

    assert run(main()) == ["before", "awaited", "after"]


def test_the_event_loop_keeps_running_while_awaiting():
    q, flag = gated()
    ev = q.record_event()
    ticks = []

    async def ticker():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    async def main():
        t = asyncio.ensure_future(ticker())
        release_soon(asyncio.get_running_loop(), flag, delay=0.2)
        await ev
        t.cancel()
        return len(ticks)

    assert run(main()) >= 5  # the loop ran other tasks meanwhile


def test_the_point_is_taken_when_the_await_starts():
    """As wait_for(event): re-recording the event later does not move it."""
    a, flag_a = gated()
    b, flag_b = gated()
    ev = a.record_event()

    async def main():
        task = asyncio.ensure_future(wait(ev))
        await asyncio.sleep(0)
        b.record_event(ev)  # now on b, which stays gated
        flag_a.signal(1)
        await task
        assert not ev.is_ready()
        flag_b.signal(1)
        await ev

    async def wait(event):
        await event

    run(main())


def test_many_concurrent_awaits_take_no_thread_each():
    q, flag = gated()
    evs = [q.record_event() for _ in range(50)]
    threads_before = threading.active_count()

    async def main():
        tasks = [asyncio.ensure_future(ev) for ev in evs]
        tasks += [asyncio.ensure_future(_await(q)) for _ in range(500)]
        await asyncio.sleep(0.05)
        s = stats()
        assert s["armed_watches"] == 550 and s["waiters"] == 550
        assert threading.active_count() == threads_before
        flag.signal(1)
        await asyncio.gather(*tasks)

    run(main())


async def _await(awaitable):
    return await awaitable


def test_cancelling_the_awaiting_task_leaves_nothing_armed():
    q, flag = gated()
    ev = q.record_event()

    async def main():
        tasks = [asyncio.ensure_future(_await(x)) for x in (ev, q, ev, q)]
        await asyncio.sleep(0.01)
        assert stats()["armed_watches"] == 4
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await asyncio.sleep(0)  # the futures' done-callbacks run
        assert settled(), stats()

    run(main())
    assert not ev.is_ready()  # the work itself is still waiting
    flag.signal(1)
    ev.synchronize(timeout=WAIT)


def test_wait_for_times_out_and_disarms():
    q, flag = gated()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(q, 0.05)
        await asyncio.sleep(0)
        assert settled(), stats()
        release_soon(asyncio.get_running_loop(), flag)
        await asyncio.wait_for(q, WAIT)  # the same queue, awaited again

    run(main())


def test_a_cancel_racing_the_completion_is_harmless():
    """The watch may fire while the task is being cancelled: whichever wins,
    nothing is left armed and no future is resolved twice."""

    async def main():
        for i in range(200):
            q, flag = gated()
            task = asyncio.ensure_future(_await(q))
            await asyncio.sleep(0)
            flag.signal(1)  # completes on the worker, maybe before the cancel
            if i % 2:
                time.sleep(0.0005)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await asyncio.sleep(0.01)

    run(main())


def test_every_waiter_of_one_event_wakes():
    q, flag = gated()
    ev = q.record_event()

    async def main():
        release_soon(asyncio.get_running_loop(), flag)
        return await asyncio.gather(*(_await(ev) for _ in range(100)))

    assert run(main()) == [None] * 100


def test_awaits_in_several_loops_and_threads():
    results = {}

    def one(i):
        q, flag = gated()
        ev = q.record_event()

        async def main():
            release_soon(asyncio.get_running_loop(), flag, delay=0.01 * i)
            await ev
            await q
            return i

        results[i] = asyncio.run(main())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert results == {i: i for i in range(4)}


def test_a_loop_that_ended_leaves_no_waker_registered():
    async def main():
        q, flag = gated()
        release_soon(asyncio.get_running_loop(), flag)
        await q

    for _ in range(3):
        asyncio.run(main())
    gc.collect()
    assert stats()["event_loops"] == 0


def test_outside_a_running_loop_await_is_a_runtime_error():
    ev = DeviceEvent(CPU())
    q = DeviceQueue(CPU())
    for awaitable in (ev, q):
        with pytest.raises(RuntimeError, match="running asyncio event loop"):
            awaitable.__await__()

        async def coro(x=awaitable):
            await x

        c = coro()
        with pytest.raises(RuntimeError, match="synchronize"):
            c.send(None)  # driven by hand, not by an event loop
        c.close()


def test_await_a_host_function_failure_does_not_fail_the_await(unraisable):
    q = DeviceQueue(CPU())

    def boom():
        raise RuntimeError("boom")

    getattr(q, ENQ)(boom)

    async def main():
        await q

    run(main())
    assert unraisable.wait(1)
    assert any("boom" in text for _, text in unraisable.records)


def test_await_is_a_slot_of_the_types():
    import inspect

    assert inspect.isawaitable(DeviceEvent(CPU()))
    assert inspect.isawaitable(DeviceQueue(CPU()))
    assert not inspect.isawaitable(CompletionFlag(CPU()))


# --------------------------------------------------------------------------
# Other runners on asyncio


def test_anyio_asyncio_backend():
    anyio = pytest.importorskip("anyio", reason="anyio is not installed")
    q, flag = gated()

    async def main():
        with anyio.move_on_after(0.05) as scope:
            await q
        assert scope.cancelled_caught
        await anyio.sleep(0)
        assert settled(), stats()
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_await, q)
                tg.start_soon(_await, q.record_event())
                await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(flag.signal, 1)

    anyio.run(main, backend="asyncio")


def test_uvloop():
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed")
    q, flag = gated()

    other, other_flag = gated()

    async def main():
        release_soon(asyncio.get_running_loop(), flag)
        await q.record_event()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(other, 0.02)
        other_flag.signal(1)
        await other

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


def test_trio_is_refused_with_the_asyncio_error():
    """trio runs no asyncio loop: `await` says so (see docs/guide.md for
    what trio support would need)."""
    trio = pytest.importorskip("trio", reason="trio is not installed")

    async def main():
        with pytest.raises(RuntimeError, match="asyncio event loop"):
            await DeviceQueue(CPU())

    trio.run(main)


# --------------------------------------------------------------------------
# HostHazardCompletion (SPEC §12.6, §15): ``await completion`` is
# ``completion.wait()``


def test_await_a_completion_completes_with_its_point():
    from max.driver import HostHazardCompletion

    q, flag = gated()
    ran = []
    getattr(q, ENQ)(lambda: ran.append("work"))
    c = HostHazardCompletion.record_on(q)

    async def main():
        release_soon(asyncio.get_running_loop(), flag)
        assert not c.is_ready()
        assert await c is None
        assert c.is_ready() and ran == ["work"]

    run(main())


def test_await_a_poisoned_completion_raises_at_once():
    from max.driver import HostHazardCompletion, HostHazardError

    q, flag = gated()
    try:
        c = HostHazardCompletion.poisoned(q, "the producer failed")

        async def main():
            with pytest.raises(HostHazardError, match="the producer failed"):
                await c

        run(main())
    finally:
        flag.signal(1)


def test_a_completion_poisoned_while_awaited_raises_when_its_point_passes():
    from max.driver import HostHazardCompletion, HostHazardError

    q, flag = gated()
    c = HostHazardCompletion.record_on(q)

    async def main():
        task = asyncio.ensure_future(_wait(c))
        await asyncio.sleep(0.02)
        c.poison("failed meanwhile")
        release_soon(asyncio.get_running_loop(), flag)
        with pytest.raises(HostHazardError, match="failed meanwhile"):
            await task

    async def _wait(comp):
        await comp

    run(main())


def test_cancelling_a_completion_await_leaves_nothing_armed():
    from max.driver import HostHazardCompletion

    q, flag = gated()
    c = HostHazardCompletion.record_on(q)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_wait(c), 0.05)

    async def _wait(comp):
        await comp

    try:
        run(main())
        gc.collect()
        assert settled(), stats()
    finally:
        flag.signal(1)
