"""Build script for the native extension ``max._core.driver``.

Project metadata lives in ``pyproject.toml``; this file only declares the C
extension, whose source list is globbed so that adding a file to
``csrc/core``, ``csrc/backends`` or ``csrc/python`` needs no edit here.

Set ``MAX_DRIVER_CFLAGS`` to append flags to both the compile and the link
step, e.g. ``MAX_DRIVER_CFLAGS="-fsanitize=address -O1 -g"``.

Release wheels (stripped, and tagged manylinux by auditwheel) are built by
``scripts/build_wheels.py``.
"""

from __future__ import annotations

import glob
import os
import shlex

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIRS = ("csrc/core", "csrc/backends", "csrc/python")


def _glob(pattern: str) -> list[str]:
    # Relative paths (to this file) keep setuptools and sdists happy.
    return sorted(glob.glob(pattern, root_dir=HERE))


def _extra_flags() -> list[str]:
    return shlex.split(os.environ.get("MAX_DRIVER_CFLAGS", ""))


sources = [src for d in SOURCE_DIRS for src in _glob(f"{d}/*.c")]
# Headers, and the .inc files of the GPU backend that cuda.c and hip.c include.
headers = [
    hdr for d in SOURCE_DIRS for ext in ("h", "inc") for hdr in _glob(f"{d}/*.{ext}")
]

driver = Extension(
    "max._core.driver",
    sources=sources,
    depends=headers,
    include_dirs=list(SOURCE_DIRS),
    extra_compile_args=[
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-D_GNU_SOURCE",
        "-O2",
        "-fvisibility=hidden",
        *_extra_flags(),
    ],
    extra_link_args=["-pthread", *_extra_flags()],
    libraries=["dl", "m"],
)


class BuildExt(build_ext):
    """Links without the interpreter's own run-time search path: pyenv's
    (and some distributions') link flags add ``-Wl,-rpath`` to their
    libpython folder, which the extension does not use (it links no
    libpython) and which would put the build machine's path in a wheel."""

    def build_extensions(self) -> None:
        linker = self.compiler.linker_so
        self.compiler.linker_so = [a for a in linker if not a.startswith("-Wl,-rpath")]
        super().build_extensions()


setup(ext_modules=[driver], cmdclass={"build_ext": BuildExt})
