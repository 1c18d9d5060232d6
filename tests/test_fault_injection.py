"""Fault injection through the fake driver (tests/fake_driver).

For every driver entry point the CUDA and HIP backends declare (parsed from
the X-macros of csrc/backends/cuda_abi.h and hip_abi.h, so a new entry point is
covered without editing this file), a child interpreter arms
``fake_gpu_fail(name, nth, code)`` and runs a scenario that exercises every
public operation.  Every failure must be a clean Python exception of a SPEC
§8 type whose message names the driver error (name and code); the process
must neither crash nor hang; afterwards, once everything is dropped and
drained, no driver object (stream, event, pinned allocation) may be left
behind, no CUDA context left pushed, and no driver thread left over.

Entry points used only while importing (cuInit, cuDeviceGetCount, ...) are
failed through the ``FAKE_GPU_FAIL`` environment variable in a fresh import:
a forced backend raises ``ImportError`` naming the error, ``auto`` falls back
to the CPU and records the reason in ``backend_selection()``.

Sticky asynchronous errors (``fake_gpu_async_error``) must surface as a
``ValueError`` naming the error from the wait that observes them.

The per-API figures (faults armed, fired, survived) are printed; run with
``-s`` to see them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BACKENDS = REPO_ROOT / "csrc" / "backends"
FAKE_DIR = REPO_ROOT / "tests" / "fake_driver"
APIS = ("cuda", "hip")

pytestmark = pytest.mark.skipif(
    not (FAKE_DIR / "build.py").exists(),
    reason="fake driver sources missing (tests/fake_driver/build.py)",
)

ERROR_NAMES = {
    "cuda": {
        1: "CUDA_ERROR_INVALID_VALUE",
        2: "CUDA_ERROR_OUT_OF_MEMORY",
        400: "CUDA_ERROR_INVALID_HANDLE",
        700: "CUDA_ERROR_ILLEGAL_ADDRESS",
        719: "CUDA_ERROR_LAUNCH_FAILED",
    },
    "hip": {
        1: "hipErrorInvalidValue",
        2: "hipErrorOutOfMemory",
        400: "hipErrorInvalidHandle",
        700: "hipErrorIllegalAddress",
        719: "hipErrorLaunchFailure",
    },
}
# Codes injected into every entry point, and the calls they hit.
RUNTIME_CODES = (2, 700)
RUNTIME_NTHS = (1, 2)
IMPORT_CODE = 2
# A fresh driver thread per stream is allowed to linger this long / this much.
THREAD_SLACK = 4


# --------------------------------------------------------------------------
# Entry points from the X-macros


def _x_macros(text):
    """{macro name: body} of every ``#define NAME(X) ...`` in a header, with
    continuation lines joined."""
    logical = re.sub(r"\\\n", " ", text)
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^[ \t]*#define\s+(\w+)\(X\)(.*)$", logical, re.M)
    }


_ENTRY_OR_MACRO = re.compile(
    r"\bX\(\s*(\w+)\s*,\s*(?:\d+\s*,\s*)?(REQUIRED|OPTIONAL)\b|\b(\w+)\(X\)"
)


def _expand(macros, name, seen=()):
    assert name in macros, f"{name} not found"
    assert name not in seen, f"recursive X-macro {name}"
    out = []
    for m in _ENTRY_OR_MACRO.finditer(macros[name]):
        if m.group(1):
            out.append((m.group(1), m.group(2)))
        else:
            out += _expand(macros, m.group(3), seen + (name,))
    return out


def entry_points(api):
    """[(name, kind)] in declaration order, from the backend's X-macro (which
    may be split over several macros, e.g. per driver version)."""
    header, macro = {
        "cuda": ("cuda_abi.h", "CUDA_ENTRY_POINTS"),
        "hip": ("hip_abi.h", "HIP_ENTRY_POINTS"),
    }[api]
    return _expand(_x_macros((BACKENDS / header).read_text()), macro)


@pytest.mark.parametrize("api", APIS)
def test_entry_point_lists_parse(api):
    eps = entry_points(api)
    names = [n for n, _ in eps]
    assert len(names) >= 20, names
    assert len(set(names)) == len(names)
    prefix = "cu" if api == "cuda" else "hip"
    assert all(n.startswith(prefix) for n in names), names
    must = {
        "cuda": ["cuInit", "cuStreamCreate", "cuEventRecord", "cuMemHostAlloc"],
        "hip": [
            "hipInit",
            "hipStreamCreateWithFlags",
            "hipEventRecord",
            "hipHostMalloc",
        ],
    }[api]
    assert set(must) <= set(names)


# --------------------------------------------------------------------------
# Building the fake and running children


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fake_driver_build_fi", FAKE_DIR / "build.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = Path(mod.build_fake_driver(tmp_path_factory.mktemp("fake-fi")))
    assert path.exists()
    return path


def _env(api, lib, *, forced=True, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "FAKE_GPU_"))
    }
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONWARNINGS", None)
    env[f"MAX_DRIVER_{api.upper()}_LIBRARY"] = str(lib)
    env["MAX_DRIVER_FAKE_LIBRARY"] = str(lib)
    env["FAULT_API"] = api
    if forced:
        env["MAX_DRIVER_BACKEND"] = api
    elif api == "hip":  # auto: keep CUDA (tried first) out of the way
        env["MAX_DRIVER_CUDA_LIBRARY"] = "/nonexistent/libcuda.so.1"
    for k, v in extra.items():
        env[k] = str(v)
    return env


def _run(args, env, timeout):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )


def _tail(text, n=4000):
    return text if len(text) <= n else "..." + text[-n:]


# SPEC §4/§5/§8: the exception type a driver failure must raise, by the
# scenario step that hit it (steps not listed: any SPEC §8 type).
STRICT_TYPES = {
    "queue": "ValueError",
    "queue1": "ValueError",  # creating
    "event_t0": "ValueError",
    "event_t1": "ValueError",
    "event": "ValueError",
    "many_events": "ValueError",
    "record_t0": "ValueError",
    "record_new": "ValueError",  # recording
    "record_existing": "ValueError",
    "record_gated": "ValueError",
    "record_t1": "ValueError",
    "record_default": "ValueError",
    "wait_for_stream": "ValueError",
    "wait_for_device": "ValueError",
    "wait_for_event": "ValueError",
    "wait_for_self": "ValueError",
    "cross_wait_stream": "ValueError",
    "cross_wait_event": "ValueError",
    "cross_wait_device": "ValueError",
    "sync_queue": "ValueError",
    "sync_queue1": "ValueError",  # synchronizing
    "sync_event": "ValueError",
    "sync_default": "ValueError",
    "sync_device": "ValueError",
    "sync_device1": "ValueError",
    "is_ready": "ValueError",
    "is_ready_new": "ValueError",
    "is_ready_gated": "ValueError",
    "enable_peer": "RuntimeError",  # a driver failure, as MAX documents it
    # "RuntimeError if ... the driver rejects the enqueue"
    "wait_value": "RuntimeError",
    "wait_value_async": "RuntimeError",
    "wait_value_equal": "RuntimeError",
    "wait_value_async_device": "RuntimeError",
}


def _names_error(msg, api, code, require_name=True):
    has_code = re.search(rf"(?<!\d){code}(?!\d)", msg) is not None
    has_name = ERROR_NAMES[api][code] in msg
    return has_code and (has_name or not require_name)


# --------------------------------------------------------------------------
# Runtime faults


CHILD = r'''
import ctypes, faulthandler, gc, json, os, sys, threading, time
faulthandler.enable()
api = os.environ["FAULT_API"]
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
lib.fake_gpu_calls.argtypes = [ctypes.c_char_p]
lib.fake_gpu_live.argtypes = [ctypes.c_char_p]
lib.fake_gpu_reset.restype = None
from max import driver
from max.driver import CPU, Accelerator, CompletionFlag, DeviceEvent, DeviceQueue

PLAN = json.loads(os.environ["FAULT_PLAN"])
NAMES = json.loads(os.environ["FAULT_NAMES"])
START = int(sys.argv[1])
T = 5.0
ALLOWED = (ValueError, RuntimeError, MemoryError, TimeoutError)
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
HOST_FN_LAUNCH = ("cuLaunchHostFunc", "cuStreamAddCallback", "hipLaunchHostFunc",
                  "hipStreamAddCallback")
# More events alive at once than any reuse pool keeps (256 per kind per
# device in the backend today), so that event creation and destruction are
# driver calls in every scenario.
MANY_EVENTS = 300

unraisable = []
sys.unraisablehook = lambda u: unraisable.append(
    "%s: %s" % (u.exc_type.__name__, u.exc_value))

cpu = CPU()
accs = [Accelerator(i) for i in range(driver.accelerator_count())]
acc = accs[0]
acc1 = accs[1] if len(accs) > 1 else accs[0]
for d in accs:
    d.default_queue

def lives():
    return {k: lib.fake_gpu_live(k.encode()) for k in ("stream", "event", "host_alloc")}

def push_depth():
    return lib.fake_gpu_live(b"context_push") if api == "cuda" else 0

def wait_until(pred, timeout):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True

def scenario():
    """Every public operation once; returns (outcomes, enqueued, ran)."""
    o = {}
    out = []
    lock = threading.Lock()
    enqueued, ran = set(), set()

    def mark(tag):
        def fn():
            with lock:
                ran.add(tag)
        return fn

    def step(name, needs, fn):
        if any(n not in o for n in needs):
            return
        try:
            fn()
        except ALLOWED as e:
            out.append([name, type(e).__name__, str(e)])
        except BaseException as e:
            out.append([name, "UNEXPECTED " + type(e).__name__, str(e)])
        else:
            o["ok:" + name] = True

    def put(key, make):
        def f():
            o[key] = make()
        return f

    def enq(key, target, tag):
        def f():
            getattr(o[target] if isinstance(target, str) else target, ENQ)(mark(tag))
            enqueued.add(tag)
        return f

    step("api", [], lambda: (acc.api, acc.label, acc.id, acc.is_host))
    step("architecture_name", [], lambda: acc.architecture_name)
    step("model_name", [], lambda: acc.model_name)
    step("is_host_unified", [], lambda: acc.is_host_unified)
    step("max_single_alloc_size", [], lambda: acc.max_single_alloc_size)
    step("stats", [], lambda: acc.stats)
    step("stats1", [], lambda: acc1.stats)
    step("can_access", [], lambda: (acc.can_access(acc1), acc1.can_access(acc)))
    step("enable_peer", [], driver.enable_all_peer_access)
    step("default_queue", [], lambda: acc.default_queue.native_stream_handle)
    step("queue", [], put("q", lambda: DeviceQueue(acc)))
    step("queue1", [], put("q1", lambda: DeviceQueue(acc1)))
    step("event_t0", [], put("t0", lambda: DeviceEvent(acc, enable_timing=True)))
    step("event_t1", [], put("t1", lambda: DeviceEvent(acc, enable_timing=True)))
    step("event", [], put("ev", lambda: DeviceEvent(acc)))
    def many_events():
        evs = []
        try:
            for _ in range(MANY_EVENTS):
                evs.append(DeviceEvent(acc))
        finally:
            del evs[:]
    step("many_events", [], many_events)
    step("flag", [], put("flag", lambda: CompletionFlag(acc)))
    step("flag2", [], put("flag2", lambda: CompletionFlag(acc)))
    step("flag1", [], put("flag1", lambda: CompletionFlag(acc1)))
    step("flag3", [], put("flag3", lambda: CompletionFlag(acc)))
    step("record_t0", ["q", "t0"], lambda: o["q"].record_event(o["t0"]))
    step("record_new", ["q"], put("ev_new", lambda: o["q"].record_event()))
    step("record_existing", ["q", "ev"], lambda: o["q"].record_event(o["ev"]))
    step("wait_for_stream", ["q"], lambda: o["q"].wait_for(acc.default_queue))
    step("wait_for_device", ["q"], lambda: o["q"].wait_for(device=acc))
    step("wait_for_event", ["q", "ev_new"], lambda: o["q"].wait_for(o["ev_new"]))
    step("wait_for_self", ["q"], lambda: o["q"].wait_for(o["q"]))
    step("cross_wait_stream", ["q1", "q"], lambda: o["q1"].wait_for(o["q"]))
    step("cross_wait_event", ["q1", "ev"], lambda: o["q1"].wait_for(event=o["ev"]))
    step("cross_wait_device", ["q1"], lambda: o["q1"].wait_for(device=acc))
    step("wait_value", ["q", "flag"], lambda: o["q"].wait_for_host_value(o["flag"], 7))
    step("hostfn_queue", ["q"], enq("hf_q", "q", "q"))
    step("record_gated", ["q"], put("ev_gated", lambda: o["q"].record_event()))
    step("is_ready_gated", ["ev_gated"], lambda: o["ev_gated"].is_ready())
    step("signal", ["flag"], lambda: o["flag"].signal(7))
    step("hostfn_device", [], enq("hf_d", acc, "dev"))
    step("hostfn_queue1", ["q1"], enq("hf_q1", "q1", "q1"))
    def kick():
        getattr(o["q"], ENQ_ASYNC)(mark("async"), o["flag2"], 3, cpu)
        enqueued.add("async")
        o["async"] = True
    step("async_hostfn", ["q", "flag2"], kick)
    def kick_dev():
        getattr(acc, ENQ_ASYNC)(mark("async_dev"), o["flag3"], 4, cpu)
        enqueued.add("async_dev")
        o["async_dev"] = True
    step("async_hostfn_device", ["flag3"], kick_dev)
    step("wait_value_async_device", ["flag3", "async_dev"],
         lambda: acc.default_queue.wait_for_host_value(o["flag3"], 4))
    step("wait_value_async", ["q", "flag2", "async"],
         lambda: o["q"].wait_for_host_value(o["flag2"], 3))
    step("wait_value_equal", ["q1", "flag1"],
         lambda: o["q1"].wait_for_host_value(o["flag1"], 0))
    step("record_t1", ["q", "t1"], lambda: o["q"].record_event(o["t1"]))
    step("sync_queue", ["q"], lambda: o["q"].synchronize(timeout=T))
    step("sync_queue1", ["q1"], lambda: o["q1"].synchronize(timeout=T))
    step("is_ready", ["ev", "ok:record_existing"], lambda: o["ev"].is_ready())
    step("is_ready_new", ["ev_new"], lambda: o["ev_new"].is_ready())
    step("sync_event", ["t1", "ok:record_t1"], lambda: o["t1"].synchronize(timeout=T))
    step("elapsed_time", ["t0", "t1", "ok:record_t0", "ok:record_t1", "ok:sync_event"],
         lambda: o["t0"].elapsed_time(o["t1"]))
    step("record_default", [], lambda: acc.default_queue.record_event())
    step("sync_default", [], lambda: acc.default_queue.synchronize(timeout=T))
    step("sync_device", [], lambda: acc.synchronize(timeout=T))
    step("sync_device1", [], lambda: acc1.synchronize(timeout=T))
    o.clear()
    return out, enqueued, ran, lock

def cleanup():
    problems = []
    gc.collect()
    for attempt in range(4):
        try:
            for d in accs:
                d.synchronize(timeout=T)
            cpu.synchronize(timeout=T)
            break
        except ValueError:
            continue  # an injected fault in the synchronize itself
        except TimeoutError as e:
            problems.append("cleanup synchronize timed out: %s" % e)
            break
    gc.collect()
    return problems

def run_one(item, base_threads):
    faults = item["faults"]
    lib.fake_gpu_reset()
    base = lives()
    base_depth = push_depth()
    for name, nth, code in faults:
        rc = lib.fake_gpu_fail(name.encode(), nth, code)
        if rc != 0:  # e.g. hipGetErrorName returns a string: cannot fail
            lib.fake_gpu_reset()
            return {"unarmable": "fake_gpu_fail(%s) returned %d" % (name, rc)}
    del unraisable[:]
    outcomes, enqueued, ran, lock = scenario()
    problems = cleanup()
    fired = [lib.fake_gpu_calls(n.encode()) >= nth for n, nth, _ in faults]
    lib.fake_gpu_reset()  # disarm what did not fire
    for step_name, etype, msg in outcomes:
        if etype.startswith("UNEXPECTED"):
            problems.append("%s raised %s: %s" % (step_name, etype, msg))
        elif etype == "TimeoutError":
            problems.append("%s timed out (work stuck after the fault): %s"
                            % (step_name, msg))
    # Nothing enqueued successfully is lost.
    if not wait_until(lambda: enqueued <= ran, T):
        with lock:
            problems.append("host functions lost: %s" % sorted(enqueued - ran))
    # No driver object left behind (a failed destroy may leak its object).
    # Driver events may sit in the backend's bounded reuse pool: a few more
    # live events than before is not a leak (the pool is already warm).
    allow = {"stream": 0, "event": 4, "host_alloc": 0}
    allow_push = 0
    for name, _, _ in faults:
        if name in ("cuStreamDestroy", "hipStreamDestroy"):
            allow["stream"] = 1  # a failed destroy cannot be undone
        if name in ("cuEventDestroy", "hipEventDestroy"):
            allow["event"] += 1
        if name in ("cuMemFreeHost", "hipHostFree"):
            allow["host_alloc"] = 1
        if name in HOST_FN_LAUNCH:
            # When the launch that would drop a gate's flag reference fails,
            # the backend keeps the flag (its pinned slot) rather than risk
            # freeing memory the stream still reads.
            allow["host_alloc"] = 1
        if name == "cuCtxPopCurrent":
            allow_push = 1  # a failed pop leaves the context pushed
    ok = wait_until(lambda: all(v <= base[k] + allow[k]
                                for k, v in lives().items()), T)
    if not ok:
        problems.append("driver objects leaked: before %s after %s" % (base, lives()))
    if push_depth() - base_depth > allow_push:
        problems.append("CUDA context left pushed (depth %d -> %d)"
                        % (base_depth, push_depth()))
    slack = THREAD_SLACK_VALUE
    if not wait_until(lambda: lib.fake_gpu_threads() <= base_threads + slack, T):
        problems.append("fake threads grew: %d -> %d"
                        % (base_threads, lib.fake_gpu_threads()))
    return {"fired": fired, "outcomes": outcomes, "problems": problems,
            "unraisable": list(unraisable)}

# A clean run first: it must raise nothing, and it tells which entry points
# the scenario reaches.
lib.fake_gpu_reset()
outcomes, enqueued, ran, _ = scenario()
cleanup()
wait_until(lambda: enqueued <= ran, T)
reached = {n: lib.fake_gpu_calls(n.encode()) for n in NAMES}
base_threads = lib.fake_gpu_threads()
print("BASELINE " + json.dumps({"outcomes": outcomes, "reached": reached,
      "lost": sorted(enqueued - ran), "threads": base_threads}), flush=True)

for i in range(START, len(PLAN)):
    print("BEGIN %d" % i, flush=True)
    faulthandler.dump_traceback_later(90, exit=True)
    res = run_one(PLAN[i], base_threads)
    faulthandler.cancel_dump_traceback_later()
    res["i"] = i
    print("RESULT " + json.dumps(res), flush=True)
print("DONE", flush=True)
'''.replace("THREAD_SLACK_VALUE", str(THREAD_SLACK))


def _plan(api):
    plan = []
    for name, _kind in entry_points(api):
        for code in RUNTIME_CODES:
            for nth in RUNTIME_NTHS:
                plan.append({"faults": [[name, nth, code]], "require_name": True})
    if api == "cuda":
        # The error-name lookup failing on top of another error: the message
        # still carries the code.
        for name in ("cuStreamCreate", "cuEventRecord", "cuMemHostAlloc"):
            plan.append(
                {
                    "faults": [[name, 1, 2], ["cuGetErrorName", 1, 1]],
                    "require_name": False,
                }
            )
    return plan


def _run_plan(api, lib, plan):
    """Runs the plan in as few children as crashes allow; returns
    (baseline, results by index, crashes)."""
    names = [n for n, _ in entry_points(api)]
    env = _env(api, lib, FAULT_PLAN=json.dumps(plan), FAULT_NAMES=json.dumps(names))
    results, crashes, baseline = {}, [], None
    start = 0
    while start < len(plan):
        try:
            r = _run(["-c", CHILD, str(start)], env, timeout=600)
            out, err, rc = r.stdout, r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            rc = "timeout"
        last = None
        for line in out.splitlines():
            if line.startswith("BASELINE ") and baseline is None:
                baseline = json.loads(line[9:])
            elif line.startswith("BEGIN "):
                last = int(line[6:])
            elif line.startswith("RESULT "):
                res = json.loads(line[7:])
                results[res["i"]] = res
        if "DONE" in out.splitlines():
            break
        if last is None or last in results:
            # Died before or between scenarios: nothing more to learn.
            crashes.append({"i": last, "rc": rc, "stderr": _tail(err)})
            break
        crashes.append(
            {"i": last, "faults": plan[last]["faults"], "rc": rc, "stderr": _tail(err)}
        )
        start = last + 1
    return baseline, results, crashes


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("api", APIS)
def test_runtime_faults(fake_lib, api):
    plan = _plan(api)
    baseline, results, crashes = _run_plan(api, fake_lib, plan)
    assert baseline is not None, crashes
    assert baseline["outcomes"] == [], f"clean scenario failed: {baseline['outcomes']}"
    assert baseline["lost"] == [], baseline
    reached = {n for n, c in baseline["reached"].items() if c > 0}

    problems = []
    armed = fired = survived = clean_exceptions = 0
    fired_names, unarmable, wrong_type = set(), set(), set()
    for i, item in enumerate(plan):
        res = results.get(i)
        label = ",".join(f"{n}:{nth}:{c}" for n, nth, c in item["faults"])
        if res is None:
            continue
        if "unarmable" in res:
            unarmable.add(item["faults"][0][0])
            continue
        armed += 1
        if not res["fired"][0]:
            continue
        fired += 1
        fired_names.add(item["faults"][0][0])
        bad = list(res["problems"])
        code = item["faults"][0][2]
        for step, etype, msg in res["outcomes"]:
            if etype in ("ValueError", "RuntimeError", "MemoryError"):
                clean_exceptions += 1
                if not _names_error(msg, api, code, item["require_name"]):
                    bad.append(
                        f"{step}: {etype} does not name "
                        f"{ERROR_NAMES[api][code]} ({code}): {msg!r}"
                    )
                want = STRICT_TYPES.get(step)
                if want is not None and etype != want:
                    wrong_type.add(f"{step}: {etype} instead of {want} ({msg})")
        if bad:
            problems.append(f"{label}: " + "; ".join(bad))
        else:
            survived += 1
    for c in crashes:
        label = ",".join(f"{n}:{nth}:{cd}" for n, nth, cd in c.get("faults", []))
        problems.append(
            f"CRASH/HANG in scenario {c['i']} ({label}), rc={c['rc']}:\n{c['stderr']}"
        )
    unreached = sorted({n for n, _ in entry_points(api)} - fired_names - unarmable)
    figures = (
        f"[{api}] entry points: {len(entry_points(api))}; scenarios planned: "
        f"{len(plan)}, run: {len(results)}; faults fired: {fired}; survived: "
        f"{survived}; clean exceptions checked: {clean_exceptions}; crashes/hangs: "
        f"{len(crashes)}; cannot fail in the fake: {sorted(unarmable)}; entry "
        f"points never fired at run time (import-time or error-path only): "
        f"{unreached}"
    )
    print(figures)
    # Every entry point the clean scenario reaches had its fault fire.
    missed = sorted(reached - fired_names)
    assert not missed, f"faults armed but never fired for {missed}\n{figures}"
    assert fired > 0
    assert not problems, figures + "\n" + "\n".join(problems)
    # Survived, but with the wrong exception type for the operation.
    assert not wrong_type, (
        figures + "\nwrong exception types:\n" + "\n".join(sorted(wrong_type))
    )


# --------------------------------------------------------------------------
# Import-time faults (FAKE_GPU_FAIL)


STARTUP_CHILD = r"""
import ctypes, json, os
out = {}
try:
    from max import driver
except ImportError as e:
    print("JSON" + json.dumps({"import_error": [type(e).__name__, str(e)]}))
    raise SystemExit(0)
out["import_error"] = None
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_calls.argtypes = [ctypes.c_char_p]
names = json.loads(os.environ["FAULT_NAMES"])
out["import_calls"] = {n: lib.fake_gpu_calls(n.encode()) for n in names}
out["selection"] = driver.backend_selection()
out["count"] = driver.accelerator_count()
errors = []
for i in range(driver.accelerator_count()):
    try:
        d = driver.Accelerator(i)
        d.default_queue.synchronize(timeout=5)
    except Exception as e:
        errors.append([type(e).__name__, str(e)])
out["startup_errors"] = errors
out["startup_calls"] = {n: lib.fake_gpu_calls(n.encode()) for n in names}
print("JSON" + json.dumps(out))
"""


def _startup(api, lib, forced, fail=None):
    extra = {"FAULT_NAMES": json.dumps([n for n, _ in entry_points(api)])}
    if fail:
        extra["FAKE_GPU_FAIL"] = fail
    r = _run(["-c", STARTUP_CHILD], _env(api, lib, forced=forced, **extra), timeout=60)
    line = next((x for x in r.stdout.splitlines() if x.startswith("JSON")), None)
    return r, (json.loads(line[4:]) if line else None)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("api", APIS)
def test_import_time_faults(fake_lib, api):
    r, base = _startup(api, fake_lib, forced=True)
    assert base is not None and base["import_error"] is None, (r.stdout, r.stderr)
    assert base["startup_errors"] == []
    used = {n: c for n, c in base["startup_calls"].items() if c > 0}
    assert used, base
    name_of = ERROR_NAMES[api][IMPORT_CODE]
    problems, injected, import_errors, fallbacks = [], 0, 0, 0
    for name, calls in sorted(used.items()):
        for nth in sorted({1, calls}):
            spec = f"{name}:{nth}:{IMPORT_CODE}"
            injected += 1
            r, out = _startup(api, fake_lib, forced=True, fail=spec)
            if r.returncode != 0 or out is None:
                problems.append(
                    f"{spec} forced: crashed rc={r.returncode}\n{_tail(r.stderr)}"
                )
                continue
            if out["import_error"] is not None:
                import_errors += 1
                etype, msg = out["import_error"]
                if etype != "ImportError" or not _names_error(msg, api, IMPORT_CODE):
                    problems.append(
                        f"{spec} forced: {etype} not naming {name_of}: {msg!r}"
                    )
                # auto mode falls back and says why.
                r2, auto = _startup(api, fake_lib, forced=False, fail=spec)
                if r2.returncode != 0 or auto is None or auto["import_error"]:
                    problems.append(
                        f"{spec} auto: import failed rc={r2.returncode} "
                        f"{auto}\n{_tail(r2.stderr)}"
                    )
                    continue
                entry = next(e for e in auto["selection"] if e["api"] == api)
                if entry["chosen"] or auto["count"] != 0:
                    problems.append(
                        f"{spec} auto: still chose {api}: {auto['selection']}"
                    )
                elif not (
                    entry["error"] and _names_error(entry["error"], api, IMPORT_CODE)
                ):
                    problems.append(
                        f"{spec} auto: reason does not name the error: {entry}"
                    )
                else:
                    fallbacks += 1
            else:
                for etype, msg in out["startup_errors"]:
                    if etype not in (
                        "ValueError",
                        "RuntimeError",
                        "MemoryError",
                    ) or not _names_error(msg, api, IMPORT_CODE):
                        problems.append(f"{spec}: first use raised {etype}: {msg!r}")
    print(
        f"[{api}] import-time entry points: {len(used)} {sorted(used)}; faults "
        f"injected: {injected}; forced ImportError: {import_errors}; auto "
        f"fallbacks checked: {fallbacks}"
    )
    assert not problems, "\n".join(problems)
    # cuInit / hipInit failing must stop a forced import.
    assert import_errors > 0


# --------------------------------------------------------------------------
# Sticky asynchronous errors


ASYNC_CHILD = r"""
import ctypes, gc, json, os, sys, threading, time
api = os.environ["FAULT_API"]
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_async_error.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.fake_gpu_live.argtypes = [ctypes.c_char_p]
from max import driver
from max.driver import Accelerator, CompletionFlag, DeviceEvent, DeviceQueue
acc = Accelerator()
acc.default_queue.synchronize(timeout=5)
def lives():
    return {k: lib.fake_gpu_live(k.encode()) for k in ("stream", "event", "host_alloc")}
base = lives()
code = int(sys.argv[1])
ENQ = "__unsafe_enqueue_py_host_func"
out = {}

def catch(fn):
    try:
        fn()
        return None
    except Exception as e:
        return [type(e).__name__, str(e)]

def poll_is_ready(ev):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        try:
            if ev.is_ready():
                return None  # completed without reporting the error
        except Exception as e:
            return [type(e).__name__, str(e)]
        time.sleep(0.01)
    return ["no answer", "is_ready() stayed False for 5 s"]

def variant(observer, timing):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    if timing == "during":
        # The observing wait is already blocked when the error happens.
        q.wait_for_host_value(f, 1)
        time.sleep(0.2)  # the gate is running on the stream
    assert lib.fake_gpu_async_error(ctypes.c_void_p(q.native_stream_handle), code) == 0
    if observer == "device_sync":
        getattr(q, ENQ)(lambda: None)  # a host function is the failing item
        ev = None
    else:
        ev = q.record_event()
    if timing == "during":
        threading.Timer(0.3, f.signal, args=(1,)).start()
    else:
        time.sleep(0.2)  # the error has happened before anyone looks
    if observer == "queue_sync":
        res = catch(lambda: q.synchronize(timeout=5))
    elif observer == "event_sync":
        res = catch(lambda: ev.synchronize(timeout=5))
    elif observer == "is_ready":
        res = poll_is_ready(ev)
    else:
        res = catch(lambda: acc.synchronize(timeout=5))
    f.signal(1)
    time.sleep(0.35)  # let the timer fire before the flag goes
    del q, ev, f
    gc.collect()
    return res

for observer in ("queue_sync", "event_sync", "is_ready", "device_sync"):
    for timing in ("before", "during"):
        out[observer + "/" + timing] = variant(observer, timing)

# The device still works once the broken queues are gone.
q = DeviceQueue(acc)
ran = []
getattr(q, ENQ)(lambda: ran.append(1))
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
f.signal(1)
out["after"] = catch(lambda: (q.synchronize(timeout=5), acc.synchronize(timeout=5)))
out["ran"] = ran
del q, f
gc.collect()
t0 = time.monotonic()
def settled():
    now = lives()
    return (now["stream"] == base["stream"] and now["host_alloc"] == base["host_alloc"]
            and now["event"] <= base["event"] + 8)  # a warm event pool is fine
while not settled() and time.monotonic() - t0 < 5:
    time.sleep(0.01)
out["live_before"] = base
out["live_after"] = lives()
out["settled"] = settled()
print("JSON" + json.dumps(out), flush=True)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("code", [719, 700])
@pytest.mark.parametrize("api", APIS)
def test_sticky_async_error(fake_lib, api, code):
    """An asynchronous error on a stream surfaces as ValueError naming it
    from whichever wait observes it: queue / event / device synchronize and
    is_ready, whether it happened before the wait or while it was blocked."""
    r = _run(["-c", ASYNC_CHILD, str(code)], _env(api, fake_lib), timeout=240)
    assert r.returncode == 0, (r.returncode, r.stdout, _tail(r.stderr))
    line = next((x for x in r.stdout.splitlines() if x.startswith("JSON")), None)
    assert line, (r.stdout, r.stderr)
    out = json.loads(line[4:])
    name = ERROR_NAMES[api][code]
    bad = []
    for observer in ("queue_sync", "event_sync", "is_ready", "device_sync"):
        for timing in ("before", "during"):
            key = f"{observer}/{timing}"
            got = out[key]
            if not isinstance(got, list):
                bad.append(f"{key}: no error surfaced")
            elif got[0] != "ValueError" or not _names_error(got[1], api, code):
                bad.append(f"{key}: {got[0]}: {got[1]} (want ValueError naming {name})")
    print(f"[{api}] sticky {name}: {8 - len(bad)}/8 observers raised ValueError")
    assert not bad, "\n".join(bad)
    assert out["after"] is None, out
    assert out["ran"] == [1], out
    assert out["settled"], (
        "driver objects left behind after the asynchronous errors (a gate's "
        "flag is released by a host function the driver skips after an "
        f"error?): before {out['live_before']}, after {out['live_after']}"
    )
