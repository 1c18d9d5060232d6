"""os.fork() after an accelerator was used (issue: process edges): in the
child, pre-fork objects and the GPU refuse with a RuntimeError that says
why, new CPU objects work, and nothing hangs."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os
from max import driver

acc = driver.Accelerator(0)
q = driver.DeviceQueue(acc)
q.record_event()
q.synchronize(timeout=10)
flag = driver.CompletionFlag(acc)
pid = os.fork()
if pid == 0:
    results = []
    for what, call in [
        ("pre-fork queue", lambda: q.synchronize(timeout=5)),
        ("pre-fork flag wait", lambda: q.wait_for_host_value(flag, 1)),
        ("new GPU queue", lambda: driver.DeviceQueue(acc)),
        ("GPU stats", lambda: acc.stats),
    ]:
        try:
            call()
            results.append(f"{what}: worked")
        except RuntimeError as exc:
            results.append(f"{what}: RuntimeError fork={'fork' in str(exc)}")
    cpu_queue = driver.DeviceQueue(driver.CPU())
    ran = []
    getattr(cpu_queue, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
    cpu_queue.synchronize(timeout=5)
    results.append(f"cpu: ran={ran}")
    print("\n".join(results), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
q.synchronize(timeout=10)  # the parent is unaffected
print(f"child exit {status}")
"""


def test_fork_child_refuses_gpu_and_keeps_cpu() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for what in ("pre-fork queue", "pre-fork flag wait", "new GPU queue", "GPU stats"):
        assert f"{what}: RuntimeError fork=True" in lines, result.stdout
    assert "cpu: ran=[1]" in lines, result.stdout
    assert "child exit 0" in lines, result.stdout
