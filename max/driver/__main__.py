"""``python -m max.driver``: backend selection, devices and a self-check.

Prints which accelerator backends were tried and why one was (or was not)
chosen, every device with its properties, then runs a short self-check that
orders Python host work on two CPU queues with an event and a completion
flag, and reports per-operation timings.  Exits 0 only when the check passes.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable
from typing import Any

from max import driver
from max.driver import CPU, CompletionFlag, Device, DeviceQueue

TIMEOUT_S = 10.0
TIMING_REPS = 5
TIMING_NUMBER = 20_000
# The baseline of benchmarks/run.py (its NOOP): a METH_NOARGS C method call
# that does nothing, about the cheapest call Python makes.
NOOP_STATEMENT = "zero.bit_length()"
# (what is timed, the statement timeit runs) over the names of _print_timings.
TIMED_OPS: list[tuple[str, str]] = [
    ("queue.record_event()", "q.record_event()"),
    ("queue.record_event(event)", "q.record_event(ev)"),
    ("queue.wait_for(queue)", "q.wait_for(other)"),
    ("queue.wait_for(event)", "q.wait_for(ev)"),
    ("event.is_ready()", "ev.is_ready()"),
    ("flag.signal(value)", "flag.signal(1)"),
    ("flag.load()", "flag.load()"),
    ("queue.synchronize() (idle)", "q.synchronize()"),
]


def _yes_no(value: object) -> str:
    return "yes" if value else "no"


def _print_selection() -> None:
    backend = os.environ.get("MAX_DRIVER_BACKEND", "auto") or "auto"
    print(f"Backend selection (MAX_DRIVER_BACKEND={backend}):")
    entries = driver.backend_selection()
    if not entries:
        print("  no accelerator backend was tried")
    chosen = "none (CPU only)"
    for entry in entries:
        print(
            f"  {entry['api']}: library={entry['library'] or '-'}"
            f" loaded={_yes_no(entry['loaded'])}"
            f" devices={entry['device_count']}"
            f" error={entry['error'] or '-'}"
            f" chosen={_yes_no(entry['chosen'])}"
        )
        if entry["chosen"]:
            chosen = str(entry["api"])
    print(f"  chosen backend: {chosen}")
    print(f"  accelerator_count: {driver.accelerator_count()}")


def _property(dev: Device, name: str) -> str:
    try:
        return str(getattr(dev, name))
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return f"unavailable ({type(exc).__name__}: {exc})"


def _print_devices() -> list[Device]:
    devices: list[Device] = [CPU()]
    devices += [driver.Accelerator(i) for i in range(driver.accelerator_count())]
    print(f"Devices ({len(devices)}):")
    for dev in devices:
        print(f"  {dev!r}")
        for name in (
            "api",
            "id",
            "label",
            "model_name",
            "architecture_name",
            "stats",
            "max_single_alloc_size",
            "is_host_unified",
            "is_compatible",
        ):
            if name == "architecture_name" and dev.is_host:
                continue  # the CPU has none
            print(f"    {name}: {_property(dev, name)}")
        print(f"    graph_capture: {dev._capabilities()['graph_capture']}")
        if not dev.is_host:
            _print_capabilities(dev)
    return devices


def _print_capabilities(dev: Device) -> None:
    """What the driver supports on this GPU (see docs/gpu-drivers.md)."""
    caps = dev._capabilities()
    version = caps["driver_version"]
    print(
        f"    driver_version: {version // 1000}.{version % 1000 // 10}"
        if version
        else "    driver_version: unknown"
    )
    print(f"    stream_memory_operations: {_yes_no(caps['stream_memory_operations'])}")
    print(
        f"    host_function_entry_point: {caps['host_function_entry_point'] or 'none'}"
    )
    print(f"    python_host_functions_run_on: {caps['python_host_functions_run_on']}")
    chunks, chunk_bytes = caps["staging_ring"]
    print(
        f"    staging_ring: {chunks} x {chunk_bytes >> 20} MiB pinned, "
        f"pinned reserve {caps['pinned_reserve_bytes'] >> 20} MiB"
    )


def _print_cleanup_failures() -> None:
    from max._core import driver as core

    count, last = core._cleanup_failures()
    if count:
        print(f"Driver cleanup failures: {count} (last: {last})")


def _check_order() -> tuple[bool, str]:
    """Queue B runs after queue A (event); queue A is gated by a flag."""
    cpu = CPU()
    a = DeviceQueue(cpu)
    b = DeviceQueue(cpu)
    flag = CompletionFlag(cpu)
    seen: list[str] = []
    lock = threading.Lock()

    def step(name: str) -> Callable[[], None]:
        def run() -> None:
            with lock:
                seen.append(name)

        return run

    enqueue_a = getattr(a, "__unsafe_enqueue_py_host_func")
    enqueue_b = getattr(b, "__unsafe_enqueue_py_host_func")
    enqueue_a(step("a1"))
    a.wait_for_host_value(flag, 1)
    enqueue_a(step("a2"))
    b.wait_for(a.record_event())
    enqueue_b(step("b1"))

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        with lock:
            if seen:
                break
        time.sleep(0.001)
    time.sleep(0.05)  # give gated work a chance to (wrongly) run
    with lock:
        before = list(seen)
    gated = not a.record_event().is_ready() and not b.record_event().is_ready()
    flag.signal(1)
    try:
        b.synchronize(timeout=TIMEOUT_S)
        a.synchronize(timeout=TIMEOUT_S)
    except TimeoutError:
        return False, f"queues did not drain within {TIMEOUT_S} s (seen {seen})"
    after = list(seen)
    ok = before == ["a1"] and gated and after == ["a1", "a2", "b1"]
    detail = (
        f"before signal: {before} (gated: {_yes_no(gated)}), "
        f"after: {after}, expected ['a1'] then ['a1', 'a2', 'b1']"
    )
    return ok, detail


def _time_statements(
    statements: list[str], namespace: dict[str, Any], reps: int, number: int
) -> dict[str, list[float]]:
    """Seconds per execution of each statement, one sample per round.

    Measured as benchmarks/run.py does: every statement is compiled by
    ``timeit`` (so a call with arguments is timed as written, with nothing
    such as ``functools.partial`` in between) and the rounds interleave the
    statements, so that a busy machine slows the baseline and the operations
    alike."""
    timers = {stmt: timeit.Timer(stmt, globals=namespace) for stmt in statements}
    samples: dict[str, list[float]] = {stmt: [] for stmt in statements}
    for _ in range(reps):
        for stmt, timer in timers.items():
            samples[stmt].append(timer.timeit(number) / number)
    return samples


def _print_timings(reps: int = TIMING_REPS, number: int = TIMING_NUMBER) -> bool:
    cpu = CPU()
    q = DeviceQueue(cpu)
    namespace: dict[str, Any] = {
        "zero": 0,
        "q": q,
        "other": DeviceQueue(cpu),
        "ev": q.record_event(),
        "flag": CompletionFlag(cpu),
    }
    namespace["ev"].synchronize(timeout=TIMEOUT_S)
    statements = [NOOP_STATEMENT, *(stmt for _, stmt in TIMED_OPS)]
    samples = _time_statements(statements, namespace, reps, number)
    noop = samples[NOOP_STATEMENT]
    print("Timings (CPU backend, idle queues), measured as benchmarks/run.py does:")
    print(
        f"  each statement run {number} times by timeit, in {reps} rounds"
        " interleaved with the others;\n"
        "  ns/call: the median time per call, the timeit loop included;\n"
        "  ratio: the median per-round ratio to the no-op C method call"
        f" {NOOP_STATEMENT}"
    )
    print(f"  {'operation':<28} {'statement':<20} {'ns/call':>8} {'ratio':>6}")
    rows = [("no-op C method call", NOOP_STATEMENT), *TIMED_OPS]
    for name, stmt in rows:
        cost = statistics.median(samples[stmt]) * 1e9
        ratio = statistics.median(
            t / n for t, n in zip(samples[stmt], noop, strict=True)
        )
        print(f"  {name:<28} {stmt:<20} {cost:8.1f} {ratio:6.2f}")
    try:
        q.synchronize(timeout=TIMEOUT_S)
    except TimeoutError:
        print(f"  queue did not drain within {TIMEOUT_S} s")
        return False
    return True


def main() -> int:
    """Runs the report and the self-check; returns the exit status."""
    impl = platform.python_implementation()
    print(f"max.driver (Python {platform.python_version()}, {impl})")
    _print_selection()
    print(f"CPU model: {CPU().model_name}")
    _print_devices()
    print("Self-check:")
    try:
        ok, detail = _check_order()
        print(f"  order on two CPU queues (event + flag): {detail}")
        ok = _print_timings() and ok
    except Exception as exc:  # noqa: BLE001 - the check reports any failure
        print(f"  self-check raised {type(exc).__name__}: {exc}")
        ok = False
    _print_cleanup_failures()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
