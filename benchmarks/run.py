"""The benchmark command: ``python -m benchmarks [--quick] [--save | --out DIR]``.

Every figure is a ratio of two costs measured in the same process, with the
two measurements interleaved and each ratio the median of several
repetitions, so that a busy machine slows both sides alike.  Results are
printed as a table, written as JSON and drawn as a PNG (when matplotlib is
importable): into a folder of the temporary directory, so that a run changes
no tracked file, or with ``--save`` into benchmarks/results (the figures the
README shows)."""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import os
import platform
import statistics
import tempfile
import threading
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from max import driver
from max.dtype import DType

OUT_DIR = Path(__file__).resolve().parent / "results"  # tracked: --save
SCRATCH_DIR = Path(tempfile.gettempdir()) / "max-driver-benchmarks"


@dataclass
class Result:
    name: str
    ratio: float  # the figure the target applies to
    detail: str  # the raw costs behind the ratio
    target: float | None = None  # None: reported, no target
    higher_is_better: bool = False
    section: str = ""  # the table's heading above this row ("": none)

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        met = (
            self.ratio >= self.target
            if self.higher_is_better
            else (self.ratio <= self.target)
        )
        return "PASS" if met else "MISS"

    @property
    def budget_used(self) -> float | None:
        """The figure as a share of its target: at most 1 means PASS."""
        if not self.target:
            return None
        if self.higher_is_better:
            return self.target / self.ratio if self.ratio > 0 else float("inf")
        return self.ratio / self.target

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"{'>=' if self.higher_is_better else '<='} {self.target:g}"


# ---- per-call costs -----------------------------------------------------------


def _fixture() -> dict[str, object]:
    cpu = driver.CPU()
    queue = driver.DeviceQueue(cpu)
    other = driver.DeviceQueue(cpu)
    event = queue.record_event()
    flag = driver.CompletionFlag(cpu)
    return {"cpu": cpu, "q": queue, "q2": other, "ev": event, "flag": flag, "zero": 0}


# (name, statement, target ratio to the no-op C method call)
HOT_CALLS: list[tuple[str, str, float | None]] = [
    ("record_event()", "q.record_event()", 3),
    ("record_event(ev)", "q.record_event(ev)", 2),
    ("wait_for(queue)", "q.wait_for(q2)", 2),
    ("wait_for(event)", "q.wait_for(ev)", 2),
    ("wait_for(device)", "q.wait_for(cpu)", None),
    ("event.is_ready()", "ev.is_ready()", 2),
    ("flag.signal(v)", "flag.signal(1)", 2),
    ("flag.load()", "flag.load()", 2),
    ("flag.reset()", "flag.reset()", None),
    ("queue.synchronize() idle", "q.synchronize()", 3),
    ("event.synchronize() complete", "ev.synchronize()", 3),
    ("device.synchronize() idle", "cpu.synchronize()", None),
    ("queue.native_stream_handle", "q.native_stream_handle", None),
    ("queue.device", "q.device", None),
    ("device.default_queue", "cpu.default_queue", None),
    ("DeviceQueue(cpu) create+drop", "DeviceQueue(cpu)", None),
    ("DeviceEvent(cpu) create+drop", "DeviceEvent(cpu)", None),
]
NOOP = "zero.bit_length()"  # a METH_NOARGS C method that does nothing


def per_call(reps: int, number: int) -> list[Result]:
    names = _fixture()
    names.update(DeviceQueue=driver.DeviceQueue, DeviceEvent=driver.DeviceEvent)
    timers = {
        stmt: timeit.Timer(stmt, globals=names)
        for stmt in ["pass", NOOP, *(s for _, s, _ in HOT_CALLS)]
    }
    samples: dict[str, list[float]] = {stmt: [] for stmt in timers}
    for _ in range(reps):  # interleaved: one round of every statement a rep
        for stmt, timer in timers.items():
            samples[stmt].append(timer.timeit(number) / number)
    # The ratio is per statement as timeit measures it (loop included), as
    # DESIGN.md's "no-op C method call (about 25 ns)" is; the detail also
    # gives both costs net of the loop, the stricter view.
    loop = statistics.median(samples["pass"])
    noop = statistics.median(samples[NOOP])
    results = []
    for name, stmt, target in HOT_CALLS:
        ratios = [t / n for t, n in zip(samples[stmt], samples[NOOP], strict=True)]
        cost = statistics.median(samples[stmt])
        results.append(
            Result(
                name,
                statistics.median(ratios),
                f"{cost * 1e9:.1f} ns vs no-op {noop * 1e9:.1f} ns; net of "
                f"the loop {(cost - loop) * 1e9:.1f} vs {(noop - loop) * 1e9:.1f}",
                target,
            )
        )
    return results


# ---- host functions against a thread pool -------------------------------------


def host_throughput(reps: int, count: int) -> Result:
    queue = driver.DeviceQueue(driver.CPU())
    enqueue = getattr(queue, "__unsafe_enqueue_py_host_func")

    def nothing() -> None:
        pass

    def ours() -> float:
        start = time.perf_counter()
        for _ in range(count):
            enqueue(nothing)
        queue.synchronize()
        return time.perf_counter() - start

    def pool() -> float:
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            start = time.perf_counter()
            futures = [executor.submit(nothing) for _ in range(count)]
            concurrent.futures.wait(futures)
            return time.perf_counter() - start

    ratios, ours_t, pool_t = _interleave(reps, pool, ours)
    return Result(
        f"host functions: {count} enqueued + synchronize",
        ratios,
        f"{ours_t / count * 1e9:.0f} ns/fn vs ThreadPoolExecutor(1) "
        f"{pool_t / count * 1e9:.0f} ns/fn (ratio = throughput gain)",
        5,
        higher_is_better=True,
    )


def _interleave(
    reps: int, baseline: Callable[[], float], ours: Callable[[], float]
) -> tuple[float, float, float]:
    """Median of baseline/ours over interleaved runs, and the two medians."""
    base_runs, our_runs = [], []
    for _ in range(reps):
        base_runs.append(baseline())
        our_runs.append(ours())
    ratios = [b / o for b, o in zip(base_runs, our_runs, strict=False)]
    return (
        statistics.median(ratios),
        statistics.median(our_runs),
        statistics.median(base_runs),
    )


# ---- wake latency ---------------------------------------------------------------


def _thread_wake() -> float:
    """Event.set -> a parked Python thread runs its next line."""
    go, woke_at = threading.Event(), []
    waiter = threading.Thread(
        target=lambda: (go.wait(), woke_at.append(time.perf_counter()))
    )
    waiter.start()
    time.sleep(0.0005)  # let the thread park
    start = time.perf_counter()
    go.set()
    waiter.join()
    return woke_at[0] - start


def wake_latency(samples: int) -> list[Result]:
    """flag.signal -> gated queue resumes, against Event.set -> thread runs.

    What a user sees: a Python host function enqueued behind the gate stamps
    the time itself (its worker wakes and takes the GIL), the target row.
    The queue alone (info): a timing event recorded behind the gate is
    stamped by the worker the moment it resumes, against one stamped on an
    idle queue just before signal(); no GIL is taken."""
    cpu = driver.CPU()
    gated, idle = driver.DeviceQueue(cpu), driver.DeviceQueue(cpu)
    flag = driver.CompletionFlag(cpu)
    before = driver.DeviceEvent(cpu, enable_timing=True)
    resumed = driver.DeviceEvent(cpu, enable_timing=True)
    enqueue = getattr(gated, "__unsafe_enqueue_py_host_func")

    def host_function() -> float:
        flag.reset()
        woke_at: list[float] = []
        gated.wait_for_host_value(flag, 1)
        enqueue(lambda: woke_at.append(time.perf_counter()))
        time.sleep(0.0005)  # let the worker park on the gate
        start = time.perf_counter()
        flag.signal(1)
        gated.synchronize()
        return woke_at[0] - start

    def queue_only() -> float:
        flag.reset()
        gated.wait_for_host_value(flag, 1)
        gated.record_event(resumed)
        time.sleep(0.0005)
        idle.record_event(before)
        flag.signal(1)
        resumed.synchronize()
        return before.elapsed_time(resumed) / 1e3

    fn_runs, queue_runs, thread_runs = [], [], []
    for _ in range(samples):  # interleaved, so the three see the same load
        thread_runs.append(_thread_wake())
        fn_runs.append(host_function())
        queue_runs.append(queue_only())
    thread_med = statistics.median(thread_runs)
    out = []
    for name, runs, target in (
        ("wake latency: flag.signal -> Python host function runs", fn_runs, 1),
        ("wake latency, queue only: flag.signal -> queue resumes", queue_runs, None),
    ):
        med = statistics.median(runs)
        out.append(
            Result(
                name,
                med / thread_med,
                f"median {med * 1e6:.1f} us vs threading.Event "
                f"{thread_med * 1e6:.1f} us",
                target,
            )
        )
    return out


# ---- launch trace ---------------------------------------------------------------


def trace_overhead(reps: int, number: int) -> Result:
    """A small copy on an idle CPU queue with the launch trace recording,
    against the same copy with it off (info). Off, a copy or fill pays one
    relaxed atomic load for the trace: below what a run can resolve."""
    queue = driver.DeviceQueue(driver.CPU())
    src = driver.Buffer.zeros((16,), DType.float32)
    dst = driver.Buffer(DType.float32, (16,), queue)
    copy = dst.inplace_copy_from

    def run(recording: bool) -> float:
        if recording:
            driver.begin_launch_trace()
        try:
            start = time.perf_counter()
            for _ in range(number):
                copy(src)
            return (time.perf_counter() - start) / number
        finally:
            if recording:
                driver.take_launch_trace()

    off, on = [], []
    for _ in range(reps):
        off.append(run(False))
        on.append(run(True))
    off_med, on_med = statistics.median(off), statistics.median(on)
    return Result(
        "launch trace: 64-byte copy, recording / off",
        statistics.median(o / f for o, f in zip(on, off, strict=True)),
        f"{on_med * 1e9:.0f} ns recording vs {off_med * 1e9:.0f} ns off",
    )


# ---- cross-queue ping-pong ------------------------------------------------------


def ping_pong(reps: int, rounds: int) -> Result:
    cpu = driver.CPU()

    def ours() -> float:
        a, b = driver.DeviceQueue(cpu), driver.DeviceQueue(cpu)
        gate = driver.CompletionFlag(cpu)
        a.wait_for_host_value(gate, 1)
        for _ in range(rounds):  # each wait is one hand-off between threads
            b.wait_for(a)
            a.wait_for(b)
        start = time.perf_counter()
        gate.signal(1)
        a.synchronize()
        return (time.perf_counter() - start) / rounds

    def threads() -> float:
        ping, pong = threading.Event(), threading.Event()

        def player(mine: threading.Event, theirs: threading.Event) -> None:
            for _ in range(rounds):
                mine.wait()
                mine.clear()
                theirs.set()

        other = threading.Thread(target=player, args=(pong, ping))
        other.start()
        start = time.perf_counter()
        for _ in range(rounds):
            pong.set()
            ping.wait()
            ping.clear()
        other.join()
        return (time.perf_counter() - start) / rounds

    ratio, ours_t, thread_t = _interleave(reps, threads, ours)
    return Result(
        "ping-pong round trip between two queues",
        1 / ratio,
        f"{ours_t * 1e6:.1f} us vs two threads with threading.Event "
        f"{thread_t * 1e6:.1f} us",
        None,
    )


# ---- scale ----------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def scale(events: int) -> list[Result]:
    cpu = driver.CPU()
    results = []

    queue = driver.DeviceQueue(cpu)
    for _ in range(100_000):
        queue.record_event()
    gc.collect()
    rss = _rss_bytes()
    for _ in range(events):
        queue.record_event()
    growth = (_rss_bytes() - rss) / 2**20
    results.append(
        Result(
            f"{events:,} record_event(): memory growth MiB",
            growth,
            f"RSS {rss / 2**20:.1f} MiB before",
            1,
        )
    )

    threads, rss = _threads(), _rss_bytes()
    ran = []
    for _i in range(10_000):
        q = driver.DeviceQueue(cpu)
        getattr(q, "__unsafe_enqueue_py_host_func")(lambda: None)
        del q
    cpu.synchronize()
    gc.collect()
    peak = _threads()
    # Each queue's work waits for the GIL this loop holds, so busy queues
    # take extra pool threads; idle ones exit after 2 s.  "No growth" is
    # about what remains once the work is done.
    deadline = time.monotonic() + 5
    while _threads() > threads and time.monotonic() < deadline:
        time.sleep(0.1)
    results.append(
        Result(
            "10,000 queues created, used and dropped: thread growth",
            _threads() - threads,
            f"{threads} threads before, {peak} at the end of the loop; RSS "
            f"growth {(_rss_bytes() - rss) / 2**20:.1f} MiB",
            0,
        )
    )

    threads, rss = _threads(), _rss_bytes()
    live = [driver.DeviceQueue(cpu) for _ in range(1000)]
    for q in live:
        getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
    cpu.synchronize()
    per_queue = (_rss_bytes() - rss) / len(live)
    results.append(
        Result(
            "1,000 live queues: KiB per queue",
            per_queue / 1024,
            f"{len(ran)} of 1000 ran their work; {_threads() - threads} threads added",
            None,
        )
    )
    assert len(ran) == 1000, "a live queue did not run its work"
    return results


# ---- output -------------------------------------------------------------------


def machine() -> dict[str, str]:
    model = driver.CPU().model_name
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "system": platform.platform(),
        "backend": driver.accelerator_api(),
    }


def table(results: list[Result]) -> str:
    """The results as a text table, a ``[section]`` line wherever the section
    changes."""
    header = ("benchmark", "ratio", "target", "status", "measured")
    rows = [
        (r.name, f"{r.ratio:.2f}", r.target_text(), r.status, r.detail) for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]

    def line(row: tuple[str, ...]) -> str:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        return " | ".join(cells).rstrip()

    lines = [line(header), "-+-".join("-" * w for w in widths) + "-+-" + "-" * 8]
    section = ""
    for result, row in zip(results, rows, strict=True):
        if result.section != section:
            section = result.section
            lines.append(f"[{section}]")
        lines.append(line(row))
    return "\n".join(lines)


def plot(results: list[Result], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    # Figures have different units and baselines: draw each as the share of
    # its target it uses, so one axis shows them all (1 is the target).
    shown = [r for r in results if r.budget_used is not None]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(shown) + 1.5))
    colors = ["tab:green" if r.status == "PASS" else "tab:red" for r in shown]
    y = list(range(len(shown)))
    ax.barh(y, [max(r.budget_used or 0, 0) for r in shown], color=colors)
    ax.axvline(1.0, color="black", linewidth=1, label="target")
    ax.set_yticks(y, [f"{r.name} ({r.target_text()})" for r in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of the target used (below 1: target met)")
    ax.legend(loc="lower right")
    ax.set_title(f"max.driver benchmarks — {machine()['cpu']}", fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def optional_sections(scale_down: int) -> list[Result]:
    """Buffers against NumPy, the Python protocols (pickling needs NumPy
    too), and the GIL's cost and buffer pipelines on the fake GPU driver:
    each runs when what it needs is there, else says why not."""
    # Imported here: these modules import this one.
    from benchmarks import (
        buffers,
        capture,
        fake_gpu,
        fake_pipelines,
        fake_staging,
        protocols,
    )

    results = []
    no_numpy = reason = buffers.numpy_skip_reason()
    if reason:
        print(f"[{buffers.SECTION}] skipped: {reason}")
        print(f"[{protocols.PICKLE_SECTION}] skipped: {reason}")
    else:
        results += buffers.benchmark(scale_down)
    results += protocols.benchmark(scale_down, with_numpy=reason is None)
    reason = fake_gpu.skip_reason()
    if reason:
        print(f"[{fake_gpu.SECTION}] skipped: {reason}")
    else:
        results += fake_gpu.benchmark(reps=7, number=50_000 // scale_down)
        results += fake_pipelines.benchmark(reps=5 if scale_down == 1 else 2)
        results += fake_staging.benchmark(reps=5 if scale_down == 1 else 2)
    if no_numpy is None:  # the capture section's buffers come from NumPy
        results += capture.benchmark(scale_down)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions (a smoke run, noisier)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where to write latest.json, latest.txt and latest.png (default: "
        f"{SCRATCH_DIR})",
    )
    where.add_argument(
        "--save",
        action="store_true",
        help=f"write them to {OUT_DIR}, the tracked results the README shows",
    )
    args = parser.parse_args(argv)
    scale_down = 10 if args.quick else 1
    out = OUT_DIR if args.save else (args.out or SCRATCH_DIR)

    results = per_call(reps=7, number=200_000 // scale_down)
    results.append(host_throughput(reps=5, count=20_000 // scale_down))
    results += wake_latency(samples=200 // scale_down)
    results.append(ping_pong(reps=5, rounds=2000 // scale_down))
    results += scale(events=1_000_000 // scale_down)
    results.append(trace_overhead(reps=7, number=20_000 // scale_down))
    for result in results:
        result.section = "CPU device: queues, events, flags, host functions"
    results += optional_sections(scale_down)

    print(f"machine: {machine()}")
    print(table(results))
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine(),
        "results": [asdict(r) | {"status": r.status} for r in results],
    }
    (out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "latest.txt").write_text(table(results) + "\n")
    print(f"results: {out / 'latest.json'}, {out / 'latest.txt'}")
    if plot(results, out / "latest.png"):
        print(f"plot: {out / 'latest.png'}")
    missed = [r.name for r in results if r.status == "MISS"]
    print(f"{len(missed)} target(s) missed" + (f": {missed}" if missed else ""))
    return 0
