"""Devices, queues, events and completion flags (Modular MAX's ``max.driver``).

The types are implemented in C (``max._core.driver``); importing this package
selects the accelerator backend (CUDA, HIP or none) once, see
:func:`backend_selection`.
"""

from __future__ import annotations

import warnings
from typing import Any

# __version__, HostHazardCompletion and __unsafe_pack_py_host_func are
# importable but deliberately not in __all__ (HostHazardCompletion lives in
# max._core.driver as in MAX).  Names starting with "__" are
# only mangled inside class bodies, so the module-level import is literal.
from max._core import __version__ as __version__

try:  # selects the backend; a forced backend that fails is an ImportError
    import max._core.driver as _native  # noqa: F401
except ImportError as _error:
    from max.driver import _cli

    _cli.import_failed(_error)  # python -m max.driver: explains and exits
    raise

from max._core.driver import (
    HostHazardCompletion as HostHazardCompletion,
)
from max._core.driver import (
    HostHazardError,
    SymmetricPool,
    batch_inplace_copy,
    copy_pinned_to_destinations,
    enable_all_peer_access,
)
from max._core.driver import (
    __unsafe_pack_py_host_func as __unsafe_pack_py_host_func,
)

from .buffer import _ChunkedStagingRegion as _ChunkedStagingRegion
from .buffer import load_max_buffer
from .driver import (
    CPU,
    Accelerator,
    Buffer,
    CompletionFlag,
    Device,
    DeviceEvent,
    DeviceGraph,
    DevicePinnedBuffer,
    DeviceQueue,
    DeviceSpec,
    DLPackArray,
    LaunchTraceEntry,
    Usage,
    accelerator_api,
    accelerator_architecture_name,
    accelerator_count,
    backend_selection,
    begin_launch_trace,
    calculate_virtual_device_count,
    calculate_virtual_device_count_from_cli,
    capture,
    devices_exist,
    get_virtual_cpu_target,
    get_virtual_device_api,
    get_virtual_device_count,
    get_virtual_device_target_arch,
    is_virtual_device_mode,
    launch_trace,
    load_devices,
    scan_available_devices,
    set_virtual_cpu_target,
    set_virtual_device_api,
    set_virtual_device_count,
    set_virtual_device_target_arch,
    take_launch_trace,
)

__all__ = [
    "CPU",
    "Accelerator",
    "Buffer",
    "CompletionFlag",
    "DLPackArray",
    "Device",
    "DeviceEvent",
    "DeviceGraph",
    "DevicePinnedBuffer",
    "DeviceQueue",
    "DeviceSpec",
    "HostHazardError",
    "LaunchTraceEntry",
    "SymmetricPool",
    "Usage",
    "accelerator_api",
    "accelerator_architecture_name",
    "accelerator_count",
    "backend_selection",
    "batch_inplace_copy",
    "begin_launch_trace",
    "calculate_virtual_device_count",
    "calculate_virtual_device_count_from_cli",
    "capture",
    "copy_pinned_to_destinations",
    "devices_exist",
    "enable_all_peer_access",
    "get_virtual_cpu_target",
    "get_virtual_device_api",
    "get_virtual_device_count",
    "get_virtual_device_target_arch",
    "is_virtual_device_mode",
    "launch_trace",
    "load_devices",
    "load_max_buffer",
    "scan_available_devices",
    "set_virtual_cpu_target",
    "set_virtual_device_api",
    "set_virtual_device_count",
    "set_virtual_device_target_arch",
    "take_launch_trace",
]


def __getattr__(name: str) -> Any:
    if name == "DeviceStream":
        warnings.warn(
            "max.driver.DeviceStream is deprecated; use max.driver.DeviceQueue",
            DeprecationWarning,
            stacklevel=2,
        )
        return DeviceQueue
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
