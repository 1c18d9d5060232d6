"""Buffer on an accelerator (SPEC §12): device memory allocated and filled
in queue order, host <-> device, device <-> device and peer copies, strided
and negative-step views, pinned memory (DevicePinnedBuffer,
Usage.STAGING), moves between queues, ordering across queues and devices
without user synchronization, what a copy guarantees when it returns, out
of memory, device addresses, and pending copies of dropped buffers.

Runs on a real GPU and on the fake driver (tests/fake_driver, through
tests/test_fake_backends.py).  Checks only the fake can answer (live device
allocations, recorded violations of the real drivers' rules) are in
test_accel_buffer_fake.py.  Device memory cannot be read from the host, so
a gate is observed through host reads that must wait, through pinned
memory (which the host reads without waiting) or through host functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc

import numpy as np
import pytest
from accel_support import ENQ, WAIT
from buffer_support import (
    ELEMENT_SIZE,
    NUMPY_DTYPES,
    Call,
    contiguous_strides,
    host_source,
    open_later,
    returns_promptly,
    sample_array,
)
from dlpack_support import Holder

from max import driver
from max.driver import CPU, Buffer, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType

N = 4096
SUCCESS = 0
DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_ / HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL
OUT_OF_MEMORY = {"cuda": "CUDA_ERROR_OUT_OF_MEMORY", "hip": "hipErrorOutOfMemory"}

STRIDED = [
    (slice(None, None, 2), slice(None)),
    (slice(None), slice(None, None, 3)),
    (slice(None, None, -1), slice(None, None, -1)),
    (slice(4, 0, -2), slice(1, None, 2)),
    (slice(None), 2),
    (1, slice(None, None, -1)),
    (slice(1, 3), slice(None)),
    (3, 4),
]


def _enq(queue, fn):
    getattr(queue, ENQ)(fn)


def on_device(arr: np.ndarray, target) -> Buffer:
    """``arr`` copied to ``target`` (a device or a queue)."""
    return Buffer.from_numpy(np.ascontiguousarray(arr)).to(target)


def device_buffer(acc, dtype=DType.int32, shape=(5, 7), queue=None):
    ref = sample_array(dtype, shape)
    return on_device(ref, queue if queue is not None else acc), ref


def loaded_library() -> str:
    for entry in driver.backend_selection():
        if entry["chosen"]:
            return str(entry["library"])
    raise AssertionError(driver.backend_selection())


class PointerQuery:
    """The device a pointer belongs to, asked of the driver library
    max.driver loaded (cuPointerGetAttribute / hipPointerGetAttribute)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.lib = ctypes.CDLL(loaded_library())
        out = ctypes.POINTER(ctypes.c_int)
        if api == "cuda":
            self.get = self.lib.cuPointerGetAttribute
            self.get.argtypes = [out, ctypes.c_int, ctypes.c_uint64]
        else:
            self.get = self.lib.hipPointerGetAttribute
            self.get.argtypes = [out, ctypes.c_int, ctypes.c_void_p]
        self.get.restype = ctypes.c_int

    @contextlib.contextmanager
    def _current(self, device_id: int):
        if self.api != "cuda":
            yield
            return
        lib = self.lib
        dev = ctypes.c_int()
        ctx, popped = ctypes.c_void_p(), ctypes.c_void_p()
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.cuDevicePrimaryCtxRetain.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
        ]
        lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        assert lib.cuDeviceGet(ctypes.byref(dev), device_id) == SUCCESS
        # Retained, not released: the backend holds the primary context too.
        assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == SUCCESS
        assert lib.cuCtxPushCurrent_v2(ctx) == SUCCESS
        try:
            yield
        finally:
            assert lib.cuCtxPopCurrent_v2(ctypes.byref(popped)) == SUCCESS

    def device_of(self, ptr: int, device_id: int) -> int:
        out = ctypes.c_int(-1)
        with self._current(device_id):
            rc = self.get(ctypes.byref(out), DEVICE_ORDINAL, ptr)
        assert rc == SUCCESS, f"pointer attribute query of {ptr:#x} failed: {rc}"
        return out.value


# --------------------------------------------------------------------------
# Allocation (SPEC §12.3, §12.4)


def test_allocation_on_the_accelerator(acc):
    buf = Buffer(DType.float32, (2, 3), acc)
    assert type(buf) is Buffer
    assert buf.device is acc
    assert buf.stream is acc.default_queue
    assert not buf.is_host
    assert not buf.pinned
    assert buf.usage is Usage.DEFAULT
    assert buf.shape == (2, 3) and buf.strides == (3, 1)
    assert buf.is_contiguous
    kw = Buffer(dtype=DType.int8, shape=[4], device=acc, usage=Usage.DEFAULT)
    assert kw.device is acc and kw.shape == (4,)


def test_allocation_on_a_queue(acc, aq):
    for buf in (Buffer(DType.int8, (4,), aq), Buffer(DType.int8, (4,), stream=aq)):
        assert buf.stream is aq
        assert buf.device is acc


def test_allocation_on_the_second_device(acc1):
    buf = Buffer(DType.int64, (8,), acc1)
    assert buf.device is acc1
    assert buf.stream is acc1.default_queue
    q = DeviceQueue(acc1)
    assert Buffer(DType.int64, (8,), q).device is acc1


@pytest.mark.parametrize("dtype", list(DType), ids=str)
def test_every_dtype_allocatable(acc, dtype):
    buf = Buffer(dtype, (3,), acc)
    assert buf.element_size == ELEMENT_SIZE[dtype]
    zeros = Buffer.zeros((3, 2), dtype, acc)
    raw = zeros.view(DType.uint8, (6 * ELEMENT_SIZE[dtype],)).to_numpy()
    assert not raw.any()


def test_rank_zero_and_zero_size(acc):
    s = Buffer.scalar(5, DType.int32, acc)
    assert s.device is acc and s.shape == ()
    assert s.item() == 5
    empty = Buffer(DType.float32, (0, 4), acc)
    assert empty.num_elements == 0
    assert empty.to_numpy().shape == (0, 4)
    assert empty.copy().shape == (0, 4)


def test_allocation_and_zeros_return_while_the_queue_is_gated(acc, aq, gate):
    """SPEC §12.3: device memory is allocated in queue order; creating a
    buffer never waits for its queue."""
    flag = gate(aq)
    returns_promptly(lambda: Buffer(DType.int8, (1 << 20,), aq))
    default_flag = gate(acc.default_queue)
    zeros = returns_promptly(lambda: Buffer.zeros((N,), DType.int32, acc))
    read = Call(zeros.to_numpy)
    assert read.blocked(), "a host read did not wait for the gated zero fill"
    default_flag.signal(1)
    flag.signal(1)
    assert (read.value() == 0).all()


def test_zeros_fill_is_enqueued_on_the_queue(acc, gate):
    """SPEC §12.3: on an accelerator the fill of ``zeros`` is enqueued on
    the buffer's queue.  A STAGING buffer is tracked (SPEC §12.3, §12.6): a
    host read waits for the fill, the buffer's last write; an alias taken
    meanwhile is plain memory and sees the fill land when the gate opens."""
    flag = gate(acc.default_queue)
    zeros = returns_promptly(
        lambda: Buffer.zeros((N,), DType.int32, acc, usage=Usage.STAGING)
    )
    assert zeros.pinned and zeros.usage is Usage.STAGING
    assert zeros._host_hazard_tracked
    read = Call(zeros.to_numpy)
    assert read.blocked(), "a host read did not wait for the gated fill"
    flag.signal(1)
    assert (read.value() == 0).all()


def test_device_pinned_zeros_are_zero_on_return(acc, gate):
    """SPEC §12.3: DevicePinnedBuffer.zeros is zero on return, on the host
    (nothing is left to run on the gated queue)."""
    flag = gate(acc.default_queue)
    pinned = returns_promptly(lambda: DevicePinnedBuffer.zeros((N,), DType.int32, acc))
    alias = pinned.to_numpy()
    assert (alias == 0).all()
    alias[:] = 7
    flag.signal(1)
    acc.default_queue.synchronize(timeout=WAIT)
    assert (alias == 7).all()


def test_allocation_larger_than_the_device_memory_error(acc, api):
    """SPEC §12.3: MemoryError naming the byte count, the device and the
    driver's error; the device stays usable (the fake has
    FAKE_GPU_TOTAL_MEM, 80 GiB by default)."""
    nbytes = acc.stats["total_memory"] + 2**20
    with pytest.raises(MemoryError) as exc:
        Buffer(DType.int8, (nbytes,), acc)
    msg = str(exc.value)
    assert str(nbytes) in msg, msg
    assert OUT_OF_MEMORY[api] in msg, msg
    assert "gpu" in msg.lower() or api in msg.lower(), msg
    with pytest.raises(MemoryError):
        Buffer.zeros((nbytes // 4 + 1,), DType.float32, acc)
    assert Buffer.zeros((4,), DType.int8, acc).to_numpy().tolist() == [0] * 4
    acc.synchronize(timeout=WAIT)


def test_impossible_pinned_allocation_memory_error(acc):
    with pytest.raises(MemoryError):
        DevicePinnedBuffer(DType.int8, (2**62,), acc)
    with pytest.raises(MemoryError):
        Buffer(DType.int8, (2**62,), acc, usage=Usage.STAGING)
    assert (
        DevicePinnedBuffer.zeros((4,), DType.int8, acc).to_numpy().tolist() == [0] * 4
    )


def test_data_ptr_is_a_device_address(acc, api):
    """SPEC §12.4: ``_data_ptr()`` is the device address of the first
    element of the view; device memory is aligned as the driver aligns it
    (256 bytes on CUDA)."""
    query = PointerQuery(api)
    buf = Buffer(DType.int32, (64, 64), acc)
    ptr = buf._data_ptr()
    assert type(ptr) is int and ptr != 0
    assert query.device_of(ptr, acc.id) == acc.id
    assert buf[32, :]._data_ptr() == ptr + 32 * 64 * 4
    assert buf[::-1, 5]._data_ptr() == ptr + (63 * 64 + 5) * 4
    assert query.device_of(buf[63, 63]._data_ptr(), acc.id) == acc.id
    assert buf._aligned()
    if api == "cuda":
        assert ptr % 256 == 0 and buf._aligned(256)


def test_data_ptr_of_the_second_device(acc1, api):
    buf = Buffer(DType.int8, (1024,), acc1)
    assert PointerQuery(api).device_of(buf._data_ptr(), acc1.id) == acc1.id


def test_repr_on_the_accelerator(acc, aq):
    buf = Buffer(DType.float32, (2, 3), acc)
    device = f"{acc.api}[{acc.id}]"
    assert repr(buf) == f"max.driver.Buffer(DType.float32, (2, 3), {device})"
    assert (
        repr(Buffer(DType.int8, (5,), aq))
        == f"max.driver.Buffer(DType.int8, (5,), {device}, stream={aq!r})"
    )


def test_str_copies_to_the_host(acc):
    arr = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    text = str(on_device(arr, acc))
    assert text.startswith("Buffer(")
    assert np.array2string(arr, prefix="Buffer(") in text
    assert "dtype=DType.int32" in text and "shape=(2, 3)" in text
    assert "device=" in text


# --------------------------------------------------------------------------
# Copies: values (SPEC §12.6)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_host_device_host_round_trip(acc, dtype):
    ref = sample_array(dtype, (5, 7))
    dev = on_device(ref, acc)
    assert dev.device is acc
    assert dev.stream is acc.default_queue
    assert not dev.pinned and dev.is_contiguous and not dev.is_host
    back = dev.to(CPU())
    assert back.device is CPU() and back.is_host
    assert np.array_equal(back.to_numpy(), ref)
    assert np.array_equal(dev.to_numpy(), ref)
    assert np.array_equal(dev.copy(CPU()).to_numpy(), ref)


def test_device_to_numpy_is_a_copy(acc):
    dev, ref = device_buffer(acc)
    arr = dev.to_numpy()
    assert np.array_equal(arr, ref)
    assert arr.ctypes.data != dev._data_ptr()
    arr[...] = 0
    assert np.array_equal(dev.to_numpy(), ref)


def test_inplace_copy_from_between_host_and_device(acc):
    ref = np.arange(N, dtype=np.int32)
    dev = Buffer(DType.int32, (N,), acc)
    dev.inplace_copy_from(Buffer.from_numpy(ref))
    host = Buffer(DType.int32, (64, N // 64))  # shapes may differ
    host.inplace_copy_from(dev)
    assert np.array_equal(host.to_numpy().ravel(), ref)
    with pytest.raises(ValueError):
        dev.inplace_copy_from(Buffer(DType.int16, (N,)))
    with pytest.raises(ValueError):
        dev.inplace_copy_from(Buffer(DType.int32, (N + 1,)))
    with pytest.raises(ValueError):
        Buffer(DType.int32, (2 * N,), acc)[::2].inplace_copy_from(dev)


def test_device_to_device_copies(acc, aq):
    dev, ref = device_buffer(acc)
    for copy in (dev.copy(), dev.copy(acc), dev.copy(aq), dev.copy(stream=aq)):
        assert copy.device is acc
        assert copy._data_ptr() != dev._data_ptr()
        assert np.array_equal(copy.to_numpy(), ref)
    assert dev.copy(aq).stream is aq
    other = Buffer(DType.int32, (35,), aq)
    other.inplace_copy_from(dev)
    assert np.array_equal(other.to_numpy(), ref.ravel())


def test_peer_round_trip(acc, acc1):
    dev, ref = device_buffer(acc, DType.float64)
    peer = dev.to(acc1)
    assert peer.device is acc1 and peer.stream is acc1.default_queue
    assert np.array_equal(peer.to_numpy(), ref)
    assert np.array_equal(peer.to(acc).to_numpy(), ref)
    q1 = DeviceQueue(acc1)
    assert dev.copy(q1).device is acc1
    into = Buffer(DType.float64, (5, 7), q1)
    into.inplace_copy_from(dev)
    assert np.array_equal(into.to_numpy(), ref)
    dev.inplace_copy_from(Buffer.zeros((5, 7), DType.float64, acc1))
    assert not dev.to_numpy().any()


@pytest.mark.parametrize("index", STRIDED)
def test_strided_and_negative_step_device_views(acc, index):
    """SPEC §12.6: copy() works for every view; to_numpy() of a device view
    copies exactly the view."""
    dev, ref = device_buffer(acc, DType.int32, (6, 8))
    view = dev[index]
    expected = ref[index]
    assert view.shape == expected.shape
    assert view.strides == tuple(s // 4 for s in expected.strides)
    copy = view.copy()
    assert copy.device is acc and copy.is_contiguous
    assert copy.strides == contiguous_strides(expected.shape)
    assert np.array_equal(copy.to_numpy(), expected)
    assert np.array_equal(view.to_numpy(), expected)
    assert np.array_equal(view.copy(CPU()).to_numpy(), expected)
    contiguous = view.contiguous()  # SPEC §12.5: a CPU buffer
    assert contiguous.device is CPU()
    assert np.array_equal(contiguous.to_numpy(), expected)


@pytest.mark.parametrize("index", STRIDED[:4])
def test_strided_peer_copies(acc, acc1, index):
    dev, ref = device_buffer(acc, DType.int16, (6, 8))
    copy = dev[index].copy(acc1)
    assert copy.device is acc1
    assert np.array_equal(copy.to_numpy(), ref[index])


def test_slicing_to_numpy_as_max(acc):
    """MAX's test_tensor_slicing_to_numpy_* on an accelerator."""
    data = np.arange(20, dtype=np.int32).reshape(4, 5)
    dev = on_device(data, acc)
    for i in range(4):
        for j in range(5):
            assert np.array_equal(
                dev[i : i + 1, j : j + 1].to_numpy(), data[i : i + 1, j : j + 1]
            )
    assert np.array_equal(dev[-1:, :].to_numpy(), data[-1:, :])
    assert np.array_equal(dev[-2:-1, :].to_numpy(), data[-2:-1, :])
    for start in range(3):
        for end in range(start + 1, 4):
            assert np.array_equal(dev[start:end, :].to_numpy(), data[start:end])


def test_view_dtype_on_the_device(acc):
    dev, ref = device_buffer(acc, DType.int32, (4, 4))
    as_bytes = dev.view(DType.uint8)
    assert as_bytes.shape == (4, 16) and as_bytes.device is acc
    assert as_bytes._data_ptr() == dev._data_ptr()
    assert np.array_equal(as_bytes.to_numpy(), ref.view(np.uint8))
    window = as_bytes[1, 3:11].view(DType.int32, (2,))  # unaligned on the device
    assert np.array_equal(window.to_numpy(), ref.view(np.uint8)[1, 3:11].view(np.int32))


def test_setitem_and_item_on_the_device(acc):
    """SPEC §12.5: on device memory ``buf[i] = v`` is a one-element copy to
    the device, complete when the call returns."""
    dev = Buffer.zeros((4, 4), DType.int32, acc)
    dev[1, 2] = 5
    dev[-1, -1] = -3
    assert dev[1, 2].item() == 5
    assert dev[3, 3].item() == -3
    later = dev.copy()  # enqueued after the write: sees it
    expected = np.zeros((4, 4), np.int32)
    expected[1, 2], expected[3, 3] = 5, -3
    assert np.array_equal(later.to_numpy(), expected)
    half = Buffer.zeros((2,), DType.bfloat16, acc)
    half[1] = 1 + 3 * 2**-8  # rounds to nearest even
    assert half.view(DType.uint16)[1].item() == 0x3F82
    flag = Buffer.zeros((1,), DType.bool, acc)
    flag[0] = True
    assert flag.item() is True
    with pytest.raises(IndexError):
        dev[4, 0] = 1
    with pytest.raises(ValueError):
        dev[1] = 1


def test_item_types_on_the_device(acc):
    assert type(Buffer.scalar(3, DType.int64, acc).item()) is int
    assert type(Buffer.scalar(1.5, DType.float16, acc).item()) is float
    assert Buffer.scalar(1.5, DType.float8_e4m3fn, acc).item() == 1.5
    with pytest.raises(ValueError, match="calling `item` on a tensor with 4 items"):
        Buffer(DType.int8, (4,), acc).item()


# --------------------------------------------------------------------------
# to(): identity and zero-copy rules (SPEC §12.6)


def test_to_the_same_device_is_self(acc):
    dev, _ = device_buffer(acc)
    assert dev.to(acc) is dev
    assert dev.to([acc])[0] is dev
    assert dev.to(dev.stream) is dev
    view = dev[1:, ::2]
    assert view.to(acc) is view


def test_to_another_queue_of_the_device_is_zero_copy(acc, aq):
    dev, ref = device_buffer(acc)
    moved = dev.to(aq)
    assert moved is not dev and type(moved) is Buffer
    assert moved.stream is aq and moved.device is acc
    assert moved._data_ptr() == dev._data_ptr()
    assert moved.strides == dev.strides and moved.shape == dev.shape
    moved[0, 0] = 99
    assert dev[0, 0].item() == 99
    assert np.array_equal(moved[1:, :].to_numpy(), ref[1:, :])


def test_to_another_device_or_the_host_copies(acc, acc1):
    dev, ref = device_buffer(acc)
    other = dev.to(acc1.default_queue)
    assert other.device is acc1 and other.stream is acc1.default_queue
    assert np.array_equal(other.to_numpy(), ref)
    host = dev.to(CPU().default_queue)
    assert host.device is CPU()
    assert np.array_equal(host.to_numpy(), ref)


def test_to_a_list_of_targets(acc, aq):
    dev, ref = device_buffer(acc)
    out = dev.to([acc, aq, CPU()])
    assert type(out) is list and len(out) == 3
    assert out[0] is dev
    assert out[1].stream is aq and out[1]._data_ptr() == dev._data_ptr()
    assert out[2].device is CPU() and np.array_equal(out[2].to_numpy(), ref)


def test_to_stream_shares_the_record_and_links_no_queues(acc, gate, rec):
    """SPEC §12.6: ``buf.to(q2)`` is the same storage with the same record:
    a host read of the alias waits for a write pending on the original's
    queue; work on the two queues is not linked otherwise."""
    q1, q2 = DeviceQueue(acc), DeviceQueue(acc)
    buf = Buffer(DType.int32, (N,), q1)
    flag = gate(q1)
    _enq(q1, rec.fn("q1"))
    buf.inplace_copy_from(host_source(np.full(N, 3, np.int32)))  # behind q1
    moved = returns_promptly(lambda: buf.to(q2))
    assert moved.stream is q2 and moved._data_ptr() == buf._data_ptr()
    _enq(q2, rec.fn("q2"))
    assert rec.wait("q2"), "q2 waited for q1"
    assert not rec.has("q1"), "the gate did not hold q1"
    read = Call(moved.to_numpy)
    assert read.blocked(), "the alias's read did not wait for the pending write"
    flag.signal(1)
    assert (read.value() == 3).all()


# --------------------------------------------------------------------------
# Pinned memory: DevicePinnedBuffer and Usage.STAGING (SPEC §12.3, §12.6)


def test_device_pinned_buffer(acc, aq):
    """As MAX's test_device_pinned_buffer_type_gpu."""
    pinned = DevicePinnedBuffer(dtype=DType.float32, shape=[10], device=acc)
    assert isinstance(pinned, DevicePinnedBuffer) and isinstance(pinned, Buffer)
    assert pinned.pinned
    assert pinned.usage is Usage.STAGING
    assert not pinned.is_host  # a pinned buffer of an accelerator is not host
    assert pinned.device is acc
    assert pinned.stream is acc.default_queue
    for on_q in (
        DevicePinnedBuffer(DType.int8, [4], aq),
        DevicePinnedBuffer(DType.int8, [4], stream=aq),
    ):
        assert on_q.stream is aq and on_q.device is acc and on_q.pinned
    zeros = DevicePinnedBuffer.zeros(shape=[5, 3], dtype=DType.int32, device=acc)
    assert isinstance(zeros, DevicePinnedBuffer) and zeros.pinned
    assert zeros.to_numpy().shape == (5, 3) and not zeros.to_numpy().any()


def test_device_pinned_views_stay_pinned(acc):
    """As MAX's ..._slice_preserves_type and ..._view_preserves_type."""
    pinned = DevicePinnedBuffer(DType.float32, [4, 3], acc)
    for view in (
        pinned[:2, :],
        pinned[1:3, ::-1],
        pinned[1, 2],
        pinned.view(DType.uint8),
    ):
        assert isinstance(view, DevicePinnedBuffer)
        assert view.pinned and view.usage is Usage.STAGING


def test_staging_buffer_matches_device_pinned(acc):
    """As MAX's test_buffer_staging_matches_device_pinned and
    test_staging_usage_survives_slice_and_view."""
    buf = Buffer(DType.float32, [4, 4], acc, usage=Usage.STAGING)
    assert buf.pinned and buf.usage is Usage.STAGING and not buf.is_host
    assert buf[0, :].usage is Usage.STAGING and buf[0, :].pinned
    assert buf.view(DType.int32, [4, 4]).usage is Usage.STAGING
    arr = buf.to_numpy()
    arr[...] = 2.0
    assert buf.to_numpy().ctypes.data == arr.ctypes.data
    assert (buf.to_numpy() == 2.0).all()


@pytest.mark.parametrize("make", ["staging", "device_pinned"])
def test_pinned_to_numpy_aliases_without_waiting(acc, gate, make):
    """SPEC §12.6: on pinned memory to_numpy() aliases without waiting (as
    MAX's test_device_pinned_buffer_to_numpy_does_not_synchronize)."""
    if make == "staging":
        pinned = Buffer(DType.int32, [8], acc, usage=Usage.STAGING)
    else:
        pinned = DevicePinnedBuffer(DType.int32, [8], acc)
    flag = gate(pinned.stream)
    first = returns_promptly(pinned.to_numpy)
    assert first.flags.writeable and not first.flags.owndata
    first[:] = np.arange(10, 18, dtype=np.int32)
    second = returns_promptly(pinned.to_numpy)
    assert np.array_equal(second, np.arange(10, 18))
    assert returns_promptly(lambda: pinned[2:4].to_numpy()).tolist() == [12, 13]
    flag.signal(1)


def test_untracked_pinned_item_waits_and_setitem_does_not(acc, gate, rec):
    """SPEC §12.6, Usage.UNTRACKED (DevicePinnedBuffer): item() waits for
    the buffer's queue, as MAX's pinned buffers do; a host write waits for
    nothing."""
    pinned = DevicePinnedBuffer.zeros((2,), DType.int32, acc)
    assert not pinned._host_hazard_tracked
    flag = gate(pinned.stream)
    _enq(pinned.stream, rec.fn("held"))
    read = Call(lambda: pinned[0].item())
    returns_promptly(lambda: pinned.__setitem__(1, 4))
    assert read.blocked() and not rec.has("held")
    flag.signal(1)
    assert read.value() == 0
    assert pinned.to_numpy().tolist() == [0, 4]


def test_staging_item_and_setitem_wait_for_the_record(acc, gate, rec):
    """A tracked STAGING buffer: item() and a host write wait for its last
    write (a fill behind a gate), not for its queue's unrelated work."""
    staging = Buffer.zeros((2,), DType.int32, acc, usage=Usage.STAGING)
    flag = gate(staging.stream)
    _enq(staging.stream, rec.fn("held"))
    assert returns_promptly(lambda: staging[0].item()) == 0
    returns_promptly(lambda: staging.__setitem__(1, 5))
    assert not rec.has("held"), "the gate did not hold the queue"
    staging.inplace_copy_from(host_source(np.array([7, 7], np.int32)))
    read = Call(lambda: staging[0].item())
    write = Call(lambda: staging.__setitem__(1, 4))
    assert read.blocked() and write.blocked()
    flag.signal(1)
    assert read.value() == 7
    write.value()
    assert staging.to_numpy().tolist() == [7, 4]


def test_pinned_data_transfer_as_max(acc):
    """MAX's test_device_pinned_buffer_data_transfer and _with_events."""
    host = DevicePinnedBuffer(DType.float32, [1000], acc)
    host.to_numpy()[:] = np.arange(1000, dtype=np.float32)
    dev = host.to(acc)
    assert dev is not host and not dev.pinned and dev.device is acc
    result = DevicePinnedBuffer(DType.float32, [1000], acc)
    result.inplace_copy_from(dev)
    acc.default_queue.record_event().synchronize(timeout=WAIT)
    assert np.array_equal(result.to_numpy(), np.arange(1000, dtype=np.float32))


def test_pinned_copies_and_moves(acc, aq):
    pinned = DevicePinnedBuffer(DType.int32, [6, 4], acc)
    ref = sample_array(DType.int32, (6, 4))
    pinned.to_numpy()[...] = ref
    copy = pinned.copy()
    assert copy.device is acc and not copy.pinned  # SPEC: results are not pinned
    assert np.array_equal(copy.to_numpy(), ref)
    host = pinned.to(CPU())
    assert host.device is CPU() and not host.pinned
    assert np.array_equal(host.to_numpy(), ref)
    moved = pinned.to(aq)  # same device, another queue: zero-copy
    assert moved.stream is aq and moved._data_ptr() == pinned._data_ptr()
    assert moved.pinned
    flipped = pinned[::-1, 1::2].copy()
    assert np.array_equal(flipped.to_numpy(), ref[::-1, 1::2])


def test_copy_into_pinned_memory_needs_ordering(acc):
    """SPEC §12.6: device -> pinned is enqueued and returns at once; the
    host orders its read with the queue (here a synchronize)."""
    dev, ref = device_buffer(acc)
    pinned = DevicePinnedBuffer(DType.int32, [5, 7], acc)
    pinned.inplace_copy_from(dev)
    pinned.stream.synchronize(timeout=WAIT)
    assert np.array_equal(pinned.to_numpy(), ref)


# --------------------------------------------------------------------------
# What a copy guarantees on return, and ordering (SPEC §12.6)


def test_pageable_to_device_never_waits_for_a_gated_destination(acc, aq, gate):
    """From pageable CPU memory to an accelerator: the call never waits for
    the destination's (gated) queue and the source may be overwritten at
    once; the destination gets the OLD values."""
    srcs = [host_source(np.full(N, 7, np.int32)) for _ in range(3)]
    aliases = [src.to_numpy() for src in srcs]
    dst = Buffer(DType.int32, (N,), aq)
    flag = gate(aq)
    returns_promptly(lambda: dst.inplace_copy_from(srcs[0]))
    copy = returns_promptly(lambda: srcs[1].copy(aq))
    moved = returns_promptly(lambda: srcs[2].to(aq))
    for alias in aliases:
        alias[:] = 99
    open_later(flag)
    assert (dst.to_numpy() == 7).all()
    assert (copy.to_numpy() == 7).all()
    assert (moved.to_numpy() == 7).all()


def test_device_to_pageable_is_complete_on_return(acc, aq, gate, rec):
    """Into pageable CPU memory from an accelerator: the copy is complete
    when the call returns, so it waits for the source's last write (a copy
    behind a gate), and for nothing else on the source's queue."""
    dev, ref = device_buffer(acc, queue=aq)
    host = Buffer(DType.int32, (5, 7), DeviceQueue(CPU()))
    alias = host.to_numpy()
    flag = gate(aq)
    _enq(aq, rec.fn("held"))
    returns_promptly(lambda: host.inplace_copy_from(dev))
    assert np.array_equal(alias, ref)  # no synchronize
    assert not rec.has("held"), "the gate did not hold the source's queue"
    dev.inplace_copy_from(host_source(ref * 2))  # dev's producer, gated
    call = Call(lambda: host.inplace_copy_from(dev))
    assert call.blocked(), "returned before the source's producer ran"
    flag.signal(1)
    call.value()
    assert np.array_equal(alias, ref * 2)


def test_device_to_device_returns_at_once_and_is_ordered(acc, gate):
    """A copy from a buffer whose producer is gated returns at once; a host
    read of the destination waits for the chain (producer, then copy)."""
    q1, q2 = DeviceQueue(acc), DeviceQueue(acc)
    src = Buffer(DType.int32, (5, 7), DeviceQueue(acc))
    dst = Buffer(DType.int32, (5, 7), q2)
    ref = sample_array(DType.int32, (5, 7))
    flag = gate(q1)
    src.to(q1).inplace_copy_from(host_source(ref))  # through an alias
    returns_promptly(lambda: dst.inplace_copy_from(src))
    read = Call(dst.to_numpy)
    assert read.blocked()
    flag.signal(1)
    assert np.array_equal(read.value(), ref)


def test_untracked_source_copy_waits_for_its_queue_so_far(acc, gate):
    """SPEC §12.6, Usage.UNTRACKED: a copy from untracked memory (a
    DevicePinnedBuffer written by a host function, work no record holds)
    waits for the source's queue so far, and does not hold it back
    afterwards."""
    qs, qd = DeviceQueue(acc), DeviceQueue(acc)
    pinned = DevicePinnedBuffer(DType.int32, [N], qs)
    alias = pinned.to_numpy()
    alias[:] = 1
    dst = Buffer.zeros((N,), DType.int32, acc).to(qd)
    flag = gate(qs)
    _enq(qs, lambda: alias.__setitem__(slice(None), 2))
    returns_promptly(lambda: dst.inplace_copy_from(pinned))
    read = Call(dst.to_numpy)
    assert read.blocked(), "the copy did not wait for the source's queue"
    flag.signal(1)
    assert (read.value() == 2).all()


def test_pageable_source_queue_does_not_wait_for_the_upload(acc, aq, gate, rec):
    """SPEC §12.6: an upload from a pageable source holds nothing back on
    the source's CPU queue: work enqueued there afterwards runs at once,
    while the upload waits behind the destination's gated queue."""
    cq = DeviceQueue(CPU())
    src = Buffer.from_numpy(np.full(N, 5, np.int32)).to(cq)
    dst = DevicePinnedBuffer(DType.int32, [N], aq)
    alias = dst.to_numpy()
    alias[:] = 0
    flag = gate(aq)
    _enq(aq, rec.fn("held"))
    returns_promptly(lambda: dst.inplace_copy_from(src))
    seen = []
    _enq(cq, lambda: seen.append(alias.copy()))
    cq.synchronize(timeout=WAIT)
    assert (seen[0] == 0).all(), "the upload ran before its queue's gate"
    assert not rec.has("held")
    flag.signal(1)
    aq.synchronize(timeout=WAIT)
    assert (alias == 5).all()


def test_uploads_from_one_cpu_queue_into_a_gated_queue(acc, aq, gate):
    """An upload into a gated queue leaves nothing pending in its source's
    record: a second upload from that queue returns at once too."""
    srcs = [Buffer.from_numpy(np.full(N, v, np.int32)) for v in (1, 2)]
    dsts = [Buffer(DType.int32, (N,), aq) for _ in srcs]
    flag = gate(aq)
    for dst, src in zip(dsts, srcs, strict=True):
        returns_promptly(lambda dst=dst, src=src: dst.inplace_copy_from(src))
    open_later(flag)
    assert [int(d.to_numpy()[0]) for d in dsts] == [1, 2]


def test_uploads_inside_a_host_function_of_the_destination_queue(acc, aq):
    """Two uploads from the CPU's default queue, made by a host function of
    the destination's queue: each lands behind the function, and the second
    does not wait for the first (which cannot run before the function
    returns)."""
    dsts = [Buffer(DType.int32, (N,), aq) for _ in range(2)]
    done = []

    def upload():
        for i, dst in enumerate(dsts):
            dst.inplace_copy_from(Buffer.from_numpy(np.full(N, i + 1, np.int32)))
        done.append(True)

    _enq(aq, upload)
    aq.synchronize(timeout=WAIT)
    assert done == [True]
    assert [int(d.to_numpy()[0]) for d in dsts] == [1, 2]


def test_host_access_of_device_memory_ignores_cpu_queues(acc, gate):
    """SPEC §12.6: host reads and writes of device memory (element access,
    to_numpy, str, a DLPack export to the CPU) wait for the buffer's own
    queue only, not for a gated CPU default queue."""
    buf = Buffer.zeros((3,), DType.int32, acc)
    gate(CPU().default_queue)
    returns_promptly(lambda: buf.__setitem__(1, 7))
    assert returns_promptly(lambda: buf[1].item()) == 7
    assert returns_promptly(lambda: buf[0].item()) == 0
    assert returns_promptly(buf.to_numpy).tolist() == [0, 7, 0]
    assert "7" in returns_promptly(lambda: str(buf))
    cap = returns_promptly(lambda: buf.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert np.from_dlpack(Holder(cap)).tolist() == [0, 7, 0]


def test_chain_across_queues_needs_no_synchronization(acc):
    queues = [DeviceQueue(acc) for _ in range(3)]
    bufs = [Buffer(DType.int64, (N,), q) for q in queues]
    host = Buffer(DType.int64, (N,))
    alias = host.to_numpy()
    for round_ in range(30):
        bufs[0].inplace_copy_from(Buffer.from_numpy(np.full(N, round_, np.int64)))
        for a, b in zip(bufs, bufs[1:], strict=False):
            b.inplace_copy_from(a)
        host.inplace_copy_from(bufs[-1])
        assert (alias == round_).all(), round_


def test_chain_across_devices_needs_no_synchronization(acc, acc1):
    a = Buffer(DType.int32, (N,), DeviceQueue(acc))
    b = Buffer(DType.int32, (N,), DeviceQueue(acc1))
    c = Buffer(DType.int32, (N,), DeviceQueue(acc))
    pinned = DevicePinnedBuffer(DType.int32, [N], acc1)
    host = Buffer(DType.int32, (N,))
    for round_ in range(30):
        a.inplace_copy_from(Buffer.from_numpy(np.full(N, round_, np.int32)))
        b.inplace_copy_from(a)  # peer
        c.inplace_copy_from(b)  # peer back
        pinned.inplace_copy_from(c)  # device -> pinned of the other device
        # Pinned -> pageable: the untracked pinned source is read after its
        # queue so far (the device -> pinned copy).
        host.inplace_copy_from(pinned)
        assert (host.to_numpy() == round_).all(), round_


def test_peer_copy_into_a_gated_queue(acc, acc1, gate):
    src, ref = device_buffer(acc)
    q1 = DeviceQueue(acc1)
    dst = Buffer(DType.int32, (5, 7), q1)
    flag = gate(q1)
    returns_promptly(lambda: dst.inplace_copy_from(src))
    read = Call(dst.to_numpy)
    assert read.blocked()
    flag.signal(1)
    assert np.array_equal(read.value(), ref)


def test_host_reads_and_writes_wait_for_the_record(acc, gate, rec):
    """Host access to device memory waits for its last write (a fill behind
    a gate), not for the gate itself."""
    done = Buffer.zeros((4,), DType.int32, acc)
    flag = gate(acc.default_queue)
    _enq(acc.default_queue, rec.fn("held"))
    assert returns_promptly(done.to_numpy).tolist() == [0] * 4
    returns_promptly(lambda: done.__setitem__(2, 1))
    assert not rec.has("held"), "the gate did not hold the queue"
    dev = Buffer.zeros((4,), DType.int32, acc)  # its fill is gated
    calls = [
        Call(dev.to_numpy),
        Call(lambda: dev[0].item()),
        Call(lambda: dev.__setitem__(1, 5)),
        Call(lambda: str(dev)),
    ]
    assert all(c.blocked() for c in calls)
    flag.signal(1)
    for c in calls:
        c.value()
    assert dev.to_numpy().tolist() == [0, 5, 0, 0]


# --------------------------------------------------------------------------
# Lifetime: pending copies of dropped buffers (SPEC §12.7)


def _churn_memory(acc):
    """Allocate and fill device and pinned memory, so that memory freed
    under a pending copy would be reused and overwritten."""
    junk = [Buffer.zeros((N,), DType.int32, acc) for _ in range(8)]
    junk += [DevicePinnedBuffer.zeros((N,), DType.int32, acc) for _ in range(8)]
    for j in junk:
        j.inplace_copy_from(host_source(np.full(N, -1, np.int32)))
    del junk
    gc.collect()


def test_dropped_destination_of_a_pending_copy_seen_through_a_view(acc, aq, gate):
    ref = np.arange(N, dtype=np.int32)
    dst = Buffer.zeros((N,), DType.int32, acc).to(aq)
    tail = dst[N - 4 :]
    flag = gate(aq)
    dst.inplace_copy_from(Buffer.from_numpy(ref))
    del dst
    gc.collect()
    open_later(flag)
    assert tail.to_numpy().tolist() == ref[-4:].tolist()


def test_dropped_source_of_a_pending_device_copy(acc, gate):
    qa, qb = DeviceQueue(acc), DeviceQueue(acc)
    src, ref = device_buffer(acc, queue=qa)
    dst = Buffer(DType.int32, (5, 7), qb)
    flag = gate(qb)
    dst.inplace_copy_from(src)
    del src
    gc.collect()
    _churn_memory(acc)
    flag.signal(1)
    assert np.array_equal(dst.to_numpy(), ref)


def test_dropped_pinned_source_of_a_pending_copy(acc, gate):
    qd = DeviceQueue(acc)
    pinned = DevicePinnedBuffer(DType.int32, [N], acc)
    pinned.to_numpy()[:] = np.arange(N, dtype=np.int32)
    dst = Buffer(DType.int32, (N,), qd)
    flag = gate(qd)
    dst.inplace_copy_from(pinned)
    del pinned
    gc.collect()
    _churn_memory(acc)
    flag.signal(1)
    assert np.array_equal(dst.to_numpy(), np.arange(N, dtype=np.int32))


def test_dropped_buffers_of_a_pending_peer_copy(acc, acc1, gate):
    src, ref = device_buffer(acc)
    q1 = DeviceQueue(acc1)
    dst = Buffer(DType.int32, (5, 7), q1)
    view = dst[1:, :]
    flag = gate(q1)
    dst.inplace_copy_from(src)
    del src, dst
    gc.collect()
    open_later(flag)
    assert np.array_equal(view.to_numpy(), ref[1:, :])


def test_dropping_everything_while_copies_are_pending(acc, gate):
    """Nothing is freed under a pending copy: when the gate opens the
    queues finish without a driver error (an illegal address would surface
    as ValueError from synchronize, SPEC §8)."""
    q = DeviceQueue(acc)
    flag = gate(q)
    for i in range(20):
        dst = Buffer(DType.int32, (N,), q)
        dst.inplace_copy_from(host_source(np.full(N, i, np.int32)))
        back = Buffer(DType.int32, (N,), acc)
        back.inplace_copy_from(dst)
        del dst, back
    gc.collect()
    flag.signal(1)
    q.synchronize(timeout=WAIT)
    acc.synchronize(timeout=WAIT)
    check = Buffer.from_numpy(np.arange(N, dtype=np.int32)).to(q)
    assert np.array_equal(check.to_numpy(), np.arange(N))


EXIT_CHILD = r"""
import numpy as np
from max.driver import CPU, Accelerator, Buffer, CompletionFlag, DeviceQueue
from max.dtype import DType
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
for _ in range(20):
    dst = Buffer(DType.int8, (1 << 16,), q)
    dst.inplace_copy_from(Buffer(DType.int8, (1 << 16,), DeviceQueue(CPU())))
print("EXITING", flush=True)
"""


def test_interpreter_exit_with_pending_copies(run_acc_py):
    r = run_acc_py(EXIT_CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "EXITING" in r.stdout
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr


def test_from_dlpack_of_a_numpy_alias_of_pinned_memory(acc):
    """NumPy re-exports host memory it imported as pinned (kDLCUDAHost /
    kDLROCMHost) and accepts only stream=None for it: from_dlpack asks for
    no consumer stream there."""
    pinned = DevicePinnedBuffer.zeros((4,), DType.int32, acc)
    alias = pinned.to_numpy()
    alias[:] = [1, 2, 3, 4]
    again = Buffer.from_dlpack(alias)
    assert again.to_numpy().tolist() == [1, 2, 3, 4]
    alias[0] = 9
    assert again[0].item() == 9  # the same bytes, not a copy
