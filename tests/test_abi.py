"""Our own driver declarations (csrc/backends/cuda_abi.h, hip_abi.h) against the
real SDK headers: tests/abi/check_abi.c fails to compile on any difference
in an entry point's prototype, a type or a constant.

The headers come from the CUDA Toolkit (/usr/local/cuda/include/cuda.h) and
Debian's libamdhip64-dev (/usr/include/hip), which .ci/run installs.  Where a
header is missing the check cannot run, and the test says so by skipping."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "tests" / "abi" / "check_abi.c"
SDKS = {
    "cuda": (Path("/usr/local/cuda/include/cuda.h"), ["-DCHECK_CUDA"]),
    "hip": (
        Path("/usr/include/hip/hip_runtime_api.h"),
        ["-DCHECK_HIP", "-D__HIP_PLATFORM_AMD__"],
    ),
}


def _compile(
    header: Path, flags: list[str], include: Path
) -> subprocess.CompletedProcess:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the project at all"
    cmd = [
        cc,
        "-std=gnu11",
        "-fsyntax-only",
        *flags,
        f"-I{header.parent}",
        f"-I{include}",
        str(CHECK),
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("api", sorted(SDKS))
def test_declarations_match_sdk_headers(api: str) -> None:
    header, flags = SDKS[api]
    if not header.exists():
        pytest.skip(f"{header} is not installed; cannot compare {api} declarations")
    result = _compile(header, flags, ROOT / "csrc" / "backends")
    assert result.returncode == 0, result.stderr


def test_check_catches_a_wrong_declaration(tmp_path: Path) -> None:
    """The check is not vacuous: a changed parameter type fails it."""
    header, flags = SDKS["cuda"]
    if not header.exists():
        pytest.skip(f"{header} is not installed")
    for src in (ROOT / "csrc" / "backends").glob("*.h"):
        (tmp_path / src.name).write_text(src.read_text())
    abi = tmp_path / "cuda_abi.h"
    text = abi.read_text()
    wrong = text.replace(
        "(cu_event event, cu_stream stream)", "(cu_event event, void *stream)"
    )
    assert wrong != text
    abi.write_text(wrong)
    result = _compile(header, flags, tmp_path)
    assert result.returncode != 0
    assert "cuEventRecord differs from cuda.h" in result.stderr
