"""Measures one ``max.driver`` on the CPU and prints the figures as JSON:
the probe ``python -m benchmarks --vs-max`` runs once under this project
and once under Modular's MAX 26.7 wheel, each in its own interpreter (both
packages are named ``max``).  It needs only NumPy, the ``max`` package it
finds and cpu_copy.py next to it, never the rest of this repository.

Per-call rows are ratios to a no-op C method call (``zero.bit_length()``)
measured in the same process, interleaved and the median of several
repetitions, so each package is compared with its own interpreter's
speed; the copy row is a bandwidth ratio to ``np.copyto`` in the same
process; the memory row is bytes of RSS per live Buffer beyond its data.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import timeit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS pool spinning


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prepend", default=None, help="put this on sys.path first")
    parser.add_argument("--quick", action="store_true")
    return parser.parse_args()


ARGS = _parse()
if ARGS.prepend:
    sys.path.insert(0, ARGS.prepend)
# For cpu_copy.py: last, so that nothing here can shadow what is imported.
sys.path.append(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from cpu_copy import time_copies  # noqa: E402

from max import driver  # noqa: E402
from max.dtype import DType  # noqa: E402

NOOP = "zero.bit_length()"
# (name, statement): the CPU per-call rows both packages have.
ROWS = [
    ("device.default_queue", "cpu.default_queue"),
    ("queue.device", "q.device"),
    ("queue.native_stream_handle", "q.native_stream_handle"),
    ("record_event()", "q.record_event()"),
    ("record_event(ev)", "q.record_event(ev)"),
    ("wait_for(queue)", "q.wait_for(q2)"),
    ("wait_for(device)", "q.wait_for(cpu)"),
    ("event.is_ready()", "ev.is_ready()"),
    ("queue.synchronize() idle", "q.synchronize()"),
    ("event.synchronize() complete", "ev.synchronize()"),
    ("device.synchronize() idle", "cpu.synchronize()"),
    ("DeviceQueue(cpu) create+drop", "DeviceQueue(cpu)"),
    ("DeviceEvent(cpu) create+drop", "DeviceEvent(cpu)"),
    ("Buffer(f32, (1024,)) create+drop", "Buffer(f32, (1024,))"),
    ("Buffer.zeros((4, 6), f32)", "zeros((4, 6), f32)"),
    ("Buffer.from_numpy(a)", "Buffer.from_numpy(a)"),
    ("buf.to_numpy()", "buf.to_numpy()"),
    ("np.from_dlpack(buf)", "np.from_dlpack(buf)"),
    ("buf[1:3, ::2] (a view)", "buf[1:3, ::2]"),
    ("buf[1, 2] (a rank-0 view)", "buf[1, 2]"),
    ("one.item()", "one.item()"),
    ("buf[1, 2] = 5.0", "buf[1, 2] = 5.0"),
    ("dst.inplace_copy_from(buf) (24 floats)", "dst.inplace_copy_from(buf)"),
]


def _names() -> dict[str, object]:
    cpu = driver.CPU()
    q = driver.DeviceQueue(cpu)
    f32 = DType.float32
    return {
        "np": np,
        "zero": 0,
        "cpu": cpu,
        "q": q,
        "q2": driver.DeviceQueue(cpu),
        "ev": q.record_event(),
        "DeviceQueue": driver.DeviceQueue,
        "DeviceEvent": driver.DeviceEvent,
        "Buffer": driver.Buffer,
        "zeros": driver.Buffer.zeros,
        "f32": f32,
        "a": np.zeros((4, 6), np.float32),
        "buf": driver.Buffer.from_numpy(np.zeros((4, 6), np.float32)),
        "dst": driver.Buffer.from_numpy(np.zeros((4, 6), np.float32)),
        "one": driver.Buffer.from_numpy(np.zeros((1,), np.float32)),
    }


def per_call(reps: int, number: int) -> dict[str, dict[str, float]]:
    names = _names()
    timers = {s: timeit.Timer(s, globals=names) for _, s in [("", NOOP), *ROWS]}
    samples: dict[str, list[float]] = {s: [] for s in timers}
    for _ in range(reps):  # interleaved: one round of every statement a rep
        for stmt, timer in timers.items():
            samples[stmt].append(timer.timeit(number) / number)
    out = {}
    for name, stmt in ROWS:
        ratios = [t / n for t, n in zip(samples[stmt], samples[NOOP], strict=True)]
        out[name] = {
            "ratio": statistics.median(ratios),
            "ns": statistics.median(samples[stmt]) * 1e9,
        }
    out["no-op C call"] = {"ratio": 1.0, "ns": statistics.median(samples[NOOP]) * 1e9}
    return out


def copy_bandwidth(reps: int, mib: int) -> dict[str, float]:
    """64 MiB ``inplace_copy_from`` + synchronize on a CPU queue: its time
    as a share of ``np.copyto``'s between aliases of the same memory."""
    our_runs, numpy_runs = time_copies(driver, DType.float32, reps, mib)
    return {
        "ratio": statistics.median(
            o / n for o, n in zip(our_runs, numpy_runs, strict=True)
        ),
        "gbps": mib * 2**20 / statistics.median(our_runs) / 1e9,
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_buffer(count: int) -> dict[str, float]:
    """RSS per live ``Buffer(float32, (16,))``, less its 64 bytes of data."""
    keep = [driver.Buffer(DType.float32, (16,)) for _ in range(1000)]
    del keep
    gc.collect()
    before = _rss()
    keep = [driver.Buffer(DType.float32, (16,)) for _ in range(count)]
    grown = _rss() - before
    del keep
    return {"bytes": grown / count - 64}


def main() -> None:
    scale = 10 if ARGS.quick else 1
    report = {
        "version": getattr(driver, "__version__", "?"),
        "module": driver.__file__,
        "per_call": per_call(reps=7 if scale == 1 else 3, number=100_000 // scale),
        "copy_64MiB": copy_bandwidth(reps=7 if scale == 1 else 3, mib=64),
        "memory": memory_per_buffer(100_000 // scale),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
