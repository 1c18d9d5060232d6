"""Independent buffer pipelines on the fake GPU driver (tests/fake_driver):
do they overlap?

Two Python threads each run an upload -> device copy -> download pipeline
over buffers of their own, first on two queues of one device, then the same
work with both threads on one queue.  Hazard records (SPEC §12.6) link
nothing but the memory an operation touches, so on two queues the
pipelines overlap: the ratio two queues / one queue is below 1.  Under the
old rule every upload from pageable memory joined its source's CPU queue
(the CPU's default queue, shared by both pipelines) and so serialized them.

The fake runs each stream's copies on a host thread, so the overlap here is
of host threads (on a 2-core machine at most 2x); the figure is info, not a
target: a real GPU's copy engines are what matter, and only a GPU run can
measure them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.fake_gpu import SECTION, build_fake, child_json
from benchmarks.run import Result


def _pipeline(queue, host_src, host_dst, steps: int) -> None:
    from max.driver import Buffer
    from max.dtype import DType

    count = host_src.num_elements
    a = Buffer(DType.int8, (count,), queue)
    b = Buffer(DType.int8, (count,), queue)
    for _ in range(steps):
        a.inplace_copy_from(host_src)  # upload
        b.inplace_copy_from(a)  # on the device
        host_dst.inplace_copy_from(b)  # download, complete on return


def _run(queues, sources, targets, steps: int) -> float:
    threads = [
        threading.Thread(target=_pipeline, args=(q, s, t, steps))
        for q, s, t in zip(queues, sources, targets, strict=True)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def measure(reps: int, mib: int, steps: int) -> dict[str, list[float]]:
    """Seconds for the two pipelines on two queues and on one, interleaved."""
    import numpy as np

    from max import driver
    from max.dtype import DType

    if driver.accelerator_count() == 0:
        raise RuntimeError(f"no fake GPU: {driver.backend_selection()}")
    acc = driver.Accelerator(0)
    count = mib * 2**20
    sources = [driver.Buffer.from_numpy(np.full(count, i, np.int8)) for i in (1, 2)]
    targets = [driver.Buffer(DType.int8, (count,)) for _ in sources]
    two = [driver.DeviceQueue(acc), driver.DeviceQueue(acc)]
    one = [driver.DeviceQueue(acc)] * 2
    _run(two, sources, targets, 1)  # warm up: pools, staging, threads
    samples: dict[str, list[float]] = {"two": [], "one": []}
    for _ in range(reps):
        samples["two"].append(_run(two, sources, targets, steps))
        samples["one"].append(_run(one, sources, targets, steps))
    for t, i in zip(targets, (1, 2), strict=True):
        assert (t.to_numpy() == i).all(), "a pipeline lost its data"
    return samples


def results(samples: dict[str, list[float]], mib: int, steps: int) -> list[Result]:
    ratio = statistics.median(
        t / o for t, o in zip(samples["two"], samples["one"], strict=True)
    )
    two, one = (statistics.median(samples[k]) for k in ("two", "one"))
    return [
        Result(
            f"two pipelines (upload, copy, download; {mib} MiB x {steps}): "
            "two queues / one queue",
            ratio,
            f"{two * 1e3:.1f} ms on two queues vs {one * 1e3:.1f} ms on one",
            section=SECTION,
        )
    ]


def benchmark(reps: int, mib: int = 4, steps: int = 8) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="max-driver-fake-") as tmp:
        library = build_fake(Path(tmp))
        data = child_json("benchmarks.fake_pipelines", library, reps, mib, steps)
    return results(data, mib, steps)


def main(argv: list[str] | None = None) -> int:
    """The child: prints the samples as one line of JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fake_pipelines")
    parser.add_argument("reps", type=int)
    parser.add_argument("mib", type=int)
    parser.add_argument("steps", type=int)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.reps, args.mib, args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
