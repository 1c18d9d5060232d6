"""The staging ring on the fake GPU driver (tests/fake_driver): how much
pinned memory copies use, and what the pipeline's host side costs.

Copies between pageable and device memory stream through each device's
ring of pinned chunks (docs/gpu-drivers.md, "Memory"), so the pinned memory
they use is the ring, whatever the data size.  In one child on the fake
CUDA driver, which counts pinned bytes (``fake_gpu_pinned_bytes``):

* the peak of pinned bytes, beyond what the device reserved when it opened,
  over 50 uploads of 32 MiB (into a queue kept busy, so most wait in heap
  memory for a host step) and over 20 ``to_numpy()`` of 64 MiB; the target
  is zero (no copy allocates pinned memory);
* the host-side throughput of a 256 MiB upload and of a 256 MiB download
  (into a CPU buffer that exists already) through the ring, against one
  ``memcpy`` of the same bytes (``np.copyto``) in the same run: info.  The
  fake's DMA is itself a memcpy on a host thread, so on a small machine
  the two halves compete for the same cores; a GPU run
  (scripts/gpu-check.sh) measures the real bandwidth.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import fake_gpu
from benchmarks.common import Result, Run, section
from benchmarks.fake_gpu import SECTION, build_fake, child_json

MIB = 1 << 20


def _pinned(lib: ctypes.CDLL, peak: bool) -> int:
    return int(lib.fake_gpu_pinned_bytes(1 if peak else 0))


def _peak_during(lib: ctypes.CDLL, work) -> int:  # type: ignore[no-untyped-def]
    """Pinned bytes beyond those live before `work`, at their peak."""
    lib.fake_gpu_reset_pinned_peak()
    before = _pinned(lib, peak=False)
    work()
    return _pinned(lib, peak=True) - before


def measure(reps: int, library: str) -> dict[str, object]:
    import numpy as np

    from max import driver
    from max.dtype import DType

    lib = ctypes.CDLL(library)
    lib.fake_gpu_pinned_bytes.argtypes = [ctypes.c_int]
    lib.fake_gpu_pinned_bytes.restype = ctypes.c_ulonglong
    acc = driver.Accelerator(0)
    queue = driver.DeviceQueue(acc)
    chunks, chunk_bytes = acc._capabilities()["staging_ring"]
    host32 = driver.Buffer.from_numpy(np.ones(8 * MIB, np.int32))
    dev32 = [driver.Buffer(DType.int32, (8 * MIB,), queue) for _ in range(2)]
    dev64 = driver.Buffer(DType.int32, (16 * MIB,), queue)
    dev64.inplace_copy_from(driver.Buffer.from_numpy(np.ones(16 * MIB, np.int32)))
    queue.synchronize()

    def uploads() -> None:
        for i in range(50):
            dev32[i % 2].inplace_copy_from(host32)
        queue.synchronize()

    def downloads() -> None:
        for _ in range(20):
            dev64.to_numpy()

    out: dict[str, object] = {
        "ring": chunks * chunk_bytes,
        "peak_uploads": _peak_during(lib, uploads),
        "peak_downloads": _peak_during(lib, downloads),
    }
    n = 64 * MIB  # int32: 256 MiB
    src, dst = np.ones(n, np.int32), np.empty(n, np.int32)
    big = driver.Buffer(DType.int32, (n,), queue)
    host, back = driver.Buffer.from_numpy(src), driver.Buffer.from_numpy(dst)
    times: dict[str, list[float]] = {"memcpy": [], "upload": [], "download": []}
    for _ in range(reps):
        start = time.perf_counter()
        np.copyto(dst, src)
        times["memcpy"].append(time.perf_counter() - start)
        start = time.perf_counter()
        big.inplace_copy_from(host)
        queue.synchronize()
        times["upload"].append(time.perf_counter() - start)
        start = time.perf_counter()
        back.inplace_copy_from(big)  # complete on return
        times["download"].append(time.perf_counter() - start)
    out["times"] = times
    out["bytes"] = n * 4
    return out


def results(data: dict, reps: int) -> list[Result]:  # type: ignore[type-arg]
    ring = data["ring"] / MIB
    rows = [
        Result(
            f"{what}: peak pinned bytes beyond the device's reserve",
            data[key] / MIB,
            f"{data[key] / MIB:.1f} MiB (the ring: {ring:g} MiB, reserved when "
            f"the device opened; data {size})",
            0.0,
            section=SECTION,
        )
        for what, key, size in (
            ("50 uploads of 32 MiB", "peak_uploads", "1600 MiB"),
            ("20 to_numpy() of 64 MiB", "peak_downloads", "1280 MiB"),
        )
    ]
    times = data["times"]
    memcpy = statistics.median(times["memcpy"])
    gib = data["bytes"] / 2**30
    for what in ("upload", "download"):
        ratio = statistics.median(
            m / t for m, t in zip(times["memcpy"], times[what], strict=True)
        )
        ours = statistics.median(times[what])
        rows.append(
            Result(
                f"256 MiB {what} through the ring: throughput / one memcpy",
                ratio,
                f"{gib / ours:.2f} GiB/s vs memcpy {gib / memcpy:.2f} GiB/s "
                f"(median of {reps})",
                higher_is_better=True,
                section=SECTION,
            )
        )
    return rows


@section(SECTION, order=52, skip_reason=lambda: fake_gpu.skip_reason())
def staging_benchmark(run: Run) -> list[Result]:
    return benchmark(reps=run.reps(5, 2))


def benchmark(reps: int) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="max-driver-fake-") as tmp:
        library = build_fake(Path(tmp))
        data = child_json("benchmarks.fake_staging", library, reps, library)
    return results(data, reps)


def main(argv: list[str] | None = None) -> int:
    """The child: prints its measurements as one line of JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fake_staging")
    parser.add_argument("reps", type=int)
    parser.add_argument("library")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.reps, args.library)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
