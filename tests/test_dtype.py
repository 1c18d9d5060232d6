"""max.dtype.DType (SPEC 12.1): members, properties, the NumPy mapping with
and without ml_dtypes and NumPy, lazy imports, and the stub."""

from __future__ import annotations

import ast
import importlib.resources
import importlib.util
import inspect
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from max.dtype import DType

REPO_ROOT = Path(__file__).resolve().parent.parent

# SPEC 12.1's values, in MAX's member order.
VALUES = {
    "bool": 1,
    "int8": 135,
    "int16": 137,
    "int32": 139,
    "int64": 141,
    "uint8": 134,
    "uint16": 136,
    "uint32": 138,
    "uint64": 140,
    "float16": 79,
    "float32": 81,
    "float64": 82,
    "bfloat16": 80,
    "float4_e2m1fn": 64,
    "float6_e2m3fn": 65,
    "float6_e3m2fn": 66,
    "float8_e8m0fnu": 73,
    "float8_e4m3fn": 75,
    "float8_e4m3fnuz": 76,
    "float8_e5m2": 77,
    "float8_e5m2fnuz": 78,
}
# name: (size_in_bits, size_in_bytes, align, DLPack code, DLPack bits)
LAYOUT = {
    "bool": (8, 1, 1, 6, 8),
    "int8": (8, 1, 1, 0, 8),
    "int16": (16, 2, 2, 0, 16),
    "int32": (32, 4, 4, 0, 32),
    "int64": (64, 8, 8, 0, 64),
    "uint8": (8, 1, 1, 1, 8),
    "uint16": (16, 2, 2, 1, 16),
    "uint32": (32, 4, 4, 1, 32),
    "uint64": (64, 8, 8, 1, 64),
    "float16": (16, 2, 2, 2, 16),
    "float32": (32, 4, 4, 2, 32),
    "float64": (64, 8, 8, 2, 64),
    "bfloat16": (16, 2, 2, 4, 16),
    "float4_e2m1fn": (4, 1, 1, 17, 4),
    "float6_e2m3fn": (6, 1, 1, 15, 6),
    "float6_e3m2fn": (6, 1, 1, 16, 6),
    "float8_e8m0fnu": (8, 1, 1, 14, 8),
    "float8_e4m3fn": (8, 1, 1, 10, 8),
    "float8_e4m3fnuz": (8, 1, 1, 11, 8),
    "float8_e5m2": (8, 1, 1, 12, 8),
    "float8_e5m2fnuz": (8, 1, 1, 13, 8),
}
SIGNED = {"int8", "int16", "int32", "int64"}
UNSIGNED = {"uint8", "uint16", "uint32", "uint64"}
FLOAT8 = {n for n in VALUES if n.startswith("float8_")}
SUBBYTE = {"float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"}
FLOATS = {"float16", "float32", "float64", "bfloat16", *FLOAT8, *SUBBYTE}
NUMPY_TWINS = {"bool", *SIGNED, *UNSIGNED, "float16", "float32", "float64"}
PREDICATES = {
    "is_integral": SIGNED | UNSIGNED,
    "is_signed_integral": SIGNED,
    "is_unsigned_integral": UNSIGNED,
    "is_float": FLOATS,
    "is_float8": FLOAT8,
    "is_half": {"float16", "bfloat16"},
}


def _child(code: str, block: str = "") -> subprocess.CompletedProcess[str]:
    """Runs code in a fresh interpreter that imports this checkout's max,
    where importing the module `block` (if given) fails."""
    if block:
        code = f"import sys\nsys.modules[{block!r}] = None\n" + textwrap.dedent(code)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO_ROOT,
    )


def _numpy() -> Any:
    return pytest.importorskip("numpy", reason="NumPy is in the test extra")


# ---- members -----------------------------------------------------------------


def test_members_and_values_exact() -> None:
    assert {d.name: d.value for d in DType} == VALUES
    assert [d.name for d in DType] == list(VALUES)  # MAX's order
    assert len(DType) == 21
    assert issubclass(DType, __import__("enum").Enum)


def test_lookup_by_value_is_the_member() -> None:
    assert DType(81) is DType.float32
    for name, value in VALUES.items():
        assert DType(value) is getattr(DType, name)
        assert DType[name] is getattr(DType, name)
    for value in (0, 2, 63, 67, 83, 142, "float32", 81.0 + 0.5):
        with pytest.raises(ValueError):
            DType(value)


def test_str_and_repr() -> None:
    """str() is Enum's, repr() the bare name (as MAX's nanobind enum)."""
    assert str(DType.float32) == "DType.float32"
    assert repr(DType.float32) == "float32"
    for d in DType:
        assert str(d) == f"DType.{d.name}"
        assert repr(d) == d.name
        assert f"{d}" == str(d)
    assert repr([DType.int8, DType.bfloat16]) == "[int8, bfloat16]"


def test_members_pickle_and_hash() -> None:
    for d in DType:
        assert pickle.loads(pickle.dumps(d)) is d
    assert len({hash(d) for d in DType}) == 21


# ---- MLIR names (MAX's DType("f32") and DType._mlir) -------------------------

MLIR = {
    "bool": "i1",
    "int8": "si8",
    "int16": "si16",
    "int32": "si32",
    "int64": "si64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "float4_e2m1fn": "f4e2m1fn",
    "float6_e2m3fn": "f6e2m3fn",
    "float6_e3m2fn": "f6e3m2fn",
    "float8_e8m0fnu": "f8e8m0fnu",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2": "f8e5m2",
    "float8_e5m2fnuz": "f8e5m2fnuz",
}


def test_mlir_names_round_trip() -> None:
    assert set(MLIR) == set(VALUES)
    for name, mlir in MLIR.items():
        d = DType[name]
        assert d._mlir == mlir
        assert DType(mlir) is d
        assert DType(d._mlir) is d  # MAX's own round-trip test
    assert DType("f32") is DType.float32
    assert isinstance(inspect.getattr_static(DType, "_mlir"), property)


def test_unknown_strings_are_not_dtypes() -> None:
    """Only MLIR names are looked up; anything else is Enum's ValueError
    (MAX's lookup raises KeyError there)."""
    for value in ("float32", "F32", "f32 ", "", "bool", "DType.float32", "i32"):
        with pytest.raises(ValueError, match="is not a valid DType"):
            DType(value)


# ---- finfo -----------------------------------------------------------------------

FLOAT_NAMES = [name for name in VALUES if DType[name].is_float()]


def test_finfo_is_max_dtype_finfo() -> None:
    import max.dtype

    assert DType.finfo is max.dtype.finfo
    assert "finfo" not in DType.__members__  # an attribute, not a member
    assert len(DType) == 21
    info = DType.finfo(DType.float16)
    assert isinstance(info, max.dtype.finfo) and info.dtype is DType.float16


@pytest.mark.parametrize("name", FLOAT_NAMES)
def test_finfo_matches_ml_dtypes_and_numpy(name: str) -> None:
    """Exact equality with the reference implementation of each format:
    NumPy's for the IEEE types, ml_dtypes' for the others."""
    np = _numpy()
    from max.dtype import finfo

    info = finfo(DType[name])
    if name in ("float16", "float32", "float64"):
        ref = np.finfo(getattr(np, name))
    else:
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="in the test extra")
        ref = ml_dtypes.finfo(getattr(ml_dtypes, name))
    assert info.bits == ref.bits == DType[name].size_in_bits
    for attr in ("eps", "max", "min", "tiny", "smallest_normal"):
        value = getattr(info, attr)
        assert type(value) is float, attr
        assert value == float(getattr(ref, attr)), (name, attr)
    assert info.dtype is DType[name]


def test_finfo_known_values() -> None:
    """Spelled out, so that the values hold without NumPy and ml_dtypes
    (MAX's table; e8m0fnu has no sign, so its min is its smallest value)."""
    from max.dtype import finfo

    expected = {
        "bfloat16": (16, 2**-7, (2 - 2**-7) * 2**127, 2**-126),
        "float8_e4m3fn": (8, 2**-3, 448.0, 2**-6),
        "float8_e4m3fnuz": (8, 2**-3, 240.0, 2**-7),
        "float8_e5m2": (8, 2**-2, 57344.0, 2**-14),
        "float8_e5m2fnuz": (8, 2**-2, 57344.0, 2**-15),
        "float4_e2m1fn": (4, 0.5, 6.0, 1.0),
        "float6_e2m3fn": (6, 2**-3, 7.5, 1.0),
        "float6_e3m2fn": (6, 2**-2, 28.0, 2**-2),
        "float16": (16, 2**-10, 65504.0, 2**-14),
        "float64": (64, 2**-52, sys.float_info.max, sys.float_info.min),
    }
    for name, (bits, eps, largest, tiny) in expected.items():
        info = finfo(DType[name])
        assert (info.bits, info.eps, info.max, info.tiny) == (
            bits,
            eps,
            largest,
            tiny,
        ), name
        assert info.min == -largest and info.smallest_normal == tiny
    e8m0 = finfo(DType.float8_e8m0fnu)
    assert (e8m0.bits, e8m0.eps, e8m0.max) == (8, 1.0, 2.0**127)
    assert e8m0.min == e8m0.tiny == 2.0**-127


def test_finfo_repr() -> None:
    from max.dtype import finfo

    assert repr(finfo(DType.float8_e4m3fn)) == (
        "finfo(dtype=float8_e4m3fn, bits=8, eps=0.125, max=448.0, min=-448.0, "
        "tiny=0.015625)"
    )


def test_finfo_rejects_what_is_not_a_float_dtype() -> None:
    from max.dtype import finfo

    for d in DType:
        if not d.is_float():
            with pytest.raises(TypeError, match=f"floating-point types, got {d.name}"):
                finfo(d)
    for bad in ("float32", 81, None, float):
        with pytest.raises(TypeError, match="must be a max.dtype.DType"):
            finfo(bad)  # type: ignore[arg-type]


def test_finfo_needs_no_numpy() -> None:
    result = _child(
        """
        import sys
        from max.dtype import DType, finfo
        print(finfo(DType.float32).max, DType.finfo(DType.bfloat16).eps)
        print(sys.modules.get("numpy") is not None)
        """,
        block="numpy",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3.4028234663852886e+38", "0.0078125", "False"]


# ---- properties ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(VALUES))
def test_sizes_alignment_and_dlpack(name: str) -> None:
    d = DType[name]
    bits, size, align, dl_code, dl_bits = LAYOUT[name]
    assert (d.size_in_bits, d.size_in_bytes, d.align) == (bits, size, align)
    assert d.size_in_bytes >= 1
    assert (d._dlpack_code, d._dlpack_bits) == (dl_code, dl_bits)
    for value in (d.size_in_bits, d.size_in_bytes, d.align, d._dlpack_code):
        assert type(value) is int


def test_properties_are_read_only() -> None:
    for attr in ("size_in_bits", "size_in_bytes", "align", "_dlpack_code"):
        assert isinstance(inspect.getattr_static(DType, attr), property)
        with pytest.raises(AttributeError):
            setattr(DType.float32, attr, 1)
    assert DType.float32.size_in_bits == 32


@pytest.mark.parametrize("predicate", sorted(PREDICATES))
def test_predicates(predicate: str) -> None:
    for d in DType:
        result = getattr(d, predicate)()
        assert type(result) is bool
        assert result == (d.name in PREDICATES[predicate]), (predicate, d)


def test_bool_is_not_integral() -> None:
    assert not DType.bool.is_integral()
    assert not DType.bool.is_float()


# ---- NumPy ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NUMPY_TWINS))
def test_numpy_twins_both_ways(name: str) -> None:
    np = _numpy()
    d = DType[name]
    twin = np.dtype(getattr(np, name if name != "bool" else "bool_"))
    assert d.to_numpy() == twin
    assert isinstance(d.to_numpy(), np.dtype)
    assert DType.from_numpy(twin) is d  # a dtype object
    assert DType.from_numpy(twin.type) is d  # a scalar type
    assert DType.from_numpy(name) is d  # a string
    assert DType.from_numpy(np.zeros(2, twin).dtype) is d


def test_numpy_aliases_of_the_same_type() -> None:
    np = _numpy()
    assert DType.from_numpy(np.longlong) is DType.int64
    assert DType.from_numpy(np.ulonglong) is DType.uint64
    assert DType.from_numpy(np.intc) is DType.int32
    assert DType.from_numpy(np.single) is DType.float32
    assert DType.from_numpy(np.half) is DType.float16
    assert DType.from_numpy("<f4") is DType.float32
    assert DType.from_numpy("=i2") is DType.int16
    assert DType.from_numpy("?") is DType.bool


@pytest.mark.parametrize("name", sorted(FLOAT8))
def test_float8_to_numpy_is_raw_bytes(name: str) -> None:
    np = _numpy()
    assert DType[name].to_numpy() == np.dtype(np.uint8)


@pytest.mark.parametrize("name", sorted(SUBBYTE))
def test_float4_float6_have_no_numpy_dtype(name: str) -> None:
    _numpy()
    with pytest.raises(ValueError, match=f"DType.{name}"):
        DType[name].to_numpy()


def test_bfloat16_with_ml_dtypes() -> None:
    np = _numpy()
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="in the test extra")
    assert DType.bfloat16.to_numpy() == np.dtype(ml_dtypes.bfloat16)
    assert DType.from_numpy(DType.bfloat16.to_numpy()) is DType.bfloat16
    assert DType.from_numpy(ml_dtypes.bfloat16) is DType.bfloat16
    assert DType.from_numpy("bfloat16") is DType.bfloat16


@pytest.mark.parametrize("name", sorted(FLOAT8 | SUBBYTE))
def test_ml_dtypes_small_floats_map_to_their_twins(name: str) -> None:
    np = _numpy()
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="in the test extra")
    t = getattr(ml_dtypes, name)
    assert DType.from_numpy(t) is DType[name]
    assert DType.from_numpy(np.dtype(t)) is DType[name]
    assert DType.from_numpy(np.zeros(3, t).dtype) is DType[name]


def _unsupported(np: Any) -> list[Any]:
    return [
        np.complex64,
        np.complex128,
        np.object_,
        np.str_,
        np.bytes_,
        "U3",
        "S2",
        "M8[s]",
        "m8[ns]",
        np.dtype([("a", "f4"), ("b", "i4")]),
        np.dtype(("f4", (2,))),
        ">f4",  # byte-swapped: its bytes are not a float32's
        ">i8",
    ]


def test_from_numpy_unsupported_dtypes() -> None:
    np = _numpy()
    cases = _unsupported(np)
    if np.dtype(np.longdouble).itemsize not in (2, 4, 8):
        cases.append(np.longdouble)
    for case in cases:
        with pytest.raises(ValueError, match=r"^unsupported NumPy dtype: "):
            DType.from_numpy(case)
    with pytest.raises(ValueError, match=r"^unsupported NumPy dtype: >f4$"):
        DType.from_numpy(">f4")


def test_from_numpy_not_a_dtype() -> None:
    _numpy()
    for case in (None, "nonsense", 42, object()):
        with pytest.raises(ValueError, match=r"^unsupported NumPy dtype: "):
            DType.from_numpy(case)
    with pytest.raises(ValueError, match=r"^unsupported NumPy dtype: None$"):
        DType.from_numpy(None)  # NumPy would read None as float64


def test_from_numpy_other_packages_types() -> None:
    _numpy()
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="in the test extra")
    for name in ("int4", "uint4", "float8_e4m3b11fnuz", "float8_e4m3", "float8_e3m4"):
        t = getattr(ml_dtypes, name, None)
        if t is None:
            continue
        with pytest.raises(ValueError, match=f"unsupported NumPy dtype: {name}"):
            DType.from_numpy(t)


# ---- without ml_dtypes, without NumPy, lazily --------------------------------------


def test_without_ml_dtypes() -> None:
    _numpy()
    result = _child(
        """
        import numpy as np
        from max.dtype import DType
        try:
            DType.bfloat16.to_numpy()
        except ValueError as e:
            print("VALUE", e)
        assert DType.float32.to_numpy() == np.float32
        assert DType.float8_e5m2.to_numpy() == np.uint8
        assert DType.from_numpy(np.int8) is DType.int8
        try:
            DType.from_numpy("bfloat16")
        except ValueError as e:
            print("FROM", e)
        """,
        block="ml_dtypes",
    )
    assert result.returncode == 0, result.stderr
    assert "VALUE" in result.stdout
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("VALUE"))
    assert "DType.bfloat16" in line and "ml_dtypes" in line
    assert "FROM unsupported NumPy dtype: 'bfloat16'" in result.stdout


def test_without_numpy() -> None:
    result = _child(
        """
        from max.dtype import DType
        assert DType(81) is DType.float32
        assert DType.bfloat16.size_in_bytes == 2 and DType.int8.is_integral()
        for call in (lambda: DType.float32.to_numpy(),
                     lambda: DType.from_numpy("float32")):
            try:
                call()
            except ImportError as e:
                print("IMPORT", e)
        """,
        block="numpy",
    )
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("IMPORT")]
    assert len(lines) == 2, result.stdout
    assert "DType.to_numpy() needs NumPy" in lines[0]
    assert "DType.from_numpy() needs NumPy" in lines[1]


@pytest.mark.parametrize("module", ["max.dtype", "max.driver"])
def test_import_does_not_import_numpy(module: str) -> None:
    result = _child(
        f"""
        import sys
        import {module}
        from max.dtype import DType
        DType.float32.size_in_bytes, DType.bfloat16.is_half(), str(DType.int8)
        print(sorted(m for m in ("numpy", "ml_dtypes") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- documentation and the stub ---------------------------------------------


def _stub_class() -> ast.ClassDef:
    text = importlib.resources.files("max.dtype").joinpath("__init__.pyi").read_text()
    tree = ast.parse(text)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert set(classes) == {"DType", "finfo"}
    return classes["DType"]


def _runtime_members() -> dict[str, Any]:
    """DType's own methods and properties (not Enum's machinery)."""
    out = {}
    for name, value in vars(DType).items():
        if isinstance(value, property) and not name.startswith("__"):
            out[name] = value  # _dlpack_code and _dlpack_bits included
        elif isinstance(value, classmethod) or inspect.isfunction(value):
            if not name.startswith("_"):
                out[name] = value
    return out


def test_stub_members_match_runtime() -> None:
    cls = _stub_class()
    stub_values = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in cls.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    assert list(stub_values.items()) == [(d.name, d.value) for d in DType]


def test_stub_methods_match_runtime() -> None:
    cls = _stub_class()
    stub = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    runtime = _runtime_members()
    assert set(stub) == set(runtime)
    for name, node in stub.items():
        decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
        value = runtime[name]
        assert ("property" in decorators) == isinstance(value, property), name
        assert ("classmethod" in decorators) == isinstance(value, classmethod), name
        if isinstance(value, property):
            continue
        params = [a.arg for a in node.args.args]
        func = value.__func__ if isinstance(value, classmethod) else value
        assert params == list(inspect.signature(func).parameters), name


def test_every_public_member_is_documented() -> None:
    assert DType.__doc__ and "DType(81) is DType.float32" in DType.__doc__
    assert importlib.import_module("max.dtype").__doc__
    for name, value in _runtime_members().items():
        target = value.fget if isinstance(value, property) else value
        assert getattr(target, "__doc__", None), name


def test_module_all() -> None:
    import max.dtype

    assert max.dtype.__all__ == ["DType", "finfo"]


def test_typed_usage_passes_mypy_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the test extra)")
    _numpy()  # the stub's to_numpy() and from_numpy() speak numpy's types
    example = tmp_path / "uses_dtype.py"
    example.write_text(
        textwrap.dedent(
            """
            from typing import Any

            import numpy as np
            from max.dtype import DType, finfo

            d: DType = DType(81)
            bits: int = d.size_in_bits + d.size_in_bytes + d.align
            flags: list[bool] = [d.is_float(), d.is_half(), d.is_integral(),
                                 d.is_signed_integral(), d.is_unsigned_integral(),
                                 d.is_float8()]
            np_dtype: np.dtype[Any] = d.to_numpy()
            back: DType = DType.from_numpy(np_dtype)
            also: DType = DType.from_numpy(np.float32)
            named: DType = DType.from_numpy("int8")
            member: DType = DType.bool
            from_mlir: DType = DType("bf16")
            mlir: str = d._mlir
            limits: finfo = finfo(DType.bfloat16)
            also_limits: finfo = DType.finfo(DType.float8_e4m3fn)
            values: list[float] = [limits.eps, limits.max, limits.min,
                                   limits.tiny, also_limits.smallest_normal]
            width: int = limits.bits
            described: DType = limits.dtype
            """
        )
    )
    env = dict(os.environ)
    env["MYPYPATH"] = str(REPO_ROOT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(example),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
