"""A minimal consumer of the CUDA stream protocol and of
``native_stream_handle``: it reads ``queue.__cuda_stream__()``, checks the
version and drives the handle with ctypes through the driver library that
max.driver loaded (its path from ``driver.backend_selection()``).

Runs on a real GPU and on the fake driver (tests/fake_driver); on the fake it
also asks the fake's control API which stream the handle is and with which
flags it was created.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

import pytest
from accel_support import WAIT, wait_until

from max import driver

SUCCESS = 0  # CUDA_SUCCESS / hipSuccess
NOT_READY = 600  # CUDA_ERROR_NOT_READY / hipErrorNotReady
STREAM_NON_BLOCKING = 0x1  # CU_STREAM_NON_BLOCKING / hipStreamNonBlocking
CUDA_ONLY = "__cuda_stream__ and CUDA contexts exist only on the CUDA backend"


def loaded_library() -> str:
    """The driver library max.driver chose at import."""
    for entry in driver.backend_selection():
        if entry["chosen"]:
            assert entry["library"], entry
            return str(entry["library"])
    raise AssertionError(f"no chosen backend: {driver.backend_selection()}")


class StreamDriver:
    """Stream query and synchronize of the loaded CUDA or HIP library."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.lib = ctypes.CDLL(loaded_library())
        prefix = "cu" if api == "cuda" else "hip"
        self.query = self._fn(f"{prefix}StreamQuery", [ctypes.c_void_p])
        self.sync = self._fn(f"{prefix}StreamSynchronize", [ctypes.c_void_p])

    def _fn(self, name: str, argtypes: list) -> Any:
        fn = getattr(self.lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return fn

    @contextlib.contextmanager
    def current(self, device: driver.Device) -> Iterator[None]:
        """CUDA: the device's primary context (the one the queues' streams
        belong to) current on this thread; HIP: nothing to do."""
        if self.api != "cuda":
            yield
            return
        get = self._fn("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int])
        retain = self._fn(
            "cuDevicePrimaryCtxRetain",
            [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
        )
        push = self._fn("cuCtxPushCurrent_v2", [ctypes.c_void_p])
        pop = self._fn("cuCtxPopCurrent_v2", [ctypes.POINTER(ctypes.c_void_p)])
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        assert get(ctypes.byref(dev), device.id) == SUCCESS
        assert retain(ctypes.byref(ctx), dev) == SUCCESS
        assert push(ctx) == SUCCESS
        try:
            yield
        finally:
            popped = ctypes.c_void_p()
            assert pop(ctypes.byref(popped)) == SUCCESS
            assert popped.value == ctx.value
            release = getattr(self.lib, "cuDevicePrimaryCtxRelease_v2", None)
            if release is not None:  # absent from the fake
                release.argtypes = [ctypes.c_int]
                release.restype = ctypes.c_int
                release(dev)


def consume_cuda_stream(obj: object) -> int:
    """What a protocol consumer (cuda.core, CuPy, PyTorch) does first."""
    protocol = getattr(obj, "__cuda_stream__", None)
    if protocol is None:
        raise TypeError(f"{type(obj).__name__} does not speak __cuda_stream__")
    result = protocol()
    assert isinstance(result, tuple) and len(result) == 2, result
    version, handle = result
    assert version == 0, f"unsupported __cuda_stream__ version {version}"
    assert isinstance(handle, int)
    return handle


@pytest.fixture
def stream_driver(api: str) -> StreamDriver:
    return StreamDriver(api)


@contextlib.contextmanager
def gated(queue: driver.DeviceQueue) -> Iterator[driver.CompletionFlag]:
    """The queue held on a fresh flag, with work behind the gate; released
    on exit whatever happens."""
    flag = driver.CompletionFlag(queue.device)
    queue.wait_for_host_value(flag, 1)
    queue.record_event()
    try:
        yield flag
    finally:
        flag.signal(1)


# --------------------------------------------------------------------------
# The protocol itself


def test_cuda_stream_protocol_returns_version_0_and_the_handle(acc, aq, api):
    if api != "cuda":
        pytest.skip(CUDA_ONLY)
    handle = consume_cuda_stream(aq)
    assert handle == aq.native_stream_handle != 0
    assert aq.__cuda_stream__() == (0, handle)  # stable across calls


def test_cuda_stream_protocol_distinct_per_queue(acc, aq, api):
    if api != "cuda":
        pytest.skip(CUDA_ONLY)
    other = driver.DeviceQueue(acc)
    handles = {consume_cuda_stream(q) for q in (aq, other, acc.default_queue)}
    assert len(handles) == 3 and 0 not in handles


def test_no_cuda_stream_protocol_off_cuda(acc, aq, api):
    cpu_queue = driver.DeviceQueue(driver.CPU())
    assert not hasattr(cpu_queue, "__cuda_stream__")
    with pytest.raises(TypeError):
        consume_cuda_stream(cpu_queue)
    if api == "hip":
        assert not hasattr(aq, "__cuda_stream__")
        assert not hasattr(acc.default_queue, "__cuda_stream__")


# --------------------------------------------------------------------------
# The handle used through ctypes against the loaded driver


def _handle(queue: driver.DeviceQueue, api: str) -> int:
    if api == "cuda":
        return consume_cuda_stream(queue)
    return queue.native_stream_handle


@pytest.mark.parametrize("which", ["new", "default"])
def test_driver_sees_queue_state_through_handle(acc, aq, api, stream_driver, which):
    queue = aq if which == "new" else acc.default_queue
    stream = ctypes.c_void_p(_handle(queue, api))
    with stream_driver.current(acc):
        queue.synchronize(timeout=WAIT)
        assert stream_driver.query(stream) == SUCCESS
        with gated(queue):
            assert stream_driver.query(stream) == NOT_READY
            assert not queue.record_event().is_ready()
        assert stream_driver.sync(stream) == SUCCESS
        assert stream_driver.query(stream) == SUCCESS
    queue.synchronize(timeout=WAIT)


def test_driver_sync_orders_with_queue_work(acc, aq, api, stream_driver):
    """Work enqueued through max.driver is done when the driver's own
    stream synchronize on the handle returns."""
    ran = []
    stream = ctypes.c_void_p(_handle(aq, api))
    with gated(aq):
        getattr(aq, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
    event = aq.record_event()
    with stream_driver.current(acc):
        assert stream_driver.sync(stream) == SUCCESS
    assert event.is_ready()
    # The host function may finish just after the stream reports done on
    # some drivers' callback threads; the queue's own wait covers it.
    aq.synchronize(timeout=WAIT)
    assert ran == [1]


# --------------------------------------------------------------------------
# On the fake driver: the handle is the queue's own non-blocking stream


def test_fake_handle_is_the_queues_nonblocking_stream(acc, aq, api, fake):
    queues = [aq, acc.default_queue, driver.DeviceQueue(acc)]
    for queue in queues:
        handle = _handle(queue, api)
        assert handle == queue.native_stream_handle != 0
        flags = fake.stream_flags(handle)
        assert flags != 0xFFFFFFFF, f"{queue!r}: the fake knows no such stream"
        assert flags & STREAM_NON_BLOCKING, f"{queue!r}: stream flags {flags:#x}"
    assert len({q.native_stream_handle for q in queues}) == len(queues)


def test_fake_stream_is_live_while_the_queue_is(acc, api, fake):
    queue = driver.DeviceQueue(acc)
    handle = _handle(queue, api)
    assert fake.stream_flags(handle) & STREAM_NON_BLOCKING
    queue.synchronize(timeout=WAIT)
    del queue
    # The queue owned the stream: once dropped and idle it is destroyed.
    assert wait_until(lambda: fake.stream_flags(handle) == 0xFFFFFFFF)
