"""Runs tests/core/stress.c: many threads using the C core's CPU queues at
once with every operation, checking ordering, gating, wake-ups and that all
work runs (see the file's header); and tests/core/hazard_stress.c: threads
copying between buffers over shared, sometimes gated, queues, checking that
each read sees the last write the hazard records order it after.  No Python
in the loop: built as for production, under ThreadSanitizer and under
ASan+UBSan (with LeakSanitizer), each bounded to a few seconds of stress
(MAX_DRIVER_STRESS_SECONDS).

tests/core/repro_timing_races.c is the minimal reproducer of two races this
found in csrc/core's timing events (now fixed), kept as a regression test;
any sanitizer report fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "csrc" / "core"
BACKENDS = ROOT / "csrc" / "backends"
TESTS = ROOT / "tests" / "core"
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g"]
VARIANTS = {
    "plain": ["-O2"],
    "tsan": ["-O1", "-fsanitize=thread"],
    "asan": [
        "-O1",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
    ],
}
SECONDS = os.environ.get("MAX_DRIVER_STRESS_SECONDS", "5")
THREADS = "8"

REPORT_START = re.compile(
    r"^(WARNING: ThreadSanitizer|==\d+==ERROR: (Address|Leak)Sanitizer"
    r"|.*runtime error:)",
    re.M,
)


def native_env() -> dict[str, str]:
    """The environment for compilers and the C programs: without the ASan
    runtime that scripts/sanitize.sh preloads into Python (a TSan program
    crashes with it, and the compiler's own leaks would be reported)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["MAX_DRIVER_BACKEND"] = "cpu"
    env["TSAN_OPTIONS"] = "halt_on_error=0 second_deadlock_stack=1"
    env["ASAN_OPTIONS"] = "detect_leaks=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env.pop("LSAN_OPTIONS", None)  # suppressions are for Python, not C
    return env


def _compile(tmp_path: Path, main: str, extra: list[str]) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    exe = tmp_path / Path(main).stem
    sources = sorted(str(p) for d in (CORE, BACKENDS) for p in d.glob("*.c"))
    cmd = [
        cc,
        *FLAGS,
        *extra,
        f"-I{CORE}",
        f"-I{BACKENDS}",
        *sources,
        str(TESTS / main),
    ]
    cmd += ["-o", str(exe), "-pthread", "-ldl", "-lm"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=native_env())
    if result.returncode != 0:
        if "-fsanitize" in " ".join(extra) and "sanitize" in result.stderr:
            return None  # the toolchain lacks this sanitizer's runtime
        pytest.fail(f"compiling {main} failed:\n{result.stderr}")
    return exe


def _reports(stderr: str) -> list[str]:
    """Each sanitizer report in stderr, from its first line to the next."""
    starts = [m.start() for m in REPORT_START.finditer(stderr)]
    ends = starts[1:] + [len(stderr)] if starts else []
    return [stderr[a:b] for a, b in zip(starts, ends, strict=True)]


def _check_sanitizers(result: subprocess.CompletedProcess[str]) -> None:
    """Fails on any sanitizer report."""
    reports = _reports(result.stderr)
    if reports:
        pytest.fail(
            f"{len(reports)} sanitizer report(s):\n"
            + "\n".join(reports[:5])
            + "\n--- stdout:\n"
            + result.stdout
        )


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_core_stress(tmp_path: Path, variant: str) -> None:
    exe = _compile(tmp_path, "stress.c", VARIANTS[variant])
    if exe is None:
        pytest.skip(f"the compiler cannot build with {variant}")
    result = subprocess.run(
        [str(exe), SECONDS, THREADS],
        capture_output=True,
        text=True,
        timeout=150,
        env=native_env(),
    )
    print(result.stdout)
    # The program's own checks (ordering, gating, wake-ups, counts) first:
    failures = [line for line in result.stderr.splitlines() if "stress: " in line]
    assert not failures, "\n".join(failures) + "\n" + result.stdout
    _check_sanitizers(result)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "stress passed" in result.stdout
    counts = dict(re.findall(r"(\w+)=(\d+)", result.stdout))
    for name in ("host_ran", "gates", "async", "event_chains", "device_syncs"):
        assert int(counts.get(name, 0)) > 0, f"the stress never did {name}"


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hazard_stress(tmp_path: Path, variant: str) -> None:
    exe = _compile(tmp_path, "hazard_stress.c", VARIANTS[variant])
    if exe is None:
        pytest.skip(f"the compiler cannot build with {variant}")
    result = subprocess.run(
        [str(exe), SECONDS, "4"],
        capture_output=True,
        text=True,
        timeout=150,
        env=native_env(),
    )
    print(result.stdout)
    failures = [ln for ln in result.stderr.splitlines() if "hazard_stress: " in ln]
    assert not failures, "\n".join(failures) + "\n" + result.stdout
    _check_sanitizers(result)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "hazard stress passed" in result.stdout
    counts = dict(re.findall(r"(\w+)=(\d+)", result.stdout))
    for name in ("rounds", "gated_rounds", "shared_ops", "stamps"):
        assert int(counts.get(name, 0)) > 0, f"the stress never did {name}"


@pytest.mark.timeout(120)
def test_timing_race_repro(tmp_path: Path) -> None:
    """The reproducer of the timing-event races (stamp_point read an item
    the worker may have freed; completed_stamp read a stamp being written),
    under TSan: a regression test."""
    exe = _compile(tmp_path, "repro_timing_races.c", VARIANTS["tsan"])
    if exe is None:
        pytest.skip("the compiler cannot build with tsan")
    result = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=100, env=native_env()
    )
    _check_sanitizers(result)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "repro done" in result.stdout
