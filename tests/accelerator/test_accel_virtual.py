"""Virtual device mode beside real (or fake) accelerators.

tests/test_virtual_devices.py has the contract; here it is checked that the
mode only changes what ``Accelerator(i)`` and ``accelerator_count()`` name:
accelerator objects made before keep driving the hardware, and memory
imported from a real device lands on the real device.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from dlpack_support import Holder

from max import driver
from max.driver import CPU, Accelerator, Buffer, DeviceEvent, DeviceQueue
from max.dtype import DType

WAIT = 20.0
REAL = driver.accelerator_count()


@pytest.fixture
def virtual() -> Iterator[None]:
    """Puts the virtual device settings back after the test."""
    saved = (
        driver.get_virtual_device_count(),
        driver.get_virtual_device_api(),
        driver.get_virtual_device_target_arch(),
    )
    yield
    driver.set_virtual_device_count(saved[0])
    driver.set_virtual_device_api(saved[1])
    driver.set_virtual_device_target_arch(saved[2])


def enter(count: int = 2, api: str = "cuda", arch: str = "sm_100a") -> None:
    driver.set_virtual_device_api(api)
    driver.set_virtual_device_target_arch(arch)
    driver.set_virtual_device_count(count)


def test_virtual_devices_replace_the_real_ones_by_id(acc, virtual) -> None:
    enter(REAL + 3)
    assert driver.accelerator_count() == REAL + 3  # more than the hardware
    ghost = Accelerator(0)
    assert ghost is not acc and ghost != acc and ghost.api == "cuda"
    assert ghost.architecture_name == "sm_100a"
    driver.set_virtual_device_count(0)
    assert Accelerator(0) is acc and driver.accelerator_count() == REAL


def test_real_accelerators_keep_working_in_virtual_mode(acc, virtual) -> None:
    enter()
    q = DeviceQueue(acc)
    buf = Buffer(np.arange(6, dtype=np.float32), acc)
    assert buf.device is acc and buf.stream is acc.default_queue
    dst = Buffer(DType.float32, (6,), q)
    dst.inplace_copy_from(buf)
    ev = DeviceEvent(acc)
    q.record_event(ev)
    ev.synchronize(timeout=WAIT)
    assert dst.to(CPU()).to_numpy().tolist() == list(range(6))
    assert driver.Buffer.zeros((2,), DType.int8, device=acc).device is acc


def test_imports_land_on_the_real_device(acc, virtual) -> None:
    """A DLPack device id names hardware, never a virtual device."""
    src = Buffer(np.arange(4, dtype=np.int32), acc)
    enter()
    holder = Holder(src.__dlpack__(max_version=(1, 0)), device=src.__dlpack_device__())
    imported = Buffer.from_dlpack(holder)
    assert imported.device is acc
    assert imported.to(CPU()).to_numpy().tolist() == [0, 1, 2, 3]


def test_unset_api_is_the_backend_s(acc, virtual) -> None:
    enter(api="")
    assert Accelerator(1).api == acc.api


def test_virtual_devices_refuse_work_here_too(virtual) -> None:
    enter(api="hip", arch="gfx950")
    ghost = Accelerator(1)
    for call in (
        lambda: DeviceQueue(ghost),
        lambda: Buffer(DType.float32, (2,), ghost),
        lambda: Buffer.from_numpy(np.zeros(2)).to(ghost),
    ):
        with pytest.raises(RuntimeError, match="virtual device mode"):
            call()
