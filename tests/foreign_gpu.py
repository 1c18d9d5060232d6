"""Another library on the same GPU: streams, memory, copies and events made
through the driver library max.driver loaded (ctypes), for the tests that
hand memory to foreign streams or take it from them (SPEC §12.7, §13).
Not a test module.

- ``ForeignGPU(api)``: the driver calls a foreign library makes (CUDA or
  HIP names), each under the device made current as such a library does.
- ``StreamProducer``: a DLPack producer over device memory it allocated,
  written by a copy on a stream of its own that waits for a flag (work
  still pending when it is imported); its ``__dlpack__(stream=s)`` orders
  ``s`` after that work with an event, as CuPy and PyTorch do.
- ``StreamConsumer``: a stream of its own, held by a flag, that reads what
  it is handed (``__dlpack__(stream=its handle)``) into memory of its own;
  it gives the capsule back (calls the deleter) when told to.

Held streams wait on a ``CompletionFlag``'s slot (``cuStreamWaitValue64`` /
``hipStreamWaitValue64``), so that the model's flags release them; the
object keeps the flag alive while its stream may read the slot."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

from dlpack_support import CtypesProducer, take

from max import driver
from max.dtype import DType

SUCCESS = 0
WAIT_VALUE_EQ = 1  # CU_STREAM_WAIT_VALUE_EQ, hipStreamWaitValueEq
NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING, hipStreamNonBlocking
EVENT_DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING, hipEventDisableTiming
DL_DEVICE = {"cuda": 2, "hip": 10}  # kDLCUDA, kDLROCM

_p, _i, _u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
_z, _u64 = ctypes.c_size_t, ctypes.c_uint64
_pp = ctypes.POINTER(ctypes.c_void_p)
# name: (CUDA name, HIP name, argument types); device pointers are u64 on
# CUDA and void * on HIP, both passed as ints.
_CALLS = {
    "stream_create": ("cuStreamCreate", "hipStreamCreateWithFlags", (_pp, _u)),
    "stream_destroy": ("cuStreamDestroy_v2", "hipStreamDestroy", (_p,)),
    "stream_wait_event": ("cuStreamWaitEvent", "hipStreamWaitEvent", (_p, _p, _u)),
    "event_create": ("cuEventCreate", "hipEventCreateWithFlags", (_pp, _u)),
    "event_record": ("cuEventRecord", "hipEventRecord", (_p, _p)),
    "event_destroy": ("cuEventDestroy_v2", "hipEventDestroy", (_p,)),
    "htod": ("cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync", (_u64, _p, _z, _p)),
    "dtoh": ("cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync", (_p, _u64, _z, _p)),
    "dtod": ("cuMemcpyDtoDAsync_v2", "hipMemcpyDtoDAsync", (_u64, _u64, _z, _p)),
    "free": ("cuMemFree_v2", "hipFree", (_u64,)),
}


class ForeignGPU:
    """The driver calls of a foreign library, on the library max.driver
    loaded (``CDLL`` of a loaded path returns the same instance)."""

    def __init__(self, api: str) -> None:
        self.api = api
        chosen = [e for e in driver.backend_selection() if e["chosen"]]
        self.lib = ctypes.CDLL(str(chosen[0]["library"]))
        for name, (cu, hip, argtypes) in _CALLS.items():
            fn = getattr(self.lib, cu if api == "cuda" else hip)
            fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
            setattr(self, "_" + name, fn)
        if api == "cuda":
            self._sig("cuDevicePrimaryCtxRetain", _pp, _i)
            self._sig("cuCtxPushCurrent_v2", _p)
            self._sig("cuCtxPopCurrent_v2", _pp)
            self._sig("cuMemAlloc_v2", ctypes.POINTER(_u64), _z)
            self._sig("cuStreamWaitValue64_v2", _p, _u64, _u64, _u)
        else:
            self._sig("hipGetDevice", ctypes.POINTER(_i))
            self._sig("hipSetDevice", _i)
            self._sig("hipMalloc", _pp, _z)
            self._sig("hipStreamWaitValue64", _p, _p, _u64, _u, _u64)

    def _sig(self, name: str, *argtypes: Any) -> None:
        fn = getattr(self.lib, name)
        fn.argtypes, fn.restype = list(argtypes), ctypes.c_int

    @staticmethod
    def ok(rc: int, what: str) -> None:
        assert rc == SUCCESS, f"{what} failed with driver error {rc}"

    @contextlib.contextmanager
    def current(self, device: int) -> Iterator[None]:
        """``device`` current on this thread, as a library has it when it
        calls the driver (CUDA: its primary context pushed)."""
        if self.api == "cuda":
            ctx = ctypes.c_void_p()
            self.ok(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "ctx")
            self.ok(self.lib.cuCtxPushCurrent_v2(ctx), "push")
            try:
                yield
            finally:
                popped = ctypes.c_void_p()
                self.ok(self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped)), "pop")
            return
        old = ctypes.c_int()
        self.ok(self.lib.hipGetDevice(ctypes.byref(old)), "hipGetDevice")
        self.ok(self.lib.hipSetDevice(device), "hipSetDevice")
        try:
            yield
        finally:
            self.ok(self.lib.hipSetDevice(old.value), "hipSetDevice")

    # Each call below runs with its device current (the caller's job).
    def stream(self) -> int:
        s = ctypes.c_void_p()
        self.ok(self._stream_create(ctypes.byref(s), NON_BLOCKING), "stream create")
        return s.value

    def malloc(self, size: int) -> int:
        if self.api == "cuda":
            d = _u64()
            self.ok(self.lib.cuMemAlloc_v2(ctypes.byref(d), size), "cuMemAlloc")
            return d.value
        p = ctypes.c_void_p()
        self.ok(self.lib.hipMalloc(ctypes.byref(p), size), "hipMalloc")
        return p.value

    def wait_value(self, stream: int, flag: driver.CompletionFlag, value: int) -> None:
        """Later work on ``stream`` waits until ``flag`` holds ``value``."""
        if self.api == "cuda":
            rc = self.lib.cuStreamWaitValue64_v2(
                stream, flag.device_ptr, value, WAIT_VALUE_EQ
            )
        else:
            rc = self.lib.hipStreamWaitValue64(
                stream, flag.device_ptr, value, WAIT_VALUE_EQ, 2**64 - 1
            )
        self.ok(rc, "wait value")

    def after(self, waiter: int, stream: int) -> None:
        """Work on ``waiter`` enqueued later waits for ``stream``'s work so
        far (an event recorded there)."""
        e = ctypes.c_void_p()
        self.ok(self._event_create(ctypes.byref(e), EVENT_DISABLE_TIMING), "event")
        self.ok(self._event_record(e, stream), "event record")
        self.ok(self._stream_wait_event(waiter, e, 0), "stream wait event")
        self.ok(self._event_destroy(e), "event destroy")

    def upload(self, dst: int, src: ctypes.Array, stream: int) -> None:
        """From pageable memory: the driver reads ``src`` during the call
        (the fake, strictest, after the stream's earlier work), so the
        caller must not hold the stream: upload first, then gate."""
        self.ok(
            self._htod(dst, ctypes.addressof(src), ctypes.sizeof(src), stream), "up"
        )

    def download(self, dst: ctypes.Array, src: int, stream: int) -> None:
        """Into pageable memory: complete when the call returns."""
        n = ctypes.sizeof(dst)
        self.ok(self._dtoh(ctypes.addressof(dst), src, n, stream), "download")

    def copy(self, dst: int, src: int, size: int, stream: int) -> None:
        self.ok(self._dtod(dst, src, size, stream), "device copy")

    def destroy_stream(self, stream: int) -> None:
        self.ok(self._stream_destroy(stream), "stream destroy")

    def free(self, ptr: int) -> None:
        self.ok(self._free(ptr), "free")


def _int32s(values: list[int]) -> ctypes.Array:
    return (ctypes.c_int32 * len(values))(*values)


class StreamProducer:
    """A foreign producer of an int32 vector in device memory of its own,
    written on its own stream: from ``values`` at once (``gate`` None), or
    behind ``gate`` (flag, value): staging memory gets ``values``, the
    device memory a copy of it that waits until the flag holds the value.
    ``__dlpack__(stream=s)`` makes ``s`` wait for that write."""

    def __init__(
        self,
        gpu: ForeignGPU,
        device: driver.Device,
        values: list[int],
        gate: tuple[driver.CompletionFlag, int] | None = None,
    ) -> None:
        self.gpu, self.device, self.values = gpu, device, list(values)
        self.gate = gate  # keeps the flag alive while the stream reads it
        n = 4 * len(values)
        with gpu.current(device.id):
            self.stream = gpu.stream()
            self.memory = gpu.malloc(n)
            self.staging = gpu.malloc(n)
            self._host = _int32s(self.values)
            gpu.upload(self.staging, self._host, self.stream)
            if gate is not None:
                gpu.wait_value(self.stream, *gate)
            gpu.copy(self.memory, self.staging, n, self.stream)
        self.dlpack = CtypesProducer(
            self.memory,
            (len(values),),
            DType.int32,
            device=(DL_DEVICE[gpu.api], device.id),
        )

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> object:
        if stream is not None and stream != -1:
            with self.gpu.current(self.device.id):
                self.gpu.after(stream, self.stream)
        return self.dlpack.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.dlpack.__dlpack_device__()

    @property
    def released(self) -> bool:
        """Whether every capsule it made was given back."""
        return self.dlpack.made() == self.dlpack.deleted

    def close(self) -> None:
        """Frees its memory (the driver's free waits for the device) once
        every capsule was given back."""
        assert self.released, "a consumer still holds the producer's memory"
        with self.gpu.current(self.device.id):
            self.gpu.destroy_stream(self.stream)
            self.gpu.free(self.memory)
            self.gpu.free(self.staging)


class StreamConsumer:
    """A foreign consumer with a stream of its own, held until ``gate``
    (flag, value) opens: ``consume(buf, n)`` takes ``buf``'s capsule for
    that stream and enqueues a copy of its first ``n`` int32 into memory of
    its own there; ``give_back()`` calls the capsule's deleter; ``result()``
    reads the copy (complete once the stream got past it)."""

    def __init__(
        self,
        gpu: ForeignGPU,
        device: driver.Device,
        gate: tuple[driver.CompletionFlag, int],
    ) -> None:
        self.gpu, self.device, self.gate = gpu, device, gate
        self.managed: Any = None
        with gpu.current(device.id):
            self.stream = gpu.stream()
            gpu.wait_value(self.stream, *gate)

    def consume(self, buf: Any, n: int) -> None:
        capsule = buf.__dlpack__(stream=self.stream, max_version=(1, 0))
        self.managed = take(capsule)
        self.n = n
        with self.gpu.current(self.device.id):
            self.memory = self.gpu.malloc(4 * n)
            self.gpu.copy(self.memory, self.managed.dl_tensor.data, 4 * n, self.stream)

    def give_back(self) -> None:
        """The consumer is done with the capsule (its copy may still be
        pending on its stream)."""
        m, self.managed = self.managed, None
        m.deleter(ctypes.addressof(m))

    def result(self) -> list[int]:
        out = (ctypes.c_int32 * self.n)()
        with self.gpu.current(self.device.id):
            self.gpu.download(out, self.memory, self.stream)
        return list(out)

    def close(self) -> None:
        if self.managed is not None:
            self.give_back()
        with self.gpu.current(self.device.id):
            self.gpu.destroy_stream(self.stream)
            if hasattr(self, "memory"):
                self.gpu.free(self.memory)
