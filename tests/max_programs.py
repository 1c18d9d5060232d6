"""Programs for the differential test against MAX 26.7 (tests/max_runner.py
runs them; tests/test_max_differential.py compares the two runs).  Not a
test module.

``random_program(seed)`` draws a program of CPU operations from a seeded
``random.Random``: buffers of every dtype and shape (rank 0 and empty
included) made every way MAX offers, views by indexing and slicing
(negative steps included) and ``view``, copies and moves, element reads and
writes, NumPy and DLPack both ways, ``DType`` and ``finfo``, ``Usage``,
queues and events, and bad inputs.  A NumPy model of every buffer's layout
(shape and strides over a model storage) lets the generator draw mostly
valid indices and know which storages a step reads and writes, so that the
comparison can stop looking at a storage once the two packages disagree
about its contents (the steps after that would only repeat the first
divergence).

``NAMED`` holds the named cases: the behaviours the divergence table
(docs/max-26.7-divergences.json) cites as its witnesses, and the ones on
which we conform to MAX.

Each step carries, besides what the runner needs (``op`` and its fields,
``out``, ``observe``, ``read``), a ``name`` and ``tags`` that the
divergence table's matchers look at, and ``uses`` / ``reads`` / ``writes``
(variables and storages) for the comparison.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

# DType names and their NumPy twins (for the dtypes NumPy holds).
NUMPY_TWIN = {
    "bool": "bool",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "uint16": "uint16",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}
FLOAT8 = [
    "float8_e8m0fnu",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
]
SUB_BYTE = ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"]
ALL_DTYPES = [*NUMPY_TWIN, "bfloat16", *FLOAT8, *SUB_BYTE]
SIZE = {name: np.dtype(t).itemsize for name, t in NUMPY_TWIN.items()}
SIZE.update({"bfloat16": 2, **dict.fromkeys(FLOAT8 + SUB_BYTE, 1)})
_LAYOUT_TYPE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
MAX_ELEMENTS = 48


def dtype_class(name: str) -> str:
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint")):
        return "int"
    if name in ("float16", "float32", "float64"):
        return "ieee"
    if name == "bfloat16":
        return "bf16"
    return "f8" if name in FLOAT8 else "subbyte"


# ---- encodings (tests/max_runner.py's Env.decode) --------------------------


def V(n: int) -> dict[str, Any]:
    return {"v": n}


def G(name: str) -> dict[str, Any]:
    return {"g": name}


def DT(name: str) -> dict[str, Any]:
    return {"dt": name}


def T(*items: Any) -> dict[str, Any]:
    return {"t": list(items)}


def SL(start: Any = None, stop: Any = None, step: Any = None) -> dict[str, Any]:
    return {"sl": [start, stop, step]}


def F(x: float) -> Any:
    return x if math.isfinite(x) else {"f": repr(x)}


CPU_ = {"cpu": 1}
DEFQ = {"defq": 1}  # CPU().default_queue


# ---- the model -------------------------------------------------------------


@dataclass
class BufModel:
    """What the generator knows of a Buffer variable."""

    dtype: str
    arr: np.ndarray  # its layout: a view of the storage's model array
    storage: int
    defined: bool  # every element holds a known value (not uninitialised)
    origin: str  # how its storage was made: zeros, numpy, new, scalar, copy
    default_queue: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self.arr.shape

    @property
    def layout(self) -> str:
        if self.arr.size == 0:
            return "empty"
        # Our rule: any negative stride, even of a dimension of size 1.
        if any(s < 0 for s in self.arr.strides):
            return "neg"
        return "contig" if _spec_contiguous(self.arr) else "strided"

    @property
    def whole(self) -> bool:
        """Covers its whole storage contiguously."""
        base = self.arr.base if self.arr.base is not None else self.arr
        return self.layout in ("contig", "empty") and self.arr.nbytes == base.nbytes

    def tags(self) -> list[str]:
        tags = [
            f"dtype:{self.dtype}",
            f"class:{dtype_class(self.dtype)}",
            f"layout:{self.layout}",
            f"origin:{self.origin}",
            f"rank:{self.arr.ndim}",
        ]
        if not self.default_queue:
            tags.append("queue:other")
        if self.odd_unit_strides:
            tags.append("size1-strides")
        return tags

    @property
    def odd_unit_strides(self) -> bool:
        """A dimension of size 1 whose stride is not the packed one (its
        stride steps over no element, so packages may report any)."""
        packed = self.arr.itemsize
        for n, s in zip(
            reversed(self.arr.shape), reversed(self.arr.strides), strict=True
        ):
            if n == 1 and s != packed:
                return True
            packed *= n
        return False


@dataclass
class ArrModel:
    """A NumPy array variable: an alias of a Buffer's storage or its own."""

    dtype: str  # NumPy dtype name
    arr: np.ndarray
    storage: int
    readonly: bool = False
    source_tags: list[str] = field(default_factory=list)  # of the Buffer it aliases


def _spec_contiguous(arr: np.ndarray) -> bool:
    """SPEC 12.4's rule: row-major with positive strides (dimensions of
    size 1 excepted)."""
    expected = arr.itemsize
    for n, s in zip(reversed(arr.shape), reversed(arr.strides), strict=True):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def new_layout(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape, _LAYOUT_TYPE[SIZE[dtype]])


# ---- programs ----------------------------------------------------------------


@dataclass
class Program:
    pid: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    models: dict[int, Any] = field(default_factory=dict)
    storages: int = 0
    # Marks of storages, as tags of every later step touching them:
    # "pending:fill" / "pending:copy" (an enqueued fill or copy wrote it:
    # MAX 26.7's CPU queue may still run it after later host writes),
    # "mark:bool-bytes" (a bool buffer MAX stored a number's low byte in).
    marks: dict[int, set[str]] = field(default_factory=dict)
    # Marks of every later step: "after:array-ctor" once MAX may have
    # written through a Buffer over the wrong memory.
    program_marks: set[str] = field(default_factory=set)

    def mark(self, storage: int, tag: str) -> None:
        self.marks.setdefault(storage, set()).add(tag)

    def new_storage(self) -> int:
        self.storages += 1
        return self.storages

    def step(
        self,
        name: str,
        op: dict[str, Any],
        *,
        out: Any = None,
        tags: list[str] | None = None,
        uses: tuple[int, ...] = (),
        reads: tuple[int, ...] = (),
        writes: tuple[int, ...] = (),
        observe: tuple[int, ...] = (),
        read: bool = True,
    ) -> int | None:
        """Appends a step; ``out`` is the model of its result, bound to a
        new variable when given.  Returns that variable."""
        var = None
        if out is not None:
            var = len(self.models)
            self.models[var] = out
        step = dict(op)
        tags = list(tags or []) + sorted(self.program_marks)
        for s in (*reads, *writes):
            tags += self.marks.get(s, ())
        step.update(
            name=name,
            tags=sorted(set(tags)),
            uses=list(uses),
            reads=sorted(set(reads)),
            writes=sorted(set(writes)),
            out=var,
            read=read,
            observe=[[v, self._readable(v)] for v in observe],
        )
        self.steps.append(step)
        return var

    def _readable(self, var: int) -> bool:
        model = self.models[var]
        return not isinstance(model, BufModel) or model.defined

    def buffers(self) -> list[int]:
        return [v for v, m in self.models.items() if isinstance(m, BufModel)]

    def arrays(self) -> list[int]:
        return [v for v, m in self.models.items() if isinstance(m, ArrModel)]

    def as_json(self) -> dict[str, Any]:
        return {"id": self.pid, "steps": self.steps}


def call(fn: Any, *args: Any, method: str | None = None, **kw: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"op": "call", "fn": fn, "args": list(args), "kw": kw}
    if method is not None:
        op["method"] = method
    return op


# ---- drawing values ---------------------------------------------------------


def draw_shape(rng: random.Random, nonempty: bool = False) -> tuple[int, ...]:
    rank = rng.choice([0, 1, 1, 2, 2, 2, 3])
    low = 1 if nonempty or rng.random() < 0.85 else 0
    shape = tuple(rng.randint(low, 4) for _ in range(rank))
    while math.prod(shape) > MAX_ELEMENTS:
        shape = shape[1:]
    return shape


def draw_scalar(rng: random.Random, dtype: str) -> tuple[Any, str]:
    """A value to store, with a tag naming its kind: mostly one the dtype
    holds, sometimes one at or past its limits, of another type, a NumPy
    scalar or a rank-0 array."""
    cls = dtype_class(dtype)
    roll = rng.random()
    if roll < 0.08:
        return rng.choice([True, False]), "value:bool"
    if roll < 0.16:
        return {
            "nps": [
                rng.choice(["int64", "float32", "float64", "int8", "bool"]),
                rng.choice([1, 0, 3]),
            ]
        }, "value:npscalar"
    if roll < 0.2:
        return {
            "np0": [rng.choice(["float64", "int32"]), rng.choice([1.5, 2, -1.0])]
        }, "value:nparray0"
    if roll < 0.27:
        big = rng.choice([2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 300, -129, 65536])
        return big, "value:bigint"
    if roll < 0.33:
        x = rng.choice(
            [float("nan"), float("inf"), -float("inf"), 1e39, -0.0, 1e-40, 65520.0]
        )
        return F(x), "value:special-float"
    if roll < 0.36:
        return rng.choice(["1", None]), "value:non-number"
    if cls in ("int", "bool"):
        if roll < 0.45:
            return rng.choice([0.5, 2.7, -1.5]), "value:fraction"
        lo = 0 if dtype.startswith("uint") or cls == "bool" else -8
        return rng.randint(lo, 1 if cls == "bool" else 100), "value:int"
    if roll < 0.5:
        return rng.randint(-10, 10), "value:int"
    return F(
        rng.choice([1.5, -2.25, 0.5, 3.0, 0.1, 1.00390625 + 1e-9, 448.0, 0.0078125])
    ), "value:float"


def draw_index(
    rng: random.Random, shape: tuple[int, ...], ints_only: bool = False
) -> tuple[Any, list[str], tuple | None]:
    """A key for ``shape``: its encoding, tags, and the plain tuple when
    it is valid (None for a key both packages should refuse, or that one
    of them may read differently)."""
    roll = rng.random()
    if roll < 0.1 and shape:
        return _bad_index(rng, shape)
    entries, plain, tags = [], [], []
    for n in shape:
        if n > 0 and (ints_only or rng.random() < 0.55):
            i = rng.randint(-n, n - 1)
            entries.append(i)
            plain.append(i)
            if i < 0:
                tags.append("index:negative")
        else:
            bound = [None] + list(range(-n - 2, n + 3))
            start, stop = rng.choice(bound), rng.choice(bound)
            step = rng.choice([None, None, 1, 2, -1, -2, 3])
            entries.append(SL(start, stop, step))
            plain.append(slice(start, stop, step))
            if step is not None and step < 0:
                tags.append("index:negative-step")
            else:
                tags.append("index:slice")
    if len(shape) == 1 and rng.random() < 0.3:
        key = entries[0]  # a bare int or slice for rank 1
        tags.append("index:bare")
    elif len(shape) == 0:
        key = rng.choice([T(), 0])
        tags.append("index:rank0" if key == T() else "index:rank0-int")
        return key, tags, ()
    elif rng.random() < 0.1:
        key = {"l": entries}
        tags.append("index:list")
    else:
        key = T(*entries)
    return key, tags, tuple(plain)


def _bad_index(
    rng: random.Random, shape: tuple[int, ...]
) -> tuple[Any, list[str], None]:
    n = shape[0]
    rest = [0] * (len(shape) - 1)
    kind = rng.choice(
        [
            "count",
            "range",
            "float",
            "bool",
            "none",
            "ellipsis",
            "ellipsis-alone",
            "step0",
            "npint",
            "huge",
            "str",
        ]
    )
    key: Any
    if kind == "count":
        key = T(*([0] * (len(shape) + rng.choice([-1, 1]))))
    elif kind == "range":
        key = T(rng.choice([n, -n - 1, n + 5]), *rest)
    elif kind == "float":
        key = T(F(0.0 if n else 1.0), *rest)
    elif kind == "bool":
        key = T(True, *rest)
    elif kind == "none":
        key = None
    elif kind == "ellipsis":
        key = (
            T(min(1, n - 1) if n else 0, {"ell": 1})
            if len(shape) > 1
            else T({"ell": 1})
        )
    elif kind == "ellipsis-alone":
        key = {"ell": 1}
    elif kind == "step0":
        key = T(SL(None, None, 0), *rest)
    elif kind == "npint":
        key = T({"nps": ["int64", 0 if n else 1]}, *rest)
    elif kind == "huge":
        key = T(rng.choice([2**32, 2**32 + 1, -(2**32), 2**63 - 1, 2**64]), *rest)
    else:
        key = "0"
    return key, [f"index:{kind}"], None


def draw_array_spec(
    rng: random.Random, dtype: str | None = None, layout: str | None = None
) -> tuple[dict[str, Any], np.ndarray, list[str]]:
    """A NumPy array for ``{"nd": spec}``: contiguous, strided, negative,
    Fortran-ordered, rank 0, empty, read-only; returns the spec, a model of
    the array (same shape and strides) and tags."""
    dtype = dtype or rng.choice(list(NUMPY_TWIN))
    layout = layout or rng.choice(
        ["c", "c", "c", "strided", "neg", "fortran", "rank0", "empty"]
    )
    seed = rng.randrange(2**31)
    tags = [f"array:{layout}", f"dtype:{dtype}", f"class:{dtype_class(dtype)}"]
    spec: dict[str, Any] = {"dtype": NUMPY_TWIN[dtype], "seed": seed}
    if layout == "rank0":
        spec["shape"] = []
    elif layout == "empty":
        spec["shape"] = [rng.randint(0, 3), 0][:: rng.choice([1, -1])]
    else:
        spec["shape"] = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
    if layout == "strided":
        spec["shape"][-1] *= 2
        spec["index"] = [[None, None, None]] * (len(spec["shape"]) - 1) + [
            [None, None, 2]
        ]
    elif layout == "neg":
        spec["index"] = [[None, None, -1]] + [[None, None, None]] * (
            len(spec["shape"]) - 1
        )
    elif layout == "fortran":
        spec["fortran"] = True
    if rng.random() < 0.15:
        spec["readonly"] = True
        tags.append("array:readonly")
    model = np.zeros(spec["shape"], NUMPY_TWIN[dtype])
    if layout == "fortran":
        model = np.asfortranarray(model)
    if "index" in spec:
        model = model[tuple(slice(*e) for e in spec["index"])]
    return spec, model, tags


# ---- the random program ------------------------------------------------------


class Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.p = Program(f"random-{seed}")

    # -- helpers --

    def pick_buffer(
        self, pred: Callable[[BufModel], bool] = lambda m: True
    ) -> int | None:
        choices = [v for v in self.p.buffers() if pred(self.p.models[v])]
        return self.rng.choice(choices) if choices else None

    def buf(self, var: int) -> BufModel:
        return self.p.models[var]

    def copy_of(self, m: BufModel) -> BufModel:
        """A C-contiguous copy of m in new storage, on m's default queue."""
        return BufModel(
            m.dtype,
            new_layout(m.dtype, m.shape),
            self.p.new_storage(),
            m.defined,
            "copy",
            m.default_queue,
        )

    def fresh(
        self,
        dtype: str,
        shape: tuple[int, ...],
        origin: str,
        defined: bool,
        default_queue: bool = True,
    ) -> BufModel:
        return BufModel(
            dtype,
            new_layout(dtype, shape),
            self.p.new_storage(),
            defined,
            origin,
            default_queue,
        )

    # -- creation --

    def create(self) -> None:
        rng = self.rng
        dtype = rng.choice(ALL_DTYPES)
        shape = draw_shape(rng)
        kind = rng.choice(
            [
                "new",
                "new",
                "zeros",
                "zeros",
                "scalar",
                "numpy",
                "numpy",
                "numpy",
                "dlpack",
                "array_ctor",
                "bad",
            ]
        )
        tags = [f"dtype:{dtype}", f"class:{dtype_class(dtype)}"]
        if kind == "new":
            kw: dict[str, Any] = {}
            args = [DT(dtype), T(*shape)]
            default_queue = True
            roll = rng.random()
            if roll < 0.2:
                kw["device"] = CPU_
            elif roll < 0.3:
                q = self.p.step(
                    "DeviceQueue", call(G("DeviceQueue"), CPU_), out=("queue",)
                )
                args.append(V(q))
                default_queue = False
            if rng.random() < 0.15:
                kw["usage"] = {"usage": rng.choice(["DEFAULT", "STAGING", "UNTRACKED"])}
            model = self.fresh(dtype, shape, "new", False, default_queue)
            self.p.step(
                "Buffer",
                call(G("Buffer"), *args, **kw),
                out=model,
                tags=tags + model.tags(),
                read=False,
            )
        elif kind == "zeros":
            kw = {"device": CPU_} if rng.random() < 0.3 else {}
            model = self.fresh(dtype, shape, "zeros", True)
            self.p.step(
                "zeros",
                call(G("Buffer.zeros"), T(*shape), DT(dtype), **kw),
                out=model,
                tags=tags + model.tags(),
            )
            self.p.mark(model.storage, "pending:fill")
        elif kind == "scalar":
            value, vtag = draw_scalar(rng, dtype)
            model = self.fresh(dtype, (), "scalar", True)
            self.p.step(
                "scalar",
                call(G("Buffer.scalar"), value, DT(dtype)),
                out=model,
                tags=tags + [vtag] + model.tags(),
            )
            if dtype == "bool" and vtag != "value:bool" and value not in (0, 1):
                self.p.mark(model.storage, "mark:bool-bytes")
        elif kind in ("numpy", "dlpack", "array_ctor"):
            self.from_array(kind)
        else:
            self.bad_create(dtype, shape)

    def from_array(self, kind: str) -> None:
        rng = self.rng
        spec, arr, tags = draw_array_spec(rng)
        dtype = next(k for k, v in NUMPY_TWIN.items() if v == spec["dtype"])
        storage = self.p.new_storage()
        origin = "numpy"
        contiguous = arr.flags.c_contiguous and arr.ndim > 0 or arr.ndim == 0
        zero_copy = contiguous and not spec.get("readonly")
        if kind == "numpy":
            name, op = "from_numpy", call(G("Buffer.from_numpy"), {"nd": spec})
        elif kind == "array_ctor":
            name, op = "Buffer(array)", call(G("Buffer"), {"nd": spec}, CPU_)
            zero_copy = False
            origin = "numpy" if "array:c" in tags else "array-ctor"
        else:
            copy = rng.choice([None, None, True, False])
            kw = {} if copy is None else {"copy": copy}
            name, op = "from_dlpack", call(G("Buffer.from_dlpack"), {"nd": spec}, **kw)
            tags.append(f"copy:{copy}")
            if copy:
                zero_copy = False
        if zero_copy:
            tags.append("aliases-array")
        model = BufModel(dtype, new_layout(dtype, arr.shape), storage, True, origin)
        self.p.step(name, op, out=model, tags=tags + model.tags())
        if origin == "array-ctor":
            self.p.program_marks.add("after:array-ctor")

    def bad_create(self, dtype: str, shape: tuple[int, ...]) -> None:
        rng = self.rng
        kind = rng.choice(
            [
                "negdim",
                "hugedim",
                "dtype-str",
                "shape-str",
                "shape-float",
                "device-int",
                "usage-int",
                "zeros-order",
                "scalar-bad",
            ]
        )
        if kind == "negdim":
            op = call(G("Buffer"), DT(dtype), T(*shape, -1))
        elif kind == "hugedim":
            op = call(G("Buffer"), DT(dtype), T(2**40, 2**40))
        elif kind == "dtype-str":
            op = call(G("Buffer"), dtype, T(*shape))
        elif kind == "shape-str":
            op = call(G("Buffer"), DT(dtype), "ab")
        elif kind == "shape-float":
            op = call(G("Buffer"), DT(dtype), T(1.0))
        elif kind == "device-int":
            op = call(G("Buffer"), DT(dtype), T(*shape), 0)
        elif kind == "usage-int":
            op = call(G("Buffer"), DT(dtype), T(*shape), usage=1)
        elif kind == "zeros-order":
            op = call(G("Buffer.zeros"), DT(dtype), T(*shape))
        else:
            op = call(G("Buffer.scalar"), "x", DT(dtype))
        self.p.step(
            "bad-create", op, tags=[f"bad:{kind}", f"dtype:{dtype}"], read=False
        )

    # -- views --

    def index(self) -> None:
        var = self.pick_buffer()
        if var is None:
            return self.create()
        m = self.buf(var)
        key, tags, plain = draw_index(self.rng, m.shape)
        out = None
        if plain is not None:
            view = m.arr[plain + (Ellipsis,)]
            out = replace(m, arr=view)
            tags.append(f"view:{out.layout}")
        self.p.step(
            "getitem",
            {"op": "getitem", "obj": V(var), "key": key},
            out=out,
            tags=tags + m.tags(),
            uses=(var,),
            reads=(m.storage,),
            read=m.defined,
        )

    def view(self) -> None:
        var = self.pick_buffer()
        if var is None:
            return self.create()
        m = self.buf(var)
        dtype = self.rng.choice(ALL_DTYPES)
        tags = m.tags() + [f"to:{dtype}", f"to-class:{dtype_class(dtype)}"]
        out = None
        args: list[Any] = [DT(dtype)]
        if self.rng.random() < 0.3 and m.layout == "contig":
            nbytes = m.arr.nbytes
            n = nbytes // SIZE[dtype]
            args.append(T(n))
            tags.append("view:shape")
            out = BufModel(
                dtype,
                m.arr.reshape(-1)
                .view(np.uint8)[: n * SIZE[dtype]]
                .view(_LAYOUT_TYPE[SIZE[dtype]]),
                m.storage,
                m.defined,
                m.origin,
                m.default_queue,
            )
        else:
            try:
                new = m.arr.view(_LAYOUT_TYPE[SIZE[dtype]])
            except ValueError:
                tags.append("view:refused")
            else:
                if SIZE[dtype] != SIZE[m.dtype]:
                    tags.append("view:resize")
                if m.layout in ("strided", "neg"):
                    tags.append("view:strided")
                out = BufModel(
                    dtype, new, m.storage, m.defined, m.origin, m.default_queue
                )
            if m.arr.ndim == 0:
                out = None
                tags.append("view:rank0")
        # float4/float6 views of defined bytes read values that other
        # formats wrote: well defined, but compared as any other read.
        self.p.step(
            "view",
            call(V(var), *args, method="view"),
            out=out,
            tags=tags,
            uses=(var,),
            reads=(m.storage,),
            read=m.defined,
        )
        if dtype == "bool" and m.dtype != "bool":
            self.p.mark(m.storage, "mark:bool-bytes")  # any byte, read as a bool

    def copy_like(self) -> None:
        var = self.pick_buffer()
        if var is None:
            return self.create()
        m = self.buf(var)
        kind = self.rng.choice(["contiguous", "copy", "copy-cpu", "to-cpu", "to-list"])
        model = self.copy_of(m)
        tags = m.tags()
        if kind == "contiguous":
            op = call(V(var), method="contiguous")
        elif kind == "copy":
            op = call(V(var), method="copy")
        elif kind == "copy-cpu":
            op = call(V(var), method="copy", device=CPU_)
        elif kind == "to-cpu":
            op = call(V(var), CPU_, method="to")
            model = m
        else:
            op = call(V(var), {"l": [CPU_]}, method="to")
            self.p.step(
                "to([cpu])",
                op,
                tags=tags,
                uses=(var,),
                reads=(m.storage,),
                read=m.defined,
            )
            return
        self.p.step(
            kind,
            op,
            out=model,
            tags=tags,
            uses=(var,),
            reads=(m.storage,),
            read=m.defined,
        )
        if model.storage != m.storage:  # a copy carries what its source held
            self.p.marks[model.storage] = set(self.p.marks.get(m.storage, ()))

    # -- writes --

    def setitem(self) -> None:
        var = self.pick_buffer()
        if var is None:
            return self.create()
        m = self.buf(var)
        key, tags, plain = draw_index(
            self.rng, m.shape, ints_only=self.rng.random() < 0.85
        )
        value, vtag = draw_scalar(self.rng, m.dtype)
        self.p.step(
            "setitem",
            {"op": "setitem", "obj": V(var), "key": key, "value": value},
            tags=tags + [vtag] + m.tags(),
            uses=(var,),
            writes=(m.storage,),
            observe=(var,),
        )
        if (
            m.dtype == "bool"
            and vtag != "value:bool"
            and value not in (0, 1, True, False)
        ):
            self.p.mark(m.storage, "mark:bool-bytes")
        if "index:rank0-int" in tags:
            self.p.mark(m.storage, "mark:rank0-int-write")

    def inplace_copy(self) -> None:
        dst = self.pick_buffer()
        if dst is None:
            return self.create()
        d = self.buf(dst)
        src = self.pick_buffer(
            lambda m: m.dtype == d.dtype and m.arr.size == d.arr.size and m is not d
        )
        if src is None or self.rng.random() < 0.4:
            # A source made for the purpose: same dtype and count, maybe
            # another layout or dtype.
            layout = self.rng.choice(["c", "c", "strided", "neg"])
            # A dtype NumPy lacks: NumPy's unsigned type of its size, viewed.
            dtype = (
                d.dtype
                if d.dtype in NUMPY_TWIN
                else {1: "uint8", 2: "uint16"}[SIZE[d.dtype]]
            )
            if self.rng.random() < 0.1:
                dtype = self.rng.choice(list(NUMPY_TWIN))
            spec, arr, tags = draw_array_spec(self.rng, dtype, "c")
            spec["shape"] = [max(d.arr.size, 1)]
            if layout != "c" and d.arr.size:
                spec["shape"] = [d.arr.size * 2]
                spec["index"] = (
                    [[None, None, 2]] if layout == "strided" else [[None, None, -2]]
                )
            spec.pop("readonly", None)
            made = BufModel(
                dtype,
                new_layout(dtype, (max(d.arr.size, 1),)),
                self.p.new_storage(),
                True,
                "numpy",
            )
            src = self.p.step(
                "from_numpy",
                call(G("Buffer.from_numpy"), {"nd": spec}),
                out=made,
                tags=[f"array:{layout}"] + made.tags(),
            )
            if d.dtype not in NUMPY_TWIN:
                # Reinterpret the bytes as the destination's dtype.
                nbytes = made.arr.nbytes
                vm = (
                    BufModel(
                        d.dtype,
                        new_layout(d.dtype, (nbytes // SIZE[d.dtype],)),
                        made.storage,
                        True,
                        "numpy",
                    )
                    if nbytes % SIZE[d.dtype] == 0
                    else None
                )
                view = self.p.step(
                    "view",
                    call(V(src), DT(d.dtype), method="view"),
                    out=vm,
                    tags=made.tags() + [f"to:{d.dtype}"],
                    uses=(src,),
                    reads=(made.storage,),
                )
                if view is None:
                    return
                src = view
        s = self.buf(src)
        tags = [f"dst-{t}" for t in d.tags()] + [f"src-{t}" for t in s.tags()]
        if s.storage == d.storage:
            tags.append("overlap")
        if s.dtype != d.dtype:
            tags.append("mismatch:dtype")
        if s.arr.size != d.arr.size:
            tags.append("mismatch:count")
        if s.layout not in ("contig", "empty") or d.layout not in ("contig", "empty"):
            tags.append("mismatch:layout")
        batch = self.rng.random() < 0.2
        name = "batch_inplace_copy" if batch else "inplace_copy_from"
        op = (
            call(G("driver.batch_inplace_copy"), {"l": [V(dst)]}, {"l": [V(src)]})
            if batch
            else call(V(dst), V(src), method="inplace_copy_from")
        )
        # What the destination's storage holds after a copy that works: the
        # whole of it the source's values, a part of it undefined ones when
        # the source is undefined.
        copies = (
            s.dtype == d.dtype
            and s.arr.size == d.arr.size
            and s.storage != d.storage
            and s.layout in ("contig", "empty")
            and d.layout in ("contig", "empty")
        )
        if copies and (d.whole or not s.defined):
            for model in self.p.models.values():
                if isinstance(model, BufModel) and model.storage == d.storage:
                    model.defined = s.defined
        self.p.step(
            name,
            op,
            tags=tags,
            uses=(dst, src),
            reads=(s.storage,),
            writes=(d.storage,),
            observe=(dst,),
        )
        self.p.mark(d.storage, "pending:copy")

    def numpy_alias_write(self) -> None:
        arrays = [
            v
            for v in self.p.arrays()
            if not self.p.models[v].readonly and self.p.models[v].arr.size
        ]
        if not arrays:
            return self.reads()
        var = self.rng.choice(arrays)
        m = self.p.models[var]
        idx = tuple(self.rng.randrange(n) for n in m.arr.shape)
        value = self.rng.choice([1, 7, 0])
        owners = tuple(
            v
            for v in self.p.buffers()
            if self.p.models[v].storage == m.storage and self.p.models[v].defined
        )
        tags = ["numpy-alias"] + m.source_tags
        for v in owners[:2]:
            tags += [f"obs-{t}" for t in self.buf(v).tags()]
        self.p.step(
            "ndarray-setitem",
            {"op": "setitem", "obj": V(var), "key": T(*idx), "value": value},
            tags=tags,
            uses=(var,),
            writes=(m.storage,),
            observe=owners[:2],
        )

    # -- reads --

    def reads(self) -> None:
        var = self.pick_buffer()
        if var is None:
            return self.create()
        m = self.buf(var)
        kind = self.rng.choice(
            [
                "item",
                "to_numpy",
                "np.from_dlpack",
                "str",
                "repr",
                "dlpack_device",
                "from_dlpack-self",
                "roundtrip",
                "iter",
                "attrs",
                "len",
            ]
        )
        if not m.defined and kind in ("item", "str"):
            kind = "attrs"  # their results are values: uninitialised here
        tags = m.tags()
        uses, reads = (var,), (m.storage,)

        def reading(name: str, op: dict[str, Any], **kw: Any) -> int | None:
            """A step that reads var's elements."""
            kw.setdefault("uses", uses)
            return self.p.step(name, op, tags=tags, reads=reads, read=m.defined, **kw)

        if kind == "item":
            reading("item", call(V(var), method="item"))
        elif kind in ("to_numpy", "np.from_dlpack", "roundtrip"):
            op = (
                call(V(var), method="to_numpy")
                if kind == "to_numpy"
                else call(G("np.from_dlpack"), V(var))
            )
            np_dtype = NUMPY_TWIN.get(m.dtype, "uint8")
            out = ArrModel(np_dtype, m.arr, m.storage, source_tags=m.tags())
            arr = reading(
                "to_numpy" if kind == "to_numpy" else "np.from_dlpack", op, out=out
            )
            if kind == "roundtrip":
                back = replace(m, origin=m.origin)
                reading(
                    "from_dlpack(ndarray)",
                    call(G("Buffer.from_dlpack"), V(arr)),
                    out=back,
                    uses=(arr,),
                )
        elif kind == "str":
            reading("str", call(G("str"), V(var)))
        elif kind == "repr":
            self.p.step("repr", call(G("repr"), V(var)), tags=tags, uses=uses)
        elif kind == "dlpack_device":
            self.p.step(
                "__dlpack_device__",
                call(V(var), method="__dlpack_device__"),
                tags=tags,
                uses=uses,
            )
        elif kind == "from_dlpack-self":
            copy = self.rng.choice([None, True, False])
            kw = {} if copy is None else {"copy": copy}
            model = m if not copy else self.copy_of(m)
            self.p.step(
                "from_dlpack(Buffer)",
                call(G("Buffer.from_dlpack"), V(var), **kw),
                out=model,
                tags=tags + [f"copy:{copy}"],
                uses=uses,
                reads=reads,
                read=m.defined,
            )
            self.p.marks[model.storage] = set(self.p.marks.get(m.storage, ()))
        elif kind == "iter":
            reading("iter", {"op": "iter", "obj": V(var)})
        elif kind == "len":
            self.p.step("len", call(G("len"), V(var)), tags=tags, uses=uses)
        else:
            name = self.rng.choice(
                [
                    "shape",
                    "strides",
                    "rank",
                    "num_elements",
                    "element_size",
                    "is_contiguous",
                    "is_host",
                    "pinned",
                    "usage",
                    "dtype",
                    "_host_hazard_tracked",
                    "device",
                    "stream",
                ]
            )
            self.p.step(
                f"attr:{name}",
                {"op": "attr", "obj": V(var), "name": name},
                tags=tags,
                uses=uses,
            )

    # -- the rest of the surface --

    def dtype_ops(self) -> None:
        rng = self.rng
        dtype = rng.choice(ALL_DTYPES)
        tags = [f"dtype:{dtype}", f"class:{dtype_class(dtype)}"]
        kind = rng.choice(
            [
                "attr",
                "method",
                "finfo",
                "to_numpy",
                "by-value",
                "by-name",
                "from_numpy",
                "str",
                "bad-value",
            ]
        )
        if kind == "attr":
            name = rng.choice(
                ["size_in_bits", "size_in_bytes", "align", "name", "value", "_mlir"]
            )
            self.p.step(
                f"DType.{name}",
                {"op": "attr", "obj": DT(dtype), "name": name},
                tags=tags,
            )
        elif kind == "method":
            name = rng.choice(
                [
                    "is_integral",
                    "is_float",
                    "is_half",
                    "is_float8",
                    "is_signed_integral",
                    "is_unsigned_integral",
                ]
            )
            self.p.step(f"DType.{name}", call(DT(dtype), method=name), tags=tags)
        elif kind == "finfo":
            self.p.step("finfo", call(G("finfo"), DT(dtype)), tags=tags)
        elif kind == "to_numpy":
            self.p.step("DType.to_numpy", call(DT(dtype), method="to_numpy"), tags=tags)
        elif kind == "by-value":
            self.p.step(
                "DType(value)", call(G("DType"), _DTYPE_VALUES[dtype]), tags=tags
            )
        elif kind == "by-name":
            self.p.step(
                "DType(mlir)", call(G("DType"), _MLIR.get(dtype, "f6e2m3fn")), tags=tags
            )
        elif kind == "from_numpy":
            np_name = rng.choice(
                [
                    "int16",
                    "float32",
                    "bool",
                    "complex64",
                    "uint64",
                    "float16",
                    "object",
                    "datetime64[s]",
                ]
            )
            self.p.step(
                "DType.from_numpy",
                call(G("DType.from_numpy"), {"npdt": np_name}),
                tags=[f"np:{np_name}"],
            )
        elif kind == "str":
            self.p.step("str(DType)", call(G("str"), DT(dtype)), tags=tags)
        else:
            self.p.step(
                "DType(bad)",
                call(G("DType"), rng.choice([0, 2, 999, "zz", None])),
                tags=["bad:dtype"],
            )

    def usage_ops(self) -> None:
        rng = self.rng
        names = ["DEFAULT", "STAGING", "UNTRACKED"]
        kind = rng.choice(["repr", "or", "value", "len", "list", "in", "bad", "invert"])
        a, b = {"usage": rng.choice(names)}, {"usage": rng.choice(names)}
        if kind == "repr":
            self.p.step("repr(Usage)", call(G("repr"), a))
        elif kind == "or":
            self.p.step("Usage|", {"op": "binop", "sym": "|", "left": a, "right": b})
        elif kind == "value":
            self.p.step("Usage(v)", call(G("Usage"), rng.choice([0, 1, 2, 3])))
        elif kind == "len":
            self.p.step("len(Usage)", call(G("len"), G("Usage")))
        elif kind == "list":
            self.p.step("list(Usage)", call(G("list"), G("Usage")))
        elif kind == "in":
            self.p.step("Usage in", {"op": "binop", "sym": "in", "left": a, "right": b})
        elif kind == "invert":
            self.p.step("~Usage", {"op": "binop", "sym": "~", "left": a, "right": a})
        else:
            self.p.step("Usage(bad)", call(G("Usage"), rng.choice([4, -1, "STAGING"])))

    def queue_ops(self) -> None:
        rng = self.rng
        kind = rng.choice(
            [
                "record",
                "record-into",
                "sync",
                "wait-queue",
                "wait-device",
                "event-ready",
                "event-sync",
                "elapsed",
                "wait-bad",
                "repr-default",
                "native",
                "device",
            ]
        )
        q = self.p.step("DeviceQueue", call(G("DeviceQueue"), CPU_), out=("queue",))
        if kind == "record":
            ev = self.p.step(
                "record_event", call(V(q), method="record_event"), out=("event",)
            )
            self.p.step("event.is_ready", call(V(ev), method="is_ready"))
        elif kind == "record-into":
            ev = self.p.step(
                "DeviceEvent",
                call(G("DeviceEvent"), CPU_, rng.choice([False, True])),
                out=("event",),
            )
            self.p.step("record_event(ev)", call(V(q), V(ev), method="record_event"))
            self.p.step("event.synchronize", call(V(ev), method="synchronize"))
        elif kind == "sync":
            self.p.step("queue.synchronize", call(V(q), method="synchronize"))
        elif kind == "wait-queue":
            self.p.step("wait_for(queue)", call(V(q), DEFQ, method="wait_for"))
        elif kind == "wait-device":
            self.p.step("wait_for(device)", call(V(q), CPU_, method="wait_for"))
        elif kind == "event-ready":
            ev = self.p.step(
                "DeviceEvent", call(G("DeviceEvent"), CPU_), out=("event",)
            )
            self.p.step("event.is_ready", call(V(ev), method="is_ready"))
        elif kind == "event-sync":
            ev = self.p.step(
                "DeviceEvent", call(G("DeviceEvent"), CPU_), out=("event",)
            )
            self.p.step("event.synchronize", call(V(ev), method="synchronize"))
        elif kind == "elapsed":
            a = self.p.step(
                "DeviceEvent", call(G("DeviceEvent"), CPU_, True), out=("event",)
            )
            b = self.p.step(
                "DeviceEvent", call(G("DeviceEvent"), CPU_, True), out=("event",)
            )
            if rng.random() < 0.5:
                self.p.step("record_event(ev)", call(V(q), V(a), method="record_event"))
                self.p.step("record_event(ev)", call(V(q), V(b), method="record_event"))
                self.p.step("event.synchronize", call(V(b), method="synchronize"))
            self.p.step("elapsed_time", call(V(a), V(b), method="elapsed_time"))
        elif kind == "wait-bad":
            self.p.step(
                "wait_for(bad)",
                call(V(q), rng.choice([3, None, "q"]), method="wait_for"),
            )
        elif kind == "repr-default":
            self.p.step("repr(queue)", call(G("repr"), V(q)))
        elif kind == "native":
            self.p.step(
                "native_stream_handle",
                {"op": "attr", "obj": V(q), "name": "native_stream_handle"},
            )
        else:
            name = rng.choice(
                [
                    "api",
                    "label",
                    "id",
                    "is_host",
                    "is_host_unified",
                    "is_compatible",
                    "architecture_name",
                    "model_name",
                    "stats",
                    "default_queue",
                ]
            )
            self.p.step(
                f"CPU.{name}",
                {"op": "attr", "obj": CPU_, "name": name},
                tags=[f"attr:{name}"],
            )


_DTYPE_VALUES = {
    "bool": 1,
    "uint8": 134,
    "int8": 135,
    "uint16": 136,
    "int16": 137,
    "uint32": 138,
    "int32": 139,
    "uint64": 140,
    "int64": 141,
    "float16": 79,
    "bfloat16": 80,
    "float32": 81,
    "float64": 82,
    "float8_e8m0fnu": 73,
    "float8_e4m3fn": 75,
    "float8_e4m3fnuz": 76,
    "float8_e5m2": 77,
    "float8_e5m2fnuz": 78,
    "float4_e2m1fn": 64,
    "float6_e2m3fn": 65,
    "float6_e3m2fn": 66,
}
_MLIR = {
    "bool": "i1",
    "int8": "si8",
    "uint8": "ui8",
    "int16": "si16",
    "uint16": "ui16",
    "int32": "si32",
    "uint32": "ui32",
    "int64": "si64",
    "uint64": "ui64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
    "float6_e3m2fn": "f6e3m2fn",
}


def random_program(seed: int) -> dict[str, Any]:
    gen = Gen(seed)
    rng = gen.rng
    actions = [
        (gen.create, 5),
        (gen.index, 5),
        (gen.view, 2),
        (gen.copy_like, 3),
        (gen.setitem, 5),
        (gen.inplace_copy, 3),
        (gen.numpy_alias_write, 2),
        (gen.reads, 6),
        (gen.dtype_ops, 2),
        (gen.usage_ops, 1),
        (gen.queue_ops, 1),
    ]
    funcs, weights = zip(*actions, strict=True)
    gen.create()
    for _ in range(rng.randint(5, 12)):
        rng.choices(funcs, weights)[0]()
    return gen.p.as_json()
