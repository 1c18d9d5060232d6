"""Tensor element types: :class:`DType` and :class:`finfo`, as Modular MAX's
``max.dtype``."""

import builtins
import enum
from typing import Any, ClassVar

import numpy

__all__ = ["DType", "finfo"]

class DType(enum.Enum):
    """The tensor data type: an enum whose values are MAX's dtype codes."""

    bool = 1
    """Boolean: ``True`` or ``False``, one byte."""
    int8 = 135
    """8-bit signed integer."""
    int16 = 137
    """16-bit signed integer."""
    int32 = 139
    """32-bit signed integer."""
    int64 = 141
    """64-bit signed integer."""
    uint8 = 134
    """8-bit unsigned integer."""
    uint16 = 136
    """16-bit unsigned integer."""
    uint32 = 138
    """32-bit unsigned integer."""
    uint64 = 140
    """64-bit unsigned integer."""
    float16 = 79
    """IEEE 754 half precision: 1 sign, 5 exponent, 10 mantissa bits."""
    float32 = 81
    """IEEE 754 single precision: 1 sign, 8 exponent, 23 mantissa bits."""
    float64 = 82
    """IEEE 754 double precision: 1 sign, 11 exponent, 52 mantissa bits."""
    bfloat16 = 80
    """Brain float: 1 sign, 8 exponent, 7 mantissa bits."""
    float4_e2m1fn = 64
    """4-bit float, 2 exponent and 1 mantissa bits, finite values only."""
    float6_e2m3fn = 65
    """6-bit float, 2 exponent and 3 mantissa bits, finite values only."""
    float6_e3m2fn = 66
    """6-bit float, 3 exponent and 2 mantissa bits, finite values only."""
    float8_e8m0fnu = 73
    """8-bit unsigned power of two (8 exponent bits), finite values only."""
    float8_e4m3fn = 75
    """8-bit float, 4 exponent and 3 mantissa bits, finite values only."""
    float8_e4m3fnuz = 76
    """8-bit float, 4 exponent and 3 mantissa bits, finite, no negative zero."""
    float8_e5m2 = 77
    """8-bit float, 5 exponent and 2 mantissa bits."""
    float8_e5m2fnuz = 78
    """8-bit float, 5 exponent and 2 mantissa bits, finite, no negative zero."""

    finfo: ClassVar[type[_FInfo]]
    """:class:`finfo` (``DType.finfo(DType.bfloat16)``, as MAX)."""

    @property
    def _mlir(self) -> str: ...
    @property
    def size_in_bits(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def align(self) -> int: ...
    @property
    def _dlpack_code(self) -> int: ...
    @property
    def _dlpack_bits(self) -> int: ...
    def is_integral(self) -> builtins.bool: ...
    def is_signed_integral(self) -> builtins.bool: ...
    def is_unsigned_integral(self) -> builtins.bool: ...
    def is_float(self) -> builtins.bool: ...
    def is_float8(self) -> builtins.bool: ...
    def is_half(self) -> builtins.bool: ...
    def to_numpy(self) -> numpy.dtype[Any]: ...
    @classmethod
    def from_numpy(cls, dtype: numpy.dtype[Any] | type[Any] | str) -> DType: ...

class finfo:
    """Numerical limits of a floating-point :class:`DType`."""

    bits: int
    eps: float
    max: float
    min: float
    tiny: float
    dtype: DType
    def __init__(self, dtype: DType) -> None: ...
    @property
    def smallest_normal(self) -> float: ...

_FInfo = finfo
