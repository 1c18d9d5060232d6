"""CPU-side checks of the real-GPU tooling, so that it stays runnable between
the rare sessions that have a GPU: the raw-driver benchmark helper compiles
without a CUDA SDK and fails cleanly without a driver, the check script
parses, the committed PTX is what the tests load, and the GPU tests and
benchmarks skip cleanly without a CUDA accelerator.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from max import driver

REPO = Path(__file__).resolve().parent.parent
GPU_TESTS = REPO / "tests" / "gpu"
HAS_CUDA = driver.accelerator_count() > 0 and driver.accelerator_api() == "cuda"
CUDA_STUB = Path("/usr/local/cuda/lib64/stubs/libcuda.so")
PTXAS = shutil.which("ptxas") or next(
    (p for p in ["/usr/local/cuda/bin/ptxas"] if os.access(p, os.X_OK)), None
)

if str(REPO) not in sys.path:  # for `benchmarks` (the root conftest may add it)
    sys.path.insert(0, str(REPO))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    return env


@pytest.fixture(scope="module")
def raw_library(tmp_path_factory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    from benchmarks.gpu import build_raw

    try:
        return build_raw(tmp_path_factory.mktemp("raw"))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"raw_driver.c does not compile:\n{exc.stderr}")


def test_raw_driver_compiles_without_cuda(raw_library):
    # -Wall -Wextra -Werror against csrc/backends/cuda_abi.h alone (build_raw).
    assert raw_library.is_file()


def test_raw_driver_without_a_driver_fails_cleanly(raw_library):
    from benchmarks.gpu import RawDriver

    raw = RawDriver(raw_library)
    # Nothing opened: every driver timing refuses, with the reason.
    with pytest.raises(RuntimeError, match="raw_open"):
        raw.time_ns("raw_event_record_ns", 0, 10)
    with pytest.raises(RuntimeError, match="dlopen"):
        raw.open("/nonexistent/libcuda.so.1", 0)
    with pytest.raises(RuntimeError, match="raw_open"):
        raw.time_ns("raw_copy_ns", 0, 4096, 0, 10, 1)
    # A copy of no kind raw_driver.c knows is refused before anything.
    with pytest.raises(RuntimeError, match="bad kind 4"):
        raw.time_ns("raw_copy_ns", 4, 4096, 0, 10, 1)
    # The host-only baselines need no driver.
    assert 0 < raw.time_ns("raw_host_store_ns", 100_000) < 1000
    assert 0 < raw.time_ns("raw_load_ns", 100_000) < 1000


@pytest.mark.skipif(not CUDA_STUB.exists(), reason="no CUDA Toolkit stub libcuda")
def test_raw_driver_reports_the_stub_library(raw_library):
    from benchmarks.gpu import RawDriver

    raw = RawDriver(raw_library)
    # The Toolkit's stub resolves every entry point, then fails cuInit with
    # CUDA_ERROR_STUB_LIBRARY (34).
    with pytest.raises(RuntimeError, match=r"cuInit failed: .*\(34\)"):
        raw.open(str(CUDA_STUB), 0)
    with pytest.raises(RuntimeError, match="raw_open"):
        raw.time_ns("raw_stream_query_ns", 0, 10)


def _load_fake_builder():
    spec = importlib.util.spec_from_file_location(
        "fake_driver_build", REPO / "tests" / "fake_driver" / "build.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_fake_driver


def test_gpu_check_script_parses():
    script = REPO / "scripts" / "gpu-check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for needed in ("tests/gpu", "tests/accelerator", "benchmarks.gpu", "build_ext"):
        assert needed in text
    # Graph capture's tests and benchmark rows (issue 25), before the rest.
    assert "tests/accelerator/test_accel_capture.py --timeout" in text
    assert "-m benchmarks.capture 41 --table" in text
    # Preflight before the build; the real driver, not the fake; interop
    # tests after everything that could be fooled by a context they leave
    # current; the hazard probe at the end; 5 minutes in all.
    assert text.index("Python.h") < text.index("build_ext")
    assert "MAX_DRIVER_BACKEND=cuda" in text
    assert "unset MAX_DRIVER_CUDA_LIBRARY" in text
    steps = re.findall(r'^\s*step "([^"]+)" (\d+) ', text, re.M)
    names = [name for name, _ in steps]
    assert names[-2:] == ["interop tests (last)", "probe"], names
    assert sum(int(limit) for _, limit in steps) <= 300, steps
    assert "scripts/gpu_probe.py" in text


def test_gpu_probe_cases_pass_on_the_fake(tmp_path):
    """The probe itself, against the fake driver (CUDA and HIP)."""
    build = _load_fake_builder()
    lib = build(tmp_path)
    for api in ("cuda", "hip"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER")}
        env.update(
            MAX_DRIVER_BACKEND=api,
            **{f"MAX_DRIVER_{api.upper()}_LIBRARY": str(lib)},
            PYTHONPATH=str(REPO),
        )
        r = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "gpu_probe.py")],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert re.search(r"gpu_probe: (\d+) of \1 cases passed", r.stdout), r.stdout


def test_committed_ptx_has_the_kernels():
    ptx = (GPU_TESTS / "spin.ptx").read_text()
    version = re.search(r"^\.version (\d+)\.(\d+)$", ptx, re.M)
    assert version
    # PTX 7.0 (CUDA 11.0) is all the instructions need: a driver JIT-compiles
    # PTX only up to its own ISA version, so a newer header (nvcc writes its
    # own, 9.0 for CUDA 13) would make drivers before CUDA 13 reject it.
    assert (int(version[1]), int(version[2])) <= (7, 0), version[0]
    target = re.search(r"^\.target sm_(\d+)$", ptx, re.M)
    assert target and int(target[1]) <= 75, target
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    assert entries == {"spin_write", "spin_trap"}
    assert "%globaltimer" in ptx
    assert re.search(r"^\s*trap;", ptx, re.M)
    # The launches in gpu_kernels.py pass one u64 per parameter.
    assert len(re.findall(r"\.param \.u64 spin_write_param_\d+", ptx)) == 6
    assert len(re.findall(r"\.param \.u64 spin_trap_param_\d+", ptx)) == 1
    source = (GPU_TESTS / "spin_kernels.cu").read_text()
    for name in entries:
        assert f'extern "C" __global__ void {name}(' in source


@pytest.mark.skipif(PTXAS is None, reason="no ptxas (CUDA Toolkit)")
def test_committed_ptx_assembles_for_hopper(tmp_path):
    subprocess.run(
        [PTXAS, "-arch=sm_90", str(GPU_TESTS / "spin.ptx"), "-o", str(tmp_path / "o")],
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA accelerator is present")
def test_gpu_benchmarks_skip_without_cuda():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no CUDA accelerator" in proc.stdout


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA accelerator is present")
def test_gpu_tests_skip_cleanly_without_cuda():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(GPU_TESTS), "-q", "-rs"]
        + ["-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_env(),
    )
    # 5: no test collected, each module having skipped itself.
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    assert "skipped" in proc.stdout and "needs a real NVIDIA GPU" in proc.stdout
    assert "error" not in proc.stdout.lower(), proc.stdout


# ---- against the test-only fake CUDA driver (tests/fake_driver) -------------

FAKE_BUILD = REPO / "tests" / "fake_driver" / "build.py"


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory) -> dict[str, str]:
    """Environment of a child that runs max.driver on the fake CUDA driver."""
    if not FAKE_BUILD.exists() or shutil.which("cc") is None:
        pytest.skip("the fake driver (tests/fake_driver/build.py) is not buildable")
    spec = importlib.util.spec_from_file_location("fake_driver_build", FAKE_BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, "build_fake_driver", None)
    if build is None:
        pytest.skip("tests/fake_driver/build.py has no build_fake_driver")
    library = Path(build(tmp_path_factory.mktemp("fake")))
    env = {k: v for k, v in _env().items() if not k.startswith("FAKE_GPU_")}
    env.update(MAX_DRIVER_BACKEND="cuda", MAX_DRIVER_CUDA_LIBRARY=str(library))
    return env


def test_gpu_benchmarks_run_end_to_end_on_the_fake_driver(fake_cuda, tmp_path):
    # Not a measurement of anything real: it runs raw_driver.c's driver
    # paths (open, contexts, events, streams) and the whole report.
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=fake_cuda,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "overhead over raw driver" in proc.stdout
    report = json.loads((tmp_path / "gpu-latest.json").read_text())
    names = {r["name"] for r in report["results"]}
    for op in (
        "record_event(ev)",
        "wait_for(queue)",
        "queue.synchronize() idle",
        "4 KiB copy pinned -> device (inplace_copy_from)",
    ):
        assert f"{op}: overhead over raw driver, ns" in names
    # Every copy ran against its raw twin (quick: 8 MiB copies); the fake
    # has two devices, so the peer copy too.
    copies = {r["name"]: r for r in report["results"] if "MiB: bandwidth" in r["name"]}
    assert set(copies) == {
        f"{c}, 8 MiB: bandwidth / raw"
        for c in (
            "pinned host -> device",
            "device -> pinned host",
            "device -> device",
            "pageable host -> device (staged, vs raw pinned)",
            "device -> pageable host (staged, vs raw pinned)",
            "device -> peer device",
        )
    }
    for r in copies.values():
        assert r["higher_is_better"] and r["ratio"] > 0, r
    if report["machine"]["torch"] == "not measured":
        assert "torch.Tensor.to(non_blocking=True): not compared" in proc.stdout
    assert (tmp_path / "gpu-latest.txt").is_file()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "gpu-copies.png").is_file()


def test_gpu_tests_skip_on_the_fake_driver(fake_cuda):
    # The fake runs no kernels: the real-GPU tests must skip, not fail.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(GPU_TESTS), "-q", "-rs"]
        + ["-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=fake_cuda,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    assert "needs a real CUDA driver that launches kernels" in proc.stdout
