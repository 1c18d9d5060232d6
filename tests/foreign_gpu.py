"""Another library on the same GPU, for the tests that take memory from
foreign streams or hand it to them (SPEC §12.7, §13).  Not a test module.

Its driver calls go through ``fake_driver.fakelib.Api`` (the CUDA and HIP
names spelled once, ctypes) on the library max.driver loaded, the fake
driver or a real one alike (``CDLL`` of a loaded path returns the same
instance):

- ``StreamProducer``: a DLPack producer over int32 device memory it
  allocated, written by a copy on a stream of its own that waits for a flag
  (work still pending when it is imported); its ``__dlpack__(stream=s)``
  orders ``s`` after that work with an event, as CuPy and PyTorch do.
- ``StreamConsumer``: a stream of its own, held by a flag, that copies what
  it is handed (``__dlpack__(stream=its stream)``) into memory of its own,
  and gives the capsule back (calls its deleter) when told to.

Held streams wait on a ``CompletionFlag``'s slot (``cuStreamWaitValue64`` /
``hipStreamWaitValue64``), so that a test's flags release them; the objects
keep the flag alive while their stream may read its slot."""

from __future__ import annotations

import ctypes
from typing import Any

from dlpack_support import CtypesProducer, take
from fake_driver.fakelib import DISABLE_TIMING, SUCCESS, Api, load

from max import driver
from max.dtype import DType

DL_DEVICE = {"cuda": 2, "hip": 10}  # kDLCUDA, kDLROCM
_APIS: dict[str, Api] = {}


def driver_api(api: str) -> Api:
    """The driver calls of a foreign library, on the library max.driver
    chose at import (one per process)."""
    if api not in _APIS:
        chosen = next(e for e in driver.backend_selection() if e["chosen"])
        _APIS[api] = Api(load(chosen["library"]), api)
    return _APIS[api]


def _ok(rc: int, what: str) -> None:
    assert rc == SUCCESS, f"{what} failed with driver error {rc}"


def _malloc(gpu: Api, size: int) -> int:
    rc, ptr = gpu.malloc(size)
    _ok(rc, "malloc")
    return ptr


def _after(gpu: Api, waiter: int, stream: Any) -> None:
    """Work enqueued on ``waiter`` later waits for ``stream``'s work so far."""
    e = gpu.event(DISABLE_TIMING)
    _ok(gpu.record(e, stream), "event record")
    _ok(gpu.wait_event(ctypes.c_void_p(waiter), e), "stream wait event")
    _ok(gpu.event_destroy(e), "event destroy")


class StreamProducer:
    """A foreign producer of an int32 vector in device memory of its own,
    written on its own stream from ``values``: at once (``gate`` None), or
    behind ``gate`` (flag, value): staging device memory gets the values,
    the vector a copy of it that waits until the flag holds the value."""

    def __init__(
        self,
        api: str,
        device: driver.Device,
        values: list[int],
        gate: tuple[driver.CompletionFlag, int] | None = None,
    ) -> None:
        self.gpu, self.device, self.gate = driver_api(api), device, gate
        n = 4 * len(values)
        self._host = (ctypes.c_int32 * len(values))(*values)
        with self.gpu.on_device(device.id):
            self.stream = self.gpu.stream()
            self.memory, self.staging = _malloc(self.gpu, n), _malloc(self.gpu, n)
            # From pageable memory: read during the call (the fake, the
            # strictest driver, copies after the stream's earlier work).
            _ok(self.gpu.h2d(self.staging, self._host, n, self.stream), "upload")
            if gate is not None:
                flag, value = gate
                _ok(self.gpu.wait_value(self.stream, flag.device_ptr, value), "gate")
            _ok(self.gpu.d2d(self.memory, self.staging, n, self.stream), "copy")
        self.dlpack = CtypesProducer(
            self.memory, (len(values),), DType.int32, device=(DL_DEVICE[api], device.id)
        )

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> object:
        if stream is not None and stream != -1:
            with self.gpu.on_device(self.device.id):
                _after(self.gpu, stream, self.stream)
        return self.dlpack.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.dlpack.__dlpack_device__()

    @property
    def released(self) -> bool:
        """Whether every capsule it made was given back."""
        return self.dlpack.made() == self.dlpack.deleted

    def close(self) -> None:
        """Frees what it allocated (the driver's free waits for the
        device), once every capsule was given back."""
        assert self.released, "a consumer still holds the producer's memory"
        with self.gpu.on_device(self.device.id):
            _ok(self.gpu.destroy(self.stream), "stream destroy")
            _ok(self.gpu.free(self.memory), "free")
            _ok(self.gpu.free(self.staging), "free")


class StreamConsumer:
    """A foreign consumer whose stream is held until ``gate`` (flag, value)
    opens: ``consume(buf, n)`` takes ``buf``'s capsule for that stream and
    enqueues there a copy of its first ``n`` int32 into memory of its own;
    ``give_back()`` calls the capsule's deleter (the copy may still be
    pending); ``result()`` reads the copy once its stream got past it."""

    def __init__(
        self, api: str, device: driver.Device, gate: tuple[driver.CompletionFlag, int]
    ) -> None:
        self.gpu, self.device, self.gate = driver_api(api), device, gate
        self.managed: Any = None
        self.memory = 0
        with self.gpu.on_device(device.id):
            self.stream = self.gpu.stream()
            flag, value = gate
            _ok(self.gpu.wait_value(self.stream, flag.device_ptr, value), "gate")

    def consume(self, buf: Any, n: int) -> None:
        capsule = buf.__dlpack__(stream=self.stream.value, max_version=(1, 0))
        self.managed = take(capsule)
        self.n = n
        src = self.managed.dl_tensor.data + self.managed.dl_tensor.byte_offset
        with self.gpu.on_device(self.device.id):
            self.memory = _malloc(self.gpu, 4 * n)
            _ok(self.gpu.d2d(self.memory, src, 4 * n, self.stream), "copy")

    def synchronize(self) -> None:
        """The host waits for the consumer's stream."""
        _ok(self.gpu.sync(self.stream), "stream synchronize")

    def give_back(self) -> None:
        m, self.managed = self.managed, None
        m.deleter(ctypes.addressof(m))

    def result(self) -> list[int]:
        out = (ctypes.c_int32 * self.n)()
        with self.gpu.on_device(self.device.id):
            # Into pageable memory: complete when the call returns.
            _ok(self.gpu.d2h(out, self.memory, 4 * self.n, self.stream), "download")
        return list(out)

    def close(self) -> None:
        if self.managed is not None:
            self.give_back()
        with self.gpu.on_device(self.device.id):
            _ok(self.gpu.destroy(self.stream), "stream destroy")
            if self.memory:
                _ok(self.gpu.free(self.memory), "free")
