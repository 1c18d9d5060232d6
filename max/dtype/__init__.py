"""Tensor element types: :class:`DType` and the limits query :class:`finfo`,
as Modular MAX's ``max.dtype``.

Importing this module never imports NumPy or ml_dtypes: only
:meth:`DType.to_numpy` and :meth:`DType.from_numpy` need NumPy, and they
import it when called (:class:`finfo` computes its values from each
format's definition).
"""

from __future__ import annotations

import builtins
import enum
import math
import sys
from typing import Any, NamedTuple

__all__ = ["DType", "finfo"]


class _Kind(enum.Enum):
    BOOL = "bool"
    SIGNED = "signed"
    UNSIGNED = "unsigned"
    FLOAT = "float"  # IEEE float16, float32, float64
    BFLOAT16 = "bfloat16"
    FLOAT8 = "float8"
    FLOAT6 = "float6"
    FLOAT4 = "float4"


class _Info(NamedTuple):
    kind: _Kind
    bits: int
    align: int
    dlpack_code: int  # DLPack's DLDataTypeCode (dlpack.h 1.1)
    dlpack_bits: int


class DType(enum.Enum):
    """The tensor data type: an enum whose values are MAX's dtype codes
    (``DType(81) is DType.float32``).

    Members are listed in MAX's order.  Where MAX's documentation is silent
    this module follows MAX's implementation (its C++ ``M::DType``):

    - ``size_in_bits`` is the value's width: 4 for ``float4_e2m1fn``, 6 for
      the float6 types, 8 for ``bool``.  ``size_in_bytes`` is the storage of
      one element, at least 1 (sub-byte types take a byte each).
    - ``align`` is the C alignment of the element type in bytes (the size for
      the built-in types, 1 for every type of 8 bits or fewer, 2 for
      ``float16`` and ``bfloat16``).
    - ``is_integral()`` is true for the signed and unsigned integers; ``bool``
      is not integral.  ``is_float()`` is true for every floating-point type:
      the IEEE ones, ``bfloat16``, float8, float6 and float4.
      ``is_float8()`` is true for the five float8 types, ``float8_e8m0fnu``
      included.  ``is_half()`` is true for ``float16`` and ``bfloat16``.
    - ``repr()`` is the member's name (``float32``, as MAX); ``str()`` is
      ``DType.float32``.  ``DType("f32")`` looks a member up by its MLIR
      type name, which ``_mlir`` gives (``si32``, ``ui8``, ``bf16``,
      ``f8e4m3fn``, ``i1`` for ``bool``).
    - ``DType.finfo`` is :class:`finfo`: ``DType.finfo(DType.bfloat16).max``.
    """

    bool = 1
    int8 = 135
    int16 = 137
    int32 = 139
    int64 = 141
    uint8 = 134
    uint16 = 136
    uint32 = 138
    uint64 = 140
    float16 = 79
    float32 = 81
    float64 = 82
    bfloat16 = 80
    float4_e2m1fn = 64
    float6_e2m3fn = 65
    float6_e3m2fn = 66
    float8_e8m0fnu = 73
    float8_e4m3fn = 75
    float8_e4m3fnuz = 76
    float8_e5m2 = 77
    float8_e5m2fnuz = 78

    def __repr__(self) -> str:
        return self._name_

    @classmethod
    def _missing_(cls, value: object) -> DType | None:
        # DType("f32"): MLIR type names; anything else is Enum's ValueError.
        if isinstance(value, str):
            return _FROM_MLIR.get(value)
        return None

    @property
    def _mlir(self) -> str:
        """The MLIR type name of this dtype, e.g. ``f32`` [MAX's private API]."""
        return _MLIR[self._value_]

    @property
    def size_in_bits(self) -> int:
        """The size of one value in bits (4 for float4, 6 for float6)."""
        return _INFO[self._value_].bits

    @property
    def size_in_bytes(self) -> int:
        """The bytes one element occupies: at least 1."""
        return (_INFO[self._value_].bits + 7) // 8

    @property
    def align(self) -> int:
        """The alignment the element type requires, in bytes."""
        return _INFO[self._value_].align

    @property
    def _dlpack_code(self) -> int:
        """DLPack's type code (DLDataTypeCode) for this dtype [not MAX API]."""
        return _INFO[self._value_].dlpack_code

    @property
    def _dlpack_bits(self) -> int:
        """DLPack's ``bits`` for this dtype, with ``lanes`` 1 [not MAX API]."""
        return _INFO[self._value_].dlpack_bits

    def is_integral(self) -> builtins.bool:
        """Whether this is a signed or unsigned integer type (not ``bool``)."""
        return _INFO[self._value_].kind in (_Kind.SIGNED, _Kind.UNSIGNED)

    def is_signed_integral(self) -> builtins.bool:
        """Whether this is a signed integer type."""
        return _INFO[self._value_].kind is _Kind.SIGNED

    def is_unsigned_integral(self) -> builtins.bool:
        """Whether this is an unsigned integer type."""
        return _INFO[self._value_].kind is _Kind.UNSIGNED

    def is_float(self) -> builtins.bool:
        """Whether this is a floating-point type (float4 to float64)."""
        return _INFO[self._value_].kind in _FLOAT_KINDS

    def is_float8(self) -> builtins.bool:
        """Whether this is one of the 8-bit floating-point types."""
        return _INFO[self._value_].kind is _Kind.FLOAT8

    def is_half(self) -> builtins.bool:
        """Whether this is a 16-bit floating-point type (float16, bfloat16)."""
        return self in (DType.float16, DType.bfloat16)

    def to_numpy(self) -> Any:
        """The NumPy dtype of this dtype's elements.

        Integers, ``bool`` and the IEEE floats map to their NumPy twins; the
        float8 types map to ``numpy.uint8`` (their raw bytes, as MAX);
        ``bfloat16`` maps to ``ml_dtypes.bfloat16``.

        Raises:
            ValueError: for ``bfloat16`` when ``ml_dtypes`` is not installed,
                and for the float4 and float6 types.
            ImportError: when NumPy is not installed.
        """
        np = _numpy("DType.to_numpy()")
        kind = _INFO[self._value_].kind
        if kind is _Kind.FLOAT8:
            return np.dtype(np.uint8)
        if kind is _Kind.BFLOAT16:
            try:
                import ml_dtypes
            except ImportError:
                raise ValueError(
                    "unsupported DType to convert to NumPy: DType.bfloat16 "
                    "needs the ml_dtypes package (pip install ml_dtypes)"
                ) from None
            return np.dtype(ml_dtypes.bfloat16)
        if kind in (_Kind.FLOAT4, _Kind.FLOAT6):
            raise ValueError(f"unsupported DType to convert to NumPy: {self}")
        return np.dtype(self.name)

    @classmethod
    def from_numpy(cls, dtype: Any) -> DType:
        """The DType of a NumPy dtype.

        ``dtype`` is anything ``numpy.dtype()`` accepts except ``None``: a
        ``numpy.dtype``, a scalar type such as ``numpy.float32``, or a string
        such as ``"float32"``.  Besides NumPy's integers, ``bool`` and IEEE
        floats, the ml_dtypes types map back to their twins:
        ``ml_dtypes.bfloat16`` to ``bfloat16`` and likewise the float8,
        float6 and float4 types (so an ml_dtypes float8 array keeps its
        meaning; ``to_numpy()`` of a float8 type still gives ``uint8``, as
        MAX).  Byte-swapped (non-native) dtypes are not supported.

        Raises:
            ValueError: ``unsupported NumPy dtype: ...`` for anything else.
            ImportError: when NumPy is not installed.
        """
        np = _numpy("DType.from_numpy()")
        if dtype is None:
            raise ValueError("unsupported NumPy dtype: None")
        try:
            np_dtype = np.dtype(dtype)
        except (TypeError, ValueError):
            raise ValueError(f"unsupported NumPy dtype: {dtype!r}") from None
        found = _from_numpy_dtype(np_dtype)
        if found is None:
            raise ValueError(f"unsupported NumPy dtype: {np_dtype}")
        return found


_S, _U, _F = _Kind.SIGNED, _Kind.UNSIGNED, _Kind.FLOAT
# DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
# kDLFloat8_e4m3fn 10, _e4m3fnuz 11, _e5m2 12, _e5m2fnuz 13, _e8m0fnu 14,
# kDLFloat6_e2m3fn 15, _e3m2fn 16, kDLFloat4_e2m1fn 17.
_INFO: dict[int, _Info] = {
    DType.bool.value: _Info(_Kind.BOOL, 8, 1, 6, 8),
    DType.int8.value: _Info(_S, 8, 1, 0, 8),
    DType.int16.value: _Info(_S, 16, 2, 0, 16),
    DType.int32.value: _Info(_S, 32, 4, 0, 32),
    DType.int64.value: _Info(_S, 64, 8, 0, 64),
    DType.uint8.value: _Info(_U, 8, 1, 1, 8),
    DType.uint16.value: _Info(_U, 16, 2, 1, 16),
    DType.uint32.value: _Info(_U, 32, 4, 1, 32),
    DType.uint64.value: _Info(_U, 64, 8, 1, 64),
    DType.float16.value: _Info(_F, 16, 2, 2, 16),
    DType.float32.value: _Info(_F, 32, 4, 2, 32),
    DType.float64.value: _Info(_F, 64, 8, 2, 64),
    DType.bfloat16.value: _Info(_Kind.BFLOAT16, 16, 2, 4, 16),
    DType.float4_e2m1fn.value: _Info(_Kind.FLOAT4, 4, 1, 17, 4),
    DType.float6_e2m3fn.value: _Info(_Kind.FLOAT6, 6, 1, 15, 6),
    DType.float6_e3m2fn.value: _Info(_Kind.FLOAT6, 6, 1, 16, 6),
    DType.float8_e8m0fnu.value: _Info(_Kind.FLOAT8, 8, 1, 14, 8),
    DType.float8_e4m3fn.value: _Info(_Kind.FLOAT8, 8, 1, 10, 8),
    DType.float8_e4m3fnuz.value: _Info(_Kind.FLOAT8, 8, 1, 11, 8),
    DType.float8_e5m2.value: _Info(_Kind.FLOAT8, 8, 1, 12, 8),
    DType.float8_e5m2fnuz.value: _Info(_Kind.FLOAT8, 8, 1, 13, 8),
}
_FLOAT_KINDS = (_F, _Kind.BFLOAT16, _Kind.FLOAT8, _Kind.FLOAT6, _Kind.FLOAT4)
# NumPy's own types by (kind, itemsize).
_NUMPY_KINDS: dict[tuple[str, int], DType] = {
    ("b", 1): DType.bool,
    **{("i", d.size_in_bytes): d for d in DType if d.is_signed_integral()},
    **{("u", d.size_in_bytes): d for d in DType if d.is_unsigned_integral()},
    ("f", 2): DType.float16,
    ("f", 4): DType.float32,
    ("f", 8): DType.float64,
}
# The DTypes ml_dtypes has a type of the same name for.
_ML_DTYPES_TWINS = tuple(
    d
    for d in DType
    if _INFO[d.value].kind in (_Kind.BFLOAT16, _Kind.FLOAT8, _Kind.FLOAT6, _Kind.FLOAT4)
)
# Types registered with NumPy by other packages have numbers from this up.
_NPY_USERDEF = 256
# MLIR's type names, as MAX spells them (lower case); MAX has none for the
# float6 types, which get the names of the same pattern.
_MLIR: dict[int, str] = {
    DType.bool.value: "i1",
    DType.int8.value: "si8",
    DType.int16.value: "si16",
    DType.int32.value: "si32",
    DType.int64.value: "si64",
    DType.uint8.value: "ui8",
    DType.uint16.value: "ui16",
    DType.uint32.value: "ui32",
    DType.uint64.value: "ui64",
    DType.float16.value: "f16",
    DType.float32.value: "f32",
    DType.float64.value: "f64",
    DType.bfloat16.value: "bf16",
    DType.float4_e2m1fn.value: "f4e2m1fn",
    DType.float6_e2m3fn.value: "f6e2m3fn",
    DType.float6_e3m2fn.value: "f6e3m2fn",
    DType.float8_e8m0fnu.value: "f8e8m0fnu",
    DType.float8_e4m3fn.value: "f8e4m3fn",
    DType.float8_e4m3fnuz.value: "f8e4m3fnuz",
    DType.float8_e5m2.value: "f8e5m2",
    DType.float8_e5m2fnuz.value: "f8e5m2fnuz",
}
_FROM_MLIR: dict[str, DType] = {name: DType(v) for v, name in _MLIR.items()}


def _numpy(call: str) -> Any:
    try:
        import numpy
    except ImportError as e:
        raise ImportError(
            f"{call} needs NumPy, which is not installed (pip install numpy)"
        ) from e
    return numpy


def _from_numpy_dtype(np_dtype: Any) -> DType | None:
    if not np_dtype.isnative:
        return None
    if np_dtype.num >= _NPY_USERDEF:
        # Only ml_dtypes' types are known; if it is not imported, the dtype
        # cannot be one of them.
        ml_dtypes = sys.modules.get("ml_dtypes")
        if ml_dtypes is None:
            return None
        for d in _ML_DTYPES_TWINS:
            if np_dtype.type is getattr(ml_dtypes, d.name, None):
                return d
        return None
    return _NUMPY_KINDS.get((np_dtype.kind, np_dtype.itemsize))


# ---- finfo -------------------------------------------------------------------


class _Format(NamedTuple):
    """A binary floating-point format, as its definition gives it."""

    mantissa_bits: int
    exponent_bits: int
    bias: int
    # The all-ones exponent holds inf/NaN (IEEE 754, and e8m0fnu's NaN).
    top_exponent_reserved: bool
    # Only the all-ones mantissa of the all-ones exponent is NaN (e4m3fn).
    top_mantissa_reserved: bool
    signed: bool


_FORMATS: dict[int, _Format] = {
    DType.float16.value: _Format(10, 5, 15, True, False, True),
    DType.float32.value: _Format(23, 8, 127, True, False, True),
    DType.float64.value: _Format(52, 11, 1023, True, False, True),
    DType.bfloat16.value: _Format(7, 8, 127, True, False, True),
    DType.float8_e5m2.value: _Format(2, 5, 15, True, False, True),
    DType.float8_e4m3fn.value: _Format(3, 4, 7, False, True, True),
    DType.float8_e4m3fnuz.value: _Format(3, 4, 8, False, False, True),
    DType.float8_e5m2fnuz.value: _Format(2, 5, 16, False, False, True),
    DType.float8_e8m0fnu.value: _Format(0, 8, 127, True, False, False),
    DType.float6_e2m3fn.value: _Format(3, 2, 1, False, False, True),
    DType.float6_e3m2fn.value: _Format(2, 3, 3, False, False, True),
    DType.float4_e2m1fn.value: _Format(1, 2, 1, False, False, True),
}


class finfo:  # lower case: MAX's name, as numpy.finfo and torch.finfo
    """Numerical limits of a floating-point :class:`DType`, as MAX's
    ``max.dtype.finfo`` (modelled on ``torch.finfo``): ``bits``, ``eps``,
    ``max``, ``min``, ``tiny`` (= ``smallest_normal``) and ``dtype``, for
    every float dtype, bfloat16 and the float8, float6 and float4 formats
    included.

    The values are Python floats computed exactly from each format's
    definition (no NumPy needed); they equal ``ml_dtypes.finfo`` and
    ``numpy.finfo`` of the same format.  ``min`` is ``-max``, except for
    ``float8_e8m0fnu``, which has no sign: its ``min`` is its smallest
    value (as MAX and ml_dtypes).

    Raises:
        TypeError: ``dtype`` is not a ``DType``, or not a floating-point one.
    """

    __slots__ = ("bits", "dtype", "eps", "max", "min", "tiny")

    bits: int
    """Bits one value occupies (4 for float4, 6 for float6)."""
    eps: float
    """The difference between 1.0 and the next larger value."""
    max: float
    """The largest finite value."""
    min: float
    """The most negative finite value (the smallest for unsigned formats)."""
    tiny: float
    """The smallest positive normal value."""
    dtype: DType
    """The dtype these limits describe."""

    def __init__(self, dtype: DType) -> None:
        if not isinstance(dtype, DType):
            raise TypeError(
                "finfo() argument must be a max.dtype.DType, not "
                f"{type(dtype).__name__}"
            )
        fmt = _FORMATS.get(dtype.value)
        if fmt is None:
            raise TypeError(
                f"finfo only supports floating-point types, got {dtype.name}"
            )
        m = fmt.mantissa_bits
        top = 2**fmt.exponent_bits - 1 - fmt.top_exponent_reserved
        largest = 2.0 - math.ldexp(1.0, (1 if fmt.top_mantissa_reserved else 0) - m)
        self.bits = dtype.size_in_bits
        self.eps = math.ldexp(1.0, -m)
        self.max = math.ldexp(largest, top - fmt.bias)
        # A format without mantissa bits has no subnormals: exponent 0 is
        # its smallest normal value.
        self.tiny = math.ldexp(1.0, (1 if m else 0) - fmt.bias)
        self.min = -self.max if fmt.signed else self.tiny
        self.dtype = dtype

    @property
    def smallest_normal(self) -> float:
        """The smallest positive normal value: ``tiny``'s other name."""
        return self.tiny

    def __repr__(self) -> str:
        return (
            f"finfo(dtype={self.dtype.name}, bits={self.bits}, eps={self.eps}, "
            f"max={self.max}, min={self.min}, tiny={self.tiny})"
        )


# DType.finfo(DType.bfloat16), as MAX (set after the class is made: a class
# defined in an Enum's body would become a member).
DType.finfo = finfo  # type: ignore[attr-defined]
