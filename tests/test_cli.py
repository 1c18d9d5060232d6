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


def _run(
    args: list[str], cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
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
    # The method is stated, and it is the benchmarks': statements timed
    # as written against a bare no-op C method call, not through a wrapper.
    assert "measured as the benchmarks do" in out
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


# ---- options: --help, --version, --json (issue 26) ---------------------------


def test_help_explains_and_runs_nothing() -> None:
    proc = _run(["-m", "max.driver", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "usage: python -m max.driver [-h] [--version] [--json]"
    )
    assert "Exit status: 0 when the self-check passes" in proc.stdout
    assert "MAX_DRIVER_BACKEND" in proc.stdout
    assert "PASS" not in proc.stdout and "Backend selection" not in proc.stdout


def test_version() -> None:
    from max.driver import __version__

    proc = _run(["-m", "max.driver", "--version"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"max-driver {__version__} (Python ")


def test_an_unknown_option_is_a_usage_error() -> None:
    proc = _run(["-m", "max.driver", "--bogus"])
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_is_the_report() -> None:
    proc = _run(["-m", "max.driver", "--json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)  # nothing else on stdout
    assert report["passed"] is True and report["self_check"]["passed"] is True
    assert report["backend_selection"]["entries"] == _selection()
    assert report["backend_selection"]["requested"] == "auto"
    cpu = report["devices"][0]
    assert cpu["repr"] == "Device(type=cpu,id=0)"
    assert cpu["properties"]["api"] == "cpu" and cpu["properties"]["id"] == 0
    assert cpu["properties"]["stats"]["total_memory"] > 0
    assert (
        len(report["devices"]) == 1 + report["backend_selection"]["accelerator_count"]
    )
    order = report["self_check"]["order"]
    assert order["passed"] and "['a1', 'a2', 'b1']" in order["detail"]
    rows = report["self_check"]["timings"]["rows"]
    assert rows[0]["statement"] == "zero.bit_length()" and rows[0]["ratio"] == 1.0
    assert all(r["ns_per_call"] > 0 for r in rows) and len(rows) == 9
    assert report["other_max_distributions"] == []
    assert Path(report["location"]) == ROOT / "max" / "driver"


# ---- when max.driver cannot be loaded -----------------------------------------

BAD_CUDA = "/nonexistent/max-driver-test/libcuda.so.1"
BAD_CUDA_ENV = {"MAX_DRIVER_BACKEND": "cuda", "MAX_DRIVER_CUDA_LIBRARY": BAD_CUDA}


def test_a_forced_backend_that_cannot_load_says_why_without_a_traceback() -> None:
    proc = _run(
        ["-m", "max.driver"],
        MAX_DRIVER_BACKEND="cuda",
        MAX_DRIVER_CUDA_LIBRARY=BAD_CUDA,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("python -m max.driver: max.driver cannot be loaded: ")
    assert "MAX_DRIVER_BACKEND=cuda" in lines[0] and BAD_CUDA in lines[0]
    assert lines[1] == "Backend selection (MAX_DRIVER_BACKEND=cuda):"
    assert lines[2].startswith(f"  cuda: library={BAD_CUDA} loaded=no devices=0")
    assert lines[3].startswith("  hip: ") and "not tried" in lines[3]
    assert "unset it (or set auto) to fall back to the CPU" in lines[4]


def test_a_forced_backend_that_cannot_load_as_json() -> None:
    proc = _run(["-m", "max.driver", "--json"], **BAD_CUDA_ENV)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["loaded"] is False and report["passed"] is False
    assert report["requested_backend"] == "cuda" and BAD_CUDA in report["error"]
    cuda = report["backend_selection"][0]
    assert cuda["api"] == "cuda" and cuda["library"] == BAD_CUDA
    assert cuda["loaded"] is False and cuda["chosen"] is False


def test_help_and_version_answer_when_the_backend_cannot_load() -> None:
    for option, expected in (("--version", "max-driver "), ("--help", "usage: ")):
        proc = _run(["-m", "max.driver", option], **BAD_CUDA_ENV)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(expected)


def test_an_unknown_backend_name_says_so() -> None:
    proc = _run(["-m", "max.driver"], MAX_DRIVER_BACKEND="vulkan")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "MAX_DRIVER_BACKEND=vulkan is not understood" in proc.stderr


def test_the_import_error_carries_the_reasons() -> None:
    """Outside the command, the import still raises (SPEC §2), with the
    selection entries attached for whoever reports it."""
    code = (
        "import json\n"
        "try:\n"
        "    import max.driver\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, json.dumps(e.backend_selection))\n"
    )
    proc = _run(
        ["-c", code], MAX_DRIVER_BACKEND="cuda", MAX_DRIVER_CUDA_LIBRARY=BAD_CUDA
    )
    kind, _, entries = proc.stdout.partition(" ")
    assert kind == "ImportError", proc.stdout + proc.stderr
    assert json.loads(entries)[0]["library"] == BAD_CUDA


def _unbuilt_checkout(tmp_path: Path) -> Path:
    """The checkout's Python files without the compiled extension, as a
    clone is before it is built."""
    tree = tmp_path / "checkout"
    for src in (ROOT / "max").rglob("*"):
        if src.is_file() and src.suffix != ".so" and "__pycache__" not in src.parts:
            dst = tree / src.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    (tree / "setup.py").write_text("")
    return tree


def test_an_unbuilt_checkout_is_explained(tmp_path: Path) -> None:
    """Issue 26: `pip install .` then `python -m max.driver` in the checkout
    imports the checkout's max/, which holds no extension."""
    tree = _unbuilt_checkout(tmp_path)
    proc = _run(["-m", "max.driver"], cwd=tree)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"is not in {tree / 'max'}/_core" in proc.stderr
    assert f"the source checkout {tree}" in proc.stderr
    assert "pip install -e ." in proc.stderr and "another directory" in proc.stderr
    assert "An installed copy" not in proc.stderr

    # With `pip install .` done: the installed copy is named.
    site = tmp_path / "site-packages"
    info = site / "max_driver-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: max-driver\n")
    (site / "max" / "_core").mkdir(parents=True)
    (site / "max" / "_core" / "driver.cpython-3x-x86_64-linux-gnu.so").touch()
    proc = _run(["-m", "max.driver"], cwd=tree, PYTHONPATH=str(site))
    assert proc.returncode == 2, proc.stderr
    assert f"An installed copy is in {site / 'max'}." in proc.stderr

    code = (
        "try:\n"
        "    import max.driver\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e.name, 'build_ext --inplace' in str(e))\n"
    )
    proc = _run(["-c", code], cwd=tree)
    assert proc.stdout.split() == ["max._core.driver", "True"], proc.stderr


def test_another_distribution_providing_max_is_named(tmp_path: Path) -> None:
    """Modular's `max` wheel also installs the package max/: the report
    says so (the fake distribution here only has metadata)."""
    info = tmp_path / "modular_max-25.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: modular-max\nVersion: 25.6.0\n"
    )
    # No top_level.txt (not every build backend writes one): its RECORD.
    (info / "RECORD").write_text("max/__init__.py,,\nmax/engine/__init__.py,,\n")
    older = tmp_path / "max_tools-1.0.egg-info"  # setuptools' top_level.txt
    older.mkdir()
    (older / "PKG-INFO").write_text(
        "Metadata-Version: 1.1\nName: max-tools\nVersion: 1.0\n"
    )
    (older / "top_level.txt").write_text("max\n")
    unrelated = tmp_path / "maxima-2.0.dist-info"
    unrelated.mkdir()
    (unrelated / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: maxima\nVersion: 2.0\n"
    )
    (unrelated / "RECORD").write_text("maxima/__init__.py,,\n")
    proc = _run(["-m", "max.driver"], PYTHONPATH=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == (
        "Warning: another installed distribution also provides the Python "
        "package `max`: max-tools 1.0, modular-max 25.6.0."
    )
    assert "install each into its own virtual environment" in lines[2]


def test_cli_is_requested_only_for_this_module(monkeypatch: Any) -> None:
    from max.driver import _cli

    cases = [
        (["-m"], ["python", "-m", "max.driver", "--json"], True),
        (["-m"], ["python", "-X", "dev", "-mmax.driver"], True),
        (["-m"], ["python", "-m", "max.driver.driver"], False),
        (["-m"], ["python", "-m", "mypkg"], False),
        (["/x/mine.py"], ["python", "-m", "max.driver"], False),  # found: running
        (["-c"], ["python", "-c", "import max.driver"], False),
    ]
    for argv, orig_argv, expected in cases:
        monkeypatch.setattr(sys, "argv", argv)
        monkeypatch.setattr(sys, "orig_argv", orig_argv)
        assert _cli.requested() is expected, (argv, orig_argv)


def test_a_closed_pipe_ends_it_quietly() -> None:
    """`python -m max.driver | head -1`: no BrokenPipeError traceback when
    the reader is gone (here before anything was written)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "max.driver"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the report is printed after the self-check
    stderr = proc.stderr.read()
    assert proc.wait(timeout=TIMEOUT_S) == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
