"""Packaging: ``python -m build`` makes an sdist and, from that sdist, a binary
wheel; the wheel installs into a fresh venv with no index, no dependencies
and no compiler, and works there (SPEC §1, README "Install").

The source tree is copied first so that building leaves nothing (build/,
*.egg-info) in the checkout.  The build runs in pip's isolated build
environment (it fetches setuptools); only if that fails (no network) does it
retry with ``--no-isolation`` and say so with a warning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import venv
import warnings
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build", reason="the 'build' package (test extra) is needed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 240
IGNORE = shutil.ignore_patterns(
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.so",
    "*.o",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".venv",
    "venv",
    ".ipynb_checkpoints",
)

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


def _run(cmd, *, cwd, env=None, timeout=BUILD_TIMEOUT):
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _clean_env(**extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "PYTHON", "PIP_", "VIRTUAL_ENV"))
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """``(sdist, wheel)`` built from a copy of the source tree."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO_ROOT, src, ignore=IGNORE)
    out = root / "dist"
    cmd = [sys.executable, "-m", "build", "--outdir", out, src]
    r = _run(cmd, cwd=root)
    if r.returncode != 0:
        isolated = r.stdout[-3000:] + r.stderr[-3000:]
        shutil.rmtree(out, ignore_errors=True)
        r = _run([*cmd, "--no-isolation"], cwd=root)
        assert r.returncode == 0, (
            f"isolated build failed:\n{isolated}\n"
            f"--no-isolation build failed too:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
        )
        warnings.warn(
            "isolated build failed, built with --no-isolation:\n" + isolated,
            stacklevel=1,
        )
    sdists = list(out.glob("max_driver-*.tar.gz"))
    wheels = list(out.glob("max_driver-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(out.iterdir())
    # "python -m build" builds the wheel from the unpacked sdist, so the
    # sdist is known to build by itself.
    assert "Building wheel from sdist" in r.stdout + r.stderr, r.stderr[-2000:]
    return sdists[0], wheels[0]


def test_sdist_contains_the_sources(dist):
    sdist, _ = dist
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


def test_wheel_is_binary_and_complete(dist):
    _, wheel = dist
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"max_driver-0.1.0-{py}-{py}-")
    assert not wheel.name.endswith("-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = [n for n in names if n.endswith(".dist-info/WHEEL")]
        assert "Root-Is-Purelib: false" in zf.read(info[0]).decode()
        eps = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert eps, "no entry_points.txt"
        text = zf.read(eps[0]).decode()
        assert "[pytest11]" in text and "max_driver = max.pytest_plugin" in text
    sos = [n for n in names if n.startswith("max/_core/driver.") and n.endswith(".so")]
    assert len(sos) == 1, sorted(names)
    for required in (
        "max/__init__.py",
        "max/py.typed",
        "max/_core/__init__.py",
        "max/_core/driver.pyi",
        "max/driver/__init__.py",
        "max/driver/__main__.py",
        "max/driver/driver.py",
        "max/dtype/__init__.py",
        "max/dtype/__init__.pyi",
        "max/pytest_plugin.py",
    ):
        assert required in names, required
    assert not [n for n in names if n.startswith(("csrc/", "tests/"))]


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory):
    """A fresh venv with only the wheel installed: no index, no dependencies,
    and no compiler (``CC``/``CXX`` point at ``false``), so nothing can be
    built on the way in."""
    _, wheel = dist
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "venv"
    try:
        venv.EnvBuilder(with_pip=True, symlinks=True).create(env_dir)
        pip = [env_dir / "bin" / "python", "-m", "pip"]
    except subprocess.CalledProcessError:
        # A distribution Python without ensurepip (Debian's python3 without
        # python3-venv): install with this interpreter's pip into the venv.
        shutil.rmtree(env_dir)
        venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
        pip = [sys.executable, "-m", "pip", "--python", env_dir / "bin" / "python"]
    python = env_dir / "bin" / "python"
    env = _clean_env(
        CC="false",
        CXX="false",
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    cmd = [*pip, "install", "--no-index", "--no-deps", wheel]
    r = _run(cmd, cwd=root, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Building wheel" not in r.stdout
    return python, env, root


def test_wheel_installs_and_runs_without_build_tools(installed):
    python, env, root = installed
    prefix = str(python.parent.parent)
    r = _run([python, "-c", SMOKE, prefix], cwd=root, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SMOKE OK" in r.stdout


def test_cli_in_the_venv(installed):
    python, env, root = installed
    r = _run([python, "-m", "max.driver"], cwd=root, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
