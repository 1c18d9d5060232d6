"""Probe of the real-driver hazards (docs/gpu-drivers.md), one child process
each, with a time limit: ``python scripts/gpu_probe.py [--timeout S]``.

Each case is something that hangs or fails on a real driver when the backend
breaks one of the drivers' rules.  It prints one line per case (PASS, FAIL
with the error, or HANG when the child ran past its limit) and exits 1 when
any case did not pass.  scripts/gpu-check.sh runs it last.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

PRELUDE = """
import threading, time
from max import driver
from max.driver import Accelerator, CompletionFlag, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"
acc = Accelerator()
"""

CASES = {
    "capabilities": """
caps = acc._capabilities()
print(caps)
assert caps["stream_memory_operations"], caps
assert caps["python_host_functions_run_on"] == "worker threads", caps
""",
    "host function uses the API": """
q, q2 = DeviceQueue(acc), DeviceQueue(acc)
out = []
def fn():
    ev = q2.record_event()
    getattr(q2, ENQ)(lambda: out.append("inner"))
    q2.synchronize(timeout=10)
    out.append(ev.is_ready())
getattr(q, ENQ)(fn)
q.synchronize(timeout=10)
assert out == ["inner", True], out
""",
    "host function drops the last references": """
box = [DeviceQueue(acc), CompletionFlag(acc), DeviceQueue(acc).record_event()]
q = DeviceQueue(acc)
getattr(q, ENQ)(box.clear)
q.synchronize(timeout=10)
acc.synchronize(timeout=10)
""",
    "flag dropped while a queue is gated": """
q = DeviceQueue(acc)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
for _ in range(5):
    CompletionFlag(acc)
f.signal(1)
q.synchronize(timeout=10)
""",
    "2000 host functions in a loop": """
q = DeviceQueue(acc)
ran = []
for i in range(2000):
    getattr(q, ENQ)(lambda i=i: ran.append(i))
q.synchronize(timeout=20)
assert ran == list(range(2000)), len(ran)
""",
    "host function waits for one on another queue": """
a, b = DeviceQueue(acc), DeviceQueue(acc)
go = threading.Event()
res = []
getattr(a, ENQ)(lambda: res.append(go.wait(5)))
getattr(b, ENQ)(go.set)
a.synchronize(timeout=10)
assert res == [True], res
""",
    "slow host function, other queue synchronizes": """
a, b = DeviceQueue(acc), DeviceQueue(acc)
started, release = threading.Event(), threading.Event()
getattr(a, ENQ)(lambda: (started.set(), release.wait(10)))
assert started.wait(10)
getattr(b, ENQ)(lambda: None)
t0 = time.monotonic()
b.synchronize(timeout=5)
took = time.monotonic() - t0
release.set()
a.synchronize(timeout=10)
assert took < 2, took
""",
    "cleanup failures": """
from max._core import driver as core
for _ in range(200):
    q = DeviceQueue(acc)
    getattr(q, ENQ)(lambda: None)
    q.record_event()
    CompletionFlag(acc)
acc.synchronize(timeout=10)
time.sleep(0.2)
count, last = core._cleanup_failures()
assert count == 0, last
""",
}


def run_case(name: str, body: str, timeout: float) -> tuple[str, str, float]:
    start = time.monotonic()
    try:
        r = subprocess.run(
            [sys.executable, "-c", PRELUDE + body],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    except subprocess.TimeoutExpired:
        return "HANG", f"still running after {timeout:g} s", timeout
    took = time.monotonic() - start
    if r.returncode == 0:
        return "PASS", r.stdout.strip().splitlines()[-1] if r.stdout else "", took
    lines = (r.stderr or r.stdout).strip().splitlines()
    return "FAIL", lines[-1] if lines else f"exit {r.returncode}", took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    failed = 0
    for name, body in CASES.items():
        status, detail, took = run_case(name, body, args.timeout)
        failed += status != "PASS"
        print(f"{status:4}  {name} ({took:.2f} s){': ' + detail if detail else ''}")
    print(f"gpu_probe: {len(CASES) - failed} of {len(CASES)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
