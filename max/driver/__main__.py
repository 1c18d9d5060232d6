"""``python -m max.driver``: backend selection, devices and a self-check.

Prints which accelerator backends were tried and why one was (or was not)
chosen, every device with its properties, then runs a short self-check that
orders Python host work on two CPU queues with an event and a completion
flag, and reports per-operation timings.  Exits 0 only when the check passes.
``--json`` prints the same report as one JSON object; ``--help`` and
``--version`` answer (max/driver/_cli.py has the options, and what is said
when max.driver cannot be loaded at all).
"""

from __future__ import annotations

import json
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
from max.driver import CPU, CompletionFlag, Device, DeviceQueue, _cli

TIMEOUT_S = 10.0
TIMING_REPS = 5
TIMING_NUMBER = 20_000
# The baseline of the repository's benchmarks (benchmarks/common.py's
# NOOP): a METH_NOARGS C method call that does nothing, about the cheapest
# call Python makes.
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


DEVICE_PROPERTIES = (
    "api",
    "id",
    "label",
    "model_name",
    "architecture_name",
    "stats",
    "max_single_alloc_size",
    "is_host_unified",
    "is_compatible",
)


def _yes_no(value: object) -> str:
    return "yes" if value else "no"


def _selection() -> dict[str, Any]:
    entries = driver.backend_selection()
    chosen = next((e["api"] for e in entries if e["chosen"]), None)
    return {
        "requested": os.environ.get("MAX_DRIVER_BACKEND", "auto") or "auto",
        "entries": entries,
        "chosen": chosen,
        "accelerator_count": driver.accelerator_count(),
    }


def _device(dev: Device) -> dict[str, Any]:
    """The device's properties; any that raises is named in "unavailable"."""
    properties: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for name in DEVICE_PROPERTIES:
        if name == "architecture_name" and dev.is_host:
            continue  # the CPU has none
        try:
            properties[name] = getattr(dev, name)
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            unavailable[name] = f"{type(exc).__name__}: {exc}"
    out = {"repr": repr(dev), "properties": properties, "unavailable": unavailable}
    out["graph_capture"] = dev._capabilities()["graph_capture"]
    if not dev.is_host:
        out["capabilities"] = dev._capabilities()
    return out


def _print_selection(selection: dict[str, Any]) -> None:
    print(f"Backend selection (MAX_DRIVER_BACKEND={selection['requested']}):")
    if not selection["entries"]:
        print("  no accelerator backend was tried")
    for line in _cli.selection_lines(selection["entries"]):
        print(line)
    print(f"  chosen backend: {selection['chosen'] or 'none (CPU only)'}")
    print(f"  accelerator_count: {selection['accelerator_count']}")


def _print_device(device: dict[str, Any]) -> None:
    print(f"  {device['repr']}")
    for name in DEVICE_PROPERTIES:
        if name in device["properties"]:
            print(f"    {name}: {device['properties'][name]}")
        elif name in device["unavailable"]:
            print(f"    {name}: unavailable ({device['unavailable'][name]})")
    print(f"    graph_capture: {device['graph_capture']}")
    if "capabilities" in device:
        _print_capabilities(device["capabilities"])


def _print_capabilities(caps: dict[str, Any]) -> None:
    """What the driver supports on this GPU (see docs/gpu-drivers.md)."""
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


def _cleanup_failures() -> dict[str, Any]:
    from max._core import driver as core

    count, last = core._cleanup_failures()
    return {"count": count, "last": last}


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


def _timings(reps: int = TIMING_REPS, number: int = TIMING_NUMBER) -> dict[str, Any]:
    """Each operation's median ns per call and median ratio to the no-op;
    "drained" says whether the queue finished afterwards."""
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
    rows = []
    for name, stmt in [("no-op C method call", NOOP_STATEMENT), *TIMED_OPS]:
        rows.append(
            {
                "operation": name,
                "statement": stmt,
                "ns_per_call": statistics.median(samples[stmt]) * 1e9,
                "ratio": statistics.median(
                    t / n for t, n in zip(samples[stmt], noop, strict=True)
                ),
            }
        )
    try:
        q.synchronize(timeout=TIMEOUT_S)
        drained = True
    except TimeoutError:
        drained = False
    return {"reps": reps, "number": number, "rows": rows, "drained": drained}


def _print_timings(timings: dict[str, Any]) -> None:
    reps, number = timings["reps"], timings["number"]
    print("Timings (CPU backend, idle queues), measured as the benchmarks do:")
    print(
        f"  each statement run {number} times by timeit, in {reps} rounds"
        " interleaved with the others;\n"
        "  ns/call: the median time per call, the timeit loop included;\n"
        "  ratio: the median per-round ratio to the no-op C method call"
        f" {NOOP_STATEMENT}"
    )
    print(f"  {'operation':<28} {'statement':<20} {'ns/call':>8} {'ratio':>6}")
    for row in timings["rows"]:
        print(
            f"  {row['operation']:<28} {row['statement']:<20}"
            f" {row['ns_per_call']:8.1f} {row['ratio']:6.2f}"
        )
    if not timings["drained"]:
        print(f"  queue did not drain within {TIMEOUT_S} s")


def _self_check() -> dict[str, Any]:
    try:
        ok, detail = _check_order()
        timings = _timings()
    except Exception as exc:  # noqa: BLE001 - the check reports any failure
        return {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "passed": ok and timings["drained"],
        "order": {"passed": ok, "detail": detail},
        "timings": timings,
    }


def report() -> dict[str, Any]:
    """Everything the command reports (running the self-check)."""
    devices: list[Device] = [CPU()]
    devices += [driver.Accelerator(i) for i in range(driver.accelerator_count())]
    result: dict[str, Any] = {
        "version": driver.__version__,
        "location": os.path.dirname(os.path.abspath(driver.__file__)),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "other_max_distributions": _cli.other_max_distributions(),
        "backend_selection": _selection(),
        "cpu_model": CPU().model_name,
        "devices": [_device(dev) for dev in devices],
    }
    result["self_check"] = _self_check()
    result["cleanup_failures"] = _cleanup_failures()
    result["passed"] = result["self_check"]["passed"]
    return result


def print_report(result: dict[str, Any]) -> None:
    print(
        f"max.driver {result['version']} (Python {result['python']}, "
        f"{result['implementation']}) from {result['location']}"
    )
    for line in _cli.conflict_lines(result["other_max_distributions"]):
        print(line)
    _print_selection(result["backend_selection"])
    print(f"CPU model: {result['cpu_model']}")
    print(f"Devices ({len(result['devices'])}):")
    for device in result["devices"]:
        _print_device(device)
    print("Self-check:")
    check = result["self_check"]
    if "error" in check:
        print(f"  self-check raised {check['error']}")
    else:
        print(f"  order on two CPU queues (event + flag): {check['order']['detail']}")
        _print_timings(check["timings"])
    failures = result["cleanup_failures"]
    if failures["count"]:
        count, last = failures["count"], failures["last"]
        print(f"Driver cleanup failures: {count} (last: {last})")
    print("PASS" if result["passed"] else "FAIL")


def main(argv: list[str] | None = None) -> int:
    """Runs the report and the self-check; returns the exit status."""
    args = _cli.parser().parse_args(argv)
    result = report()
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_report(result)
    return _cli.PASSED if result["passed"] else _cli.FAILED


def _main_piped() -> int:
    """main(), quiet when stdout closes early (``python -m max.driver |
    head``), as Python's documentation recommends for SIGPIPE."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the exit's flush fails no more
        return _cli.FAILED
    return status


if __name__ == "__main__":
    sys.exit(_main_piped())
