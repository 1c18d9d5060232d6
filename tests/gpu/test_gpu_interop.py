"""``DeviceQueue.__cuda_stream__`` consumed by other CUDA libraries.

Each consumer (cuda.core, CuPy, PyTorch) is tried when importable and its
test skipped otherwise.  Besides comparing handles, each test gates the
max.driver queue on a completion flag and enqueues the library's own work on
the wrapped stream: that work must wait for the gate, which proves the
library really used our stream.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time

import pytest
from gpu_kernels import cuda_skip_reason

from max import driver

_REASON = cuda_skip_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

WAIT = 20.0


def _import(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or a library broken on this host
        pytest.skip(f"{name} is not importable: {exc!r}")


class _Gate:
    """Holds a queue back on a fresh completion flag until ``release()``.

    A watchdog releases it after 10 s in any case, so a library call that
    blocks on the gated work cannot hang the test for ever; ``check(what)``
    fails the test if it had to."""

    def __init__(self, queue: driver.DeviceQueue) -> None:
        self.flag = driver.CompletionFlag(queue.device)
        queue.wait_for_host_value(self.flag, 1)
        self.fired = False
        self.watchdog = threading.Timer(10.0, self._fire)
        self.watchdog.start()

    def _fire(self) -> None:
        self.fired = True
        self.flag.signal(1)

    def release(self) -> None:
        self.watchdog.cancel()
        self.flag.signal(1)

    def check(self, what: str) -> None:
        assert not self.fired, (
            f"{what} blocked until the watchdog opened the gate: the library "
            "waited for the gated stream on the host"
        )


@contextlib.contextmanager
def _gated(queue: driver.DeviceQueue):
    gate = _Gate(queue)
    try:
        yield gate
    finally:
        gate.release()


def test_protocol_tuple(acc):
    q = driver.DeviceQueue(acc)
    version, handle = q.__cuda_stream__()
    assert (version, handle) == (0, q.native_stream_handle)
    assert handle != 0
    assert acc.default_queue.__cuda_stream__()[1] not in (0, handle)


def test_cuda_core_consumes_the_protocol(acc):
    try:
        core = importlib.import_module("cuda.core")
        device_type = getattr(core, "Device", None)
        if device_type is None:
            raise ImportError("no cuda.core.Device")
    except Exception:
        device_type = _import("cuda.core.experimental").Device
    dev = device_type(0)
    dev.set_current()
    q = driver.DeviceQueue(acc)
    stream = dev.create_stream(q)  # reads q.__cuda_stream__()
    assert int(stream.handle) == q.native_stream_handle
    with _gated(q) as gate:
        done = stream.record()
        time.sleep(0.05)
        gate.check("Stream.record()")
        assert not done.is_done, "an event recorded behind the gate completed"
        gate.release()
        stream.sync()
    assert done.is_done


def test_cupy_uses_the_stream(acc):
    cupy = _import("cupy")
    # Allocate and load the fill kernel before gating: neither may then wait
    # for the device.
    x = cupy.zeros(4, dtype=cupy.float32)
    x.fill(1)
    cupy.cuda.Device(0).synchronize()
    q = driver.DeviceQueue(acc)
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        stream = from_external(q)  # the __cuda_stream__ protocol
    else:
        stream = cupy.cuda.ExternalStream(q.__cuda_stream__()[1], 0)
    assert stream.ptr == q.native_stream_handle
    with _gated(q) as gate:
        with stream:
            x.fill(7)
            done = stream.record()
        time.sleep(0.05)
        gate.check("CuPy")
        assert not done.done, "CuPy's work ran although our queue was gated"
        gate.release()
        q.synchronize(timeout=WAIT)
    assert done.done
    assert float(x.sum()) == 28.0


def test_torch_uses_the_stream(acc):
    torch = _import("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch does not see a CUDA device")
    # Allocate and load the fill kernel before gating: neither may then wait
    # for the device.
    x = torch.zeros(4, device="cuda:0")
    x.fill_(1.0)
    torch.cuda.synchronize(0)
    q = driver.DeviceQueue(acc)
    handle = q.__cuda_stream__()[1]
    wrap = getattr(torch.cuda, "get_stream_from_external", None)
    if wrap is not None:
        stream = wrap(handle, device=0)
    else:
        stream = torch.cuda.ExternalStream(handle, device=0)
    assert stream.cuda_stream == q.native_stream_handle
    with _gated(q) as gate:
        with torch.cuda.stream(stream):
            x.fill_(7.0)
            done = torch.cuda.Event()
            done.record(stream)
        time.sleep(0.05)
        gate.check("PyTorch")
        assert not done.query(), "PyTorch's work ran although our queue was gated"
        gate.release()
        q.synchronize(timeout=WAIT)
    assert done.query()
    assert x.sum().item() == 28.0
