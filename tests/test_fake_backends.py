"""The CUDA and HIP backends against the fake driver (tests/fake_driver).

This is how CI runs the accelerator suite (tests/accelerator) without a GPU:
the fake driver is built into a session temporary directory and the suite
runs in a child interpreter once per API, with

    MAX_DRIVER_BACKEND=<api>
    MAX_DRIVER_<API>_LIBRARY=<fake>
    MAX_DRIVER_FAKE_LIBRARY=<fake>   (enables tests/accelerator's fake checks)

Then small ``python -c`` children check what needs a differently built fake:
a driver without the host-function launch entry point (stream-callback
fallback), without any host-function entry point, without stream memory
operations, with no device, and backend selection in ``auto`` mode.
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

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_DIR = REPO_ROOT / "tests" / "fake_driver"
ACCEL_DIR = REPO_ROOT / "tests" / "accelerator"
APIS = ("cuda", "hip")
# The accelerator suite has well over this many tests that pass on the fake
# (two devices): a lower count means tests were silently skipped.
MIN_PASSED = 200
SUITE_TIMEOUT = 540

pytestmark = pytest.mark.skipif(
    not (FAKE_DIR / "build.py").exists(),
    reason="fake driver sources missing (tests/fake_driver/build.py)",
)

HOST_FN = {"cuda": "cuLaunchHostFunc", "hip": "hipLaunchHostFunc"}
CALLBACK = {"cuda": "cuStreamAddCallback", "hip": "hipStreamAddCallback"}
WAIT_VALUE = {"cuda": "cuStreamWaitValue64", "hip": "hipStreamWaitValue64"}


def _load_builder():
    spec = importlib.util.spec_from_file_location(
        "fake_driver_build", FAKE_DIR / "build.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_fake_driver


@pytest.fixture(scope="session")
def fake_builds(tmp_path_factory):
    """``fake_builds(name, omit=()) -> Path``: each variant built once."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the fake driver")
    build = _load_builder()
    cache = {}

    def get(name, omit=()):
        if name not in cache:
            out = tmp_path_factory.mktemp(f"fake-{name}")
            path = Path(build(out, omit=tuple(omit)))
            assert path.exists(), path
            cache[name] = path
        return cache[name]

    return get


@pytest.fixture(scope="session")
def fake_lib(fake_builds):
    return fake_builds("default")


def fake_env(api, lib, **extra):
    """Environment of a child running ``api`` on the fake at ``lib``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "FAKE_GPU_"))
    }
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONWARNINGS", None)
    if api is not None:
        env["MAX_DRIVER_BACKEND"] = api
        env[f"MAX_DRIVER_{api.upper()}_LIBRARY"] = str(lib)
        env["MAX_DRIVER_FAKE_LIBRARY"] = str(lib)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_child(args, env, timeout=120):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )


def run_code(code, env, timeout=120):
    return run_child(["-c", code], env, timeout=timeout)


def _output(r):
    return f"--- rc={r.returncode}\n--- stdout:\n{r.stdout}\n--- stderr:\n{r.stderr}"


def summary_counts(text):
    """Counts from pytest's final summary line ("3 failed, 250 passed ...")."""
    counts = {}
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    if lines:
        for n, what in re.findall(r"(\d+) (\w+)", lines[-1]):
            counts[what.rstrip("s") if what.endswith("errors") else what] = int(n)
    return counts


def run_suite(paths, env, timeout=SUITE_TIMEOUT):
    args = [
        "-m",
        "pytest",
        *map(str, paths),
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfEs",
        "--timeout=120",
    ]
    r = run_child(args, env, timeout=timeout)
    return r, summary_counts(r.stdout)


# --------------------------------------------------------------------------
# The full accelerator suite, once per API


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
@pytest.mark.parametrize("api", APIS)
def test_accelerator_suite_on_fake(fake_lib, api):
    r, counts = run_suite([ACCEL_DIR], fake_env(api, fake_lib))
    assert r.returncode == 0, _output(r)
    assert counts.get("failed", 0) == 0, _output(r)
    assert counts.get("error", 0) == 0, _output(r)
    assert counts.get("passed", 0) >= MIN_PASSED, (counts, _output(r))
    print(f"{api}: {counts}")


# --------------------------------------------------------------------------
# Older drivers: optional entry points missing


HOST_FN_CHECK = r"""
import ctypes, json, os, threading
from max import driver
from max.driver import Accelerator, CPU, CompletionFlag, DeviceQueue
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_calls.argtypes = [ctypes.c_char_p]
names = json.loads(os.environ["NAMES"])
before = {n: lib.fake_gpu_calls(n.encode()) for n in names}
out = {}
acc = Accelerator()
q = DeviceQueue(acc)
ran, idents = [], []
for i in range(20):
    getattr(q, "__unsafe_enqueue_py_host_func")(
        lambda i=i: (ran.append(i), idents.append(threading.get_ident())))
getattr(acc, "__unsafe_enqueue_py_host_func")(lambda: ran.append("dev"))
f = CompletionFlag(acc)
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
getattr(q, ENQ_ASYNC)(lambda: ran.append("async"), f, 3, CPU())
q.wait_for_host_value(f, 3)
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append("after-async"))
q.synchronize(timeout=20)
acc.synchronize(timeout=20)
out["ran"] = ran
out["other_thread"] = bool(idents) and threading.get_ident() not in idents
out["calls"] = {n: lib.fake_gpu_calls(n.encode()) - before[n] for n in names}
print("JSON" + json.dumps(out))
"""


def _json(r):
    line = next((x for x in r.stdout.splitlines() if x.startswith("JSON")), None)
    assert line is not None, _output(r)
    return json.loads(line[4:])


@pytest.mark.parametrize("api", APIS)
def test_host_functions_fall_back_to_stream_callbacks(fake_builds, api):
    lib = fake_builds(
        "no-launch-host-func", omit=["cuLaunchHostFunc", "hipLaunchHostFunc"]
    )
    env = fake_env(api, lib, NAMES=json.dumps([HOST_FN[api], CALLBACK[api]]))
    r = run_code(HOST_FN_CHECK, env)
    assert r.returncode == 0, _output(r)
    out = _json(r)
    # In order on the queue; "dev" ran on the default queue, concurrently.
    assert [x for x in out["ran"] if isinstance(x, int)] == list(range(20)), out
    assert sorted(x for x in out["ran"] if isinstance(x, str)) == sorted(
        ["dev", "async", "after-async"]
    ), out
    assert out["ran"].index("async") < out["ran"].index("after-async"), out
    assert out["other_thread"], out
    assert out["calls"][CALLBACK[api]] >= 21, out  # served by the callback path
    assert out["calls"][HOST_FN[api]] == 0, out


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
@pytest.mark.parametrize("api", APIS)
def test_host_function_suite_on_callback_fallback(fake_builds, api):
    """The host-function part of the suite, unchanged, on the fallback."""
    lib = fake_builds(
        "no-launch-host-func", omit=["cuLaunchHostFunc", "hipLaunchHostFunc"]
    )
    r, counts = run_suite(
        [ACCEL_DIR / "test_accel_hostfn.py", ACCEL_DIR / "test_accel_waits.py"],
        fake_env(api, lib),
    )
    assert r.returncode == 0, _output(r)
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, _output(r)
    assert counts.get("passed", 0) >= 40, (counts, _output(r))


NO_HOST_FN_CHECK = r"""
import json, os
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
from max.driver import Accelerator, CPU, CompletionFlag, DeviceEvent, DeviceQueue
out = {}
acc = Accelerator()
q = DeviceQueue(acc)
errors = {}
f = CompletionFlag(acc)
for name, call in [
    ("queue", lambda: getattr(q, "__unsafe_enqueue_py_host_func")(lambda: None)),
    ("device", lambda: getattr(acc, "__unsafe_enqueue_py_host_func")(lambda: None)),
    ("async", lambda: getattr(q, ENQ_ASYNC)(lambda: None, f, 1, CPU())),
]:
    try:
        call()
        errors[name] = None
    except Exception as e:
        errors[name] = [type(e).__name__, str(e)]
out["errors"] = errors
out["flag_after"] = f.load()
# Everything else works.
ev = DeviceEvent(acc, enable_timing=True)
q.record_event(ev)
q2 = DeviceQueue(acc)
q2.wait_for(q)
q2.wait_for(ev)
q2.wait_for(device=acc)
g = CompletionFlag(acc)
q.wait_for_host_value(g, 1)
e2 = q.record_event()
out["gated_ready"] = e2.is_ready()
g.signal(1)
q.synchronize(timeout=20)
q2.synchronize(timeout=20)
acc.synchronize(timeout=20)
e3 = DeviceEvent(acc, enable_timing=True)
q.record_event(e3)
e3.synchronize(timeout=20)
out["elapsed"] = ev.elapsed_time(e3)
out["ready"] = e2.is_ready()
out["stats"] = sorted(acc.stats)
print("JSON" + json.dumps(out))
"""


@pytest.mark.parametrize("api", APIS)
def test_no_host_function_entry_point(fake_builds, api):
    lib = fake_builds(
        "no-host-func",
        omit=[
            "cuLaunchHostFunc",
            "hipLaunchHostFunc",
            "cuStreamAddCallback",
            "hipStreamAddCallback",
        ],
    )
    r = run_code(NO_HOST_FN_CHECK, fake_env(api, lib))
    assert r.returncode == 0, _output(r)
    out = _json(r)
    for name, err in out["errors"].items():
        assert err is not None, (name, out)
        assert err[0] == "RuntimeError", (name, err)
        assert HOST_FN[api] in err[1] or CALLBACK[api] in err[1], (name, err)
    assert out["flag_after"] == 0  # the failed kickoff changed nothing
    assert out["gated_ready"] is False
    assert out["ready"] is True
    assert out["elapsed"] >= 0.0
    assert "graph_mem_used" in out["stats"]


NO_WAIT_VALUE_CHECK = r"""
import json
from max.driver import Accelerator, CPU, CompletionFlag, DeviceQueue
out = {}
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
f.signal(4)
try:
    q.wait_for_host_value(f, 1)
    out["error"] = None
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
out["flag"] = f.load()
ran = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
q.synchronize(timeout=20)  # not gated: the failed call changed nothing
out["ran"] = ran
# Flags themselves and async host functions still work.
g = CompletionFlag(acc)
getattr(q, "__unsafe_enqueue_async_py_host_func")(lambda: ran.append(2), g, 5, CPU())
q.synchronize(timeout=20)
CPU().synchronize(timeout=20)
import time
t0 = time.monotonic()
while g.load() != 5 and time.monotonic() - t0 < 20:
    time.sleep(0.01)
out["async_flag"] = g.load()
# Host functions run on the driver's callback thread here, where every call
# into a GPU device is refused instead of failing in the driver.
inside = []
def fn():
    for name, call in [
        ("record", q.record_event),
        ("queue", lambda: DeviceQueue(acc)),
        ("flag", lambda: CompletionFlag(acc)),
        ("sync", lambda: q.synchronize(timeout=1)),
    ]:
        try:
            call()
            inside.append([name, None])
        except Exception as e:
            inside.append([name, type(e).__name__, str(e)])
    inside.append(["plain python", sum(range(10))])
getattr(q, "__unsafe_enqueue_py_host_func")(fn)
q.synchronize(timeout=20)
out["inside"] = inside
out["caps"] = acc._capabilities()
# A capture has no gate either: host functions and waits are refused, and
# the capture goes on (async host functions need no gate).
captured = {}
q.begin_capture()
for name, call in [
    ("host fn", lambda: getattr(q, "__unsafe_enqueue_py_host_func")(len)),
    ("wait", lambda: q.wait_for_host_value(f, 1)),
    ("async", lambda: getattr(q, "__unsafe_enqueue_async_py_host_func")(
        lambda: ran.append(3), g, 6, CPU())),
]:
    try:
        call()
        captured[name] = None
    except Exception as e:
        captured[name] = [type(e).__name__, str(e)]
graph = q.end_capture()
graph.launch()
q.synchronize(timeout=20)
t0 = time.monotonic()
while g.load() != 6 and time.monotonic() - t0 < 20:
    time.sleep(0.01)
out["captured"] = captured
out["graph_nodes"] = graph.num_nodes
out["async_in_graph"] = g.load()
print("JSON" + json.dumps(out))
"""


@pytest.mark.parametrize("api", APIS)
def test_no_stream_wait_value(fake_builds, api):
    lib = fake_builds(
        "no-wait-value", omit=["cuStreamWaitValue64", "hipStreamWaitValue64"]
    )
    r = run_code(NO_WAIT_VALUE_CHECK, fake_env(api, lib))
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["error"] is not None, out
    assert out["error"][0] == "RuntimeError", out
    assert WAIT_VALUE[api] in out["error"][1], out
    assert out["flag"] == 4
    assert out["ran"][:1] == [1]
    assert out["async_flag"] == 5
    assert out["caps"]["stream_memory_operations"] is False
    assert out["caps"]["python_host_functions_run_on"] == "driver callback thread"
    assert out["inside"][-1] == ["plain python", 45], out
    for entry in out["inside"][:-1]:
        assert entry[1] == "RuntimeError", entry
        assert "callback thread" in entry[2], entry
    for name in ("host fn", "wait"):
        assert out["captured"][name][0] == "RuntimeError", out["captured"]
        assert WAIT_VALUE[api] in out["captured"][name][1], out["captured"]
    assert out["captured"]["async"] is None, out["captured"]
    assert out["graph_nodes"] == 1 and out["async_in_graph"] == 6, out
    assert out["caps"]["graph_capture"] == "available"


NO_PEER_ENTRY_POINT_CHECK = r"""
import ctypes, json, os
import numpy as np
from max import driver
from max.driver import Accelerator, Buffer
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_pool_release_threshold.restype = ctypes.c_ulonglong
out = {}
try:
    driver.enable_all_peer_access()
    out["error"] = None
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
out["peer"] = [lib.fake_gpu_peer_access(0, 1), lib.fake_gpu_peer_access(1, 0)]
out["pool"] = [lib.fake_gpu_pool_access(0, 1), lib.fake_gpu_pool_access(1, 0)]
out["threshold"] = [str(lib.fake_gpu_pool_release_threshold(i)) for i in (0, 1)]
# The devices work all the same, peer copies included.
ref = np.arange(1000, dtype=np.int32)
b = Buffer.from_numpy(ref).to(Accelerator(0)).to(Accelerator(1))
out["copied"] = bool(np.array_equal(b.to_numpy(), ref))
print("JSON" + json.dumps(out))
"""
ENABLE_PEER = {"cuda": "cuCtxEnablePeerAccess", "hip": "hipDeviceEnablePeerAccess"}
POOL_ACCESS = {"cuda": "cuMemPoolSetAccess", "hip": "hipMemPoolSetAccess"}
POOL_ATTRIBUTE = {"cuda": "cuMemPoolSetAttribute", "hip": "hipMemPoolSetAttribute"}


@pytest.mark.parametrize("api", APIS)
def test_no_peer_access_entry_point(fake_builds, api):
    """A driver without the peer-access entry point: enable_all_peer_access()
    raises RuntimeError naming it, having changed nothing."""
    lib = fake_builds("no-peer-access", omit=list(ENABLE_PEER.values()))
    r = run_code(NO_PEER_ENTRY_POINT_CHECK, fake_env(api, lib))
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["error"] is not None and out["error"][0] == "RuntimeError", out
    assert ENABLE_PEER[api] in out["error"][1], out
    assert out["pool"] == [0, 0], out
    assert out["copied"], out


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("pools", [True, False], ids=["pools", "no-pools"])
def test_no_memory_pool_access_entry_points(fake_builds, api, pools):
    """A driver with stream-ordered allocation but without the pools' access
    and attribute entry points: devices open and work with the driver's
    default release threshold; enable_all_peer_access() raises RuntimeError
    naming the missing entry point before enabling anything, since buffers
    of the peer's pool would stay out of reach.  Without pools (nothing
    needs the grant) it works."""
    omit = [*POOL_ACCESS.values(), *POOL_ATTRIBUTE.values()]
    lib = fake_builds("no-pool-access", omit=omit)
    env = fake_env(api, lib, FAKE_GPU_MEMORY_POOLS=None if pools else 0)
    r = run_code(NO_PEER_ENTRY_POINT_CHECK, env)
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["threshold"] == ["0", "0"], out
    assert out["copied"], out
    if pools:
        assert out["error"] is not None and out["error"][0] == "RuntimeError", out
        assert POOL_ACCESS[api] in out["error"][1], out
        assert out["peer"] == [0, 0] and out["pool"] == [0, 0], out
    else:
        assert out["error"] is None, out
        assert out["peer"] == [1, 1] and out["pool"] == [0, 0], out


# --------------------------------------------------------------------------
# Backend selection with the fake


IMPORT_CHECK = r"""
import json
try:
    from max import driver
except ImportError as e:
    print("JSON" + json.dumps({"import_error": [type(e).__name__, str(e)]}))
else:
    acc = None
    try:
        acc = driver.Accelerator().api
    except Exception as e:
        acc = [type(e).__name__, str(e)]
    print("JSON" + json.dumps({
        "import_error": None,
        "selection": driver.backend_selection(),
        "count": driver.accelerator_count(),
        "api": driver.accelerator_api(),
        "accelerator": acc,
    }))
"""


@pytest.mark.parametrize("api", APIS)
def test_forced_backend_without_devices_import_error(fake_lib, api):
    r = run_code(IMPORT_CHECK, fake_env(api, fake_lib, FAKE_GPU_DEVICES=0))
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["import_error"] is not None, out
    name, msg = out["import_error"]
    assert name == "ImportError", out
    assert api in msg.lower(), msg
    assert str(fake_lib) in msg, msg


@pytest.mark.parametrize("api", APIS)
def test_auto_mode_picks_the_fake(fake_lib, api):
    other = "hip" if api == "cuda" else "cuda"
    env = fake_env(None, fake_lib)
    env[f"MAX_DRIVER_{api.upper()}_LIBRARY"] = str(fake_lib)
    if api == "hip":  # CUDA comes first: make it fail so HIP is chosen
        env["MAX_DRIVER_CUDA_LIBRARY"] = "/nonexistent/libcuda.so.1"
    r = run_code(IMPORT_CHECK, env)
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["import_error"] is None, out
    assert out["count"] == 2, out
    assert out["api"] == api, out
    assert out["accelerator"] == api, out
    sel = {e["api"]: e for e in out["selection"]}
    assert sel[api]["chosen"] is True, out
    assert sel[api]["loaded"] is True, out
    assert sel[api]["library"] == str(fake_lib), out
    assert sel[api]["device_count"] == 2, out
    assert sel[api]["error"] is None, out
    if api == "hip":
        assert sel[other]["chosen"] is False
        assert sel[other]["library"] == "/nonexistent/libcuda.so.1"
        assert isinstance(sel[other]["error"], str) and sel[other]["error"]
    assert sum(e["chosen"] for e in out["selection"]) == 1


def test_auto_mode_without_devices_falls_back_to_cpu(fake_lib):
    env = fake_env(None, fake_lib, FAKE_GPU_DEVICES=0)
    env["MAX_DRIVER_CUDA_LIBRARY"] = str(fake_lib)
    env["MAX_DRIVER_HIP_LIBRARY"] = str(fake_lib)
    r = run_code(IMPORT_CHECK, env)
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["import_error"] is None, out
    assert out["count"] == 0
    assert out["api"] == "cpu"
    assert out["accelerator"][0] == "ValueError"
    for e in out["selection"]:
        assert e["chosen"] is False
        assert e["library"] == str(fake_lib)
        assert e["device_count"] == 0


def test_cli_lists_fake_devices(fake_lib):
    r = run_child(["-m", "max.driver"], fake_env("cuda", fake_lib), timeout=120)
    assert r.returncode == 0, _output(r)
    assert str(fake_lib) in r.stdout, _output(r)
    assert "Fake GPU 0" in r.stdout and "Fake GPU 1" in r.stdout, _output(r)
    assert "sm_90" in r.stdout, _output(r)
    # The probes of docs/gpu-drivers.md, for every GPU.
    assert r.stdout.count("stream_memory_operations: yes") == 2, _output(r)
    assert r.stdout.count("host_function_entry_point: cuLaunchHostFunc") == 2
    assert r.stdout.count("python_host_functions_run_on: worker threads") == 2
    assert "driver_version: 13.0" in r.stdout, _output(r)


DRIVER_VERSION_CHECK = r"""
import ctypes, json, os
from max.driver import Accelerator, CompletionFlag, DeviceEvent, DeviceQueue
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_live.argtypes = [ctypes.c_char_p]
acc = Accelerator()
q = DeviceQueue(acc)
a, b = DeviceEvent(acc, enable_timing=True), DeviceEvent(acc, enable_timing=True)
q.record_event(a)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 0)
q.record_event(b)
b.synchronize(timeout=20)
print("JSON" + json.dumps({
    "caps": acc._capabilities(),
    "elapsed": a.elapsed_time(b),
    "too_new": lib.fake_gpu_live(b"proc_too_new"),
}))
"""


@pytest.mark.parametrize("version", [11040, 12000, 12080, 13000])
def test_entry_points_asked_at_no_newer_version_than_the_driver(fake_lib, version):
    """cuGetProcAddress refuses a CUDA version newer than the driver's
    (CUDA_ERROR_INVALID_VALUE): the backend asks at the driver's version
    when it is older than the ABI we declare, and everything still works
    (the stream-memory attribute of drivers before CUDA 12 included)."""
    env = fake_env("cuda", fake_lib, FAKE_GPU_DRIVER_VERSION=version)
    r = run_code(DRIVER_VERSION_CHECK, env)
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["too_new"] == 0, out
    assert out["caps"]["driver_version"] == version
    assert out["caps"]["stream_memory_operations"] is True
    assert out["elapsed"] >= 0.0


# --------------------------------------------------------------------------
# Stream capture: a driver without it


NO_CAPTURE_CHECK = r"""
import json
from max import driver
from max.driver import Accelerator, DeviceQueue
out = {}
acc = Accelerator()
q = DeviceQueue(acc)
try:
    q.begin_capture()
    out["error"] = None
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
out["capturing"] = q.is_capturing
out["capability"] = acc._capabilities()["graph_capture"]
ran = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
q.synchronize(timeout=20)  # the failed call changed nothing
out["ran"] = ran
print("JSON" + json.dumps(out))
"""
BEGIN_CAPTURE = {"cuda": "cuStreamBeginCapture", "hip": "hipStreamBeginCapture"}


@pytest.mark.parametrize("api", APIS)
def test_no_stream_capture_entry_point(fake_builds, api):
    """begin_capture() raises RuntimeError naming the missing entry point,
    and python -m max.driver's capability says so."""
    lib = fake_builds("no-capture", omit=list(BEGIN_CAPTURE.values()))
    r = run_code(NO_CAPTURE_CHECK, fake_env(api, lib))
    assert r.returncode == 0, _output(r)
    out = _json(r)
    assert out["error"] is not None and out["error"][0] == "RuntimeError", out
    assert BEGIN_CAPTURE[api] in out["error"][1], out
    assert out["capturing"] is False and out["ran"] == [1], out
    assert out["capability"] == f"unavailable: the driver lacks {BEGIN_CAPTURE[api]}"
