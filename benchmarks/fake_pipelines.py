"""Independent buffer pipelines on the fake GPU driver (tests/fake_driver):
do they overlap?

Two Python threads each run an upload -> device copy -> download pipeline
over buffers of their own, on two queues of one device, against the same two
pipelines run one after the other (the time they would take if they did not
overlap at all); as info, also with both threads on one queue.  Hazard
records link nothing but the memory an operation touches, so
on two queues the pipelines overlap: the ratio is near 0.5 when they overlap
fully.  (Under the old rule a copy joined its source's CPU queue, the
CPU's default queue that both pipelines' host buffers share.)

The fake runs each stream's copies on a host thread.  Without more, both
layouts are bound by this machine's cores (two here, busy with the memcpys
on either layout), which hides the overlap; so the child models a copy
engine (FAKE_GPU_COPY_MIB_PER_S, tests/fake_driver/README.md): each copy also
takes its bytes' time at COPY_MIB_PER_S on its stream's thread, without a
CPU, as a DMA engine does.  The figure is info, not a target: a real GPU's
copy engines are what matter, and only a GPU run can measure them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import fake_gpu
from benchmarks.common import Result, Run, section
from benchmarks.fake_gpu import SECTION, build_fake, child_json

# The modelled copy engine: 2 GiB/s, so that a 4 MiB copy takes 2 ms, several
# times the host memcpy of the same bytes here.
COPY_MIB_PER_S = 2048


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
    """Seconds for the pipelines, each on a thread of its own."""
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


def _run_serially(queues, sources, targets, steps: int) -> float:
    """Seconds for the same pipelines, one after the other."""
    start = time.perf_counter()
    for q, s, t in zip(queues, sources, targets, strict=True):
        _pipeline(q, s, t, steps)
    return time.perf_counter() - start


def measure(reps: int, mib: int, steps: int) -> dict[str, list[float]]:
    """Seconds for the two pipelines on two queues, serially, and on one
    queue, interleaved."""
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
    samples: dict[str, list[float]] = {"two": [], "serial": [], "one": []}
    for _ in range(reps):
        samples["two"].append(_run(two, sources, targets, steps))
        samples["serial"].append(_run_serially(two, sources, targets, steps))
        samples["one"].append(_run(one, sources, targets, steps))
    for t, i in zip(targets, (1, 2), strict=True):
        assert (t.to_numpy() == i).all(), "a pipeline lost its data"
    return samples


def results(samples: dict[str, list[float]], mib: int, steps: int) -> list[Result]:
    def ratio(layout: str) -> float:
        return statistics.median(
            t / o for t, o in zip(samples[layout], samples["serial"], strict=True)
        )

    two, serial, one = (
        statistics.median(samples[k]) * 1e3 for k in ("two", "serial", "one")
    )
    work = f"upload, copy, download; {mib} MiB x {steps}"
    rate = f"copies at {COPY_MIB_PER_S} MiB/s"
    return [
        Result(
            f"two pipelines ({work}) on two queues / one after the other",
            ratio("two"),
            f"{two:.1f} ms concurrently vs {serial:.1f} ms one after the "
            f"other ({rate}; 0.5 is full overlap)",
            section=SECTION,
        ),
        Result(
            "the same two pipelines sharing one queue / one after the other",
            ratio("one"),
            f"{one:.1f} ms vs {serial:.1f} ms (their uploads and downloads "
            "still overlap: they run on the staging ring's queues)",
            section=SECTION,
        ),
    ]


@section(SECTION, order=51, skip_reason=lambda: fake_gpu.skip_reason())
def pipelines_benchmark(run: Run) -> list[Result]:
    return benchmark(reps=run.reps(5, 2))


def benchmark(reps: int, mib: int = 4, steps: int = 8) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="max-driver-fake-") as tmp:
        library = build_fake(Path(tmp))
        # The fake reads it at its first call, when the child imports max.
        engine = {"FAKE_GPU_COPY_MIB_PER_S": str(COPY_MIB_PER_S)}
        data = child_json(
            "benchmarks.fake_pipelines", library, reps, mib, steps, env=engine
        )
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
