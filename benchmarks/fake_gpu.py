"""The CPU-side cost of releasing the GIL around GPU enqueues, on the fake
GPU driver (tests/fake_driver).

While any host dependency is pending on a GPU (a Python host function, a
gate on a host value), an enqueue could block on a full driver queue behind
work that needs a host thread, so the binding releases the GIL around every
enqueue (``BINDING_ENQUEUE`` in csrc/python/binding.h,
``mxd_queue_enqueue_may_block`` in csrc/core/queue.c); otherwise it keeps
the GIL, which is cheaper.  This measures the per-call operations against
the no-op C method call in both states, in one child process on the fake
CUDA driver (the parent's backend stays whatever it is):

* nothing pending: the GIL stays held;
* a host dependency pending: ANOTHER queue of the device is gated on a
  CompletionFlag by ``wait_for_host_value``, so every enqueue releases it.

The two states alternate within each repetition.  The figures are reported
without targets: they show the price of the rule, not a goal.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from benchmarks.common import NOOP, Result, Run, section

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_BUILD = REPO_ROOT / "tests" / "fake_driver" / "build.py"
SECTION = "fake GPU (CPU-side)"
STATES = ("held", "released")
Samples = dict[str, dict[str, list[float]]]  # {state: {statement: [seconds]}}

# (name, statement over the names of the child's fixture)
CALLS: list[tuple[str, str]] = [
    ("record_event()", "q.record_event()"),
    ("record_event(ev)", "q.record_event(ev)"),
    ("wait_for(queue)", "q.wait_for(q2)"),
    ("wait_for(event)", "q.wait_for(done)"),
]
# A reference for the GIL's own price: the same C function called through
# ctypes.CDLL (which releases the GIL around the call) and ctypes.PyDLL
# (which keeps it).
REFERENCE = ("release_gil()", "keep_gil()")
# The reaper ends a gate's host dependency once it sees the event after the
# gate complete; it polls at most every 5 ms (csrc/core/reaper.h).
REAPER_SETTLE_S = 0.03


def skip_reason() -> str | None:
    if not FAKE_BUILD.exists():
        return "the fake driver's sources are absent (tests/fake_driver/build.py)"
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        return "no C compiler to build the fake driver"
    return None


def build_fake(out_dir: Path) -> Path:
    spec = importlib.util.spec_from_file_location("fake_driver_build", FAKE_BUILD)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.build_fake_driver(out_dir))


# ---- in the child, on the fake driver --------------------------------------------


def measure(reps: int, number: int) -> Samples:
    """Seconds per statement, one sample per repetition in each state."""
    from max import driver

    if driver.accelerator_api() != "cuda" or driver.accelerator_count() == 0:
        raise RuntimeError(f"not on the fake CUDA driver: {driver.backend_selection()}")
    acc = driver.Accelerator(0)
    q, q2, gated = (driver.DeviceQueue(acc) for _ in range(3))
    done = q2.record_event()
    q2.synchronize()
    names = {
        "q": q,
        "q2": q2,
        "ev": driver.DeviceEvent(acc),
        "done": done,
        "zero": 0,
        "release_gil": ctypes.CDLL(None).getpid,
        "keep_gil": ctypes.PyDLL(None).getpid,
    }
    statements = ["pass", NOOP, *(s for _, s in CALLS), *REFERENCE]
    timers = {s: timeit.Timer(s, globals=names) for s in statements}
    flag = driver.CompletionFlag(acc)
    samples: Samples = {state: {s: [] for s in statements} for state in STATES}
    for _ in range(reps):
        for state in STATES:
            if state == "released":
                flag.reset()
                gated.wait_for_host_value(flag, 1)
            for stmt, timer in timers.items():
                samples[state][stmt].append(timer.timeit(number) / number)
                q.synchronize()  # what a sample enqueued never slows the next
            if state == "released":
                flag.signal(1)
                gated.synchronize()
                time.sleep(REAPER_SETTLE_S)
    return samples


# ---- in the parent -------------------------------------------------------------------


def _child_env(library: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "FAKE_GPU_"))
    }
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.update(MAX_DRIVER_BACKEND="cuda", MAX_DRIVER_CUDA_LIBRARY=str(library))
    return env


def child_json(
    module: str, library: Path, *args: object, env: dict[str, str] | None = None
) -> Any:
    """Runs ``python -m module args...`` on the fake driver at ``library``
    (with ``env`` added to its environment): the last line it prints,
    parsed as JSON."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**_child_env(library), **(env or {})},
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{module} failed on the fake driver:\n{proc.stdout}{proc.stderr}"
        )
    return json.loads(proc.stdout.splitlines()[-1])


def run_child(library: Path, reps: int, number: int) -> Samples:
    return child_json("benchmarks.fake_gpu", library, reps, number)


def results(samples: Samples) -> list[Result]:
    def ratio(state: str, stmt: str) -> float:
        mine = samples[state]
        return statistics.median(
            s / n for s, n in zip(mine[stmt], mine[NOOP], strict=True)
        )

    def ns(state: str, stmt: str) -> float:
        return statistics.median(samples[state][stmt]) * 1e9

    noop = {state: ns(state, NOOP) for state in STATES}
    out = []
    for name, stmt in CALLS:
        for state, label in (
            ("held", "nothing pending (GIL held)"),
            ("released", "host dependency pending (GIL released)"),
        ):
            out.append(
                Result(
                    f"{name}: {label}",
                    ratio(state, stmt),
                    f"{ns(state, stmt):.1f} ns vs no-op {noop[state]:.1f} ns",
                    section=SECTION,
                )
            )
        held, released = samples["held"][stmt], samples["released"][stmt]
        extra = statistics.median(
            (r - h) * 1e9 for r, h in zip(released, held, strict=True)
        )
        out.append(
            Result(
                f"{name}: cost of releasing the GIL, ns",
                extra,
                f"{ns('released', stmt):.1f} - {ns('held', stmt):.1f} ns "
                "(median of the per-repetition differences)",
                section=SECTION,
            )
        )
    released, kept = (samples["held"][s] for s in REFERENCE)
    out.append(
        Result(
            "reference: releasing the GIL around a C call, ns",
            statistics.median(
                (r - k) * 1e9 for r, k in zip(released, kept, strict=True)
            ),
            f"getpid() through ctypes.CDLL {ns('held', REFERENCE[0]):.1f} ns "
            f"(GIL released) vs ctypes.PyDLL {ns('held', REFERENCE[1]):.1f} ns",
            section=SECTION,
        )
    )
    return out


@section(SECTION, order=50, skip_reason=lambda: skip_reason())
def gil_benchmark(run: Run) -> list[Result]:
    return benchmark(reps=7, number=50_000 // run.scale_down)


def benchmark(reps: int, number: int) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="max-driver-fake-") as tmp:
        library = build_fake(Path(tmp))
        return results(run_child(library, reps, number))


def main(argv: list[str] | None = None) -> int:
    """The child: prints the samples as one line of JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fake_gpu")
    parser.add_argument("reps", type=int)
    parser.add_argument("number", type=int)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.reps, args.number)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
