"""Model-based randomized tests of ordering (SPEC §4-§8, §10).

Hypothesis draws a *program*: a list of operations on a device (create a
queue, enqueue a host function, record / re-record an event, ``wait_for`` a
queue, the device or an event, ``wait_for_host_value``, signal a flag from
the main thread, from another Python thread or from inside a host function,
async host functions, ``synchronize`` / ``is_ready`` with a model-predicted
outcome, dropping the last reference to queues, events and flags, and bursts
of concurrent enqueues from two threads).  Operations are issued from up to
three Python threads (one at a time, so the program order is well defined).

``compile_program`` turns the raw draw into a resolved program and a
reference model: a graph of *nodes* (host functions, async host functions,
flag signals, gates, waits, kickoffs) whose edges are the happens-before
order the SPEC guarantees:

- an item on a queue runs after every earlier item on that queue;
- ``q.wait_for(r)`` makes later items of ``q`` wait for ``r``'s items
  enqueued before the call; ``wait_for(device)`` the same on the default
  queue; ``wait_for(event)`` for the event's recorded point *at call time*;
- ``q.wait_for_host_value(f, v)`` makes later items of ``q`` wait for the
  signal of ``v`` into ``f``.  Every gate flag gets exactly one correct
  value (non-zero), possibly preceded by wrong values signalled by the same
  thread, so the flag holds ``v`` forever once it was signalled: the model
  stays exact and a gate that opens on a wrong value is caught;
- an async host function runs after its queue's earlier items and before
  its flag is signalled (queues gated on that flag wait for it).

Programs never deadlock by construction: a wait captures a point that
already exists; a flag whose signaller is a host function is only handed to
one that does not (transitively) wait on that flag; every flag still
unsignalled at the end is signalled by the main thread.

``execute`` runs the program; host functions append to a shared log (and a
flag signal is logged just before its store).  ``check`` then verifies
(1) every host function ran exactly once, dropped queues included,
(2) the log order extends the happens-before partial order,
(3) gated functions ran after the signal and observed the signalled value,
(4) the final ``device.synchronize`` completed (no deadlock).  Mid-program
``synchronize`` calls are checked too: one the model says can complete must
return and leave every predecessor in the log; one that depends on a signal
not yet issued must raise ``TimeoutError`` and nothing behind it has run.

To make a missing edge visible rather than a lucky race, some host
functions sleep and some are *held* (they block their own queue until the
end of the program, a pseudo-signal in the model), and record / wait / gate
operations may bring a slow or held function before the captured point and a
host function after the wait.  Failures shrink to a minimal program, printed
(resolved) by ``note``; e.g. ignoring ``wait_for(event)`` shrinks to
``queue; host(q1, slow); record(q1); wait_for(q0, event); host(q0)``.

Buffers (SPEC §12, ``model_buffers.py``): programs also allocate buffers
on queues (pageable CPU memory; with an accelerator also pinned and device
memory of it and device memory of a second one), copy between them and
between contiguous views of them (staged from pageable memory, complete
into it, enqueued between accelerators' memory, peer copies included),
fill (``Buffer.zeros``), write and read elements from the host, rebind them
to other queues, take NumPy aliases that host functions read and write, and
drop them.  The model knows the value of every element: programs are kept
race-free (an access is only issued when every conflicting earlier one is
among its happens-before ancestors), so each read must see exactly the last
value written before it in program order.  Host functions check what they
read through aliases, host reads what they return, and once everything is
done one surviving reference of every allocation is read back.  Host points
(``Model.host_point``) are the issuing thread's moments after its waits:
everything enqueued later runs after them.  Copies and host functions
placed around a copy on its queues (slow, held) make a copy that runs too
early show in the data; fixed programs (``test_fixed_buffer_programs``) do
so deterministically, e.g. a copy into a buffer whose queue is held while
the destination's old contents are read there, and work that the old rule
(copies joined their source's queue) held back: a fill on the source's
queue that a host read then waits for.

On an accelerator, programs also drop every reference to a buffer while
other queues (of its device and of another) still use it, import from a
foreign producer whose stream work is pending behind a flag, and export to
a foreign consumer's busy stream, giving the capsule back before or after
the drop (``model_buffers.py``).

The same model runs against the fake GPU driver (CUDA with memory pools,
HIP without) in a child pytest with ``MAX_DRIVER_MODEL_DEVICE=gpu``; every
violation of a real-driver rule the fake records fails the program.
``MAX_DRIVER_MODEL_EXAMPLES`` raises the number of programs (soak runs); the
figures are printed by the last test of the file.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fake_driver.fakelib import load, take_violations
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from model_buffers import (
    BUFFER_KINDS,
    FOREIGN_KINDS,
    BufferCompiler,
    BufferRunner,
    aux_devices,
    aux_queue,
    host_accesses,
)

from max import driver
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_DIR = REPO_ROOT / "tests" / "fake_driver"

ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
U64 = 2**64 - 1

DEVICE_KIND = os.environ.get("MAX_DRIVER_MODEL_DEVICE", "cpu")
# Buffers on a second accelerator (peer copies) in the accelerator variant.
SECOND_GPU = DEVICE_KIND == "gpu" and driver.accelerator_count() > 1
EXAMPLES = int(os.environ.get("MAX_DRIVER_MODEL_EXAMPLES", "150"))
# A synchronize the model says completes; also the final one (a deadlock).
WAIT = 15.0
# Extra (model) queues per program, besides the default queue.
MAX_QUEUES = 4
MAX_OPS = 56


# --------------------------------------------------------------------------
# Reference model


@dataclass
class Node:
    # host | async | sig | asig | gate | wait | kick, and for buffers
    # point (a host point) | fill | copy
    kind: str
    preds: list
    label: tuple | None = None  # what the log shows for observable nodes
    queue: int | None = None
    # sig nodes: who signals (None until assigned): main | thread | end | host
    signaller: str | None = None


OBSERVABLE = ("host", "async", "sig")


class Model:
    def __init__(self):
        self.nodes: list[Node] = []
        self.by_label: dict = {}
        # The last host point: a moment of the issuing thread after which
        # everything enqueued runs (SPEC §12.6: a host read returns after
        # its waits, and later work is enqueued after it returned).
        self.frontier = None

    def add(self, kind, preds, label=None, queue=None):
        n = len(self.nodes)
        preds = [p for p in [*preds, self.frontier] if p is not None]
        self.nodes.append(Node(kind, preds, label, queue))
        if label is not None:
            self.by_label[label] = n
        return n

    def host_point(self, preds):
        """The issuing thread, once it waited for ``preds``; every node
        added later runs after it."""
        self.frontier = self.add("point", preds)
        return self.frontier

    def ancestors(self, n, memo=None):
        """Every node that must complete before ``n`` (``n`` excluded)."""
        if memo is not None and n in memo:
            return memo[n]
        seen, stack = set(), list(self.nodes[n].preds)
        while stack:
            p = stack.pop()
            if p not in seen:
                seen.add(p)
                stack.extend(self.nodes[p].preds)
        if memo is not None:
            memo[n] = seen
        return seen

    def closure(self, targets):
        """``targets`` and all their ancestors."""
        out = set()
        for t in targets:
            if t is not None:
                out.add(t)
                out |= self.ancestors(t)
        return out

    def completes(self, n):
        """True when ``n`` completes without further action of the main
        thread (every signal it depends on was issued or handed over)."""
        for m in self.closure([n]):
            node = self.nodes[m]
            if node.kind == "sig" and node.signaller is None:
                return False
        return True

    def observable(self, nodes):
        return sorted(m for m in nodes if self.nodes[m].kind in OBSERVABLE)

    def doomed_observable(self):
        """Observable nodes that cannot have run yet (they depend on a
        signal that nobody has issued or been handed)."""
        return [
            m
            for m in range(len(self.nodes))
            if self.nodes[m].kind in OBSERVABLE and not self.completes(m)
        ]


# --------------------------------------------------------------------------
# Programs: raw draw -> resolved operations + model


KINDS = (
    ["host"] * 8 + ["record"] * 3 + ["wait_q"] * 3 + ["wait_ev"] * 3
    + ["gate"] * 3 + ["flag"] * 2 + ["rerecord"] * 2
    + ["wait_dev", "event", "signal", "async",
    "gate_async", "sync_q", "sync_ev", "sync_dev", "is_ready", "drop_q",
    "drop_ev", "drop_flag", "burst", "queue"]
    + BUFFER_KINDS + FOREIGN_KINDS
)  # fmt: skip

raw_op = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from([0, 0, 0, 1, 2]),  # issuing thread (0 = main)
    # a, b: which queue / event / flag (an index into the live ones), option
    # bits; drawn uniformly (small integers would favour the default queue).
    st.sampled_from(range(8)),
    st.sampled_from(range(8)),
    st.one_of(st.integers(0, 15), st.integers(0, U64)),
)


@st.composite
def raw_programs(draw):
    """``(initial queues, [raw op, ...])``.  The length is drawn first (plain
    lists stay short on average) and a failing program still shrinks to a
    short one."""
    n_queues = draw(st.integers(0, MAX_QUEUES))
    n_bufs = draw(st.integers(0, 3))
    n_ops = draw(st.integers(0, MAX_OPS))
    bufs = [("buf", *draw(raw_op)[1:]) for _ in range(n_bufs)]
    return n_queues, bufs + [draw(raw_op) for _ in range(n_ops)]


@dataclass
class Op:
    kind: str
    thread: int
    args: dict = field(default_factory=dict)

    def __str__(self):
        a = ", ".join(f"{k}={v!r}" for k, v in self.args.items() if k[0] != "_")
        return f"[t{self.thread}] {self.kind}({a})"


@dataclass
class Plan:
    ops: list
    model: Model
    n_host: int = 0
    n_async: int = 0
    gate_flags: dict = field(default_factory=dict)  # fid -> (value, wrongs)
    async_flags: dict = field(default_factory=dict)  # aid -> value
    end_signals: list = field(default_factory=list)  # fids the end signals
    n_holds: int = 0  # host functions held until the end of the program
    buffers: BufferCompiler | None = None  # buffers, views, aliases
    final_buffers: list = field(default_factory=list)  # checked at the end

    def describe(self):
        lines = [str(op) for op in self.ops]
        lines.append(
            f"end: release {self.n_holds} held host functions, signal flags "
            f"{self.end_signals} from the main thread"
        )
        if self.final_buffers:
            lines.append(f"then read {self.final_buffers} (what, id, values)")
        return "\n".join(lines)


def _pick(seq, i):
    return seq[i % len(seq)] if seq else None


def compile_program(raw) -> Plan:
    """Resolve indices against live objects (skipping what does not apply)
    and build the happens-before model.  ``raw`` is ``(initial queues,
    [(kind, thread, a, b, c), ...])``."""
    n_queues, raw_ops = raw
    raw_ops = [("queue", 0, 0, 0, 0)] * n_queues + list(raw_ops)
    m = Model()
    plan = Plan([], m)
    live_q = [0]
    last = {0: None}  # queue -> last node
    created_q = 0
    live_e, ev_point, n_ev = [], {}, 0
    live_f, flag_sig = [], {}
    n_f = 0
    live_a, async_sig = [], {}
    unassigned = []  # gate flags without a signaller, in creation order
    bufs = plan.buffers = BufferCompiler(
        m, plan, last, live_q, Op, DEVICE_KIND == "gpu", SECOND_GPU
    )

    def push(q, kind, extra=(), label=None):
        n = m.add(kind, [last[q], *extra], label, q)
        last[q] = n
        return n

    def add_host(q, thread, b, c):
        """A host function on ``q``: b bits: 1 sleep, 2 through the device
        (default queue), 4 observe a flag; c % 8: 2 or 6 held, 3 signal a
        flag."""
        hid = plan.n_host
        plan.n_host += 1
        args = {"q": q, "id": hid, "sleep": bool(b & 1), "via_device": bool(b & 2)}
        hold = []
        if c % 4 == 2:
            # Held: blocks (its queue only) until the end of the program, so
            # that whatever must wait for it is certainly still pending while
            # the rest of the program is issued.
            args["hold"] = plan.n_holds
            hold = [m.add("sig", [], ("R", plan.n_holds))]
            plan.n_holds += 1
        n = push(q, "host", hold, label=("H", hid))
        # Observe one flag whose signal this function must see.
        live_labels = {("S", f) for f in live_f} | {("AS", x) for x in live_a}
        seen = sorted(
            s
            for s in m.ancestors(n)
            if m.nodes[s].kind in ("sig", "asig") and m.nodes[s].label in live_labels
        )
        if seen and b & 4:
            s = _pick(seen, c)
            args["observe"] = m.nodes[s].label
        # Become the signaller of a flag that this one does not wait for.
        if c % 8 == 3 and unassigned:
            fid = _pick(unassigned, c >> 3)
            s = flag_sig[fid]
            if s not in m.ancestors(n):
                m.nodes[s].preds = [n]
                m.nodes[s].signaller = "host"
                unassigned.remove(fid)
                args["signals"] = fid
        return Op("host", thread, args)

    def before(q, thread, bits):
        """Macro bits of record / wait ops: first a slow (2) or held (4) host
        function on ``q``, the queue whose point is captured."""
        if bits & 6:
            plan.ops.append(add_host(q, thread, 1, 2 if bits & 4 else 0))

    def after(q, thread, bits):
        """... and then (8) a host function on the waiting queue."""
        if bits & 8:
            plan.ops.append(add_host(q, thread, 0, 0))

    def new_flag(thread, b, c):
        nonlocal n_f
        n_f += 1
        value = c if c else 1
        wrongs = [w for w in (value ^ 1, (value + 1) & U64, 0)[: b % 4] if w != value]
        plan.gate_flags[n_f] = (value, wrongs)
        flag_sig[n_f] = m.add("sig", [], ("S", n_f))
        live_f.append(n_f)
        unassigned.append(n_f)
        return Op("flag", thread, {"f": n_f, "value": value, "wrongs": wrongs})

    for kind, thread, a, b, c in raw_ops:
        op = None
        if kind == "host":
            op = add_host(_pick(live_q, a), thread, b, c)
        elif kind == "queue":
            if len(live_q) - 1 >= MAX_QUEUES or created_q >= 2 * MAX_QUEUES:
                continue
            created_q += 1
            last[created_q] = None
            live_q.append(created_q)
            op = Op("queue", thread, {"q": created_q})
        elif kind == "record":
            q = _pick(live_q, a)
            before(q, thread, c)
            n_ev += 1
            live_e.append(n_ev)
            ev_point[n_ev] = last[q]
            op = Op("record", thread, {"q": q, "e": n_ev, "kw": bool(b & 1)})
        elif kind == "event":
            n_ev += 1
            live_e.append(n_ev)
            ev_point[n_ev] = None
            op = Op("event", thread, {"e": n_ev})
        elif kind == "rerecord":
            if not live_e:
                continue
            q, e = _pick(live_q, a), _pick(live_e, b)
            before(q, thread, c)
            ev_point[e] = last[q]
            op = Op("rerecord", thread, {"q": q, "e": e, "kw": bool(c & 1)})
        elif kind == "wait_q":
            q, r = _pick(live_q, a), _pick(live_q, b)
            before(r, thread, c)
            push(q, "wait", [last[r]])
            plan.ops.append(
                Op("wait_q", thread, {"q": q, "other": r, "kw": bool(c & 1)})
            )
            after(q, thread, c)
            continue
        elif kind == "wait_dev":
            q = _pick(live_q, a)
            before(0, thread, c)
            push(q, "wait", [last[0]])
            plan.ops.append(Op("wait_dev", thread, {"q": q, "kw": bool(c & 1)}))
            after(q, thread, c)
            continue
        elif kind == "wait_ev":
            if not live_e:
                continue
            q, e = _pick(live_q, a), _pick(live_e, b)
            push(q, "wait", [ev_point[e]])
            plan.ops.append(Op("wait_ev", thread, {"q": q, "e": e, "kw": bool(c & 1)}))
            after(q, thread, c)
            continue
        elif kind == "flag":
            op = new_flag(thread, b, c)
        elif kind == "gate":
            if not live_f or c & 4:  # on a new flag
                plan.ops.append(new_flag(thread, b, c >> 4))
                b = len(live_f) - 1
            q, f = _pick(live_q, a), _pick(live_f, b)
            push(q, "gate", [flag_sig[f]])
            plan.ops.append(Op("gate", thread, {"q": q, "f": f, "kw": bool(c & 1)}))
            after(q, thread, c)
            continue
        elif kind == "signal":
            if not unassigned:
                continue
            f = _pick(unassigned, b)
            unassigned.remove(f)
            mode = "thread" if a & 1 else "main"
            m.nodes[flag_sig[f]].signaller = mode
            op = Op("signal", thread, {"f": f, "mode": mode, "delay_ms": c % 4})
        elif kind == "async":
            q = _pick(live_q, a)
            aid = plan.n_async
            plan.n_async += 1
            value = c if c else 1
            plan.async_flags[aid] = value
            k = push(q, "kick")
            an = m.add("async", [k], ("A", aid))
            s = m.add("asig", [an], ("AS", aid))
            m.nodes[s].signaller = "worker"
            async_sig[aid] = s
            live_a.append(aid)
            args = {"q": q, "a": aid, "value": value, "via_device": bool(b & 1)}
            op = Op("async", thread, args)
            if b & 6:  # gate a queue on it right away
                plan.ops.append(op)
                g = _pick(live_q, b >> 1)
                push(g, "gate", [s])
                op = Op("gate_async", thread, {"q": g, "a": aid, "kw": False})
        elif kind == "gate_async":
            if not live_a:
                continue
            q, aid = _pick(live_q, a), _pick(live_a, b)
            push(q, "gate", [async_sig[aid]])
            op = Op("gate_async", thread, {"q": q, "a": aid, "kw": bool(c & 1)})
        elif kind in ("sync_q", "sync_ev", "sync_dev", "is_ready"):
            if kind == "sync_q":
                q = _pick(live_q, a)
                targets, args = [last[q]], {"q": q}
            elif kind == "sync_dev":
                # The model device's queues (ints; buffers add others).
                targets = [n for q, n in last.items() if isinstance(q, int)]
                args = {}
            else:
                if not live_e:
                    continue
                e = _pick(live_e, b)
                targets, args = [ev_point[e]], {"e": e}
            ok = all(t is None or m.completes(t) for t in targets)
            args["expect"] = "complete" if ok else "blocked"
            args["timeout"] = 0 if c & 1 else 0.005
            args["_must_have"] = m.observable(m.closure(targets)) if ok else []
            args["_must_not"] = [] if ok else m.doomed_observable()
            op = Op(kind, thread, args)
        elif kind == "drop_q":
            if len(live_q) == 1:
                continue
            q = _pick(live_q[1:], a)
            live_q.remove(q)
            op = Op("drop_q", thread, {"q": q})
        elif kind == "drop_ev":
            if not live_e:
                continue
            e = _pick(live_e, b)
            live_e.remove(e)
            op = Op("drop_ev", thread, {"e": e})
        elif kind == "drop_flag":
            # A gate flag is dropped only once its signaller holds it.
            if c & 1:
                if not live_a:
                    continue
                aid = _pick(live_a, b)
                live_a.remove(aid)
                op = Op("drop_async_flag", thread, {"a": aid})
            else:
                cand = [f for f in live_f if f not in unassigned]
                if not cand:
                    continue
                f = _pick(cand, b)
                live_f.remove(f)
                op = Op("drop_flag", thread, {"f": f})
        elif kind == "burst":
            qa, qb = _pick(live_q, a), _pick(live_q, b)
            if qa == qb:
                continue
            count = c % 8 + 1
            ids = {}
            for q in (qa, qb):
                ids[q] = list(range(plan.n_host, plan.n_host + count))
                for hid in ids[q]:
                    push(q, "host", label=("H", hid))
                plan.n_host += count
            op = Op("burst", thread, {"qa": qa, "qb": qb, "ids": ids})
        elif kind in BUFFER_KINDS:
            plan.ops += bufs.compile(kind, thread, a, b, c)
            continue
        elif kind in FOREIGN_KINDS:
            # Another library's stream, held by a new gate flag; c bit 3:
            # a thread signals it a little later, so that what waits for
            # the foreign work is issued (and must block) before it.
            if DEVICE_KIND != "gpu":
                continue
            flag_op = new_flag(thread, b, c >> 4)
            fid = flag_op.args["f"]
            gate = (fid, plan.gate_flags[fid][0], flag_sig[fid])
            ops = bufs.compile(kind, thread, a, b, c, gate)
            plan.ops += [flag_op, *ops]
            if ops and c & 8:
                unassigned.remove(fid)
                m.nodes[flag_sig[fid]].signaller = "thread"
                args = {"f": fid, "mode": "thread", "delay_ms": 1 + c % 3}
                plan.ops.append(Op("signal", thread, args))
            continue
        else:  # pragma: no cover
            raise AssertionError(kind)
        plan.ops.append(op)

    # Before the end signals nothing doomed may have run.
    plan.ops.append(Op("checkpoint", 0, {"_must_not": m.doomed_observable()}))
    plan.end_signals = list(unassigned)
    plan.final_buffers = bufs.final_checks()
    for node in m.nodes:
        if node.kind == "sig" and node.signaller is None:
            node.signaller = "end"
    return plan


# --------------------------------------------------------------------------
# Checker (pure: a log against the model)


def check(plan: Plan, log) -> list[str]:
    """Violations of the model by an observed log (empty when consistent).

    Log entries: ``("H", id, bad_observation)``, ``("A", id)``,
    ``("S", flag id)``, ``("R", hold id)`` (a held host function released);
    a bad observation is ``None`` or a description."""
    m = plan.model
    out = []
    pos = {}
    for i, entry in enumerate(log):
        label = tuple(entry[:2])
        n = m.by_label.get(label)
        if n is None:
            out.append(f"unexpected log entry {entry!r}")
            continue
        if n in pos:
            out.append(f"{label} ran more than once (log positions {pos[n]}, {i})")
            continue
        pos[n] = i
        if label[0] == "H" and entry[2] is not None:
            out.append(f"{label} observed {entry[2]}")
    expected = [n for n, node in enumerate(m.nodes) if node.kind in OBSERVABLE]
    for n in expected:
        if n not in pos:
            out.append(f"{m.nodes[n].label} never ran")
    memo = {}
    for n, i in sorted(pos.items(), key=lambda kv: kv[1]):
        for p in m.observable(m.ancestors(n, memo)):
            if p in pos and pos[p] > i:
                out.append(
                    f"{m.nodes[n].label} (log position {i}) ran before its "
                    f"predecessor {m.nodes[p].label} (log position {pos[p]})"
                )
    return out


def check_present(plan, log, must_have, what):
    ran = {tuple(e[:2]) for e in log}
    missing = [plan.model.nodes[n].label for n in must_have]
    missing = [lab for lab in missing if lab not in ran]
    return [f"{what} returned but {missing} had not run"] if missing else []


def check_absent(plan, log, must_not, what):
    ran = {tuple(e[:2]) for e in log}
    early = [plan.model.nodes[n].label for n in must_not]
    early = [lab for lab in early if lab in ran]
    return [f"{early} ran before their gate was signalled ({what})"] if early else []


# --------------------------------------------------------------------------
# Execution


def model_device():
    if DEVICE_KIND == "gpu":
        return driver.Accelerator(0)
    return CPU()


_WORKERS = {}


def _worker(t):
    if t not in _WORKERS:
        _WORKERS[t] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model{t}")
    return _WORKERS[t]


FIGURES = {
    "programs": 0,
    "operations": 0,
    "host functions checked": 0,
    "async host functions checked": 0,
    "signals": 0,
    "waits": 0,
    "synchronize checks": 0,
    "of them expected to time out": 0,
    "gated or held host functions": 0,
    "max nodes in one program": 0,
    "buffers": 0,
    "copies": 0,
    "staged copies": 0,
    "enqueued copies": 0,
    "complete copies": 0,
    "imports": 0,
    "exports": 0,
    "buffer elements checked": 0,
}
_figures_lock = threading.Lock()


def _count(key, n=1):
    with _figures_lock:
        FIGURES[key] += n


class Runner:
    def __init__(self, plan: Plan, device):
        self.plan = plan
        self.dev = device
        self.log = []  # list.append is atomic: the run order
        self.queues = {0: device.default_queue}
        self.events = {}
        self.flags = {}
        self.async_flags = {}
        self.threads = []
        self.violations = []
        self.holds = [threading.Event() for _ in range(plan.n_holds)]
        self.buffers = BufferRunner(self.queue, _count, self.flags.__getitem__)

    def queue(self, key):
        """The queue of a model key (created at first use for the
        auxiliary queues of buffers)."""
        if key not in self.queues and isinstance(key, str):
            self.queues[key] = aux_queue(key)
        return self.queues[key]

    # Host functions ----------------------------------------------------
    def _flag_for(self, label):
        kind, ident = label
        if kind == "S":
            return self._all_flags[("S", ident)], self.plan.gate_flags[ident][0]
        return self._all_flags[("AS", ident)], self.plan.async_flags[ident]

    def host_fn(
        self, hid, sleep=False, observe=None, signals=None, hold=None, reads=None,
        writes=None,
    ):  # fmt: skip
        log = self.log
        held = self.holds[hold] if hold is not None else None
        obs = self._flag_for(observe) if observe else None
        access = None
        if reads or writes:
            access, checked = host_accesses(self.buffers.aliases, reads, writes)
            _count("buffer elements checked", checked)
        sig = None
        if signals is not None:
            value, wrongs = self.plan.gate_flags[signals]
            sig = (self.flags[signals], signals, value, wrongs)

        def fn():
            if held is not None:
                held.wait(WAIT)
            if sleep:
                time.sleep(0.002)
            bad = None
            if obs is not None:
                got = obs[0].load()
                if got != obs[1]:
                    bad = f"flag {observe} == {got}, expected {obs[1]}"
            if access is not None:
                bad = access() or bad
            log.append(("H", hid, bad))
            if sig is not None:
                flag, fid, value, wrongs = sig
                for w in wrongs:
                    flag.signal(w)
                log.append(("S", fid))
                flag.signal(value)

        return fn

    def _signal(self, fid, flag, delay_ms=0):
        value, wrongs = self.plan.gate_flags[fid]
        if delay_ms:
            time.sleep(delay_ms / 1000)
        for w in wrongs:
            flag.signal(w)
        self.log.append(("S", fid))
        flag.signal(value=value)
        _count("signals")

    # Operations --------------------------------------------------------
    def run_op(self, op: Op):
        a = op.args
        k = op.kind
        qs = self.queues
        if k == "host":
            fn = self.host_fn(
                a["id"], a["sleep"], a.get("observe"), a.get("signals"), a.get("hold"),
                a.get("reads"), a.get("writes"),
            )  # fmt: skip
            target = self.dev if a["via_device"] and a["q"] == 0 else self.queue(a["q"])
            getattr(target, ENQ)(fn)
        elif k in BUFFER_KINDS or k in FOREIGN_KINDS:
            self.buffers.run(op)
        elif k == "queue":
            qs[a["q"]] = DeviceQueue(self.dev)
        elif k == "record":
            q = qs[a["q"]]
            if a["kw"]:
                ev = DeviceEvent(self.dev)
                q.record_event(event=ev)
            else:
                ev = q.record_event()
            self.events[a["e"]] = ev
        elif k == "event":
            self.events[a["e"]] = DeviceEvent(device=self.dev)
        elif k == "rerecord":
            q, ev = qs[a["q"]], self.events[a["e"]]
            if a["kw"]:
                r = q.record_event(event=ev)
            else:
                r = q.record_event(ev)
            assert r is None
        elif k == "wait_q":
            q, other = qs[a["q"]], qs[a["other"]]
            if a["kw"]:
                q.wait_for(stream=other)
            else:
                q.wait_for(other)
            _count("waits")
        elif k == "wait_dev":
            q = qs[a["q"]]
            if a["kw"]:
                q.wait_for(device=self.dev)
            else:
                q.wait_for(self.dev)
            _count("waits")
        elif k == "wait_ev":
            q, ev = qs[a["q"]], self.events[a["e"]]
            if a["kw"]:
                q.wait_for(event=ev)
            else:
                q.wait_for(ev)
            _count("waits")
        elif k == "flag":
            f = CompletionFlag(self.dev)
            self.flags[a["f"]] = f
            self._all_flags[("S", a["f"])] = f
        elif k == "gate":
            q, f = qs[a["q"]], self.flags[a["f"]]
            value = self.plan.gate_flags[a["f"]][0]
            if a["kw"]:
                q.wait_for_host_value(flag=f, value=value)
            else:
                q.wait_for_host_value(f, value)
        elif k == "gate_async":
            q, f = qs[a["q"]], self.async_flags[a["a"]]
            q.wait_for_host_value(f, self.plan.async_flags[a["a"]])
        elif k == "signal":
            f = self.flags[a["f"]]
            if a["mode"] == "main":
                self._signal(a["f"], f)
            else:
                t = threading.Thread(
                    target=self._signal, args=(a["f"], f, a["delay_ms"]), daemon=True
                )
                t.start()
                self.threads.append(t)
        elif k == "async":
            f = CompletionFlag(self.dev)
            self.async_flags[a["a"]] = f
            self._all_flags[("AS", a["a"])] = f
            aid, log = a["a"], self.log

            def afn():
                time.sleep(0.0002 * (aid % 3))
                log.append(("A", aid))

            target = self.dev if a["via_device"] and a["q"] == 0 else qs[a["q"]]
            getattr(target, ENQ_ASYNC)(afn, f, a["value"], CPU())
        elif k in ("sync_q", "sync_ev", "sync_dev", "is_ready"):
            self._sync(op)
        elif k == "drop_q":
            del qs[a["q"]]
        elif k == "drop_ev":
            del self.events[a["e"]]
        elif k == "drop_flag":
            del self.flags[a["f"]]
            del self._all_flags[("S", a["f"])]
        elif k == "drop_async_flag":
            del self.async_flags[a["a"]]
            del self._all_flags[("AS", a["a"])]
        elif k == "burst":
            self._burst(a)
        elif k == "checkpoint":
            self.violations += check_absent(
                self.plan, list(self.log), a["_must_not"], "before the end signals"
            )
        else:  # pragma: no cover
            raise AssertionError(k)

    def _burst(self, a):
        barrier = threading.Barrier(2)
        errors = []

        def enqueue(q, ids):
            try:
                barrier.wait(WAIT)
                for hid in ids:
                    getattr(q, ENQ)(self.host_fn(hid))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        ts = [
            threading.Thread(target=enqueue, args=(self.queues[q], a["ids"][q]))
            for q in (a["qa"], a["qb"])
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join(WAIT)
        assert not errors, errors

    def _sync(self, op):
        a, k = op.args, op.kind
        if k == "sync_q":
            obj, what = self.queues[a["q"]], f"queue {a['q']}.synchronize"
        elif k == "sync_dev":
            obj, what = self.dev, "device.synchronize"
        else:
            obj, what = self.events[a["e"]], f"event {a['e']}.{k}"
        _count("synchronize checks")
        if a["expect"] == "blocked":
            _count("of them expected to time out")
        if k == "is_ready":
            ready = obj.is_ready()
            log = list(self.log)
            if ready:
                self.violations += check_present(self.plan, log, a["_must_have"], what)
            elif a["expect"] == "blocked":
                self.violations += check_absent(self.plan, log, a["_must_not"], what)
            if ready and a["expect"] == "blocked":
                self.violations.append(f"{what} is True but the model says blocked")
            return
        if a["expect"] == "complete":
            try:
                obj.synchronize(timeout=WAIT)
            except TimeoutError:
                self.violations.append(f"{what} timed out; the model says it completes")
                return
            self.violations += check_present(
                self.plan, list(self.log), a["_must_have"], what
            )
        else:
            try:
                obj.synchronize(timeout=a["timeout"])
            except TimeoutError:
                pass
            else:
                self.violations.append(
                    f"{what}(timeout={a['timeout']}) returned; the model says blocked"
                )
            self.violations += check_absent(
                self.plan, list(self.log), a["_must_not"], what
            )

    # Whole program -----------------------------------------------------
    def run(self):
        self._all_flags = {}
        try:
            for op in self.plan.ops:
                if op.thread == 0:
                    self.run_op(op)
                else:
                    _worker(op.thread).submit(self.run_op, op).result(2 * WAIT)
                _count("operations")
        except BaseException:
            # Unblock whatever the program left gated before reporting.
            for ev in self.holds:
                ev.set()
            for fid, f in self.flags.items():
                f.signal(self.plan.gate_flags[fid][0])
            raise
        for rid, ev in enumerate(self.holds):
            self.log.append(("R", rid))
            ev.set()
        for fid in self.plan.end_signals:
            self._signal(fid, self.flags[fid])
        # Drop every reference the program still holds: work must still run.
        self.queues = {0: self.dev.default_queue}
        final = self.buffers.clear(self.plan.final_buffers)
        self.events.clear()
        self.flags.clear()
        self.async_flags.clear()
        self._all_flags.clear()
        for t in self.threads:
            t.join(WAIT)
        try:
            self.dev.synchronize(timeout=WAIT)
            for dev in aux_devices(DEVICE_KIND == "gpu", SECOND_GPU):
                dev.synchronize(timeout=WAIT)
        except TimeoutError:
            self.violations.append("deadlock: final device.synchronize timed out")
        else:
            queue_work = [
                n
                for n, node in enumerate(self.plan.model.nodes)
                if node.kind == "host"
                or (node.kind == "sig" and node.signaller == "host")
            ]
            self.violations += check_present(
                self.plan, list(self.log), queue_work, "final device.synchronize"
            )
            self.buffers.check_final(final)
            final.clear()  # the last references: imports go back to producers
            consumers = [x["expect"] for x in self.plan.buffers.consumers]
            self.buffers.finish_foreign(consumers)
        # Async host functions run on the CPU pool, outside the queues.
        want = self.plan.n_host + self.plan.n_async
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if sum(1 for e in self.log if e[0] in "HA") >= want:
                break
            time.sleep(0.001)
        time.sleep(0.002)  # let a duplicate run, if any, show up
        return (
            self.violations + self.buffers.violations + check(self.plan, list(self.log))
        )


FAKE_LIBRARY = os.environ.get("MAX_DRIVER_FAKE_LIBRARY")
_fake = []


def fake_violations():
    """The fake driver's violations of real-driver rules since the last
    call, as sentences (none on the CPU or a real driver)."""
    if not FAKE_LIBRARY:
        return []
    if not _fake:
        _fake.append(load(FAKE_LIBRARY))
    return take_violations(_fake[0])


def run_program(raw, device):
    plan = compile_program(raw)
    note("resolved program:\n" + plan.describe())
    fake_violations()  # (a program starts with none)
    violations = Runner(plan, device).run()
    violations += [f"fake driver: {v}" for v in fake_violations()]
    with _figures_lock:
        FIGURES["programs"] += 1
        FIGURES["host functions checked"] += plan.n_host
        FIGURES["async host functions checked"] += plan.n_async
        m = plan.model
        FIGURES["gated or held host functions"] += sum(
            1
            for n, node in enumerate(m.nodes)
            if node.kind == "host"
            and any(m.nodes[p].kind in ("sig", "asig") for p in m.ancestors(n))
        )
        FIGURES["max nodes in one program"] = max(
            FIGURES["max nodes in one program"], len(plan.model.nodes)
        )
    return plan, violations


# --------------------------------------------------------------------------
# The randomized test


@pytest.mark.timeout(max(600, EXAMPLES * 3))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(raw_programs())
def test_random_programs_follow_the_model(raw):
    device = model_device()
    plan, violations = run_program(raw, device)
    assert not violations, "\n".join(
        ["model violated:", *violations, "program:", plan.describe()]
    )


# --------------------------------------------------------------------------
# The checker is not vacuous


def _program(*ops):
    return (0, [(k, 0, a, b, c) for k, a, b, c in ops])


def _legal_log(plan):
    """A log in a topological order of the model (what a correct run gives)."""
    m = plan.model
    order, done = [], set()

    def visit(n):
        if n in done:
            return
        done.add(n)
        for p in m.nodes[n].preds:
            visit(p)
        node = m.nodes[n]
        if node.kind == "host":
            order.append((*node.label, None))
        elif node.kind in ("async", "sig"):
            order.append(node.label)

    for n in range(len(m.nodes)):
        visit(n)
    return order


SAMPLE = _program(
    ("queue", 0, 0, 0),
    ("host", 0, 0, 0),  # H0 on default queue
    ("record", 0, 0, 0),  # event 1 after H0
    ("host", 1, 0, 0),  # H1 on queue 1
    ("flag", 0, 0, 7),  # flag 1, value 7
    ("gate", 1, 0, 0),  # queue 1 gated on flag 1
    ("wait_ev", 1, 0, 0),  # queue 1 waits for event 1 (H0)
    ("host", 1, 0, 0),  # H2 on queue 1: after H1, S1 and H0
    ("host", 0, 0, 0),  # H3 on default queue: after H0 only
)


def test_checker_accepts_a_legal_log():
    plan = compile_program(SAMPLE)
    log = _legal_log(plan)
    assert {e[0] for e in log} == {"H", "S"}
    assert check(plan, log) == []


@pytest.mark.parametrize(
    "mutation",
    ["swap_queue_order", "gated_before_signal", "before_event", "lost", "twice",
     "bad_observation"],
)  # fmt: skip
def test_checker_reports_a_wrong_log(mutation):
    plan = compile_program(SAMPLE)
    log = _legal_log(plan)
    idx = {tuple(e[:2]): i for i, e in enumerate(log)}

    def move_before(item, anchor):
        entry = log.pop(idx[item])
        log.insert([tuple(e[:2]) for e in log].index(anchor), entry)

    if mutation == "swap_queue_order":  # H1, H2 both on queue 1
        move_before(("H", 2), ("H", 1))
    elif mutation == "gated_before_signal":
        move_before(("H", 2), ("S", 1))
    elif mutation == "before_event":  # H2 waits for the event after H0
        move_before(("H", 2), ("H", 0))
    elif mutation == "lost":
        log.pop(idx[("H", 3)])
    elif mutation == "twice":
        log.append(log[idx[("H", 1)]])
    elif mutation == "bad_observation":
        i = idx[("H", 2)]
        log[i] = ("H", 2, "flag ('S', 1) == 0, expected 7")
    violations = check(plan, log)
    assert violations, (mutation, log)


def test_checker_wait_for_event_uses_the_point_at_call_time():
    """Re-recording an event after ``wait_for`` does not add an edge: a log
    where the waiter runs before the re-recorded point is legal, one where it
    runs before the original point is not."""
    plan = compile_program(
        _program(
            ("queue", 0, 0, 0),
            ("host", 0, 0, 0),  # H0 on default
            ("record", 0, 0, 0),  # event 1 after H0
            ("wait_ev", 1, 0, 0),  # queue 1 waits for H0
            ("host", 0, 0, 0),  # H1 on default
            ("rerecord", 0, 0, 0),  # event 1 moved after H1
            ("host", 1, 0, 0),  # H2 on queue 1
        )
    )
    H = [("H", i, None) for i in range(3)]
    assert check(plan, [H[0], H[2], H[1]]) == []
    assert check(plan, [H[2], H[0], H[1]])


def test_compiled_programs_have_no_cycles():
    """Signallers are assigned so that no program can deadlock."""

    @settings(max_examples=300, deadline=None, database=None)
    @given(raw_programs())
    def inner(raw):
        plan = compile_program(raw)
        m = plan.model
        for n in range(len(m.nodes)):
            assert n not in m.ancestors(n)
        # After the end signals every node completes.
        assert all(m.completes(n) for n in range(len(m.nodes)))

    inner()


# --------------------------------------------------------------------------
# Buffers: the compiled model is exact, and known bugs show in the data


def test_compiled_buffer_accesses_are_race_free():
    """Every two accesses of an element, one of them a write, are ordered
    by the model (the earlier one an ancestor of the later one), so what
    each read must see is exact."""

    @settings(max_examples=500, deadline=None, database=None)
    @given(raw_programs())
    def inner(raw):
        plan = compile_program(raw)
        m, memo, seen = plan.model, {}, {}
        for sid, i, node, write in plan.buffers.accesses:
            for prior, prior_write in seen.get((sid, i), []):
                if (write or prior_write) and prior != node:
                    assert prior in m.ancestors(node, memo), (sid, i, prior, node)
            seen.setdefault((sid, i), []).append((node, write))

    inner()


# (kind, a, b, c) of _program; the comments say what each resolves to.
# Pageable (CPU) memory: a copy into a buffer whose queue is held, and a
# buffer on the source's queue afterwards (the first program: with
# the old rule, the source's queue joined the copy and the read hung).
CPU_COPY_INTO_HELD = _program(
    ("queue", 0, 0, 0),  # queue 1
    ("buf", 0, 0, 8),  # b0: 3 fresh values on queue 0 (from NumPy: alias 0)
    ("buf", 1, 0, 0),  # b1: 2 zeros on queue 1
    # Held on queue 0: alias 0 still holds the fresh values; then
    # b0[0:2] <- b1 (staged: queue 0 is held).
    ("copy", 0, 0, 4 << 8),
    ("buf", 1, 0, 0),  # b2: 2 zeros on queue 1, the copy's source queue
    ("bread", 2, 0, 0),  # b2.to_numpy(): waits for the fill only
)
# Accelerator memory: pinned (b0, an alias) and device memory of the model
# accelerator and device memory of the second one.
GPU_PROGRAMS = {
    # b0[0:2] <- b1 (device, queue 1) waits for held work on b0's queue.
    "copy_waits_for_destination_queue": _program(
        ("queue", 0, 0, 0),  # queue 1
        ("buf", 0, 2, 8),  # b0: pinned, 3 fresh values, queue 0, alias 0
        ("buf", 1, 1, 8),  # b1: device, 3 fresh values uploaded on queue 1
        # Held on queue 0, reading alias 0; then the copy (enqueued).
        ("copy", 0, 0, 4 << 8),
    ),
    # A pageable source's queue is not held back by an upload into a held
    # queue (SPEC §12.6): a fill on it and a host read of that buffer
    # complete while the upload waits.
    "pageable_source_queue_not_held_back": _program(
        ("buf", 0, 2, 8),  # b0: pinned, 3 fresh values, queue 0, alias 0
        ("buf", 0, 0, 8),  # b1: CPU, 3 fresh values (NumPy, queue c0, alias 1)
        # Held on queue 0 (reading alias 0), then b0 <- b1 (staged).
        ("copy", 0, 0, 4 << 8),
        ("buf", 0, 0, 0),  # b2: CPU, 2 zeros on queue c0
        ("bread", 2, 0, 0),  # b2.to_numpy(): waits for the fill only
    ),
    # SPEC §12.5/12.6: a host write of device memory waits for its record
    # only, not for a held host function on the CPU's default queue.
    "device_host_write_waits_for_its_record_only": _program(
        ("buf", 0, 1, 0),  # b0: device, 2 zeros, queue 0
        ("buf", 0, 0, 8),  # b1: CPU, 3 fresh values (NumPy, queue c0, alias 0)
        ("hread", 1, 0, 16),  # held on queue c0, reading alias 0
        ("bwrite", 0, 0, 0),  # b0[0] = v
    ),
    # b1 (second accelerator) <- b0 (untracked pinned) waits for a held
    # host function on b0's queue that writes b0 through its alias: a copy
    # from untracked memory is ordered after its queue.
    "untracked_source_copy_waits_for_its_queue": _program(
        ("buf", 0, 2, 8),  # b0: pinned, 3 fresh values, queue 0, alias 0
        ("buf", 0, 3, 8),  # b1: device memory of accelerator 1 (queue g0)
        # Held on queue 0, writing b0[0]; then b1 <- b0 (enqueued).
        ("copy", 0, 1, (1 | 4) << 8),
    ),
}


def _resolved(raw):
    plan = compile_program(raw)
    return plan, [(op.kind, op.args) for op in plan.ops]


@pytest.mark.skipif(DEVICE_KIND != "cpu", reason="resolves CPU buffers")
def test_buffer_model_follows_spec_12_6():
    """A staged copy into a held queue: what the host function before it
    reads, the final contents, and the source queue's later work, which the
    copy does not hold back."""
    plan, ops = _resolved(CPU_COPY_INTO_HELD)
    kinds = [k for k, _ in ops]
    assert kinds == [
        "queue", "buf", "buf", "host", "copy", "buf", "bread", "checkpoint",
    ]  # fmt: skip
    fresh = ops[1][1]["values"]
    before, copy, later, read = ops[3][1], ops[4][1], ops[5][1], ops[6][1]
    assert (before["q"], "hold" in before, before["reads"]) == (0, True, [(0, fresh)])
    assert copy == {"dst": 0, "src": 1, "dv": [0, 2], "sv": None, "mode": "staged"}
    assert (later["b"], later["q"], later["init"]) == (2, 1, "zeros")
    assert (read["b"], read["mode"], read["expect"]) == (2, "numpy", [0, 0])
    assert ("b", 0, [0, 0, fresh[2]]) in plan.final_buffers
    # The copy waits for the held function; the fill on its source's queue
    # (and so the read) does not.
    m = plan.model
    held = m.by_label[("H", 0)]
    copy_node = next(n for n, node in enumerate(m.nodes) if node.kind == "copy")
    fill = max(n for n, node in enumerate(m.nodes) if node.kind == "fill")
    assert held in m.ancestors(copy_node)
    assert held not in m.ancestors(fill)


def _fixed_programs():
    if DEVICE_KIND == "cpu":
        return {"cpu_copy_into_held_queue": CPU_COPY_INTO_HELD}
    return GPU_PROGRAMS if SECOND_GPU else {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(_fixed_programs()))
def test_fixed_buffer_programs(name):
    """Programs that a copy running before the work it must wait for fails
    deterministically (through the data, not timing), and that the old rule
    (a copy joined its source's queue) hangs: a host read waits for good
    for a fill held back behind the copy (the timeout ends it)."""
    raw = _fixed_programs()[name]
    plan = compile_program(raw)
    # Resolved as the comments say: a held host function around the
    # buffer operation, reading or writing through an alias.
    assert any(op.kind in ("copy", "bwrite") for op in plan.ops), plan.describe()
    assert any("reads" in op.args and "hold" in op.args for op in plan.ops) or any(
        "writes" in op.args for op in plan.ops
    ), plan.describe()
    violations = Runner(plan, model_device()).run()
    assert not violations, "\n".join([*violations, plan.describe()])


# --------------------------------------------------------------------------
# Fake GPU driver (CUDA and HIP), in a child pytest


def _load_builder():
    spec = importlib.util.spec_from_file_location(
        "fake_driver_build_model", FAKE_DIR / "build.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_fake_driver


FIGURES_RE = re.compile(r"^MODEL FIGURES (.*)$", re.M)
FAKE_FIGURES = {}  # api -> the child's figures line


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    if not (FAKE_DIR / "build.py").exists():
        pytest.skip("fake driver sources missing")
    if not any(
        os.access(os.path.join(p, cc), os.X_OK)
        for p in os.environ.get("PATH", "").split(os.pathsep)
        for cc in ("cc", "gcc")
    ):
        pytest.skip("no C compiler to build the fake driver")
    return _load_builder()(tmp_path_factory.mktemp("fake-model"))


@pytest.mark.skipif(DEVICE_KIND != "cpu", reason="the parent run drives the fake")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("api", ["cuda", "hip"])
def test_model_on_fake_gpu(fake_lib, api):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "FAKE_GPU_"))
    }
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    env.pop("PYTHONWARNINGS", None)
    env["MAX_DRIVER_BACKEND"] = api
    env[f"MAX_DRIVER_{api.upper()}_LIBRARY"] = str(fake_lib)
    env["MAX_DRIVER_FAKE_LIBRARY"] = str(fake_lib)  # its violations fail
    env["MAX_DRIVER_MODEL_DEVICE"] = "gpu"
    # Device memory with the stream-ordered allocator (CUDA) and with the
    # plain one, frees deferred by the backend (HIP).
    env["FAKE_GPU_MEMORY_POOLS"] = "1" if api == "cuda" else "0"
    env["MAX_DRIVER_MODEL_EXAMPLES"] = str(max(1, EXAMPLES * 4 // 15))
    try:
        r = subprocess.run(
            [
                sys.executable, "-m", "pytest", __file__, "-q", "-p",
                "no:cacheprovider", "-s", "-k",
                "test_fixed_buffer_programs or test_random_programs or "
                "test_model_figures",
            ],
            capture_output=True, text=True, timeout=280, env=env, cwd=REPO_ROOT,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:  # say what it was doing
        so_far = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
        pytest.fail(f"the child run timed out; its output so far:\n{so_far}")
    out = f"--- rc={r.returncode}\n{r.stdout}\n--- stderr:\n{r.stderr}"
    assert r.returncode == 0, out
    # The random programs, the figures and the fixed buffer programs.
    assert f"{2 + len(GPU_PROGRAMS)} passed" in r.stdout, out
    found = FIGURES_RE.findall(r.stdout)
    assert found, out
    assert found[-1].startswith(f"device={api} "), out
    FAKE_FIGURES[api] = found[-1]


# --------------------------------------------------------------------------
# Figures (keep last)


def test_model_figures(capsys):
    dev = model_device()
    figures = ", ".join(f"{k}={v}" for k, v in FIGURES.items())
    with capsys.disabled():
        print(f"\nMODEL FIGURES device={dev.api} {figures}")
        for api, line in FAKE_FIGURES.items():
            print(f"MODEL FIGURES (fake {api}, child run) {line}")
