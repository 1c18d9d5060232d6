"""The Python protocols on the CPU, each against its usual alternative in the
same run: `await` against ``loop.run_in_executor(None, event.synchronize)``
and against awaiting plain asyncio futures, and pickling a 64 MiB Buffer
against pickling a NumPy array of the same bytes.

The pickling rows need NumPy (the ``bench`` extra); :func:`numpy_skip_reason`
in benchmarks/buffers.py says why they cannot run without it."""

from __future__ import annotations

import asyncio
import gc
import pickle
import statistics
import time

from benchmarks import buffers
from benchmarks.common import Result, Run, rss_bytes, section, thread_count
from max import driver
from max._core import driver as core
from max.dtype import DType

ASYNC_SECTION = "asyncio: await on CPU queues"
PICKLE_SECTION = "pickling a 64 MiB buffer, against NumPy"


# ---- wake latency ---------------------------------------------------------------


def wake_latency(samples: int) -> Result:
    """From completion to the awaiting coroutine running again.

    A queue is held behind a flag; a timing event recorded behind the gate
    is what the coroutine awaits, and the worker stamps it the moment the
    gate opens (the completion).  The coroutine stamps a second timing
    event on an idle queue as soon as it runs again; the latency is the
    time between the two stamps.  The loop itself opens the gate (a
    callback 0.5 ms later), so no other Python thread holds the GIL when
    the loop wakes.  The baseline awaits the same event through
    ``loop.run_in_executor(None, event.synchronize)``, the usual way to
    wait for device work without blocking the loop."""
    cpu = driver.CPU()
    gated, idle = driver.DeviceQueue(cpu), driver.DeviceQueue(cpu)
    flag = driver.CompletionFlag(cpu)
    done = driver.DeviceEvent(cpu, enable_timing=True)
    resumed = driver.DeviceEvent(cpu, enable_timing=True)

    async def one(executor: bool) -> float:
        loop = asyncio.get_running_loop()
        flag.reset()
        gated.wait_for_host_value(flag, 1)
        gated.record_event(done)
        loop.call_later(0.0005, flag.signal, 1)
        if executor:
            await loop.run_in_executor(None, done.synchronize)
        else:
            await done
        idle.record_event(resumed)
        return done.elapsed_time(resumed) / 1e3

    async def runs() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: None)  # the pool's thread
        await one(False)
        ours, theirs = [], []
        for _ in range(samples):  # interleaved
            ours.append(await one(False))
            theirs.append(await one(True))
        return ours, theirs

    ours, theirs = asyncio.run(runs())
    ours_med, theirs_med = statistics.median(ours), statistics.median(theirs)
    return Result(
        "await event: completion -> coroutine, / run_in_executor(synchronize)",
        ours_med / theirs_med,
        f"median {ours_med * 1e6:.1f} us vs run_in_executor {theirs_med * 1e6:.1f} us",
        0.5,
        section=ASYNC_SECTION,
    )


# ---- many waiters ---------------------------------------------------------------

# Run in a fresh interpreter per side (python -m benchmarks.protocols
# awaits KIND COUNT), so that neither side reuses memory the other freed.
AWAITS_CHILD_KINDS = ("queue", "future")


async def _await(awaitable) -> None:
    await awaitable


async def _pending(kind: str, count: int) -> dict[str, float]:
    """Threads and RSS growth while `count` tasks await one gated queue
    (kind "queue") or plain asyncio futures ("future"), the time from the
    release until every task has finished, and what is left armed."""
    loop = asyncio.get_running_loop()
    q = driver.DeviceQueue(driver.CPU())
    flag = driver.CompletionFlag(q.device)
    q.wait_for_host_value(flag, 1)
    futures: list[asyncio.Future[None]] = []

    def make() -> object:
        if kind == "queue":
            return q
        futures.append(loop.create_future())
        return futures[-1]

    def release() -> None:
        flag.signal(1)
        for f in futures:
            f.set_result(None)

    # The loop's waker exists before the count starts (one per loop).
    if kind == "queue":
        await driver.DeviceQueue(q.device)  # idle: returns at once
    gc.collect()
    threads, rss = thread_count(), rss_bytes()
    tasks = [asyncio.ensure_future(_await(make())) for _ in range(count)]
    await asyncio.sleep(0.05)  # every task is at its await
    threads_during, rss_during = thread_count(), rss_bytes()
    start = time.perf_counter()
    release()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    del tasks
    gc.collect()
    left = core._async_stats()
    return {
        "threads": threads_during - threads,
        "rss": rss_during - rss,
        "elapsed": elapsed,
        "armed_left": left["armed_watches"],
        "waiters_left": left["waiters"],
    }


def _child_awaits(kind: str, count: int) -> dict[str, float]:
    """The child imports this checkout's benchmarks and the same max."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import max as max_package

    repo = Path(__file__).resolve().parent.parent
    paths = [str(repo), str(Path(max_package.__file__).resolve().parent.parent)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.protocols", "awaits", kind, str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} awaits child failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def concurrent_awaits(count: int) -> list[Result]:
    """`count` tasks awaiting one gated queue, against `count` tasks awaiting
    plain asyncio futures, each in a fresh interpreter: threads added,
    memory per waiter, the time to wake them all, what is left armed."""
    ours = _child_awaits("queue", count)
    plain = _child_awaits("future", count)
    per, base_per = ours["rss"] / count, max(plain["rss"], 1) / count
    return [
        Result(
            f"{count:,} concurrent awaits on one queue: thread growth",
            ours["threads"],
            f"armed watches left after {ours['armed_left']:.0f}, waiters "
            f"left {ours['waiters_left']:.0f}",
            0,
            section=ASYNC_SECTION,
        ),
        Result(
            f"{count:,} concurrent awaits: memory per waiter / a plain Future's",
            per / base_per,
            f"{per:.0f} B vs {base_per:.0f} B per awaiting task (task, "
            "coroutine and future included; RSS, a fresh process each)",
            1.5,
            section=ASYNC_SECTION,
        ),
        Result(
            f"{count:,} concurrent awaits: wake them all / plain Futures",
            ours["elapsed"] / plain["elapsed"],
            f"{ours['elapsed'] * 1e3:.1f} ms vs {plain['elapsed'] * 1e3:.1f} ms "
            "for set_result on each future",
            None,
            section=ASYNC_SECTION,
        ),
    ]


# ---- pickling -------------------------------------------------------------------


def pickling(reps: int, mib: int) -> list[Result]:
    """Round trips (dumps, then loads) of a `mib` MiB float32 Buffer and of a
    NumPy array of the same size: protocol 5 in band (the bytes copied into
    the pickle and out of it, on both sides) as throughput, and protocol 5
    out of band (buffer_callback / buffers=, no copy on either side) as the
    time per round trip."""
    import numpy as np

    n = mib * 2**20 // 4
    array = np.arange(n, dtype=np.float32)
    buf = driver.Buffer.from_numpy(array.copy())
    nbytes = array.nbytes

    def in_band(obj: object) -> float:
        start = time.perf_counter()
        pickle.loads(pickle.dumps(obj, protocol=5))
        return time.perf_counter() - start

    def out_of_band(obj: object) -> float:
        start = time.perf_counter()
        for _ in range(100):
            oob: list[pickle.PickleBuffer] = []
            data = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
            pickle.loads(data, buffers=oob)
        return (time.perf_counter() - start) / 100

    rows = []
    for name, fn, target in (
        ("protocol 5 in band: throughput / NumPy's", in_band, 0.9),
        ("protocol 5 out of band: round trip, NumPy's / ours", out_of_band, None),
    ):
        fn(array), fn(buf)  # warm
        ours, theirs = [], []
        for _ in range(reps):
            theirs.append(fn(array))
            ours.append(fn(buf))
        ours_med, theirs_med = statistics.median(ours), statistics.median(theirs)
        if target is not None:
            detail = (
                f"{2 * nbytes / ours_med / 1e9:.2f} GB/s vs NumPy "
                f"{2 * nbytes / theirs_med / 1e9:.2f} GB/s (dumps + loads)"
            )
        else:
            detail = (
                f"{ours_med * 1e6:.1f} us vs NumPy {theirs_med * 1e6:.1f} us per "
                "dumps + loads (zero-copy on both sides)"
            )
        rows.append(
            Result(
                f"{mib} MiB float32 {name}",
                statistics.median(t / o for t, o in zip(theirs, ours, strict=True)),
                detail,
                target,
                higher_is_better=True,
                section=PICKLE_SECTION,
            )
        )
    back = pickle.loads(pickle.dumps(buf, protocol=5))
    assert back.dtype is DType.float32 and back.shape == (n,)
    return rows


@section(ASYNC_SECTION, order=30)
def asyncio_benchmark(run: Run) -> list[Result]:
    return [wake_latency(samples=300 // run.scale_down), *concurrent_awaits(10_000)]


@section(PICKLE_SECTION, order=40, skip_reason=lambda: buffers.numpy_skip_reason())
def pickling_benchmark(run: Run) -> list[Result]:
    return pickling(reps=run.reps(7, 2), mib=64)


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] != ["awaits"] or sys.argv[2] not in AWAITS_CHILD_KINDS:
        raise SystemExit("usage: python -m benchmarks.protocols awaits KIND COUNT")
    print(json.dumps(asyncio.run(_pending(sys.argv[2], int(sys.argv[3])))))
