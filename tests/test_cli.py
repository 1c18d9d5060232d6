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
    for op in (
        "queue.record_event()",
        "queue.wait_for(event)",
        "event.is_ready()",
        "flag.signal(value)",
    ):
        assert re.search(re.escape(op) + r"\s+\d+\.\d ns", out), op


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
