"""The pure-Python helpers of ``max.driver.driver`` (SPEC §9)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import max.driver
import max.driver.driver as drv
from max.driver import CPU, DeviceSpec


class FakeAccelerator:
    """Stands in for max._core.driver.Accelerator on a machine without GPUs."""

    def __init__(self, id: int = -1) -> None:
        self.id = 0 if id == -1 else id
        self.api = "cuda"
        self.architecture_name = "sm_90"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeAccelerator) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Simulates ``n`` accelerators: ``gpus(n)``."""

    def simulate(n: int) -> None:
        monkeypatch.setattr(drv, "accelerator_count", lambda: n)
        monkeypatch.setattr(drv, "Accelerator", FakeAccelerator)

    return simulate


@pytest.fixture
def real_count() -> int:
    return max.driver.accelerator_count()


# ---- accelerator_count / accelerator_api / architecture -------------------


def test_accelerator_count_is_native_count(real_count: int) -> None:
    from max._core import driver as core

    assert isinstance(real_count, int)
    assert real_count >= 0
    assert real_count == core.accelerator_count()


def test_accelerator_api_matches_devices(real_count: int) -> None:
    api = drv.accelerator_api()
    if real_count == 0:
        assert api == "cpu"
    else:
        assert api in ("cuda", "hip")
        assert api == max.driver.Accelerator().api


def test_accelerator_api_cpu_only(gpus: Any) -> None:
    gpus(0)
    assert drv.accelerator_api() == "cpu"
    assert max.driver.accelerator_api() == "cpu"


def test_accelerator_api_with_gpus(gpus: Any) -> None:
    gpus(2)
    assert drv.accelerator_api() == "cuda"


def test_architecture_name_cpu_only_raises(gpus: Any) -> None:
    gpus(0)
    with pytest.raises(ValueError, match="failed to get device architecture name"):
        drv.accelerator_architecture_name()


def test_architecture_name_with_gpus(gpus: Any) -> None:
    gpus(1)
    assert drv.accelerator_architecture_name() == "sm_90"


def test_architecture_name_real(real_count: int) -> None:
    if real_count == 0:
        with pytest.raises(ValueError):
            drv.accelerator_architecture_name()
    else:
        name = drv.accelerator_architecture_name()
        assert isinstance(name, str) and name


def test_backend_selection_reexported() -> None:
    from max._core import driver as core

    assert drv.backend_selection is core.backend_selection
    assert max.driver.backend_selection is core.backend_selection
    assert isinstance(drv.backend_selection(), list)


# ---- DeviceSpec ------------------------------------------------------------


def test_devicespec_defaults() -> None:
    spec = DeviceSpec(3)
    assert spec.id == 3
    assert spec.device_type == "cpu"
    assert DeviceSpec.cpu() == DeviceSpec(-1, "cpu")
    assert DeviceSpec.cpu(2) == DeviceSpec(2, "cpu")
    assert DeviceSpec.accelerator() == DeviceSpec(0, "gpu")
    assert DeviceSpec.accelerator(5) == DeviceSpec(5, "gpu")
    assert DeviceSpec(id=1, device_type="gpu").device_type == "gpu"


def test_devicespec_is_frozen_and_hashable() -> None:
    spec = DeviceSpec.accelerator(1)
    assert dataclasses.is_dataclass(spec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.id = 2  # type: ignore[misc]
    assert len({spec, DeviceSpec.accelerator(1), DeviceSpec.cpu()}) == 2
    assert DeviceSpec.cpu(0) != DeviceSpec.accelerator(0)


def test_devicespec_gpu_negative_id() -> None:
    with pytest.raises(
        ValueError,
        match=r"^id provided -1 for accelerator must be greater than or equal to 0$",
    ):
        DeviceSpec(-1, "gpu")
    with pytest.raises(ValueError, match="id provided -3"):
        DeviceSpec.accelerator(-3)


def test_devicespec_cpu_negative_id_is_fine() -> None:
    assert DeviceSpec.cpu(-1).id == -1


def test_devicespec_bad_type() -> None:
    with pytest.raises(ValueError, match="device_type must be 'cpu' or 'gpu'"):
        DeviceSpec(0, "tpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_id", ["0", 1.0, None, True])
def test_devicespec_bad_id_type(bad_id: Any) -> None:
    with pytest.raises(TypeError, match="DeviceSpec id must be an int"):
        DeviceSpec(bad_id)


# ---- load_devices ----------------------------------------------------------


def test_load_devices_cpu() -> None:
    devices = drv.load_devices([DeviceSpec.cpu()])
    assert devices == [CPU()]
    assert devices[0] is CPU()
    assert drv.load_devices([DeviceSpec.cpu(0), DeviceSpec.cpu()]) == [CPU(), CPU()]
    assert drv.load_devices([]) == []


def test_load_devices_accepts_any_iterable() -> None:
    assert drv.load_devices(iter([DeviceSpec.cpu()])) == [CPU()]


def test_load_devices_no_gpu_message(gpus: Any) -> None:
    gpus(0)
    with pytest.raises(ValueError) as info:
        drv.load_devices([DeviceSpec.accelerator(0)])
    assert str(info.value) == "Device 0 was requested but no devices were found."


def test_load_devices_too_few_gpus_message(gpus: Any) -> None:
    gpus(2)
    with pytest.raises(ValueError) as info:
        drv.load_devices([DeviceSpec.accelerator(0), DeviceSpec.accelerator(3)])
    assert str(info.value) == "Device 3 was requested but only found 2 devices."
    with pytest.raises(ValueError) as info:
        drv.load_devices([DeviceSpec.accelerator(2)])
    assert str(info.value) == "Device 2 was requested but only found 2 devices."


def test_load_devices_simulated_gpus(gpus: Any) -> None:
    gpus(4)
    devices = drv.load_devices(
        [DeviceSpec.accelerator(3), DeviceSpec.cpu(), DeviceSpec.accelerator(0)]
    )
    assert devices == [FakeAccelerator(3), CPU(), FakeAccelerator(0)]


def test_load_devices_via_package(gpus: Any) -> None:
    # The re-export is the same function, so patching the submodule applies.
    gpus(0)
    with pytest.raises(ValueError, match="no devices were found"):
        max.driver.load_devices([DeviceSpec.accelerator(0)])


def test_load_device_one_spec(gpus: Any) -> None:
    """max.driver.driver.load_device (MAX's), which load_devices maps."""
    assert drv.load_device(DeviceSpec.cpu()) is CPU()
    assert drv.load_device(DeviceSpec.cpu(5)) is CPU()
    gpus(2)
    assert drv.load_device(DeviceSpec.accelerator(1)) == FakeAccelerator(1)
    with pytest.raises(ValueError) as info:
        drv.load_device(DeviceSpec.accelerator(2))
    assert str(info.value) == "Device 2 was requested but only found 2 devices."
    gpus(0)
    with pytest.raises(ValueError) as info:
        drv.load_device(DeviceSpec.accelerator(0))
    assert str(info.value) == "Device 0 was requested but no devices were found."
    assert "load_device" in drv.__all__
    assert "load_device" not in max.driver.__all__  # as MAX: the submodule's


def test_load_devices_real(real_count: int) -> None:
    if real_count == 0:
        with pytest.raises(
            ValueError, match=r"^Device 0 was requested but no devices were found\.$"
        ):
            drv.load_devices([DeviceSpec.accelerator()])
    else:
        (dev,) = drv.load_devices([DeviceSpec.accelerator()])
        assert dev is max.driver.Accelerator(0)
        with pytest.raises(ValueError, match=f"only found {real_count} devices"):
            drv.load_devices([DeviceSpec.accelerator(real_count)])


# ---- scan_available_devices / devices_exist --------------------------------


def test_scan_available_devices_cpu_only(gpus: Any) -> None:
    gpus(0)
    assert drv.scan_available_devices() == [DeviceSpec.cpu()]


def test_scan_available_devices_gpus(gpus: Any) -> None:
    gpus(3)
    assert drv.scan_available_devices() == [
        DeviceSpec.accelerator(0),
        DeviceSpec.accelerator(1),
        DeviceSpec.accelerator(2),
    ]


def test_scan_available_devices_real(real_count: int) -> None:
    specs = drv.scan_available_devices()
    if real_count == 0:
        assert specs == [DeviceSpec.cpu()]
    else:
        assert specs == [DeviceSpec.accelerator(i) for i in range(real_count)]
    assert drv.load_devices(specs)


def test_devices_exist_cpu_only(gpus: Any) -> None:
    gpus(0)
    assert drv.devices_exist([])
    assert drv.devices_exist([DeviceSpec.cpu()])
    assert drv.devices_exist([DeviceSpec.cpu(0)])
    assert not drv.devices_exist([DeviceSpec.accelerator(0)])
    assert not drv.devices_exist([DeviceSpec.cpu(), DeviceSpec.accelerator(0)])


def test_devices_exist_gpus(gpus: Any) -> None:
    gpus(2)
    assert drv.devices_exist([DeviceSpec.accelerator(0), DeviceSpec.accelerator(1)])
    assert drv.devices_exist([DeviceSpec.cpu(), DeviceSpec.accelerator(1)])
    assert not drv.devices_exist([DeviceSpec.accelerator(2)])
    assert drv.devices_exist(drv.scan_available_devices())


# ---- calculate_virtual_device_count ----------------------------------------


def test_virtual_device_count() -> None:
    f = drv.calculate_virtual_device_count
    assert f() == 1
    assert f([]) == 1
    assert f([DeviceSpec.cpu()]) == 1
    assert f([DeviceSpec.accelerator(0)]) == 1
    assert f([DeviceSpec.accelerator(3)]) == 4
    assert f([DeviceSpec.accelerator(1)], [DeviceSpec.accelerator(5)]) == 6
    assert f([DeviceSpec.cpu(7), DeviceSpec.accelerator(2)]) == 3
    assert f(s for s in [DeviceSpec.accelerator(1)]) == 2


def test_virtual_device_count_from_cli_lists() -> None:
    f = drv.calculate_virtual_device_count_from_cli
    assert f() == 1
    assert f([]) == 1
    assert f([0]) == 1
    assert f([0, 3]) == 4
    assert f([1], [7, 2]) == 8


def test_virtual_device_count_from_cli_strings() -> None:
    f = drv.calculate_virtual_device_count_from_cli
    assert f("gpu") == 1
    assert f("gpu:0") == 1
    assert f("gpu:0,3") == 4
    assert f("gpu:2") == 3
    assert f("gpu: 1, 4") == 5
    assert f("cpu") == 1
    assert f("cpu", "gpu:5", [2]) == 6


def test_virtual_device_count_from_cli_all(gpus: Any) -> None:
    f = drv.calculate_virtual_device_count_from_cli
    gpus(4)
    assert f("gpu:all") == 4
    assert f("gpu:all", [9]) == 10
    gpus(0)
    assert f("gpu:all") == 1


def test_virtual_device_count_from_cli_all_real(real_count: int) -> None:
    assert drv.calculate_virtual_device_count_from_cli("gpu:all") == (real_count or 1)


def test_virtual_device_count_from_cli_skips_empty_ids_and_all(gpus: Any) -> None:
    """As MAX: an id list skips empty parts and ``all``; the ``gpu`` forms
    are case-insensitive."""
    gpus(4)
    f = drv.calculate_virtual_device_count_from_cli
    assert f("gpu:0,,1") == 2
    assert f("gpu:0,all") == 1  # "all" inside a list names no id
    assert f("gpu:,ALL, ,2") == 3
    assert f("gpu:") == 1
    assert f("gpu:,") == 1
    assert f("GPU:3") == 4
    assert f("GPU:ALL") == 4
    assert f(" Gpu ") == 1


@pytest.mark.parametrize("bad", ["gpu:x", "gpu:1.5", "gpu:0,x", "gpu:-", "GPU:0,Y"])
def test_virtual_device_count_from_cli_invalid(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid GPU id") as info:
        drv.calculate_virtual_device_count_from_cli(bad)
    assert bad.strip()[4:] in str(info.value)  # the input as given
