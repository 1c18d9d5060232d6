"""``python -m max.driver`` and forced-backend import errors (SPEC §2, §11)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    env.update(overrides)
    return env


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _cpuinfo_model_name() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    match = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def _selection() -> list[dict[str, Any]]:
    code = "import json, max.driver as d; print(json.dumps(d.backend_selection()))"
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def cli() -> subprocess.CompletedProcess[str]:
    return _run(["-m", "max.driver"])


def test_cli_passes(cli: subprocess.CompletedProcess[str]) -> None:
    assert cli.returncode == 0, cli.stdout + cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[-1] == "PASS"
    assert "FAIL" not in cli.stdout


def test_cli_backend_selection(cli: subprocess.CompletedProcess[str]) -> None:
    out = cli.stdout
    assert "Backend selection (MAX_DRIVER_BACKEND=auto):" in out
    assert "chosen backend:" in out
    for entry in _selection():
        line = next(
            (
                ln
                for ln in out.splitlines()
                if ln.strip().startswith(f"{entry['api']}:")
            ),
            None,
        )
        assert line is not None, f"no line for {entry['api']}:\n{out}"
        assert f"library={entry['library'] or '-'}" in line
        assert f"devices={entry['device_count']}" in line
        assert ("chosen=yes" in line) == bool(entry["chosen"])
        if entry["error"]:
            assert str(entry["error"]) in line


def test_cli_cpu_model_name(cli: subprocess.CompletedProcess[str]) -> None:
    model = _cpuinfo_model_name()
    if model is None:
        pytest.skip("/proc/cpuinfo has no 'model name'")
    assert f"CPU model: {model}" in cli.stdout


def test_cli_device_list(cli: subprocess.CompletedProcess[str]) -> None:
    out = cli.stdout
    assert re.search(r"^Devices \(\d+\):$", out, re.MULTILINE)
    assert "  Device(type=cpu,id=0)" in out
    for prop in (
        "api: cpu",
        "id: 0",
        "label: cpu",
        "model_name:",
        "stats: {",
        "max_single_alloc_size:",
        "is_host_unified: True",
    ):
        assert f"    {prop}" in out, prop
    count = int(re.search(r"accelerator_count: (\d+)", out).group(1))  # type: ignore[union-attr]
    for i in range(count):
        assert f"  Device(type=gpu,id={i})" in out


def test_cli_self_check_and_timings(cli: subprocess.CompletedProcess[str]) -> None:
    out = cli.stdout
    assert "after: ['a1', 'a2', 'b1']" in out
    # The method is stated, and it is benchmarks/run.py's: statements timed
    # as written against a bare no-op C method call, not through a wrapper.
    assert "measured as benchmarks/run.py does" in out
    assert "ratio to the no-op C method call zero.bit_length()" in out
    assert "partial" not in out
    row = r"\s+(\d+\.\d) +(\d+\.\d\d)$"
    noop = re.search(r"^  no-op C method call +zero\.bit_length\(\)" + row, out, re.M)
    assert noop, out
    assert float(noop.group(1)) > 0 and noop.group(2) == "1.00"  # its own ratio
    for op, stmt in (
        ("queue.record_event()", "q.record_event()"),
        ("queue.record_event(event)", "q.record_event(ev)"),
        ("queue.wait_for(queue)", "q.wait_for(other)"),
        ("queue.wait_for(event)", "q.wait_for(ev)"),
        ("event.is_ready()", "ev.is_ready()"),
        ("flag.signal(value)", "flag.signal(1)"),
        ("flag.load()", "flag.load()"),
        ("queue.synchronize() (idle)", "q.synchronize()"),
    ):
        match = re.search(
            "^  " + re.escape(op) + " +" + re.escape(stmt) + row, out, re.M
        )
        assert match, f"{op}:\n{out}"
        assert float(match.group(1)) > 0 and float(match.group(2)) > 0


def test_cli_baseline_is_the_benchmarks_baseline() -> None:
    if str(ROOT) not in sys.path:  # for `benchmarks`, a top-level directory
        sys.path.insert(0, str(ROOT))
    from benchmarks.common import NOOP
    from max.driver.__main__ import NOOP_STATEMENT

    assert NOOP_STATEMENT == NOOP


def test_cli_times_statements_as_written_and_interleaved() -> None:
    from max.driver.__main__ import _time_statements

    calls: list[tuple[str, int]] = []

    class Probe:
        def hit(self, value: int) -> None:
            calls.append(("hit", value))

        def miss(self) -> None:
            calls.append(("miss", 0))

    samples = _time_statements(
        ["p.hit(7)", "p.miss()"], {"p": Probe()}, reps=3, number=4
    )
    # Each round runs every statement `number` times, in turn.
    assert calls == ([("hit", 7)] * 4 + [("miss", 0)] * 4) * 3
    assert list(samples) == ["p.hit(7)", "p.miss()"]
    assert all(len(s) == 3 and all(t > 0 for t in s) for s in samples.values())


def test_cli_runs_as_main_function() -> None:
    code = "import max.driver.__main__ as m; raise SystemExit(m.main())"
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("PASS")


def _forced_import(**env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "try:\n"
        "    import max.driver\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__)\n"
        "    print(e)\n"
        "    raise SystemExit(3)\n"
    )
    return _run(["-c", code], **env)


def test_forced_cuda_bad_library_is_import_error() -> None:
    path = "/nonexistent/max-driver-test/libcuda.so.1"
    proc = _forced_import(MAX_DRIVER_BACKEND="cuda", MAX_DRIVER_CUDA_LIBRARY=path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    kind, _, message = proc.stdout.partition("\n")
    assert kind == "ImportError"  # not ModuleNotFoundError
    assert "cuda" in message.lower()
    assert path in message


def test_forced_cuda_without_gpu_is_import_error() -> None:
    if any(e["api"] == "cuda" and e["chosen"] for e in _selection()):
        pytest.skip("a CUDA device is present")
    proc = _forced_import(MAX_DRIVER_BACKEND="cuda")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    kind, _, message = proc.stdout.partition("\n")
    assert kind == "ImportError"
    assert "cuda" in message.lower()
    assert "libcuda.so" in message


def test_forced_hip_bad_library_is_import_error() -> None:
    path = "/nonexistent/max-driver-test/libamdhip64.so"
    proc = _forced_import(MAX_DRIVER_BACKEND="hip", MAX_DRIVER_HIP_LIBRARY=path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    kind, _, message = proc.stdout.partition("\n")
    assert kind == "ImportError"
    assert "hip" in message.lower()
    assert path in message


def test_forced_cpu_imports() -> None:
    proc = _run(["-m", "max.driver"], MAX_DRIVER_BACKEND="cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Backend selection (MAX_DRIVER_BACKEND=cpu):" in proc.stdout
    assert "accelerator_count: 0" in proc.stdout
