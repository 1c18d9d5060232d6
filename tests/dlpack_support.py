"""The DLPack ABI in ctypes and DLPack producers made with it, for the §13
suites (CPU and accelerator).  Written from dmlc/dlpack's ``dlpack.h``
(1.1) and its Python specification, independent of the implementation under
test (``csrc/core/dlpack.h``).  Not a test module.

- ``DLManagedTensor`` / ``DLManagedTensorVersioned``: the payloads of the
  ``"dltensor"`` and ``"dltensor_versioned"`` capsules, read through
  ``payload(capsule)`` while the capsule is unconsumed.
- ``Holder``: a producer (neither a NumPy array nor a Buffer) that hands out
  capsules it was given, recording how it was called.
- ``CtypesProducer``: a producer whose tensors are built here, over memory
  the test provides, with a deleter that counts its calls, as a foreign
  library's would be.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

from max.dtype import DType

# DLDeviceType values (dlpack.h).
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_ROCM, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 10, 11, 13
# DLManagedTensorVersioned.flags bits.
READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED = 1, 2, 4
VERSIONED, LEGACY = "dltensor_versioned", "dltensor"

# DLDataType (code, bits) of every DType (dlpack.h 1.1's DLDataTypeCode:
# kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6, the float8
# codes 10 to 14, float6 15 and 16, float4 17).
DL_DTYPE: dict[DType, tuple[int, int]] = {
    DType.bool: (6, 8),
    DType.int8: (0, 8),
    DType.int16: (0, 16),
    DType.int32: (0, 32),
    DType.int64: (0, 64),
    DType.uint8: (1, 8),
    DType.uint16: (1, 16),
    DType.uint32: (1, 32),
    DType.uint64: (1, 64),
    DType.float16: (2, 16),
    DType.float32: (2, 32),
    DType.float64: (2, 64),
    DType.bfloat16: (4, 16),
    DType.float8_e4m3fn: (10, 8),
    DType.float8_e4m3fnuz: (11, 8),
    DType.float8_e5m2: (12, 8),
    DType.float8_e5m2fnuz: (13, 8),
    DType.float8_e8m0fnu: (14, 8),
    DType.float6_e2m3fn: (15, 6),
    DType.float6_e3m2fn: (16, 6),
    DType.float4_e2m1fn: (17, 4),
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
    ]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements; NULL: C order
        ("byte_offset", ctypes.c_uint64),
    ]


# Both deleters take the managed tensor's address.
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# ---- The capsule C API (ctypes.pythonapi) -----------------------------------

_CAPSULE_NAME = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_CAPSULE_POINTER = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p
)(("PyCapsule_GetPointer", ctypes.pythonapi))
DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# A capsule keeps a pointer to its name: these live as long as the module.
_NAME_BYTES = {VERSIONED: VERSIONED.encode(), LEGACY: LEGACY.encode()}
_CAPSULE_NEW = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, DESTRUCTOR
)(("PyCapsule_New", ctypes.pythonapi))


def capsule_name(capsule: object) -> str:
    return _CAPSULE_NAME(capsule).decode()


def payload(capsule: object) -> DLManagedTensorVersioned | DLManagedTensor:
    """The managed tensor of an unconsumed capsule: a view of its memory,
    which keeps the capsule alive (its fields are valid until a consumer
    takes the capsule)."""
    name = capsule_name(capsule)
    kind = {VERSIONED: DLManagedTensorVersioned, LEGACY: DLManagedTensor}[name]
    view = kind.from_address(_CAPSULE_POINTER(capsule, name.encode()))
    view._capsule = capsule  # (dl_tensor views keep `view` alive in turn)
    return view


_CAPSULE_SET_NAME = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
_USED_NAMES = {
    VERSIONED: b"used_" + VERSIONED.encode(),
    LEGACY: b"used_" + LEGACY.encode(),
}


def take(capsule: object) -> DLManagedTensorVersioned | DLManagedTensor:
    """Consumes a capsule as a DLPack consumer does: renames it "used_..."
    and returns its managed tensor, whose deleter the caller now owes a
    call (``m.deleter(ctypes.addressof(m))``)."""
    managed = payload(capsule)
    assert _CAPSULE_SET_NAME(capsule, _USED_NAMES[capsule_name(capsule)]) == 0
    return managed


def tensor(capsule: object) -> DLTensor:
    return payload(capsule).dl_tensor


def shape_of(t: DLTensor) -> tuple[int, ...]:
    return tuple(t.shape[i] for i in range(t.ndim))


def strides_of(t: DLTensor) -> tuple[int, ...] | None:
    return tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None


# ---- Producers ----------------------------------------------------------------


class Holder:
    """A DLPack producer handing out the capsules it holds, in turn (the last
    one again when they run out), recording each ``__dlpack__`` call's
    keyword arguments.  ``legacy_signature``: a producer that predates
    ``max_version`` (its ``__dlpack__`` raises TypeError when given it)."""

    def __init__(
        self,
        *capsules: object,
        device: tuple[int, int] = (KDL_CPU, 0),
        legacy_signature: bool = False,
    ) -> None:
        self.capsules = list(capsules)
        self.device = device
        self.legacy_signature = legacy_signature
        self.calls: list[dict[str, Any]] = []

    def __dlpack__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        if self.legacy_signature and set(kwargs) - {"stream"}:
            raise TypeError(f"__dlpack__() got unexpected keywords {kwargs}")
        return self.capsules.pop(0) if len(self.capsules) > 1 else self.capsules[0]

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


class CtypesProducer:
    """A foreign producer: each ``capsule()`` is a fresh managed tensor over
    ``address`` (kept alive by ``keep``), described by the arguments, whose
    deleter counts its calls per tensor (``deletions``, and ``on_delete``
    is called after each).

    Its capsules have no destructor: the DLPack Python specification's one
    frees an unconsumed tensor, but a consumer may drop the capsule with an
    exception in flight, which a C destructor saves and restores and a
    ctypes callback cannot.  So a tensor nobody consumed stays allocated
    (``made() - deleted``); tests check such capsules by their name."""

    def __init__(
        self,
        address: int,
        shape: Sequence[int],
        dtype: DType | tuple[int, int] = DType.float32,
        *,
        device: tuple[int, int] = (KDL_CPU, 0),
        versioned: bool = True,
        flags: int = 0,
        strides: Sequence[int] | None = None,
        byte_offset: int = 0,
        lanes: int = 1,
        version: tuple[int, int] = (1, 1),
        keep: object = None,
        on_delete: Callable[[], None] | None = None,
    ) -> None:
        self.address, self.shape, self.device = address, tuple(shape), device
        self.code_bits = DL_DTYPE[dtype] if isinstance(dtype, DType) else dtype
        self.versioned, self.flags, self.version = versioned, flags, version
        self.strides = None if strides is None else tuple(strides)
        self.byte_offset, self.lanes, self.keep = byte_offset, lanes, keep
        self.on_delete = on_delete
        self.lock = threading.Lock()
        self.deletions: dict[int, int] = {}  # managed tensor address -> calls
        self.threads: list[int] = []
        self._live: dict[int, tuple[object, ...]] = {}  # what a tensor uses
        self._deleter = DELETER(self._delete)
        self.calls: list[dict[str, Any]] = []

    @property
    def deleted(self) -> int:
        """Deleter calls, over every tensor made."""
        with self.lock:
            return sum(self.deletions.values())

    def made(self) -> int:
        with self.lock:
            return len(self.deletions)

    def _delete(self, managed: int) -> None:
        with self.lock:
            self.deletions[managed] = self.deletions.get(managed, 0) + 1
            self.threads.append(threading.get_ident())
            # Like a real producer, it frees the tensor (here: forgets it).
            self._live.pop(managed, None)
        if self.on_delete is not None:
            self.on_delete()

    def capsule(self) -> object:
        n = len(self.shape)
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(n, 1))(*self.strides)
        kind = DLManagedTensorVersioned if self.versioned else DLManagedTensor
        m = kind()
        t = m.dl_tensor
        t.data = self.address
        t.device = DLDevice(*self.device)
        t.ndim = n
        t.dtype = DLDataType(self.code_bits[0], self.code_bits[1], self.lanes)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = self.byte_offset
        m.deleter = self._deleter
        if self.versioned:
            m.version = DLPackVersion(*self.version)
            m.flags = self.flags
        managed = ctypes.addressof(m)
        with self.lock:
            self._live[managed] = (m, shape, strides)
            self.deletions[managed] = 0
        name = _NAME_BYTES[VERSIONED if self.versioned else LEGACY]
        return _CAPSULE_NEW(managed, name, DESTRUCTOR())

    def __dlpack__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        return self.capsule()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device
