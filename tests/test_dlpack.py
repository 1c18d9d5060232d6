"""DLPack and NumPy on the CPU (SPEC §13, with §12.6's host-access rules
and §12.7's lifetime): ``Buffer.__dlpack__`` / ``__dlpack_device__``,
``Buffer.from_dlpack``, ``to_numpy`` / ``from_numpy`` and their lifetimes.

The capsules are read through our own ctypes declaration of the DLPack ABI
(tests/dlpack_support.py), and foreign producers are made with it, so no
test trusts the implementation's view of the ABI.  JAX as a second
independent library is in test_dlpack_jax.py; the accelerator rules are in
tests/accelerator/test_accel_dlpack.py.
"""

from __future__ import annotations

import ctypes
import enum
import gc
import sys
import threading
import time
import weakref

import numpy as np
import pytest
from buffer_support import (
    FLOAT8,
    NUMPY_DTYPES,
    NUMPY_OF,
    SUB_BYTE,
    Call,
    contiguous_strides,
    returns_promptly,
    sample_array,
)
from dlpack_support import (
    DL_DTYPE,
    IS_COPIED,
    IS_SUBBYTE_TYPE_PADDED,
    KDL_CPU,
    KDL_CUDA,
    KDL_ROCM,
    LEGACY,
    READ_ONLY,
    VERSIONED,
    CtypesProducer,
    Holder,
    capsule_name,
    payload,
    shape_of,
    strides_of,
    tensor,
)

from max import driver
from max.driver import CPU, Buffer, DeviceQueue, DLPackArray
from max.dtype import DType

WAIT = 20.0
ml_dtypes = pytest.importorskip("ml_dtypes")  # bfloat16's NumPy dtype (§12.1)

SHAPES = [(), (1,), (7,), (2, 3), (2, 3, 4), (0,), (3, 0, 2), (1,) * 64]
NOT_CONTIGUOUS_NUMPY = (
    "from_dlpack only accepts contiguous arrays. First call np.ascontiguousarray"
)
NOT_CONTIGUOUS = "from_dlpack only accepts contiguous tensors"


def filled(dtype: DType, shape: tuple[int, ...], start: int = 1):
    """A buffer allocated by Buffer() holding sample values, and them."""
    ref = sample_array(dtype, shape, start)
    buf = Buffer(dtype, shape)
    buf.to_numpy()[...] = ref
    return buf, ref


def wait_until(pred, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def undriven_device() -> tuple[int, int]:
    """A DLPack device type this process's backend does not drive."""
    return (KDL_ROCM, 0) if driver.accelerator_api() == "cuda" else (KDL_CUDA, 0)


# --------------------------------------------------------------------------
# Capsules: kinds, names, the versioned struct


@pytest.mark.parametrize("max_version", [None, (0, 8), (0, 0)])
def test_legacy_capsule_below_version_1(max_version):
    buf = Buffer.zeros((2,), DType.float32)
    kwargs = {} if max_version is None else {"max_version": max_version}
    assert capsule_name(buf.__dlpack__(**kwargs)) == LEGACY


@pytest.mark.parametrize("max_version", [(1, 0), (1, 1), (1, 7), (2, 0)])
def test_versioned_capsule_from_version_1(max_version):
    buf = Buffer.zeros((2,), DType.float32)
    cap = buf.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == VERSIONED
    m = payload(cap)
    assert m.version.major == 1  # the consumer asked for at least 1.0
    assert m.flags == 0  # writable, not a copy
    assert m.deleter


@pytest.mark.parametrize("versioned", [True, False])
def test_tensor_describes_the_buffer(versioned):
    buf, _ = filled(DType.int32, (2, 3))
    cap = buf.__dlpack__(max_version=(1, 0) if versioned else None)
    t = tensor(cap)
    assert t.data == buf._data_ptr()
    assert (t.device.device_type, t.device.device_id) == (KDL_CPU, 0)
    assert t.ndim == 2
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 32, 1)
    assert shape_of(t) == (2, 3)
    assert strides_of(t) in (None, (3, 1))  # elements, or NULL for C order
    assert t.byte_offset == 0


@pytest.mark.parametrize("dtype", list(DL_DTYPE), ids=str)
def test_versioned_dtype_codes(dtype):
    """DLPack 1.1's type codes; sub-byte types are one element per byte,
    which only a versioned capsule can say (IS_SUBBYTE_TYPE_PADDED)."""
    m = payload(Buffer(dtype, (4,)).__dlpack__(max_version=(1, 1)))
    code, bits = DL_DTYPE[dtype]
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (code, bits)
    assert m.dl_tensor.dtype.lanes == 1
    padded = bool(m.flags & IS_SUBBYTE_TYPE_PADDED)
    assert padded == (dtype in SUB_BYTE)


@pytest.mark.parametrize("dtype", FLOAT8 + SUB_BYTE, ids=str)
def test_legacy_capsule_refuses_types_it_cannot_name(dtype):
    """The legacy ABI (before 1.1) has no float8/6/4 codes: never a wrong
    code, a BufferError instead."""
    with pytest.raises(BufferError):
        Buffer(dtype, (4,)).__dlpack__()


def test_views_export_their_strides_in_elements():
    buf, ref = filled(DType.int16, (4, 6))
    for view, expected in [
        (buf[1:3, :], ref[1:3, :]),
        (buf[:, 1::2], ref[:, 1::2]),
        (buf[::-1, ::-2], ref[::-1, ::-2]),
        (buf[2, ::-1], ref[2, ::-1]),
    ]:
        t = tensor(view.__dlpack__(max_version=(1, 0)))
        assert t.data == view._data_ptr()
        assert shape_of(t) == expected.shape
        assert strides_of(t) == view.strides
        assert strides_of(t) == tuple(s // 2 for s in expected.strides)


def test_negative_steps_export_negative_strides_to_numpy():
    buf, ref = filled(DType.float32, (3, 4))
    arr = np.from_dlpack(buf[::-1, ::-2])
    assert arr.strides == ref[::-1, ::-2].strides
    assert arr.strides[0] < 0 and arr.strides[1] < 0
    assert np.array_equal(arr, ref[::-1, ::-2])
    arr[0, 0] = -7.0  # the last row's last element, in place
    assert buf[2, 3].item() == -7.0


def test_dlpack_device_values():
    buf = Buffer.zeros((2, 2), DType.float32)
    for b in (buf, buf[1, :], buf[::-1, :], Buffer.from_numpy(np.zeros(3))):
        dev = b.__dlpack_device__()
        assert dev == (KDL_CPU, 0)
        assert all(type(v) is int for v in dev)


def test_dlpack_array_protocol():
    assert isinstance(Buffer.zeros((1,), DType.int8), DLPackArray)
    assert isinstance(np.zeros(1), DLPackArray)
    assert not isinstance(object(), DLPackArray)


# --------------------------------------------------------------------------
# __dlpack__ arguments


@pytest.mark.parametrize("stream", [None, -1])
def test_cpu_accepts_stream_none_and_minus_one(stream):
    buf, ref = filled(DType.int32, (3,))
    cap = buf.__dlpack__(stream=stream, max_version=(1, 0))
    assert tensor(cap).data == buf._data_ptr()


@pytest.mark.parametrize(
    "export",
    [
        lambda b: b.__dlpack__(),
        lambda b: b.__dlpack__(stream=None, max_version=(1, 0)),
        np.from_dlpack,
        lambda b: b.to_numpy(),
    ],
    ids=["__dlpack__", "stream=None", "np.from_dlpack", "to_numpy"],
)
def test_host_access_waits_for_the_last_write(gate, export):
    """SPEC §12.6, §13: reading from the host (stream=None) first waits for
    the storage's last write (here a copy behind a gate), and for nothing
    else: a gate alone does not hold it."""
    q = DeviceQueue(CPU())
    buf = Buffer.zeros((4,), DType.float32, q)
    flag = gate(q)
    returns_promptly(lambda: export(buf))
    buf.inplace_copy_from(Buffer.from_numpy(np.ones(4, np.float32)))
    call = Call(lambda: export(buf))
    assert call.blocked()
    flag.signal(1)
    call.value()


def test_stream_minus_one_does_not_wait(gate):
    """SPEC §13: -1 does no ordering, so nothing to wait for, even with the
    buffer's last write pending (which stream=None waits for)."""
    q = DeviceQueue(CPU())
    buf = Buffer.zeros((4,), DType.float32, q)
    flag = gate(q)
    buf.inplace_copy_from(Buffer.from_numpy(np.ones(4, np.float32)))
    cap = returns_promptly(lambda: buf.__dlpack__(stream=-1, max_version=(1, 0)))
    assert tensor(cap).data == buf._data_ptr()
    waiting = Call(lambda: buf.__dlpack__(stream=None))
    assert waiting.blocked(), "the positive control did not wait"
    flag.signal(1)
    waiting.value()


@pytest.mark.parametrize("stream", [0, 1, 2, 3, -2, 2**40, 2**64])
def test_cpu_refuses_other_streams(stream):
    with pytest.raises(BufferError):
        Buffer.zeros((3,), DType.int32).__dlpack__(stream=stream)


@pytest.mark.parametrize("stream", ["0", 1.5, True, object()])
def test_stream_of_another_type_is_a_type_error(stream):
    with pytest.raises(TypeError):
        Buffer.zeros((3,), DType.int32).__dlpack__(stream=stream)


def test_dl_device_cpu_is_the_same_memory():
    buf = Buffer.zeros((3,), DType.int32)

    class Kind(enum.IntEnum):  # as NumPy and JAX pass it
        kDLCPU = 1

    for dl_device in [(1, 0), (Kind.kDLCPU, 0)]:
        m = payload(buf.__dlpack__(max_version=(1, 0), dl_device=dl_device))
        assert m.dl_tensor.data == buf._data_ptr()
        assert m.flags & IS_COPIED == 0


@pytest.mark.parametrize(
    "dl_device", [(2, 0), (1, 1), (10, 0), (3, 0), (11, 0), (13, 0), (1, -1)]
)
def test_dl_device_elsewhere_is_a_buffer_error(dl_device):
    with pytest.raises(BufferError):
        Buffer.zeros((3,), DType.int32).__dlpack__(dl_device=dl_device)


@pytest.mark.parametrize("dl_device", ["cpu", (1,), (1, 0, 0), ("1", 0), 1])
def test_malformed_dl_device_is_a_type_error(dl_device):
    with pytest.raises(TypeError):
        Buffer.zeros((3,), DType.int32).__dlpack__(dl_device=dl_device)


@pytest.mark.parametrize("max_version", ["1.0", 1, (1,), ("1", 0)])
def test_malformed_max_version_is_a_type_error(max_version):
    with pytest.raises(TypeError):
        Buffer.zeros((3,), DType.int32).__dlpack__(max_version=max_version)


def test_dlpack_takes_keywords_only():
    with pytest.raises(TypeError):
        Buffer.zeros((3,), DType.int32).__dlpack__(None)
    with pytest.raises(TypeError):
        Buffer.zeros((3,), DType.int32).__dlpack__(strem=None)


def test_copy_true_exports_a_flagged_copy():
    buf, ref = filled(DType.float64, (2, 3))
    cap = buf.__dlpack__(max_version=(1, 0), copy=True)
    m = payload(cap)
    assert m.flags & IS_COPIED
    assert m.flags & READ_ONLY == 0
    assert m.dl_tensor.data != buf._data_ptr()
    arr = np.from_dlpack(Holder(cap))
    assert np.array_equal(arr, ref)
    arr[0, 0] = 99.0  # the copy is the consumer's: the buffer is untouched
    assert buf[0, 0].item() == ref[0, 0]


def test_copy_true_is_complete_while_the_cpu_default_queue_is_gated(gate):
    """The copy is the consumer's to read at once: it is made on a queue of
    its own, never left pending behind a busy or gated CPU queue."""
    buf, ref = filled(DType.int32, (64,))
    buf = buf.to(DeviceQueue(CPU()))
    gate(CPU().default_queue)
    cap = returns_promptly(lambda: buf.__dlpack__(max_version=(1, 0), copy=True))
    assert np.array_equal(np.from_dlpack(Holder(cap)), ref)


def test_copy_true_of_a_view_is_a_contiguous_copy():
    buf, ref = filled(DType.int32, (4, 4))
    cap = buf[::-1, 1::2].__dlpack__(max_version=(1, 0), copy=True)
    assert payload(cap).flags & IS_COPIED
    assert np.array_equal(np.from_dlpack(Holder(cap)), ref[::-1, 1::2])


def test_copy_true_in_a_legacy_capsule_is_still_a_copy():
    buf, ref = filled(DType.int32, (3,))
    cap = buf.__dlpack__(copy=True)
    assert capsule_name(cap) == LEGACY
    assert tensor(cap).data != buf._data_ptr()
    assert np.array_equal(np.from_dlpack(Holder(cap)), ref)


def test_copy_false_on_the_cpu_is_zero_copy():
    buf = Buffer.zeros((3,), DType.int32)
    m = payload(buf.__dlpack__(max_version=(1, 0), copy=False))
    assert m.dl_tensor.data == buf._data_ptr()
    assert m.flags == 0


# --------------------------------------------------------------------------
# Zero-copy round trips with NumPy


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_from_dlpack_is_a_writable_alias(dtype, shape):
    buf, ref = filled(dtype, shape)
    arr = np.from_dlpack(buf)
    assert arr.dtype == NUMPY_OF[dtype]
    assert arr.shape == shape
    assert arr.flags.writeable
    assert np.array_equal(arr, ref)
    if arr.size:
        assert arr.ctypes.data == buf._data_ptr()
        index = (0,) * len(shape)
        new = not ref[index] if dtype is DType.bool else 42
        arr[index] = new
        assert buf[index].item() == new


@pytest.mark.parametrize("dtype", [*NUMPY_DTYPES, DType.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_to_numpy_is_a_writable_alias(dtype, shape):
    buf = Buffer.zeros(shape, dtype)
    arr = buf.to_numpy()
    expected = ml_dtypes.bfloat16 if dtype is DType.bfloat16 else NUMPY_OF[dtype]
    assert arr.dtype == np.dtype(expected)
    assert arr.shape == shape
    assert arr.flags.writeable
    if arr.size:
        assert arr.ctypes.data == buf._data_ptr()
        index = (0,) * len(shape)
        arr[index] = 1
        assert buf[index].item() == 1
        buf[index] = 0
        assert arr[index] == 0


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_to_numpy_of_float8_is_raw_bytes(dtype):
    buf = Buffer.zeros((2, 3), dtype)
    arr = buf.to_numpy()
    assert arr.dtype == np.uint8 and arr.shape == (2, 3)
    assert arr.ctypes.data == buf._data_ptr()
    arr[1, 2] = 0x38
    assert buf.view(DType.uint8)[1, 2].item() == 0x38


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_from_numpy_and_from_dlpack_are_writable_aliases(dtype, shape):
    for make in (Buffer.from_numpy, Buffer.from_dlpack):
        arr = sample_array(dtype, shape)
        buf = make(arr)
        assert buf.dtype is dtype
        assert buf.shape == shape
        assert buf.device == CPU()
        if arr.size:  # (the strides of empty views are left open)
            assert buf.strides == contiguous_strides(shape)
            assert buf._data_ptr() == arr.ctypes.data
            index = (0,) * len(shape)
            buf[index] = 0
            assert arr[index] == 0
            arr[index] = 1
            assert buf[index].item() == 1


@pytest.mark.parametrize("dtype", [DType.bfloat16, *FLOAT8], ids=str)
def test_from_numpy_of_ml_dtypes_is_zero_copy(dtype):
    arr = np.zeros((2, 3), dtype=getattr(ml_dtypes, dtype.name))
    buf = Buffer.from_numpy(arr)
    assert buf.dtype is dtype
    assert buf._data_ptr() == arr.ctypes.data
    buf[1, 1] = 1.0
    assert float(arr[1, 1]) == 1.0


def test_round_trip_through_numpy_keeps_the_memory():
    arr = sample_array(DType.int64, (5, 2))
    out = np.from_dlpack(Buffer.from_dlpack(arr))
    assert np.shares_memory(out, arr)
    out2 = Buffer.from_numpy(arr).to_numpy()
    assert np.shares_memory(out2, arr)


def test_numpy_asarray_is_the_same_alias():
    """SPEC §13 [beyond MAX]: numpy.asarray(buf) aliases as from_dlpack."""
    buf, ref = filled(DType.float32, (2, 3))
    arr = np.asarray(buf)
    assert arr.dtype == np.float32 and arr.shape == (2, 3)
    assert arr.ctypes.data == buf._data_ptr()
    arr[1, 2] = -1.0
    assert buf[1, 2].item() == -1.0
    ref[1, 2] = -1.0
    view = np.asarray(buf[::-1, 1:])
    assert np.array_equal(view, ref[::-1, 1:])
    assert np.shares_memory(view, arr)


# --------------------------------------------------------------------------
# Lifetime of exports (SPEC §12.7)


def test_to_numpy_base_keeps_the_memory_after_the_buffer_is_gone():
    buf, ref = filled(DType.int32, (1024,))
    arr = buf.to_numpy()
    exported = np.from_dlpack(buf)
    assert arr.base is not None
    del buf
    gc.collect()
    # Had the memory been freed, these allocations would likely reuse it.
    others = [Buffer.zeros((1024,), DType.int32) for _ in range(8)]
    assert np.array_equal(arr, ref)
    assert np.array_equal(exported, ref)
    arr[0] = -5
    assert exported[0] == -5
    del others


def test_an_unconsumed_capsule_keeps_then_releases_the_memory():
    """The exported memory stays alive until the deleter runs (here: the
    capsule's destructor, nobody consumed it).  Observable through a
    from_numpy buffer: its memory holds the NumPy array."""
    src = np.arange(16.0)
    base = sys.getrefcount(src)
    buf = Buffer.from_numpy(src)
    assert sys.getrefcount(src) > base
    caps = [buf.__dlpack__(), buf.__dlpack__(max_version=(1, 0))]
    del buf
    gc.collect()
    assert sys.getrefcount(src) > base  # the capsules hold the memory
    caps.pop()
    gc.collect()
    assert sys.getrefcount(src) > base
    caps.pop()
    assert wait_until(lambda: sys.getrefcount(src) == base)


def test_a_consumed_capsule_is_released_by_its_consumer():
    src = np.arange(16.0)
    base = sys.getrefcount(src)
    buf = Buffer.from_numpy(src)
    arr = np.from_dlpack(buf)
    del buf
    gc.collect()
    assert sys.getrefcount(src) > base
    del arr
    assert wait_until(lambda: sys.getrefcount(src) == base)


def test_consumption_renames_the_capsule():
    buf, ref = filled(DType.int8, (4,))
    for max_version, used in [((1, 0), "used_" + VERSIONED), (None, "used_" + LEGACY)]:
        cap = buf.__dlpack__(max_version=max_version)
        imported = Buffer.from_dlpack(Holder(cap))
        assert capsule_name(cap) == used
        assert imported._data_ptr() == buf._data_ptr()
        cap2 = buf.__dlpack__(max_version=max_version)
        np.from_dlpack(Holder(cap2))
        assert capsule_name(cap2) == used


def test_capsule_consumed_after_buffer_and_queue_are_gone():
    q = DeviceQueue(CPU())
    buf = Buffer(DType.float32, (3, 4), q)
    ref = sample_array(DType.float32, (3, 4))
    buf.to_numpy()[...] = ref
    caps = [buf.__dlpack__(max_version=(1, 0)), buf[1:, :].__dlpack__()]
    del buf, q
    gc.collect()
    assert np.array_equal(np.from_dlpack(Holder(caps[0])), ref)
    imported = Buffer.from_dlpack(Holder(caps[1]))
    assert np.array_equal(imported.to_numpy(), ref[1:])


def test_strided_capsule_after_buffer_is_gone_reaches_numpy():
    q = DeviceQueue(CPU())
    buf = Buffer(DType.float32, (3, 4), q)
    ref = sample_array(DType.float32, (3, 4))
    buf.to_numpy()[...] = ref
    cap = buf[1:, ::-1].__dlpack__()
    del buf, q
    gc.collect()
    assert np.array_equal(np.from_dlpack(Holder(cap)), ref[1:, ::-1])


def test_capsule_consumed_on_another_thread():
    buf, ref = filled(DType.uint16, (8, 8))
    caps = [buf.__dlpack__(max_version=(1, 0)) for _ in range(4)]
    del buf
    results = []

    def consume(i, cap):
        if i % 2:
            results.append(np.from_dlpack(Holder(cap)))
        else:
            results.append(Buffer.from_dlpack(Holder(cap)).to_numpy())

    threads = [threading.Thread(target=consume, args=a) for a in enumerate(caps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(results) == 4
    assert all(np.array_equal(a, ref) for a in results)
    assert all(capsule_name(c) == "used_" + VERSIONED for c in caps)


# --------------------------------------------------------------------------
# Buffer.from_dlpack


def test_from_dlpack_of_a_buffer_is_the_buffer():
    buf, ref = filled(DType.int32, (2, 2))
    assert Buffer.from_dlpack(buf) is buf
    assert Buffer.from_dlpack(buf, copy=False) is buf
    view = buf[::-1, :]
    assert Buffer.from_dlpack(view) is view  # as is, even strided


@pytest.mark.parametrize("which", ["whole", "strided view"])
def test_from_dlpack_copy_true_of_a_buffer_copies(which):
    buf, ref = filled(DType.int32, (3, 4))
    src, expected = (buf, ref) if which == "whole" else (buf[::-1, ::2], ref[::-1, ::2])
    copy = Buffer.from_dlpack(src, copy=True)
    assert copy is not src and isinstance(copy, Buffer)
    assert copy._data_ptr() != src._data_ptr()
    assert np.array_equal(copy.to_numpy(), expected)
    copy[0, 0] = -1
    assert src[0, 0].item() == expected[0, 0]


@pytest.mark.parametrize("versioned", [True, False])
def test_an_import_of_our_export_shares_its_record(gate, versioned):
    """SPEC §13: a capsule this module exported comes back over the same
    storage and record, so the import's host reads wait for a write made
    through the exporter on another queue later (and a view's offset is
    kept)."""
    buf, _ = filled(DType.int32, (8,))
    view = buf[2:6]
    cap = view.__dlpack__(max_version=(1, 0) if versioned else None)
    imported = Buffer.from_dlpack(Holder(cap))
    assert capsule_name(cap).startswith("used_")
    assert imported._data_ptr() == view._data_ptr()
    assert imported.stream is CPU().default_queue
    writer = buf.to(DeviceQueue(CPU()))
    flag = gate(writer.stream)
    ref = np.arange(50, 58, dtype=np.int32)
    writer.inplace_copy_from(Buffer.from_numpy(ref))  # pending behind the gate
    read = Call(imported.to_numpy)
    assert read.blocked()
    flag.signal(1)
    assert np.array_equal(read.value(), ref[2:6])
    del buf, view, writer
    gc.collect()
    imported[0] = 7  # the storage lives on through the import
    assert imported[0].item() == 7


def test_from_dlpack_asks_for_a_versioned_capsule_with_the_cpu_stream():
    buf, _ = filled(DType.int32, (3,))
    holder = Holder(buf.__dlpack__(max_version=(1, 0)))
    Buffer.from_dlpack(holder)
    assert holder.calls == [{"max_version": (1, 0), "stream": None}]


def test_from_dlpack_falls_back_for_producers_without_max_version():
    buf, ref = filled(DType.int32, (3,))
    holder = Holder(buf.__dlpack__(), legacy_signature=True)
    imported = Buffer.from_dlpack(holder)
    assert np.array_equal(imported.to_numpy(), ref)
    assert holder.calls == [{"max_version": (1, 0), "stream": None}, {"stream": None}]


def test_from_dlpack_passes_on_other_type_errors():
    class Broken:
        def __dlpack__(self, **kwargs):
            raise TypeError("broken producer")

        def __dlpack_device__(self):
            return (KDL_CPU, 0)

    with pytest.raises(TypeError, match="broken producer"):
        Buffer.from_dlpack(Broken())


@pytest.mark.parametrize("copy", [True, False])
def test_from_dlpack_copy_for_other_producers_is_a_value_error(copy):
    buf, _ = filled(DType.int32, (3,))
    holder = Holder(buf.__dlpack__(max_version=(1, 0)))
    with pytest.raises(ValueError):
        Buffer.from_dlpack(holder, copy=copy)
    assert holder.calls == []  # nothing asked of the producer


def test_from_dlpack_copy_of_numpy():
    arr = sample_array(DType.float32, (2, 3))
    copy = Buffer.from_dlpack(arr, copy=True)
    assert copy._data_ptr() != arr.ctypes.data
    assert np.array_equal(copy.to_numpy(), arr)
    same = Buffer.from_dlpack(arr, copy=False)
    assert same._data_ptr() == arr.ctypes.data


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(10)[::2],
        np.arange(12).reshape(3, 4)[:, 1:],
        np.arange(12).reshape(3, 4).T,
        np.arange(6)[::-1],
    ],
    ids=["step", "columns", "transposed", "reversed"],
)
def test_from_dlpack_of_non_contiguous_numpy(arr):
    with pytest.raises(ValueError, match=NOT_CONTIGUOUS_NUMPY.replace(".", r"\.")):
        Buffer.from_dlpack(arr)


def test_from_dlpack_of_non_contiguous_other_producers():
    buf, _ = filled(DType.int32, (4, 4))
    for view in (buf[:, ::2], buf[::-1, :]):
        holder = Holder(view.__dlpack__(max_version=(1, 0)))
        with pytest.raises(ValueError, match=NOT_CONTIGUOUS) as raised:
            Buffer.from_dlpack(holder)
        assert "ascontiguousarray" not in str(raised.value)  # NumPy's only


def test_from_dlpack_of_read_only_numpy():
    arr = sample_array(DType.int32, (4,))
    arr.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):  # as MAX 26.7
        Buffer.from_dlpack(arr, copy=False)
    copy = Buffer.from_dlpack(arr)  # copy=None: copied
    assert copy._data_ptr() != arr.ctypes.data
    assert np.array_equal(copy.to_numpy(), arr)
    copy[0] = 100  # ours, writable
    assert arr[0] != 100


def test_from_dlpack_of_a_read_only_capsule_copies_and_releases_it():
    backing = sample_array(DType.int32, (6,))
    p = CtypesProducer(backing.ctypes.data, (6,), DType.int32, flags=READ_ONLY)
    copy = Buffer.from_dlpack(p)
    assert copy._data_ptr() != backing.ctypes.data
    assert np.array_equal(copy.to_numpy(), backing)
    # The producer's tensor is no longer needed once copied.
    assert wait_until(lambda: p.deleted == 1)


def test_from_dlpack_of_a_device_this_backend_does_not_drive():
    buf, _ = filled(DType.int32, (3,))
    holder = Holder(buf.__dlpack__(max_version=(1, 0)), device=undriven_device())
    with pytest.raises(BufferError):
        Buffer.from_dlpack(holder)
    assert holder.calls == []  # refused before a capsule was asked for


@pytest.mark.parametrize("device", [(KDL_CPU,), "cpu", (KDL_CPU, "0"), None])
def test_from_dlpack_with_a_malformed_dlpack_device(device):
    buf, _ = filled(DType.int32, (3,))
    with pytest.raises(BufferError):
        Buffer.from_dlpack(Holder(buf.__dlpack__(), device=device))


def test_from_dlpack_without_the_protocol_is_an_error():
    with pytest.raises((TypeError, AttributeError)):
        Buffer.from_dlpack(object())
    with pytest.raises(TypeError):
        Buffer.from_dlpack()


def test_from_dlpack_of_something_that_is_no_capsule():
    with pytest.raises(BufferError):
        Buffer.from_dlpack(Holder(42))
    with pytest.raises(BufferError):
        Buffer.from_dlpack(Holder(ctypes.pythonapi))  # not even a capsule


# --------------------------------------------------------------------------
# Foreign producers: zero-copy, kept alive, the deleter called exactly once


def test_foreign_tensor_is_imported_zero_copy():
    backing = sample_array(DType.float64, (3, 4))
    p = CtypesProducer(backing.ctypes.data, (3, 4), DType.float64, keep=backing)
    buf = Buffer.from_dlpack(p)
    assert buf._data_ptr() == backing.ctypes.data
    assert buf.shape == (3, 4) and buf.dtype is DType.float64
    assert np.array_equal(buf.to_numpy(), backing)
    buf[1, 1] = -2.0
    assert backing[1, 1] == -2.0
    assert p.calls == [{"max_version": (1, 0), "stream": None}]


@pytest.mark.parametrize("versioned", [True, False])
def test_deleter_runs_once_when_the_last_user_is_gone(versioned):
    backing = sample_array(DType.int32, (8,))
    p = CtypesProducer(backing.ctypes.data, (8,), DType.int32, versioned=versioned)
    buf = Buffer.from_dlpack(p)
    view = buf[2:5]
    arr = buf.to_numpy()
    del buf
    gc.collect()
    assert p.deleted == 0
    del view
    gc.collect()
    assert p.deleted == 0  # the NumPy alias still uses it
    del arr
    assert wait_until(lambda: p.deleted == 1)
    time.sleep(0.05)
    assert p.deleted == 1 and list(p.deletions.values()) == [1]


def test_a_capsule_consumed_twice_is_refused_the_second_time():
    backing = sample_array(DType.int32, (4,))
    p = CtypesProducer(backing.ctypes.data, (4,), DType.int32)
    cap = p.capsule()
    holder = Holder(cap)
    first = Buffer.from_dlpack(holder)
    with pytest.raises(BufferError):
        Buffer.from_dlpack(holder)
    assert capsule_name(cap) == "used_" + VERSIONED
    del first
    assert wait_until(lambda: p.deleted == 1)
    del holder, cap
    gc.collect()
    time.sleep(0.05)
    assert p.deleted == 1  # not again by the used capsule's destructor


def test_a_refused_import_leaves_the_capsule_to_its_producer():
    backing = np.zeros(12, np.int32)
    p = CtypesProducer(backing.ctypes.data, (3, 2), DType.int32, strides=(4, 2))
    holder = Holder(p.capsule())
    with pytest.raises(ValueError):
        Buffer.from_dlpack(holder)  # strided
    assert capsule_name(holder.capsules[0]) == VERSIONED  # not consumed
    gc.collect()
    assert p.deleted == 0  # its producer's to free


def test_the_producer_is_kept_alive():
    arr = sample_array(DType.int16, (5,))
    alive = weakref.ref(arr)
    buf = Buffer.from_dlpack(arr)
    del arr
    gc.collect()
    assert alive() is not None
    assert np.array_equal(buf.to_numpy(), sample_array(DType.int16, (5,)))
    del buf
    assert wait_until(lambda: (gc.collect(), alive() is None)[1])


def test_foreign_layouts():
    backing = sample_array(DType.int32, (12,))
    addr = backing.ctypes.data
    # Explicit C-order strides, a byte offset, and a 0-d tensor.
    p = CtypesProducer(addr, (3, 4), DType.int32, strides=(4, 1))
    assert np.array_equal(Buffer.from_dlpack(p).to_numpy(), backing.reshape(3, 4))
    p = CtypesProducer(addr, (2,), DType.int32, byte_offset=8)
    assert Buffer.from_dlpack(p).to_numpy().tolist() == backing[2:4].tolist()
    p = CtypesProducer(addr, (), DType.int32)
    assert Buffer.from_dlpack(p).item() == backing[0]
    # Size-1 dimensions may carry any stride and still be contiguous.
    p = CtypesProducer(addr, (1, 4), DType.int32, strides=(99, 1))
    assert Buffer.from_dlpack(p).to_numpy().tolist() == [backing[:4].tolist()]


@pytest.mark.parametrize("dtype", list(DL_DTYPE), ids=str)
def test_foreign_dtype_codes(dtype):
    backing = np.zeros(8, np.uint8)
    p = CtypesProducer(backing.ctypes.data, (2,), dtype)
    assert Buffer.from_dlpack(p).dtype is dtype


@pytest.mark.parametrize(
    "kwargs",
    [
        {"version": (2, 0)},
        {"version": (0, 9)},
        {"lanes": 4},
        {"dtype": (5, 64)},  # complex
        {"dtype": (2, 24)},  # no 24-bit float
        {"dtype": (0, 7)},
    ],
    ids=str,
)
def test_foreign_tensors_we_cannot_read_are_refused(kwargs):
    backing = np.zeros(64, np.uint8)
    p = CtypesProducer(backing.ctypes.data, (2,), **kwargs)
    holder = Holder(p.capsule())
    with pytest.raises(BufferError):
        Buffer.from_dlpack(holder)
    assert capsule_name(holder.capsules[0]) == VERSIONED  # left unconsumed
    gc.collect()
    assert p.deleted == 0


def test_foreign_tensor_with_too_many_dimensions_is_refused():
    backing = np.zeros(1, np.uint8)
    p = CtypesProducer(backing.ctypes.data, (1,) * 65, DType.uint8)
    with pytest.raises(BufferError):
        Buffer.from_dlpack(p)


# --------------------------------------------------------------------------
# Child processes: no crash, correct data, whatever is left at exit

CHILD = r"""
import gc, sys, threading
import numpy as np
sys.path.insert(0, "tests")
from dlpack_support import CtypesProducer, Holder
from max.driver import CPU, Buffer, DeviceQueue
from max.dtype import DType

q = DeviceQueue(CPU())
buf = Buffer(DType.int32, (4, 4), q)
ref = np.arange(16, dtype=np.int32).reshape(4, 4)
buf.to_numpy()[...] = ref
caps = [buf.__dlpack__(max_version=(1, 0)) for _ in range(6)] + [buf.__dlpack__()]
view_caps = [buf[::-1, ::2].__dlpack__(max_version=(1, 0)) for _ in range(2)]
del buf, q
gc.collect()
out = []
def consume(cap):
    out.append(np.array_equal(np.from_dlpack(Holder(cap)), ref))
threads = [threading.Thread(target=consume, args=(c,)) for c in caps[:3]]
for t in threads: t.start()
for t in threads: t.join()
imported = Buffer.from_dlpack(Holder(caps[3]))
out.append(np.array_equal(imported.to_numpy(), ref))
out.append(np.array_equal(np.from_dlpack(Holder(view_caps[0])), ref[::-1, ::2]))
backing = np.arange(8, dtype=np.float32)
p = CtypesProducer(backing.ctypes.data, (8,), DType.float32, keep=backing)
kept = Buffer.from_dlpack(p)   # alive at exit
out.append(kept[3].item() == 3.0)
print("OK" if all(out) and len(out) == 6 else f"BAD {out}")
sys.stdout.flush()
# caps[4:], view_caps[1] never consumed; `imported`, `kept` alive at exit.
"""


def test_capsules_in_a_child_process(run_py):
    r = run_py(CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK", (r.stdout, r.stderr)
    assert "Fatal" not in r.stderr and "Traceback" not in r.stderr, r.stderr


CHILD_CONSUMED_AT_EXIT = r"""
import sys, threading
import numpy as np
sys.path.insert(0, "tests")
from dlpack_support import Holder
from max.driver import CPU, Buffer, DeviceQueue
from max.dtype import DType

buf = Buffer.zeros((1 << 16,), DType.float32, DeviceQueue(CPU()))
caps = [buf.__dlpack__(max_version=(1, 0)) for _ in range(50)]
arrays = []
def spin():
    for c in caps:
        arrays.append(np.from_dlpack(Holder(c)))
t = threading.Thread(target=spin, daemon=True)
t.start()
print("EXITING")
sys.stdout.flush()
# The interpreter exits while the thread may still be consuming.
"""


def test_capsules_consumed_while_the_interpreter_exits(run_py):
    for _ in range(3):
        r = run_py(CHILD_CONSUMED_AT_EXIT, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "EXITING" in r.stdout
        assert "Fatal" not in r.stderr, r.stderr
