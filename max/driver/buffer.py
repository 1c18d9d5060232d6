"""``max.driver.buffer``, as MAX 26.7 names it: the ``Buffer`` type with its
module-level helpers, and ``load_max_buffer``.

Importing it never imports NumPy (only ``load_max_buffer`` needs NumPy, for
``Buffer.mmap``).
"""

from __future__ import annotations

import os
import struct

from max._core.driver import (
    Buffer,
    _ChunkedStagingRegion,
    batch_inplace_copy,
    copy_pinned_to_destinations,
)
from max.dtype import DType

__all__ = [
    "Buffer",
    "_ChunkedStagingRegion",
    "batch_inplace_copy",
    "copy_pinned_to_destinations",
    "load_max_buffer",
]

# The first 8 bytes of a MAX checkpoint (the BINARY_MAX_CHECKPOINT debug
# print option of MAX's graphs writes them).
MAX_CHECKPOINT_MAGIC = b"\x93\xf0\x9f\x94\xa5\x2b\x2b\x93"
# The dtypes NumPy has no type of its own for: mapped as bytes, then viewed.
_BYTE_MAPPED = frozenset(
    {
        DType.bfloat16,
        DType.float8_e8m0fnu,
        DType.float8_e4m3fn,
        DType.float8_e4m3fnuz,
        DType.float8_e5m2,
        DType.float8_e5m2fnuz,
        DType.float4_e2m1fn,
        DType.float6_e2m3fn,
        DType.float6_e3m2fn,
    }
)


def _read(f: object, fmt: str, path: os.PathLike[str] | str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)  # type: ignore[attr-defined]
    if len(data) != size:
        raise ValueError(f"{path} is truncated: its MAX checkpoint header ends early")
    return struct.unpack(fmt, data)


def load_max_buffer(path: os.PathLike[str] | str | bytes) -> Buffer:
    """Loads one buffer from a MAX checkpoint file (``.max``), as MAX 26.7.

    The file holds a header (8 magic bytes, a major and a minor version as
    two ``uint32``, the metadata size as a ``uint64``) and one buffer's
    metadata (a ``uint32`` key size and the key, the dtype code and the
    rank as two bytes, one ``uint32`` per dimension, the data's offset in
    the file as a ``uint64``), all little-endian, then the data.  The
    buffer is a CPU copy of it (``Buffer.mmap`` with ``mode="r"``).

    Raises:
        ValueError: the file does not start with the checkpoint's magic
            bytes (it may be a plain ``BINARY`` dump: map it with
            ``Buffer.mmap``), its major version is above 0, it holds more
            than one buffer, its header is truncated (MAX lets
            ``struct.error`` out there), or its dtype code is unknown.
        OSError: the file cannot be read.
        TypeError: ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``
            (MAX's ``open(path)`` takes an int as a file descriptor, and
            closes it).
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(
            "load_max_buffer(): path must be a str, bytes or os.PathLike, "
            f"not {type(path).__name__}"
        )
    with open(path, "rb") as f:
        if f.read(len(MAX_CHECKPOINT_MAGIC)) != MAX_CHECKPOINT_MAGIC:
            raise ValueError(
                f"{path} is not a max checkpoint. If this file was saved "
                'from the "BINARY" debug print option (and not '
                '"BINARY_MAX_CHECKPOINT"), please initialize `Buffer.mmap` '
                "directly."
            )
        major, _minor = _read(f, "<2I", path)
        if major > 0:
            raise ValueError("Unable to read from version > 0.")
        (metadata_size,) = _read(f, "<Q", path)
        (key_size,) = _read(f, "<I", path)
        if len(f.read(key_size)) != key_size:
            raise ValueError(f"{path} is truncated: its MAX checkpoint key ends early")
        code, rank = _read(f, "<2B", path)
        shape = _read(f, f"<{rank}I", path)
        (offset,) = _read(f, "<Q", path)
    if 4 + key_size + 2 + 4 * rank + 8 != metadata_size:
        raise ValueError(
            "Multiple buffers found in .max file. This is currently not supported."
        )
    dtype = DType(code)
    if dtype not in _BYTE_MAPPED:
        return Buffer.mmap(path, dtype, shape, mode="r", offset=offset)
    count = 1
    for n in shape:
        count *= n
    raw = Buffer.mmap(
        path, DType.uint8, (count * dtype.size_in_bytes,), mode="r", offset=offset
    )
    return raw.view(dtype, shape)
