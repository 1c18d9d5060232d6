"""DLPack on accelerators (SPEC §13, with §12.6's host-access rules and
§12.7's lifetime), for the fake driver and real GPUs alike.

- ``__dlpack_device__``: ``(2, id)`` / ``(10, id)`` for device memory,
  ``(3, 0)`` / ``(11, 0)`` for pinned memory.
- ``__dlpack__``'s ``stream`` as the array API standard has it: on CUDA
  ``None``, ``-1``, ``1`` (legacy default stream), ``2`` (per-thread
  default stream) or a handle; on HIP ``None``, ``-1``, ``0`` (the null
  stream) or a handle; anything else is a BufferError.  A stream makes the
  consumer's stream wait for the buffer's queue without blocking the host,
  which these tests watch on the consumer's side: an event recorded there
  through the driver library max.driver loaded (ctypes), or a host function
  on another DeviceQueue, must not complete before the buffer's queue,
  held by a gate, gets past the export.
- ``dl_device=(1, 0)`` and ``copy``; ``Buffer.from_dlpack`` of device and
  pinned capsules, ours and a foreign producer's over memory allocated
  through the driver, with the deleter called once, after pending work.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from accel_support import ENQ, NOT_YET, WAIT, settled_allocs, wait_until
from buffer_support import PROMPT, Call, open_later, returns_promptly, sample_array
from dlpack_support import (
    IS_COPIED,
    KDL_CPU,
    KDL_CUDA,
    KDL_CUDA_HOST,
    KDL_CUDA_MANAGED,
    KDL_ROCM,
    KDL_ROCM_HOST,
    CtypesProducer,
    Holder,
    capsule_name,
    payload,
    shape_of,
    strides_of,
    take,
    tensor,
)
from foreign_gpu import StreamProducer

from max import driver
from max.driver import Buffer, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType

SUCCESS, NOT_READY = 0, 600  # CUDA_SUCCESS / hipSuccess, ..._NOT_READY
DEVICE_TYPE = {"cuda": KDL_CUDA, "hip": KDL_ROCM}
HOST_TYPE = {"cuda": KDL_CUDA_HOST, "hip": KDL_ROCM_HOST}
# The special handles each API's __dlpack__ accepts, and values it refuses.
SPECIAL = {"cuda": [1, 2], "hip": [0]}
REFUSED = {"cuda": [0, -2, -3, -(2**40)], "hip": [1, 2, -2, -3]}


def loaded_library() -> str:
    """The driver library max.driver chose at import."""
    for entry in driver.backend_selection():
        if entry["chosen"]:
            return str(entry["library"])
    raise AssertionError(f"no chosen backend: {driver.backend_selection()}")


class Raw:
    """The few driver calls a foreign consumer or producer makes, through
    the library max.driver loaded (the same instance: ``CDLL`` of a loaded
    path returns its handle)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.lib = ctypes.CDLL(loaded_library())
        p, i, u, z = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
        pp = ctypes.POINTER(ctypes.c_void_p)
        if api == "cuda":
            self._fn("cuDevicePrimaryCtxRetain", pp, i)
            self._fn("cuCtxPushCurrent_v2", p)
            self._fn("cuCtxPopCurrent_v2", pp)
            self._fn("cuEventCreate", pp, u)
            self._fn("cuEventRecord", p, p)
            self._fn("cuEventQuery", p)
            self._fn("cuEventDestroy_v2", p)
            self._fn("cuMemAlloc_v2", ctypes.POINTER(ctypes.c_uint64), z)
            self._fn("cuMemFree_v2", ctypes.c_uint64)
            self._fn("cuMemHostAlloc", pp, z, u)
            self._fn("cuMemFreeHost", p)
        else:
            self._fn("hipGetDevice", ctypes.POINTER(ctypes.c_int))
            self._fn("hipSetDevice", i)
            self._fn("hipEventCreateWithFlags", pp, u)
            self._fn("hipEventRecord", p, p)
            self._fn("hipEventQuery", p)
            self._fn("hipEventDestroy", p)
            self._fn("hipMalloc", pp, z)
            self._fn("hipFree", p)
            self._fn("hipHostMalloc", pp, z, u)
            self._fn("hipHostFree", p)

    def _fn(self, name: str, *argtypes: Any) -> None:
        fn = getattr(self.lib, name)
        fn.argtypes = list(argtypes)
        fn.restype = ctypes.c_int

    def _call(self, cu: str, hip: str, *args: Any) -> int:
        return getattr(self.lib, cu if self.api == "cuda" else hip)(*args)

    @contextlib.contextmanager
    def current(self, device: int) -> Iterator[None]:
        """``device`` current on this thread (CUDA: its primary context
        pushed; HIP: hipSetDevice), as a consumer has it."""
        if self.api == "cuda":
            ctx = ctypes.c_void_p()
            assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
            assert self.lib.cuCtxPushCurrent_v2(ctx) == 0
            try:
                yield
            finally:
                popped = ctypes.c_void_p()
                assert self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0
            return
        old = ctypes.c_int()
        assert self.lib.hipGetDevice(ctypes.byref(old)) == 0
        assert self.lib.hipSetDevice(device) == 0
        try:
            yield
        finally:
            assert self.lib.hipSetDevice(old.value) == 0

    def event(self) -> ctypes.c_void_p:
        """An event of the current device, timing disabled."""
        e = ctypes.c_void_p()
        rc = self._call("cuEventCreate", "hipEventCreateWithFlags", ctypes.byref(e), 2)
        assert rc == SUCCESS
        return e

    def record(self, event: ctypes.c_void_p, stream: int) -> int:
        return self._call("cuEventRecord", "hipEventRecord", event, stream or None)

    def query(self, event: ctypes.c_void_p) -> int:
        return self._call("cuEventQuery", "hipEventQuery", event)

    def completes(self, event: ctypes.c_void_p) -> bool:
        """Whether the event completes within WAIT (polled: a wait in the
        driver could hang the test when an ordering is wrong)."""
        return wait_until(lambda: self.query(event) == SUCCESS)

    def destroy(self, event: ctypes.c_void_p) -> int:
        return self._call("cuEventDestroy_v2", "hipEventDestroy", event)

    def malloc(self, size: int) -> int:
        """Device memory of the current device."""
        if self.api == "cuda":
            d = ctypes.c_uint64()
            assert self.lib.cuMemAlloc_v2(ctypes.byref(d), size) == SUCCESS
            return d.value
        p = ctypes.c_void_p()
        assert self.lib.hipMalloc(ctypes.byref(p), size) == SUCCESS
        return p.value

    def free(self, ptr: int) -> int:
        return self._call("cuMemFree_v2", "hipFree", ptr)

    def host_alloc(self, size: int) -> int:
        """Pinned host memory, mapped, usable by every device."""
        p = ctypes.c_void_p()
        flags = 3 if self.api == "cuda" else 0  # PORTABLE | DEVICEMAP
        rc = self._call("cuMemHostAlloc", "hipHostMalloc", ctypes.byref(p), size, flags)
        assert rc == SUCCESS
        return p.value

    def free_host(self, ptr: int) -> int:
        return self._call("cuMemFreeHost", "hipHostFree", ptr)


@pytest.fixture
def raw(api):
    return Raw(api)


class Recording:
    """Forwards the DLPack protocol to ``target``, recording the calls."""

    def __init__(self, target: Any) -> None:
        self.target, self.calls = target, []

    def __dlpack__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        return self.target.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.target.__dlpack_device__()


def filled(device: driver.Device | DeviceQueue, shape=(4, 8), dtype=DType.float32):
    """A device buffer holding sample values (the upload complete), and
    them."""
    ref = sample_array(dtype, shape)
    buf = Buffer(dtype, shape, device)
    buf.inplace_copy_from(Buffer.from_numpy(ref))
    buf.stream.synchronize(timeout=WAIT)
    return buf, ref


def host_copy_of(capsule: object) -> np.ndarray:
    """The values of a CPU capsule (consumed by NumPy)."""
    return np.from_dlpack(Holder(capsule)).copy()


# --------------------------------------------------------------------------
# __dlpack_device__ and the capsule


def test_dlpack_device_of_device_memory(acc, api):
    buf = Buffer.zeros((4, 4), DType.float32, acc)
    for b in (buf, buf[1:, ::2], buf[::-1, :]):
        assert b.__dlpack_device__() == (DEVICE_TYPE[api], acc.id)
        assert all(type(v) is int for v in b.__dlpack_device__())


def test_dlpack_device_of_the_second_device(acc1, api):
    buf = Buffer.zeros((4,), DType.int8, acc1)
    assert buf.__dlpack_device__() == (DEVICE_TYPE[api], 1)


def test_dlpack_device_of_pinned_memory(acc, api):
    for buf in (
        DevicePinnedBuffer(DType.float32, (4,), acc),
        Buffer(DType.float32, (4,), acc, usage=Usage.STAGING),
        DevicePinnedBuffer.zeros((2, 2), DType.int16, acc)[1, :],
    ):
        assert buf.__dlpack_device__() == (HOST_TYPE[api], 0)


def test_capsule_of_device_memory(acc, api):
    buf, _ = filled(acc)
    view = buf[1:3, ::-2]
    m = payload(view.__dlpack__(max_version=(1, 0)))
    assert capsule_name(view.__dlpack__()) == "dltensor"
    t = m.dl_tensor
    assert (t.device.device_type, t.device.device_id) == (DEVICE_TYPE[api], acc.id)
    assert t.data == view._data_ptr()
    assert shape_of(t) == (2, 4) and strides_of(t) == view.strides
    assert m.flags == 0


def test_capsule_of_pinned_memory_carries_the_host_address(acc, api):
    buf = DevicePinnedBuffer.zeros((8,), DType.int32, acc)
    host = buf.to_numpy().ctypes.data
    t = tensor(buf.__dlpack__(max_version=(1, 0)))
    assert (t.device.device_type, t.device.device_id) == (HOST_TYPE[api], 0)
    assert t.data == host
    arr = np.from_dlpack(buf)  # NumPy reads CUDA-host / ROCm-host memory
    assert arr.ctypes.data == host and arr.flags.writeable
    arr[3] = 7
    assert buf[3].item() == 7


# --------------------------------------------------------------------------
# The stream argument: what is accepted


def test_accepted_streams(acc, api):
    buf = Buffer.zeros((4,), DType.float32, acc)
    other = DeviceQueue(acc)
    for stream in [None, -1, *SPECIAL[api], other.native_stream_handle]:
        cap = buf.__dlpack__(stream=stream, max_version=(1, 0))
        assert tensor(cap).data == buf._data_ptr()
    cap = buf.__dlpack__(stream=buf.stream.native_stream_handle)  # its own
    assert tensor(cap).data == buf._data_ptr()


@pytest.mark.parametrize("index", range(4))
def test_refused_streams_are_buffer_errors(acc, api, index):
    stream = REFUSED[api][index]
    for buf in (
        Buffer.zeros((4,), DType.float32, acc),
        DevicePinnedBuffer(DType.float32, (4,), acc),
    ):
        with pytest.raises(BufferError):
            buf.__dlpack__(stream=stream)


@pytest.mark.parametrize("stream", ["1", 1.0, True, object()])
def test_streams_of_other_types_are_type_errors(acc, stream):
    with pytest.raises(TypeError):
        Buffer.zeros((4,), DType.float32, acc).__dlpack__(stream=stream)


def test_a_bogus_handle_is_the_drivers_error(acc, fake):
    """Only on the fake: a real driver may crash on a made-up stream."""
    with pytest.raises(ValueError):
        Buffer.zeros((4,), DType.float32, acc).__dlpack__(stream=0x7777)


# --------------------------------------------------------------------------
# The consumer's stream waits for the storage's last write, the host does
# not (SPEC §13; untracked storage: for the buffer's queue)


def export_here(buf, flag, **kwargs):
    """``buf.__dlpack__(**kwargs)`` on this thread (a per-thread default
    stream is the calling thread's), which must return at once although
    ``flag`` gates the buffer's queue: a timer opens the gate after PROMPT
    seconds so that an export that waits fails instead of hanging."""
    timer = open_later(flag, delay=PROMPT)
    start = time.monotonic()
    try:
        capsule = buf.__dlpack__(**kwargs)
    finally:
        timer.cancel()
    assert time.monotonic() - start < PROMPT, "the export waited for the queue"
    return capsule


def gated_buffer(device, gate, dtype=DType.float32, shape=(4, 8)):
    """A buffer on a queue of its own whose last write (its producer, an
    upload) is held by a gate (returned): what a consumer must wait for.
    The producer runs on another queue, through a ``to(queue)`` alias of the
    same storage, so that only the hazard record links it to the buffer
    (the buffer's own queue is idle)."""
    buf = Buffer(dtype, shape, DeviceQueue(device))
    producer = buf.to(DeviceQueue(device))
    flag = gate(producer.stream)
    ref = sample_array(dtype, shape)
    producer.inplace_copy_from(Buffer.from_numpy(ref))
    return buf, ref, flag


@pytest.mark.parametrize("which", ["legacy", "per-thread"])
def test_special_stream_waits(acc, api, gate, raw, which):
    if which == "per-thread" and api != "cuda":
        pytest.skip("only CUDA has a per-thread default stream")
    stream = SPECIAL[api][0] if which == "legacy" else 2
    buf, _, flag = gated_buffer(acc, gate)
    # The export needs no context of the caller's: this thread has none.
    export_here(buf, flag, stream=stream, max_version=(1, 0))
    with raw.current(acc.id):
        marker = raw.event()
        assert raw.record(marker, stream) == SUCCESS
        time.sleep(NOT_YET)
        assert raw.query(marker) == NOT_READY  # held behind our queue
        flag.signal(1)
        assert raw.completes(marker)
        raw.destroy(marker)


def test_special_stream_of_the_buffers_device(acc, acc1, api, gate, raw):
    """Stream 1 (CUDA) / 0 (HIP) is the buffer's device's, whichever device
    the caller has current."""
    stream = SPECIAL[api][0]
    buf, _, flag = gated_buffer(acc1, gate)
    with raw.current(acc.id):
        export_here(buf, flag, stream=stream)
        free = raw.event()
        assert raw.record(free, stream) == SUCCESS  # device 0's: not held
        assert raw.completes(free)
    with raw.current(acc1.id):
        held = raw.event()
        assert raw.record(held, stream) == SUCCESS
        time.sleep(NOT_YET)
        assert raw.query(held) == NOT_READY
        flag.signal(1)
        assert raw.completes(held)
        raw.destroy(held)
    with raw.current(acc.id):
        raw.destroy(free)


@pytest.mark.parametrize("kind", ["device", "pinned"])
def test_another_queues_stream_waits(acc, gate, rec, kind):
    """For device memory the producer behind the gate; for an untracked
    DevicePinnedBuffer the buffer's queue (its gate)."""
    if kind == "device":
        buf, _, flag = gated_buffer(acc, gate)
    else:
        q = DeviceQueue(acc)
        buf = DevicePinnedBuffer.zeros((4,), DType.float32, q)
        flag = gate(q)
    consumer = DeviceQueue(acc)
    returns_promptly(lambda: buf.__dlpack__(stream=consumer.native_stream_handle))
    getattr(consumer, ENQ)(rec.fn("consumer"))
    assert not rec.wait("consumer", NOT_YET)
    flag.signal(1)
    assert rec.wait("consumer")


def test_the_consumer_does_not_wait_for_unrelated_work(acc, gate, rec):
    """A gate on the buffer's queue holds no write of the buffer: the
    consumer's stream is not held by it (the positive control: a host
    function behind the gate has not run)."""
    q = DeviceQueue(acc)
    buf, _ = filled(q)
    flag = gate(q)
    getattr(q, ENQ)(rec.fn("held"))
    consumer = DeviceQueue(acc)
    returns_promptly(lambda: buf.__dlpack__(stream=consumer.native_stream_handle))
    getattr(consumer, ENQ)(rec.fn("consumer"))
    assert rec.wait("consumer")
    assert not rec.has("held"), "the gate did not hold its queue"
    flag.signal(1)


def test_the_export_orders_only_work_enqueued_before_it(acc, gate, rec):
    q = DeviceQueue(acc)
    buf, _ = filled(q)
    consumer = DeviceQueue(acc)
    buf.__dlpack__(stream=consumer.native_stream_handle)
    flag = gate(q)  # after the export: the consumer need not wait for it
    getattr(consumer, ENQ)(rec.fn("consumer"))
    assert rec.wait("consumer")
    flag.signal(1)


def test_its_own_queue_needs_no_ordering(acc, gate, rec):
    q = DeviceQueue(acc)
    buf, _ = filled(q)
    flag = gate(q)
    returns_promptly(lambda: buf.__dlpack__(stream=q.native_stream_handle))
    getattr(q, ENQ)(rec.fn("same queue"))
    assert not rec.wait("same queue", NOT_YET)  # in queue order anyway
    flag.signal(1)
    assert rec.wait("same queue")


def test_stream_minus_one_orders_nothing(acc, gate, rec):
    buf, _, flag = gated_buffer(acc, gate)
    consumer = DeviceQueue(acc)
    returns_promptly(lambda: buf.__dlpack__(stream=-1))
    getattr(consumer, ENQ)(rec.fn("consumer"))
    assert rec.wait("consumer")  # not held by the gate
    flag.signal(1)


def test_stream_none_waits_on_the_host_for_device_memory(acc, gate):
    buf, _, flag = gated_buffer(acc, gate)
    call = Call(lambda: buf.__dlpack__(max_version=(1, 0)))
    assert call.blocked()
    flag.signal(1)
    assert tensor(call.value()).data == buf._data_ptr()


def test_stream_none_on_pinned_memory_does_not_wait(acc, gate):
    q = DeviceQueue(acc)
    buf = DevicePinnedBuffer.zeros((4,), DType.float32, q)
    gate(q)
    cap = returns_promptly(lambda: buf.__dlpack__(max_version=(1, 0)))
    assert tensor(cap).data == buf.to_numpy().ctypes.data


def test_export_from_another_thread_orders_the_consumer(acc, gate, rec):
    buf, _, flag = gated_buffer(acc, gate)
    consumer = DeviceQueue(acc)
    t = threading.Thread(
        target=lambda: buf.__dlpack__(stream=consumer.native_stream_handle)
    )
    t.start()
    t.join(WAIT)
    assert not t.is_alive()
    getattr(consumer, ENQ)(rec.fn("consumer"))
    assert not rec.wait("consumer", NOT_YET)
    flag.signal(1)
    assert rec.wait("consumer")


# --------------------------------------------------------------------------
# dl_device and copy


def test_dl_device_cpu_copies_device_memory_to_the_host(acc):
    buf, ref = filled(acc)
    view = buf[::-1, 1::3]
    cap = view.__dlpack__(max_version=(1, 0), dl_device=(KDL_CPU, 0))
    m = payload(cap)
    assert m.flags & IS_COPIED
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (1, 0)
    assert np.array_equal(host_copy_of(cap), ref[::-1, 1::3])


def test_dl_device_cpu_copy_comes_after_pending_work(acc, gate):
    q = DeviceQueue(acc)
    buf, ref = filled(q)
    flag = gate(q)
    buf.inplace_copy_from(Buffer.from_numpy(ref * 2))  # behind the gate
    call = Call(lambda: buf.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert call.blocked()
    flag.signal(1)
    assert np.array_equal(host_copy_of(call.value()), ref * 2)


def test_dl_device_cpu_with_copy_false_is_a_buffer_error(acc):
    buf, _ = filled(acc)
    with pytest.raises(BufferError):
        buf.__dlpack__(max_version=(1, 0), dl_device=(KDL_CPU, 0), copy=False)


def test_dl_device_cpu_of_pinned_memory_is_the_same_bytes(acc):
    buf = DevicePinnedBuffer.zeros((4,), DType.int32, acc)
    m = payload(buf.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False))
    assert m.flags & IS_COPIED == 0
    assert m.dl_tensor.data == buf.to_numpy().ctypes.data
    assert m.dl_tensor.device.device_type == KDL_CPU


def test_dl_device_own_device_is_zero_copy(acc, api):
    buf, _ = filled(acc)
    cap = buf.__dlpack__(max_version=(1, 0), dl_device=(DEVICE_TYPE[api], acc.id))
    assert tensor(cap).data == buf._data_ptr()


def test_dl_device_elsewhere_is_a_buffer_error(acc, api):
    buf, _ = filled(acc)
    pinned = DevicePinnedBuffer(DType.float32, (4,), acc)
    other_api = KDL_ROCM if api == "cuda" else KDL_CUDA
    for b, dl_device in [
        (buf, (DEVICE_TYPE[api], acc.id + 1)),
        (buf, (other_api, acc.id)),
        (buf, (HOST_TYPE[api], 0)),
        (buf, (KDL_CPU, 1)),
        (pinned, (DEVICE_TYPE[api], 0)),
        (pinned, (other_api + 1, 0)),
    ]:
        with pytest.raises(BufferError):
            b.__dlpack__(dl_device=dl_device)


def test_copy_true_is_a_copy_on_the_same_device(acc, api):
    """The array API: without dl_device the copy is on the array's device,
    the one __dlpack_device__ told the consumer."""
    buf, ref = filled(acc)
    m = payload(buf.__dlpack__(max_version=(1, 0), copy=True))
    assert m.flags & IS_COPIED
    t = m.dl_tensor
    assert (t.device.device_type, t.device.device_id) == buf.__dlpack_device__()
    assert t.data != buf._data_ptr()


def test_copy_true_to_the_cpu(acc):
    buf, ref = filled(acc)
    cap = buf.__dlpack__(max_version=(1, 0), copy=True, dl_device=(1, 0))
    assert payload(cap).flags & IS_COPIED
    assert np.array_equal(host_copy_of(cap), ref)


def test_to_numpy_of_device_memory_is_a_copy(acc):
    buf, ref = filled(acc)
    arr = buf.to_numpy()
    assert np.array_equal(arr, ref)
    arr[0, 0] = -1.0
    assert buf[0, 0].item() == ref[0, 0]


def test_cuda_array_interface(acc, api):
    buf, _ = filled(acc)
    if api != "cuda":
        assert not hasattr(buf, "__cuda_array_interface__")
        return
    cai = buf.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["shape"] == (4, 8) and cai["typestr"] == "<f4"
    assert cai["data"] == (buf._data_ptr(), False)
    assert cai["strides"] is None
    assert cai["stream"] == buf.stream.native_stream_handle
    view = buf[::-1, ::2].__cuda_array_interface__
    assert view["strides"] == (-32, 8)
    assert view["data"][0] == buf[::-1, ::2]._data_ptr()
    assert not hasattr(Buffer.zeros((1,), DType.int8), "__cuda_array_interface__")


@pytest.mark.parametrize(
    "usage", [Usage.DEFAULT, Usage.STAGING], ids=["device", "pinned"]
)
def test_cuda_array_interface_of_empty_buffers(acc, api, usage):
    """Version 3: the data pointer of a zero-size array is 0 (the memory
    behind it, which we allocate at least a byte of, is nobody's business),
    whatever makes it empty: its shape or a view."""
    if api != "cuda":
        pytest.skip("__cuda_array_interface__ is CUDA's")
    for shape in [(0,), (3, 0), (0, 4)]:
        cai = Buffer(DType.float32, shape, acc, usage).__cuda_array_interface__
        assert cai["shape"] == shape
        assert cai["data"] == (0, False), (shape, cai)
    buf = Buffer.zeros((4, 8), DType.float32, acc, usage)
    for view in (buf[2:2, :], buf[:, 8:], buf[1, 3:3]):
        assert view.num_elements == 0
        assert view.__cuda_array_interface__["data"] == (0, False)
    one = buf[3:4, 7:8]  # one element: the pointer again
    assert one.__cuda_array_interface__["data"] == (one._data_ptr(), False)
    assert one._data_ptr() != 0


# --------------------------------------------------------------------------
# Buffer.from_dlpack of accelerator memory


@pytest.mark.parametrize("device_index", [0, 1])
def test_from_dlpack_of_device_memory_is_zero_copy(device_index, api):
    if device_index >= driver.accelerator_count():
        pytest.skip("needs two accelerators")
    dev = driver.Accelerator(device_index)
    buf, ref = filled(dev)
    holder = Holder(buf.__dlpack__(max_version=(1, 0)), device=buf.__dlpack_device__())
    imported = Buffer.from_dlpack(holder)
    assert imported.device is dev
    assert imported.stream is dev.default_queue
    assert imported._data_ptr() == buf._data_ptr()
    assert not imported.pinned and not imported.is_host
    assert np.array_equal(imported.to_numpy(), ref)
    # It asked for the stream of the queue the new buffer is bound to.
    stream = dev.default_queue.native_stream_handle
    assert holder.calls == [{"max_version": (1, 0), "stream": stream}]


def test_from_dlpack_of_pinned_memory_is_zero_copy(acc):
    buf = DevicePinnedBuffer.zeros((6,), DType.int32, acc)
    holder = Holder(buf.__dlpack__(max_version=(1, 0)), device=buf.__dlpack_device__())
    imported = Buffer.from_dlpack(holder)
    assert imported.pinned and not imported.is_host
    assert imported.device is acc
    assert imported._data_ptr() == buf._data_ptr()  # the device-visible address
    assert imported.to_numpy().ctypes.data == buf.to_numpy().ctypes.data
    # Host memory is asked for with stream=None, as CPU memory
    # (docs/differences.md: NumPy re-exports pinned memory and refuses others).
    assert holder.calls[0]["stream"] is None


def test_from_dlpack_orders_the_producers_work_before_ours(acc, gate, rec):
    src, ref, flag = gated_buffer(acc, gate)
    producer = Recording(src)
    imported = returns_promptly(lambda: Buffer.from_dlpack(producer))
    assert producer.calls[0]["stream"] == acc.default_queue.native_stream_handle
    getattr(acc.default_queue, ENQ)(rec.fn("ours"))
    assert not rec.wait("ours", NOT_YET)  # behind the producer's queue
    flag.signal(1)
    assert rec.wait("ours")
    assert np.array_equal(imported.to_numpy(), ref)


def _pending_import(api, device, gate, producer):
    """An import whose producer's write is still pending (held by a flag,
    returned): our own buffer behind a gated queue, through a forwarding
    producer, or a foreign producer's copy on a stream of its own."""
    if producer == "ours":
        src, ref, flag = gated_buffer(device, gate, DType.int32, (16,))
        imported = returns_promptly(lambda: Buffer.from_dlpack(Recording(src)))
        return imported, ref, flag, None
    ref = np.arange(100, 116, dtype=np.int32)
    flag = driver.CompletionFlag(device)
    p = StreamProducer(api, device, ref.tolist(), (flag, 1))
    imported = returns_promptly(lambda: Buffer.from_dlpack(p))
    return imported, ref, flag, p


@pytest.mark.parametrize("producer", ["ours", "foreign"])
@pytest.mark.parametrize("device_index", [0, 1])
def test_host_access_to_an_import_waits_for_the_producer(
    api, gate, producer, device_index
):
    """SPEC §13: the imported storage's record starts with a write at the
    end of the queue the producer ordered its work before, so a host read
    waits for the producer's pending write (and no further)."""
    if device_index >= driver.accelerator_count():
        pytest.skip("needs two accelerators")
    device = driver.Accelerator(device_index)
    imported, ref, flag, p = _pending_import(api, device, gate, producer)
    reads = [Call(imported.to_numpy), Call(lambda: imported[3].item())]
    assert all(r.blocked() for r in reads), "a host read ran before the producer"
    flag.signal(1)
    assert np.array_equal(reads[0].value(), ref)
    assert reads[1].value() == ref[3]
    if p is not None:
        del imported, reads
        gc.collect()
        assert wait_until(lambda: p.released)
        p.close()


@pytest.mark.parametrize("producer", ["ours", "foreign"])
def test_copies_out_of_an_import_wait_for_the_producer(acc, api, gate, producer):
    """... and so does a copy out of it on another queue (device-side: the
    host does not wait), and a write into it."""
    imported, ref, flag, p = _pending_import(api, acc, gate, producer)
    dst = Buffer(DType.int32, (16,), DeviceQueue(acc))
    returns_promptly(lambda: dst.inplace_copy_from(imported))
    write = Call(lambda: imported.__setitem__(0, -1))
    assert write.blocked()
    flag.signal(1)
    write.value()
    assert np.array_equal(dst.to_numpy(), ref)
    assert imported[0].item() == -1
    if p is not None:
        del imported
        gc.collect()
        assert wait_until(lambda: p.released)
        p.close()


@pytest.mark.parametrize("kind", ["device", "pinned", "untracked pinned"])
def test_an_import_of_our_export_shares_its_record(acc, gate, kind):
    """A capsule this module exported comes back as the same storage, with
    the same record (SPEC §13): a write through the exporter later is
    waited for by host reads of the import, on any queue."""
    q = DeviceQueue(acc)
    if kind == "device":
        buf, _ = filled(q, (16,), DType.int32)
    else:
        usage = Usage.STAGING if kind == "pinned" else Usage.STAGING | Usage.UNTRACKED
        buf = Buffer.zeros((16,), DType.int32, q, usage=usage)
    imported = Buffer.from_dlpack(Recording(buf))
    assert imported._data_ptr() == buf._data_ptr()
    assert imported.stream is acc.default_queue
    assert (imported.pinned, imported.usage) == (buf.pinned, buf.usage)
    assert imported._host_hazard_tracked == buf._host_hazard_tracked
    ref = np.arange(16, dtype=np.int32)
    writer = buf.to(DeviceQueue(acc))
    flag = gate(writer.stream)
    writer.inplace_copy_from(Buffer.from_numpy(ref))  # pending behind the gate
    read = Call(imported.to_numpy)
    if kind == "untracked pinned":  # no record: the host waits for nothing
        read.value()
        flag.signal(1)
        return
    assert read.blocked()
    flag.signal(1)
    assert np.array_equal(read.value(), ref)


def test_from_dlpack_of_a_buffer_on_the_device_is_the_buffer(acc):
    buf, ref = filled(acc)
    assert Buffer.from_dlpack(buf) is buf
    copy = Buffer.from_dlpack(buf, copy=True)
    assert copy._data_ptr() != buf._data_ptr() and copy.device is acc
    assert np.array_equal(copy.to_numpy(), ref)


def test_capsule_consumed_after_the_buffer_and_its_queue_are_gone(acc):
    q = DeviceQueue(acc)
    buf, ref = filled(q)
    device = buf.__dlpack_device__()
    caps = [buf.__dlpack__(max_version=(1, 0)), buf.__dlpack__()]
    del buf, q
    gc.collect()
    for cap in caps:
        imported = Buffer.from_dlpack(Holder(cap, device=device))
        assert np.array_equal(imported.to_numpy(), ref)


def test_unconsumed_device_capsules_are_freed(acc, fake):
    """A capsule nobody consumed gives its memory back (watched through
    the fake's device allocation count)."""
    before = settled_allocs(fake)
    buf = Buffer.zeros((1 << 16,), DType.float32, acc)
    caps = [buf.__dlpack__(max_version=(1, 0)), buf.__dlpack__()]
    del buf
    gc.collect()
    acc.synchronize(timeout=WAIT)
    assert fake.live("device_alloc") == before + 1  # the capsules hold it
    del caps
    gc.collect()
    assert wait_until(
        lambda: (acc.synchronize(timeout=WAIT), fake.live("device_alloc"))[1] == before
    )


def test_exports_to_a_consumer_stream_do_not_pile_up(acc, fake):
    """Each deleter call of an export to a consumer stream leaves an event
    there for the memory's free to wait for; a long-lived buffer exported
    in a loop (torch.from_dlpack every step) must not keep one per export
    (watched through the fake's live event count)."""
    buf, _ = filled(acc)
    consumer = DeviceQueue(acc)

    def export_and_release():
        stream = consumer.native_stream_handle
        m = take(buf.__dlpack__(stream=stream, max_version=(1, 0)))
        m.deleter(ctypes.addressof(m))
        consumer.synchronize(timeout=WAIT)  # the consumer passed the fence

    export_and_release()
    before = fake.live("event")
    for _ in range(200):
        export_and_release()
    # (A fence's event goes back to the device's pool and is used again.)
    assert fake.live("event") <= before + 2


@pytest.mark.parametrize("device", ["id out of range", "managed", "other api"])
def test_from_dlpack_of_devices_we_do_not_drive(acc, api, device):
    buf, _ = filled(acc)
    dl_device = {
        "id out of range": (DEVICE_TYPE[api], driver.accelerator_count()),
        "managed": (KDL_CUDA_MANAGED, 0),
        "other api": (KDL_ROCM if api == "cuda" else KDL_CUDA, 0),
    }[device]
    holder = Holder(buf.__dlpack__(max_version=(1, 0)), device=dl_device)
    with pytest.raises(BufferError):
        Buffer.from_dlpack(holder)
    assert holder.calls == []


# --------------------------------------------------------------------------
# A foreign producer over memory allocated through the driver


@contextlib.contextmanager
def _driver_allocations(acc, raw, allocate, free):
    """``alloc(n) -> address``, through the driver on the first accelerator;
    everything it allocated is freed when the block ends."""
    made = []

    def alloc(n: int) -> int:
        with raw.current(acc.id):
            ptr = allocate(n)
        made.append(ptr)
        return ptr

    yield alloc
    acc.synchronize(timeout=WAIT)
    with raw.current(acc.id):
        for ptr in made:
            assert free(ptr) == SUCCESS


@pytest.fixture
def device_memory(acc, raw):
    """``n`` bytes of device memory, allocated through the driver."""
    with _driver_allocations(acc, raw, raw.malloc, raw.free) as alloc:
        yield alloc


@pytest.fixture
def pinned_memory(acc, raw):
    """``n`` bytes of pinned host memory, allocated through the driver."""
    with _driver_allocations(acc, raw, raw.host_alloc, raw.free_host) as alloc:
        yield alloc


def test_foreign_device_memory_is_imported_zero_copy(acc, api, device_memory):
    ptr = device_memory(4 * 64)
    p = CtypesProducer(ptr, (8, 8), DType.float32, device=(DEVICE_TYPE[api], acc.id))
    buf = Buffer.from_dlpack(p)
    assert buf._data_ptr() == ptr and buf.device is acc
    ref = sample_array(DType.float32, (8, 8))
    buf.inplace_copy_from(Buffer.from_numpy(ref))
    # A second import of the same memory is another storage with a record of
    # its own (SPEC §12.6: an alias the module does not know): its reads are
    # not ordered after buf's write, so the host waits for that first.
    again = Buffer.from_dlpack(p)
    buf.stream.synchronize(timeout=WAIT)
    assert np.array_equal(again.to_numpy(), ref)
    assert p.calls[0] == {
        "max_version": (1, 0),
        "stream": acc.default_queue.native_stream_handle,
    }
    del buf, again
    assert wait_until(lambda: p.deleted == 2)
    assert list(p.deletions.values()) == [1, 1]


def test_foreign_pinned_memory_is_imported_zero_copy(acc, api, pinned_memory):
    ptr = pinned_memory(4 * 16)
    p = CtypesProducer(ptr, (16,), DType.int32, device=(HOST_TYPE[api], 0))
    buf = Buffer.from_dlpack(p)
    assert buf.pinned and buf.device is acc
    assert buf.to_numpy().ctypes.data == ptr
    (ctypes.c_int32 * 16).from_address(ptr)[5] = 55
    assert buf[5].item() == 55
    on_device = buf.to(acc)  # a copy through the device's view
    assert on_device.to_numpy()[5] == 55
    del buf
    assert wait_until(lambda: p.deleted == 1)


def test_foreign_deleter_waits_for_pending_copies(acc, api, gate, device_memory):
    """The deleter runs once nothing of ours uses the memory, enqueued work
    included: not while a copy from it is held behind a gate."""
    ptr = device_memory(4 * 32)
    deleted = threading.Event()
    p = CtypesProducer(
        ptr,
        (32,),
        DType.float32,
        device=(DEVICE_TYPE[api], acc.id),
        on_delete=deleted.set,
    )
    imported = Buffer.from_dlpack(p)
    ref = sample_array(DType.float32, (32,))
    imported.inplace_copy_from(Buffer.from_numpy(ref))
    flag = gate(imported.stream)
    dst = Buffer(DType.float32, (32,), DeviceQueue(acc))
    dst.inplace_copy_from(imported)  # pending behind the gate
    del imported
    gc.collect()
    assert not deleted.wait(NOT_YET)
    assert p.deleted == 0
    flag.signal(1)
    assert deleted.wait(WAIT)
    assert np.array_equal(dst.to_numpy(), ref)
    time.sleep(0.05)
    assert p.deleted == 1


def test_foreign_capsule_consumed_twice_is_refused(acc, api, device_memory):
    ptr = device_memory(64)
    p = CtypesProducer(ptr, (16,), DType.float32, device=(DEVICE_TYPE[api], acc.id))
    holder = Holder(p.capsule(), device=p.device)
    first = Buffer.from_dlpack(holder)
    with pytest.raises(BufferError):
        Buffer.from_dlpack(holder)
    del first
    assert wait_until(lambda: p.deleted == 1)


def test_foreign_device_id_out_of_range(acc, api, device_memory):
    ptr = device_memory(64)
    p = CtypesProducer(ptr, (16,), DType.float32, device=(DEVICE_TYPE[api], 1 << 20))
    with pytest.raises(BufferError):
        Buffer.from_dlpack(p)
    assert p.calls == [] and p.deleted == 0


# --------------------------------------------------------------------------
# Child processes: capsules left at exit, consumed late


CHILD = r"""
import gc, sys
import numpy as np
sys.path.insert(0, "tests")
from dlpack_support import Holder
from max.driver import Accelerator, Buffer, DevicePinnedBuffer, DeviceQueue
from max.dtype import DType

acc = Accelerator(0)
q = DeviceQueue(acc)
ref = np.arange(64, dtype=np.float32)
buf = Buffer(DType.float32, (64,), q)
buf.inplace_copy_from(Buffer.from_numpy(ref))
q.synchronize()  # stream=-1 orders nothing: the upload must be done
dev = buf.__dlpack_device__()
caps = [buf.__dlpack__(max_version=(1, 0), stream=-1) for _ in range(4)]
pinned = DevicePinnedBuffer.zeros((8,), DType.int32, acc)
pcaps = [pinned.__dlpack__(max_version=(1, 0)) for _ in range(2)]
del buf, q, pinned
gc.collect()
imported = Buffer.from_dlpack(Holder(caps[0], device=dev))
ok = np.array_equal(imported.to_numpy(), ref)
late = Buffer.from_dlpack(Holder(caps[1], device=dev)).to(acc)  # a copy
print("OK" if ok else "BAD")
sys.stdout.flush()
# caps[2:] and pcaps never consumed; `imported` and `late` alive at exit.
"""


def test_capsules_at_exit_in_a_child(run_acc_py):
    r = run_acc_py(CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK", (r.stdout, r.stderr)
    assert "Fatal" not in r.stderr and "violation" not in r.stderr, r.stderr
