"""Accelerator devices (SPEC §3, §9, §10) on a CUDA or HIP backend."""

from __future__ import annotations

import re

import pytest

from max import driver
from max.driver import CPU, Accelerator, Device, DeviceQueue, DeviceSpec

COUNT = driver.accelerator_count()
ARCH_RE = {"cuda": re.compile(r"^sm_\d+[a-z]?$"), "hip": re.compile(r"^gfx[0-9a-f]+")}


# --------------------------------------------------------------------------
# Construction and identity


def test_accelerator_count_positive():
    assert type(COUNT) is int
    assert COUNT >= 1


def test_default_id_is_zero(acc):
    assert Accelerator() is Accelerator(0)
    assert Accelerator(-1) is Accelerator(0)
    assert Accelerator(id=0) is acc
    assert Accelerator(id=-1) is acc
    assert acc.id == 0


def test_each_id_cached():
    devs = [Accelerator(i) for i in range(COUNT)]
    for i, d in enumerate(devs):
        assert Accelerator(i) is d
        assert Accelerator(id=i) is d
        assert d.id == i
        assert isinstance(d, Device)
    assert len(set(devs)) == COUNT


@pytest.mark.parametrize("offset", [0, 1, 1000])
def test_id_out_of_range(offset):
    with pytest.raises(ValueError) as exc:
        Accelerator(COUNT + offset)
    assert str(exc.value).startswith("failed to create device:"), str(exc.value)


def test_negative_id_below_minus_one():
    with pytest.raises(ValueError) as exc:
        Accelerator(-2)
    assert str(exc.value).startswith("failed to create device:"), str(exc.value)


@pytest.mark.parametrize("bad", ["0", 0.0, None, b"0", [0]])
def test_non_int_id_type_error(bad):
    with pytest.raises(TypeError):
        Accelerator(bad)


def test_cpu_still_works_next_to_accelerators(acc):
    assert CPU() is Device.cpu()
    assert CPU() != acc
    assert CPU().api == "cpu"


# --------------------------------------------------------------------------
# Properties


def test_api_label_id(acc):
    assert acc.api in ("cuda", "hip")
    assert acc.api == driver.accelerator_api()
    assert acc.label == "gpu"
    assert acc.is_host is False
    assert acc.is_compatible is True
    for i in range(COUNT):
        d = Accelerator(i)
        assert d.api == acc.api  # one backend per process
        assert d.label == "gpu"


def test_architecture_name(acc, api):
    name = acc.architecture_name
    assert isinstance(name, str)
    assert ARCH_RE[api].match(name), name
    assert driver.accelerator_architecture_name() == name


def test_model_name(acc):
    for i in range(COUNT):
        name = Accelerator(i).model_name
        assert isinstance(name, str)
        assert name.strip() == name and name


def test_stats(acc):
    for i in range(COUNT):
        s = Accelerator(i).stats
        assert isinstance(s, dict)
        for key in (
            "free_memory",
            "total_memory",
            "graph_mem_reserved",
            "graph_mem_used",
        ):
            assert key in s, (key, s)
            assert type(s[key]) is int, (key, s)
            assert s[key] >= 0, (key, s)
        assert 0 < s["total_memory"]
        assert s["free_memory"] <= s["total_memory"]
        assert (
            s["graph_mem_used"] <= s["graph_mem_reserved"]
            or s["graph_mem_reserved"] == 0
        )


def test_max_single_alloc_size(acc):
    size = acc.max_single_alloc_size
    assert type(size) is int
    assert size > 0


def test_is_host_unified_is_bool(acc):
    for i in range(COUNT):
        assert type(Accelerator(i).is_host_unified) is bool


def test_properties_are_stable(acc):
    assert acc.architecture_name == acc.architecture_name
    assert acc.model_name == acc.model_name
    assert acc.api == acc.api
    assert acc.is_host_unified == acc.is_host_unified


# --------------------------------------------------------------------------
# can_access


def test_can_access_self_and_cpu(acc):
    cpu = CPU()
    for i in range(COUNT):
        d = Accelerator(i)
        assert d.can_access(d) is False
        assert d.can_access(cpu) is False
        assert cpu.can_access(d) is False


def test_can_access_between_two_devices(acc, acc1):
    a = acc.can_access(acc1)
    b = acc1.can_access(acc)
    assert type(a) is bool and type(b) is bool
    assert a == b  # symmetric
    # Stable across calls.
    assert acc.can_access(acc1) == a


@pytest.mark.parametrize("bad", [None, 0, "gpu", object()])
def test_can_access_type_error(acc, bad):
    with pytest.raises(TypeError):
        acc.can_access(bad)


def test_can_access_queue_type_error(acc):
    with pytest.raises(TypeError):
        acc.can_access(acc.default_queue)


# --------------------------------------------------------------------------
# Default queue, equality, text, context pointer


def test_default_queue_identity(acc):
    q = acc.default_queue
    assert q is acc.default_queue
    assert isinstance(q, DeviceQueue)
    assert q.device is acc
    assert DeviceQueue(acc) != q


def test_default_queues_differ_between_devices(acc, acc1):
    assert acc.default_queue != acc1.default_queue
    assert acc1.default_queue.device is acc1


def test_default_stream_deprecated_alias(acc):
    with pytest.warns(DeprecationWarning):
        q = acc.default_stream
    assert q is acc.default_queue


def test_eq_and_hash(acc):
    assert acc == Accelerator(0)
    assert hash(acc) == hash(Accelerator(0))
    assert acc != CPU()
    assert CPU() != acc
    assert acc != 0
    assert len({acc, Accelerator(0), CPU()}) == 2
    if COUNT > 1:
        assert acc != Accelerator(1)
        assert len({Accelerator(i) for i in range(COUNT)}) == COUNT


def test_repr_and_str(acc):
    for i in range(COUNT):
        d = Accelerator(i)
        assert repr(d) == f"Device(type=gpu,id={i})"
        assert str(d) == f"Device(type=gpu,id={i})"


def test_device_context_ptr(acc):
    ptrs = [Accelerator(i)._device_context_ptr() for i in range(COUNT)]
    assert all(type(p) is int and p != 0 for p in ptrs)
    assert len(set(ptrs)) == COUNT
    assert acc._device_context_ptr() == ptrs[0]
    assert CPU()._device_context_ptr() not in ptrs


def test_synchronize_idle(acc):
    assert acc.synchronize() is None
    assert acc.synchronize(timeout=0) is None
    assert acc.synchronize(timeout=None) is None
    assert acc.synchronize(timeout=5) is None


@pytest.mark.parametrize("bad", [-1, -0.5])
def test_synchronize_negative_timeout(acc, bad):
    with pytest.raises(ValueError):
        acc.synchronize(timeout=bad)


@pytest.mark.parametrize("bad", ["1", object()])
def test_synchronize_bad_timeout_type(acc, bad):
    with pytest.raises(TypeError):
        acc.synchronize(timeout=bad)


# --------------------------------------------------------------------------
# Pure-Python helpers with accelerators present (SPEC §9)


def test_scan_available_devices():
    specs = driver.scan_available_devices()
    assert specs == [DeviceSpec.accelerator(i) for i in range(COUNT)]
    assert driver.devices_exist(specs)
    assert not driver.devices_exist([DeviceSpec.accelerator(COUNT)])


def test_load_devices(acc):
    devs = driver.load_devices([DeviceSpec.accelerator(0), DeviceSpec.cpu()])
    assert devs[0] is acc
    assert devs[1] is CPU()
    assert driver.load_devices([DeviceSpec.accelerator(COUNT - 1)])[0] is Accelerator(
        COUNT - 1
    )


def test_load_devices_out_of_range():
    with pytest.raises(ValueError) as exc:
        driver.load_devices([DeviceSpec.accelerator(COUNT)])
    assert str(exc.value) == (
        f"Device {COUNT} was requested but only found {COUNT} devices."
    )


def test_virtual_device_count_gpu_all():
    assert driver.calculate_virtual_device_count_from_cli("gpu:all") == max(1, COUNT)
    assert driver.calculate_virtual_device_count_from_cli("gpu") == 1


def test_accelerator_module_helpers_agree(acc):
    assert driver.driver.accelerator_count() == COUNT
    assert driver.driver.accelerator_api() == acc.api
