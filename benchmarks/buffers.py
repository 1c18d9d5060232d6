"""Buffers on the CPU against NumPy, in the same run (the second table of
targets in docs/benchmarks.md): per-call costs against each call's NumPy
twin, the bandwidth of a large copy against ``np.copyto``, and memory growth
over many buffers.

NumPy is an optional dependency of the benchmarks (the ``bench`` extra):
:func:`numpy_skip_reason` says why these cannot run without it."""

from __future__ import annotations

import gc
import os
import statistics
import timeit

from benchmarks.common import Result, Run, rss_bytes, section
from benchmarks.cpu_copy import time_copies
from max import driver
from max.dtype import DType

SECTION = "Buffers on the CPU, against NumPy"
# Nothing here calls BLAS; without this, OpenBLAS's pool threads spin for a
# while after NumPy is imported and take a core from what is measured.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# (name, our statement, its NumPy twin, target: at most this many times the
# twin's cost, or None: reported only), over the names of _fixture().
#
# The creation row binds the dtype beforehand on both sides: on Python 3.11
# every member lookup of an enum (`DType.float32`) goes through
# EnumType.__getattr__, about 30 ns more than a module attribute such as
# `np.float32` (3.12 removed that hook), which is the enum's cost and not
# the creation's. The row after it shows that lookup.
CALLS: list[tuple[str, str, str, float | None]] = [
    (
        "Buffer(DType.float32, (1024,)) create+drop",
        "Buffer(f32, (1024,))",
        "np.empty(1024, np_f32)",
        1,
    ),
    ("DType.float32 (the enum lookup)", "DType.float32", "np.float32", None),
    ("Buffer.from_numpy(a)", "Buffer.from_numpy(a)", "np.from_dlpack(a)", 1.5),
    ("buf.to_numpy()", "buf.to_numpy()", "np.from_dlpack(a)", 1.5),
    ("np.from_dlpack(buf)", "np.from_dlpack(buf)", "np.from_dlpack(a)", 1.5),
    ("buf[1:3, ::2] (a view)", "buf[1:3, ::2]", "a[1:3, ::2]", 1.5),
    ("buf.item() (one element)", "one.item()", "a1.item()", 1.5),
    ("buf[i, j] = v", "buf[1, 2] = 0.5", "a[1, 2] = 0.5", 1.5),
    # The hazard records' price on calls that touch them: a
    # buffer on one queue with nothing pending pays a load or two.
    ("Buffer.zeros((4, 6), DType.float32)", "zeros((4, 6), f32)",
     "np.zeros((4, 6), np_f32)", None),
    ("dst.inplace_copy_from(src) (24 floats)", "dst.inplace_copy_from(buf)",
     "np.copyto(a2, a)", None),
]  # fmt: skip


def numpy_skip_reason() -> str | None:
    try:
        import numpy  # noqa: F401
    except ImportError as exc:
        return f"NumPy is not importable ({exc}); pip install -e '.[bench]'"
    return None


def _fixture() -> dict[str, object]:
    import numpy as np

    return {
        "np": np,
        "Buffer": driver.Buffer,
        "DType": DType,
        "f32": DType.float32,
        "np_f32": np.float32,
        "a": np.zeros((4, 6), np.float32),
        "buf": driver.Buffer.zeros((4, 6), DType.float32),
        "a1": np.zeros((1,), np.float32),
        "one": driver.Buffer.zeros((1,), DType.float32),
        "zeros": driver.Buffer.zeros,
        "dst": driver.Buffer.zeros((4, 6), DType.float32),
        "a2": np.zeros((4, 6), np.float32),
    }


def per_call(reps: int, number: int) -> list[Result]:
    names = _fixture()
    statements = dict.fromkeys(s for _, ours, twin, _ in CALLS for s in (ours, twin))
    timers = {s: timeit.Timer(s, globals=names) for s in ["pass", *statements]}
    samples: dict[str, list[float]] = {s: [] for s in timers}
    for _ in range(reps):  # interleaved: one round of every statement a rep
        for stmt, timer in timers.items():
            samples[stmt].append(timer.timeit(number) / number)
    loop = statistics.median(samples["pass"])
    results = []
    for name, ours, twin, target in CALLS:
        ratios = [o / t for o, t in zip(samples[ours], samples[twin], strict=True)]
        cost, base = statistics.median(samples[ours]), statistics.median(samples[twin])
        results.append(
            Result(
                name,
                statistics.median(ratios),
                f"{cost * 1e9:.1f} ns vs `{twin}` {base * 1e9:.1f} ns; net of "
                f"the loop {(cost - loop) * 1e9:.1f} vs {(base - loop) * 1e9:.1f}",
                target,
                section=SECTION,
            )
        )
    return results


def copy_bandwidth(reps: int, mib: int) -> Result:
    """``dst.inplace_copy_from(src)`` + synchronize on a CPU queue against
    ``np.copyto`` between NumPy aliases of the same two buffers (same pages,
    same cache state)."""
    our_runs, numpy_runs = time_copies(driver, DType.float32, reps, mib)
    ratio = statistics.median(n / o for n, o in zip(numpy_runs, our_runs, strict=True))
    nbytes = mib * 2**20

    def gbps(seconds: float) -> float:
        return nbytes / seconds / 1e9

    return Result(
        f"{mib} MiB inplace_copy_from + synchronize: bandwidth / np.copyto",
        ratio,
        f"{gbps(statistics.median(our_runs)):.2f} GB/s vs np.copyto "
        f"{gbps(statistics.median(numpy_runs)):.2f} GB/s",
        0.9,
        higher_is_better=True,
        section=SECTION,
    )


def memory_growth(count: int) -> Result:
    for _ in range(100_000):  # the allocator's caches reach their steady state
        driver.Buffer(DType.float32, (16,))
    gc.collect()
    rss = rss_bytes()
    for _ in range(count):
        driver.Buffer(DType.float32, (16,))
    gc.collect()
    return Result(
        f"{count:,} Buffer(float32, (16,)) created+dropped: memory growth MiB",
        (rss_bytes() - rss) / 2**20,
        f"RSS {rss / 2**20:.1f} MiB before",
        1,
        section=SECTION,
    )


@section(SECTION, order=20, skip_reason=lambda: numpy_skip_reason())
def benchmark(run: Run) -> list[Result]:
    results = per_call(reps=7, number=200_000 // run.scale_down)
    results.append(copy_bandwidth(reps=run.reps(9, 3), mib=64))
    results.append(memory_growth(count=1_000_000 // run.scale_down))
    return results
