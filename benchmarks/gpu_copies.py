"""Copy bandwidth on a CUDA device, part of ``python -m benchmarks.gpu``.

Each figure is the time of the raw driver's copy loop (raw_driver.c's
``raw_copy_ns``: ``cuMemcpy{HtoD,DtoH,DtoD}Async`` on pinned and device
memory it allocates itself, then ``cuStreamSynchronize``) divided by ours
(the same number of ``dst.inplace_copy_from(src)`` between Buffers, then
``queue.synchronize()``), on the same stream: the bandwidth ratio, higher is
better.  The two are interleaved, one sample of each a repetition, and the
figure is the median over the repetitions.

On the fake driver the numbers are meaningless (it copies with memcpy on a
host thread); there the code paths run, nothing is measured."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from benchmarks.common import Result
from max import driver
from max.dtype import DType

SECTION = "copies: bandwidth against the raw driver"
# Stop adding repetitions past this (scripts/gpu-check.sh gives the whole
# GPU benchmark run 45 s).
TIME_BUDGET_S = 15.0
# raw_copy_ns's kinds (RAW_COPY_* in raw_driver.c).
HTOD, DTOH, DTOD, PEER = 0, 1, 2, 3
RAW_NAMES = {
    HTOD: "cuMemcpyHtoDAsync",
    DTOH: "cuMemcpyDtoHAsync",
    DTOD: "cuMemcpyDtoDAsync",
    PEER: "cuMemcpyPeerAsync",
}


class Raw(Protocol):
    def time_ns(self, name: str, *args: int) -> float: ...


@dataclass
class Copy:
    name: str
    dst: str  # keys of _buffers()
    src: str
    raw_kind: int  # the raw copy compared with
    target: float


COPIES = [
    Copy("pinned host -> device", "device", "pinned", HTOD, 0.95),
    Copy("device -> pinned host", "pinned", "device", DTOH, 0.95),
    Copy("device -> device", "device2", "device", DTOD, 0.95),
    # Staged through the ring: the host copies a chunk while the previous
    # one's DMA runs.
    Copy(
        "pageable host -> device (staged, vs raw pinned)",
        "device",
        "pageable",
        HTOD,
        0.8,
    ),
    Copy(
        "device -> pageable host (staged, vs raw pinned)",
        "pageable",
        "device",
        DTOH,
        0.8,
    ),
]
# With a second GPU: device 0 -> device 1 on a queue of device 1, against
# the raw peer copy on that queue's stream.
PEER_COPY = Copy("device -> peer device", "peer", "device", PEER, 0.9)


def _buffers(
    queue: driver.DeviceQueue, peer: driver.DeviceQueue | None, nbytes: int
) -> dict[str, driver.Buffer]:
    shape = (nbytes // 4,)
    f32 = DType.float32
    buffers = {
        "pinned": driver.DevicePinnedBuffer(f32, shape, queue),
        "device": driver.Buffer(f32, shape, queue),
        "device2": driver.Buffer(f32, shape, queue),
        "pageable": driver.Buffer.zeros(shape, f32),  # CPU memory, touched
    }
    if peer is not None:
        buffers["peer"] = driver.Buffer(f32, shape, peer)
    buffers["device"].inplace_copy_from(buffers["pageable"])
    buffers["device2"].inplace_copy_from(buffers["pageable"])
    buffers["pinned"].inplace_copy_from(buffers["device"])
    queue.synchronize()
    return buffers


def _count(sample: Callable[[int], float], sample_s: float) -> int:
    """Copies per sample for a sample of about ``sample_s`` (2 to 200)."""
    per_copy = max(sample(2) / 2, 1e-9)
    return int(min(max(sample_s / per_copy, 2), 200))


def copy_bandwidth(
    acc: driver.Device, raw: Raw, reps: int, nbytes: int, sample_s: float
) -> list[Result]:
    queue = driver.DeviceQueue(acc)
    peer = (
        driver.DeviceQueue(driver.Accelerator(1))
        if driver.accelerator_count() > 1
        else None
    )
    buffers = _buffers(queue, peer, nbytes)
    copies = [*COPIES, PEER_COPY] if peer is not None else COPIES

    def queue_of(copy: Copy) -> driver.DeviceQueue:
        return buffers[copy.dst].stream if copy.raw_kind == PEER else queue

    def ours(copy: Copy) -> Callable[[int], float]:
        dst, src, on = buffers[copy.dst], buffers[copy.src], queue_of(copy)

        def sample(count: int) -> float:
            start = time.perf_counter()
            for _ in range(count):
                dst.inplace_copy_from(src)
            on.synchronize()
            return (time.perf_counter() - start) / count

        return sample

    def raw_copy(copy: Copy) -> Callable[[int], float]:
        stream = queue_of(copy).native_stream_handle
        kind = copy.raw_kind
        return lambda n: raw.time_ns("raw_copy_ns", kind, nbytes, stream, n, 1) * 1e-9

    samplers = [(c, ours(c), raw_copy(c)) for c in copies]
    counts = [(_count(o, sample_s), _count(r, sample_s)) for _, o, r in samplers]
    # One untimed sample of ours first: the first copies fault in the
    # staging ring's chunks and the heap memory of deferred uploads.
    for (_, our_sample, _), (n_ours, _) in zip(samplers, counts, strict=True):
        our_sample(n_ours)
    runs: dict[str, tuple[list[float], list[float]]] = {
        c.name: ([], []) for c in copies
    }
    started = time.monotonic()
    for rep in range(reps):
        if rep >= 3 and time.monotonic() - started > TIME_BUDGET_S:
            print(f"copies: time budget reached, {rep} repetitions of {reps}")
            break
        for (copy, our_sample, raw_sample), (n_ours, n_raw) in zip(
            samplers, counts, strict=True
        ):
            mine, theirs = runs[copy.name]
            theirs.append(raw_sample(n_raw))
            mine.append(our_sample(n_ours))
    return [_result(copy, *runs[copy.name], nbytes) for copy in copies]


def _result(copy: Copy, ours: list[float], raw: list[float], nbytes: int) -> Result:
    def gbps(seconds: list[float]) -> str:
        return f"{nbytes / statistics.median(seconds) / 1e9:.2f} GB/s"

    mib = nbytes / 2**20
    return Result(
        f"{copy.name}, {mib:g} MiB: bandwidth / raw",
        statistics.median(r / o for r, o in zip(raw, ours, strict=True)),
        f"ours {gbps(ours)} vs raw {RAW_NAMES[copy.raw_kind]} {gbps(raw)}",
        copy.target,
        higher_is_better=True,
        section=SECTION,
    )
