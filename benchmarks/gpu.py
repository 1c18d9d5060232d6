"""The GPU benchmarks: ``python -m benchmarks.gpu [--quick] [--out DIR]``.

Per-call cost of the hot operations on a CUDA queue, compared with

* the raw driver call(s) each one stands for, timed in a C loop
  (``benchmarks/raw_driver.c``, compiled here at run time with ``cc``) on the
  same stream handles: overhead = ours - raw, target <= 150 ns;
* the same operation through PyTorch and through CuPy, when importable:
  ratio = ours / theirs, target <= 1 (ours faster).

Copies between Buffers (``inplace_copy_from``) against the raw
``cuMemcpy{HtoD,DtoH,DtoD}Async`` loop on memory raw_driver.c allocates
itself: the bandwidth of pinned host <-> device and device -> device copies
(target >= 0.95x raw), of pageable host -> device copies, staged through
pinned memory (>= 0.8x the raw pinned copy), and the call overhead of a
4 KiB copy (<= raw + 300 ns; below ``torch.Tensor.to(non_blocking=True)``
when PyTorch is importable).

As in ``python -m benchmarks``, every figure comes from measurements taken in
one process, interleaved (one round of every measurement per repetition),
and is the median over the repetitions.  The queues are idle and the events
complete: this is the cost of the call, not of device work.  Without a CUDA
accelerator the command says so and exits 0.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import OUT_DIR, Result, machine, plot, table
from benchmarks.gpu_copies import DTOD, HTOD, copy_bandwidth
from max import driver
from max.dtype import DType

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
RAW_SOURCE = HERE / "raw_driver.c"
OVERHEAD_TARGET_NS = 150.0
SMALL_COPY_BYTES = 4096
SMALL_COPY_TARGET_NS = 300.0
# A driver queue holds about 1,000 operations before an enqueue blocks: a
# small-copy sample stays below that, or it would time the device.
SMALL_COPY_MAX_COUNT = 512
SECTION_OVERHEAD = "per call: overhead over the raw driver"
SECTION_FRAMEWORKS = "against PyTorch and CuPy"
TIME_BUDGET_S = 45.0  # stop adding repetitions past this (the run: < 60 s)


def cuda_skip_reason() -> str | None:
    if driver.accelerator_count() == 0:
        return "no CUDA accelerator (max.driver.accelerator_count() == 0)"
    api = driver.accelerator_api()
    if api != "cuda":
        return f"no CUDA accelerator (the accelerator API is {api!r})"
    return None


# ---- the raw driver baseline --------------------------------------------------


def build_raw(out_dir: Path, compiler: str = "cc") -> Path:
    """Compiles raw_driver.c into a shared library in ``out_dir``."""
    library = out_dir / "raw_driver.so"
    command = [
        compiler,
        "-std=c11",
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-D_GNU_SOURCE",
        f"-I{REPO_ROOT / 'csrc' / 'backends'}",
        str(RAW_SOURCE),
        "-o",
        str(library),
        "-ldl",
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return library


class RawDriver:
    """The timing functions of raw_driver.c, through ctypes."""

    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library))
        self.lib.raw_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.lib.raw_open.restype = ctypes.c_int
        self.lib.raw_last_error.restype = ctypes.c_char_p
        u64, n = ctypes.c_uint64, ctypes.c_long
        signatures = {
            "raw_event_record_ns": [u64, n],
            "raw_event_create_record_destroy_ns": [u64, n],
            "raw_wait_queue_ns": [u64, u64, n],
            "raw_wait_event_ns": [u64, u64, n],
            "raw_event_query_ns": [u64, n],
            "raw_event_synchronize_ns": [u64, n],
            "raw_stream_query_ns": [u64, n],
            "raw_stream_synchronize_ns": [u64, n],
            "raw_host_store_ns": [n],
            "raw_load_ns": [n],
            "raw_copy_ns": [ctypes.c_int, u64, u64, n, ctypes.c_int],
            "raw_context_bind_ns": [n],
        }
        for name, argtypes in signatures.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_double

    def last_error(self) -> str:
        return (self.lib.raw_last_error() or b"").decode()

    def open(self, path: str | None, ordinal: int) -> None:
        rc = self.lib.raw_open(path.encode() if path else None, ordinal)
        if rc != 0:
            raise RuntimeError(f"raw_open failed ({rc}): {self.last_error()}")

    def context_push(self) -> None:
        """Leaves the device's primary context current on this thread, as
        PyTorch and CuPy do, until context_pop()."""
        if self.lib.raw_context_push() != 0:
            raise RuntimeError(f"raw_context_push: {self.last_error()}")

    def context_pop(self) -> None:
        self.lib.raw_context_pop()

    def time_ns(self, name: str, *args: int) -> float:
        """ns per iteration of ``name(*args)`` (the last argument: the count)."""
        ns = getattr(self.lib, name)(*args)
        if ns < 0:
            raise RuntimeError(f"{name}: {self.last_error()}")
        return ns


# ---- what is measured -----------------------------------------------------------


@dataclass
class Op:
    """One operation: our statement, its raw equivalent(s) and the frameworks'."""

    name: str
    ours: str  # a statement for timeit, over the names of _fixture()
    raw: dict[str, Callable[[int], float]]  # label -> ns per call for a count
    torch: str | None = None
    cupy: str | None = None
    target: float | None = OVERHEAD_TARGET_NS
    max_count: int = 100_000  # calls per sample at most


def _fixture(acc: driver.Device) -> dict[str, object]:
    q, q2 = driver.DeviceQueue(acc), driver.DeviceQueue(acc)
    done = q2.record_event()  # complete once q2 is synchronized
    q2.synchronize()
    small = (SMALL_COPY_BYTES // 4,)
    return {
        "acc": acc,
        "q": q,
        "q2": q2,
        "ev": driver.DeviceEvent(acc),  # re-recorded by record_event(ev)
        "done": done,
        "flag": driver.CompletionFlag(acc),
        "p4": driver.DevicePinnedBuffer(DType.float32, small, q),
        "d4": driver.Buffer(DType.float32, small, q),
        "d4b": driver.Buffer(DType.float32, small, q),
    }


def _ops(raw: RawDriver, names: dict[str, object]) -> list[Op]:
    s = names["q"].native_stream_handle
    s2 = names["q2"].native_stream_handle

    def call(name: str, *args: int) -> Callable[[int], float]:
        if name == "raw_copy_ns":  # (kind, bytes, stream, count, synchronize)
            *first, synchronize = args
            return lambda n: raw.time_ns(name, *first, n, synchronize)
        return lambda n: raw.time_ns(name, *args, n)

    return [
        Op(
            "record_event()",
            "q.record_event()",
            {
                "cuEventCreate+cuEventRecord+cuEventDestroy": call(
                    "raw_event_create_record_destroy_ns", s
                )
            },
            torch="ts.record_event()",
            cupy="cs.record()",
        ),
        Op(
            "record_event() [vs cuEventRecord alone]",
            "q.record_event()",
            {"cuEventRecord": call("raw_event_record_ns", s)},
            target=None,
        ),
        Op(
            "record_event(ev)",
            "q.record_event(ev)",
            {"cuEventRecord": call("raw_event_record_ns", s)},
            torch="ts.record_event(tev)",
            cupy="cs.record(cev)",
        ),
        Op(
            "wait_for(queue)",
            "q.wait_for(q2)",
            {"cuEventRecord+cuStreamWaitEvent": call("raw_wait_queue_ns", s, s2)},
            torch="ts.wait_stream(ts2)",
            cupy="cs.wait_event(cs2.record())",
        ),
        Op(
            "wait_for(event)",
            "q.wait_for(done)",
            {"cuStreamWaitEvent": call("raw_wait_event_ns", s, s2)},
            torch="ts.wait_event(tdone)",
            cupy="cs.wait_event(cdone)",
        ),
        Op(
            "event.is_ready()",
            "done.is_ready()",
            {"cuEventQuery": call("raw_event_query_ns", s2)},
            torch="tdone.query()",
            cupy="cdone.done",
        ),
        Op(
            "event.synchronize() complete",
            "done.synchronize()",
            {
                "cuEventQuery": call("raw_event_query_ns", s2),
                "cuEventSynchronize": call("raw_event_synchronize_ns", s2),
            },
            torch="tdone.synchronize()",
            cupy="cdone.synchronize()",
        ),
        Op(
            "queue.synchronize() idle",
            "q2.synchronize()",
            {
                "cuStreamQuery": call("raw_stream_query_ns", s2),
                "cuStreamSynchronize": call("raw_stream_synchronize_ns", s2),
            },
            torch="ts2.synchronize()",
            cupy="cs2.synchronize()",
        ),
        Op(
            "flag.signal(v)",
            "flag.signal(1)",
            {"release store": lambda n: raw.time_ns("raw_host_store_ns", n)},
        ),
        Op(
            "queue.native_stream_handle",
            "q.native_stream_handle",
            {"load of a stored handle": lambda n: raw.time_ns("raw_load_ns", n)},
            torch="ts.cuda_stream",
            cupy="cs.ptr",
        ),
        Op(
            "4 KiB copy pinned -> device (inplace_copy_from)",
            "d4.inplace_copy_from(p4)",
            {
                "cuMemcpyHtoDAsync 4 KiB": call(
                    "raw_copy_ns", HTOD, SMALL_COPY_BYTES, s, 0
                )
            },
            target=SMALL_COPY_TARGET_NS,
            max_count=SMALL_COPY_MAX_COUNT,
        ),
        Op(
            "4 KiB copy device -> device (inplace_copy_from)",
            "d4b.inplace_copy_from(d4)",
            {
                "cuMemcpyDtoDAsync 4 KiB": call(
                    "raw_copy_ns", DTOD, SMALL_COPY_BYTES, s, 0
                )
            },
            max_count=SMALL_COPY_MAX_COUNT,
        ),
        Op(  # no raw twin: a new device buffer and the copy into it
            "4 KiB copy pinned -> device (pinned.to(acc))",
            "p4.to(acc)",
            {},
            torch="tp4.to(tdev, non_blocking=True)",
            max_count=SMALL_COPY_MAX_COUNT,
        ),
    ]


def _torch_names() -> tuple[dict[str, object], str] | None:
    try:
        import torch
    except Exception as exc:  # not installed, or broken on this host
        print(f"PyTorch: skipped ({exc!r})")
        return None
    if not torch.cuda.is_available():
        print("PyTorch: skipped (torch.cuda.is_available() is False)")
        return None
    ts, ts2 = torch.cuda.Stream(device=0), torch.cuda.Stream(device=0)
    tdone = ts2.record_event()
    ts2.synchronize()
    names = {
        "ts": ts,
        "ts2": ts2,
        "tev": torch.cuda.Event(),
        "tdone": tdone,
        # torch.Tensor.to() copies on the current stream
        "tcur": torch.cuda.current_stream(0),
        "tdev": torch.device("cuda", 0),
        "tp4": torch.empty(SMALL_COPY_BYTES // 4, dtype=torch.float32).pin_memory(),
    }
    return names, torch.__version__


def _cupy_names() -> tuple[dict[str, object], str] | None:
    try:
        import cupy
    except Exception as exc:
        print(f"CuPy: skipped ({exc!r})")
        return None
    try:
        with cupy.cuda.Device(0):
            cs = cupy.cuda.Stream(non_blocking=True)
            cs2 = cupy.cuda.Stream(non_blocking=True)
            cdone = cupy.cuda.Event(disable_timing=True)
            cs2.record(cdone)
            cs2.synchronize()
            cev = cupy.cuda.Event(disable_timing=True)
    except Exception as exc:  # e.g. no usable device for CuPy
        print(f"CuPy: skipped ({exc!r})")
        return None
    names = {"cs": cs, "cs2": cs2, "cev": cev, "cdone": cdone}
    return names, cupy.__version__


# ---- measuring ----------------------------------------------------------------------


def _calibrate(
    sample: Callable[[int], float], sample_s: float, most: int = 100_000
) -> int:
    """The count of calls per sample for a sample of about ``sample_s``."""
    first = min(200, most)
    per_call = max(sample(first) / first, 1e-9)
    return int(min(max(sample_s / per_call, first), most))


def measure(
    ops: list[Op],
    names: dict[str, object],
    frameworks: set[str],
    settle: Callable[[], None],
    reps: int,
    sample_s: float,
) -> dict[str, dict[str, list[float]]]:
    """Seconds per call: {op name: {"ours" | "torch" | "cupy" | raw label: [..]}}.

    Every repetition takes one sample of everything, in the same order.
    ``settle()`` runs (untimed) after each sample, so that work a sample
    enqueued cannot slow the next one down."""
    samplers: list[tuple[str, str, Callable[[int], float], int]] = []
    loop = timeit.Timer("pass", globals=names)
    samplers.append(("loop", "pass", lambda n: loop.timeit(n) / n, 100_000))
    for op in ops:
        for side in ("ours", "torch", "cupy"):
            stmt = getattr(op, side)
            if stmt is None or (side != "ours" and side not in frameworks):
                continue
            timer = timeit.Timer(stmt, globals=names)
            samplers.append(
                (op.name, side, lambda n, t=timer: t.timeit(n) / n, op.max_count)
            )
        for label, raw_ns in op.raw.items():
            samplers.append(
                (op.name, label, lambda n, f=raw_ns: f(n) * 1e-9, op.max_count)
            )
    counts = []
    for _, _, sample, most in samplers:
        counts.append(_calibrate(sample, sample_s, most))
        settle()
    samples: dict[str, dict[str, list[float]]] = {}
    started = time.monotonic()
    for rep in range(reps):
        if rep >= 3 and time.monotonic() - started > TIME_BUDGET_S:
            print(f"time budget reached: {rep} repetitions instead of {reps}")
            break
        for (name, side, sample, _), count in zip(samplers, counts, strict=True):
            samples.setdefault(name, {}).setdefault(side, []).append(sample(count))
            settle()
    return samples


def results(
    ops: list[Op], samples: dict[str, dict[str, list[float]]]
) -> tuple[list[Result], list[Result]]:
    """(overheads over the raw driver, comparisons with the frameworks)."""
    loop_ns = statistics.median(samples["loop"]["pass"]) * 1e9
    overheads, frameworks = [], []
    for op in ops:
        mine = samples[op.name]
        ours = mine["ours"]
        ours_ns = statistics.median(ours) * 1e9
        if op.raw:
            overheads.append(_overhead(op, mine, ours_ns, loop_ns))
        for side, label in (("torch", "PyTorch"), ("cupy", "CuPy")):
            if side not in mine:
                continue
            theirs = mine[side]
            ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
            frameworks.append(
                Result(
                    f"{op.name}: ours / {label}",
                    ratio,
                    f"ours `{op.ours}` {ours_ns:.1f} ns vs {label} "
                    f"`{getattr(op, side)}` {statistics.median(theirs) * 1e9:.1f} ns",
                    1,
                    section=SECTION_FRAMEWORKS,
                )
            )
    return overheads, frameworks


def _overhead(
    op: Op, mine: dict[str, list[float]], ours_ns: float, loop_ns: float
) -> Result:
    ours = mine["ours"]
    # The strictest baseline: the cheapest raw equivalent, per repetition.
    raw_runs = [min(r) for r in zip(*(mine[k] for k in op.raw), strict=True)]
    overhead = statistics.median(
        (o - r) * 1e9 for o, r in zip(ours, raw_runs, strict=True)
    )
    raws = ", ".join(
        f"{label} {statistics.median(mine[label]) * 1e9:.1f} ns" for label in op.raw
    )
    return Result(
        f"{op.name}: overhead over raw driver, ns",
        overhead,
        f"ours {ours_ns:.1f} ns (Python loop {loop_ns:.1f} ns included); raw: {raws}",
        op.target,
        section=SECTION_OVERHEAD,
    )


def benchmark(
    acc: driver.Device, raw: RawDriver, quick: bool
) -> tuple[list[Result], list[Result], list[Result], dict[str, object]]:
    """Measures everything on ``acc``: (overheads, copy bandwidths, framework
    comparisons, a report with the machine and the raw samples)."""
    names = _fixture(acc)
    versions: dict[str, str] = {}
    # p4.to(acc) lands on acc's default queue
    streams = [names["q"], names["q2"], acc.default_queue]
    for side, make in (("torch", _torch_names), ("cupy", _cupy_names)):
        made = make()
        if made is not None:
            extra, versions[side] = made
            names.update(extra)
            streams += [
                extra[k] for k in ("ts", "ts2", "tcur", "cs", "cs2") if k in extra
            ]
    skipped = []
    if "torch" not in versions:
        skipped.append(
            "4 KiB copy against torch.Tensor.to(non_blocking=True): not compared, "
            "PyTorch is not usable here (see above)"
        )
        print(skipped[-1])

    def settle() -> None:
        for stream in streams:
            stream.synchronize()

    ops = _ops(raw, names)
    samples = measure(
        ops,
        names,
        set(versions),
        settle,
        reps=3 if quick else 9,
        sample_s=0.003 if quick else 0.02,
    )
    overheads, frameworks = results(ops, samples)
    copies = copy_bandwidth(
        acc,
        raw,
        reps=3 if quick else 9,
        nbytes=(8 if quick else 64) * 2**20,
        sample_s=0.01 if quick else 0.05,
    )
    try:
        architecture = acc.architecture_name
    except RuntimeError:  # a CPU device standing in (the tooling test)
        architecture = "none"
    info = machine() | {
        "gpu": acc.model_name,
        "architecture": architecture,
        "torch": versions.get("torch", "not measured"),
        "cupy": versions.get("cupy", "not measured"),
    }
    report: dict[str, object] = {
        "machine": info,
        "skipped": skipped,
        "samples_s": samples,
    }
    return overheads, copies, frameworks, report


# ---- the command ------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions (a smoke run, noisier)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT_DIR,
        help="where to write gpu-latest.json/.txt/.png, gpu-copies.png and "
        "gpu-frameworks.png",
    )
    parser.add_argument(
        "--cc", default="cc", help="the C compiler that builds raw_driver.c"
    )
    args = parser.parse_args(argv)

    reason = cuda_skip_reason()
    if reason:
        print(f"{reason}: skipping the GPU benchmarks")
        return 0
    if shutil.which(args.cc) is None:
        print(f"no C compiler {args.cc!r}: cannot build raw_driver.c")
        return 1

    begin = time.monotonic()
    acc = driver.Accelerator(0)
    with tempfile.TemporaryDirectory(prefix="max-driver-bench-") as tmp:
        raw = RawDriver(build_raw(Path(tmp), args.cc))
        library = next(
            (s["library"] for s in driver.backend_selection() if s["chosen"]), None
        )
        raw.open(library, 0)
        overheads, copies, frameworks, report = benchmark(acc, raw, args.quick)
    everything = overheads + copies + frameworks
    info = report["machine"]
    print(f"machine: {info}")
    print(table(everything))
    args.out.mkdir(parents=True, exist_ok=True)
    report["results"] = [asdict(r) | {"status": r.status} for r in everything]
    (args.out / "gpu-latest.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu-latest.txt").write_text(table(everything) + "\n")
    for shown, file in (
        (overheads, "gpu-latest.png"),
        (copies, "gpu-copies.png"),
        (frameworks, "gpu-frameworks.png"),
    ):
        if shown and plot(shown, args.out / file):
            print(f"plot: {args.out / file}")
    missed = [r.name for r in everything if r.status == "MISS"]
    print(f"{len(missed)} target(s) missed" + (f": {missed}" if missed else ""))
    print(f"GPU benchmarks took {time.monotonic() - begin:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
