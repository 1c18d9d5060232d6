"""``max.dtype.dtype``, as MAX 26.7 names the module of :class:`DType`."""

from max.dtype import DType

__all__ = ["DType"]
