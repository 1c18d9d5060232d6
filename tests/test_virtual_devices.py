"""MAX's virtual device mode: ``set_virtual_device_count`` and its siblings.

With a count above 0, ``accelerator_count()`` is that count and
``Accelerator(i)`` a virtual device, on every backend (this file runs on the
CPU-only backend; tests/accelerator/test_accel_virtual.py runs beside real
or fake accelerators).  A virtual device reports the API and target
architecture set and refuses, with an error naming virtual device mode,
everything that needs a real device: queues, events, flags, memory.

The settings are process-wide: every test here puts them back (the
``restore`` fixture), so that the rest of the suite sees real devices.
"""

from __future__ import annotations

import copy
import os
import pickle
import platform
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import max.driver
import max.driver.driver as helpers
from max._core import driver as core
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
)
from max.dtype import DType

REAL_COUNT = core.accelerator_count()  # before any test turned the mode on
VIRTUAL = "virtual device mode"
SETTERS = {
    "api": (max.driver.set_virtual_device_api, max.driver.get_virtual_device_api),
    "arch": (
        max.driver.set_virtual_device_target_arch,
        max.driver.get_virtual_device_target_arch,
    ),
    "cpu": (max.driver.set_virtual_cpu_target, max.driver.get_virtual_cpu_target),
}


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    saved = {name: get() for name, (_, get) in SETTERS.items()}
    count = max.driver.get_virtual_device_count()
    yield
    max.driver.set_virtual_device_count(count)
    for name, (set_, _) in SETTERS.items():
        set_(saved[name])


def virtual(count: int = 2, api: str = "cuda", arch: str = "sm_80") -> None:
    max.driver.set_virtual_device_api(api)
    max.driver.set_virtual_device_target_arch(arch)
    max.driver.set_virtual_device_count(count)


# ---- the settings ----------------------------------------------------------


def test_off_and_unset_in_a_fresh_process(run_py: Any) -> None:
    result = run_py(
        "from max import driver as d\n"
        "print(d.get_virtual_device_count(), d.is_virtual_device_mode(),\n"
        "      [d.get_virtual_device_api(), d.get_virtual_device_target_arch(),\n"
        "       d.get_virtual_cpu_target()])\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0 False ['', '', '']"


def test_settings_round_trip() -> None:
    for value in ("hip", "metal", "cuda"):
        max.driver.set_virtual_device_api(value)
        assert max.driver.get_virtual_device_api() == value
    max.driver.set_virtual_device_target_arch(arch="gfx942")
    assert max.driver.get_virtual_device_target_arch() == "gfx942"
    max.driver.set_virtual_cpu_target(cpu="x86-64-v3")
    assert max.driver.get_virtual_cpu_target() == "x86-64-v3"
    for set_, get in SETTERS.values():
        set_("")  # unsets
        assert get() == ""
    for count in (3, 1, 0):
        max.driver.set_virtual_device_count(count=count)
        assert max.driver.get_virtual_device_count() == count
        assert max.driver.is_virtual_device_mode() is (count > 0)


def test_generic_and_native_cpu_targets() -> None:
    """MAX's rules: 'generic' is the host family's baseline, 'native' is
    refused (it would leak the compiling host's CPU)."""
    machine = platform.machine()
    if machine in ("x86_64", "AMD64"):
        max.driver.set_virtual_cpu_target("generic")
        assert max.driver.get_virtual_cpu_target() == "x86-64"
    elif machine in ("aarch64", "arm64"):
        max.driver.set_virtual_cpu_target("generic")
        assert max.driver.get_virtual_cpu_target() == "generic"
    max.driver.set_virtual_cpu_target("neoverse-n1")
    with pytest.raises(ValueError, match="'native'"):
        max.driver.set_virtual_cpu_target("native")
    assert max.driver.get_virtual_cpu_target() == "neoverse-n1"  # unchanged


@pytest.mark.parametrize("bad", [1.5, "2", None, True, [1]])
def test_count_must_be_an_int(bad: object) -> None:
    with pytest.raises(TypeError, match="'count' must be an int"):
        max.driver.set_virtual_device_count(bad)  # type: ignore[arg-type]
    assert max.driver.get_virtual_device_count() == 0


@pytest.mark.parametrize("bad", [-1, 4097, 2**31 - 1, 2**31, 2**70, -(2**70)])
def test_count_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match="between 0 \\(off\\) and 4096"):
        max.driver.set_virtual_device_count(bad)
    assert max.driver.get_virtual_device_count() == 0


def test_largest_count_enumerates() -> None:
    """The bound keeps enumeration cheap: MAX accepts 2**31 - 1, whose
    scan_available_devices() would build two billion DeviceSpecs (the
    argument fuzzer's seed 4239215627 once did, and timed out)."""
    max.driver.set_virtual_device_count(4096)
    specs = max.driver.scan_available_devices()
    assert len(specs) == 4096
    assert specs[-1] == DeviceSpec.accelerator(4095)
    assert max.driver.devices_exist(specs)


def test_count_takes_index_objects() -> None:
    max.driver.set_virtual_device_count(np.int64(2))
    assert max.driver.accelerator_count() == 2


@pytest.mark.parametrize("name", sorted(SETTERS))
def test_text_settings_reject_bad_values(name: str) -> None:
    set_, get = SETTERS[name]
    set_("ok")
    for bad in (1, None, b"cuda", ["cuda"]):
        with pytest.raises(TypeError, match="must be a str"):
            set_(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="null character"):
        set_("a\0b")
    with pytest.raises(ValueError, match="longer than 63 bytes"):
        set_("x" * 64)
    set_("y" * 63)
    assert get() == "y" * 63
    with pytest.raises(TypeError):
        set_()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        set_(value="x")  # type: ignore[call-arg]


def test_every_function_has_max_s_signature() -> None:
    import inspect

    params = {
        "set_virtual_device_count": ["count"],
        "set_virtual_device_api": ["api"],
        "set_virtual_device_target_arch": ["arch"],
        "set_virtual_cpu_target": ["cpu"],
        "get_virtual_device_count": [],
        "get_virtual_device_api": [],
        "get_virtual_device_target_arch": [],
        "get_virtual_cpu_target": [],
        "is_virtual_device_mode": [],
    }
    for name, expected in params.items():
        fn = getattr(max.driver, name)
        assert fn is getattr(core, name) is getattr(helpers, name)
        assert name in max.driver.__all__
        assert fn.__doc__ and fn.__text_signature__
        assert list(inspect.signature(fn).parameters) == expected, name


# ---- virtual accelerators --------------------------------------------------


def test_accelerator_count_is_the_virtual_count() -> None:
    virtual(3)
    for count in (core.accelerator_count, max.driver.accelerator_count):
        assert count() == 3
    assert helpers.accelerator_count() == 3
    max.driver.set_virtual_device_count(0)
    assert max.driver.accelerator_count() == REAL_COUNT


def test_accelerators_are_cached_per_id() -> None:
    virtual(3)
    devices = [Accelerator(i) for i in range(3)]
    assert Accelerator() is Accelerator(-1) is Accelerator(id=0) is devices[0]
    for i, dev in enumerate(devices):
        assert Accelerator(i) is dev
        assert isinstance(dev, Accelerator) and isinstance(dev, Device)
        assert (dev.id, dev.label, repr(dev)) == (i, "gpu", f"Device(type=gpu,id={i})")
        assert not dev.is_host and not dev.is_host_unified and dev.is_compatible
    assert len(set(devices)) == 3
    assert devices[0] != devices[1] and devices[0] != CPU()
    ptrs = {dev._device_context_ptr() for dev in devices}
    assert len(ptrs) == 3


def test_api_and_architecture_as_set() -> None:
    virtual(2, api="hip", arch="gfx942")
    dev = Accelerator(1)
    assert dev.api == "hip" and dev.architecture_name == "gfx942"
    assert "hip" in dev.model_name and "gfx942" in dev.model_name
    assert max.driver.accelerator_api() == "hip"
    assert max.driver.accelerator_architecture_name() == "gfx942"


def test_without_an_architecture() -> None:
    virtual(1, arch="")
    with pytest.raises(RuntimeError, match="failed to get device architecture name"):
        _ = Accelerator(0).architecture_name
    with pytest.raises(RuntimeError, match="set_virtual_device_target_arch"):
        _ = Accelerator(0).architecture_name


def test_without_an_api_the_backend_s_or_cuda() -> None:
    virtual(1, api="")
    expected = core.accelerator_api() if REAL_COUNT else "cuda"
    assert Accelerator(0).api == expected


def test_new_settings_make_new_devices() -> None:
    """A virtual device keeps the settings it was made with; the same
    settings give the same object back."""
    virtual(2, api="cuda", arch="sm_80")
    a100 = Accelerator(0)
    max.driver.set_virtual_device_target_arch("sm_90")
    h100 = Accelerator(0)
    assert h100 is not a100 and h100 != a100
    assert (a100.architecture_name, h100.architecture_name) == ("sm_80", "sm_90")
    max.driver.set_virtual_device_api("hip")
    assert Accelerator(0).api == "hip" and a100.api == "cuda"
    virtual(4, api="cuda", arch="sm_80")  # a new count keeps the devices
    assert Accelerator(0) is a100


def test_out_of_range_ids() -> None:
    virtual(2)
    for bad in (2, 3, 2**40, -2):
        with pytest.raises(ValueError, match="^failed to create device: ") as info:
            Accelerator(bad)
        assert "virtual device mode has 2 devices" in str(info.value)
    with pytest.raises(TypeError):
        Accelerator("0")  # type: ignore[arg-type]


def test_harmless_operations() -> None:
    virtual(2)
    a, b = Accelerator(0), Accelerator(1)
    a.synchronize()  # nothing can be enqueued on it: returns at once
    a.synchronize(timeout=0)
    assert not a.can_access(b) and not a.can_access(a)
    assert not a.can_access(CPU()) and not CPU().can_access(a)
    caps = a._capabilities()
    assert caps["driver_version"] == 0 and not caps["stream_memory_operations"]
    assert caps["python_host_functions_run_on"] == "unavailable"
    assert copy.copy(a) is a and copy.deepcopy(a) is a
    assert pickle.loads(pickle.dumps(a)) is a


def _refused(dev: Accelerator) -> dict[str, object]:
    host = Buffer.from_numpy(np.arange(4, dtype=np.float32))
    return {
        "DeviceQueue": lambda: DeviceQueue(dev),
        "default_queue": lambda: dev.default_queue,
        "DeviceEvent": lambda: DeviceEvent(dev),
        "timed DeviceEvent": lambda: DeviceEvent(dev, enable_timing=True),
        "CompletionFlag": lambda: CompletionFlag(dev),
        "stats": lambda: dev.stats,
        "max_single_alloc_size": lambda: dev.max_single_alloc_size,
        "Buffer": lambda: Buffer(DType.float32, (2,), dev),
        "Buffer(array)": lambda: Buffer(np.zeros(2), dev),
        "zeros": lambda: Buffer.zeros((2,), DType.int8, device=dev),
        "scalar": lambda: Buffer.scalar(1, DType.int8, dev),
        "STAGING": lambda: Buffer(DType.int8, (2,), dev, max.driver.Usage.STAGING),
        "DevicePinnedBuffer": lambda: DevicePinnedBuffer(DType.int8, (2,), dev),
        "to": lambda: host.to(dev),
        "to(list)": lambda: host.to([CPU(), dev]),
        "copy": lambda: host.copy(device=dev),
        "wait_for": lambda: CPU().default_queue.wait_for(dev),
        "host function": lambda: dev.__unsafe_enqueue_py_host_func(lambda: None),
    }


def test_what_needs_a_real_device_is_refused_naming_the_mode() -> None:
    virtual(2)
    dev = Accelerator(1)
    for what, call in _refused(dev).items():
        with pytest.raises(RuntimeError, match=VIRTUAL) as info:
            call()  # type: ignore[operator]
        assert "Accelerator(1) is a virtual cuda device" in str(info.value), what


def test_a_refused_call_changes_nothing() -> None:
    virtual(1)
    dev = Accelerator(0)
    ran: list[int] = []
    flag = CompletionFlag(CPU())
    for _ in range(3):
        with pytest.raises(RuntimeError, match=VIRTUAL):
            dev.__unsafe_enqueue_py_host_func(lambda: ran.append(1))
        with pytest.raises(RuntimeError, match=VIRTUAL):
            dev.__unsafe_enqueue_async_py_host_func(
                lambda: ran.append(2), flag, 1, CPU()
            )
    CPU().synchronize(timeout=10)
    assert ran == [] and flag.load() == 0


def test_helpers_see_the_virtual_devices() -> None:
    virtual(3)
    specs = max.driver.scan_available_devices()
    assert specs == [DeviceSpec.accelerator(i) for i in range(3)]
    assert max.driver.load_devices(specs) == [Accelerator(i) for i in range(3)]
    assert helpers.load_device(DeviceSpec.accelerator(2)) is Accelerator(2)
    assert max.driver.devices_exist([DeviceSpec.accelerator(2)])
    assert not max.driver.devices_exist([DeviceSpec.accelerator(3)])
    with pytest.raises(ValueError, match="only found 3 devices"):
        helpers.load_device(DeviceSpec.accelerator(3))
    assert max.driver.calculate_virtual_device_count_from_cli("gpu:all") == 3


def test_leaving_the_mode() -> None:
    virtual(1)
    ghost = Accelerator(0)
    max.driver.set_virtual_device_count(0)
    assert max.driver.accelerator_count() == REAL_COUNT
    if REAL_COUNT == 0:
        with pytest.raises(ValueError, match="^failed to create device: "):
            Accelerator(0)
    else:
        assert Accelerator(0) is not ghost and Accelerator(0).api in ("cuda", "hip")
    with pytest.raises(RuntimeError, match=VIRTUAL):  # still virtual
        DeviceQueue(ghost)


def test_cpu_work_goes_on_in_virtual_mode() -> None:
    virtual(2)
    buf = Buffer.from_numpy(np.arange(3, dtype=np.int32))
    assert buf.to(CPU()) is buf and buf.device is CPU()
    q = DeviceQueue(CPU())
    q.wait_for(q.record_event())
    q.synchronize(timeout=10)
    assert Buffer(np.arange(3), CPU()).to_numpy().tolist() == [0, 1, 2]


def test_threads_racing_settings_and_devices() -> None:
    """The settings are the core's, under a lock: a device asked for while
    other threads rewrite them never sees a torn value (half of "cuda" over
    "hip", say), only values that were set."""
    virtual(4, api="cuda", arch="sm_80")
    pairs = {("cuda", "sm_80"), ("hip", "gfx942")}
    stop = threading.Event()
    seen: set[tuple[str, str]] = set()

    def flip() -> None:
        while not stop.is_set():
            for api, arch in pairs:
                max.driver.set_virtual_device_api(api)
                max.driver.set_virtual_device_target_arch(arch)

    threads = [threading.Thread(target=flip) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(2000):
            dev = Accelerator(i % 4)
            seen.add((dev.api, dev.architecture_name))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    # api and arch are set by two calls, so any pairing of set values may
    # be seen; a torn string would not be among them.
    assert {api for api, _ in seen} <= {"cuda", "hip"}
    assert {arch for _, arch in seen} <= {"sm_80", "gfx942"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_settings_work_after_fork(run_py: Any) -> None:
    virtual(2, api="hip", arch="gfx90a")
    code = (
        "import os, sys\n"
        "from max import driver as d\n"
        "d.set_virtual_device_api('hip'); d.set_virtual_device_target_arch('gfx90a')\n"
        "d.set_virtual_device_count(2)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    d.set_virtual_device_target_arch('gfx942')\n"
        "    a = d.Accelerator(1)\n"
        "    os._exit(0 if (a.api, a.architecture_name) == ('hip', 'gfx942') else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n"
    )
    result = run_py(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
