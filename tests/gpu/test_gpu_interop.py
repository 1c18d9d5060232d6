"""``DeviceQueue.__cuda_stream__`` and DLPack (SPEC §13) between
max.driver and other CUDA libraries.

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

import numpy as np
import pytest
from gpu_kernels import MS, cuda_skip_reason

from max import driver
from max.dtype import DType

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


# --------------------------------------------------------------------------
# DLPack (SPEC §13): their from_dlpack of our buffers and ours of theirs.
# Our queue is held by a spinning kernel while the other library's work is
# enqueued; that work must see what our queue wrote after the spin (their
# stream waited for ours), and the exports must return at once.

SPIN_NS = 5_000 * MS  # ended early through the stop slot once checked
PROMPT = 1.0  # far below SPIN_NS: an export that waited for the spin fails


class _Stream:
    """What ``Kernels.spin_write`` needs of a queue: a stream handle."""

    def __init__(self, handle: int) -> None:
        self.native_stream_handle = handle


def _busy_buffer(acc, kernels, buf, value: float) -> driver.Buffer:
    """A device buffer on a queue of its own, which holds a spinning kernel
    and, after it, the upload of ``value`` into the buffer."""
    q = driver.DeviceQueue(acc)
    data = driver.Buffer.zeros((1024,), DType.float32, q)
    q.synchronize(timeout=WAIT)
    kernels.spin_write(q, SPIN_NS, stop=buf)
    data.inplace_copy_from(driver.Buffer.from_numpy(np.full(1024, value, np.float32)))
    return data


def _promptly(fn):
    start = time.monotonic()
    result = fn()
    elapsed = time.monotonic() - start
    assert elapsed < PROMPT, f"the export waited {elapsed:.2f} s for our queue"
    return result


def test_torch_from_dlpack_of_our_buffer(acc, kernels, buf):
    torch = _import("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch does not see a CUDA device")
    (torch.zeros(4, device="cuda:0") * 2).sum().item()  # load the kernels
    data = _busy_buffer(acc, kernels, buf, 7.0)
    t = _promptly(lambda: torch.from_dlpack(data))
    assert t.device == torch.device("cuda:0")
    assert t.data_ptr() == data._data_ptr()  # zero-copy
    doubled = t * 2  # on torch's stream, which waits for our queue
    buf[0] = 1  # end the spin
    torch.cuda.synchronize(0)
    assert doubled.eq(14.0).all().item(), "torch read before our queue wrote"
    t.fill_(3.0)  # their write, seen by us
    torch.cuda.synchronize(0)
    assert (data.to_numpy() == 3.0).all()
    data[5] = 9.0  # our write (complete on return), seen by them
    assert t[5].item() == 9.0


def test_cupy_from_dlpack_of_our_buffer(acc, kernels, buf):
    cupy = _import("cupy")
    (cupy.zeros(4, dtype=cupy.float32) * 2).sum().item()  # load the kernels
    data = _busy_buffer(acc, kernels, buf, 7.0)
    x = _promptly(lambda: cupy.from_dlpack(data))
    assert x.data.ptr == data._data_ptr()
    doubled = x * 2
    buf[0] = 1
    cupy.cuda.Device(0).synchronize()
    assert bool((doubled == 14.0).all()), "CuPy read before our queue wrote"
    x.fill(3.0)
    cupy.cuda.Device(0).synchronize()
    assert (data.to_numpy() == 3.0).all()
    data[5] = 9.0
    assert float(x[5]) == 9.0


def test_buffer_from_dlpack_of_a_torch_tensor(acc, kernels, buf):
    torch = _import("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch does not see a CUDA device")
    x = torch.zeros(1024, device="cuda:0")
    torch.cuda.synchronize(0)
    stream = torch.cuda.current_stream(0)
    # Torch's stream spins, then fills: our queue must wait for both.
    kernels.spin_write(_Stream(stream.cuda_stream), SPIN_NS, stop=buf)
    x.fill_(5.0)
    ours = _promptly(lambda: driver.Buffer.from_dlpack(x))
    assert ours._data_ptr() == x.data_ptr() and ours.device is acc
    copy = ours.copy()  # enqueued on our default queue
    buf[0] = 1
    assert (copy.to_numpy() == 5.0).all(), "we read before torch's stream wrote"
    ours[3] = 8.0  # our write, seen by torch
    assert x[3].item() == 8.0
    x.fill_(2.0)  # theirs, seen by us once their stream is done
    torch.cuda.synchronize(0)
    assert (ours.to_numpy() == 2.0).all()


def test_buffer_from_dlpack_of_a_cupy_array(acc, kernels, buf):
    cupy = _import("cupy")
    x = cupy.zeros(1024, dtype=cupy.float32)
    cupy.cuda.Device(0).synchronize()
    stream = cupy.cuda.get_current_stream()
    kernels.spin_write(_Stream(stream.ptr), SPIN_NS, stop=buf)
    x.fill(5.0)
    ours = _promptly(lambda: driver.Buffer.from_dlpack(x))
    assert ours._data_ptr() == x.data.ptr and ours.device is acc
    copy = ours.copy()
    buf[0] = 1
    assert (copy.to_numpy() == 5.0).all(), "we read before CuPy's stream wrote"
    ours[3] = 8.0
    assert float(x[3]) == 8.0
