"""Release packaging: scripts/build_wheels.py builds one sdist and, from
it, one wheel per supported CPython found (3.10 to 3.13), stripped and
repaired by auditwheel to a manylinux tag; each wheel installs into a fresh
virtual environment of its interpreter with no index, no dependencies and no
compiler on PATH, and passes the self-check (``python -m max.driver``) there.

The wheels are built once for the whole module (the script builds two at a
time, from the sdist, so the sdist is known to build), and the installs and
self-checks of the interpreters run two at a time too.  A supported version
with no interpreter on this machine has its tests skipped, saying so.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import struct
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("build", reason="the 'build' package (test extra) is needed")
pytest.importorskip("auditwheel", reason="auditwheel (test extra) is needed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "scripts" / "build_wheels.py"
_spec = importlib.util.spec_from_file_location("build_wheels", SCRIPT)
build_wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_wheels)
SUPPORTED = build_wheels.SUPPORTED
TIMEOUT = 120

SMOKE = textwrap.dedent(
    """
    import importlib.metadata
    import sys
    import threading

    import max.driver
    from max.driver import CPU, CompletionFlag, DeviceQueue

    prefix = sys.argv[1]
    assert max.driver.__file__.startswith(prefix), max.driver.__file__
    import max._core.driver as core
    assert core.__file__.startswith(prefix), core.__file__

    cpu = CPU()
    queue = DeviceQueue(cpu)
    flag = CompletionFlag(cpu)
    order = []
    ran = threading.Event()
    enqueue = getattr(queue, "__unsafe_enqueue_py_host_func")
    enqueue(lambda: order.append("before"))
    queue.wait_for_host_value(flag, 1)
    enqueue(lambda: (order.append("after"), ran.set()))
    assert not ran.wait(0.05), "the flag gate did not hold"
    flag.signal(1)
    queue.synchronize(timeout=10)
    assert order == ["before", "after"], order
    event = queue.record_event()
    event.synchronize(timeout=10)
    assert event.is_ready()

    eps = importlib.metadata.entry_points(group="pytest11")
    assert [ep.value for ep in eps if ep.name == "max_driver"] == [
        "max.pytest_plugin"
    ]
    # max.dtype works without NumPy (not installed here) until a call
    # needs it, and then says so.
    from max.dtype import DType
    assert DType(81) is DType.float32 and DType.bfloat16.size_in_bytes == 2
    assert "numpy" not in sys.modules
    try:
        DType.float32.to_numpy()
    except ImportError as e:
        assert "needs NumPy" in str(e), e
    else:
        raise AssertionError("to_numpy() worked without NumPy")

    print("SMOKE OK", max.driver.accelerator_count())
    """
)


@dataclass
class Release:
    sdist: Path
    wheels: dict[str, Path]  # minor version -> repaired wheel
    interpreters: dict[str, str]
    installs: dict[str, dict[str, subprocess.CompletedProcess[str]]] = field(
        default_factory=dict
    )


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "PYTHON", "PIP_", "VIRTUAL_ENV"))
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Release:
    out = tmp_path_factory.mktemp("release")
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--out", out],
        capture_output=True,
        text=True,
        timeout=900,
        env=_clean_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    sdist = Path(next(ln.split(" ", 1)[1] for ln in lines if ln.startswith("sdist ")))
    wheels = {}
    for line in lines:
        if line.startswith("wheel "):
            wheel = Path(line.split(" ", 1)[1])
            tag = re.search(r"-cp3(\d+)-", wheel.name)
            wheels[f"3.{tag.group(1)}"] = wheel
    release = Release(sdist, wheels, build_wheels.find_interpreters())
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        checked = pool.map(
            lambda minor: (minor, _install_and_check(release, minor, out)),
            sorted(wheels),
        )
        release.installs = dict(checked)
    return release


def _install_and_check(
    release: Release, minor: str, root: Path
) -> dict[str, subprocess.CompletedProcess[str]]:
    """A venv of the wheel's interpreter; the wheel installed by that
    interpreter's pip with no index, no dependencies and no compiler on
    PATH (CC and CXX are `false` too); then the smoke test and the
    self-check, from a folder outside the checkout."""
    python = release.interpreters[minor]
    env_dir = root / f"venv-{minor}"
    run = {"cwd": root, "capture_output": True, "text": True, "check": False}
    venv = subprocess.run([python, "-m", "venv", "--without-pip", env_dir],
                          timeout=TIMEOUT, **run)  # fmt: skip
    assert venv.returncode == 0, venv.stderr
    target = env_dir / "bin" / "python"
    env = _clean_env(PATH=str(env_dir / "bin"), CC="false", CXX="false")
    install = [python, "-m", "pip", "--python", target, "install", "--no-index",
               "--no-deps", release.wheels[minor]]  # fmt: skip
    result = {"install": subprocess.run(install, env=env, timeout=TIMEOUT, **run)}
    prefix = str(env_dir)
    result["smoke"] = subprocess.run(
        [target, "-c", SMOKE, prefix], env=env, timeout=TIMEOUT, **run
    )
    result["cli"] = subprocess.run(
        [target, "-m", "max.driver"], env=env, timeout=TIMEOUT, **run
    )
    return result


def _for(release: Release, minor: str) -> Path:
    if minor not in release.interpreters:
        pytest.skip(f"no CPython {minor} on this machine (pyenv or PATH)")
    assert minor in release.wheels, f"no wheel was built for CPython {minor}"
    return release.wheels[minor]


def test_the_default_interpreter_has_a_wheel(release):
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in release.wheels


def test_sdist_contains_the_sources(release):
    sdist = release.sdist
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    sources = {
        str(p.relative_to(REPO_ROOT))
        for ext in ("c", "h", "inc")
        for p in (REPO_ROOT / "csrc").rglob(f"*.{ext}")
    }
    assert any(s.endswith(".inc") for s in sources)
    missing = sources - names
    assert not missing, f"sdist lacks C sources: {sorted(missing)}"
    for required in (
        "setup.py",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "PKG-INFO",
        "max/py.typed",
        "max/_core/driver.pyi",
        "max/driver/__init__.py",
        "max/dtype/__init__.py",
        "max/dtype/__init__.pyi",
        "max/pytest_plugin.py",
    ):
        assert required in names, required
    assert not [n for n in names if n.endswith((".so", ".o"))]


# ---- the wheels: manylinux, stripped, complete ----------------------------


def _elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """Section name -> (file offset, size) of a 64-bit little-endian ELF."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from(
            "<IIQQQQ", data, shoff + i * shentsize
        )
        return name, offset, size

    _, names_at, _ = header(shstrndx)
    sections = {}
    for i in range(shnum):
        name, offset, size = header(i)
        end = data.index(b"\0", names_at + name)
        sections[data[names_at + name : end].decode()] = (offset, size)
    return sections


def _dynamic_tags(data: bytes, sections: dict[str, tuple[int, int]]) -> set[int]:
    offset, size = sections[".dynamic"]
    return {
        struct.unpack_from("<q", data, at)[0] for at in range(offset, offset + size, 16)
    }


DT_RPATH, DT_RUNPATH = 15, 29


@pytest.mark.parametrize("minor", SUPPORTED)
def test_wheel_is_manylinux_stripped_and_complete(release, minor):
    wheel = _for(release, minor)
    from max._core import __version__

    py = "cp3" + minor.split(".")[1]
    assert re.fullmatch(
        rf"max_driver-{re.escape(__version__)}-{py}-{py}-manylinux_2_\d+_x86_64\.whl",
        wheel.name,
    ), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"max_driver-{__version__}.dist-info"
        meta = zf.read(f"{info}/WHEEL").decode()
        assert "Root-Is-Purelib: false" in meta
        assert re.search(rf"^Tag: {py}-{py}-manylinux_2_\d+_x86_64$", meta, re.M)
        metadata = zf.read(f"{info}/METADATA").decode()
        assert "License-Expression: Apache-2.0" in metadata
        assert "Requires-Dist: numpy>=1.24" in metadata.splitlines()
        license_text = zf.read(f"{info}/licenses/LICENSE").decode()
        assert "Apache License" in license_text and "Version 2.0" in license_text
        eps = zf.read(f"{info}/entry_points.txt").decode()
        assert "[pytest11]" in eps and "max_driver = max.pytest_plugin" in eps
        (so,) = [n for n in names if re.fullmatch(r"max/_core/driver\..*\.so", n)]
        data = zf.read(so)
    for required in (
        "max/__init__.py",
        "max/py.typed",
        "max/_core/__init__.py",
        "max/_core/driver.pyi",
        "max/driver/__init__.py",
        "max/driver/__main__.py",
        "max/driver/_cli.py",
        "max/driver/driver.py",
        "max/dtype/__init__.py",
        "max/dtype/__init__.pyi",
        "max/pytest_plugin.py",
    ):
        assert required in names, required
    assert not [n for n in names if n.startswith(("csrc/", "tests/", "max.libs"))]
    sections = _elf_sections(data)
    assert ".text" in sections and ".dynamic" in sections
    assert not [s for s in sections if s.startswith(".debug") or s == ".symtab"]
    # No run-time search path of the build machine's (pyenv adds one).
    assert not {DT_RPATH, DT_RUNPATH} & _dynamic_tags(data, sections)


# ---- installed: each interpreter, no compiler, the self-check ---------------


@pytest.mark.parametrize("minor", SUPPORTED)
def test_installs_without_a_compiler_and_self_checks(release, minor):
    _for(release, minor)
    runs = release.installs[minor]
    install = runs["install"]
    assert install.returncode == 0, install.stdout + install.stderr
    assert "Building wheel" not in install.stdout
    smoke = runs["smoke"]
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "SMOKE OK" in smoke.stdout
    cli = runs["cli"]
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout.rstrip().endswith("PASS")
    first = cli.stdout.splitlines()[0]
    assert f"(Python {minor}." in first and "venv-" in first, first
