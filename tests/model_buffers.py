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

The ordering edges are SPEC §12.6's hazard records.  Every storage (an
allocation, shared by its views and ``to(stream)`` aliases) has a record:
the nodes of its last write and of the reads since.  An operation that
reads a storage runs after its last write; one that writes it, after its
last write and every read since; it then becomes a read or the last write
in the record.  Nothing else orders buffer work:

- a copy is one node on the destination's queue (after what is enqueued
  there so far, and after the records) (``enqueued``), except that
- a pageable source is read during the call, a host point after the
  source's last write; the destination is written by a node on its queue
  after that point and its record (``staged``); and
- a copy into pageable memory from an accelerator is complete on return:
  one host point after the destination's queue so far and both records
  (``complete``);
- host reads (``to_numpy``, ``item``) are host points after the last
  write, host writes (``buf[i] = v``) after the last write and the reads;
- ``Buffer.zeros`` fills in the order of the buffer's queue
  (``DevicePinnedBuffer.zeros`` on return, on the host); device memory is
  allocated in the order of its queue (its record's first write);
- ``buf.to(stream)`` of the same device shares the record and waits for
  nothing;
- untracked storage (``DevicePinnedBuffer``) has no record: a copy reading
  it waits for its buffer's queue so far, a write into it for nothing but
  the destination's queue, ``to_numpy`` for nothing and ``item`` for the
  buffer's queue.

Host functions, which read and write NumPy aliases, are in no record:
they are ordered by their queues only, and the compiler places them only
where that orders them against every conflicting access.

Lifetimes and other libraries (the accelerator variant; foreign_gpu.py):

- ``drop_all`` drops every reference to a storage whatever is pending on
  other queues, of its device and of another (its free must wait for all
  of it: the fake driver reports a free that does not, SPEC 12.7);
- ``import`` is ``Buffer.from_dlpack`` of a foreign producer whose write of
  fresh values is pending on a stream of its own behind a gate flag: the
  storage's first write is a node at the end of the default queue of its
  device, after the flag (SPEC 13);
- ``export`` hands a device buffer to a foreign consumer whose stream waits
  for a gate flag and then copies it: that read is after the storage's
  last write and the flag, and in no record, so later writes of the
  storage race with it until ``consumer_sync`` (the host waits for the
  consumer's stream); ``give_back`` calls the capsule's deleter, before or
  after the storage is dropped.  What each consumer read is checked at the
  end.

Every violation the fake driver records fails the program, whatever the
values show (test_model.py).

A host point (``Model.host_point``) is a moment of the issuing thread:
everything enqueued after it runs after it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from foreign_gpu import StreamConsumer, StreamProducer

from max import driver
from max.driver import CPU, Buffer, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType

BUFFER_KINDS = (
    ["buf"] * 3 + ["copy"] * 6 + ["hread"] * 3 + ["bwrite"] * 2 + ["bread"] * 3
    + ["alias"] * 2 + ["hwrite"] * 2 + ["view", "rebind", "drop_buf"]
    + ["drop_all"] * 2 + ["give_back", "consumer_sync"]
)  # fmt: skip
# Buffers shared with another library on the accelerator (foreign_gpu.py),
# each behind a gate flag of the program (compile_program hands one over).
FOREIGN_KINDS = ["import"] * 2 + ["export"] * 2
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
    tracked: bool  # False: untracked (DevicePinnedBuffer), no record
    values: list  # per element: the value the model says it holds (None: unknown)
    access: list  # per element: [(node, is_write)] since the last write
    # The hazard record (SPEC §12.6): the nodes of the last write and of the
    # reads since.
    writes: list = field(default_factory=list)
    reads: list = field(default_factory=list)


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
        self.storages: list[Storage] = []
        self.views: dict[int, View] = {}  # buffer id -> what it views
        self.live_b: list[int] = []
        self.aliases: dict[int, View] = {}
        self.live_al: list[int] = []
        self.next_value = 1000
        # Every access, for the compiler's own test: (sid, index, node, write).
        self.accesses: list[tuple] = []
        # Exports to foreign consumers: their read nodes and what they read.
        self.consumers: list[dict] = []

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

    def completes(self, q):
        return self.all_complete([self.lastof(q)])

    def all_complete(self, nodes):
        """True when none of ``nodes`` waits for good (a host wait for them
        returns)."""
        return all(n is None or self.m.completes(n) for n in nodes)

    def push(self, q, kind, extra=(), label=None):
        n = self.m.add(kind, [self.lastof(q), *extra], label, q)
        self.last[q] = n
        return n

    # Hazard records ---------------------------------------------------------
    def read_waits(self, v, host_alias=False):
        """What a read of view ``v`` waits for: its storage's last write;
        untracked, its buffer's queue so far (``host_alias``: a NumPy alias
        of untracked memory, nothing)."""
        st = self.storages[v.sid]
        if st.tracked:
            return list(st.writes)
        return [] if host_alias else [self.lastof(v.q)]

    def write_waits(self, v):
        """What a write into view ``v`` waits for: the last write and every
        read since (untracked: nothing)."""
        st = self.storages[v.sid]
        return list(st.writes) + list(st.reads) if st.tracked else []

    def note(self, read_sid, write_sid, node):
        """An operation at ``node`` read one storage and wrote another
        (either may be None)."""
        if write_sid is not None:
            st = self.storages[write_sid]
            st.writes, st.reads = [node], []
        if read_sid is not None and read_sid != write_sid:
            self.storages[read_sid].reads.append(node)

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
    def compile(self, kind, thread, a, b, c, gate=None):
        """Resolved ops for one raw buffer operation ([] when it does not
        apply: nothing alive, or every candidate would race or block).
        ``gate``: (flag id, its value, its signal's node) for the foreign
        kinds."""
        if kind in FOREIGN_KINDS:
            out = getattr(self, "_" + kind)(a, b, c, gate)
        else:
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
        (uninitialised: values unknown; device memory is born in its
        queue's order); ``numpy`` (fresh values: on the CPU
        ``Buffer.from_numpy``, bound to the CPU's default queue, its array
        an alias; device memory ``Buffer.from_numpy(...).copy(q)``, written
        in q's order; pinned memory ``DevicePinnedBuffer.zeros`` written
        through its ``to_numpy`` alias at once).  Pinned memory made by
        ``DevicePinnedBuffer`` is untracked; ``Buffer.zeros(...,
        usage=STAGING)`` is tracked."""
        if len(self.live_b) >= MAX_BUFFERS:
            return None
        kind = self.kinds[b % len(self.kinds)]
        n = 2 + c % 7
        init = ("zeros", "numpy", "zeros", "empty", "numpy")[(c >> 3) % 5]
        variant = bool((c >> 5) & 1)  # cpu: usage STAGING; pin: on the host
        if init == "numpy" and kind == "cpu":
            q = self.cpu_default_queue()
        else:
            # Mostly on a queue that is not blocked for good (a fill behind
            # a held function keeps the buffer's record pending).
            qs = _rotated(self.queues_for(kind), a)
            free = [q for q in qs if self.completes(q)]
            q = free[0] if free and not b & 4 else qs[0]
        if init == "numpy":
            values = [self.fresh() for _ in range(n)]
        else:
            values = [0 if init == "zeros" else None] * n
        untracked = kind == "pin" and (init != "zeros" or variant)
        sid = len(self.storages)
        self.storages.append(
            Storage(kind, not untracked, [None] * n, [[] for _ in range(n)])
        )
        on_host = untracked or (kind == "cpu" and init != "zeros")
        node = self.m.host_point([]) if on_host else self.push(q, "fill")
        self.write(sid, range(n), node, values)
        self.note(None, sid, node)
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
            # The same storage and record: no wait (SPEC §12.6).
            nb = self.new_buffer(View(v.sid, v.off, v.n, q))
            return {"b": bid, "new": nb, "q": q}
        return None

    def _drop_buf(self, a, b, c):
        if not self.live_b:
            return None
        bid = _rotated(self.live_b, a)[0]
        self.live_b.remove(bid)
        return {"b": bid}

    def _drop_all(self, a, b, c):
        """Drops every reference to one storage (its buffers, views,
        ``to(stream)`` aliases and NumPy aliases), whatever other queues
        still have pending: its memory must outlive their work (SPEC 12.7;
        the fake driver reports a free that does not wait)."""
        held = sorted(
            {self.views[x].sid for x in self.live_b}
            | {self.aliases[x].sid for x in self.live_al}
        )
        if not held:
            return None
        sid = _rotated(held, a)[0]
        bufs = [x for x in self.live_b if self.views[x].sid == sid]
        aliases = [x for x in self.live_al if self.aliases[x].sid == sid]
        self.live_b = [x for x in self.live_b if x not in bufs]
        self.live_al = [x for x in self.live_al if x not in aliases]
        return {"bufs": bufs, "aliases": aliases}

    def _import(self, a, b, c, gate):
        """``Buffer.from_dlpack`` of a foreign producer (StreamProducer)
        whose write of fresh values on its own stream waits for the gate
        flag: its storage's record starts with a write at the end of the
        default queue of its device, after the producer's write (SPEC 13).
        b bit 0: on the second accelerator; c: the length."""
        if not self.accelerator or len(self.live_b) >= MAX_BUFFERS:
            return None
        fid, value, sig = gate
        second = self.second and bool(b & 1)
        kind, q = ("dev1", GPU1_QUEUES[0]) if second else ("dev", 0)
        n = 2 + c % 7
        values = [self.fresh() for _ in range(n)]
        sid = len(self.storages)
        self.storages.append(Storage(kind, True, [None] * n, [[] for _ in range(n)]))
        node = self.push(q, "import", [sig])
        self.write(sid, range(n), node, values)
        self.note(None, sid, node)
        bid = self.new_buffer(View(sid, 0, n, q))
        return {"b": bid, "q": q, "device": int(second), "values": values,
                "f": fid, "value": value}  # fmt: skip

    def _export(self, a, b, c, gate):
        """``__dlpack__(stream=...)`` of a device buffer to a foreign
        consumer (StreamConsumer) whose stream waits for the gate flag and
        then copies the view into memory of its own: that read is after the
        storage's last write and the gate, and in no record (SPEC 12.6)."""
        fid, value, sig = gate
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            st = self.storages[v.sid]
            idx = list(range(v.off, v.off + v.n))
            preds = [*st.writes, sig]
            if st.kind not in ("dev", "dev1") or self.races(
                v.sid, idx, False, self.ancestors(preds)
            ):
                continue
            node = self.m.add("consume", preds)
            cid = len(self.consumers)
            self.consumers.append({"node": node, "expect": self.read(v.sid, idx, node)})
            return {"b": bid, "c": cid, "f": fid, "value": value,
                    "device": int(st.kind == "dev1")}  # fmt: skip
        return None

    def _give_back(self, a, b, c):
        """The consumer calls the capsule's deleter (its copy may still be
        pending), before or after the storage is dropped."""
        held = [i for i, x in enumerate(self.consumers) if not x.get("given")]
        if not held:
            return None
        cid = _rotated(held, a)[0]
        self.consumers[cid]["given"] = True
        return {"c": cid}

    def _consumer_sync(self, a, b, c):
        """The host waits for a consumer's stream: its read is over, so the
        storage may be written again."""
        done = [
            i
            for i, x in enumerate(self.consumers)
            if not x.get("synced") and self.m.completes(x["node"])
        ]
        if not done:
            return None
        cid = _rotated(done, a)[0]
        self.consumers[cid]["synced"] = True
        self.m.host_point([self.consumers[cid]["node"]])
        return {"c": cid}

    def _copy(self, a, b, c):
        """``dst.inplace_copy_from(src)`` of two live buffers (or equally
        long sub-views; c: their offsets).  Bits 8-11 of c add host
        functions that make a copy running too early or too late show in
        the data: first a slow (2) or held (4) one on a queue the copy runs
        after (the destination's; bit 1 picks the source's for an enqueued
        copy from untracked memory, which waits for its queue), then (8)
        one on the other queue; each reads an alias of the destination or
        writes an alias of the source, where that is race-free (else it is
        a plain host function)."""
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
        ld = self.lastof(D.q)
        rw, ww = self.read_waits(S), self.write_waits(D)
        if sside == "pageable":
            # Read during the call, after the source's last write; written
            # in the destination queue's order, after its record.
            mode = "staged"
            if not self.all_complete(rw):
                return None
            anc_r = self.ancestors(rw)
            anc_w = anc_r | self.ancestors([ld, *ww])
        elif dside == "pageable":
            # Complete on return: after the destination's queue so far and
            # both records.
            mode = "complete"
            if not self.all_complete([ld, *rw, *ww]):
                return None
            anc_r = anc_w = self.ancestors([ld, *rw, *ww])
        else:
            mode = "enqueued"
            anc_r = anc_w = self.ancestors([ld, *rw, *ww])
        if self.races(S.sid, sr, False, anc_r) or self.races(D.sid, dr, True, anc_w):
            return None
        return mode, dr, sr

    def _emit_copy(self, d, s, shape, bits):
        mode, dr, sr = shape
        D, S = self.views[d], self.views[s]
        out = []
        # Before the copy, on a queue the copy then runs after: the
        # destination's, or an untracked source's for an enqueued copy.
        src_queue_first = (
            mode == "enqueued" and bits & 1 and not self.storages[S.sid].tracked
        )
        first = S.q if src_queue_first else D.q
        other = D.q if first == S.q else S.q
        # (Not before a copy complete on return, which would wait for it,
        # and on queues the program still holds: a buffer may outlive its
        # queue's reference.)
        if bits & 6 and mode != "complete" and self.is_live(first):
            held = bool(bits & 4)
            out.append(
                ("host", self._around(first, D, S, sr, src_queue_first, True, held))
            )
        out.append(("copy", self._commit_copy(d, s, mode, dr, sr)))
        if bits & 8 and other != first and self.is_live(other):
            # Not slow: if it must wait for the copy but does not, it runs
            # (and shows) before the held work is released.
            out.append(("host", self._around(other, D, S, sr, True)))
        return out

    def _around(self, q, D, S, sr, may_write_src, slow=False, held=False):
        """A host function on ``q`` next to a copy from S (elements ``sr``)
        into D: it reads an alias of D or (``may_write_src``, on S's queue)
        writes one of S, where that is race-free; else a plain one."""
        anc = self.ancestors([self.lastof(q)])
        for al in self.live_al:
            v = self.aliases[al]
            idx = list(range(v.off, v.off + v.n))
            if v.sid == D.sid and not self.races(v.sid, idx, False, anc):
                node, args = self.host(q, slow, held)
                args["reads"] = [(al, self.read(v.sid, idx, node))]
                return args
        for al in self.live_al if may_write_src and q == S.q else ():
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
        doff, soff, n = dr.start - D.off, sr.start - S.off, len(dr)
        # (After the host function _emit_copy may have put first.)
        rw, ww = self.read_waits(S), self.write_waits(D)
        if mode == "staged":
            r = self.m.host_point(rw)
            w = self.push(D.q, "copy", [r, *ww])
        elif mode == "complete":
            r = w = self.m.host_point([self.lastof(D.q), *rw, *ww])
        else:
            r = w = self.push(D.q, "copy", [*rw, *ww])
        values = self.read(S.sid, sr, r)
        self.write(D.sid, dr, w, values)
        self.note(S.sid, None, r)
        self.note(None, D.sid, w)
        return {
            "dst": d,
            "src": s,
            "dv": None if n == D.n else [doff, doff + n],
            "sv": None if n == S.n else [soff, soff + n],
            "mode": mode,
        }

    def _bwrite(self, a, b, c):
        """``buf[i] = v``: after the last write and the reads since (an
        untracked storage: nothing), complete on return."""
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            i = b % v.n
            idx = [v.off + i]
            preds = self.write_waits(v)
            if not self.all_complete(preds) or self.races(
                v.sid, idx, True, self.ancestors(preds)
            ):
                continue
            value = self.fresh()
            node = self.m.host_point(preds)
            self.write(v.sid, idx, node, [value])
            self.note(None, v.sid, node)
            return {"b": bid, "i": i, "v": value}
        return None

    def _bread(self, a, b, c):
        """``buf[i].item()`` or ``buf.to_numpy()``: after the last write;
        untracked, ``item`` after the buffer's queue and ``to_numpy`` (an
        alias) after nothing."""
        mode = "item" if c & 1 else "numpy"
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            preds = self.read_waits(v, host_alias=mode == "numpy")
            i = b % v.n
            idx = [v.off + i] if mode == "item" else list(range(v.off, v.off + v.n))
            if not self.all_complete(preds) or self.races(
                v.sid, idx, False, self.ancestors(preds)
            ):
                continue
            node = self.m.host_point(preds)
            expect = self.read(v.sid, idx, node)
            self.note(v.sid, None, node)
            return {"b": bid, "mode": mode, "i": i, "expect": expect}
        return None

    def _alias(self, a, b, c):
        """A NumPy alias of CPU or pinned memory: ``to_numpy`` waits for the
        last write (untracked memory: for nothing)."""
        if len(self.live_al) >= MAX_ALIASES:
            return None
        for bid in _rotated(self.live_b, a):
            v = self.views[bid]
            preds = self.read_waits(v, host_alias=True)
            if self.kind_of(bid) in ("cpu", "pin") and self.all_complete(preds):
                self.m.host_point(preds)
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
    use them (``queue(key)`` resolves a queue key, ``flag(id)`` a gate
    flag)."""

    def __init__(self, queue, count, flag=None):
        self.queue = queue
        self.count = count
        self.flag = flag
        self.bufs = {}
        self.aliases = {}
        self.producers = []
        self.consumers = {}
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

    def _drop_all(self, a):
        for b in a["bufs"]:
            del self.bufs[b]
        for al in a["aliases"]:
            del self.aliases[al]

    def _import(self, a):
        dev = driver.Accelerator(a["device"])
        gate = (self.flag(a["f"]), a["value"])
        producer = StreamProducer(dev.api, dev, a["values"], gate)
        self.producers.append(producer)
        buf = Buffer.from_dlpack(producer)
        if buf.stream is not self.queue(a["q"]):
            self.violations.append(f"import {a['b']} is not bound to queue {a['q']}")
        self.bufs[a["b"]] = buf
        self.count("imports")

    def _export(self, a):
        dev = driver.Accelerator(a["device"])
        consumer = StreamConsumer(dev.api, dev, (self.flag(a["f"]), a["value"]))
        buf = self.bufs[a["b"]]
        consumer.consume(buf, buf.num_elements)
        self.consumers[a["c"]] = consumer
        self.count("exports")

    def _give_back(self, a):
        self.consumers[a["c"]].give_back()

    def _consumer_sync(self, a):
        self.consumers[a["c"]].synchronize()

    def finish_foreign(self, expected):
        """Once every gate is open and the program's references are gone:
        what each consumer read (``expected``: the model's, by consumer),
        then the foreign streams and memory are freed; each producer's
        capsule must have been given back (its memory is not ours)."""
        for cid, consumer in sorted(self.consumers.items()):
            got, expect = consumer.result(), expected[cid]
            self.count("buffer elements checked", sum(e is not None for e in expect))
            if differs(got, expect):
                self.violations.append(
                    f"consumer {cid} read {got}, the model says {expect}"
                )
            consumer.close()
        self.consumers.clear()
        for i, producer in enumerate(self.producers):
            if not wait_released(producer):
                self.violations.append(f"producer {i}'s capsule was never given back")
                continue
            producer.close()
        self.producers.clear()


def wait_released(producer, timeout=20.0):
    """Whether the producer's capsules are all given back within
    ``timeout`` (our memory is released on a worker thread)."""
    deadline = time.monotonic() + timeout
    while not producer.released:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


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
