"""Devices (SPEC §3) on the CPU backend."""

from __future__ import annotations

import inspect

import pytest

from max import driver
from max.driver import CPU, Accelerator, Device, DeviceQueue


def _cpuinfo_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------
# Construction and identity


def test_cpu_is_cached():
    a = CPU()
    assert a is CPU()
    assert a is CPU(-1)
    assert a is CPU(0)
    assert a is CPU(id=-1)
    assert a is CPU(id=0)


def test_cpu_is_a_device(cpu):
    assert isinstance(cpu, Device)


def test_device_cpu_static(cpu):
    assert Device.cpu() is cpu
    assert Device.cpu(-1) is cpu
    assert Device.cpu(id=0) is cpu


def test_device_not_constructible():
    with pytest.raises(TypeError):
        Device()
    with pytest.raises(TypeError):
        Device(0)


# --------------------------------------------------------------------------
# Properties


def test_cpu_basic_properties(cpu):
    assert cpu.api == "cpu"
    assert cpu.label == "cpu"
    assert cpu.id == 0
    assert type(cpu.id) is int
    assert cpu.is_host is True
    assert cpu.is_host_unified is True
    assert cpu.is_compatible is True


def test_cpu_architecture_name_raises(cpu):
    with pytest.raises(ValueError) as exc:  # as MAX 26.7
        cpu.architecture_name  # noqa: B018
    assert "failed to get device architecture name" in str(exc.value)


def test_cpu_model_name_matches_proc_cpuinfo(cpu):
    expected = _cpuinfo_model_name()
    name = cpu.model_name
    assert isinstance(name, str)
    if expected is None:
        pytest.skip("/proc/cpuinfo has no 'model name'")
    assert name == expected


def test_cpu_stats(cpu):
    stats = cpu.stats
    assert isinstance(stats, dict)
    assert set(stats) == {  # MAX's keys
        "free_memory",
        "total_memory",
        "graph_mem_reserved",
        "graph_mem_used",
    }
    assert stats["graph_mem_reserved"] == stats["graph_mem_used"] == 0
    free, total = stats["free_memory"], stats["total_memory"]
    assert type(free) is int and type(total) is int
    assert total > 0
    assert 0 <= free <= total


def test_cpu_max_single_alloc_size(cpu):
    size = cpu.max_single_alloc_size
    assert type(size) is int
    assert size > 0


def test_default_queue_identity(cpu):
    q = cpu.default_queue
    assert isinstance(q, DeviceQueue)
    assert q is cpu.default_queue
    assert q.device is cpu


def test_default_stream_deprecated_alias(cpu):
    with pytest.warns(DeprecationWarning):
        q = cpu.default_stream
    assert q is cpu.default_queue


def test_can_access(cpu):
    assert cpu.can_access(cpu) is False
    assert cpu.can_access(CPU()) is False


@pytest.mark.parametrize("bad", [None, 0, "cpu", object(), DeviceQueue])
def test_can_access_type_error(cpu, bad):
    with pytest.raises(TypeError):
        cpu.can_access(bad)


def test_can_access_type_error_for_queue(cpu):
    with pytest.raises(TypeError):
        cpu.can_access(cpu.default_queue)


PEER_ACCESS_CPU_ONLY = """
import inspect
from max import driver
from max._core import driver as core
print(driver.accelerator_count(), driver.enable_all_peer_access())
print(driver.enable_all_peer_access is core.enable_all_peer_access)
print(inspect.signature(driver.enable_all_peer_access))
driver.set_virtual_device_count(2)  # virtual devices have no peer access
print(driver.enable_all_peer_access())
try:
    driver.enable_all_peer_access(0)
except TypeError as e:
    print("TypeError")
"""


def test_enable_all_peer_access_without_accelerators(run_py):
    """The CPU-only backend has no accelerator pair: nothing to enable, no
    error (in virtual device mode too); it takes no arguments."""
    r = run_py(PEER_ACCESS_CPU_ONLY, MAX_DRIVER_BACKEND="cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0 None", "True", "()", "None", "TypeError"]


def test_eq_and_hash(cpu):
    assert cpu == CPU()
    assert cpu == Device.cpu()
    assert not (cpu != CPU())
    assert hash(cpu) == hash(CPU())
    assert {cpu: 1}[CPU()] == 1
    assert len({cpu, CPU(), Device.cpu()}) == 1
    assert cpu != 0
    assert cpu != "cpu"
    assert cpu != cpu.default_queue
    assert (cpu == None) is False  # noqa: E711


def test_repr_and_str(cpu):
    assert repr(cpu) == "Device(type=cpu,id=0)"
    assert str(cpu) == "Device(type=cpu,id=0)"


def test_device_context_ptr(cpu):
    p = cpu._device_context_ptr()
    assert type(p) is int
    assert p != 0
    assert p == CPU()._device_context_ptr()


def test_device_synchronize_idle(cpu):
    assert cpu.synchronize() is None
    assert cpu.synchronize(timeout=0) is None
    assert cpu.synchronize(timeout=1.5) is None
    assert cpu.synchronize(timeout=None) is None


# --------------------------------------------------------------------------
# Accelerators on a CPU-only machine


needs_no_accelerator = pytest.mark.skipif(
    driver.accelerator_count() != 0, reason="machine has an accelerator"
)


@needs_no_accelerator
@pytest.mark.parametrize(
    "args,kwargs", [((), {}), ((-1,), {}), ((0,), {}), ((3,), {}), ((), {"id": 0})]
)
def test_accelerator_without_backend(args, kwargs):
    with pytest.raises(ValueError) as exc:
        Accelerator(*args, **kwargs)
    msg = str(exc.value)
    assert msg.startswith("failed to create device:")
    # The selection reasons are included when there is no backend.
    low = msg.lower()
    assert "cuda" in low and "hip" in low


@pytest.mark.parametrize("bad", ["0", 1.5, b"0", [0]])
def test_accelerator_non_int_type_error(bad):
    # Argument types are checked before anything else (SPEC §10).
    with pytest.raises(TypeError):
        Accelerator(bad)


def test_accelerator_str_keyword_type_error():
    with pytest.raises(TypeError):
        Accelerator(id="0")


# --------------------------------------------------------------------------
# Signatures


def _sig_names(obj):
    return list(inspect.signature(obj).parameters)


@pytest.mark.parametrize(
    "obj,names",
    [
        (lambda: driver.DeviceQueue.synchronize, ["self", "timeout"]),
        (lambda: driver.DeviceEvent.synchronize, ["self", "timeout"]),
        (lambda: driver.Device.synchronize, ["self", "timeout"]),
        (lambda: driver.CompletionFlag.signal, ["self", "value"]),
        (lambda: driver.DeviceEvent.elapsed_time, ["self", "end_event"]),
        (lambda: driver.DeviceQueue.wait_for_host_value, ["self", "flag", "value"]),
    ],
)
def test_text_signatures(obj, names):
    fn = obj()
    assert getattr(fn, "__text_signature__", None)
    assert fn.__doc__
    assert _sig_names(fn) == names


@pytest.mark.parametrize(
    "name",
    ["wait_for", "record_event"],
)
def test_overloaded_methods_have_signature_and_doc(name):
    fn = getattr(DeviceQueue, name)
    assert getattr(fn, "__text_signature__", None)
    inspect.signature(fn)  # must be parseable
    assert fn.__doc__


def test_overloaded_wait_for_doc_lists_overloads():
    doc = DeviceQueue.wait_for.__doc__
    for word in ("stream", "device", "event"):
        assert word in doc


def test_record_event_doc_lists_overloads():
    doc = DeviceQueue.record_event.__doc__
    assert "event" in doc
