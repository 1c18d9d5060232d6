"""Runs the C core's own tests (tests/core/core_test.c, and watch_test.c for
the watches `await` uses) without Python in the loop: once as built for
production and once under each sanitizer the compiler supports
(ThreadSanitizer for races, ASan/UBSan for memory)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "csrc" / "core"
BACKENDS = ROOT / "csrc" / "backends"
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g"]
VARIANTS = {
    "plain": ["-O2"],
    "tsan": ["-O1", "-fsanitize=thread"],
    "asan": ["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
}


def _native_env() -> dict[str, str]:
    # scripts/sanitize.sh preloads the ASan runtime into Python; the
    # compiler and these C programs must not get it (a TSan program crashes).
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


# Each program and the line it prints when every check passed.
PROGRAMS = {"core_test.c": "core tests passed", "watch_test.c": "watch tests passed"}


def _compile(tmp_path: Path, extra: list[str], program: str) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    exe = tmp_path / Path(program).stem
    sources = sorted(str(p) for d in (CORE, BACKENDS) for p in d.glob("*.c"))
    cmd = [
        cc,
        *FLAGS,
        *extra,
        f"-I{CORE}",
        f"-I{BACKENDS}",
        *sources,
        str(ROOT / "tests" / "core" / program),
        "-o",
        str(exe),
        "-pthread",
        "-ldl",
        "-lm",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=_native_env())
    if result.returncode != 0:
        if "-fsanitize" in " ".join(extra) and "sanitize" in result.stderr:
            return None  # the toolchain lacks this sanitizer's runtime
        pytest.fail(f"compiling the core failed:\n{result.stderr}")
    return exe


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_core_c(tmp_path: Path, variant: str, program: str) -> None:
    exe = _compile(tmp_path, VARIANTS[variant], program)
    if exe is None:
        pytest.skip(f"the compiler cannot build with {variant}")
    result = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=120, env=_native_env()
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert PROGRAMS[program] in result.stdout
    assert "WARNING: ThreadSanitizer" not in result.stderr
