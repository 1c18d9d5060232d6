"""Modular's own ``max`` wheel (release 26.7.0) as a test oracle: a virtual
environment that holds it, and child interpreters that run programs under
it.  Not a test module.

Both packages are named ``max``, so MAX's never enters our interpreter: it
lives in a virtual environment of its own, made once with ``pip install
max==26.7.0`` and cached (``$MAX_DRIVER_MAX_VENV``, by default
``$XDG_CACHE_HOME/max-driver/max-26.7.0-py3.X`` under ``~/.cache``), and
runs in its own process.  Making it needs PyPI: where PyPI cannot be
reached the callers skip, saying so, unless ``MAX_DRIVER_REQUIRE_MAX_WHEEL=1``
(CI sets it) turns that into a failure.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

MAX_VERSION = "26.7.0"
REPO_ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "max_runner.py"
# pip's own limit for one install; the wheels are about 100 MB.
INSTALL_TIMEOUT = 900
# A child that prints no program's result for this long hangs (a program
# runs in milliseconds; an interpreter starts in well under a second).
STALL = 30.0
# The environment variables a child interpreter must not inherit: they
# would put our package (or a sanitizer runtime) into MAX's interpreter.
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD")


class Unavailable(Exception):
    """MAX's wheel cannot be had here (the message says why)."""


def venv_dir() -> Path:
    if os.environ.get("MAX_DRIVER_MAX_VENV"):
        return Path(os.environ["MAX_DRIVER_MAX_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    minor = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return cache / "max-driver" / f"max-{MAX_VERSION}-{minor}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def required() -> bool:
    """Whether a missing wheel is a failure rather than a skip (CI)."""
    return os.environ.get("MAX_DRIVER_REQUIRE_MAX_WHEEL") == "1"


def _index_host() -> tuple[str, int]:
    url = urlparse(os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple")
    return url.hostname or "pypi.org", url.port or (
        443 if url.scheme == "https" else 80
    )


def _reachable(host: str, port: int, timeout: float = 5.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _marker(venv: Path) -> Path:
    return venv / "max-driver-oracle.json"


def _is_ready(venv: Path) -> bool:
    try:
        info = json.loads(_marker(venv).read_text())
    except (OSError, ValueError):
        return False
    return info.get("max") == MAX_VERSION and venv_python(venv).exists()


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _create(venv: Path) -> None:
    """Makes the environment next to its final place, then renames it, so
    an interrupted install never leaves a half-made one behind."""
    host, port = _index_host()
    if not _reachable(host, port):
        raise Unavailable(
            f"no network: {host}:{port} cannot be reached to install"
            f" max=={MAX_VERSION} (Modular's wheel, the differential oracle)"
        )
    staging = venv.with_name(venv.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    env = child_env()
    steps = (
        [sys.executable, "-m", "venv", str(staging)],
        [
            str(venv_python(staging)),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"max=={MAX_VERSION}",
            "numpy",
        ],
    )
    for cmd in steps:
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=env,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({result.returncode}):\n"
                f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
    _marker(staging).write_text(json.dumps({"max": MAX_VERSION, "made": time.time()}))
    shutil.rmtree(venv, ignore_errors=True)
    staging.rename(venv)


def ensure_venv() -> Path:
    """The interpreter of the environment holding MAX's wheel, made on
    first use.  Raises ``Unavailable`` when it cannot be made for want of
    a network, ``RuntimeError`` when pip fails otherwise."""
    venv = venv_dir()
    if _is_ready(venv):
        return venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker; the others then reuse it
        if not _is_ready(venv):
            _create(venv)
    return venv_python(venv)


def our_python_args() -> list[str]:
    """Our side of a differential run: this interpreter, with the ``max``
    package the tests import first on its path."""
    import max

    return [
        sys.executable,
        "-I",
        str(RUNNER),
        "--prepend",
        str(Path(max.__path__[0]).parent),
    ]


def max_python_args(python: Path) -> list[str]:
    return [str(python), "-I", str(RUNNER)]


class Run:
    """The observations of one side's run: ``obs[id]`` per program (a dict
    ``{"crash": message, "step": index}`` for a program that killed its
    interpreter on its own), and ``aftermath``, the programs whose child
    died but which ran cleanly alone: an earlier program corrupted that
    interpreter's memory (their observations are from the run alone)."""

    def __init__(self) -> None:
        self.obs: dict[str, Any] = {}
        self.aftermath: list[str] = []


def _run_child(
    argv: Sequence[str], programs: list[dict[str, Any]], skip: int, stall: float
) -> tuple[list[dict[str, Any]], str]:
    """Runs programs[skip:] in one child: the records it printed and, when
    it did not finish them all, why (its exit status and last stderr line,
    or that it printed nothing for ``stall`` seconds: a hang, killed)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [*argv, "--skip", str(skip)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=child_env(),
            cwd=RUNNER.parent,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(
            target=_pump, args=(proc, programs, lines), daemon=True
        )
        reader.start()
        records, hung = [], False
        while True:
            try:
                line = lines.get(timeout=stall)
            except queue.Empty:
                proc.kill()
                hung = True
                break
            if line is None:
                break
            records.append(json.loads(line))
        proc.wait()
        reader.join()
        err.seek(0)
        tail = err.read().strip().splitlines() or [""]
    if len(records) == len(programs) - skip:
        return records, ""
    step = next(
        (ln.split()[1] for ln in reversed(tail) if ln.startswith("step ")), "-1"
    )
    why = (
        f"hung (no output for {stall:.0f} s)"
        if hung
        else f"exit {proc.returncode}: {tail[-1][-300:]}"
    )
    return records, f"{step} {why}"


def _pump(
    proc: subprocess.Popen,
    programs: list[dict[str, Any]],
    lines: queue.Queue[str | None],
) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps({"programs": programs}))
        proc.stdin.close()
    except BrokenPipeError:
        pass
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def _crash(why: str) -> dict[str, Any]:
    step, message = why.split(" ", 1)
    return {"crash": message, "step": int(step)}


def run_programs(
    argv: Sequence[str], programs: list[dict[str, Any]], stall: float = STALL
) -> Run:
    """Runs ``programs`` in one child (``argv``).  When a program kills it
    (or hangs it), that program runs again alone in a fresh child (to tell
    its own crash from the aftermath of an earlier program's), and the rest
    in another."""
    run = Run()
    start = 0
    while start < len(programs):
        records, _ = _run_child(argv, programs, start, stall)
        for record in records:
            run.obs[record["id"]] = record["obs"]
        start += len(records)
        if start >= len(programs):
            break
        program = programs[start]
        alone, why = _run_child(argv, [program], 0, stall)
        if alone:
            run.obs[program["id"]] = alone[0]["obs"]
            run.aftermath.append(program["id"])
        else:
            run.obs[program["id"]] = _crash(why)
        start += 1
    return run


def run_both(programs: list[dict[str, Any]], max_python: Path) -> tuple[Run, Run]:
    """Runs ``programs`` under both packages at once (two children):
    ``(ours, theirs)``."""
    with ThreadPoolExecutor(2) as pool:
        ours = pool.submit(run_programs, our_python_args(), programs)
        theirs = pool.submit(run_programs, max_python_args(max_python), programs)
        return ours.result(), theirs.result()
