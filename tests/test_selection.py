"""Backend selection on a machine without a GPU (SPEC §2, §10)."""

from __future__ import annotations

import json
import os

import pytest

from max import driver

CUDA_STUB = "/usr/local/cuda/lib64/stubs/libcuda.so"
# Debian's HIP runtime (libamdhip64-5, installed by .ci/run): a real library
# on a machine without an AMD GPU.
DEBIAN_HIP = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"
KEYS = {"api", "library", "loaded", "device_count", "error", "chosen"}

pytestmark = pytest.mark.skipif(
    driver.accelerator_count() != 0, reason="machine has an accelerator"
)

DUMP = r"""
import json
from max import driver
sel = driver.backend_selection()
out = {"selection": sel, "count": driver.accelerator_count()}
try:
    driver.Accelerator()
    out["accelerator"] = None
except Exception as e:
    out["accelerator"] = [type(e).__name__, str(e)]
cpu = driver.CPU()
q = driver.DeviceQueue(cpu)
done = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: done.append(1))
q.synchronize(timeout=20)
out["cpu_works"] = done == [1]
print("JSON" + json.dumps(out))
"""

IMPORT = r"""
try:
    import max.driver
    print("IMPORTED")
except ImportError as e:
    print("ERR", type(e).__name__)
    print("MSG", str(e))
"""


def _dump(run_py, **env):
    r = run_py(DUMP, timeout=60, **env)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("JSON"))
    return json.loads(line[4:])


def _import(run_py, **env):
    r = run_py(IMPORT, timeout=60, **env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _check_entries(sel):
    assert isinstance(sel, list)
    for e in sel:
        assert isinstance(e, dict)
        assert set(e) == KEYS
        assert e["api"] in ("cuda", "hip")
        assert e["library"] is None or isinstance(e["library"], str)
        assert type(e["loaded"]) is bool
        assert type(e["device_count"]) is int
        assert e["error"] is None or isinstance(e["error"], str)
        assert type(e["chosen"]) is bool


def test_accelerator_count_zero():
    assert driver.accelerator_count() == 0


def test_backend_selection_in_process():
    sel = driver.backend_selection()
    _check_entries(sel)
    assert not any(e["chosen"] for e in sel)


def test_backend_selection_auto(run_py):
    out = _dump(run_py)
    sel = out["selection"]
    _check_entries(sel)
    assert [e["api"] for e in sel] == ["cuda", "hip"]
    for e in sel:
        assert e["chosen"] is False
        assert e["device_count"] == 0
        assert isinstance(e["error"], str) and e["error"]
    assert out["count"] == 0
    assert out["cpu_works"]
    name, msg = out["accelerator"]
    assert name == "ValueError"
    assert msg.startswith("failed to create device:")


def test_backend_cpu_ignores_gpus(run_py):
    env = {"MAX_DRIVER_BACKEND": "cpu"}
    if os.path.exists(CUDA_STUB):
        env["MAX_DRIVER_CUDA_LIBRARY"] = CUDA_STUB
    out = _dump(run_py, **env)
    sel = out["selection"]
    _check_entries(sel)
    assert not any(e["chosen"] for e in sel)
    assert not any(e["loaded"] for e in sel)  # nothing was even opened
    assert all(e["device_count"] == 0 for e in sel)
    assert out["count"] == 0
    assert out["cpu_works"]
    assert out["accelerator"][0] == "ValueError"


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_forced_backend_import_error(run_py, backend):
    out = _import(run_py, MAX_DRIVER_BACKEND=backend)
    assert "IMPORTED" not in out
    assert "ERR ImportError" in out  # exactly ImportError, not a subclass
    msg = out.split("MSG", 1)[1].lower()
    assert backend in msg


def test_forced_cuda_names_library_path(run_py):
    out = _import(
        run_py,
        MAX_DRIVER_BACKEND="cuda",
        MAX_DRIVER_CUDA_LIBRARY="/nonexistent/libcuda.so",
    )
    assert "ERR ImportError" in out
    assert "/nonexistent/libcuda.so" in out


def test_forced_hip_names_library_path(run_py):
    out = _import(
        run_py,
        MAX_DRIVER_BACKEND="hip",
        MAX_DRIVER_HIP_LIBRARY="/nonexistent/libamdhip64.so",
    )
    assert "ERR ImportError" in out
    assert "/nonexistent/libamdhip64.so" in out


def test_bogus_backend_import_error(run_py):
    out = _import(run_py, MAX_DRIVER_BACKEND="bogus")
    assert "ERR ImportError" in out
    assert "bogus" in out or "MAX_DRIVER_BACKEND" in out


def test_auto_backend_explicit(run_py):
    out = _import(run_py, MAX_DRIVER_BACKEND="auto")
    assert "IMPORTED" in out


def test_cuda_library_override_recorded(run_py):
    out = _dump(run_py, MAX_DRIVER_CUDA_LIBRARY="/nonexistent/libcuda.so")
    cuda = next(e for e in out["selection"] if e["api"] == "cuda")
    assert cuda["library"] == "/nonexistent/libcuda.so"
    assert cuda["loaded"] is False
    assert cuda["chosen"] is False
    assert isinstance(cuda["error"], str) and cuda["error"]
    assert out["count"] == 0
    # Accelerator() explains why: the selection reasons are in the message.
    name, msg = out["accelerator"]
    assert name == "ValueError"
    assert msg.startswith("failed to create device:")
    assert "/nonexistent/libcuda.so" in msg


def test_hip_library_override_recorded(run_py):
    out = _dump(run_py, MAX_DRIVER_HIP_LIBRARY="/nonexistent/libamdhip64.so")
    hip = next(e for e in out["selection"] if e["api"] == "hip")
    assert hip["library"] == "/nonexistent/libamdhip64.so"
    assert hip["loaded"] is False
    assert hip["chosen"] is False
    assert isinstance(hip["error"], str) and hip["error"]


@pytest.mark.skipif(not os.path.exists(CUDA_STUB), reason="no CUDA toolkit stub")
def test_cuda_stub_library_falls_back(run_py):
    out = _dump(run_py, MAX_DRIVER_CUDA_LIBRARY=CUDA_STUB)
    cuda = next(e for e in out["selection"] if e["api"] == "cuda")
    assert cuda["library"] == CUDA_STUB
    assert cuda["loaded"] is True  # dlopen worked; cuInit did not
    assert cuda["chosen"] is False
    assert cuda["device_count"] == 0
    assert "CUDA_ERROR_STUB_LIBRARY" in cuda["error"]
    assert "34" in cuda["error"]
    assert out["count"] == 0
    assert out["cpu_works"]
    assert "CUDA_ERROR_STUB_LIBRARY" in out["accelerator"][1]


@pytest.mark.skipif(not os.path.exists(CUDA_STUB), reason="no CUDA toolkit stub")
def test_cuda_stub_forced_import_error(run_py):
    out = _import(run_py, MAX_DRIVER_BACKEND="cuda", MAX_DRIVER_CUDA_LIBRARY=CUDA_STUB)
    assert "ERR ImportError" in out
    assert "CUDA_ERROR_STUB_LIBRARY" in out
    assert CUDA_STUB in out


@pytest.mark.skipif(not os.path.exists(DEBIAN_HIP), reason="no libamdhip64.so.5")
def test_debian_hip_runtime_without_gpu_falls_back(run_py):
    out = _dump(run_py, MAX_DRIVER_HIP_LIBRARY=DEBIAN_HIP)
    hip = next(e for e in out["selection"] if e["api"] == "hip")
    assert hip["loaded"] is True  # the real runtime loads and resolves
    assert hip["chosen"] is False
    assert hip["device_count"] == 0
    # The runtime's own error name and code, e.g. "hipInit failed:
    # hipErrorInvalidDevice (101)" or hipErrorNoDevice (100).
    assert "hipError" in hip["error"] and "(" in hip["error"]
    assert out["count"] == 0
    assert out["cpu_works"]


@pytest.mark.skipif(not os.path.exists(DEBIAN_HIP), reason="no libamdhip64.so.5")
def test_debian_hip_runtime_forced_import_error(run_py):
    out = _import(run_py, MAX_DRIVER_BACKEND="hip", MAX_DRIVER_HIP_LIBRARY=DEBIAN_HIP)
    assert "ERR ImportError" in out
    assert "hipError" in out
    assert DEBIAN_HIP in out


def test_import_error_is_not_module_not_found(run_py):
    code = r"""
try:
    import max.driver
except ModuleNotFoundError:
    print("MNF")
except ImportError:
    print("IE")
"""
    r = run_py(code, timeout=60, MAX_DRIVER_BACKEND="cuda")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "IE"
