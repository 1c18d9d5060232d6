# ruff: noqa: E501
"""Hostile arguments never crash the interpreter (SPEC §8, §10).

The tables run in a child interpreter so that a segfault or abort shows up
as a failing test (with the entry that was running) instead of killing the
test run.  Each entry says what it must do:

    T  raise TypeError
    E  raise some Exception (TypeError, ValueError, OverflowError, ...)
    A  anything but a crash (may return or raise)
"""

from __future__ import annotations

import json

import pytest

CHILD = r"""
import gc, json, sys, threading
from max import driver
from max.driver import (CPU, Accelerator, CompletionFlag, Device, DeviceEvent,
                        DeviceQueue)

ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
PACK = getattr(driver, "__unsafe_pack_py_host_func")
group = sys.argv[1]

cpu = CPU()
q = DeviceQueue(cpu)
ev = DeviceEvent(cpu)
tev = DeviceEvent(cpu, enable_timing=True)
f = CompletionFlag(cpu)
ok_fn = lambda: None

class RaisingIndex:
    def __index__(self):
        raise ZeroDivisionError("index")
class NegIndex:
    def __index__(self):
        return -5
class HugeIndex:
    def __index__(self):
        return 2**1000
class StrIndex:
    def __index__(self):
        return "3"
class RaisingFloat:
    def __float__(self):
        raise ZeroDivisionError("float")
class RaisingEq:
    def __eq__(self, other):
        raise ZeroDivisionError("eq")
    __hash__ = object.__hash__

BAD = {
    "None": None, "str": "x", "bytes": b"x", "float": 1.5,
    "nan": float("nan"), "list": [], "dict": {}, "object": object(),
    "type": int, "neg": -1, "big": 2**64, "huge": 2**1000,
    "nhuge": -(2**1000), "idx_raises": RaisingIndex(), "idx_neg": NegIndex(),
    "idx_huge": HugeIndex(), "idx_str": StrIndex(),
    "float_raises": RaisingFloat(), "eq_raises": RaisingEq(),
}
NOT_DEVICE = dict(BAD, queue=q, event=ev, flag=f, zero=0)
NOT_FLAG = dict(BAD, queue=q, event=ev, device=cpu, zero=0)
NOT_EVENT = dict(BAD, queue=q, flag=f, device=cpu, zero=0)
NOT_CALLABLE = {k: v for k, v in BAD.items() if not callable(v)}
NOT_CALLABLE.update(queue=q, event=ev, flag=f, device=cpu)
U64_T = {k: BAD[k] for k in ("None", "str", "bytes", "float", "nan", "list",
                             "dict", "object", "type", "neg", "big", "huge",
                             "nhuge", "idx_neg", "idx_huge", "eq_raises")}
U64_E = {k: BAD[k] for k in ("idx_raises", "idx_str", "float_raises")}

entries = []
def add(label, thunk, expect):
    entries.append((label, thunk, expect))

def table_args():
    # --- constructors
    for k, v in NOT_DEVICE.items():
        add(f"DeviceQueue({k})", lambda v=v: DeviceQueue(v), "T")
        add(f"DeviceEvent({k})", lambda v=v: DeviceEvent(v), "T")
        add(f"CompletionFlag({k})", lambda v=v: CompletionFlag(v), "T")
        add(f"cpu.can_access({k})", lambda v=v: cpu.can_access(v), "T")
        add(f"q.wait_for(device={k})", lambda v=v: q.wait_for(device=v), "T")
    for k, v in BAD.items():
        add(f"CPU({k})", lambda v=v: CPU(v), "A" if isinstance(v, int) or k.startswith("idx") else "E")
        add(f"Device.cpu({k})", lambda v=v: Device.cpu(v), "A" if isinstance(v, int) or k.startswith("idx") else "E")
        add(f"Accelerator({k})", lambda v=v: Accelerator(v), "E")
        add(f"Accelerator(id={k})", lambda v=v: Accelerator(id=v), "E")
        add(f"DeviceEvent(cpu, enable_timing={k})", lambda v=v: DeviceEvent(cpu, enable_timing=v), "A")
        add(f"Device({k})", lambda v=v: Device(v), "E")
    for name, fn in [("CPU", CPU), ("Accelerator", Accelerator),
                     ("DeviceQueue", DeviceQueue), ("DeviceEvent", DeviceEvent),
                     ("CompletionFlag", CompletionFlag), ("Device", Device)]:
        add(f"{name}(bogus=1)", lambda fn=fn: fn(bogus=1), "T")
        add(f"{name}(cpu, 1, 2, 3)", lambda fn=fn: fn(cpu, 1, 2, 3), "T")
    add("DeviceQueue()", lambda: DeviceQueue(), "T")
    add("DeviceEvent()", lambda: DeviceEvent(), "T")
    add("CompletionFlag()", lambda: CompletionFlag(), "T")
    add("DeviceQueue(cpu, device=cpu)", lambda: DeviceQueue(cpu, device=cpu), "T")
    add("DeviceEvent(cpu, True, enable_timing=True)", lambda: DeviceEvent(cpu, True, enable_timing=True), "T")
    add("Device.__init__(cpu)", lambda: Device.__init__(cpu), "A")
    add("q.__init__(cpu)", lambda: q.__init__(cpu), "A")
    add("ev.__init__(cpu)", lambda: ev.__init__(cpu), "A")
    add("f.__init__(cpu)", lambda: f.__init__(cpu), "A")
    add("q.__init__(None)", lambda: q.__init__(None), "A")

    # --- device methods and properties
    for attr in ("api", "label", "id", "is_host", "is_host_unified", "model_name",
                 "stats", "max_single_alloc_size", "is_compatible", "default_queue"):
        add(f"setattr(cpu, {attr})", lambda a=attr: setattr(cpu, a, 5), "E")
        add(f"delattr(cpu, {attr})", lambda a=attr: delattr(cpu, a), "E")
    add("cpu.architecture_name", lambda: cpu.architecture_name, "E")
    add("cpu.can_access()", lambda: cpu.can_access(), "T")
    add("cpu.can_access(cpu, cpu)", lambda: cpu.can_access(cpu, cpu), "T")
    add("cpu._device_context_ptr(1)", lambda: cpu._device_context_ptr(1), "T")
    add("cpu.synchronize(1, 2)", lambda: cpu.synchronize(1, 2), "T")
    add("cpu.synchronize(bogus=1)", lambda: cpu.synchronize(bogus=1), "T")
    add("cpu.__eq__(RaisingEq)", lambda: cpu == RaisingEq(), "A")

    # --- timeouts (idle objects)
    for name, sync in [("q", q.synchronize), ("ev", ev.synchronize),
                       ("cpu", cpu.synchronize), ("default", cpu.default_queue.synchronize)]:
        for k, v in BAD.items():
            if k in ("None",):
                continue
            if k in ("str", "bytes", "list", "dict", "object", "type", "eq_raises"):
                exp = "T"
            elif k in ("neg", "nhuge"):
                exp = "E"
            elif k in ("idx_raises", "idx_str", "float_raises"):
                exp = "E"
            else:
                exp = "A"
            add(f"{name}.synchronize(timeout={k})", lambda s=sync, v=v: s(timeout=v), exp)
        add(f"{name}.synchronize(timeout=-inf)", lambda s=sync: s(timeout=float("-inf")), "E")
        add(f"{name}.synchronize(timeout=inf)", lambda s=sync: s(timeout=float("inf")), "A")
        add(f"{name}.synchronize(timeout=1e308)", lambda s=sync: s(timeout=1e308), "A")

    # --- queue methods
    for k, v in BAD.items():
        add(f"q.wait_for({k})", lambda v=v: q.wait_for(v), "T")
        add(f"q.record_event({k})", lambda v=v: q.record_event(v), "T")
    for k, v in NOT_DEVICE.items():
        if k == "queue":
            continue
        add(f"q.wait_for(stream={k})", lambda v=v: q.wait_for(stream=v), "T")
    for k, v in NOT_EVENT.items():
        add(f"q.wait_for(event={k})", lambda v=v: q.wait_for(event=v), "T")
        add(f"q.record_event(event={k})", lambda v=v: q.record_event(event=v), "T")
        add(f"ev.elapsed_time({k})", lambda v=v: tev.elapsed_time(v), "T")
        add(f"ev.elapsed_time(end_event={k})", lambda v=v: tev.elapsed_time(end_event=v), "T")
    add("q.wait_for()", lambda: q.wait_for(), "T")
    add("q.wait_for(q, q)", lambda: q.wait_for(q, q), "T")
    add("q.wait_for(q, stream=q)", lambda: q.wait_for(q, stream=q), "T")
    add("q.wait_for(stream=q, event=ev)", lambda: q.wait_for(stream=q, event=ev), "T")
    add("q.wait_for(bogus=q)", lambda: q.wait_for(bogus=q), "T")
    add("q.record_event(ev, ev)", lambda: q.record_event(ev, ev), "T")
    add("q.record_event(bogus=ev)", lambda: q.record_event(bogus=ev), "T")
    add("q.record_event(ev, event=ev)", lambda: q.record_event(ev, event=ev), "T")
    for k, v in NOT_FLAG.items():
        add(f"q.wait_for_host_value({k}, 1)", lambda v=v: q.wait_for_host_value(v, 1), "T")
    for k, v in U64_T.items():
        add(f"q.wait_for_host_value(f, {k})", lambda v=v: q.wait_for_host_value(f, v), "T")
        add(f"f.signal({k})", lambda v=v: f.signal(v), "T")
        add(f"f.signal(value={k})", lambda v=v: f.signal(value=v), "T")
    for k, v in U64_E.items():
        add(f"q.wait_for_host_value(f, {k})", lambda v=v: q.wait_for_host_value(f, v), "E")
        add(f"f.signal({k})", lambda v=v: f.signal(v), "E")
    add("q.wait_for_host_value()", lambda: q.wait_for_host_value(), "T")
    add("q.wait_for_host_value(f)", lambda: q.wait_for_host_value(f), "T")
    add("q.wait_for_host_value(f, 1, 2)", lambda: q.wait_for_host_value(f, 1, 2), "T")
    add("q.wait_for_host_value(f, 1, value=1)", lambda: q.wait_for_host_value(f, 1, value=1), "T")
    add("q.wait_for_host_value(f, bogus=1)", lambda: q.wait_for_host_value(f, bogus=1), "T")
    add("q.native_stream_handle = 1", lambda: setattr(q, "native_stream_handle", 1), "E")
    add("q.device = cpu", lambda: setattr(q, "device", cpu), "E")
    add("q.synchronize(1, 2)", lambda: q.synchronize(1, 2), "T")
    add("q._device_context_ptr(1)", lambda: q._device_context_ptr(1), "T")

    # --- host functions
    for target_name, target in (("q", q), ("cpu", cpu)):
        enq = getattr(target, ENQ)
        enq_async = getattr(target, ENQ_ASYNC)
        for k, v in NOT_CALLABLE.items():
            add(f"{target_name}.enqueue({k})", lambda e=enq, v=v: e(v), "T")
            add(f"{target_name}.enqueue_async({k}, f, 1, cpu)", lambda e=enq_async, v=v: e(v, f, 1, cpu), "T")
        for k, v in NOT_FLAG.items():
            add(f"{target_name}.enqueue_async(fn, {k}, 1, cpu)", lambda e=enq_async, v=v: e(ok_fn, v, 1, cpu), "T")
        for k, v in U64_T.items():
            add(f"{target_name}.enqueue_async(fn, f, {k}, cpu)", lambda e=enq_async, v=v: e(ok_fn, f, v, cpu), "T")
        for k, v in U64_E.items():
            add(f"{target_name}.enqueue_async(fn, f, {k}, cpu)", lambda e=enq_async, v=v: e(ok_fn, f, v, cpu), "E")
        for k, v in NOT_DEVICE.items():
            add(f"{target_name}.enqueue_async(fn, f, 1, {k})", lambda e=enq_async, v=v: e(ok_fn, f, 1, v), "T")
        add(f"{target_name}.enqueue()", lambda e=enq: e(), "T")
        add(f"{target_name}.enqueue(fn, fn)", lambda e=enq: e(ok_fn, ok_fn), "T")
        add(f"{target_name}.enqueue(fn=fn)", lambda e=enq: e(bogus=ok_fn), "T")
        add(f"{target_name}.enqueue_async()", lambda e=enq_async: e(), "T")
        add(f"{target_name}.enqueue_async(fn, f, 1)", lambda e=enq_async: e(ok_fn, f, 1), "T")
        add(f"{target_name}.enqueue_async(fn, f, 1, cpu, 1)", lambda e=enq_async: e(ok_fn, f, 1, cpu, 1), "T")
    for k, v in NOT_CALLABLE.items():
        add(f"pack({k})", lambda v=v: PACK(v), "T")
    add("pack()", lambda: PACK(), "T")
    add("pack(fn, fn)", lambda: PACK(ok_fn, ok_fn), "T")

    # --- events and flags
    add("ev.is_ready(1)", lambda: ev.is_ready(1), "T")
    add("ev.elapsed_time()", lambda: tev.elapsed_time(), "T")
    add("ev.elapsed_time(ev, ev)", lambda: tev.elapsed_time(tev, tev), "T")
    add("ev.device = cpu", lambda: setattr(ev, "device", cpu), "E")
    add("f.signal()", lambda: f.signal(), "T")
    add("f.signal(1, 2)", lambda: f.signal(1, 2), "T")
    add("f.signal(bogus=1)", lambda: f.signal(bogus=1), "T")
    add("f.load(1)", lambda: f.load(1), "T")
    add("f.reset(1)", lambda: f.reset(1), "T")
    add("f.device_ptr = 0", lambda: setattr(f, "device_ptr", 0), "E")
    add("f._unsafe_ptr = 0", lambda: setattr(f, "_unsafe_ptr", 0), "E")
    add("del f.device_ptr", lambda: delattr(f, "device_ptr"), "E")

    # --- copying, pickling, weak references: raise or work, never crash
    import copy, pickle, weakref
    for obj_name, obj in (("cpu", cpu), ("q", q), ("ev", ev), ("f", f)):
        add(f"copy.copy({obj_name})", lambda o=obj: copy.copy(o), "A")
        add(f"copy.deepcopy({obj_name})", lambda o=obj: copy.deepcopy(o), "A")
        add(f"pickle.dumps({obj_name})", lambda o=obj: pickle.dumps(o), "A")
        add(f"weakref.ref({obj_name})", lambda o=obj: weakref.ref(o), "A")
        add(f"{obj_name}.__reduce_ex__(2)", lambda o=obj: o.__reduce_ex__(2), "A")
        add(f"{obj_name}.__class__.__new__(type)", lambda o=obj: type(o).__new__(type), "E")
        add(f"object.__new__({obj_name} type)", lambda o=obj: object.__new__(type(o)), "E")

    # --- subclassing (may be final) and comparisons with odd objects
    for T in (Device, DeviceQueue, DeviceEvent, CompletionFlag):
        add(f"subclass {T.__name__}", lambda T=T: type("Sub", (T,), {}), "A")
    for obj_name, obj in (("cpu", cpu), ("q", q), ("ev", ev)):
        for k, v in BAD.items():
            add(f"{obj_name} == {k}", lambda o=obj, v=v: o == v, "A")
            add(f"{obj_name} < {k}", lambda o=obj, v=v: o < v, "E")

UNINIT_TYPES = [Device, DeviceQueue, DeviceEvent, CompletionFlag]
for T in (CPU, Accelerator):
    if isinstance(T, type) and T not in UNINIT_TYPES:
        UNINIT_TYPES.append(T)

def table_uninit():
    made = {}
    for T in UNINIT_TYPES:
        try:
            obj = T.__new__(T)
        except Exception as e:
            # TypeError, or (Accelerator without a GPU) the constructor's error.
            add(f"{T.__name__}.__new__ raised {type(e).__name__}", lambda: None, "A")
            continue
        if obj is cpu:
            # CPU.__new__ may hand back the cached, fully initialised device.
            add("CPU.__new__ is CPU()", lambda: cpu.api, "A")
            continue
        made[T] = obj
        add(f"repr(uninit {T.__name__})", lambda o=obj: repr(o), "A")
        add(f"str(uninit {T.__name__})", lambda o=obj: str(o), "A")
        add(f"hash(uninit {T.__name__})", lambda o=obj: hash(o), "A")
        add(f"uninit {T.__name__} == itself", lambda o=obj: o == o, "A")
        add(f"uninit {T.__name__} == real", lambda o=obj: o == cpu, "A")
        for name in dir(T):
            if name.startswith("__") and name.endswith("__"):
                continue
            if name in ("cpu",):
                continue  # static: does not use the object
            def use(o=obj, name=name):
                a = getattr(o, name)
                if callable(a):
                    if name == ENQ:
                        a(ok_fn)
                    elif name == ENQ_ASYNC:
                        a(ok_fn, f, 1, cpu)
                    elif name == "wait_for":
                        a(q)
                    elif name == "wait_for_host_value":
                        a(f, 0)
                    elif name == "record_event":
                        a()
                    elif name == "elapsed_time":
                        a(tev)
                    elif name == "can_access":
                        a(cpu)
                    elif name == "signal":
                        a(1)
                    elif name == "synchronize":
                        a(timeout=1)
                    else:
                        a()
            add(f"uninit {T.__name__}.{name}", use, "E")
    dev, uq, uev, uf = (made.get(T) for T in (Device, DeviceQueue, DeviceEvent, CompletionFlag))
    for T, obj in made.items():
        if isinstance(obj, Device):
            dev = dev or obj
    if dev is not None:
        add("DeviceQueue(uninit dev)", lambda: DeviceQueue(dev), "E")
        add("DeviceEvent(uninit dev)", lambda: DeviceEvent(dev), "E")
        add("CompletionFlag(uninit dev)", lambda: CompletionFlag(dev), "E")
        add("q.wait_for(device=uninit dev)", lambda: q.wait_for(device=dev), "E")
        add("q.wait_for(uninit dev)", lambda: q.wait_for(dev), "E")
        add("enqueue_async(cpu=uninit dev)", lambda: getattr(q, ENQ_ASYNC)(ok_fn, f, 1, dev), "E")
        add("cpu.can_access(uninit dev)", lambda: cpu.can_access(dev), "A")
        add("uninit dev == cpu", lambda: dev == cpu, "A")
    if uq is not None:
        add("q.wait_for(uninit q)", lambda: q.wait_for(uq), "E")
        add("q.wait_for(stream=uninit q)", lambda: q.wait_for(stream=uq), "E")
        add("uninit q == q", lambda: uq == q, "A")
    if uev is not None:
        add("q.record_event(uninit ev)", lambda: q.record_event(uev), "E")
        add("q.wait_for(uninit ev)", lambda: q.wait_for(uev), "E")
        add("tev.elapsed_time(uninit ev)", lambda: tev.elapsed_time(uev), "E")
        add("uninit ev.elapsed_time(tev)", lambda: uev.elapsed_time(tev), "E")
    if uf is not None:
        add("q.wait_for_host_value(uninit f, 0)", lambda: q.wait_for_host_value(uf, 0), "E")
        add("q.wait_for_host_value(uninit f, 1)", lambda: q.wait_for_host_value(uf, 1), "E")
        add("enqueue_async(flag=uninit f)", lambda: getattr(q, ENQ_ASYNC)(ok_fn, uf, 1, cpu), "E")
    def drop():
        made.clear()
        gc.collect()
    add("drop uninit objects", drop, "A")

def table_hostfn():
    done = threading.Event()
    def raise_systemexit():
        raise SystemExit(3)
    def raise_kbd():
        raise KeyboardInterrupt
    class Base(BaseException):
        pass
    def raise_base():
        raise Base("base")
    class DelRaises:
        def __call__(self):
            pass
        def __del__(self):
            raise RuntimeError("from __del__")
    class CallAttr:
        def __getattr__(self, name):
            raise RuntimeError("getattr " + name)
        def __call__(self):
            pass
    def returns_junk():
        return object()
    def deep():
        def r(n):
            return r(n + 1)
        r(0)
    def drop_queue_inside():
        global q2
        q2 = None
        gc.collect()
    def run(label, fns):
        def go():
            global q2
            q2 = DeviceQueue(cpu)
            target = q2
            for fn in fns:
                getattr(target, ENQ)(fn)
            getattr(target, ENQ_ASYNC)(fns[0], f, 11, cpu)
            target.wait_for_host_value(f, 11)
            getattr(target, ENQ)(done.set)
            target = None
            if not done.wait(20):
                raise AssertionError("queue stopped after " + label)
            done.clear()
            cpu.synchronize(timeout=20)
            return "ran"
        add(label, go, "A!")
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: None
    run("host fn raises SystemExit", [raise_systemexit])
    run("host fn raises KeyboardInterrupt", [raise_kbd])
    run("host fn raises BaseException", [raise_base])
    run("host fn with raising __del__", [DelRaises()])
    run("host fn with raising __getattr__", [CallAttr()])
    run("host fn returns junk", [returns_junk])
    run("host fn infinite recursion", [deep])
    run("host fn drops its queue", [drop_queue_inside])
    run("host fn is a class", [int])
    run("host fn needs args", [lambda x: x])
    run("host fn is a bound builtin", [[].clear])
    def packed_raise():
        import ctypes
        ptr, data = PACK(raise_systemexit)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ptr)(data)
        return "ran"
    add("pack raising SystemExit", packed_raise, "A!")
    def restore():
        sys.unraisablehook = old_hook
    add("restore hook", restore, "A")

{"args": table_args, "uninit": table_uninit, "hostfn": table_hostfn}[group]()

failures = []
for label, thunk, expect in entries:
    sys.stderr.write("START " + label + "\n")
    sys.stderr.flush()
    try:
        r = thunk()
        outcome = "returned " + type(r).__name__
        ok = expect in ("A", "A!")
    except Exception as e:
        outcome = "raised %s: %s" % (type(e).__name__, str(e)[:200])
        if expect == "T":
            ok = isinstance(e, TypeError)
        elif expect == "A!":
            ok = False
        else:
            ok = True
    except BaseException as e:
        outcome = "raised BaseException %s" % type(e).__name__
        ok = False
    if not ok:
        failures.append([label, expect, outcome])
try:
    cpu.synchronize(timeout=20)
except Exception as e:
    failures.append(["final cpu.synchronize", "A", repr(e)])
print("RESULT" + json.dumps({"count": len(entries), "failures": failures}), flush=True)
"""


def _last_started(stderr):
    lines = [x for x in stderr.splitlines() if x.startswith("START ")]
    return lines[-1][6:] if lines else None


@pytest.mark.parametrize("group", ["args", "uninit", "hostfn"])
@pytest.mark.timeout(120)
def test_hostile_table(run_py, group):
    r = run_py(CHILD.replace("sys.argv[1]", repr(group)), timeout=100)
    assert r.returncode == 0, (
        f"child died with {r.returncode} during: {_last_started(r.stderr)!r}\n"
        + r.stderr[-3000:]
    )
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads(line[6:])
    assert result["count"] > 0
    assert result["failures"] == [], "\n".join(
        f"{label}: expected {exp}, got {got}" for label, exp, got in result["failures"]
    )
