"""examples/typed_usage.py type-checks under ``mypy --strict`` against the
package's stubs (max/_core/driver.pyi, py.typed) and runs to completion."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "typed_usage.py"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    return env


def test_example_passes_mypy_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]' installs it)")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            str(EXAMPLE.relative_to(REPO_ROOT)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout, result.stdout


def test_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
