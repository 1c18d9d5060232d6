"""Builds the fake GPU driver (test code only; it never ships).

``build_fake_driver(out_dir, omit=())`` compiles ``tests/fake_driver/*.c``
into one shared library that exports the CUDA driver and HIP runtime entry
points the project uses, plus the ``fake_gpu_*`` control API.  ``omit``
names entry points to leave out (``-DFAKE_OMIT_<name>``), simulating an
older driver.  Each omit set is built once per ``out_dir`` and rebuilt when
a source is newer than the library.

Import it as ``from tests.fake_driver.build import build_fake_driver``, as
``fake_driver.build`` with ``tests/`` on ``sys.path``, or load the file by
path.  As a script: ``python tests/fake_driver/build.py OUT_DIR [NAME...]``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
INCLUDE = REPO_ROOT / "csrc" / "backends"
CFLAGS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-shared",
    "-fPIC",
    "-O1",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pthread",
]
# Every entry point must be defined here: fail the build, not the dlopen.
LDFLAGS = ["-Wl,-z,defs"]
_NAME = re.compile(r"^(cu|hip)[A-Za-z0-9_]+$")


def _sources() -> list[Path]:
    return sorted(HERE.glob("*.c"))


def _inputs() -> list[Path]:
    headers = [*HERE.glob("*.h"), INCLUDE / "cuda_abi.h", INCLUDE / "hip_abi.h"]
    return _sources() + sorted(headers)


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc) to build the fake GPU driver")
    return cc


def _library_name(omit: Sequence[str]) -> str:
    if not omit:
        return "libfake_gpu.so"
    digest = hashlib.sha1(",".join(omit).encode()).hexdigest()[:10]
    return f"libfake_gpu-omit-{digest}.so"


def _up_to_date(target: Path) -> bool:
    if not target.exists():
        return False
    built = target.stat().st_mtime
    return all(p.stat().st_mtime <= built for p in _inputs() if p.exists())


def build_fake_driver(
    out_dir: Path, omit: Sequence[str] = (), extra_cflags: Sequence[str] = ()
) -> Path:
    """Compile the fake driver into ``out_dir``; return the library's path.

    ``omit``: entry point names (``"cuLaunchHostFunc"``) left out of the
    library.  ``extra_cflags``: more compiler flags (``-fsanitize=thread``);
    they are part of the cache key too.
    """
    names = sorted(set(omit))
    for name in names:
        if not _NAME.match(name):
            raise ValueError(f"not an entry point name: {name!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = [*names, *(["--", *extra_cflags] if extra_cflags else [])]
    target = out_dir / _library_name(key)
    if _up_to_date(target):
        return target
    cmd = [
        _compiler(),
        *CFLAGS,
        f"-I{INCLUDE}",
        *[f"-DFAKE_OMIT_{name}" for name in names],
        *extra_cflags,
        *map(str, _sources()),
        *LDFLAGS,
    ]
    # Build beside the target and rename: concurrent builders (pytest-xdist)
    # never see a half-written library.
    fd, tmp = tempfile.mkstemp(prefix=".fake_gpu-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        r = subprocess.run([*cmd, "-o", tmp], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(
                f"building the fake GPU driver failed:\n{' '.join(cmd)}\n"
                f"{r.stdout}{r.stderr}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: build.py OUT_DIR [OMITTED_ENTRY_POINT...]")
    print(build_fake_driver(Path(sys.argv[1]), sys.argv[2:]))
