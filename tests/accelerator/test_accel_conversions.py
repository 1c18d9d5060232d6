"""float(), int(), complex(), bool() and operator.index() of accelerator
buffers: through item(), which downloads the element after the pending
write into it (SPEC §12.6's host read); bytes() needs host memory."""

from __future__ import annotations

import operator
import threading

import pytest

from max.driver import Buffer, DeviceQueue
from max.dtype import DType


def test_conversions_read_device_memory(acc):
    assert float(Buffer.scalar(2.5, DType.float32, acc)) == 2.5
    assert int(Buffer.scalar(-3, DType.int64, acc)) == -3
    assert complex(Buffer.scalar(1.5, DType.bfloat16, acc)) == 1.5 + 0j
    assert operator.index(Buffer.scalar(7, DType.uint16, acc)) == 7
    assert bool(Buffer.zeros((1, 1), DType.float32, acc)) is False
    with pytest.raises(TypeError, match="only 0-dimensional buffers"):
        float(Buffer.zeros((1,), DType.float32, acc))


def test_a_conversion_waits_for_the_pending_copy(acc, gate):
    queue = DeviceQueue(acc)
    dst = Buffer.scalar(1, DType.int32, acc).to(queue)
    queue.synchronize(timeout=20)
    flag = gate(queue)
    dst.inplace_copy_from(Buffer.scalar(2, DType.int32))
    timer = threading.Timer(0.1, flag.signal, args=(1,))
    timer.start()
    try:
        assert int(dst) == 2  # 1 had it not waited for the gated upload
    finally:
        timer.join()


def test_bytes_needs_host_memory(acc):
    with pytest.raises(BufferError, match=r"to\(CPU\(\)\)"):
        bytes(Buffer.scalar(3, DType.int32, acc))
