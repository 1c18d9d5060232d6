"""Reference tables and oracles for the Buffer suites (SPEC §12), written
from the SPEC and NumPy, independent of the implementation under test (in
particular of ``DType.to_numpy``).  Not a test module."""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from max.driver import CPU, Buffer, DeviceQueue
from max.dtype import DType

WAIT = 20.0
# Long enough that work which is (wrongly) not blocked would have run.
NOT_YET = 0.15
# A call the SPEC says "returns at once" must return well within this, even
# on a loaded machine; well below the fake driver's FAKE_GPU_HANG_SECONDS (10
# s), after which a call that a real driver would block forever goes on.
PROMPT = 5.0
ENQ = "__unsafe_enqueue_py_host_func"

# SPEC §12.1: the NumPy twins of the integer, bool and IEEE float types.
NUMPY_OF: dict[DType, np.dtype] = {
    DType.bool: np.dtype(np.bool_),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int16: np.dtype(np.int16),
    DType.uint16: np.dtype(np.uint16),
    DType.int32: np.dtype(np.int32),
    DType.uint32: np.dtype(np.uint32),
    DType.int64: np.dtype(np.int64),
    DType.uint64: np.dtype(np.uint64),
    DType.float16: np.dtype(np.float16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}
NUMPY_DTYPES = list(NUMPY_OF)
INT_DTYPES = [d for d in NUMPY_DTYPES if np.issubdtype(NUMPY_OF[d], np.integer)]
IEEE_FLOATS = [DType.float16, DType.float32, DType.float64]
FLOAT8 = [
    DType.float8_e8m0fnu,
    DType.float8_e4m3fn,
    DType.float8_e4m3fnuz,
    DType.float8_e5m2,
    DType.float8_e5m2fnuz,
]
SUB_BYTE = [DType.float4_e2m1fn, DType.float6_e2m3fn, DType.float6_e3m2fn]

# Bytes per element: DType.size_in_bytes as SPEC §12.1 gives it (at least 1).
ELEMENT_SIZE: dict[DType, int] = {
    **{d: NUMPY_OF[d].itemsize for d in NUMPY_DTYPES},
    DType.bfloat16: 2,
    **dict.fromkeys(FLOAT8, 1),
    **dict.fromkeys(SUB_BYTE, 1),
}

# Raw bytes of exactly representable values in each float8 format (checked
# against ml_dtypes): value -> byte.  e8m0fnu has no sign and no zero.
FLOAT8_BYTES: dict[DType, dict[float, int]] = {
    DType.float8_e4m3fn: {1.0: 0x38, 2.0: 0x40, 0.5: 0x30, -2.0: 0xC0},
    DType.float8_e4m3fnuz: {1.0: 0x40, 2.0: 0x48, 0.5: 0x38, -2.0: 0xC8},
    DType.float8_e5m2: {1.0: 0x3C, 2.0: 0x40, 0.5: 0x38, -2.0: 0xC0},
    DType.float8_e5m2fnuz: {1.0: 0x40, 2.0: 0x44, 0.5: 0x3C, -2.0: 0xC4},
    DType.float8_e8m0fnu: {1.0: 0x7F, 2.0: 0x80, 0.5: 0x7E},
}


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements of a fresh buffer of ``shape`` (for
    shapes without zero dimensions; the SPEC leaves those open)."""
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def spec_is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """SPEC §12.4 for a view with at least one element: row-major contiguous
    with positive strides (dimensions of size 1 do not matter), False for
    every negative-step view.  (Views without elements are left open.)"""
    if any(s < 0 for s in strides):
        return False
    expected = 1
    for dim, stride in reversed(list(zip(shape, strides, strict=True))):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def np_strides(arr: np.ndarray) -> tuple[int, ...]:
    """NumPy's byte strides in elements."""
    return tuple(s // arr.itemsize for s in arr.strides)


def sample_array(dtype: DType, shape: Sequence[int], start: int = 1) -> np.ndarray:
    """A C-contiguous array of ``shape`` with distinct small values (0/1
    alternating for bool), exactly representable in every NumPy dtype."""
    n = math.prod(shape)
    values = (np.arange(n, dtype=np.int64) + start) % 97
    if dtype is DType.bool:
        values = values % 2
    # (Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.)
    return values.astype(NUMPY_OF[dtype]).reshape(shape).copy(order="C")


def host_source(values: np.ndarray) -> Buffer:
    """A pageable CPU buffer holding ``values``, on a CPU queue of its own,
    so that nothing another test left on the CPU's default queue (a held
    host function, say) delays a copy from it."""
    dtype = next(d for d, np_dtype in NUMPY_OF.items() if np_dtype == values.dtype)
    buf = Buffer(dtype, values.shape, DeviceQueue(CPU()))
    buf.to_numpy()[...] = values
    return buf


def bf16_bits(value: float) -> int:
    """bfloat16 bits of a float32-representable ``value``, rounded to nearest
    even (SPEC §12.5).  NaN is handled by the caller."""
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    bias = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + bias) >> 16) & 0xFFFF


def is_bf16_nan(bits: int) -> bool:
    return (bits & 0x7F80) == 0x7F80 and (bits & 0x007F) != 0


class Call:
    """Runs ``fn`` in a daemon thread so that a test can check whether it
    blocks without hanging the run."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = fn()
            except BaseException as exc:  # reported by value()
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def finished(self, timeout: float = WAIT) -> bool:
        return self.done.wait(timeout)

    def blocked(self, for_seconds: float = NOT_YET) -> bool:
        """True when the call is still running after ``for_seconds``."""
        return not self.done.wait(for_seconds)

    def value(self, timeout: float = WAIT) -> Any:
        assert self.done.wait(timeout), "the call did not return"
        if self.error is not None:
            raise self.error
        return self.result


def returns_promptly(fn: Callable[[], Any], timeout: float = PROMPT) -> Any:
    """``fn()``'s result; fails (without hanging) when it does not return
    within ``timeout`` seconds."""
    call = Call(fn)
    assert call.finished(timeout), f"{fn} blocked for {timeout} s"
    return call.value(0)


def open_later(flag: Any, value: int = 1, delay: float = 0.3) -> threading.Timer:
    """Signals ``flag`` from another thread after ``delay`` seconds."""
    timer = threading.Timer(delay, flag.signal, (value,))
    timer.daemon = True
    timer.start()
    return timer
