"""Fuzzing the argument parsing of every public callable (SPEC §8, §10).

Hypothesis draws calls to every public callable of ``max.driver`` -- the
constructors, every method and property of ``Device``, ``DeviceQueue``,
``DeviceEvent`` and ``CompletionFlag`` (the ``__unsafe_*`` ones through
``getattr``), the module functions and the ``max.driver.driver`` helpers --
with random positional values (ints of every size, floats with nan/inf,
strings, bytes, containers, huge tuples, objects whose ``__index__``,
``__float__``, ``__eq__``, ``__hash__``, ``__repr__`` ... raise or return the
wrong type, objects that lie about their ``__class__``, our own objects in the
wrong places) and random keyword combinations (valid names, invalid names,
``str`` subclasses, duplicates of positional arguments).

Property: every call returns or raises an ``Exception`` (never another
``BaseException``, never a crash), each within 5 s; afterwards
``CPU().synchronize(timeout=10)`` completes and the interpreter exits with
status 0.

The fuzzer runs in a child interpreter (this file run as a script), so a
segfault or an abort fails the test with the child's stderr and the last
calls it made.  Every gate the fuzzer manages to set up with
``wait_for_host_value`` is opened again before the next call, and every host
function it can pass is harmless and never blocks, so the process can
always finish.

Environment:
    MAX_DRIVER_FUZZ_SECONDS  fuzzing time in seconds (default 30)
    MAX_DRIVER_FUZZ_SEED     base seed (default: random; printed on failure)
"""

from __future__ import annotations

import gc
import inspect
import json
import math
import os
import random
import subprocess
import sys
import time
import warnings

import pytest

FUZZ_SECONDS = float(os.environ.get("MAX_DRIVER_FUZZ_SECONDS", "30"))
CALL_LIMIT = 5.0  # seconds one fuzzed call may take
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
PACK = "__unsafe_pack_py_host_func"


# ==========================================================================
# The parent: a pytest test that runs this file as a child.


@pytest.mark.timeout(int(FUZZ_SECONDS) + 180)
def test_fuzz_every_public_callable(tmp_path, capsys):
    pytest.importorskip("hypothesis")
    status_file = tmp_path / "last_calls.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + pp if pp else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONWARNINGS", None)
    seed = os.environ.get("MAX_DRIVER_FUZZ_SEED") or str(random.randrange(2**32))
    cmd = [
        sys.executable,
        "-X",
        "faulthandler",
        os.path.abspath(__file__),
        "--child",
        str(FUZZ_SECONDS),
        seed,
        str(status_file),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        out, err = proc.communicate(timeout=FUZZ_SECONDS + 120)
        hung = False
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the child's faulthandler dumps its stacks
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        hung = True

    last = status_file.read_text() if status_file.exists() else "(none)"
    detail = (
        f"seed={seed} (rerun with MAX_DRIVER_FUZZ_SEED={seed})\n"
        f"--- last calls (oldest first):\n{last}\n"
        f"--- child stdout (tail):\n{out[-4000:]}\n"
        f"--- child stderr (tail):\n{err[-6000:]}"
    )
    assert not hung, "fuzz child hung\n" + detail
    stats_line = next(
        (x for x in out.splitlines() if x.startswith("FUZZ-STATS ")), None
    )
    stats = json.loads(stats_line.split(" ", 1)[1]) if stats_line else None
    if stats:
        with capsys.disabled():
            print(
                f"\n[fuzz] {stats['calls']} calls, {stats['signatures']} distinct "
                f"signatures over {stats['callables']} callables in "
                f"{stats['seconds']:.1f} s (seed {seed}; ok={stats['returned']}, "
                f"raised={stats['raised']}, gates opened={stats['gates']})"
            )
    assert proc.returncode == 0, f"child exited with {proc.returncode}\n" + detail
    assert "Fatal Python error" not in err, detail
    assert stats is not None, "child printed no statistics\n" + detail
    assert stats["failures"] == [], "\n".join(stats["failures"]) + "\n" + detail
    assert stats["not_covered"] == [], stats["not_covered"]
    assert stats["calls"] > 0
    assert "FINAL-SYNC-OK" in out, detail


# ==========================================================================
# The child.  Nothing below runs when pytest imports this file.


class Boom(Exception):
    """What the hostile objects raise."""


class IndexRaises:
    def __index__(self):
        raise Boom("__index__")


class IndexStr:
    def __index__(self):
        return "3"


class IndexFloat:
    def __index__(self):
        return 1.5


class IndexHuge:
    def __index__(self):
        return 2**100


class IndexNeg:
    def __index__(self):
        return -1


class IndexSmall:
    def __index__(self):
        return 1


class IntSub(int):
    def __index__(self):
        raise Boom("IntSub.__index__")

    def __repr__(self):
        raise Boom("IntSub.__repr__")


class FloatSub(float):
    def __float__(self):
        raise Boom("FloatSub.__float__")


class FloatRaises:
    def __float__(self):
        raise Boom("__float__")


class FloatStr:
    def __float__(self):
        return "1.0"


class FloatNan:
    def __float__(self):
        return math.nan


class EqRaises:
    def __eq__(self, other):
        raise Boom("__eq__")

    def __ne__(self, other):
        raise Boom("__ne__")

    __hash__ = object.__hash__


class EqWrong:
    def __eq__(self, other):
        return "yes"

    __hash__ = object.__hash__


class HashRaises:
    def __hash__(self):
        raise Boom("__hash__")


class ReprRaises:
    def __repr__(self):
        raise Boom("__repr__")

    __str__ = __repr__


class ReprWrong:
    def __repr__(self):
        return 5

    __str__ = __repr__


class BoolRaises:
    def __bool__(self):
        raise Boom("__bool__")


class IterRaises:
    def __iter__(self):
        raise Boom("__iter__")

    def __len__(self):
        raise Boom("__len__")


class IterBad:
    def __iter__(self):
        return 5


class GetattrRaises:
    def __getattr__(self, name):
        raise Boom("__getattr__ " + name)


class StrEqRaises(str):
    """A keyword name / string whose comparison raises."""

    def __eq__(self, other):
        raise Boom("str __eq__")

    __hash__ = str.__hash__


class StrSub(str):
    pass


class CallRaises:
    def __call__(self):
        raise Boom("__call__")


class CallExits:
    def __call__(self):
        raise SystemExit(7)


class CallDelRaises:
    def __call__(self):
        return None

    def __del__(self):
        raise Boom("__del__")


HOST_CALLS = [0]


def host_noop():
    return None


def host_count():
    HOST_CALLS[0] += 1


def host_raises():
    raise ValueError("host function raised (expected)")


def host_returns_junk():
    return object()


def _liar(cls):
    """An object that claims (through __class__) to be a ``cls``."""
    return type("Liar" + cls.__name__, (), {"__class__": property(lambda self: cls)})()


BOUNDARY_INTS = [
    0,
    1,
    -1,
    2,
    7,
    255,
    2**31 - 1,
    2**31,
    -(2**31),
    2**32,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    2**64 + 1,
    -(2**64),
    2**128,
    2**1000,
    -(2**1000),
]
SPECIAL_FLOATS = [
    0.0,
    -0.0,
    5e-324,
    1e-300,
    0.001,
    0.5,
    1.0,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    -1.0,
    -1e-300,
    2.0**64,
    9.3e18,
]
INTERESTING_STRINGS = [
    "",
    "cpu",
    "gpu",
    "gpu:all",
    "gpu:0,3",
    "gpu:",
    "gpu:x",
    "gpu:-1",
    "gpu:" + "9" * 5000,
    "cuda",
    "hip",
    "DeviceStream",
    "id",
    "timeout",
    "\x00",
    "\udcff",
    "é" * 10,
]
KW_NAMES = [
    "id",
    "device",
    "enable_timing",
    "timeout",
    "other",
    "event",
    "stream",
    "flag",
    "value",
    "end_event",
    "fn",
    "cpu",
    "self",
    "device_type",
    "device_specs",
    "name",
    "bogus",
    "",
    "timeout ",
    "Timeout",
    "__class__",
    "kwargs",
    "args",
]


class Ref:
    """A reference to a live object of the fuzzer's pool, resolved at call
    time (the pool changes while fuzzing)."""

    __slots__ = ("cat", "idx")

    def __init__(self, cat, idx):
        self.cat = cat
        self.idx = idx


class Child:
    """Everything the fuzz child needs; built after the driver is imported."""

    def __init__(self, seconds, seed, status_path):
        from max import driver

        self.driver = driver
        self.seconds = seconds
        self.seed = seed
        self.status_fd = os.open(status_path, os.O_WRONLY | os.O_CREAT, 0o644)
        self.recent = []
        self.calls = 0
        self.returned = 0
        self.raised = 0
        self.gates = 0
        self.signatures = set()
        self.failures = []
        self.unraisable = 0
        self.build_pool()
        self.build_values()
        self.build_entries()

    # ---------------------------------------------------------------- pool
    def build_pool(self):
        d = self.driver
        cpu = d.CPU()
        self.cpu = cpu
        devices = [cpu]
        for i in range(d.accelerator_count()):
            devices.append(d.Accelerator(i))
        queues = [cpu.default_queue, d.DeviceQueue(cpu), d.DeviceQueue(cpu)]
        events = [d.DeviceEvent(cpu), d.DeviceEvent(cpu, enable_timing=True)]
        flags = [d.CompletionFlag(cpu), d.CompletionFlag(cpu)]
        for acc in devices[1:]:
            queues += [acc.default_queue, d.DeviceQueue(acc)]
            events.append(d.DeviceEvent(acc, enable_timing=True))
            flags.append(d.CompletionFlag(acc))
        graphs = []
        for captured in (lambda q: None, lambda q: getattr(q, ENQ)(host_noop)):
            with d.capture(queues[1]) as graph:
                captured(queues[1])
            graphs.append(graph)
        uninit = []
        for T in (d.Device, d.DeviceQueue, d.DeviceEvent, d.CompletionFlag):
            try:
                obj = T.__new__(T)
            except Exception:
                continue
            uninit.append(obj)
        self.pool = {
            "device": devices,
            "queue": queues,
            "event": events,
            "flag": flags,
            "graph": graphs,
            "uninit": uninit or [object()],
            "spec": [
                d.DeviceSpec.cpu(),
                d.DeviceSpec(0, "gpu"),
                d.DeviceSpec(5, "gpu"),
                d.DeviceSpec(2**70, "cpu"),
            ],
            "type": [
                d.CPU,
                d.Accelerator,
                d.Device,
                d.DeviceQueue,
                d.DeviceEvent,
                d.CompletionFlag,
                d.DeviceSpec,
                int,
                object,
            ],
        }
        # Fixed members that replacement never evicts.
        self.pinned = {k: len(v) for k, v in self.pool.items()}
        self.pool_max = {"queue": 8, "event": 8, "flag": 6, "graph": 4}

    def remember(self, result):
        """New queues, events and flags join the pool, evicting (dropping)
        older ones: the fuzzer exercises objects dying with pending work."""
        d = self.driver
        for cat, T in (
            ("queue", d.DeviceQueue),
            ("event", d.DeviceEvent),
            ("flag", d.CompletionFlag),
            ("graph", d.DeviceGraph),
        ):
            if type(result) is T and not self.may_gate(result):
                lst = self.pool[cat]
                if len(lst) < self.pool_max[cat]:
                    lst.append(result)
                else:
                    lst[self.rnd.randrange(self.pinned[cat], len(lst))] = result
                return

    @staticmethod
    def may_gate(result):
        """A graph whose launches wait for a host value: launched by the
        fuzzer, it could hold a queue that no gate opener knows of."""
        return "wait for host value" in getattr(result, "to_dot", str)()

    def end_captures(self):
        """Keep the process finishable: every capture a call began ends
        (thrown away) through the queue that began it."""
        for q in self.pool["queue"]:
            if q.is_capturing:
                try:
                    q._discard_capture()
                except RuntimeError:
                    pass  # joined a capture another queue began

    def resolve(self, v, depth=0):
        if isinstance(v, Ref):
            lst = self.pool[v.cat]
            return lst[v.idx % len(lst)]
        if depth > 4:
            return v
        if type(v) is list:
            return [self.resolve(x, depth + 1) for x in v]
        if type(v) is tuple and len(v) < 100:
            return tuple(self.resolve(x, depth + 1) for x in v)
        if type(v) is dict:
            return {k: self.resolve(x, depth + 1) for k, x in v.items()}
        return v

    # -------------------------------------------------------------- values
    def build_values(self):
        from hypothesis import strategies as st

        d = self.driver
        self.hostile = [
            IndexRaises(),
            IndexStr(),
            IndexFloat(),
            IndexHuge(),
            IndexNeg(),
            IndexSmall(),
            IntSub(3),
            FloatSub(1.0),
            FloatRaises(),
            FloatStr(),
            FloatNan(),
            EqRaises(),
            EqWrong(),
            HashRaises(),
            ReprRaises(),
            ReprWrong(),
            BoolRaises(),
            IterRaises(),
            IterBad(),
            GetattrRaises(),
            StrEqRaises("gpu"),
            StrSub("cpu"),
            CallRaises(),
            CallExits(),
            CallDelRaises(),
            object(),
            NotImplemented,
            Ellipsis,
            range(3),
            frozenset({1}),
            bytearray(b"ab"),
            memoryview(b"ab"),
            1 + 2j,
            _liar(d.Device),
            _liar(d.CPU),
            _liar(d.DeviceQueue),
            _liar(d.DeviceEvent),
            _liar(d.CompletionFlag),
        ]
        self.host_fns = [
            host_noop,
            host_count,
            host_raises,
            host_returns_junk,
            CallRaises(),
            CallExits(),
            CallDelRaises(),
            lambda x: x,  # needs an argument: raises when run
            int,
            list,
            [].clear,
            d.CPU,
            d.DeviceQueue,  # called without args: raises when run
            d.accelerator_count,
        ]
        self.huge_tuple = (None,) * 200_000
        cats = list(self.pool)
        # Drawn as references too: Hypothesis may repr() what it draws, and
        # these objects' __repr__ raise (or they are huge).
        self.pool["hostile"] = self.hostile
        self.pool["hostfn"] = self.host_fns
        self.pool["huge"] = [self.huge_tuple]
        self.pinned.update(hostile=0, hostfn=0, huge=0)

        def r(cat):
            return st.builds(Ref, st.just(cat), st.integers(0, 63))

        ref = st.builds(Ref, st.sampled_from(cats), st.integers(0, 15))
        leaves = st.one_of(
            st.integers(),
            st.sampled_from(BOUNDARY_INTS),
            st.integers(-(2**70), 2**70),
            st.floats(),
            st.sampled_from(SPECIAL_FLOATS),
            st.text(max_size=12),
            st.sampled_from(INTERESTING_STRINGS),
            st.binary(max_size=12),
            st.none(),
            st.booleans(),
            r("hostile"),
            r("hostile"),
            r("hostfn"),
            ref,
            ref,
            ref,
            r("huge"),
        )
        self.st_value = st.recursive(
            leaves,
            lambda c: st.one_of(
                st.lists(c, max_size=4),
                st.tuples(c, c),
                st.dictionaries(st.text(max_size=4), c, max_size=3),
            ),
            max_leaves=6,
        )
        # Keyword names are drawn as plain strings (Hypothesis compares dict
        # keys); a "\x00E:" or "\x00S:" prefix asks one_call() to turn the
        # name into a StrEqRaises or StrSub.
        self.st_kwname = st.one_of(
            st.sampled_from(KW_NAMES),
            st.text(max_size=6),
            st.sampled_from(KW_NAMES).map(lambda n: "\x00S:" + n),
            st.sampled_from(KW_NAMES).map(lambda n: "\x00E:" + n),
        )
        specs = st.lists(st.one_of(r("spec"), self.st_value), max_size=4)
        cli = st.one_of(
            st.sampled_from(INTERESTING_STRINGS),
            st.lists(st.one_of(st.integers(-3, 10), self.st_value), max_size=3),
        )
        small_u64 = st.one_of(
            st.integers(0, 4), st.sampled_from([2**32, 2**63, 2**64 - 1])
        )
        self.plausible = {
            "id": st.sampled_from([-1, 0, 0, 1]),
            "device": r("device"),
            "other": r("device"),
            "cpu": r("device"),
            "stream": r("queue"),
            "event": r("event"),
            "end_event": r("event"),
            "flag": r("flag"),
            "value": small_u64,
            "timeout": st.one_of(
                st.none(), st.floats(0, 1), st.just(0), st.integers(0, 1)
            ),
            "enable_timing": st.booleans(),
            "fn": st.builds(Ref, st.just("hostfn"), st.integers(0, 3)),
            "device_type": st.sampled_from(["cpu", "gpu"]),
            "device_specs": specs,
            "device_spec_lists": specs,
            "device_inputs": cli,
            "name": st.sampled_from(["DeviceStream", "nope", "CPU"]),
        }

    # ------------------------------------------------------------- entries
    def build_entries(self):
        """One entry per public callable (and property), found by
        introspection so that a new method is fuzzed (or reported)."""
        import max._core.driver as core
        import max.driver.driver as helpers

        d = self.driver
        types = {
            "device": d.Device,
            "queue": d.DeviceQueue,
            "event": d.DeviceEvent,
            "flag": d.CompletionFlag,
            "graph": d.DeviceGraph,
        }
        entries = []
        covered = set()
        self.not_covered = []

        def params_of(obj, name):
            if name == "wait_for":
                return [("stream", "device", "event")]
            if name in ("calculate_virtual_device_count",):
                return ["*device_spec_lists"]
            if name in ("calculate_virtual_device_count_from_cli",):
                return ["*device_inputs"]
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                return {"CPU": ["id"], "Accelerator": ["id"]}.get(name, [])
            out = []
            for p in sig.parameters.values():
                if p.name == "self" or p.kind == p.POSITIONAL_ONLY:
                    continue
                if p.kind == p.VAR_POSITIONAL:
                    out.append("*" + p.name)
                elif p.kind != p.VAR_KEYWORD:
                    out.append(p.name)
            return out

        for cat, T in types.items():
            for name in dir(T):
                if name.startswith("__") and name.endswith("__"):
                    continue
                attr = inspect.getattr_static(T, name)
                label = f"{T.__name__}.{name}"
                covered.add(label)
                if isinstance(attr, staticmethod):
                    fn = getattr(T, name)
                    entries.append(("func", label, fn, params_of(fn, name)))
                elif inspect.isdatadescriptor(attr):
                    entries.append(("get", label, (cat, name), []))
                    entries.append(("set", label, (cat, name), ["value"]))
                    entries.append(("del", label, (cat, name), []))
                elif callable(attr):
                    params = params_of(getattr(T, name), name)
                    entries.append(("method", label, (cat, name), params))
                    entries.append(("unbound", label, (T, name), params))
                else:
                    self.not_covered.append(label)
            for op in ("==", "!=", "<", "hash", "repr", "str", "bool", "in"):
                entries.append(("op", f"{T.__name__} {op}", (cat, op), ["other"]))

        funcs = {}
        for mod in (d, helpers, core):
            names = list(getattr(mod, "__all__", [])) + [
                n for n in dir(mod) if not n.startswith("_")
            ]
            names.append(PACK)
            for n in names:
                obj = getattr(mod, n, None)
                if obj is None or not callable(obj) or inspect.ismodule(obj):
                    continue
                if not (getattr(obj, "__module__", None) or "").startswith("max"):
                    continue  # typing helpers, dataclass, ...
                funcs.setdefault(id(obj), (f"{mod.__name__}.{n}", obj, n))
        funcs[id(d.DeviceSpec.cpu)] = ("DeviceSpec.cpu", d.DeviceSpec.cpu, "cpu")
        funcs[id(d.DeviceSpec.accelerator)] = (
            "DeviceSpec.accelerator",
            d.DeviceSpec.accelerator,
            "accelerator",
        )
        mod_getattr = d.__getattr__
        funcs[id(mod_getattr)] = ("max.driver.__getattr__", mod_getattr, "getattr")
        for label, obj, n in funcs.values():
            entries.append(("func", label, obj, params_of(obj, n)))
            covered.add(label)
        for must in (
            "CPU",
            "Accelerator",
            "DeviceQueue",
            "DeviceEvent",
            "CompletionFlag",
            PACK,
            "Device." + ENQ,
            "Device." + ENQ_ASYNC,
            "DeviceQueue." + ENQ,
            "DeviceQueue." + ENQ_ASYNC,
            "DeviceQueue.wait_for_host_value",
            "load_devices",
            "calculate_virtual_device_count_from_cli",
        ):
            if not any(c == must or c.endswith("." + must) for c in covered):
                self.not_covered.append(must)
        # Weight the calls that change queue state, so that they interleave.
        busy = ("wait_for_host_value", "wait_for", "record_event", ENQ, ENQ_ASYNC)
        entries += [e for e in entries if e[0] == "method" and e[2][1] in busy] * 2
        self.entries = entries

    # ----------------------------------------------------------- the calls
    def note(self, label):
        self.recent.append(label)
        if len(self.recent) > 40:
            del self.recent[:20]
        text = "\n".join(self.recent[-20:]).encode("utf-8", "replace")
        os.ftruncate(self.status_fd, 0)
        os.pwrite(self.status_fd, text, 0)

    def describe(self, v, depth=0):
        """A repr that never runs the hostile objects' methods."""
        t = type(v)
        if isinstance(v, Ref):
            return f"<{v.cat}#{v.idx}>"
        if t is bool or v is None:
            return repr(v)
        if t is int:
            return repr(v) if abs(v) < 2**130 else f"<int {v.bit_length()} bits>"
        if t is float:
            return repr(v)
        if t in (str, bytes):
            return repr(v[:24]) + ("..." if len(v) > 24 else "")
        if t in (list, tuple) and depth < 2:
            if len(v) > 6:
                return f"<{t.__name__} of {len(v)}>"
            inner = ", ".join(self.describe(x, depth + 1) for x in v)
            return f"[{inner}]" if t is list else f"({inner})"
        if t is dict and depth < 2:
            inner = ", ".join(
                f"{self.describe(k, 2)}: {self.describe(x, depth + 1)}"
                for k, x in list(v.items())[:4]
            )
            return "{" + inner + "}"
        return f"<{t.__name__}>"

    def draw_args(self, data, params):
        from hypothesis import strategies as st

        mode = data.draw(st.sampled_from(["plausible", "plausible", "mixed", "random"]))
        names = []
        variadic = None
        for p in params:
            if isinstance(p, tuple):
                names.append(data.draw(st.sampled_from(p)))
            elif p.startswith("*"):
                variadic = p[1:]
            else:
                names.append(p)
        args, kwargs = [], {}
        if mode == "random":
            args = data.draw(st.lists(self.st_value, max_size=5))
            kwargs = data.draw(
                st.dictionaries(self.st_kwname, self.st_value, max_size=3)
            )
        else:
            n_pos = data.draw(st.integers(0, len(names)))
            for i, name in enumerate(names):
                strat = self.plausible.get(name, self.st_value)
                if mode == "mixed" and data.draw(st.booleans()):
                    strat = self.st_value
                v = data.draw(strat)
                if i < n_pos:
                    args.append(v)
                elif data.draw(st.integers(0, 5)):  # mostly keep it
                    kwargs[name] = v
            if variadic:
                strat = self.plausible.get(variadic, self.st_value)
                args += data.draw(st.lists(strat, max_size=3))
            if mode == "mixed":
                extra = data.draw(st.integers(0, 3))
                if extra == 1:
                    args.append(data.draw(self.st_value))
                elif extra == 2:
                    kwargs[data.draw(self.st_kwname)] = data.draw(self.st_value)
                elif extra == 3 and names:
                    # A keyword duplicating a positional argument.
                    kwargs[data.draw(st.sampled_from(names))] = data.draw(self.st_value)
        if data.draw(st.integers(0, 60)) == 0:
            args = list(self.huge_tuple)  # a huge *args
        return args, kwargs

    def draw_call(self, data):
        from hypothesis import strategies as st

        kind, label, target, params = data.draw(st.sampled_from(self.entries))
        args, kwargs = self.draw_args(data, params)
        self_ref = None
        if kind in ("method", "get", "set", "del", "op"):
            cat = target[0]
            # Mostly a live receiver; sometimes an uninitialised one.
            if data.draw(st.integers(0, 9)) == 0:
                self_ref = Ref("uninit", data.draw(st.integers(0, 15)))
            else:
                self_ref = Ref(cat, data.draw(st.integers(0, 15)))
        elif kind == "unbound":
            self_ref = data.draw(
                st.one_of(
                    st.builds(Ref, st.sampled_from(list(self.pool)), st.integers()),
                    self.st_value,
                )
            )
        return kind, label, target, self_ref, args, kwargs

    def invoke(self, kind, target, recv, args, kwargs):
        if kind == "func":
            return target(*args, **kwargs)
        if kind == "method":
            return getattr(recv, target[1])(*args, **kwargs)
        if kind == "unbound":
            T, name = target
            return getattr(T, name)(recv, *args, **kwargs)
        if kind == "get":
            return getattr(recv, target[1])
        if kind == "set":
            value = args[0] if args else kwargs.get("value")
            return setattr(recv, target[1], value)
        if kind == "del":
            return delattr(recv, target[1])
        other = args[0] if args else None
        op = target[1]
        if op == "==":
            return recv == other
        if op == "!=":
            return recv != other
        if op == "<":
            return recv < other
        if op == "hash":
            return hash(recv)
        if op == "repr":
            return repr(recv)
        if op == "str":
            return str(recv)
        if op == "bool":
            return bool(recv)
        return recv in [other, recv]

    def after_success(self, kind, target, recv, args, kwargs, result):
        """Keep the process finishable: open any gate the call set up,
        run packed trampolines exactly once, adopt new objects."""
        d = self.driver
        name = target[1] if kind in ("method", "unbound") else None
        if name == "wait_for_host_value" and not recv.is_capturing:
            flag = args[0] if args else kwargs.get("flag")
            value = args[1] if len(args) > 1 else kwargs.get("value")
            self.open_gate(recv, flag, value)
        elif kind == "func" and getattr(target, "__name__", "") == PACK:
            import ctypes

            ptr, data = result
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ptr)(data)
        if isinstance(
            result, (d.DeviceQueue, d.DeviceEvent, d.CompletionFlag, d.DeviceGraph)
        ):
            self.remember(result)

    def open_gate(self, queue, flag, value):
        """Signal ``value`` until ``queue`` gets past its gate.  Re-signalled
        because an earlier async host function on the same flag may reset
        or overwrite it once more."""
        self.gates += 1
        deadline = time.monotonic() + 2 * CALL_LIMIT
        while True:
            flag.signal(value)
            try:
                queue.synchronize(timeout=0.05)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        "queue stayed gated after wait_for_host_value was "
                        "signalled with its value"
                    ) from None

    def make_kwargs(self, drawn):
        kwargs = {}
        try:
            for k, v in drawn.items():
                if k.startswith("\x00S:"):
                    k = StrSub(k[4:])
                elif k.startswith("\x00E:"):
                    k = StrEqRaises(k[4:])
                kwargs[k] = self.resolve(v)
        except Boom:
            return None  # two keys compared: the dict itself cannot be built
        return kwargs

    def one_call(self, data):
        import faulthandler

        kind, label, target, self_ref, args, kwargs = self.draw_call(data)
        recv = self.resolve(self_ref) if self_ref is not None else None
        args = [self.resolve(a) for a in args] if len(args) < 100 else args
        kwargs = self.make_kwargs(kwargs)
        if kwargs is None:
            return
        shown = (
            f"{kind} {label}"
            + (f" self={self.describe(self_ref)}" if self_ref is not None else "")
            + f" args={self.describe(tuple(args))}"
            + " kwargs={"
            + ", ".join(
                f"{str.__repr__(k)}: {self.describe(v)}" for k, v in kwargs.items()
            )
            + "}"
        )
        self.note(shown)
        self.signatures.add(
            (
                kind,
                label,
                tuple(type(a).__name__ for a in args[:8]),
                tuple(sorted(str.__str__(k) for k in kwargs)),
            )
        )
        self.calls += 1
        faulthandler.dump_traceback_later(CALL_LIMIT, exit=True)
        try:
            result = self.invoke(kind, target, recv, args, kwargs)
        except Exception:
            self.raised += 1
            return
        except BaseException as e:
            msg = f"{shown} raised {type(e).__name__} (not an Exception)"
            self.failures.append(msg)
            raise AssertionError(msg) from None
        finally:
            faulthandler.cancel_dump_traceback_later()
        self.returned += 1
        faulthandler.dump_traceback_later(3 * CALL_LIMIT, exit=True)
        try:
            self.after_success(kind, target, recv, args, kwargs, result)
        finally:
            faulthandler.cancel_dump_traceback_later()
        del result

    def health_check(self):
        import faulthandler

        self.note("health check: CPU().synchronize(timeout=5)")
        faulthandler.dump_traceback_later(3 * CALL_LIMIT, exit=True)
        self.end_captures()
        try:
            self.cpu.synchronize(timeout=CALL_LIMIT)
        except TimeoutError:
            msg = (
                "CPU device did not drain within 5 s: a call left a queue "
                "gated or work blocked; recent calls:\n" + "\n".join(self.recent)
            )
            self.failures.append(msg)
            raise AssertionError(msg) from None
        except Exception:
            pass  # e.g. a driver error reported by an accelerator
        finally:
            faulthandler.cancel_dump_traceback_later()

    def run(self):
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hseed
        from hypothesis import strategies as st

        self.rnd = random.Random(self.seed)
        deadline = time.monotonic() + self.seconds
        t0 = time.monotonic()
        batch = 0

        @settings(
            max_examples=20,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # the pool is stateful: no shrinking
            suppress_health_check=list(HealthCheck),
            derandomize=False,
        )
        @given(st.data())
        def fuzz(data):
            # No deadline check in here: drawing must not depend on outside
            # state.  A batch is short; the loop below checks the deadline.
            for _ in range(data.draw(st.integers(1, 12))):
                self.one_call(data)

        while time.monotonic() < deadline and not self.failures:
            try:
                hseed(self.seed * 1000 + batch)(fuzz)()
            except AssertionError:
                break  # recorded in self.failures
            except Exception as e:  # Hypothesis' own errors (e.g. Flaky)
                if not self.failures:
                    self.failures.append(f"hypothesis: {type(e).__name__}: {e}")
                break
            batch += 1
            gc.collect()  # drop evicted objects (and their pending work)
            self.health_check()
        return time.monotonic() - t0


def child_main(seconds, seed, status_path):
    import faulthandler
    import signal

    faulthandler.register(signal.SIGTERM, all_threads=True)
    warnings.simplefilter("ignore")
    unraisable = [0]

    def hook(u):
        unraisable[0] += 1

    sys.unraisablehook = hook
    child = Child(seconds, seed, status_path)
    try:
        elapsed = child.run()
    except AssertionError:
        elapsed = seconds
    child.note("final: CPU().synchronize(timeout=10)")
    from max import driver

    child.end_captures()
    driver.CPU().synchronize(timeout=10)
    print("FINAL-SYNC-OK", flush=True)
    stats = {
        "calls": child.calls,
        "returned": child.returned,
        "raised": child.raised,
        "gates": child.gates,
        "signatures": len(child.signatures),
        "callables": len({e[1] for e in child.entries}),
        "seconds": elapsed,
        "failures": child.failures,
        "not_covered": child.not_covered,
        "unraisable": unraisable[0],
        "host_calls": HOST_CALLS[0],
    }
    print("FUZZ-STATS " + json.dumps(stats), flush=True)
    # Then a normal interpreter exit with the pool's objects still alive:
    # the parent checks the exit status.


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
    child_main(float(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
