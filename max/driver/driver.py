"""Pure-Python helpers over the native ``max._core.driver`` module.

Every helper looks up ``accelerator_count``, ``CPU`` and ``Accelerator``
through this module's globals at call time, so tests (and users) can
monkeypatch ``max.driver.driver.accelerator_count`` to simulate accelerators.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from max._core.driver import (
    CPU,
    Accelerator,
    Buffer,
    CompletionFlag,
    Device,
    DeviceEvent,
    DeviceGraph,
    DevicePinnedBuffer,
    DeviceQueue,
    LaunchTraceEntry,
    Usage,
    accelerator_count,
    backend_selection,
    begin_launch_trace,
    get_virtual_cpu_target,
    get_virtual_device_api,
    get_virtual_device_count,
    get_virtual_device_target_arch,
    is_virtual_device_mode,
    set_virtual_cpu_target,
    set_virtual_device_api,
    set_virtual_device_count,
    set_virtual_device_target_arch,
    take_launch_trace,
)
from max._core.driver import _pending_graph as _pending_graph

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
    "LaunchTraceEntry",
    "Usage",
    "accelerator_api",
    "accelerator_architecture_name",
    "accelerator_count",
    "backend_selection",
    "begin_launch_trace",
    "calculate_virtual_device_count",
    "calculate_virtual_device_count_from_cli",
    "capture",
    "devices_exist",
    "get_virtual_cpu_target",
    "get_virtual_device_api",
    "get_virtual_device_count",
    "get_virtual_device_target_arch",
    "is_virtual_device_mode",
    "load_device",
    "load_devices",
    "launch_trace",
    "scan_available_devices",
    "set_virtual_cpu_target",
    "set_virtual_device_api",
    "set_virtual_device_count",
    "set_virtual_device_target_arch",
    "take_launch_trace",
]

DeviceType = Literal["cpu", "gpu"]


@contextlib.contextmanager
def launch_trace() -> Iterator[list[LaunchTraceEntry]]:
    """Records every copy and fill enqueued inside the block.

    Yields a list that is filled with the entries when the block ends; the
    recording stops even when the block raises::

        with launch_trace() as entries:
            buf.to(Accelerator())
        assert entries[0].kind is LaunchTraceEntry.OperationKind.MEMCPY
    """
    entries: list[LaunchTraceEntry] = []
    begin_launch_trace()
    try:
        yield entries
    finally:
        entries.extend(take_launch_trace())


@contextlib.contextmanager
def capture(queue: DeviceQueue) -> Iterator[DeviceGraph]:
    """Captures the work this thread enqueues on ``queue`` inside the block.

    Yields a :class:`DeviceGraph` that holds the capture once the block ends
    (``queue.begin_capture()`` on entry, ``queue.end_capture()`` on exit)::

        with capture(queue) as graph:
            dst.inplace_copy_from(src)
        graph.launch()

    An exception inside the block ends the capture and throws it away.
    """
    if not isinstance(queue, DeviceQueue):
        msg = f"capture(): argument 'queue' must be a DeviceQueue, not {queue!r}"
        raise TypeError(msg)
    queue.begin_capture()
    graph = _pending_graph()
    try:
        yield graph
    except BaseException:
        if queue.is_capturing:
            queue._discard_capture()
        raise
    graph._end_capture(queue)


@runtime_checkable
class DLPackArray(Protocol):
    """Anything that exports its memory through DLPack: NumPy
    arrays, PyTorch and JAX tensors, CuPy arrays, Buffers."""

    # Only ``stream`` (the array API's one required keyword): a protocol
    # method with ``**kwargs`` would match no producer whose __dlpack__
    # lists its keywords (NumPy's and Buffer's both do).
    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


def accelerator_api() -> str:
    """Returns the API of the accelerators (``"cuda"`` or ``"hip"``).

    Returns ``"cpu"`` when no accelerator is present.
    """
    if accelerator_count() > 0:
        return Accelerator().api
    return CPU().api


def accelerator_architecture_name() -> str:
    """Returns the architecture name of accelerator 0, e.g. ``"sm_90"``.

    Raises:
        ValueError: no accelerator is present (the CPU has no architecture
            name), as MAX raises.
    """
    if accelerator_count() > 0:
        return Accelerator().architecture_name
    return CPU().architecture_name


@dataclass(frozen=True)
class DeviceSpec:
    """Specification of a device: its id and type (``"cpu"`` or ``"gpu"``)."""

    id: int
    """Id of the device (``-1`` means the default one for CPU specs)."""

    device_type: DeviceType = "cpu"
    """Type of the device: ``"cpu"`` or ``"gpu"``."""

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int):
            msg = f"DeviceSpec id must be an int, not {type(self.id).__name__}"
            raise TypeError(msg)
        if self.device_type not in ("cpu", "gpu"):
            msg = (
                "DeviceSpec device_type must be 'cpu' or 'gpu', "
                f"not {self.device_type!r}"
            )
            raise ValueError(msg)
        if self.device_type == "gpu" and self.id < 0:
            msg = (
                f"id provided {self.id} for accelerator must be greater than "
                "or equal to 0"
            )
            raise ValueError(msg)

    @staticmethod
    def cpu(id: int = -1) -> DeviceSpec:
        """Creates a CPU device specification."""
        return DeviceSpec(id, "cpu")

    @staticmethod
    def accelerator(id: int = 0) -> DeviceSpec:
        """Creates an accelerator (GPU) device specification."""
        return DeviceSpec(id, "gpu")


def load_device(device_spec: DeviceSpec) -> Device:
    """Creates the device ``device_spec`` describes: ``CPU(id)`` or
    ``Accelerator(id)`` (a virtual one in virtual device mode).

    Raises:
        ValueError: a GPU spec names an accelerator that does not exist.
    """
    if device_spec.device_type == "cpu":
        return CPU(device_spec.id)
    available = accelerator_count()
    if device_spec.id >= available:
        if available == 0:
            reason = "no devices were found."
        else:
            reason = f"only found {available} devices."
        raise ValueError(f"Device {device_spec.id} was requested but {reason}")
    return Accelerator(device_spec.id)


def load_devices(device_specs: Iterable[DeviceSpec]) -> list[Device]:
    """Creates the devices described by ``device_specs``, in order
    (:func:`load_device` of each).

    Raises:
        ValueError: a GPU spec names an accelerator that does not exist.
    """
    return [load_device(spec) for spec in device_specs]


def scan_available_devices() -> list[DeviceSpec]:
    """Returns one spec per accelerator, or ``[DeviceSpec.cpu()]`` if none."""
    count = accelerator_count()
    if count == 0:
        return [DeviceSpec.cpu()]
    return [DeviceSpec.accelerator(i) for i in range(count)]


def devices_exist(devices: Iterable[DeviceSpec]) -> bool:
    """Whether every spec names an existing device.

    A CPU spec always exists (the host); a GPU spec exists when its id is
    below ``accelerator_count()``.
    """
    count: int | None = None
    for spec in devices:
        if spec.device_type == "cpu":
            continue
        if count is None:
            count = accelerator_count()
        if spec.id >= count:
            return False
    return True


def calculate_virtual_device_count(*device_spec_lists: Iterable[DeviceSpec]) -> int:
    """Number of devices needed to cover every GPU spec: highest id + 1.

    Never less than 1 (CPU-only spec lists need one device).
    """
    highest = -1
    for specs in device_spec_lists:
        for spec in specs:
            if spec.device_type == "gpu":
                highest = max(highest, spec.id)
    return max(1, highest + 1)


def _parse_gpu_ids(text: str) -> list[int]:
    """Parses the id list of a ``"gpu:0,3"`` device string; empty parts and
    ``all`` name no id here (as MAX)."""
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part.lower() == "all":
            continue
        try:
            ids.append(int(part))
        except ValueError:
            msg = (
                f"invalid GPU id {part!r} in device string 'gpu:{text}': "
                "expected 'gpu', 'gpu:all' or 'gpu:<id>[,<id>...]'"
            )
            raise ValueError(msg) from None
    return ids


def calculate_virtual_device_count_from_cli(
    *device_inputs: str | Sequence[int],
) -> int:
    """Like :func:`calculate_virtual_device_count`, for command-line inputs.

    Each input is a list of GPU ids, ``"gpu"`` (GPU 0), ``"gpu:all"`` (every
    accelerator) or ``"gpu:<id>[,<id>...]"``, in any case; empty ids and
    ``all`` in an id list are skipped, as MAX does; other strings (e.g.
    ``"cpu"``) name no GPU. The result is at least 1.
    """
    highest = -1
    for item in device_inputs:
        if isinstance(item, str):
            text = item.strip().lower()
            if text == "gpu":
                highest = max(highest, 0)
            elif text == "gpu:all":
                highest = max(highest, accelerator_count() - 1)
            elif text.startswith("gpu:"):
                highest = max([highest, *_parse_gpu_ids(item.strip()[4:])])
        else:
            for gpu_id in item:
                highest = max(highest, int(gpu_id))
    return max(1, highest + 1)
