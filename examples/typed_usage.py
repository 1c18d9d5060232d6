"""A typed tour of every public name of max.driver.

It type-checks with ``python -m mypy --strict examples/typed_usage.py`` and
runs on any machine (``python examples/typed_usage.py``): the GPU parts run
only when ``driver.accelerator_count()`` is non-zero.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pickle
import sys
import tempfile
import threading
import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from max import driver
from max.driver import (
    CPU,
    Accelerator,
    Buffer,
    CompletionFlag,
    Device,
    DeviceEvent,
    DevicePinnedBuffer,
    DeviceQueue,
    DeviceSpec,
    DLPackArray,
    HostHazardCompletion,
    HostHazardError,
    Usage,
    accelerator_api,
    accelerator_architecture_name,
    accelerator_count,
    backend_selection,
    batch_inplace_copy,
    calculate_virtual_device_count,
    calculate_virtual_device_count_from_cli,
    copy_pinned_to_destinations,
    devices_exist,
    get_virtual_cpu_target,
    get_virtual_device_api,
    get_virtual_device_count,
    get_virtual_device_target_arch,
    is_virtual_device_mode,
    load_devices,
    scan_available_devices,
    set_virtual_cpu_target,
    set_virtual_device_api,
    set_virtual_device_count,
    set_virtual_device_target_arch,
)
from max.driver import __unsafe_pack_py_host_func as pack_host_func
from max.driver import driver as helpers
from max.dtype import DType, finfo

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
        except ValueError as exc:  # as MAX 26.7
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


def exercise_buffers(device: Device, cpu: CPU) -> list[str]:
    """Buffers on ``device``: creation, NumPy, views, copies, DLPack."""
    log: list[str] = []
    queue = DeviceQueue(device)
    fresh = Buffer(DType.float32, (2, 3), device)
    bound = Buffer(DType.float32, [2, 3], stream=queue, usage=Usage.DEFAULT)
    zeros: Buffer = Buffer.zeros((2, 3), DType.float32, device=device)
    zeros_on_queue = Buffer.zeros(shape=(4,), dtype=DType.int64, stream=queue)
    scalar = Buffer.scalar(2.5, DType.float64, device)
    assert bound.stream is queue and fresh.device is device
    assert zeros_on_queue.stream is queue and scalar.item() == 2.5
    shape: tuple[int, ...] = zeros.shape
    strides: tuple[int, ...] = zeros.strides
    log.append(f"{zeros.dtype} {shape} {strides} rank={zeros.rank}")
    assert zeros.num_elements == 6 and zeros.element_size == 4
    assert zeros.is_contiguous and zeros.is_host == device.is_host
    assert not zeros.pinned and zeros.usage is Usage.DEFAULT
    assert zeros._aligned() and zeros._data_ptr() != 0

    # NumPy round trip: from_numpy aliases the array, to_numpy copies
    # accelerator memory back.
    data: NDArray[np.float32] = np.arange(6, dtype=np.float32).reshape(2, 3)
    host = Buffer.from_numpy(data)
    on_device = host.to(device)
    back: NDArray[Any] = on_device.to_numpy()
    assert back.tolist() == data.tolist()
    assert np.asarray(host).shape == (2, 3)

    # Views and element access.
    column: Buffer = on_device[:, 1]
    cell = on_device[1, 2]
    value: bool | int | float = cell.item()
    on_device[0, 0] = 10
    assert value == 5.0 and column.shape == (2,)
    as_int: Buffer = on_device.view(DType.int32)
    flat = on_device.view(dtype=DType.float32, shape=(6,))
    assert as_int.shape == (2, 3) and flat.shape == (6,)

    # Copies: ordered by the memory they touch, no synchronization needed.
    target = Buffer(DType.float32, (2, 3), queue)
    target.inplace_copy_from(host)
    batch_inplace_copy([target], [host])
    copy_pinned_to_destinations(host, [target])

    # Hazard records: declare work the module does not see, poison a buffer.
    point: HostHazardCompletion = HostHazardCompletion.record_on(queue)
    target._stamp_write(point)
    target._stamp_read(point)
    point.wait(timeout=WAIT)
    tracked: bool = target._host_hazard_tracked
    untracked = Buffer(DType.int8, (4,), device, usage=Usage.UNTRACKED)
    assert tracked and not untracked._host_hazard_tracked and point.is_ready()
    failed = HostHazardCompletion.poisoned(queue, "the producer failed")
    failed.poison("it failed again")
    untracked._stamp_write(failed)  # a no-op: untracked storage
    try:
        failed.wait()
    except HostHazardError as exc:
        log.append(str(exc))
    copied: Buffer = host.copy(device)
    on_queue: Buffer = host.copy(stream=queue)
    moved: Buffer = host.to(queue)
    many: list[Buffer] = host.to([cpu, queue])
    packed: Buffer = on_device[:, ::2].contiguous()
    assert packed.device is cpu and len(many) == 2
    log.append(f"copies on {copied.device}, {on_queue.stream}, {moved.stream}")

    # MAX's keyword forms, the array constructor and sequence keys.
    from_array: Buffer = Buffer(data, device)  # always a copy, on `device`
    assert from_array.device is device and from_array.shape == (2, 3)
    assert Buffer(np.ones(3, np.int8), device=cpu).to_numpy().tolist() == [1] * 3
    assert Buffer.from_numpy(arr=data).shape == (2, 3)
    assert Buffer.from_dlpack(array=data, copy=True).shape == (2, 3)
    to_device: Buffer = host.to(device=device)
    to_stream: Buffer = host.to(stream=queue)
    to_devices: list[Buffer] = host.to(devices=[cpu, device])
    to_streams: list[Buffer] = host.to(streams=[queue, cpu.default_queue])
    assert to_device.device is device and to_stream.stream is queue
    assert len(to_devices) == len(to_streams) == 2
    row: Buffer = on_device[[1, slice(None)]]
    on_device[[0, 1]] = 7
    assert row.shape == (3,) and on_device[0, 1].item() == 7.0

    # DLPack: numpy arrays and buffers are both DLPackArrays.
    producers: list[DLPackArray] = [data, host]
    imported = [Buffer.from_dlpack(p) for p in producers]
    capsule: Any = host.__dlpack__(max_version=(1, 0))
    dl_device: tuple[int, int] = on_device.__dlpack_device__()
    assert capsule is not None and isinstance(host, DLPackArray)
    assert Buffer.from_dlpack(data, copy=True).shape == (2, 3)
    log.append(f"dlpack device {dl_device}, {len(imported)} imports")

    # A memory-mapped file, written through with "r+".
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.bin")
        data.tofile(path)
        mapped = Buffer.mmap(path, DType.float32, (6,), mode="r+", offset=0)
        mapped[0] = 42.0
        del mapped
        assert np.fromfile(path, dtype=np.float32)[0] == 42.0
        assert Buffer.mmap(path, DType.float32, shape=6).shape == (6,)

    if not device.is_host:
        pinned = DevicePinnedBuffer.zeros((4,), DType.float32, device)
        window: DevicePinnedBuffer = pinned[1:]
        staging = Buffer(DType.uint8, (8,), device, Usage.STAGING)
        assert pinned.pinned and staging.pinned and window.usage is Usage.STAGING
        assert DevicePinnedBuffer(DType.int8, (2,), stream=queue).stream is queue
        if hasattr(on_device, "__cuda_array_interface__"):
            log.append(str(on_device.__cuda_array_interface__["version"]))
    queue.synchronize(timeout=WAIT)
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
        except ValueError:  # as MAX 26.7
            pass
        try:
            load_devices([DeviceSpec.accelerator()])
        except ValueError as exc:
            print(exc)
    else:
        print("architecture:", accelerator_architecture_name())


def exercise_virtual_devices() -> None:
    """MAX's virtual device mode: accelerators for compilation only."""
    set_virtual_device_api("cuda")
    set_virtual_device_target_arch("sm_90")
    set_virtual_cpu_target("generic")
    set_virtual_device_count(2)
    try:
        assert is_virtual_device_mode() and get_virtual_device_count() == 2
        assert accelerator_count() == 2  # whatever the hardware
        gpu: Accelerator = Accelerator(1)
        assert gpu.api == get_virtual_device_api() == "cuda"
        assert gpu.architecture_name == get_virtual_device_target_arch()
        cpu_target: str = get_virtual_cpu_target()
        one: Device = helpers.load_device(DeviceSpec.accelerator(0))
        assert load_devices([DeviceSpec.accelerator(1)]) == [gpu] and one.id == 0
        print(f"virtual: {gpu.model_name}, CPU target {cpu_target}")
        try:
            _ = gpu.default_queue  # no queues, events, flags or memory
        except RuntimeError as exc:
            assert "virtual device mode" in str(exc)
    finally:
        set_virtual_device_count(0)
        for reset in (
            set_virtual_device_api,
            set_virtual_device_target_arch,
            set_virtual_cpu_target,
        ):
            reset("")
    assert not is_virtual_device_mode()


def exercise_dtypes() -> None:
    """max.dtype beyond DType's members: limits and MLIR names."""
    limits: finfo = finfo(DType.bfloat16)
    e4m3 = DType.finfo(DType.float8_e4m3fn)
    values: list[float] = [limits.eps, limits.max, limits.min, limits.tiny]
    assert e4m3.max == 448.0 and limits.smallest_normal == values[-1]
    assert limits.bits == 16 and limits.dtype is DType.bfloat16
    assert DType("f32") is DType.float32 and DType.int8._mlir == "si8"
    assert repr(DType.float32) == "float32" and str(DType.float32) == "DType.float32"
    version: str = driver.__version__
    print(f"max.driver {version}")


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


def exercise_protocols(device: Device) -> str:
    """The buffer protocol, pickling and await."""
    host = Buffer.zeros((2, 3), DType.int32)
    view: memoryview = memoryview(host)
    raw: bytes = bytes(host)
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(host, protocol=5, buffer_callback=oob.append)
    back: Buffer = pickle.loads(data, buffers=oob)
    moved: Buffer = pickle.loads(pickle.dumps(host.to(device)))
    queue = DeviceQueue(device)

    async def wait() -> None:
        await queue
        await queue.record_event()
        await asyncio.wait_for(DeviceEvent(device), 5.0)

    asyncio.run(wait())
    return f"{view.format} {len(raw)} {back.shape} {moved.device}"


def main() -> int:
    cpu = CPU()
    assert cpu is CPU(id=0) is Device.cpu() is Device.cpu(id=-1)
    print(describe(cpu))
    print(exercise_queues(cpu, cpu))
    exercise_helpers()
    exercise_virtual_devices()
    exercise_dtypes()
    exercise_deprecated(cpu)
    exercise_packed_host_func()
    print(exercise_buffers(cpu, cpu))
    print(exercise_protocols(cpu))
    assert not cpu.can_access(cpu)

    if driver.accelerator_count():
        gpu = Accelerator()
        assert gpu is Accelerator(id=0)
        print(describe(gpu))
        print(exercise_queues(gpu, cpu))
        print(exercise_buffers(gpu, cpu))
        print(exercise_protocols(gpu))
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
