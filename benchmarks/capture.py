"""Graph capture (SPEC §16): what a launch saves over enqueueing one by one.

For 100 small operations (copies of 64 bytes between buffers that exist
already, or no-op Python host functions) on one queue, the host-side cost of
issuing them per operation: enqueued one by one, against one launch of a
graph that captured them.  The queue is synchronized after each sample,
outside the timed part, so both sides start from an idle queue and the
figure is what the calling thread pays (the work itself runs on the queue
either way).  On the CPU backend in this process, and on the fake CUDA
driver in a child process (tests/fake_driver; the parent's backend stays
whatever it is).  Also reported: ``end_capture()`` of 100 nodes, in µs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Result, Run, section

OPS = 100
NBYTES = 64
CPU_SECTION = "graph capture: CPU"
FAKE_SECTION = "graph capture: fake GPU (CPU-side)"
TARGET = 5.0  # launch at least this many times cheaper per operation


def _workloads(queue) -> dict[str, Callable[[], None]]:  # type: ignore[no-untyped-def]
    """Each workload enqueues OPS operations on `queue` when called."""
    import numpy as np

    from max.driver import Buffer

    data = np.arange(NBYTES // 4, dtype=np.float32)
    srcs = [Buffer.from_numpy(data).to(queue) for _ in range(OPS)]
    dsts = [Buffer.from_numpy(np.zeros_like(data)).to(queue) for _ in range(OPS)]
    queue.synchronize()
    enqueue = getattr(queue, "__unsafe_enqueue_py_host_func")

    def copies() -> None:
        for dst, src in zip(dsts, srcs, strict=True):
            dst.inplace_copy_from(src)

    def nothing() -> None:
        pass

    def host_functions() -> None:
        for _ in range(OPS):
            enqueue(nothing)

    return {"64-byte copies": copies, "host functions": host_functions}


def measure(device_kind: str, reps: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per operation, one sample per repetition: {workload: {way:
    [...]}}, and the end_capture() samples."""
    from max import driver

    device = driver.CPU() if device_kind == "cpu" else driver.Accelerator(0)
    queue = driver.DeviceQueue(device)
    work = _workloads(queue)
    samples: dict[str, dict[str, list[float]]] = {}
    end_samples = []
    # One workload after the other (the host functions' threads would still
    # be winding down during the copies' samples), the two ways of issuing
    # one workload interleaved.
    for name, enqueue_all in work.items():
        for _ in range(reps):
            queue.begin_capture()
            enqueue_all()
            start = time.perf_counter()
            graph = queue.end_capture()
            end_samples.append(time.perf_counter() - start)
            assert graph.num_nodes == OPS
        samples[name] = {"eager": [], "launch": []}
        for _ in range(reps):
            for way, issue in (("eager", enqueue_all), ("launch", graph.launch)):
                start = time.perf_counter()
                issue()
                samples[name][way].append((time.perf_counter() - start) / OPS)
                queue.synchronize()
        del graph
    samples["end_capture"] = {"seconds": end_samples}
    return samples


def results(samples: dict[str, dict[str, list[float]]], section: str) -> list[Result]:
    rows = []
    for name, ways in samples.items():
        if name == "end_capture":
            continue
        eager, launch = ways["eager"], ways["launch"]
        ratio = statistics.median(e / g for e, g in zip(eager, launch, strict=True))
        rows.append(
            Result(
                f"{OPS} {name}: one by one / one graph launch, per operation",
                ratio,
                f"{statistics.median(eager) * 1e9:.0f} ns vs "
                f"{statistics.median(launch) * 1e9:.0f} ns per operation",
                TARGET if name == "64-byte copies" else None,
                higher_is_better=True,
                section=section,
            )
        )
    ends = sorted(samples["end_capture"]["seconds"])
    rows.append(
        Result(
            f"end_capture() of {OPS} nodes, µs",
            statistics.median(ends) * 1e6,
            f"median of {len(ends)} captures (both workloads); fastest "
            f"{ends[0] * 1e6:.0f} µs, slowest {ends[-1] * 1e6:.0f} µs",
            section=section,
        )
    )
    return rows


def _numpy_skip_reason() -> str | None:
    from benchmarks.buffers import numpy_skip_reason

    return numpy_skip_reason()  # the workloads' buffers come from NumPy


@section(CPU_SECTION, order=60, skip_reason=_numpy_skip_reason)
def capture_benchmark(run: Run) -> list[Result]:
    return benchmark(run.scale_down)


def benchmark(scale_down: int) -> list[Result]:
    """The CPU rows here, the fake GPU's in a child (when it can be built)."""
    from benchmarks.fake_gpu import build_fake, child_json, skip_reason

    reps = 41 if scale_down == 1 else 5  # single launches: scheduling noise
    rows = results(measure("cpu", reps), CPU_SECTION)
    reason = skip_reason()
    if reason:
        print(f"[{FAKE_SECTION}] skipped: {reason}")
        return rows
    with tempfile.TemporaryDirectory(prefix="max-driver-fake-") as tmp:
        library = build_fake(Path(tmp))
        # OpenBLAS's idle threads (NumPy's) would compete for the cores with
        # the fake's stream threads: single launches are sensitive to that.
        data = child_json(
            "benchmarks.capture", library, reps, env={"OPENBLAS_NUM_THREADS": "1"}
        )
    return rows + results(data, FAKE_SECTION)


GPU_SECTION = "graph capture: GPU"


def main(argv: list[str] | None = None) -> int:
    """On accelerator 0 (the fake driver's child, or a real GPU with
    ``--table``, as scripts/gpu-check.sh runs it): the samples as one JSON
    line, or the table."""
    from benchmarks.common import table

    parser = argparse.ArgumentParser(prog="python -m benchmarks.capture")
    parser.add_argument("reps", type=int)
    parser.add_argument("--table", action="store_true", help="print the table")
    args = parser.parse_args(argv)
    samples = measure("accelerator", args.reps)
    print(table(results(samples, GPU_SECTION)) if args.table else json.dumps(samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
