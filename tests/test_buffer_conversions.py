"""float(), int(), complex(), bool(), operator.index() and bytes() of a
Buffer: as NumPy 2 converts an array, each through item(), never through
the buffer protocol's bytes (issue 26: float() of a float32 buffer parsed
its bytes as text and failed; int() of a uint8 buffer holding b"42"
returned 42)."""

from __future__ import annotations

import operator
import struct
import threading
import warnings

import numpy as np
import pytest

from max.driver import CPU, Buffer, CompletionFlag, DeviceQueue
from max.dtype import DType

CONVERSIONS = [float, int, complex, bool, operator.index]


def _outcome(fn, value):
    """("value", its type, its repr) or ("raises", the exception type).

    NumPy before 2.4 still converted arrays of rank 1 or more holding one
    element, with a DeprecationWarning; 2.4 ended the deprecation with a
    TypeError, the behaviour to match."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            result = fn(value)
    except DeprecationWarning:
        return "raises", TypeError
    except Exception as exc:  # the type is the behaviour
        return "raises", type(exc)
    return "value", type(result), repr(result)  # repr: NaN equals NaN


ARRAYS = [
    np.array(2.5, np.float32),
    np.array(-7, np.int8),
    np.array(200, np.uint8),
    np.array(2**63 - 1, np.int64),
    np.array(2**64 - 1, np.uint64),
    np.array(True),
    np.array(False),
    np.array(0.0, np.float64),
    np.array(1.5, np.float16),
    np.array(float("nan"), np.float32),
    np.array(float("inf"), np.float64),
    np.array([2.5], np.float32),
    np.array([[7]], np.uint8),
    np.array([1, 2], np.int32),
    np.zeros((0,), np.float32),
    np.zeros((2, 0), np.int16),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
@pytest.mark.parametrize("fn", CONVERSIONS, ids=lambda f: f.__name__)
def test_as_numpy_does(fn, array):
    """The same value, or the same exception type, as NumPy's own array."""
    buf = Buffer.from_numpy(array.copy())
    assert _outcome(fn, buf) == _outcome(fn, array)


def test_bytes_are_never_parsed_as_text():
    text = Buffer.from_numpy(np.frombuffer(b"42", np.uint8).copy())
    with pytest.raises(TypeError, match="only 0-dimensional buffers"):
        int(text)
    with pytest.raises(TypeError, match="only 0-dimensional buffers"):
        float(text)
    four = Buffer.scalar(ord("4"), DType.uint8)  # b"4" in memory
    assert int(four) == 52 and float(four) == 52.0
    assert float(Buffer.scalar(2.5, DType.float32)) == 2.5


def test_messages_say_what_to_do():
    one = Buffer.zeros((1,), DType.float32)
    with pytest.raises(TypeError, match=r"rank 1 .*item\(\) reads its one element"):
        float(one)
    with pytest.raises(TypeError) as info:
        int(Buffer.zeros((2,), DType.int8))
    assert "item()" not in str(info.value)
    with pytest.raises(ValueError, match="empty buffer is ambiguous"):
        bool(Buffer.zeros((0,), DType.int8))
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(Buffer.zeros((2,), DType.int8))
    with pytest.raises(TypeError, match="integer dtype.*float32"):
        operator.index(Buffer.scalar(1, DType.float32))


def test_types_numpy_lacks_convert_through_item():
    half = Buffer.scalar(1.5, DType.bfloat16)
    assert float(half) == 1.5 and int(half) == 1 and complex(half) == 1.5 + 0j
    assert bool(Buffer.scalar(0.0, DType.float8_e4m3fn)) is False
    with pytest.raises(TypeError):
        operator.index(half)


def test_an_index_is_accepted_where_an_int_is():
    five = Buffer.scalar(5, DType.int32)
    assert list(range(five)) == [0, 1, 2, 3, 4]
    assert "abcdefg"[five] == "f"
    flag = CompletionFlag(CPU())
    flag.signal(Buffer.scalar(2**64 - 1, DType.uint64))
    assert flag.load() == 2**64 - 1


def test_bytes_is_the_contents():
    """bytes() tries __index__ before the buffer protocol: without
    __bytes__, bytes() of this buffer would be three zero bytes."""
    assert bytes(Buffer.scalar(3, DType.int32)) == struct.pack("=i", 3)
    assert bytes(np.array(3, np.int32)) == bytes(3)  # NumPy's trap
    data = np.arange(4, dtype=np.int16)
    assert bytes(Buffer.from_numpy(data)) == data.tobytes()


def test_a_conversion_waits_for_the_copy_into_the_buffer(gate):
    """Through item(): the host read waits for the pending write."""
    queue = DeviceQueue(CPU())
    dst = Buffer(DType.float64, (), queue)
    dst[()] = 1.0
    flag = gate(queue)
    dst.inplace_copy_from(Buffer.scalar(2.0, DType.float64))
    timer = threading.Timer(0.1, flag.signal, args=(1,))
    timer.start()
    try:
        assert float(dst) == 2.0  # waited for the gated copy
    finally:
        timer.join()
    queue.synchronize(timeout=10)
