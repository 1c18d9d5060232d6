# ruff: noqa: E501
"""Hostile arguments to Buffer never crash or hang the interpreter (SPEC
§12.3, §12.5, §12.7, §8, §10), in the style of test_hostile.py.

The tables run in a child interpreter so that a segfault, an abort or a
hang shows up as a failing test naming the entry that was running.  Each
entry says what it must do:

    T  raise TypeError
    V  raise ValueError
    I  raise IndexError
    C  raise a clean error: TypeError, ValueError, IndexError,
       OverflowError or MemoryError
    O  anything clean: return, or raise one of C's errors
    E  raise some Exception (e.g. the one an ``__index__`` raised)
    A  anything but a crash (may return or raise)
"""

from __future__ import annotations

import json

import pytest

CHILD = r"""
import copy, gc, itertools, json, pickle, sys, threading, weakref
import numpy as np
from max.driver import CPU, Buffer, CompletionFlag, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType
group = sys.argv[1]

cpu = CPU()
q = DeviceQueue(cpu)
b = Buffer.zeros((3, 4), DType.int32)
v = Buffer.zeros((5,), DType.int8)
s = Buffer.zeros((), DType.float32)
CLEAN = (TypeError, ValueError, IndexError, OverflowError, MemoryError)

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
class LyingSeq:
    def __len__(self):
        return 10**9
    def __getitem__(self, i):
        if i >= 2:
            raise IndexError(i)
        return 2
class RaisingSeq:
    def __len__(self):
        return 2
    def __getitem__(self, i):
        raise ZeroDivisionError("item")
class GrowingList(list):
    def __len__(self):
        self.append(1)
        return list.__len__(self)
class RaisingEq:
    def __eq__(self, other):
        raise ZeroDivisionError("eq")
    __hash__ = object.__hash__
class RaisingFloat:
    def __float__(self):
        raise ZeroDivisionError("float")

entries = []
def add(label, thunk, expect):
    entries.append((label, thunk, expect))

def gen():
    yield 2
    yield 3

def table_shapes():
    shapes = {
        "(2**63,)": ((2**63,), "C"), "(2**64,)": ((2**64,), "C"),
        "(2**1000,)": ((2**1000,), "C"), "(-1,)": ((-1,), "V"),
        "(-(2**1000),)": ((-(2**1000),), "C"), "(2**32,)*3": ((2**32,) * 3, "C"),
        "(2**62,)": ((2**62,), "C"), "(2**31, 2**31)": ((2**31, 2**31), "C"),
        "(0, 2**63)": ((0, 2**63), "C"), "(1,)*65": ((1,) * 65, "O"),
        "(1,)*1000": ((1,) * 1000, "O"), "(2,)*65": ((2,) * 65, "C"),
        "(0,)*1000": ((0,) * 1000, "O"), "[1.5]": ([1.5], "T"),
        "['1']": (["1"], "T"), "[None]": ([None], "T"), "'abc'": ("abc", "T"),
        "b'ab'": (b"ab", "T"), "5": (5, "T"), "None": (None, "T"),
        "generator": (gen(), "T"), "{1: 2}": ({1: 2}, "T"), "{2, 3}": ({2, 3}, "T"),
        "[RaisingIndex]": ([RaisingIndex()], "E"), "[NegIndex]": ([NegIndex()], "V"),
        "[HugeIndex]": ([HugeIndex()], "C"), "[StrIndex]": ([StrIndex()], "T"),
        "LyingSeq": (LyingSeq(), "O"), "RaisingSeq": (RaisingSeq(), "E"),
        "GrowingList": (GrowingList([2]), "O"), "np.array([2, 3])": (np.array([2, 3]), "O"),
        "[True, 2]": ([True, 2], "O"), "[2+0j]": ([2 + 0j], "T"),
        "[np.float64(2)]": ([np.float64(2)], "T"), "[[2]]": ([[2]], "T"),
    }
    for label, (shape, exp) in shapes.items():
        add(f"Buffer(int8, {label})", lambda sh=shape: Buffer(DType.int8, sh), exp)
        add(f"Buffer(float64, {label})", lambda sh=shape: Buffer(DType.float64, sh), exp)
        add(f"Buffer.zeros({label})", lambda sh=shape: Buffer.zeros(sh, DType.int8), exp)
        add(f"Buffer(int8, {label}, q)", lambda sh=shape: Buffer(DType.int8, sh, q), exp)
        view_exp = "O" if exp == "O" or shape is None else ("C" if exp in "VC" else exp)
        add(f"v.view(int8, {label})", lambda sh=shape: v.view(DType.int8, sh), view_exp)
        add(f"DevicePinnedBuffer({label}, cpu)", lambda sh=shape: DevicePinnedBuffer(DType.int8, sh, cpu), "E" if exp == "E" else ("T" if exp == "T" else "C"))
    # Every size here is at least 2**62 bytes: no machine can allocate it.
    for dim in (2**64 - 1, 2**63 - 1, 2**62, 2**40):
        for dt in (DType.bool, DType.float4_e2m1fn, DType.uint64):
            add(f"Buffer({dt}, ({dim}, {dim}))", lambda dt=dt, dim=dim: Buffer(dt, (dim, dim)), "C")
            if dim >= 2**62:
                add(f"Buffer.zeros(({dim},), {dt})", lambda dt=dt, dim=dim: Buffer.zeros((dim,), dt), "C")

def table_dtypes():
    bad = {"81": 81, "'float32'": "float32", "None": None, "np.float32": np.float32,
           "np.dtype('f4')": np.dtype("f4"), "Usage.STAGING": Usage.STAGING, "DType": DType,
           "object()": object(), "1.5": 1.5, "RaisingEq": RaisingEq()}
    for label, dt in bad.items():
        add(f"Buffer({label}, (2,))", lambda dt=dt: Buffer(dt, (2,)), "T")
        add(f"Buffer({label}, (-1,))", lambda dt=dt: Buffer(dt, (-1,)), "T")
        add(f"Buffer.zeros((2,), {label})", lambda dt=dt: Buffer.zeros((2,), dt), "T")
        add(f"Buffer.scalar(1, {label})", lambda dt=dt: Buffer.scalar(1, dt), "T")
        add(f"b.view({label})", lambda dt=dt: b.view(dt), "T")
        add(f"b.view({label}, (4,))", lambda dt=dt: b.view(dt, (4,)), "T")
        add(f"Buffer.mmap(path, {label}, (2,))", lambda dt=dt: Buffer.mmap(PATH, dt, (2,)), "T")
    for label, dev in {"'cpu'": "cpu", "0": 0, "flag": CompletionFlag(cpu), "object()": object(), "DType.int8": DType.int8}.items():
        add(f"Buffer(int8, (2,), {label})", lambda d=dev: Buffer(DType.int8, (2,), d), "T")
        add(f"Buffer(int8, (2,), device={label})", lambda d=dev: Buffer(DType.int8, (2,), device=d), "T")
        add(f"Buffer(int8, (2,), stream={label})", lambda d=dev: Buffer(DType.int8, (2,), stream=d), "T")
        add(f"Buffer.zeros((2,), int8, {label})", lambda d=dev: Buffer.zeros((2,), DType.int8, d), "T")
        add(f"Buffer.scalar(1, int8, {label})", lambda d=dev: Buffer.scalar(1, DType.int8, d), "T")
        add(f"DevicePinnedBuffer(int8, (2,), {label})", lambda d=dev: DevicePinnedBuffer(DType.int8, (2,), d), "T")
        add(f"b.copy({label})", lambda d=dev: b.copy(d), "T")
        add(f"b.to({label})", lambda d=dev: b.to(d), "T")
        add(f"b.to([{label}])", lambda d=dev: b.to([d]), "T")
    for label, usage in {"'staging'": "staging", "1.5": 1.5, "object()": object(), "DType.int8": DType.int8}.items():
        add(f"Buffer(int8, (2,), usage={label})", lambda u=usage: Buffer(DType.int8, (2,), usage=u), "T")
        add(f"Buffer.zeros((2,), int8, usage={label})", lambda u=usage: Buffer.zeros((2,), DType.int8, usage=u), "T")
    add("Buffer(int8, (2,), usage=7)", lambda: Buffer(DType.int8, (2,), usage=7), "O")
    add("Buffer(int8, (2,), usage=Usage(0))", lambda: Buffer(DType.int8, (2,), usage=Usage(0)), "O")
    for dt in DType:
        add(f"Buffer({dt}, (3, 0))", lambda dt=dt: Buffer(dt, (3, 0)), "O")
        add(f"Buffer.scalar(1, {dt})", lambda dt=dt: Buffer.scalar(1, dt), "O")
        add(f"Buffer.scalar(nan, {dt})", lambda dt=dt: Buffer.scalar(float("nan"), dt), "O")
        add(f"Buffer.scalar(2**70, {dt})", lambda dt=dt: Buffer.scalar(2**70, dt), "O")
        add(f"item() of {dt}", lambda dt=dt: Buffer.zeros((1,), dt).item(), "O")
        add(f"str() of {dt}", lambda dt=dt: str(Buffer.zeros((2,), dt)), "O")
        add(f"to_numpy() of {dt}", lambda dt=dt: Buffer.zeros((2,), dt).to_numpy(), "O")
        add(f"b.view({dt})", lambda dt=dt: b.view(dt), "O")
        add(f"v[1:].view({dt})", lambda dt=dt: v[1:].view(dt), "O")
        add(f"b[::-1, ::2].view({dt})", lambda dt=dt: b[::-1, ::2].view(dt), "O")
        add(f"s.view({dt})", lambda dt=dt: s.view(dt), "O")
        add(f"s.view({dt}, (1,))", lambda dt=dt: s.view(dt, (1,)), "O")
    add("b.view()", lambda: b.view(), "T")
    add("b.view(int8, (4,), 1)", lambda: b.view(DType.int8, (4,), 1), "T")
    add("b.view(int8, bogus=1)", lambda: b.view(DType.int8, bogus=1), "T")
    add("b.view(int8, (49,))", lambda: b.view(DType.int8, (49,)), "V")
    add("b.view(int64, (7,))", lambda: b.view(DType.int64, (7,)), "V")
    add("b[1:, 1:].view(int8, (40,))", lambda: b[1:, 1:].view(DType.int8, (40,)), "O")
    add("b.view(int64)", lambda: b.view(DType.int64), "O")
    add("v.view(int16)", lambda: v.view(DType.int16), "V")

def table_index():
    idx = {
        "2**63": 2**63, "2**64": 2**64, "-(2**63)-1": -(2**63) - 1, "2**1000": 2**1000,
        "-(2**1000)": -(2**1000), "5": 5, "-6": -6,
    }
    for label, i in idx.items():
        add(f"v[{label}]", lambda i=i: v[i], "I")
        add(f"v[{label}] = 1", lambda i=i: v.__setitem__(i, 1), "I")
        add(f"b[0, {label}]", lambda i=i: b[0, i], "I")
        add(f"b[{label}, 0] = 1", lambda i=i: b.__setitem__((i, 0), 1), "I")
    odd = {
        "1.5": 1.5, "None": None, "Ellipsis": Ellipsis, "'a'": "a", "[1, 2]": [1, 2],
        "np.array([1])": np.array([1]), "slice('a')": slice("a"), "slice(1.5)": slice(1.5),
        "slice(None, None, 1.5)": slice(None, None, 1.5), "RaisingIndex": RaisingIndex(),
        "HugeIndex": HugeIndex(), "StrIndex": StrIndex(), "object()": object(), "b": b,
        "(Ellipsis, 0)": (Ellipsis, 0), "(None, 0)": (None, 0),
    }
    for label, i in odd.items():
        exp = "E" if label in ("RaisingIndex",) else "C"
        add(f"v[{label}]", lambda i=i: v[i], exp)
        add(f"v[{label}] = 1", lambda i=i: v.__setitem__(i, 1), exp)
        # A list is a key (MAX's Sequence[int | slice]): b[[1, 2]] is b[1, 2].
        add(f"b[{label}]", lambda i=i: b[i], "O" if label == "[1, 2]" else exp)
        add(f"s[{label}]", lambda i=i: s[i], exp)
    ok_or_clean = {
        "True": True, "np.int64(2)": np.int64(2), "np.array(2)": np.array(2), "NegIndex": NegIndex(),
        "slice(0, 2**100)": slice(0, 2**100), "slice(-2**100, 2**100, 2**100)": slice(-(2**100), 2**100, 2**100),
        "slice(None, None, 2**63)": slice(None, None, 2**63), "slice(None, None, -(2**63))": slice(None, None, -(2**63)),
        "slice(None, None, -(2**100))": slice(None, None, -(2**100)), "slice(2**64, -2**64, -1)": slice(2**64, -(2**64), -1),
        "slice(None, None, 0)": slice(None, None, 0), "slice(HugeIndex)": slice(HugeIndex()),
        "slice(NegIndex)": slice(NegIndex()), "slice(RaisingIndex)": slice(RaisingIndex()),
    }
    for label, i in ok_or_clean.items():
        exp = "E" if "Raising" in label else "O"
        add(f"v[{label}]", lambda i=i: v[i], exp)
        add(f"v[{label}].to_numpy()", lambda i=i: v[i].to_numpy(), exp)
        add(f"v[{label}].copy()", lambda i=i: v[i].copy(), exp)
    for n in (0, 1, 2, 3, 65, 1000):
        add(f"b[(0,) * {n}]", lambda n=n: b[(0,) * n], "O" if n == 2 else "V")
        add(f"b[(0,) * {n}] = 1", lambda n=n: b.__setitem__((0,) * n, 1), "O" if n == 2 else "V")
        add(f"b[(slice(None),) * {n}]", lambda n=n: b[(slice(None),) * n], "O" if n == 2 else "V")
        add(f"s[(0,) * {n}]", lambda n=n: s[(0,) * n], "O" if n <= 1 else "C")
    for i in (1, -1, 2**64):
        add(f"s[{i}]", lambda i=i: s[i], "C")
        add(f"s[{i}] = 1", lambda i=i: s.__setitem__(i, 1), "C")
    add("s[:]", lambda: s[:], "C")
    add("b[1:2, 0] = 1", lambda: b.__setitem__((slice(1, 2), 0), 1), "C")
    add("b[::0, 0]", lambda: b[::0, 0], "V")
    add("del b[0, 0]", lambda: b.__delitem__((0, 0)), "E")
    # value: (expectation for integer dtypes, for bool, for float dtypes)
    values = {
        "'x'": ("x", "TTT"), "None": (None, "TTT"), "[1]": ([1], "TTT"),
        "object()": (object(), "TTT"), "b'1'": (b"1", "TTT"), "b": (b, "CCC"),
        "1+2j": (1 + 2j, "CCC"), "np.array([1, 2])": (np.array([1, 2]), "CCC"),
        "2**1000": (2**1000, "COO"), "-(2**1000)": (-(2**1000), "COO"),
        "2**1100": (2**1100, "COC"), "-(2**1100)": (-(2**1100), "COC"),
        "2**64": (2**64, "COO"), "nan": (float("nan"), "OOO"), "inf": (float("inf"), "OOO"),
        "-1": (-1, "OOO"), "300": (300, "OOO"), "np.array(1)": (np.array(1), "OOO"),
        "np.float64(1e300)": (np.float64(1e300), "OOO"),
        "np.datetime64(1, 's')": (np.datetime64(1, "s"), "OOO"),
        "RaisingFloat": (RaisingFloat(), "EAE"), "RaisingIndex": (RaisingIndex(), "EAE"),
        "HugeIndex": (HugeIndex(), "EAA"),
    }
    kinds = {DType.int8: 0, DType.uint8: 0, DType.uint64: 0, DType.bool: 1,
             DType.float16: 2, DType.bfloat16: 2, DType.float8_e4m3fn: 2,
             DType.float8_e8m0fnu: 2, DType.float64: 2}
    for dt, kind in kinds.items():
        buf = Buffer.zeros((2,), dt)
        for label, (value, exp) in values.items():
            add(f"{dt}[0] = {label}", lambda buf=buf, value=value: buf.__setitem__(0, value), exp[kind])
    # Sub-byte floats: the SPEC does not say which values convert.
    for dt in (DType.float4_e2m1fn, DType.float6_e2m3fn, DType.float6_e3m2fn):
        buf = Buffer.zeros((2,), dt)
        for label, (value, _) in values.items():
            add(f"{dt}[0] = {label}", lambda buf=buf, value=value: buf.__setitem__(0, value), "A")
        add(f"{dt}[0] = 1.0", lambda buf=buf: buf.__setitem__(0, 1.0), "O")

def table_numpy():
    arrays = {
        "object": (np.array([1, "a"], dtype=object), "V"),
        "structured": (np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]), "V"),
        "complex": (np.zeros(3, np.complex64), "V"), "str": (np.array(["ab"]), "V"),
        "bytes": (np.array([b"ab"]), "V"), "datetime": (np.zeros(3, "datetime64[s]"), "V"),
        "timedelta": (np.zeros(3, "timedelta64[s]"), "V"), "void": (np.zeros(3, "V4"), "V"),
        "longdouble": (np.zeros(3, np.longdouble), "O"), ">i4": (np.zeros(3, ">i4"), "O"),
        "empty object": (np.zeros(0, dtype=object), "V"), "0-d object": (np.array(None), "V"),
        "huge strides": (np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (2**20,), (0,)), "O"),
        "negative strides": (np.arange(10)[::-3], "O"), "matrix": (np.asmatrix(np.eye(2)), "O"),
        "masked": (np.ma.masked_array([1, 2], mask=[0, 1]), "O"),
        "memmap-like readonly": (np.frombuffer(b"abcd", np.uint8), "O"),
        "32 dims": (np.zeros((1,) * 32, np.int8), "O"), "64 dims": (np.zeros((1,) * 64, np.int8), "O"),
        "bool": (np.array([True]), "O"), "float16": (np.zeros(3, np.float16), "O"),
    }
    for label, (arr, exp) in arrays.items():
        add(f"from_numpy({label})", lambda a=arr: Buffer.from_numpy(a), exp)
        add(f"from_numpy({label}).to_numpy()", lambda a=arr: Buffer.from_numpy(a).to_numpy(), exp)
    for label, obj in {"list": [1, 2], "None": None, "5": 5, "'abc'": "abc", "b": b,
                       "dict": {}, "RaisingEq": RaisingEq()}.items():
        add(f"from_numpy({label})", lambda o=obj: Buffer.from_numpy(o), "C")
    add("from_numpy()", lambda: Buffer.from_numpy(), "T")
    add("from_numpy(a, a)", lambda: Buffer.from_numpy(np.zeros(2), np.zeros(2)), "T")
    modes = {"'bogus'": "bogus", "None": None, "5": 5, "'c'": "c", "'readonly'": "readonly"}
    for label, mode in modes.items():
        add(f"mmap(mode={label})", lambda m=mode: Buffer.mmap(PATH, DType.uint8, (4,), mode=m), "O" if label in ("'c'", "'readonly'") else "C")
    for off in (-1, 2**63, 2**64, 9, 1.5, "0"):
        add(f"mmap(offset={off!r})", lambda o=off: Buffer.mmap(PATH, DType.uint8, (2,), offset=o), "O" if off == 9 else "C")
    add("mmap(shape too big)", lambda: Buffer.mmap(PATH, DType.uint8, (2**40,), mode="r"), "C")
    add("mmap(missing)", lambda: Buffer.mmap(PATH + ".missing", DType.uint8, (2,)), "E")
    add("mmap(None)", lambda: Buffer.mmap(None, DType.uint8, (2,)), "E")
    add("mmap(directory)", lambda: Buffer.mmap("/", DType.uint8, (2,)), "E")
    for bad in (None, 5, np.zeros(12, np.int32), [1, 2], "b", DType.int32):
        add(f"b.inplace_copy_from({bad!r:.20})", lambda x=bad: b.inplace_copy_from(x), "T")
    add("b.inplace_copy_from()", lambda: b.inplace_copy_from(), "T")
    add("b.inplace_copy_from(b, b)", lambda: b.inplace_copy_from(b, b), "T")
    for align in (0, -1, 3, 2**64, 2**1000, 1.5, "x", None):
        add(f"b._aligned({align!r})", lambda a=align: b._aligned(a), "O")
    add("b._data_ptr(1)", lambda: b._data_ptr(1), "T")
    add("b.item(1)", lambda: b[0, 0].item(1), "T")
    add("b.to()", lambda: b.to(), "T")
    add("b.to([])", lambda: b.to([]), "O")
    add("b.to(iter([cpu]))", lambda: b.to(iter([cpu])), "O")
    add("b.to([cpu] * 10000)", lambda: b.to([cpu] * 10000), "O")
    add("b.copy(cpu, q)", lambda: b.copy(cpu, q), "T")
    add("b.contiguous(1)", lambda: b.contiguous(1), "T")

def table_objects():
    for attr in ("shape", "dtype", "device", "stream", "strides", "rank",
                 "num_elements", "element_size", "is_contiguous", "is_host",
                 "pinned", "usage"):
        add(f"setattr(b, {attr})", lambda a=attr: setattr(b, a, 5), "E")
        add(f"delattr(b, {attr})", lambda a=attr: delattr(b, a), "E")
    for name, obj in (("b", b), ("view", b[::-1, 1]), ("s", s)):
        add(f"copy.copy({name})", lambda o=obj: copy.copy(o), "A")
        add(f"copy.deepcopy({name})", lambda o=obj: copy.deepcopy(o), "A")
        add(f"pickle.dumps({name})", lambda o=obj: pickle.dumps(o), "A")
        add(f"weakref.ref({name})", lambda o=obj: weakref.ref(o), "A")
        add(f"len({name})", lambda o=obj: len(o), "A")
        add(f"iter({name})", lambda o=obj: list(itertools.islice(iter(o), 5)), "A")
        add(f"bool({name})", lambda o=obj: bool(o), "A")
        add(f"hash({name})", lambda o=obj: hash(o), "A")
        add(f"{name} == 5", lambda o=obj: o == 5, "A")
        add(f"{name} == RaisingEq", lambda o=obj: o == RaisingEq(), "A")
        add(f"{name} < 5", lambda o=obj: o < 5, "E")
        add(f"{name} + 1", lambda o=obj: o + 1, "A")
        add(f"memoryview({name})", lambda o=obj: memoryview(o), "A")
        add(f"np.asarray({name})", lambda o=obj: np.asarray(o), "A")
        add(f"repr({name})", lambda o=obj: repr(o), "A!")
        add(f"str({name})", lambda o=obj: str(o), "A!")
    for T in (Buffer, DevicePinnedBuffer):
        add(f"subclass {T.__name__}", lambda T=T: type("Sub", (T,), {}), "A")
        add(f"{T.__name__}.__new__(type)", lambda T=T: T.__new__(type), "E")
        add(f"object.__new__({T.__name__})", lambda T=T: object.__new__(T), "E")
        try:
            u = T.__new__(T)
        except Exception:
            continue
        add(f"repr(uninit {T.__name__})", lambda u=u: repr(u), "A")
        for name in dir(T):
            if name.startswith("__") or name in ("zeros", "scalar", "from_numpy", "from_dlpack", "mmap"):
                continue
            def use(u=u, name=name):
                a = getattr(u, name)
                if callable(a):
                    if name in ("view",):
                        a(DType.int8)
                    elif name in ("to", "copy"):
                        a(cpu)
                    elif name == "inplace_copy_from":
                        a(b)
                    else:
                        a()
            add(f"uninit {T.__name__}.{name}", use, "E")
        add(f"b.inplace_copy_from(uninit {T.__name__})", lambda u=u: b.inplace_copy_from(u), "E")
        add(f"u[0]", lambda u=u: u[0], "E")
        add(f"u[0] = 1", lambda u=u: u.__setitem__(0, 1), "E")
    add("b.__init__(DType.int8, (2,))", lambda: b.__init__(DType.int8, (2,)), "A")
    add("b.__init__(None)", lambda: b.__init__(None), "A")
    add("b still usable", lambda: b.copy().to_numpy(), "A!")

def table_threads():
    shared = Buffer.zeros((64, 64), DType.int64)
    errors = []
    def hammer(seed):
        try:
            for i in range(300):
                r = (seed * 31 + i) % 64
                view = shared[r, ::-1]
                view[i % 64] = i
                view.item() if view.num_elements == 1 else view.copy()
                shared[r:, ::3].contiguous()
                if i % 50 == 0:
                    shared.to_numpy().sum()
                    gc.collect()
        except Exception as e:
            errors.append(repr(e))
    def go():
        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        if errors or any(t.is_alive() for t in threads):
            raise AssertionError(errors[:3] or "threads did not finish")
        return "ok"
    add("six threads on one buffer", go, "A!")
    def drop_while_copying():
        for _ in range(200):
            src = Buffer.zeros((4096,), DType.int8)
            dst = Buffer(DType.int8, (4096,), q)
            t = threading.Thread(target=dst.inplace_copy_from, args=(src,))
            t.start()
            del src, dst
            t.join(20)
        cpu.synchronize(timeout=20)
        return "ok"
    add("drop buffers while another thread copies", drop_while_copying, "A!")

import tempfile, os
_fd, PATH = tempfile.mkstemp()
os.write(_fd, bytes(range(8)))
os.close(_fd)

{"shapes": table_shapes, "dtypes": table_dtypes, "index": table_index,
 "numpy": table_numpy, "objects": table_objects, "threads": table_threads}[group]()

failures = []
for label, thunk, expect in entries:
    sys.stderr.write("START " + label + "\n")
    sys.stderr.flush()
    try:
        r = thunk()
        outcome = "returned " + type(r).__name__
        ok = expect in ("A", "A!", "O")
    except Exception as e:
        outcome = "raised %s: %s" % (type(e).__name__, str(e)[:200])
        if expect == "T":
            ok = isinstance(e, TypeError)
        elif expect == "V":
            ok = isinstance(e, ValueError)
        elif expect == "I":
            ok = isinstance(e, IndexError)
        elif expect in ("C", "O"):
            ok = isinstance(e, CLEAN)
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
    b.to_numpy()
except Exception as e:
    failures.append(["final checks", "A", repr(e)])
os.unlink(PATH)
print("RESULT" + json.dumps({"count": len(entries), "failures": failures}), flush=True)
"""

GROUPS = ["shapes", "dtypes", "index", "numpy", "objects", "threads"]


def _last_started(stderr):
    lines = [x for x in stderr.splitlines() if x.startswith("START ")]
    return lines[-1][6:] if lines else None


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.timeout(180)
def test_hostile_buffer_table(run_py, group):
    r = run_py(CHILD.replace("sys.argv[1]", repr(group)), timeout=150)
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
