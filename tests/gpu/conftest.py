"""Fixtures for the tests that need a real NVIDIA GPU (``tests/gpu``).

Each test module skips itself at module level (with the reason from
``gpu_kernels.cuda_skip_reason``) when there is no CUDA accelerator, so on a
CPU-only machine nothing here touches a driver.  The fixtures below only run
for tests that were not skipped.

Everything that can block is bounded: waits pass ``timeout=``, kernels spin
for a bounded time and those that spin long are launched with a stop slot
that the teardown sets.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# How long anything that "should happen" may take before a test gives up.
WAIT = 20.0


@pytest.fixture(scope="session")
def kernels():
    """spin.ptx loaded on device 0, warmed up by one launch."""
    from gpu_kernels import Kernels

    from max import driver

    k = Kernels(0)
    warm = k.buffer(4)
    queue = driver.DeviceQueue(k.device)
    k.spin_write(queue, 0, out=warm.dev(1), value=1)
    queue.synchronize(timeout=WAIT)
    assert warm[1] == 1, "the warm-up kernel did not write its value"
    yield k
    k.stop_all()
    try:
        k.device.synchronize(timeout=WAIT)
    except Exception as exc:  # keep the memory rather than free it in use
        warnings.warn(f"GPU did not drain at the end: {exc!r}", stacklevel=1)
        return
    for buf in k.buffers:
        buf.free()


@pytest.fixture
def acc(kernels):
    """The first accelerator (the device ``kernels`` is loaded on)."""
    return kernels.device


@pytest.fixture
def buf(kernels):
    """16 zeroed u64 slots of mapped pinned memory; slot 0 is the stop slot.

    At teardown the stop slot ends any kernel still spinning on it and the
    device is drained before the memory is freed."""
    b = kernels.buffer(16)
    yield b
    b[0] = 1
    try:
        kernels.device.synchronize(timeout=WAIT)
    except Exception as exc:
        warnings.warn(f"GPU did not drain after the test: {exc!r}", stacklevel=1)
        return
    b.free()
    kernels.buffers.remove(b)
