"""scripts/test-other-pythons.sh: which interpreters it picks, and that a
failing one fails the script (as CI must).

The interpreters here are fakes: shell scripts that answer the script's
probe with a canned line (implementation, X.Y, X.Y.Z, real path, has
Python.h, new enough) and fail anything else, on a PATH holding only them
and the tools the script needs, so no real interpreter is built or run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "test-other-pythons.sh"
TOOLS = (
    "bash",
    "dirname",
    "git",
    "tar",
    "mktemp",
    "date",
    "rm",
    "mkdir",
    "cat",
    "env",
    "sort",
)


def _fake(path: Path, probe_line: str | None) -> Path:
    """An interpreter that prints probe_line for the probe (None: it does not
    run, like a pyenv shim of an inactive version) and fails anything else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    answer = (
        f"cat >/dev/null; echo '{probe_line}'; exit 0" if probe_line else "exit 127"
    )
    path.write_text(f'#!/bin/sh\nif [ "$1" = - ]; then {answer}; fi\nexit 3\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """PYENV_ROOT and PATH of a machine whose interpreters are all fakes."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"{tool} is not installed")
        (tools / tool).symlink_to(real)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    env.update(
        PYENV_ROOT=str(tmp_path / "pyenv"),
        PATH=f"{tmp_path / 'bin'}:{tools}",
        TMPDIR=str(tmp_path),
        PYTHON=str(_fake(tmp_path / "default", "CPython 3.93 3.93.0 /r/default 1 1")),
    )
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_selection(machine: dict[str, str], tmp_path: Path) -> None:
    versions = tmp_path / "pyenv" / "versions"
    _fake(versions / "a" / "bin" / "python3", "CPython 3.98 3.98.1 /r/a 1 1")
    _fake(versions / "b" / "bin" / "python3", "CPython 3.98 3.98.2 /r/b 1 1")
    _fake(versions / "c" / "bin" / "python3", "PyPy 3.97 3.97.0 /r/c 1 1")
    _fake(versions / "d" / "bin" / "python3", "CPython 3.9 3.9.1 /r/d 1 0")
    _fake(versions / "e" / "bin" / "python3", "CPython 3.93 3.93.1 /r/e 1 1")
    bin_ = tmp_path / "bin"
    _fake(bin_ / "python3.96", "CPython 3.96 3.96.0 /r/f 0 1")
    _fake(bin_ / "python3.95", None)  # a shim that does not run
    _fake(bin_ / "python3.94", "CPython 3.98 3.98.1 /r/a 1 1")  # a link to a
    _fake(bin_ / "python3.99-config", "CPython 3.99 3.99.0 /r/g 1 1")
    _fake(bin_ / "python3.92", "CPython 3.92 3.92.0 /r/default 1 1")  # default

    proc = _run(machine, "--list")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == [
        "test-other-pythons.sh: the default interpreter is CPython 3.93.0 (/r/default)",
        "  found:   CPython 3.98.1 (/r/a)",
        "  skipped: CPython 3.98.2 (/r/b): a 3.98 is already selected or the default",
        "  skipped: PyPy 3.97.0 (/r/c): not CPython >= 3.10",
        "  skipped: CPython 3.9.1 (/r/d): not CPython >= 3.10",
        "  skipped: CPython 3.93.1 (/r/e): a 3.93 is already selected or the default",
        "  skipped: CPython 3.96.0 (/r/f): no Python.h (Debian: python3.96-dev)",
    ]


def test_ends_keeps_the_oldest_and_the_newest(
    machine: dict[str, str], tmp_path: Path
) -> None:
    versions = tmp_path / "pyenv" / "versions"
    for name, minor in (("a", 97), ("b", 91), ("c", 95), ("d", 99)):
        _fake(
            versions / name / "bin" / "python3",
            f"CPython 3.{minor} 3.{minor}.0 /r/{name} 1 1",
        )
    proc = _run(machine, "--ends", "--list")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == [
        "  left out (--ends): CPython 3.95.0",
        "  left out (--ends): CPython 3.97.0",
    ]
    # Two or fewer: --ends leaves nothing out.
    for name in ("c", "d"):
        shutil.rmtree(versions / name)
    proc = _run(machine, "--ends", "--list")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "left out" not in proc.stdout


def test_a_failing_interpreter_fails_the_script(
    machine: dict[str, str], tmp_path: Path
) -> None:
    # Probed as a good interpreter, then `python -m venv` fails.
    _fake(tmp_path / "bin" / "python3.98", "CPython 3.98 3.98.1 /r/a 1 1")
    proc = _run(machine)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test-other-pythons.sh: CPython 3.98.1: FAILED in" in proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        "test-other-pythons.sh: tested CPython 3.98.1 FAILED"
        " (default 3.93.0 tested by .ci/run)"
    )


def test_nothing_else_found(machine: dict[str, str]) -> None:
    proc = _run(machine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "test-other-pythons.sh: no other CPython >= 3.10 found; nothing to test"
    )


def test_ci_runs_it_last() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    assert commands[-1] == "bash scripts/test-other-pythons.sh --ends"
