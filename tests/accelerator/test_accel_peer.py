"""enable_all_peer_access() and the devices' default memory pools on the
fake driver (both APIs: tests/test_fake_backends.py runs this folder once
per API).

Peer access and pool grants are process-wide driver state that nothing
turns off, so every check runs in a child interpreter of its own, which
also lets it choose the fake's configuration (FAKE_GPU_PEER,
FAKE_GPU_MEMORY_POOLS, FAKE_GPU_DEVICES are read when the fake loads).
The fake's control API says what the backend did: fake_gpu_peer_access
(device, peer), fake_gpu_pool_access(owner, device) and
fake_gpu_pool_release_threshold(device).
"""

from __future__ import annotations

import json

import pytest
from accel_support import FAKE_LIBRARY

pytestmark = pytest.mark.skipif(
    FAKE_LIBRARY is None,
    reason="not running on the fake driver (MAX_DRIVER_FAKE_LIBRARY unset)",
)

UINT64_MAX = 2**64 - 1
ENABLE = {"cuda": "cuCtxEnablePeerAccess", "hip": "hipDeviceEnablePeerAccess"}
SET_ACCESS = {"cuda": "cuMemPoolSetAccess", "hip": "hipMemPoolSetAccess"}
GET_POOL = {"cuda": "cuDeviceGetDefaultMemPool", "hip": "hipDeviceGetDefaultMemPool"}
SET_ATTRIBUTE = {"cuda": "cuMemPoolSetAttribute", "hip": "hipMemPoolSetAttribute"}
OUT_OF_MEMORY = {"cuda": "CUDA_ERROR_OUT_OF_MEMORY", "hip": "hipErrorOutOfMemory"}

# What the child reports: the fake's peer and pool tables before and after
# two calls, what can_access says, and how often each entry point ran.
CHILD = r"""
import ctypes, json, os, sys
from max import driver
from max.driver import Accelerator
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_calls.argtypes = [ctypes.c_char_p]
lib.fake_gpu_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
lib.fake_gpu_pool_release_threshold.restype = ctypes.c_ulonglong
names = json.loads(sys.argv[1])
fail = json.loads(sys.argv[2])
virtual = len(sys.argv) > 3
n = driver.accelerator_count()
pairs = [(i, j) for i in range(n) for j in range(n)]

def peer():
    return [lib.fake_gpu_peer_access(i, j) for i, j in pairs]

def pool():  # [i, j]: device i may use memory of j's pool
    return [lib.fake_gpu_pool_access(j, i) for i, j in pairs]

def calls():
    return {k: lib.fake_gpu_calls(k.encode()) for k in names}

out = {"n": n, "before": peer(), "pool_before": pool()}
accs = [Accelerator(i) for i in range(n)]
out["can"] = [accs[i].can_access(accs[j]) for i, j in pairs]
out["threshold"] = [str(lib.fake_gpu_pool_release_threshold(i)) for i in range(n)]
out["pools"] = [a._capabilities()["memory_pools"] for a in accs]
out["open_calls"] = calls()
if virtual:
    driver.set_virtual_device_api("cuda")
    driver.set_virtual_device_count(4)
    out["virtual_count"] = driver.accelerator_count()
for name, code in fail:
    assert lib.fake_gpu_fail(name.encode(), 1, code) == 0
results = []
for _ in range(2):
    before = calls()
    try:
        out_value = driver.enable_all_peer_access()
        results.append({"returned": repr(out_value)})
    except Exception as e:
        results.append({"error": [type(e).__name__, str(e)]})
    results[-1]["calls"] = {k: v - before[k] for k, v in calls().items()}
    results[-1]["peer"] = peer()
    results[-1]["pool"] = pool()
out["results"] = results
print("JSON" + json.dumps(out), flush=True)
"""


def run_child(run_acc_py, api, *, fail=(), virtual=False, **env):
    names = [ENABLE[api], SET_ACCESS[api], GET_POOL[api], SET_ATTRIBUTE[api]]
    argv = [json.dumps(names), json.dumps([list(f) for f in fail])]
    if virtual:
        argv.append("virtual")
    r = run_acc_py(CHILD, *argv, timeout=60, **env)
    line = next((x for x in r.stdout.splitlines() if x.startswith("JSON")), None)
    assert r.returncode == 0 and line is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(line[4:])


def off_diagonal(out):
    n = out["n"]
    return [i != j for i in range(n) for j in range(n)]


CONFIGS = [
    {},
    {"FAKE_GPU_MEMORY_POOLS": "0"},
    {"FAKE_GPU_PEER": "0"},
    {"FAKE_GPU_PEER": "0", "FAKE_GPU_MEMORY_POOLS": "0"},
    {"FAKE_GPU_DEVICES": "3"},
    {"FAKE_GPU_DEVICES": "1"},
]
CONFIG_IDS = [
    "default",
    "no-pools",
    "no-peer",
    "no-peer-no-pools",
    "3-devices",
    "1-device",
]


@pytest.mark.parametrize("env", CONFIGS, ids=CONFIG_IDS)
def test_enabled_pairs_match_can_access(run_acc_py, api, env):
    """Every ordered pair can_access allows is enabled, in both directions,
    and no other; where the peer allocates from a memory pool, the pool
    grants the device access too.  A second call succeeds (the driver's
    "already enabled" is not an error) and changes nothing."""
    out = run_child(run_acc_py, api, **env)
    pooled = env.get("FAKE_GPU_MEMORY_POOLS") != "0"
    peer_ok = env.get("FAKE_GPU_PEER") != "0"
    n = out["n"]
    assert n == int(env.get("FAKE_GPU_DEVICES", "2"))
    assert out["pools"] == [pooled] * n
    assert out["can"] == [d and peer_ok for d in off_diagonal(out)]
    assert out["before"] == [0] * (n * n)  # nothing enabled at open
    own_pool = [int(not d) for d in off_diagonal(out)]
    assert out["pool_before"] == own_pool
    first, second = out["results"]
    for res in (first, second):
        assert res == {**res, "returned": "None"}, res
        assert res["peer"] == [int(c) for c in out["can"]], res
        granted = [int(c or own) for c, own in zip(out["can"], own_pool, strict=True)]
        assert res["pool"] == (granted if pooled else own_pool), res
    # One driver call per enabled pair (ordered), each time: the second
    # call hears "already enabled" from the driver for every pair.
    enabled = sum(out["can"])
    for res in (first, second):
        assert res["calls"][ENABLE[api]] == enabled, res
        assert res["calls"][SET_ACCESS[api]] == (enabled if pooled else 0), res
        if not pooled:
            assert res["calls"][GET_POOL[api]] == 0, res


@pytest.mark.parametrize(
    "env", [{}, {"FAKE_GPU_MEMORY_POOLS": "0"}], ids=["pools", "no-pools"]
)
def test_release_threshold_set_when_a_device_opens(run_acc_py, api, env):
    """A device with memory pools keeps freed memory in its default pool
    (release threshold UINT64_MAX, set when the device opens); without
    pools no pool entry point is called at all."""
    out = run_child(run_acc_py, api, **env)
    n = out["n"]
    opened = out["open_calls"]
    if env:
        assert out["threshold"] == ["0"] * n
        assert opened[GET_POOL[api]] == opened[SET_ATTRIBUTE[api]] == 0, opened
        for res in out["results"]:
            assert res["calls"][GET_POOL[api]] == 0, res
            assert res["calls"][SET_ACCESS[api]] == 0, res
    else:
        assert out["threshold"] == [str(UINT64_MAX)] * n
        assert opened[GET_POOL[api]] == opened[SET_ATTRIBUTE[api]] == n, opened


def test_release_threshold_failure_does_not_fail_the_open(run_acc_py, api):
    """The threshold is a hint: when the driver refuses it, the device opens
    and works all the same, with the driver's default threshold."""
    out = run_child(
        run_acc_py, api, FAKE_GPU_FAIL=f"{SET_ATTRIBUTE[api]}:1:2,{GET_POOL[api]}:2:2"
    )
    # Device 0's attribute call failed, device 1's pool lookup failed.
    assert out["threshold"] == ["0", "0"]
    assert out["results"][0]["peer"] == [0, 1, 1, 0]


@pytest.mark.parametrize("which", ["enable", "grant"])
def test_driver_failure_is_a_runtime_error_naming_it(run_acc_py, api, which):
    """A driver failure raises RuntimeError (MAX's documented type for this
    call) with the driver's error name and code, and names the pair; a
    later call completes the job."""
    name = ENABLE[api] if which == "enable" else SET_ACCESS[api]
    out = run_child(run_acc_py, api, fail=[(name, 2)])
    first, second = out["results"]
    etype, msg = first["error"]
    assert etype == "RuntimeError", first
    assert OUT_OF_MEMORY[api] in msg and "(2)" in msg and name in msg, msg
    assert f"from {api} accelerator 0 to accelerator 1" in msg, msg
    # The failed pair changed nothing (the grant comes after the enable).
    assert first["peer"] == ([0, 0, 0, 0] if which == "enable" else [0, 1, 0, 0])
    assert first["pool"] == [1, 0, 0, 1], first
    assert second == {**second, "returned": "None"}, second
    assert second["peer"] == [0, 1, 1, 0] and second["pool"] == [1, 1, 1, 1]


def test_virtual_device_mode_enables_the_real_accelerators(run_acc_py, api):
    """Virtual devices replace Accelerator(i), not the hardware: the real
    accelerators (which devices opened before the mode keep driving) get
    peer access; virtual ones never can_access each other."""
    out = run_child(run_acc_py, api, virtual=True)
    assert out["virtual_count"] == 4
    assert out["results"][0] == {**out["results"][0], "returned": "None"}
    assert out["results"][0]["peer"] == [0, 1, 1, 0]
