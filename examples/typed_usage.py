"""A typed tour of every public name of max.driver.

It type-checks with ``python -m mypy --strict examples/typed_usage.py`` and
runs on any machine (``python examples/typed_usage.py``): the GPU parts run
only when ``driver.accelerator_count()`` is non-zero.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import warnings
from typing import Any

from max import driver
from max.driver import (
    CPU,
    Accelerator,
    CompletionFlag,
    Device,
    DeviceEvent,
    DeviceQueue,
    DeviceSpec,
    accelerator_api,
    accelerator_architecture_name,
    accelerator_count,
    backend_selection,
    calculate_virtual_device_count,
    calculate_virtual_device_count_from_cli,
    devices_exist,
    load_devices,
    scan_available_devices,
)
from max.driver import __unsafe_pack_py_host_func as pack_host_func
from max.driver import driver as helpers

WAIT = 10.0


def describe(device: Device) -> dict[str, object]:
    """Every property of a device (architecture_name only on accelerators)."""
    info: dict[str, object] = {
        "repr": repr(device),
        "api": device.api,
        "label": device.label,
        "id": device.id,
        "is_host": device.is_host,
        "is_host_unified": device.is_host_unified,
        "model_name": device.model_name,
        "stats": device.stats,
        "max_single_alloc_size": device.max_single_alloc_size,
        "is_compatible": device.is_compatible,
        "context": device._device_context_ptr(),
    }
    if device.is_host:
        try:
            _ = device.architecture_name
        except RuntimeError as exc:
            info["architecture_name"] = f"none ({exc})"
    else:
        info["architecture_name"] = device.architecture_name
    return info


def exercise_queues(device: Device, cpu: CPU) -> list[str]:
    """Queues, events, flags and host functions on ``device``."""
    log: list[str] = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            log.append(what)

    default: DeviceQueue = device.default_queue
    queue = DeviceQueue(device)
    other = DeviceQueue(device=device)
    assert queue.device is device and queue != default
    assert queue._device_context_ptr() != other._device_context_ptr()
    assert {queue: 1}[queue] == 1  # hashable
    handle: int = queue.native_stream_handle
    assert (handle == 0) == device.is_host

    # Host functions: on a queue, and on the device's default queue.
    queue.__unsafe_enqueue_py_host_func(lambda: note("queue"))
    device.__unsafe_enqueue_py_host_func(lambda: note("default queue"))

    # record_event, both overloads.
    first: DeviceEvent = queue.record_event()
    timed_start = DeviceEvent(device, enable_timing=True)
    timed_end = DeviceEvent(device=device, enable_timing=True)
    nothing: None = queue.record_event(timed_start)
    assert nothing is None
    queue.__unsafe_enqueue_py_host_func(lambda: time.sleep(0.01))
    queue.record_event(event=timed_end)

    # wait_for, all three overloads.
    other.wait_for(queue)
    other.wait_for(device)
    other.wait_for(first)
    other.wait_for(stream=queue)
    other.wait_for(device=device)
    other.wait_for(event=first)

    # A completion flag gates the queue until the host signals it.
    flag = CompletionFlag(device)
    assert flag.device is device and flag.load() == 0
    assert flag.device_ptr != 0 and flag._unsafe_ptr != flag.device_ptr
    other.wait_for_host_value(flag, 1)
    other.__unsafe_enqueue_py_host_func(lambda: note("after the flag"))
    threading.Timer(0.02, flag.signal, args=(1,)).start()

    # An asynchronous host function signals its own flag when it is done.
    done = CompletionFlag(device)
    other.__unsafe_enqueue_async_py_host_func(lambda: note("async"), done, 7, cpu)
    device.__unsafe_enqueue_async_py_host_func(
        lambda: None, CompletionFlag(device), 1, cpu
    )
    other.wait_for_host_value(flag=done, value=7)

    other.synchronize(timeout=WAIT)
    queue.synchronize()
    timed_end.synchronize(timeout=WAIT)
    assert first.is_ready() and timed_end.device is device
    elapsed: float = timed_start.elapsed_time(timed_end)
    note(f"elapsed {elapsed:.1f} ms")
    device.synchronize(timeout=WAIT)
    flag.reset()
    assert flag.load() == 0 and done.load() == 7

    if hasattr(queue, "__cuda_stream__"):
        version, stream = queue.__cuda_stream__()
        assert version == 0 and stream == queue.native_stream_handle
    return log


def exercise_helpers() -> None:
    """The pure-Python helpers of max.driver.driver."""
    count: int = accelerator_count()
    assert helpers.accelerator_count() == count
    api: str = accelerator_api()
    selection: list[dict[str, Any]] = backend_selection()
    chosen = [entry["api"] for entry in selection if entry["chosen"]]
    print(f"backend: {chosen or ['none']}, accelerator_api(): {api}")

    specs: list[DeviceSpec] = scan_available_devices()
    devices: list[Device] = load_devices(specs)
    assert devices_exist(specs) and len(devices) == len(specs)
    cpu_spec = DeviceSpec.cpu()
    gpu_spec = DeviceSpec.accelerator(id=1)
    assert DeviceSpec(id=0, device_type="gpu") == DeviceSpec.accelerator()
    assert cpu_spec.device_type == "cpu" and gpu_spec.id == 1
    assert calculate_virtual_device_count([cpu_spec], [gpu_spec]) == 2
    assert calculate_virtual_device_count_from_cli("gpu:0,3", [1], "cpu") == 4
    if count == 0:
        try:
            accelerator_architecture_name()
        except RuntimeError:
            pass
        try:
            load_devices([DeviceSpec.accelerator()])
        except ValueError as exc:
            print(exc)
    else:
        print("architecture:", accelerator_architecture_name())


def exercise_deprecated(cpu: CPU) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alias: object = driver.DeviceStream
        assert alias is DeviceQueue
        assert cpu.default_stream is cpu.default_queue
    assert all(w.category is DeprecationWarning for w in caught)


def exercise_packed_host_func() -> None:
    calls: list[str] = []
    fn_ptr, data_ptr = pack_host_func(lambda: calls.append("packed"))
    trampoline = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn_ptr)
    trampoline(data_ptr)
    assert calls == ["packed"]
    assert pack_host_func is getattr(driver, "__unsafe_pack_py_host_func")


def main() -> int:
    cpu = CPU()
    assert cpu is CPU(id=0) is Device.cpu() is Device.cpu(id=-1)
    print(describe(cpu))
    print(exercise_queues(cpu, cpu))
    exercise_helpers()
    exercise_deprecated(cpu)
    exercise_packed_host_func()
    assert not cpu.can_access(cpu)

    if driver.accelerator_count():
        gpu = Accelerator()
        assert gpu is Accelerator(id=0)
        print(describe(gpu))
        print(exercise_queues(gpu, cpu))
        assert not gpu.can_access(cpu) and not cpu.can_access(other=gpu)
        if accelerator_count() > 1:
            print("peer access:", gpu.can_access(Accelerator(1)))
    else:
        try:
            Accelerator()
        except ValueError as exc:
            print(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
