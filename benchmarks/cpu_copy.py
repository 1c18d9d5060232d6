"""The timed CPU copy both the Buffer section (benchmarks/buffers.py) and
the probe of ``--vs-max`` (benchmarks/vs_max_probe.py) report: it needs
only NumPy and the ``max`` package passed in, so it runs under MAX's wheel
too."""

from __future__ import annotations

import time
from types import ModuleType


def time_copies(
    driver: ModuleType, dtype: object, reps: int, mib: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``dst.inplace_copy_from(src)`` + synchronize on a CPU
    queue, and of ``np.copyto`` between NumPy aliases of the same two
    buffers (same pages, same cache state), ``reps`` of each, interleaved.
    ``dtype``: the package's float32."""
    import numpy as np

    queue = driver.DeviceQueue(driver.CPU())
    count = mib * 2**20 // 4
    src = driver.Buffer(dtype, (count,), queue)
    dst = driver.Buffer(dtype, (count,), queue)
    src_np, dst_np = src.to_numpy(), dst.to_numpy()  # aliases on the CPU
    src_np[:] = 1  # every page touched before anything is timed
    dst_np[:] = 0

    def ours() -> float:
        start = time.perf_counter()
        dst.inplace_copy_from(src)
        queue.synchronize()
        return time.perf_counter() - start

    def numpy_copy() -> float:
        start = time.perf_counter()
        np.copyto(dst_np, src_np)
        return time.perf_counter() - start

    ours(), numpy_copy()  # warm both paths
    our_runs, numpy_runs = [], []
    for _ in range(reps):
        numpy_runs.append(numpy_copy())
        our_runs.append(ours())
    assert dst_np[-1] == 1, "the copy did not reach the destination"
    return our_runs, numpy_runs
