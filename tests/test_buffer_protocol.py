"""SPEC §15: the buffer protocol (PEP 3118) of host-accessible Buffers.

Checked with the standard library's consumers (memoryview, bytes,
bytearray, struct, ctypes, pickle.PickleBuffer) and NumPy's: the export's
format, shape and byte strides, the raw-bytes export of the dtypes struct
cannot describe, the refusals, the host-read wait and the lifetime of the
exported memory.  Device memory is refused in tests/accelerator.
"""

from __future__ import annotations

import ctypes
import gc
import pickle
import struct

import numpy as np
import pytest
from buffer_support import (
    FLOAT8,
    FLOAT8_BYTES,
    NUMPY_DTYPES,
    NUMPY_OF,
    SUB_BYTE,
    Call,
    sample_array,
)

from max.driver import CPU, Buffer, DeviceQueue
from max.dtype import DType

# SPEC §15: the struct format of each dtype that has one.
FORMATS = {
    DType.bool: "?",
    DType.int8: "b",
    DType.uint8: "B",
    DType.int16: "h",
    DType.uint16: "H",
    DType.int32: "i",
    DType.uint32: "I",
    DType.int64: "q",
    DType.uint64: "Q",
    DType.float16: "e",
    DType.float32: "f",
    DType.float64: "d",
}
RAW = [DType.bfloat16, *FLOAT8, *SUB_BYTE]


def filled(dtype: DType, shape: tuple[int, ...]) -> tuple[Buffer, np.ndarray]:
    values = sample_array(dtype, shape)
    return Buffer.from_numpy(values), values


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_memoryview_has_the_struct_format_shape_and_byte_strides(dtype):
    buf, values = filled(dtype, (2, 3))
    m = memoryview(buf)
    assert m.format == FORMATS[dtype]
    assert m.itemsize == NUMPY_OF[dtype].itemsize == struct.calcsize(m.format)
    assert m.shape == (2, 3)
    assert m.strides == values.strides
    assert m.ndim == 2
    assert not m.readonly
    assert m.nbytes == values.nbytes
    assert np.array_equal(np.asarray(m), values)
    if dtype is not DType.float16:  # memoryview.tolist() knows "e" from 3.12
        assert m.tolist() == values.tolist()
    assert m.obj is buf


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_views_export_their_strides_in_bytes(dtype):
    buf, values = filled(dtype, (4, 6))
    for view, ref in [
        (buf[1:3, :], values[1:3, :]),
        (buf[:, 1::2], values[:, 1::2]),
        (buf[::-1, ::-2], values[::-1, ::-2]),
        (buf[2, :], values[2, :]),
        (buf[1, 4], values[1, 4]),  # rank 0
    ]:
        m = memoryview(view)
        assert m.shape == ref.shape
        assert m.strides == ref.strides
        assert np.array_equal(np.asarray(m), ref)


@pytest.mark.parametrize("dtype", RAW, ids=str)
def test_dtypes_without_a_struct_format_export_raw_bytes(dtype):
    buf = Buffer.zeros((2, 3), dtype)
    m = memoryview(buf)
    assert (m.format, m.itemsize, m.ndim) == ("B", 1, 1)
    assert m.shape == (buf.num_elements * buf.element_size,)
    assert bytes(buf) == bytes(m.nbytes)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_bytes_are_the_elements_encoding(dtype):
    buf = Buffer(dtype, (len(FLOAT8_BYTES[dtype]),))
    for i, value in enumerate(FLOAT8_BYTES[dtype]):
        buf[i] = value
    assert bytes(buf) == bytes(FLOAT8_BYTES[dtype].values())


def test_bfloat16_bytes_are_host_order_halves():
    buf = Buffer(DType.bfloat16, (2,))
    buf[0], buf[1] = 1.0, -2.0
    assert struct.unpack("=2H", bytes(buf)) == (0x3F80, 0xC000)


@pytest.mark.parametrize("dtype", RAW, ids=str)
def test_a_strided_view_without_a_struct_format_is_refused_naming_the_dtype(dtype):
    buf = Buffer.zeros((3, 4), dtype)
    for view in (buf[:, ::2], buf[::-1, :]):
        with pytest.raises(BufferError, match=f"DType.{dtype.name}"):
            memoryview(view)
        with pytest.raises(BufferError, match="contiguous"):
            bytes(view)
    # Contiguous views of it export.
    assert memoryview(buf[1:, :]).nbytes == 2 * 4 * buf.element_size


def test_standard_library_consumers():
    buf, values = filled(DType.float32, (2, 3))
    assert bytes(buf) == values.tobytes()
    assert bytearray(buf) == bytearray(values.tobytes())
    assert struct.unpack_from("3f", buf, 12) == (4.0, 5.0, 6.0)
    # bytes() of a strided view copies it in C order.
    assert bytes(buf[:, ::2]) == values[:, ::2].tobytes()


def test_numpy_frombuffer_aliases_the_memory():
    buf, values = filled(DType.int32, (6,))
    arr = np.frombuffer(buf, dtype=np.int32)
    assert arr.tolist() == values.tolist()
    assert arr.ctypes.data == buf._data_ptr()
    arr[0] = -7  # np.frombuffer of a writable export is writable
    assert buf[0].item() == -7


def test_writes_through_a_memoryview_reach_the_buffer():
    buf = Buffer.zeros((2, 2), DType.int16)
    m = memoryview(buf)
    m[1, 0] = 42
    assert buf[1, 0].item() == 42
    m.cast("B")[0] = 1
    assert buf[0, 0].item() == 1


def test_ctypes_aliases_a_contiguous_export():
    buf, _ = filled(DType.uint8, (4, 4))
    arr = (ctypes.c_uint8 * 16).from_buffer(buf)
    arr[5] = 200
    assert buf[1, 1].item() == 200
    with pytest.raises(TypeError, match="contiguous"):  # ctypes' own check
        (ctypes.c_uint8 * 8).from_buffer(buf[:, ::2])


def test_contiguity_requests():
    buf, _ = filled(DType.float64, (3, 4))
    assert pickle.PickleBuffer(buf).raw().nbytes == 96  # C-contiguous
    with pytest.raises(BufferError, match="contiguous"):
        pickle.PickleBuffer(buf[:, 1:3]).raw()
    col = memoryview(buf[:, 1])
    assert not col.c_contiguous and col.tolist() == [2.0, 6.0, 10.0]
    assert memoryview(buf[1, :]).contiguous


def test_empty_and_rank_zero_buffers():
    empty = memoryview(Buffer(DType.float32, (0, 3)))
    assert empty.shape == (0, 3) and empty.nbytes == 0
    assert bytes(Buffer(DType.float32, (0,))) == b""
    scalar = Buffer.scalar(2.5, DType.float64)
    m = memoryview(scalar)
    assert m.ndim == 0 and m.shape == () and m.tolist() == 2.5


def test_the_exported_memory_lives_while_the_export_does():
    buf, values = filled(DType.int64, (1000,))
    m = memoryview(buf[10:20])
    del buf
    gc.collect()
    junk = [Buffer.zeros((1000,), DType.int64) for _ in range(20)]
    assert m.tolist() == values[10:20].tolist()
    m.release()
    del junk


def test_the_buffer_protocol_makes_no_copy_and_holds_no_lock():
    buf, _ = filled(DType.uint16, (8,))
    exports = [memoryview(buf) for _ in range(100)]
    addresses = {np.frombuffer(m, np.uint16).ctypes.data for m in exports}
    assert addresses == {buf._data_ptr()}
    buf[0] = 9  # an export does not stop element writes
    assert exports[-1][0] == 9
    for m in exports:
        m.release()


def test_taking_the_export_waits_as_a_host_read(gate):
    """SPEC §12.6: a copy into the buffer enqueued on a gated queue is the
    buffer's last write; the export waits for it, and then sees it."""
    cpu = CPU()
    q = DeviceQueue(cpu)
    dst = Buffer.zeros((4,), DType.float32, q)
    flag = gate(q)
    src = Buffer.from_numpy(np.arange(4, dtype=np.float32))
    dst.inplace_copy_from(src)  # pageable to pageable: in q's order
    call = Call(lambda: memoryview(dst).tolist())
    assert call.blocked()
    flag.signal(1)
    assert call.value() == [0.0, 1.0, 2.0, 3.0]


def test_bad_flags_from_c_are_buffer_errors():
    """PyObject_GetBuffer with flags no export can meet, through ctypes."""
    api = ctypes.pythonapi

    class PyBuffer(ctypes.Structure):
        _fields_ = [
            ("buf", ctypes.c_void_p),
            ("obj", ctypes.py_object),
            ("len", ctypes.c_ssize_t),
            ("itemsize", ctypes.c_ssize_t),
            ("readonly", ctypes.c_int),
            ("ndim", ctypes.c_int),
            ("format", ctypes.c_char_p),
            ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
            ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
            ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
            ("internal", ctypes.c_void_p),
        ]

    api.PyObject_GetBuffer.argtypes = [
        ctypes.py_object,
        ctypes.POINTER(PyBuffer),
        ctypes.c_int,
    ]
    api.PyBuffer_Release.argtypes = [ctypes.POINTER(PyBuffer)]
    pybuf_strides, pybuf_f_contiguous, pybuf_nd = 0x0008 | 0x0010, 0x0040, 0x0008
    buf, _ = filled(DType.int32, (3, 4))
    view = PyBuffer()
    with pytest.raises(BufferError, match="Fortran"):
        api.PyObject_GetBuffer(buf, ctypes.byref(view), pybuf_f_contiguous | 0x18)
    # PyBUF_ND without strides: the C-contiguous buffer gives its shape only.
    api.PyObject_GetBuffer(buf, ctypes.byref(view), pybuf_nd)
    try:
        assert (view.ndim, view.shape[0], view.shape[1]) == (2, 3, 4)
        assert not view.strides and view.format is None  # no PyBUF_FORMAT
        assert view.len == 48 and view.buf == buf._data_ptr()
    finally:
        api.PyBuffer_Release(ctypes.byref(view))
    # Without strides the consumer assumes C order: a strided view refuses.
    for flags in (0, pybuf_nd):  # PyBUF_SIMPLE, PyBUF_ND
        with pytest.raises(BufferError, match="strided"):
            api.PyObject_GetBuffer(buf[:, ::2], ctypes.byref(view), flags)
    api.PyObject_GetBuffer(buf[:, ::2], ctypes.byref(view), pybuf_strides)
    try:
        assert (view.strides[0], view.strides[1]) == (16, 8)
    finally:
        api.PyBuffer_Release(ctypes.byref(view))
