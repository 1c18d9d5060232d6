"""Buffers in the model-based random programs of ``test_model.py`` (SPEC §12).

Not a test module: ``BufferCompiler`` turns raw buffer operations into
resolved ones and extends the happens-before model, ``BufferRunner`` runs
them.

Memory kinds: ``cpu`` (pageable CPU memory), and with an accelerator
``pin`` (pinned memory of the model accelerator), ``dev`` (its device
memory) and ``dev1`` (device memory of a second accelerator).  Buffers are
1-D ``int32``; views are contiguous slices of them; NumPy aliases of CPU and
pinned memory are read and written by host functions.

What the model knows, per element of every allocation, is the value it
holds.  It stays exact because programs are kept free of data races: an
access (a read or write of an element, at a model node) is only compiled
when every earlier conflicting access of that element (one of the two a
write) is one of its happens-before ancestors; a candidate that would race
is skipped (the compiler tries the next one).  So conflicting accesses are
ordered as the program issues them, and the value each read must see is
simply the last one written before it in program order.

The ordering edges are SPEC §12.6's:

- a copy runs after everything enqueued on either queue before it and
  everything enqueued afterwards on either queue runs after it: one node on
  both queues (``enqueued``), except that
- a pageable source is read when the call returns, after the call waited
  for the source's queue: a host point; the destination is written by a
  node on its queue after that point, which the source's queue joins
  (``staged``); and
- a copy into pageable memory from an accelerator is complete on return:
  one host point after both queues (``complete``);
- host reads and writes (``to_numpy``, ``item``, ``buf[i] = v``) are host
  points after the buffer's queue, except ``to_numpy`` of pinned memory,
  which aliases without waiting, and except the joins copies left at the
  end of a CPU queue (``join`` nodes): they order the queue's later work
  but touch no memory, so host access (a copy's read of its pageable
  source included) does not wait for them;
- ``Buffer.zeros`` fills in the order of the buffer's queue
  (``DevicePinnedBuffer.zeros`` on return, on the host); an allocation of
  device memory is in the order of its queue;
- ``buf.to(stream)`` of the same device: ``stream`` waits for ``buf.stream``.

A host point (``Model.host_point``) is a moment of the issuing thread:
everything enqueued after it runs after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from max import driver
from max.driver import CPU, Buffer, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType

BUFFER_KINDS = (
    ["buf"] * 3 + ["copy"] * 6 + ["hread"] * 3 + ["bwrite"] * 2 + ["bread"] * 2
    + ["alias"] * 2 + ["hwrite"] * 2 + ["view", "rebind", "drop_buf"]
)  # fmt: skip
MAX_BUFFERS = 8
MAX_ALIASES = 6
DTYPE = DType.int32
SIDE = {"cpu": "pageable", "pin": "pinned", "dev": "device", "dev1": "device"}
# Auxiliary queues of the accelerator variant (keys of ``last``; the model
# device's queues are ints): the CPU's default queue and one more, the
# second accelerator's default queue and one more.
CPU_QUEUES = ("c0", "c1")
GPU1_QUEUES = ("g0", "g1")


@dataclass
class Storage:
    kind: str
    values: list  # per element: the value the model says it holds (None: unknown)
    access: list  # per element: [(node, is_write)] since the last write


@dataclass
class View:
    sid: int
    off: int
    n: int
    q: object  # the queue key a buffer is bound to (None for an alias)


def _rotated(seq, i):
    """``seq`` starting at index ``i`` (modulo), wrapping around."""
    if not seq:
        return []
    k = i % len(seq)
    return list(seq[k:]) + list(seq[:k])


class BufferCompiler:
    """Compile-time half: resolves buffer operations against live buffers,
    adds their nodes to the model and records what reads must see."""

    def __init__(self, model, plan, last, live_q, op_cls, accelerator, second):
        self.m = model
        self.plan = plan
        self.last = last
        self.live_q = live_q
        self.Op = op_cls
        self.kinds = ["cpu"]
        if accelerator:
            self.kinds += ["dev", "pin"] + (["dev1"] if second else [])
        self.accelerator = accelerator
        self.second = second
        # join node -> the node its queue had before it (accessof)
        self.before_join = {}
        self.storages: list[Storage] = []
        self.views: dict[int, View] = {}  # buffer id -> what it views
        self.live_b: list[int] = []
        self.aliases: dict[int, View] = {}
        self.live_al: list[int] = []
        self.next_value = 1000
        # Every access, for the compiler's own test: (sid, index, node, write).
        self.accesses: list[tuple] = []

    # Queues ----------------------------------------------------------------
    def queues_for(self, kind):
        if not self.accelerator or kind in ("dev", "pin"):
            return list(self.live_q)
        return list(CPU_QUEUES if kind == "cpu" else GPU1_QUEUES)

    def host_queues(self):
        aux = list(CPU_QUEUES) if self.accelerator else []
        if self.second:
            aux += list(GPU1_QUEUES)
        return list(self.live_q) + aux

    def cpu_default_queue(self):
        return CPU_QUEUES[0] if self.accelerator else 0

    def lastof(self, q):
        return self.last.setdefault(q, None)

    def accessof(self, q):
        """What host access to q's memory waits for: its last node that is
        not one of the joins at its end."""
        n = self.lastof(q)
        while n in self.before_join:
            n = self.before_join[n]
        return n

    def join(self, q, copy):
        """q (a pageable source's queue) joins ``copy``: its later work runs
        after it, host access to its memory does not wait for it."""
        before = self.lastof(q)
        self.before_join[self.push(q, "join", [copy])] = before

    def completes(self, q, access=False):
        n = self.accessof(q) if access else self.lastof(q)
        return n is None or self.m.completes(n)

    def push(self, q, kind, extra=(), label=None):
        n = self.m.add(kind, [self.lastof(q), *extra], label, q)
        self.last[q] = n
        return n

    # Accesses --------------------------------------------------------------
    def ancestors(self, preds):
        """The ancestors a node with ``preds`` would have."""
        return self.m.closure([*preds, self.m.frontier])

    def races(self, sid, idxs, write, anc):
        """True when an earlier access of these elements conflicts with a new
        one (a write, or any access of an element written) without being
        among the new access's ancestors."""
        st = self.storages[sid]
        return any((w or write) and p not in anc for i in idxs for p, w in st.access[i])

    def read(self, sid, idxs, node):
        st = self.storages[sid]
        for i in idxs:
            st.access[i].append((node, False))
            self.accesses.append((sid, i, node, False))
        return [st.values[i] for i in idxs]

    def write(self, sid, idxs, node, values):
        st = self.storages[sid]
        for i, v in zip(idxs, values, strict=True):
            # Every earlier access is an ancestor of this write: later
            # accesses need only be ordered with it.
            st.access[i] = [(node, True)]
            st.values[i] = v
            self.accesses.append((sid, i, node, True))

    def fresh(self):
        self.next_value += 1
        return self.next_value

    def new_buffer(self, view):
        bid = len(self.views)
        self.views[bid] = view
        self.live_b.append(bid)
        return bid

    def new_alias(self, view):
        aid = len(self.aliases)
        self.aliases[aid] = view
        self.live_al.append(aid)
        return aid

    def kind_of(self, bid):
        return self.storages[self.views[bid].sid].kind

    def final_checks(self):
        """What the references that survive the program must show once all
        its work is done: [("b" or "al", buffer or alias id, values)], the
        widest reference of each allocation whose values the model knows."""
        out = []
        for sid, st in enumerate(self.storages):
            refs = [("b", b, self.views[b]) for b in self.live_b]
            refs += [("al", al, self.aliases[al]) for al in self.live_al]
            refs = [r for r in refs if r[2].sid == sid]
            if not refs:
                continue
            what, ident, v = max(refs, key=lambda r: r[2].n)
            expect = st.values[v.off : v.off + v.n]
            if any(e is not None for e in expect):
                out.append((what, ident, expect))
        return out

    # Operations ------------------------------------------------------------
    def compile(self, kind, thread, a, b, c):
        """Resolved ops for one raw buffer operation ([] when it does not
        apply: nothing alive, or every candidate would race or block)."""
        out = getattr(self, "_" + kind)(a, b, c)
        if out is None:
            return []
        if isinstance(out, dict):
            out = [("host" if kind in ("hread", "hwrite") else kind, out)]
        return [self.Op(k, thread, args) for k, args in out]

    def host(self, q, slow=False, held=False, label_args=None):
        """A host function on ``q`` (held: until the end of the program, a
        pseudo-signal as in ``compile_program``); returns (node, args)."""
        hid = self.plan.n_host
        self.plan.n_host += 1
        args = {"q": q, "id": hid, "sleep": slow, "via_device": False}
        extra = []
        if held:
            args["hold"] = self.plan.n_holds
            extra = [self.m.add("sig", [], ("R", self.plan.n_holds))]
            self.plan.n_holds += 1
        return self.push(q, "host", extra, label=("H", hid)), args

    def _buf(self, a, b, c):
        """A new buffer: b picks the kind and (bit 2) whether its queue may
        be a blocked one (a fill then is still pending when the buffer is
        used); c the length (2..8), the initialisation and variants.

        Initialisations: ``zeros`` (``Buffer.zeros``: filled in the queue's
        order; with the variant, pinned memory through
        ``DevicePinnedBuffer.zeros``, zero on return); ``empty``
        (uninitialised: values unknown); ``numpy`` (fresh values: on the
        CPU ``Buffer.from_numpy``, bound to the CPU's default queue, its
        array an alias; device memory ``Buffer.from_numpy(...).copy(q)``,
        written in q's order; pinned memory ``DevicePinnedBuffer.zeros``
        written through its ``to_numpy`` alias at once)."""
        if len(self.live_b) >= MAX_BUFFERS:
            return None
        kind = self.kinds[b % len(self.kinds)]
        n = 2 + c % 7
        init = ("zeros", "numpy", "zeros", "empty", "numpy")[(c >> 3) % 5]
        variant = bool((c >> 5) & 1)  # cpu: usage STAGING; pin: on the host
        if (
            init == "numpy"
            and kind in ("dev", "dev1")
            and not self.completes(self.cpu_default_queue(), access=True)
        ):
            init = "zeros"  # the copy from the NumPy buffer would wait for good
        if init == "numpy" and kind == "cpu":
            q = self.cpu_default_queue()
        else:
            # Mostly on a queue that is not blocked for good (a source on a
            # blocked queue cannot be copied from: the call would wait).
            qs = _rotated(self.queues_for(kind), a)
            free = [q for q in qs if self.completes(q)]
            q = free[0] if free and not b & 4 else qs[0]
        if init == "numpy":
            values = [self.fresh() for _ in range(n)]
        else:
            values = [0 if init == "zeros" else None] * n
        sid = len(self.storages)
        self.storages.append(Storage(kind, [None] * n, [[] for _ in range(n)]))
        on_host = (kind == "pin" and (init != "zeros" or variant)) or (
            kind == "cpu" and init != "zeros"
        )
        if init == "numpy" and kind in ("dev", "dev1"):
            # The NumPy buffer's queue is waited for; the new buffer written
            # in the order of its queue; the NumPy buffer's queue joins.
            self.m.host_point([self.accessof(self.cpu_default_queue())])
        node = self.m.host_point([]) if on_host else self.push(q, "fill")
        if init == "numpy" and kind in ("dev", "dev1"):
            self.join(self.cpu_default_queue(), node)
        self.write(sid, range(n), node, values)
        bid = self.new_buffer(View(sid, 0, n, q))
        args = {
            "b": bid,
            "q": q,
            "kind": kind,
            "n": n,
            "init": init,
            "variant": variant,
        }
        if init == "numpy":
            args["values"] = values
            if kind in ("cpu", "pin"):
                args["al"] = self.new_alias(View(sid, 0, n, None))
        return args

    def _view(self, a, b, c):
        if not self.live_b or len(self.live_b) >= MAX_BUFFERS:
            return None
        base = _rotated(self.live_b, a)[0]
        v = self.views[base]
        start = b % v.n
        stop = start + 1 + c % (v.n - start)
        bid = self.new_buffer(View(v.sid, v.off + start, stop - start, v.q))
        return {"b": bid, "base": base, "start": start, "stop": stop}

    def _rebind(self, a, b, c):
        if len(self.live_b) >= MAX_BUFFERS:
            return None
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            targets = [q for q in self.queues_for(self.kind_of(bid)) if q != v.q]
            if not targets:
                continue
            q = _rotated(targets, b)[0]
            self.push(q, "wait", [self.lastof(v.q)])
            nb = self.new_buffer(View(v.sid, v.off, v.n, q))
            return {"b": bid, "new": nb, "q": q}
        return None

    def _drop_buf(self, a, b, c):
        if not self.live_b:
            return None
        bid = _rotated(self.live_b, a)[0]
        self.live_b.remove(bid)
        return {"b": bid}

    def _copy(self, a, b, c):
        """``dst.inplace_copy_from(src)`` of two live buffers (or equally
        long sub-views; c: their offsets).  Bits 8-11 of c add host
        functions that make a copy running too early or too late show in
        the data: first a slow (2) or held (4) one on one queue of the copy
        (bit 1 picks the source's, for enqueued copies), then (8) one on the
        other queue; each reads an alias of the destination or, on the
        source's queue, writes an alias of the source, where that is
        race-free (else it is a plain host function)."""
        live = self.live_b
        pairs = [(d, s) for d in live for s in live if d != s]
        for d, s in _rotated(pairs, a * 8 + b):
            shape = self._copy_shape(d, s, c)
            if shape is not None:
                return self._emit_copy(d, s, shape, (c >> 8) & 15)
        return None

    def _copy_shape(self, d, s, c):
        """(mode, dst range, src range) when the copy neither races nor
        blocks for good, else None."""
        D, S = self.views[d], self.views[s]
        n = min(D.n, S.n)
        doff = c % (D.n - n + 1)
        soff = (c >> 4) % (S.n - n + 1)
        dr = range(D.off + doff, D.off + doff + n)
        sr = range(S.off + soff, S.off + soff + n)
        if D.sid == S.sid and set(dr) & set(sr):
            return None  # overlapping: not a case the SPEC orders
        dside = SIDE[self.storages[D.sid].kind]
        sside = SIDE[self.storages[S.sid].kind]
        ls, ld = self.lastof(S.q), self.lastof(D.q)
        if sside == "pageable":
            # Read when the call returns, after waiting for the source.
            mode = "staged"
            if not self.completes(S.q, access=True):
                return None
            anc_r = self.ancestors([self.accessof(S.q)])
            anc_w = anc_r | self.ancestors([ld])
        elif dside == "pageable":
            # Complete on return: after the source's queue and the host
            # access of the destination's.
            mode = "complete"
            if not (self.completes(S.q) and self.completes(D.q, access=True)):
                return None
            anc_r = anc_w = self.ancestors([ls, self.accessof(D.q)])
        else:
            mode = "enqueued"
            anc_r = anc_w = self.ancestors([ls, ld])
        if self.races(S.sid, sr, False, anc_r) or self.races(D.sid, dr, True, anc_w):
            return None
        return mode, dr, sr

    def _emit_copy(self, d, s, shape, bits):
        mode, dr, sr = shape
        D, S = self.views[d], self.views[s]
        out = []
        # Before the copy, never where the copy then waits for it (a source
        # of pageable memory is waited for).
        first = S.q if mode == "enqueued" and bits & 1 else D.q
        other = D.q if first == S.q else S.q
        # (Both on the copy's queues, so that the copy is ordered after them,
        # and on queues the program still holds: a buffer may outlive its
        # queue's reference.)
        if (
            bits & 6
            and mode != "complete"
            and (first != S.q or mode == "enqueued")
            and self.is_live(first)
        ):
            held = bool(bits & 4)
            out.append(("host", self._around(first, D, S, sr, True, held)))
        out.append(("copy", self._commit_copy(d, s, mode, dr, sr)))
        if bits & 8 and other != first and self.is_live(other):
            # Not slow: if it must wait for the copy but does not, it runs
            # (and shows) before the held work is released.
            out.append(("host", self._around(other, D, S, sr)))
        return out

    def _around(self, q, D, S, sr, slow=False, held=False):
        """A host function on ``q`` next to a copy from S (elements ``sr``)
        into D: it reads an alias of D or, on S's queue, writes one of S,
        where that is race-free; else a plain one."""
        anc = self.ancestors([self.lastof(q)])
        for al in self.live_al:
            v = self.aliases[al]
            idx = list(range(v.off, v.off + v.n))
            if v.sid == D.sid and not self.races(v.sid, idx, False, anc):
                node, args = self.host(q, slow, held)
                args["reads"] = [(al, self.read(v.sid, idx, node))]
                return args
        for al in self.live_al if q == S.q else ():
            v = self.aliases[al]
            for i in sr:
                if (
                    v.sid == S.sid
                    and v.off <= i < v.off + v.n
                    and not self.races(v.sid, [i], True, anc)
                ):
                    node, args = self.host(q, slow, held)
                    value = self.fresh()
                    self.write(v.sid, [i], node, [value])
                    args["writes"] = [(al, i - v.off, value)]
                    return args
        return self.host(q, slow, held)[1]

    def is_live(self, q):
        return isinstance(q, str) or q in self.live_q

    def _commit_copy(self, d, s, mode, dr, sr):
        D, S = self.views[d], self.views[s]
        ls = self.lastof(S.q)
        doff, soff, n = dr.start - D.off, sr.start - S.off, len(dr)
        if mode == "staged":
            r = self.m.host_point([self.accessof(S.q)])
            values = self.read(S.sid, sr, r)
            w = self.push(D.q, "copy", [r])
            # SPEC §12.6: everything enqueued on either queue afterwards
            # runs after the copy, also after an upload to an accelerator.
            if S.q != D.q:
                self.join(S.q, w)
        elif mode == "complete":
            r = w = self.m.host_point([ls, self.accessof(D.q)])
            values = self.read(S.sid, sr, r)
        else:
            r = w = self.push(D.q, "copy", [ls])
            self.last[S.q] = w
            values = self.read(S.sid, sr, r)
        self.write(D.sid, dr, w, values)
        return {
            "dst": d,
            "src": s,
            "dv": None if n == D.n else [doff, doff + n],
            "sv": None if n == S.n else [soff, soff + n],
            "mode": mode,
        }

    def _bwrite(self, a, b, c):
        """``buf[i] = v``: after the buffer's queue, complete on return."""
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            i = b % v.n
            idx = [v.off + i]
            lq = self.accessof(v.q)
            if not self.completes(v.q, access=True) or self.races(
                v.sid, idx, True, self.ancestors([lq])
            ):
                continue
            value = self.fresh()
            self.write(v.sid, idx, self.m.host_point([lq]), [value])
            return {"b": bid, "i": i, "v": value}
        return None

    def _bread(self, a, b, c):
        """``buf[i].item()`` or ``buf.to_numpy()``: after the buffer's
        queue, except ``to_numpy`` of pinned memory (no wait: only when
        every write is already ordered before this point)."""
        mode = "item" if c & 1 else "numpy"
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            waits = not (mode == "numpy" and self.kind_of(bid) == "pin")
            preds = [self.accessof(v.q)] if waits else []
            i = b % v.n
            idx = [v.off + i] if mode == "item" else list(range(v.off, v.off + v.n))
            if (waits and not self.completes(v.q, access=True)) or self.races(
                v.sid, idx, False, self.ancestors(preds)
            ):
                continue
            expect = self.read(v.sid, idx, self.m.host_point(preds))
            return {"b": bid, "mode": mode, "i": i, "expect": expect}
        return None

    def _alias(self, a, b, c):
        """A NumPy alias of CPU memory (``to_numpy`` waits for the queue) or
        pinned memory (it does not)."""
        if len(self.live_al) >= MAX_ALIASES:
            return None
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            kind = self.kind_of(bid)
            if kind == "pin" or (kind == "cpu" and self.completes(v.q, access=True)):
                if kind == "cpu":
                    self.m.host_point([self.accessof(v.q)])
                al = self.new_alias(View(v.sid, v.off, v.n, None))
                return {"b": bid, "al": al}
        return None

    def _hread(self, a, b, c):
        return self._host_access(a, b, c, write=False)

    def _hwrite(self, a, b, c):
        return self._host_access(a, b, c, write=True)

    def _host_access(self, a, b, c, write):
        """A host function on some queue that reads a whole alias or writes
        one element of it (c: the element; bit 3 sleeps first, bit 4 holds
        it until the end of the program)."""
        if not self.live_al:
            return None
        al = _rotated(self.live_al, b)[0]
        v = self.aliases[al]
        i = c % v.n
        idx = [v.off + i] if write else list(range(v.off, v.off + v.n))
        for q in _rotated(self.host_queues(), a):
            if self.races(v.sid, idx, write, self.ancestors([self.lastof(q)])):
                continue
            node, args = self.host(q, bool((c >> 3) & 1), bool((c >> 4) & 1))
            if write:
                value = self.fresh()
                self.write(v.sid, idx, node, [value])
                args["writes"] = [(al, i, value)]
            else:
                args["reads"] = [(al, self.read(v.sid, idx, node))]
            return args
        return None


# --------------------------------------------------------------------------
# Execution


def differs(got, expect):
    """True when an observed list disagrees with the model somewhere it knows
    the value."""
    return len(got) != len(expect) or any(
        e is not None and g != e for g, e in zip(got, expect, strict=False)
    )


def host_accesses(aliases, reads, writes):
    """The part of a host function that reads and writes NumPy aliases:
    a callable returning a bad observation (a description) or None, and the
    number of elements it checks."""
    reads = [(al, aliases[al], exp) for al, exp in reads or ()]
    writes = [(aliases[al], i, v) for al, i, v in writes or ()]
    checked = sum(sum(e is not None for e in exp) for _, _, exp in reads)

    def run():
        bad = None
        for al, arr, exp in reads:
            got = [int(x) for x in arr]
            if differs(got, exp) and bad is None:
                bad = f"alias {al} holds {got}, the model says {exp}"
        for arr, i, v in writes:
            arr[i] = v
        return bad

    return run, checked


class BufferRunner:
    """Run-time half: the program's buffers and aliases, and the ops that
    use them (``queue(key)`` resolves a queue key)."""

    def __init__(self, queue, count):
        self.queue = queue
        self.count = count
        self.bufs = {}
        self.aliases = {}
        self.violations = []

    def clear(self, final):
        """Drops every reference but those the final check reads: returns
        [(description, buffer or array, expected values)]."""
        keep = [
            (
                f"{what} {ident}",
                (self.bufs if what == "b" else self.aliases)[ident],
                exp,
            )
            for what, ident, exp in final
        ]
        self.bufs.clear()
        self.aliases.clear()
        return keep

    def check_final(self, keep):
        for what, obj, expect in keep:
            got = [int(x) for x in (obj.to_numpy() if isinstance(obj, Buffer) else obj)]
            self.count("buffer elements checked", sum(e is not None for e in expect))
            if differs(got, expect):
                self.violations.append(
                    f"at the end {what} holds {got}, the model says {expect}"
                )

    def run(self, op):
        getattr(self, "_" + op.kind)(op.args)

    def _buf(self, a):
        q, n, kind, init = self.queue(a["q"]), a["n"], a["kind"], a["init"]
        if init == "numpy" and kind == "cpu":
            arr = np.array(a["values"], dtype=np.int32)
            buf = Buffer.from_numpy(arr)
        elif init == "numpy" and kind == "pin":
            buf = DevicePinnedBuffer.zeros((n,), DTYPE, q)
            arr = buf.to_numpy()
            arr[:] = a["values"]
        elif init == "numpy":
            buf = Buffer.from_numpy(np.array(a["values"], dtype=np.int32)).copy(q)
        elif kind == "pin" and init == "zeros" and a["variant"]:
            buf = DevicePinnedBuffer.zeros((n,), DTYPE, q)
        elif kind == "pin" and init == "zeros":
            buf = Buffer.zeros((n,), DTYPE, q, usage=Usage.STAGING)
        elif kind == "pin":
            buf = DevicePinnedBuffer(DTYPE, (n,), q)
        else:
            # (STAGING changes nothing on the CPU; on an accelerator it
            # would make pinned memory: kind pin.)
            usage = Usage.STAGING if a["variant"] and kind == "cpu" else Usage.DEFAULT
            make = Buffer.zeros if init == "zeros" else None
            buf = (
                make((n,), DTYPE, q, usage=usage)
                if make
                else Buffer(DTYPE, (n,), q, usage=usage)
            )
        if "al" in a:
            self.aliases[a["al"]] = arr
        if buf.stream is not q:
            self.violations.append(f"buffer {a['b']} is not bound to queue {a['q']}")
        self.bufs[a["b"]] = buf
        self.count("buffers")

    def _view(self, a):
        self.bufs[a["b"]] = self.bufs[a["base"]][a["start"] : a["stop"]]

    def _rebind(self, a):
        q = self.queue(a["q"])
        nb = self.bufs[a["b"]].to(q)
        if nb.stream is not q:
            self.violations.append(
                f"buffer {a['b']}.to(queue {a['q']}) is not bound to it"
            )
        self.bufs[a["new"]] = nb

    def _drop_buf(self, a):
        del self.bufs[a["b"]]

    def _copy(self, a):
        dst, src = self.bufs[a["dst"]], self.bufs[a["src"]]
        if a["dv"]:
            dst = dst[a["dv"][0] : a["dv"][1]]
        if a["sv"]:
            src = src[a["sv"][0] : a["sv"][1]]
        dst.inplace_copy_from(src)
        self.count("copies")
        self.count(f"{a['mode']} copies")

    def _bwrite(self, a):
        self.bufs[a["b"]][a["i"]] = a["v"]

    def _bread(self, a):
        buf, expect = self.bufs[a["b"]], a["expect"]
        if a["mode"] == "item":
            got = [buf[a["i"]].item()]
        else:
            got = [int(x) for x in buf.to_numpy()]
        self.count("buffer elements checked", sum(e is not None for e in expect))
        if differs(got, expect):
            self.violations.append(
                f"buffer {a['b']} {a['mode']} read {got}, the model says {expect}"
            )

    def _alias(self, a):
        self.aliases[a["al"]] = self.bufs[a["b"]].to_numpy()


def aux_queue(key):
    """A new queue object for an auxiliary queue key."""
    dev = CPU() if key[0] == "c" else driver.Accelerator(1)
    return dev.default_queue if key[1] == "0" else DeviceQueue(dev)


def aux_devices(accelerator, second):
    """Devices besides the model device whose queues programs use."""
    devs = [CPU()] if accelerator else []
    if second:
        devs.append(driver.Accelerator(1))
    return devs
