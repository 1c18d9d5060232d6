"""The named cases of the differential test against MAX 26.7
(tests/test_max_differential.py).  Not a test module.

Two kinds, in one list (``all_programs()``):

- the witnesses of the divergence table (docs/max-26.7-divergences.json):
  each entry lists the cases that must still show it, so an entry that no
  longer diverges fails the test;
- the cases on which we conform to MAX (issue 24's decisions, MAX 26.7's
  newer surface): they may differ only in what an always-on entry explains
  (``ALWAYS``: every buffer here has a hazard record, queues and
  completions print as themselves).

Each case is a short program in tests/max_runner.py's language, built with
tests/max_programs.py's helpers; steps carry the tags the table matches on.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from max_programs import CPU_, DEFQ, DT, SL, G, Program, T, V, call

# Entries that may explain a divergence in any case, conforming or not:
# flags and text that every buffer, queue and completion shows.
ALWAYS = {"hazard-records", "queue-text", "completion-text"}
CASES: dict[str, Callable[[Program], None]] = {}


def case(name: str) -> Callable[[Callable[[Program], None]], Callable[[Program], None]]:
    def register(fn: Callable[[Program], None]) -> Callable[[Program], None]:
        CASES[name] = fn
        return fn

    return register


def all_programs() -> list[dict[str, Any]]:
    programs = []
    for name, build in CASES.items():
        p = Program(f"case:{name}")
        build(p)
        programs.append(p.as_json())
    return programs


def nd(dtype: str, shape: list[int], seed: int = 1, **more: Any) -> dict[str, Any]:
    return {"nd": {"dtype": dtype, "shape": shape, "seed": seed, **more}}


def buf(p: Program, dtype: str, shape: list[int], tags: list[str], **more: Any) -> int:
    """A defined CPU buffer over a fresh NumPy array (from_numpy)."""
    return p.step(
        "from_numpy",
        call(G("Buffer.from_numpy"), nd(dtype, shape, **more)),
        out=("buffer",),
        tags=tags,
    )


def attr(obj: Any, name: str) -> dict[str, Any]:
    return {"op": "attr", "obj": obj, "name": name}


def item(p: Program, var: int, tags: list[str] | None = None) -> None:
    p.step("item", call(V(var), method="item"), tags=tags)


def setitem(var: int, key: Any, value: Any) -> dict[str, Any]:
    return {"op": "setitem", "obj": V(var), "key": key, "value": value}


def getitem(var: int, key: Any) -> dict[str, Any]:
    return {"op": "getitem", "obj": V(var), "key": key}


# ---- witnesses of the table's entries --------------------------------------------


@case("zeros-then-setitem")
def _(p: Program) -> None:
    # Behind a 64 MiB fill on the same queue, MAX's fill is still to run
    # when the element is written.
    p.step(
        "zeros",
        call(G("Buffer.zeros"), T(1 << 24), DT("float32")),
        out=("big",),
        read=False,
    )
    b = p.step(
        "zeros", call(G("Buffer.zeros"), T(4), DT("float32")), out=("b",), read=False
    )
    p.step("setitem", setitem(b, T(1), 5.0), tags=["pending:fill"], observe=(b,))


@case("strided-to-numpy")
def _(p: Program) -> None:
    b = buf(p, "float32", [3, 4], [])
    v = p.step("getitem", getitem(b, T(SL(), SL(None, None, 2))), out=("v",))
    p.step("to_numpy", call(V(v), method="to_numpy"), tags=["layout:strided"])


@case("negative-step-copy")
def _(p: Program) -> None:
    b = buf(p, "float32", [3, 4], [])
    v = p.step("getitem", getitem(b, T(SL(None, None, -1), SL())), out=("v",))
    p.step("copy", call(V(v), method="copy"), tags=["layout:neg"])


@case("negative-step-from-dlpack")
def _(p: Program) -> None:
    b = buf(p, "float32", [3, 4], [])
    v = p.step("getitem", getitem(b, T(SL(None, None, -1), SL(1, 3))), out=("v",))
    p.step("np.from_dlpack", call(G("np.from_dlpack"), V(v)), tags=["layout:neg"])


@case("index-2-pow-32")
def _(p: Program) -> None:
    b = buf(p, "int8", [4], [])
    p.step("getitem", getitem(b, T(2**32)), tags=["index:huge"])


@case("ellipsis-index")
def _(p: Program) -> None:
    b = buf(p, "float32", [3, 4], [])
    p.step("getitem", getitem(b, T(1, {"ell": 1})), tags=["index:ellipsis"])


@case("batch-copy-int32-into-float32")
def _(p: Program) -> None:
    dst = buf(p, "float32", [2], [])
    src = buf(p, "int32", [2], [], seed=2)
    p.step(
        "batch_inplace_copy",
        call(G("driver.batch_inplace_copy"), {"l": [V(dst)]}, {"l": [V(src)]}),
        tags=["mismatch:dtype"],
        observe=(dst,),
    )


@case("array-ctor-read-only")
def _(p: Program) -> None:
    arr = p.step(
        "value",
        {"op": "value", "value": nd("int32", [3], readonly=True)},
        out=("ndarray",),
    )
    b = p.step(
        "Buffer(array)",
        call(G("Buffer"), V(arr), CPU_),
        out=("b",),
        tags=["array:readonly"],
    )
    p.step("setitem", setitem(b, T(0), 99), tags=["array:readonly"], observe=(arr,))


@case("float-into-int32")
def _(p: Program) -> None:
    b = buf(p, "int32", [2], [])
    p.step(
        "setitem",
        setitem(b, T(0), 2.7),
        tags=["class:int", "value:fraction"],
        observe=(b,),
    )


@case("bool-from-numbers")
def _(p: Program) -> None:
    b = buf(p, "bool", [2], [])
    p.step(
        "setitem",
        setitem(b, T(0), 0.5),
        tags=["class:bool", "value:fraction"],
        observe=(b,),
    )
    p.step(
        "setitem", setitem(b, T(1), 5), tags=["class:bool", "value:int"], observe=(b,)
    )
    v = p.step(
        "view",
        call(V(b), DT("uint8"), method="view"),
        out=("b",),
        tags=["mark:bool-bytes"],
    )
    p.step("to_numpy", call(V(v), method="to_numpy"), tags=["mark:bool-bytes"])


@case("float-index")
def _(p: Program) -> None:
    b = buf(p, "float32", [3, 4], [])
    p.step("getitem", getitem(b, T(1.0, 0)), tags=["index:float"])


@case("string-value")
def _(p: Program) -> None:
    b = buf(p, "float32", [2], [])
    p.step("setitem", setitem(b, T(0), "1"), tags=["value:non-number"], observe=(b,))


@case("negative-dimension")
def _(p: Program) -> None:
    p.step(
        "bad-create",
        call(G("Buffer"), DT("float32"), T(2, -1)),
        tags=["bad:negdim"],
        read=False,
    )


@case("overflowing-shape")
def _(p: Program) -> None:
    p.step(
        "bad-create",
        call(G("Buffer"), DT("int64"), T(2**40, 2**40)),
        tags=["bad:hugedim"],
        read=False,
    )


@case("rank0-view")
def _(p: Program) -> None:
    s = p.step("scalar", call(G("Buffer.scalar"), 1.5, DT("float32")), out=("s",))
    p.step("view", call(V(s), DT("int32"), method="view"), tags=["view:rank0"])


@case("stepped-single-element")
def _(p: Program) -> None:
    b = buf(p, "float32", [4], [])
    p.step("getitem", getitem(b, T(SL(0, 1, 3))), tags=["view:contig"])
    p.step("getitem", getitem(b, T(SL(3, 1, 2))), tags=["view:empty"])


@case("empty-import")
def _(p: Program) -> None:
    buf(p, "int64", [3, 0], ["layout:empty"])


@case("rank0-index-zero")
def _(p: Program) -> None:
    s = p.step("scalar", call(G("Buffer.scalar"), 1, DT("int8")), out=("s",))
    p.step("getitem", getitem(s, 0), tags=["index:rank0-int"])


@case("usage-int")
def _(p: Program) -> None:
    p.step(
        "bad-create",
        call(G("Buffer"), DT("float32"), T(1), usage=1),
        tags=["bad:usage-int"],
        read=False,
    )


@case("hazard-tracked")
def _(p: Program) -> None:
    buf(p, "float32", [2], [])


@case("queue-repr")
def _(p: Program) -> None:
    p.step("DeviceQueue", call(G("DeviceQueue"), CPU_))
    p.step("repr(queue)", call(G("repr"), DEFQ))


@case("numpy-of-bfloat16")
def _(p: Program) -> None:
    for dtype in ("bfloat16", "float8_e4m3fn"):
        b = p.step("scalar", call(G("Buffer.scalar"), 1.5, DT(dtype)), out=("b",))
        p.step(
            "to_numpy",
            call(V(b), method="to_numpy"),
            tags=[f"class:{dtype[:4]}".replace("bflo", "bf16").replace("floa", "f8")],
        )


@case("completion-repr")
def _(p: Program) -> None:
    p.step("record_on", call(G("core.HostHazardCompletion.record_on"), DEFQ))


@case("getitem-by-keyword")
def _(p: Program) -> None:
    b = buf(p, "int32", [3], [])
    p.step("__getitem__", call(V(b), method="__getitem__", idx=1))


@case("cpu-elapsed-time")
def _(p: Program) -> None:
    start = p.step("DeviceEvent", call(G("DeviceEvent"), CPU_, True), out=("event",))
    end = p.step("DeviceEvent", call(G("DeviceEvent"), CPU_, True), out=("event",))
    p.step("record_event(ev)", call(DEFQ, V(start), method="record_event"))
    p.step("record_event(ev)", call(DEFQ, V(end), method="record_event"))
    p.step("event.synchronize", call(V(end), method="synchronize"))
    p.step("elapsed_time", call(V(start), V(end), method="elapsed_time"))


@case("dtype-unknown-name")
def _(p: Program) -> None:
    p.step("DType(bad)", call(G("DType"), "zz"))


@case("array-ctor-fortran")
def _(p: Program) -> None:
    p.step(
        "Buffer(array)",
        call(G("Buffer"), nd("int32", [2, 3], fortran=True), CPU_),
        tags=["array:fortran"],
    )


@case("view-prefix")
def _(p: Program) -> None:
    b = buf(p, "uint8", [8], [])
    p.step("view", call(V(b), DT("float32"), T(1), method="view"), tags=["view:shape"])


@case("strided-import-with-copy")
def _(p: Program) -> None:
    arr = nd("int32", [4], index=[[None, None, -1]])
    p.step(
        "from_dlpack",
        call(G("Buffer.from_dlpack"), arr, copy=True),
        tags=["copy:True", "array:neg"],
    )


@case("e8m0-zero")
def _(p: Program) -> None:
    p.step(
        "scalar",
        call(G("Buffer.scalar"), 0.0, DT("float8_e8m0fnu")),
        tags=["dtype:float8_e8m0fnu"],
    )


@case("bfloat16-rounding")
def _(p: Program) -> None:
    p.step(
        "scalar", call(G("Buffer.scalar"), 1.014, DT("bfloat16")), tags=["class:bf16"]
    )


@case("rank0-bool-import")
def _(p: Program) -> None:
    buf(p, "bool", [], ["class:bool", "rank:0"])


@case("size-1-stride-export")
def _(p: Program) -> None:
    b = buf(p, "float32", [1, 3], [])
    v = p.step("getitem", getitem(b, T(SL(None, None, -1), SL())), out=("v",))
    p.step("np.from_dlpack", call(G("np.from_dlpack"), V(v)), tags=["size1-strides"])


@case("ellipsis-into-empty-crashes")
def _(p: Program) -> None:
    b = p.step("zeros", call(G("Buffer.zeros"), T(2, 0), DT("int8")), out=("b",))
    p.step("getitem", getitem(b, T(1, {"ell": 1})), tags=["index:ellipsis"])


@case("strided-view-as-dtype")
def _(p: Program) -> None:
    b = buf(p, "int32", [3, 4], [])
    v = p.step("getitem", getitem(b, T(SL(), SL(None, None, 2))), out=("v",))
    p.step("view", call(V(v), DT("float32"), method="view"), tags=["view:strided"])


@case("rank0-setitem-misplaced")
def _(p: Program) -> None:
    b = buf(p, "int32", [4], [])
    v = p.step("getitem", getitem(b, 2), out=("v",))
    p.step("setitem", setitem(v, 0, 9), tags=["mark:rank0-int-write"], observe=(b, v))


@case("float4-item")
def _(p: Program) -> None:
    p.step(
        "scalar",
        call(G("Buffer.scalar"), 1.5, DT("float4_e2m1fn")),
        tags=["class:subbyte"],
    )


# ---- where we conform (issue 24's decisions and MAX 26.7's surface) -----------


@case("architecture-name-on-cpu")
def _(p: Program) -> None:
    p.step("CPU.architecture_name", attr(CPU_, "architecture_name"))
    p.step(
        "accelerator_architecture_name", call(G("driver.accelerator_architecture_name"))
    )


@case("read-only-import-without-copy")
def _(p: Program) -> None:
    p.step(
        "from_dlpack",
        call(G("Buffer.from_dlpack"), nd("int32", [3], readonly=True), copy=False),
    )


@case("buffer-repr-shows-device")
def _(p: Program) -> None:
    b = p.step("Buffer", call(G("Buffer"), DT("int8"), T(1)), out=("b",), read=False)
    p.step("repr", call(G("repr"), V(b)))
    p.step(
        "repr",
        call(
            G("repr"), call_step(p, "zeros", G("Buffer.zeros"), T(2, 3), DT("float32"))
        ),
    )


def call_step(p: Program, name: str, fn: Any, *args: Any) -> dict[str, Any]:
    """Binds fn(*args) to a new variable and returns a reference to it."""
    return V(p.step(name, call(fn, *args), out=("value",), read=False))


@case("rank1-iterates")
def _(p: Program) -> None:
    b = buf(p, "int32", [3], [])
    p.step("iter", {"op": "iter", "obj": V(b)})
    m = buf(p, "int32", [2, 2], [])
    p.step("iter", {"op": "iter", "obj": V(m)})
    s = p.step("scalar", call(G("Buffer.scalar"), 1, DT("int8")), out=("s",))
    p.step("iter", {"op": "iter", "obj": V(s)})


@case("usage-members")
def _(p: Program) -> None:
    p.step("len(Usage)", call(G("len"), G("Usage")))
    p.step("list(Usage)", call(G("list"), G("Usage")))
    p.step("repr(Usage)", call(G("repr"), {"usage": "STAGING"}))
    p.step(
        "Usage|",
        {
            "op": "binop",
            "sym": "|",
            "left": {"usage": "STAGING"},
            "right": {"usage": "UNTRACKED"},
        },
    )
    p.step("Usage(0)", call(G("Usage"), 0))


@case("wide-int-into-float32")
def _(p: Program) -> None:
    b = buf(p, "float32", [1], [])
    p.step("setitem", setitem(b, T(0), 2**64), observe=(b,))


@case("rank0-array-into-int32")
def _(p: Program) -> None:
    b = buf(p, "int32", [1], [])
    p.step("setitem", setitem(b, T(0), {"np0": ["float64", 1.5]}), observe=(b,))


@case("odd-strides-of-size-1-dimensions")
def _(p: Program) -> None:
    arr = {
        "nd": {
            "dtype": "int64",
            "shape": [1, 1, 4],
            "seed": 3,
            "index": [[None, None, -1], [None, None, None], [None, None, None]],
        }
    }
    b = p.step(
        "from_dlpack",
        call(G("Buffer.from_dlpack"), arr),
        out=("b",),
        tags=["size1-strides"],
    )
    p.step("attr:is_contiguous", attr(V(b), "is_contiguous"))


@case("cpu-stats-keys")
def _(p: Program) -> None:
    p.step("CPU.stats", attr(CPU_, "stats"))


@case("keyword-names")
def _(p: Program) -> None:
    spec = call_step(p, "DeviceSpec.cpu", G("driver.DeviceSpec.cpu"))
    p.step("devices_exist", call(G("driver.devices_exist"), devices={"l": [spec]}))
    q = p.step("DeviceQueue", call(G("DeviceQueue"), CPU_), out=("queue",))
    c = p.step(
        "poisoned",
        call(
            G("core.HostHazardCompletion.poisoned"), queue=V(q), error="producer failed"
        ),
        out=("completion",),
    )
    p.step("completion.wait", call(V(c), method="wait"))
    p.step("poison", call(V(c), method="poison", message="again"))
    b = buf(p, "int32", [3], [])
    r = p.step(
        "record_on",
        call(G("core.HostHazardCompletion.record_on"), queue=V(q)),
        out=("completion",),
    )
    p.step("_stamp_write", call(V(b), method="_stamp_write", completion=V(r)))
    p.step("_stamp_read", call(V(b), method="_stamp_read", completion=V(r)))


@case("str-decodes-bfloat16-and-float8")
def _(p: Program) -> None:
    for dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        b = p.step(
            "zeros",
            call(G("Buffer.zeros"), T(2, 2), DT(dtype)),
            out=("b",),
            tags=["origin:zeros"],
        )
        p.step("str", call(G("str"), V(b)))  # reads, so the fill has landed
        p.step("setitem", setitem(b, T(0, 1), 1.5), observe=(b,))
        p.step("str", call(G("str"), V(b)))


@case("import-paths")
def _(p: Program) -> None:
    p.step("max.driver.buffer.Buffer", attr({"mod": "max.driver.buffer"}, "Buffer"))
    p.step("max.dtype.dtype.DType", attr({"mod": "max.dtype.dtype"}, "DType"))
    p.step("load_max_buffer", attr({"mod": "max.driver.buffer"}, "__name__"))


@case("release-to-borrowed")
def _(p: Program) -> None:
    b = buf(p, "int32", [3], [])
    handles = p.step(
        "_release_buffers_to_borrowed",
        call(G("core._release_buffers_to_borrowed"), {"l": [V(b)]}),
        out=("list",),
    )
    h = p.step("getitem", {"op": "getitem", "obj": V(handles), "key": 0}, out=("b",))
    p.step("setitem", setitem(h, T(1), 7), observe=(b,))
    p.step(
        "_release_buffers_to_borrowed(bad)",
        call(G("core._release_buffers_to_borrowed"), {"l": [1]}),
    )


@case("chunked-staging-region-on-cpu")
def _(p: Program) -> None:
    p.step(
        "_ChunkedStagingRegion", call(G("core._ChunkedStagingRegion"), 4096, 64, CPU_)
    )


# ---- load_max_buffer: MAX's checkpoint format ---------------------------------------

MAGIC = b"\x93\xf0\x9f\x94\xa5\x2b\x2b\x93"


def checkpoint(
    code: int,
    shape: list[int],
    data: bytes,
    *,
    magic: bytes = MAGIC,
    major: int = 0,
    extra: int = 0,
    cut: int | None = None,
) -> dict[str, str]:
    """A MAX checkpoint file holding one buffer (tests/max_runner.py writes
    it): ``extra`` bytes of metadata claim a second buffer, ``cut``
    truncates the file."""
    key = b"weights"
    meta = (
        struct.pack("<I", len(key))
        + key
        + struct.pack("<2B", code, len(shape))
        + struct.pack(f"<{len(shape)}I", *shape)
    )
    head = magic + struct.pack("<2I", major, 1)
    size = 4 + len(key) + 2 + 4 * len(shape) + 8 + extra
    offset = len(head) + 8 + len(meta) + 8
    body = head + struct.pack("<Q", size) + meta + struct.pack("<Q", offset) + data
    return {"file": body[:cut].hex()}


def load(p: Program, path: dict[str, str], tags: list[str] | None = None) -> None:
    p.step("load_max_buffer", call(G("driver.load_max_buffer"), path), tags=tags)


@case("load-max-buffer")
def _(p: Program) -> None:
    load(p, checkpoint(81, [2, 3], struct.pack("<6f", *range(6))))
    load(p, checkpoint(139, [4], struct.pack("<4i", -1, 2, -3, 4)))
    load(p, checkpoint(80, [2, 2], bytes.fromhex("803f0040c03f0041")))  # bfloat16


@case("load-max-buffer-float8")
def _(p: Program) -> None:
    load(p, checkpoint(75, [3], bytes([0x38, 0x40, 0xC0])), ["checkpoint:float8"])


@case("load-max-buffer-rank0-bfloat16")
def _(p: Program) -> None:
    load(p, checkpoint(80, [], bytes.fromhex("c03f")), ["checkpoint:rank0-bf16"])


@case("load-max-buffer-truncated")
def _(p: Program) -> None:
    load(p, checkpoint(81, [2], b"", cut=12), ["checkpoint:truncated"])


@case("load-max-buffer-fd")
def _(p: Program) -> None:
    """MAX reads (and closes) the descriptor: a checkpoint then fails in its
    Buffer.mmap (TypeError, as here), anything else with ValueError."""
    data = struct.pack("<2f", 1, 2)
    load(p, {"fd": checkpoint(81, [2], data)["file"]}, ["checkpoint:fd"])
    fd = {"fd": checkpoint(81, [2], data, magic=b"NOTAMAX!")["file"]}
    load(p, fd, ["checkpoint:fd"])


@case("load-max-buffer-errors")
def _(p: Program) -> None:
    data = struct.pack("<2f", 1, 2)
    load(p, checkpoint(81, [2], data, magic=b"NOTAMAX!"))
    load(p, checkpoint(81, [2], data, major=1))
    load(p, checkpoint(81, [2], data, extra=9))
    load(p, checkpoint(99, [2], data))  # no such dtype
    load(p, {"file": ""})
    p.step("load_max_buffer", call(G("driver.load_max_buffer"), "/nonexistent/x.max"))
