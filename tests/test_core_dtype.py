"""The C core's dtype table and scalar codecs (csrc/core/dtype.c), through
the C program tests/core/dtype_test.c, plain and under ASan/UBSan.

The expected values come from NumPy and ml_dtypes (the oracles MAX users
compare with), never from the code under test: every bit pattern of every
format of 16 bits or less is decoded and compared, and a large sample of
doubles (every value, every midpoint between neighbours, one double ulp
either side of each, the overflow and underflow thresholds, specials and
random values) is encoded and compared.

Where ml_dtypes rounds twice (its float64 casts and bfloat16 scalars go
through float32) the oracle is ml_dtypes applied to the input rounded to
odd in float32, which rounds once (Boldo and Melquiond); float8_e8m0fnu's
lowest binade, where ml_dtypes rounds as if it were subnormal, is checked
against exact arithmetic instead (see test_e8m0_lowest_binade)."""

from __future__ import annotations

import math
import os
import random
import shutil
import struct
import subprocess
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy", reason="NumPy is the oracle (test extra)")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is the oracle")

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "csrc" / "core"
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g"]
SANITIZE = "-fsanitize=address,undefined,float-cast-overflow"
VARIANTS = {
    "plain": ["-O2"],
    "asan": ["-O1", SANITIZE, "-fno-sanitize-recover=all"],
}

# MAX's codes (SPEC 12.1) and what each one is, from the SPEC and dlpack.h.
# name: (code, size_in_bits, size_in_bytes, align, dlpack code, dlpack bits)
EXPECTED_TABLE = {
    "bool": (1, 8, 1, 1, 6, 8),
    "int8": (135, 8, 1, 1, 0, 8),
    "int16": (137, 16, 2, 2, 0, 16),
    "int32": (139, 32, 4, 4, 0, 32),
    "int64": (141, 64, 8, 8, 0, 64),
    "uint8": (134, 8, 1, 1, 1, 8),
    "uint16": (136, 16, 2, 2, 1, 16),
    "uint32": (138, 32, 4, 4, 1, 32),
    "uint64": (140, 64, 8, 8, 1, 64),
    "float16": (79, 16, 2, 2, 2, 16),
    "float32": (81, 32, 4, 4, 2, 32),
    "float64": (82, 64, 8, 8, 2, 64),
    "bfloat16": (80, 16, 2, 2, 4, 16),
    "float4_e2m1fn": (64, 4, 1, 1, 17, 4),
    "float6_e2m3fn": (65, 6, 1, 1, 15, 6),
    "float6_e3m2fn": (66, 6, 1, 1, 16, 6),
    "float8_e8m0fnu": (73, 8, 1, 1, 14, 8),
    "float8_e4m3fn": (75, 8, 1, 1, 10, 8),
    "float8_e4m3fnuz": (76, 8, 1, 1, 11, 8),
    "float8_e5m2": (77, 8, 1, 1, 12, 8),
    "float8_e5m2fnuz": (78, 8, 1, 1, 13, 8),
}
CODE = {name: row[0] for name, row in EXPECTED_TABLE.items()}
SMALL_FLOATS = [n for n in EXPECTED_TABLE if n.startswith("float") and "_" in n]
FLOATS = ["float16", "bfloat16", "float32", "float64", *SMALL_FLOATS]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _oracle_type(name: str) -> Any:
    return (
        getattr(np, name)
        if name in ("float16", "float32", "float64")
        else (getattr(ml_dtypes, name))
    )


def _kind(name: str) -> int:
    """The mxd_dtype_kind value dtype.h promises for each dtype."""
    if name in ("float16", "float32", "float64"):
        return 3
    for prefix, kind in (
        ("bool", 0),
        ("int", 1),
        ("uint", 2),
        ("bfloat16", 4),
        ("float8", 5),
        ("float6", 6),
        ("float4", 7),
    ):
        if name.startswith(prefix):
            return kind
    raise AssertionError(name)


def _bits_of(name: str) -> int:
    return EXPECTED_TABLE[name][1]


def _container(name: str) -> Any:
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[
        EXPECTED_TABLE[name][2]
    ]


# ---- building and running the C program --------------------------------------


def _native_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    variant = request.param
    exe = tmp_path_factory.mktemp(f"dtype-{variant}") / "dtype_test"
    cmd = [
        cc,
        *FLAGS,
        *VARIANTS[variant],
        f"-I{CORE}",
        str(CORE / "dtype.c"),
        str(CORE / "error.c"),
        str(ROOT / "tests" / "core" / "dtype_test.c"),
        "-o",
        str(exe),
        "-lm",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=_native_env())
    if result.returncode != 0:
        if variant != "plain" and "sanitize" in result.stderr:
            pytest.skip(f"the compiler cannot build with {variant}")
        pytest.fail(f"compiling dtype_test failed:\n{result.stderr}")
    return exe


def _run(exe: Path, mode: str, stdin: str = "") -> str:
    result = subprocess.run(
        [str(exe), mode],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env=_native_env(),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "runtime error" not in result.stderr, result.stderr[-4000:]
    return result.stdout


def _codec(exe: Path, requests: Sequence[str]) -> list[str]:
    out = _run(exe, "codec", "".join(r + "\n" for r in requests)).splitlines()
    assert len(out) == len(requests)
    return out


def _double_hex(x: float) -> str:
    return format(struct.unpack("<Q", struct.pack("<d", x))[0], "x")


def _hex_double(h: str) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0])


def _decode_floats(exe: Path, name: str, patterns: Iterable[int]) -> list[float]:
    answers = _codec(exe, [f"D {CODE[name]} {p:x}" for p in patterns])
    assert all(a.startswith("f ") for a in answers), answers[:3]
    return [_hex_double(a[2:]) for a in answers]


def _encode_floats(exe: Path, name: str, values: Sequence[float]) -> list[int]:
    answers = _codec(exe, [f"F {CODE[name]} {_double_hex(v)}" for v in values])
    return [int(a, 16) for a in answers]


def _same_float(a: float, b: float) -> bool:
    """Equal including the sign of zero and of NaN."""
    if math.isnan(a) or math.isnan(b):
        return (
            math.isnan(a)
            and math.isnan(b)
            and (math.copysign(1, a) == math.copysign(1, b))
        )
    return a == b and math.copysign(1, a) == math.copysign(1, b)


# ---- the oracles --------------------------------------------------------------


def _all_values(name: str) -> Any:
    """ml_dtypes' / NumPy's value of every bit pattern, as float64."""
    patterns = np.arange(2 ** _bits_of(name), dtype=np.uint64)
    values = patterns.astype(_container(name)).view(_oracle_type(name))
    with np.errstate(invalid="ignore"):  # NaNs
        return values.astype(np.float64)


def _round_to_odd_f32(x: Any) -> Any:
    """x (float64) rounded to float32 by truncation with a sticky last bit:
    rounding that once more to a format of at most 22 bits rounds x once."""
    x = np.asarray(x, dtype=np.float64)
    big = np.float64(np.finfo(np.float32).max)
    with np.errstate(over="ignore"):
        f = np.where(np.abs(x) > big, np.copysign(big, x), x).astype(np.float32)
    back = f.astype(np.float64)
    inexact = np.isfinite(x) & (back != x)
    even = (f.view(np.uint32) & 1) == 0
    toward = np.where(back < x, np.float32(np.inf), np.float32(-np.inf))
    with np.errstate(over="ignore"):  # nextafter(FLT_MAX, inf), discarded
        return np.where(inexact & even, np.nextafter(f, toward), f)


def _expected_encode(name: str, values: Sequence[float]) -> list[int]:
    """The element bits of each double, rounded once, by the oracle."""
    x = np.asarray(values, dtype=np.float64)
    if name in ("float16", "float32", "float64"):
        with np.errstate(over="ignore"):
            out = x.astype(getattr(np, name))
    elif name == "bfloat16":
        out = _round_to_odd_f32(x).astype(ml_dtypes.bfloat16)
    else:  # ml_dtypes' scalars of the small formats convert from the double
        t = getattr(ml_dtypes, name)
        out = np.array([t(float(v)) for v in x], dtype=t)
    return [int(b) for b in out.view(_container(name))]


def _encode_samples(name: str, seed: int) -> list[float]:
    values = _all_values(name)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[:-1] + finite[1:]) / 2
    top, gap = finite[-1], finite[-1] - finite[-2]
    tiny = finite[finite > 0][0]
    edges = np.array([top + gap / 2, top + gap, 2 * top, tiny / 2, tiny / 4])
    base = np.concatenate([finite, mids, edges, -edges])
    s = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])
    rng = np.random.default_rng(seed)
    scale = np.ldexp(1.0, rng.integers(-150, 150, 4000))
    rand = rng.standard_normal(4000) * scale
    specials = [
        0.0,
        -0.0,
        math.inf,
        -math.inf,
        math.nan,
        -math.nan,
        5e-324,
        -5e-324,
        1e-300,
        -1e-300,
        1e300,
        -1e300,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        2.0**-127,
        2.0**127,
        1.0,
        -1.0,
    ]
    return [float(v) for v in np.concatenate([s, rand, specials])]


# ---- table and API checks -----------------------------------------------------


def test_api_checks(program: Path) -> None:
    assert "dtype checks passed" in _run(program, "check")


def test_table(program: Path) -> None:
    rows = [line.split() for line in _run(program, "table").splitlines()]
    assert [r[1] for r in rows] == list(EXPECTED_TABLE)  # MAX's member order
    for code, name, kind, bits, size, align, dl_code, dl_bits, padded in rows:
        exp = EXPECTED_TABLE[name]
        got = (int(code), int(bits), int(size), int(align), int(dl_code), int(dl_bits))
        assert got == exp, name
        assert int(padded) == (exp[1] % 8 != 0), name
        assert int(kind) == _kind(name), name


def test_table_matches_max_dtype(program: Path) -> None:
    """The C table and max.dtype.DType say the same about every dtype."""
    from max.dtype import DType

    rows = [line.split() for line in _run(program, "table").splitlines()]
    assert [r[1] for r in rows] == [d.name for d in DType]
    for code, name, _, bits, size, align, dl_code, dl_bits, _ in rows:
        d = DType[name]
        assert (d.value, d.size_in_bits, d.size_in_bytes, d.align) == (
            int(code),
            int(bits),
            int(size),
            int(align),
        )
        assert (d._dlpack_code, d._dlpack_bits) == (int(dl_code), int(dl_bits))


# ---- decoding every bit pattern -------------------------------------------------


@pytest.mark.parametrize("name", ["float16", "bfloat16", *SMALL_FLOATS])
def test_decode_every_pattern(program: Path, name: str) -> None:
    expected = _all_values(name)
    got = _decode_floats(program, name, range(len(expected)))
    bad = [
        (hex(p), g, float(e))
        for p, (g, e) in enumerate(zip(got, expected, strict=True))
        if not _same_float(g, float(e))
    ]
    assert not bad, bad[:10]


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"])
def test_decode_ignores_padding_bits(program: Path, name: str) -> None:
    expected = _all_values(name)
    mask = 2 ** _bits_of(name) - 1
    got = _decode_floats(program, name, range(256))
    for byte, g in enumerate(got):
        assert _same_float(g, float(expected[byte & mask])), hex(byte)


def test_decode_float32_float64(program: Path) -> None:
    rng = np.random.default_rng(1)
    f32 = np.concatenate(
        [
            rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32),
            np.array(
                [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 1, 0x7F7FFFFF],
                dtype=np.uint32,
            ),
        ]
    )
    got = _decode_floats(program, "float32", (int(p) for p in f32))
    with np.errstate(invalid="ignore"):  # NaNs
        expected = f32.view(np.float32).astype(np.float64)
    for g, e in zip(got, expected, strict=True):
        assert _same_float(g, float(e))
    f64 = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    answers = _codec(program, [f"D 82 {int(p):x}" for p in f64])
    assert [int(a[2:], 16) for a in answers] == [int(p) for p in f64]


def test_decode_integers_and_bool(program: Path) -> None:
    rng = np.random.default_rng(2)
    for name in INTS:
        t = getattr(np, name)
        size = np.dtype(t).itemsize
        if size == 1:
            patterns = np.arange(256, dtype=np.uint64)
        else:
            patterns = rng.integers(0, 2 ** (8 * size), 3000, dtype=np.uint64)
            edges = [
                0,
                1,
                2 ** (8 * size) - 1,
                2 ** (8 * size - 1),
                2 ** (8 * size - 1) - 1,
            ]
            patterns = np.concatenate([patterns, np.array(edges, dtype=np.uint64)])
        expected = patterns.astype(_container(name)).view(t)
        prefix = "u" if name.startswith("u") else "i"
        answers = _codec(program, [f"D {CODE[name]} {int(p):x}" for p in patterns])
        assert answers == [f"{prefix} {int(v)}" for v in expected], name
    answers = _codec(program, [f"D 1 {b:x}" for b in range(256)])
    expected_bool = np.arange(256, dtype=np.uint8).view(np.bool_)
    assert answers == [f"b {int(v)}" for v in expected_bool]


# ---- encoding doubles -----------------------------------------------------------


@pytest.mark.parametrize("name", FLOATS)
def test_encode_doubles(program: Path, name: str) -> None:
    if name in ("float32", "float64"):
        samples = _encode_samples("bfloat16", seed=3)
    else:
        samples = _encode_samples(name, seed=3)
    if name == "float8_e8m0fnu":  # where ml_dtypes is wrong: see below
        samples = [v for v in samples if not _e8m0_ml_dtypes_wrong(v)]
    got = _encode_floats(program, name, samples)
    expected = _expected_encode(name, samples)
    if name == "float64":  # NaN payloads are kept as they are
        expected = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in samples]
    bad = [
        (v, hex(g), hex(e))
        for v, g, e in zip(samples, got, expected, strict=True)
        if g != e
    ]
    assert not bad, f"{len(bad)} of {len(samples)} differ: {bad[:10]}"


def test_bfloat16_rounds_once(program: Path) -> None:
    """1 + 2^-8 + 2^-40 is just above the midpoint of 1 and 1 + 2^-7: it
    rounds up.  Through float32 first it would land on the midpoint and
    round down to 1 (as ml_dtypes' own float64 cast does)."""
    x = 1 + 2**-8 + 2**-40
    (bits,) = _encode_floats(program, "bfloat16", [x])
    assert bits == 0x3F81  # 1 + 2^-7
    assert np.array([x]).astype(np.float32)[0] == 1 + 2**-8  # the trap
    # Exactly: x is nearer to 1 + 2^-7 than to 1.
    assert abs(Fraction(x) - Fraction(1 + 2**-7)) < abs(Fraction(x) - 1)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_small_floats_round_once(program: Path, name: str) -> None:
    """A double just above a midpoint whose float32 rounding is the midpoint
    itself rounds away from it, as ml_dtypes' scalar constructor does."""
    values = _all_values(name)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[:-1] + finite[1:]) / 2
    mids = mids[mids > 0]
    just_above = [float(m) * (1 + 2**-40) for m in mids]
    assert [np.float32(v) for v in just_above] == [np.float32(m) for m in mids]
    got = _encode_floats(program, name, just_above)
    assert got == _expected_encode(name, just_above)
    # Each lands on the upper neighbour of its midpoint.
    decoded = _decode_floats(program, name, got)
    assert decoded == [float(finite[finite > m][0]) for m in mids]


def _e8m0_ml_dtypes_wrong(v: float) -> bool:
    """The two ranges where ml_dtypes 0.6's float8_e8m0fnu scalar is wrong."""
    return 2.0**-127 < v < 2.0**-126 or 1.5 * 2.0**128 <= v < 2.0**129


def test_e8m0_overflow(program: Path) -> None:
    """Beyond the largest value, 2^127, every double that rounds up becomes
    NaN.  (ml_dtypes 0.6 wraps [1.5 * 2^128, 2^129) around to 0x00.)"""
    values = [
        2.0**127 * 1.4999,
        2.0**127 * 1.5,
        2.0**128,
        2.0**128 * 1.5,
        2.0**128 * 1.99,
        2.0**129,
        1e300,
    ]
    got = _encode_floats(program, "float8_e8m0fnu", values)
    assert got == [0xFE] + [0xFF] * 6


def test_e8m0_lowest_binade(program: Path) -> None:
    """Between 2^-127 (0x00) and 2^-126 (0x01) the nearer one wins and the
    midpoint rounds up, as everywhere else in the format.  (ml_dtypes gives
    0x01 for this whole open interval, treating it as a subnormal binade.)"""
    lo = 2.0**-127
    values = [lo * k for k in (1.0, 1.01, 1.25, 1.4999, 1.5, 1.75, 1.999)]
    got = _encode_floats(program, "float8_e8m0fnu", values)
    assert got == [0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01]
    # Above it ml_dtypes and we agree on the same rule.
    t = ml_dtypes.float8_e8m0fnu
    assert [int(np.array([t(v * 4)]).view(np.uint8)[0]) for v in values] == [
        0x02,
        0x02,
        0x02,
        0x02,
        0x03,
        0x03,
        0x03,
    ]


def test_encode_special_rules(program: Path) -> None:
    """The per-format rules dtype.h lists, spelled out."""
    inf, nan = math.inf, math.nan
    cases = {
        "float16": [
            (65504.0, 0x7BFF),
            (65519.0, 0x7BFF),
            (65520.0, 0x7C00),
            (-inf, 0xFC00),
            (nan, 0x7E00),
            (-nan, 0xFE00),
            (-0.0, 0x8000),
            (2.0**-25, 0x0000),
            (2.0**-25 * 1.0001, 0x0001),
        ],
        "bfloat16": [
            (nan, 0x7FC0),
            (-0.0, 0x8000),
            (3.4e38, 0x7F80),
            (1e-45, 0x0000),
            (-1e-45, 0x8000),
        ],
        "float8_e4m3fn": [
            (448.0, 0x7E),
            (464.0, 0x7E),
            (464.01, 0x7F),
            (inf, 0x7F),
            (-inf, 0xFF),
            (-nan, 0xFF),
            (-0.0, 0x80),
        ],
        "float8_e4m3fnuz": [
            (240.0, 0x7F),
            (1e9, 0x80),
            (-inf, 0x80),
            (-0.0, 0x00),
            (-1e-9, 0x00),
            (nan, 0x80),
        ],
        "float8_e5m2": [(57344.0, 0x7B), (61440.0, 0x7C), (-inf, 0xFC), (nan, 0x7E)],
        "float8_e5m2fnuz": [(57344.0, 0x7F), (61440.0, 0x80), (-0.0, 0x00)],
        "float8_e8m0fnu": [
            (0.0, 0xFF),
            (-0.0, 0xFF),
            (-1.0, 0xFF),
            (inf, 0xFF),
            (nan, 0xFF),
            (1e-300, 0x00),
            (1.0, 0x7F),
            (1.5, 0x80),
            (3.0, 0x81),
            (2.0**127, 0xFE),
            (2.0**127 * 1.5, 0xFF),
        ],
        "float4_e2m1fn": [
            (6.0, 0x7),
            (1e9, 0x7),
            (-inf, 0xF),
            (nan, 0x8),
            (-nan, 0x0),
            (-0.0, 0x8),
            (0.25, 0x0),
            (0.2500001, 0x1),
        ],
        "float6_e2m3fn": [(7.5, 0x1F), (inf, 0x1F), (-1e9, 0x3F), (nan, 0x20)],
        "float6_e3m2fn": [(28.0, 0x1F), (inf, 0x1F), (-1e9, 0x3F), (-nan, 0x00)],
    }
    for name, pairs in cases.items():
        got = _encode_floats(program, name, [v for v, _ in pairs])
        assert [hex(g) for g in got] == [hex(b) for _, b in pairs], name


# ---- encoding integers and bools --------------------------------------------------


def _int_requests(name: str, values: Iterable[int]) -> list[str]:
    out = []
    for v in values:
        op = "U" if v > 2**63 - 1 else "I"
        out.append(f"{op} {CODE[name]} {v}")
    return out


def _int_range(name: str) -> tuple[int, int]:
    info = np.iinfo(getattr(np, name))
    return int(info.min), int(info.max)


@pytest.mark.parametrize("name", INTS)
def test_encode_integers(program: Path, name: str) -> None:
    lo, hi = _int_range(name)
    rng = random.Random(4)
    values = [
        lo,
        hi,
        lo - 1,
        hi + 1,
        0,
        1,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        2**63,
        *(rng.randint(lo, hi) for _ in range(500)),
        *(rng.randint(-(2**63), 2**64 - 1) for _ in range(200)),
    ]
    # What the C API can be given: an int64 or a uint64.
    values = [v for v in values if -(2**63) <= v < 2**64]
    answers = _codec(program, _int_requests(name, values))
    for v, a in zip(values, answers, strict=True):
        if lo <= v <= hi:
            bits = int(np.array([v], dtype=getattr(np, name)).view(_container(name))[0])
            assert a == format(bits, "x"), (v, a)
        else:
            assert a == f"E 1 integer {v} out of bounds for {name}", (v, a)


@pytest.mark.parametrize("name", INTS)
def test_encode_floats_into_integers(program: Path, name: str) -> None:
    """Truncated toward zero (as NumPy's cast and Python's int()), and then
    it must fit."""
    lo, hi = _int_range(name)
    candidates = [
        0.0,
        -0.0,
        1.7,
        -1.7,
        0.99,
        -0.99,
        100.5,
        -100.5,
        hi * 0.5,
        lo * 0.5,
        float(lo),
        hi + 0.9,
        lo - 0.9,
        hi + 1.0,
        lo - 1.0,
        1e30,
        -1e30,
        2.0**63,
        -(2.0**63),
        2.0**64,
        -(2.0**64),
    ]
    fits = [v for v in candidates if lo <= int(v) <= hi]
    bad = [v for v in candidates if not lo <= int(v) <= hi]
    assert len(fits) >= 8 and len(bad) >= 4
    answers = _codec(program, [f"F {CODE[name]} {_double_hex(v)}" for v in fits])
    size = 8 * EXPECTED_TABLE[name][2]
    assert answers == [format(int(v) % 2**size, "x") for v in fits]
    answers = _codec(program, [f"F {CODE[name]} {_double_hex(v)}" for v in bad])
    assert answers == [f"E 1 value {v:.17g} out of bounds for {name}" for v in bad]
    answers = _codec(
        program,
        [f"F {CODE[name]} {_double_hex(v)}" for v in (math.nan, math.inf, -math.inf)],
    )
    assert answers == [
        "E 1 cannot convert float NaN to integer",
        "E 1 cannot convert float infinity to integer",
        "E 1 cannot convert float infinity to integer",
    ]


def _nearest_e8m0(v: int) -> int:
    """Exactly: the nearer power of two, ties up (v > 0)."""
    p = v.bit_length() - 1
    return p + 1 + 127 if v - 2**p >= 2 ** (p - 1) and p > 0 else p + 127


def _nearest_bf16(v: int) -> int:
    """Exactly: v rounded half to even to 8 significant bits (|v| < 2^64,
    far inside bfloat16's range), as bfloat16 bits."""
    m = abs(v)
    shift = max(m.bit_length() - 8, 0)
    q, r = divmod(m, 2**shift)
    if shift and (r > 2 ** (shift - 1) or (r == 2 ** (shift - 1) and q & 1)):
        q += 1
    value = np.array([math.copysign(q * 2**shift, v)], np.float32)
    return int(value.astype(ml_dtypes.bfloat16).view(np.uint16)[0])


@pytest.mark.parametrize("name", FLOATS)
def test_encode_integers_into_floats(program: Path, name: str) -> None:
    """Rounded once from the integer's exact value (not through a double)."""
    rng = random.Random(5)
    exact = [
        0,
        1,
        -1,
        3,
        7,
        -100,
        255,
        2**24 + 1,
        -(2**31),
        2**31 - 1,
        2**53,
        *(rng.randint(-(2**40), 2**40) for _ in range(300)),
    ]
    wide = [
        2**53 + 1,
        2**60 + 2**36 + 1,
        2**40 + 2**32 + 1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        2**63 + 2**39 + 1,
        2**60 + 2**59 - 1,
        *(rng.randint(-(2**63), 2**64 - 1) for _ in range(300)),
    ]
    answers = _codec(program, _int_requests(name, exact + wide))
    expected = _expected_encode(name, [float(v) for v in exact])
    for v in wide:
        if name == "float64":
            expected.append(struct.unpack("<Q", struct.pack("<d", float(v)))[0])
        elif name in ("float32", "float16"):
            src = np.array([v], dtype=np.uint64 if v > 2**63 - 1 else np.int64)
            with np.errstate(over="ignore"):
                expected.append(
                    int(src.astype(getattr(np, name)).view(_container(name))[0])
                )
        elif name == "bfloat16":
            expected.append(_nearest_bf16(v))
        elif name == "float8_e8m0fnu":
            expected.append(_nearest_e8m0(v) if v > 0 else 0xFF)
        else:  # beyond every other small format's range: its overflow rule
            expected.extend(_expected_encode(name, [float(v)]))
    assert [int(a, 16) for a in answers] == expected


def test_encode_bool(program: Path) -> None:
    for name in EXPECTED_TABLE:
        answers = _codec(program, [f"B {CODE[name]} 1", f"B {CODE[name]} 0"])
        if name == "bool":
            assert answers == ["1", "0"]
            continue
        if name in FLOATS:
            expected = _expected_encode(name, [1.0, 0.0])
        else:
            expected = [1, 0]
        assert answers == [format(b, "x") for b in expected], name


def test_encode_into_bool(program: Path) -> None:
    floats = [0.0, -0.0, 0.5, -2.0, math.nan, math.inf, 5e-324]
    answers = _codec(program, [f"F 1 {_double_hex(v)}" for v in floats])
    assert answers == [str(int(b)) for b in np.array(floats).astype(np.bool_)]
    ints = [0, 1, -1, 2, 2**63 - 1, -(2**63), 2**64 - 1]
    answers = _codec(program, _int_requests("bool", ints))
    assert answers == ["0", "1", "1", "1", "1", "1", "1"]


def test_unknown_codes(program: Path) -> None:
    answers = _codec(program, ["D 0 0", "F 2 0", "I 255 1", "B 83 1"])
    assert answers == [
        "E 1 unknown dtype code 0",
        "E 1 unknown dtype code 2",
        "E 1 unknown dtype code 255",
        "E 1 unknown dtype code 83",
    ]
