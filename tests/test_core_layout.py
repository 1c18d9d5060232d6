"""Runs tests/core/layout_test.c, the C tests of the view math and copy plans
(csrc/core/layout.h), plain and under ASan+UBSan, and drives the same
program with cases compared against Python and NumPy:

- every slice of a 1-D view in a window of starts, stops and steps, for
  several sizes (0 included), against ``range(n)[slice]``;
- random views indexed with random ints and slices, against NumPy;
- random reinterpretations (``view(dtype, shape=None)``), against NumPy's
  ``ndarray.view`` and the rules of layout.h;
- random strided copies (negative steps, permuted axes, overlapping views
  of one memory) and fills, executed on host memory filled with distinct
  byte patterns, against NumPy's assignment.

The program reads one case per line on stdin and writes one result per
line (see its run_* functions)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import numpy as np
except ImportError:  # pragma: no cover - the test extra installs NumPy
    np = None  # type: ignore[assignment]

needs_numpy = pytest.mark.skipif(
    np is None, reason="the NumPy differential tests need numpy (pip install numpy)"
)

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "csrc" / "core"
SOURCES = [CORE / f for f in ("layout.c", "copy_plan.c", "copy_host.c", "error.c")]
PROGRAM = ROOT / "tests" / "core" / "layout_test.c"
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g"]
VARIANTS = {
    "plain": ["-O2"],
    "asan": [
        "-O1",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
    ],
}
# Examples per randomized test and build (each example is one batch of cases).
EXAMPLES = {"plain": 200, "asan": 80}

MXD_INVALID = 1
MXD_OUT_OF_RANGE = 9
BIG = 2**63 - 1


def _native_env() -> dict[str, str]:
    # scripts/sanitize.sh preloads the ASan runtime into Python; the
    # compiler and the C program must not get it.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["ASAN_OPTIONS"] = "detect_leaks=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def program(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    variant = request.param
    exe = tmp_path_factory.mktemp("layout") / f"layout_test_{variant}"
    cmd = [
        cc,
        *FLAGS,
        *VARIANTS[variant],
        f"-I{CORE}",
        *map(str, SOURCES),
        str(PROGRAM),
        "-o",
        str(exe),
        "-pthread",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=_native_env())
    if result.returncode != 0:
        if "-fsanitize" in " ".join(cmd) and "sanitize" in result.stderr:
            pytest.skip(f"the compiler cannot build with {variant}")
        pytest.fail(f"compiling layout_test.c failed:\n{result.stderr}")
    return exe


def _examples(exe: Path) -> int:
    return EXAMPLES["asan" if exe.name.endswith("asan") else "plain"]


def run_cases(exe: Path, mode: str, cases: Sequence[Sequence[int]]) -> list[str]:
    """One result line per case line."""
    stdin = "".join(" ".join(map(str, case)) + "\n" for case in cases)
    result = subprocess.run(
        [str(exe), mode],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=_native_env(),
    )
    assert result.returncode == 0, result.stderr
    assert "runtime error" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(cases), result.stdout
    return lines


def run_hypothesis(exe: Path, strategy: st.SearchStrategy[Any], check: Any) -> None:
    """Runs check(exe, batch) on batches drawn from strategy."""
    test = given(st.lists(strategy, min_size=1, max_size=12))(
        lambda batch: check(exe, batch)
    )
    settings(
        max_examples=_examples(exe),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(test)()


def test_layout_c(program: Path) -> None:
    result = subprocess.run(
        [str(program)], capture_output=True, text=True, timeout=120, env=_native_env()
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "layout tests passed" in result.stdout


# ---- Encoding cases -------------------------------------------------------


def view_tokens(
    element_size: int,
    offset: int,
    memory_size: int,
    shape: Sequence[int],
    strides: Sequence[int],
) -> list[int]:
    return [element_size, offset, memory_size, len(shape), *shape, *strides]


def entry_tokens(entry: int | slice) -> list[int]:
    if isinstance(entry, int):
        return [0, entry]
    tokens = [1]
    for field in (entry.start, entry.stop, entry.step):
        tokens += [0, 0] if field is None else [1, field]
    return tokens


def index_tokens(entries: Sequence[int | slice]) -> list[int]:
    out = [len(entries)]
    for e in entries:
        out += entry_tokens(e)
    return out


def ok_line(offset: int, shape: Sequence[int], strides: Sequence[int]) -> str:
    return " ".join(map(str, ["ok", len(shape), offset, *shape, *strides]))


def parse_view(line: str) -> tuple[int, list[int], list[int]]:
    words = line.split()
    assert words[0] == "ok", line
    rank, offset = int(words[1]), int(words[2])
    nums = list(map(int, words[3:]))
    return offset, nums[:rank], nums[rank:]


# ---- 1-D slices against range() ------------------------------------------


def _window(n: int) -> list[int | None]:
    return [None, *range(-n - 3, n + 4), BIG, -BIG, -(2**63)]


def _slices(n: int) -> Iterator[slice]:
    steps = [None, *range(-5, 0), *range(1, 6), BIG, -BIG, -(2**63)]
    for start in _window(n):
        for stop in _window(n):
            for step in steps:
                yield slice(start, stop, step)


def _expected_1d(n: int, s: slice, stride: int, esize: int) -> str:
    """What a view (n,) with `stride` elements of `esize` bytes at offset
    esize gives for [s], by Python's own slice semantics (and NumPy's rule
    for empty slices: stride and start of the parent)."""
    r = range(n)[s]
    if len(r) == 0:
        return ok_line(esize, [0], [stride])
    new_stride = stride * r.step
    if len(r) == 1 and not -(2**63) <= new_stride * esize < 2**63:
        new_stride = stride  # one element: the stride that fits
    return ok_line(esize + r.start * stride * esize, [len(r)], [new_stride])


@pytest.mark.parametrize("stride", [1, -2])
def test_slices_match_python(program: Path, stride: int) -> None:
    esize = 4
    cases, expected = [], []
    for n in (0, 1, 2, 3, 4, 7):
        # The view starts at its first element, one element into memory
        # that holds all of it (for a negative stride, its last element).
        first = esize + (n - 1) * -stride * esize if stride < 0 and n else esize
        memory = esize + n * abs(stride) * esize + esize
        base = view_tokens(esize, first, memory, [n], [stride])
        for s in _slices(n):
            cases.append(base + index_tokens([s]))
            exp = _expected_1d(n, s, stride, esize)
            if exp.startswith("ok"):
                off, shape, strides = parse_view(exp)
                exp = ok_line(off - esize + first, shape, strides)
            expected.append(exp)
    step0 = view_tokens(esize, esize, 2 * esize, [1], [1]) + index_tokens(
        [slice(None, None, 0)]
    )
    cases.append(step0)
    expected.append(f"err {MXD_INVALID} slice step cannot be zero")
    got = run_cases(program, "index", cases)
    mismatches = [
        (c, e, g) for c, e, g in zip(cases, expected, got, strict=True) if e != g
    ]
    assert not mismatches, mismatches[:5]
    assert len(cases) > 10000


# ---- Random views against NumPy -------------------------------------------


def bounds(n: int) -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(-n - 3, n + 3) | st.sampled_from([BIG, -BIG])


def slices(n: int, zero_step: bool = False) -> st.SearchStrategy[slice]:
    # Small steps only: NumPy's own stride (stride * step) overflows for
    # huge ones; test_slices_match_python covers them.
    nonzero = st.integers(-4, 4).filter(bool)
    step = st.none() | nonzero | (st.just(0) if zero_step else st.nothing())
    return st.builds(slice, bounds(n), bounds(n), step)


def entries(n: int) -> st.SearchStrategy[int | slice]:
    return st.integers(-n - 2, n + 1) | slices(n, zero_step=True)


@st.composite
def parents(draw: st.DrawFn) -> tuple[int, list[int], tuple[slice, ...]]:
    """A buffer (element size, shape) and the slices of it that make a
    (possibly strided, reversed or empty) parent view."""
    esize = draw(st.sampled_from([1, 2, 3, 4, 8]))
    shape = draw(st.lists(st.integers(0, 5), max_size=4))
    return esize, shape, tuple(draw(slices(n)) for n in shape)


def numpy_view(base: Any, view: Any) -> tuple[int, list[int], list[int]]:
    """Byte offset into base, shape and strides in elements of `view`."""
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert all(s % view.itemsize == 0 for s in view.strides)
    return offset, list(view.shape), [s // view.itemsize for s in view.strides]


def make_parent(esize: int, shape: list[int], pre: tuple[slice, ...]) -> Any:
    base = np.zeros(shape, dtype=f"V{esize}")
    return base, base[(*pre, ...)]  # a view even for rank 0


def parent_tokens(base: Any, parent: Any) -> list[int]:
    offset, shape, strides = numpy_view(base, parent)
    return view_tokens(parent.itemsize, offset, base.nbytes, shape, strides)


@st.composite
def index_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    esize, shape, pre = draw(parents())
    pshape = [len(range(n)[s]) for n, s in zip(shape, pre, strict=True)]
    idx = tuple(draw(entries(n)) for n in pshape)
    return esize, shape, pre, idx


def check_index(exe: Path, batch: list[tuple[Any, ...]]) -> None:
    cases, expected = [], []
    for esize, shape, pre, idx in batch:
        base, parent = make_parent(esize, shape, pre)
        cases.append(parent_tokens(base, parent) + index_tokens(idx))
        try:
            # The Ellipsis makes an all-int index a 0-d view, not a scalar.
            expected.append(ok_line(*numpy_view(base, parent[(*idx, ...)])))
        except IndexError as e:
            expected.append(f"err {MXD_OUT_OF_RANGE} {e}")
        except ValueError as e:
            expected.append(f"err {MXD_INVALID} {e}")
    got = run_cases(exe, "index", cases)
    for case, exp, g in zip(batch, expected, got, strict=True):
        assert g == exp, case


@needs_numpy
def test_index_matches_numpy(program: Path) -> None:
    run_hypothesis(program, index_cases(), check_index)


# ---- Reinterpreting against NumPy -----------------------------------------


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """layout.h's rule, in elements."""
    if 0 in shape:
        return True
    if any(s < 0 for s in strides):
        return False
    fresh = contiguous_strides(shape)
    return all(n == 1 or s == f for n, s, f in zip(shape, strides, fresh, strict=True))


@st.composite
def view_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    esize, shape, pre = draw(parents())
    new = draw(st.sampled_from([1, 2, 3, 4, 8]))
    new_shape = draw(st.none() | st.lists(st.integers(0, 6), max_size=3))
    return esize, shape, pre, new, new_shape


def expected_view(base: Any, parent: Any, new: int, new_shape: Any) -> Any:
    """(offset, shape, strides), or MXD_INVALID, by layout.h's rules, with
    NumPy's ndarray.view as the reference for non-contiguous views."""
    offset, shape, strides = numpy_view(base, parent)
    if is_contiguous(shape, strides):
        if new_shape is None:
            if not shape:
                return (offset, [], []) if new == parent.itemsize else MXD_INVALID
            last = shape[-1] * parent.itemsize
            if last % new:
                return MXD_INVALID
            new_shape = [*shape[:-1], last // new]
        room = base.nbytes - offset if 0 <= offset < base.nbytes else 0
        if int(np.prod(new_shape, dtype=np.int64)) * new > room:
            return MXD_INVALID
        return offset, list(new_shape), contiguous_strides(new_shape)
    try:
        derived = parent.view(f"V{new}")
    except ValueError as e:
        if "divisor of the size of original dtype" not in str(e):
            return MXD_INVALID
        # NumPy refuses any smaller size that does not divide the old one;
        # layout.h asks only that the last axis's bytes divide, for strided
        # views as for contiguous ones: the same bytes, as a view.
        try:
            derived = parent.view("V1").view(f"V{new}")
        except ValueError:
            return MXD_INVALID
    if new_shape is not None and list(derived.shape) != new_shape:
        return MXD_INVALID  # a strided view is not reshaped
    dims = list(zip(derived.shape, derived.strides, strict=True))
    if any(n > 1 and s % new for n, s in dims):
        return MXD_INVALID  # strides in elements of the new size
    return offset, list(derived.shape), [s // new for _, s in dims]


def check_view(exe: Path, batch: list[tuple[Any, ...]]) -> None:
    cases, expected = [], []
    for esize, shape, pre, new, new_shape in batch:
        base, parent = make_parent(esize, shape, pre)
        tail = [new, 0] if new_shape is None else [new, 1, len(new_shape), *new_shape]
        cases.append(parent_tokens(base, parent) + tail)
        expected.append(expected_view(base, parent, new, new_shape))
    got = run_cases(exe, "view", cases)
    for case, exp, g in zip(batch, expected, got, strict=True):
        if exp == MXD_INVALID:
            assert g.startswith(f"err {MXD_INVALID} "), (case, g)
            continue
        offset, shape, strides = parse_view(g)
        assert (offset, shape) == (exp[0], exp[1]), (case, g)
        if 0 not in shape:  # an empty view's strides are arbitrary
            big = [i for i, n in enumerate(shape) if n > 1]
            assert [strides[i] for i in big] == [exp[2][i] for i in big], (case, g)


@needs_numpy
def test_view_matches_numpy(program: Path) -> None:
    run_hypothesis(program, view_cases(), check_view)


# ---- Copies and fills against NumPy ---------------------------------------


def src_bytes(n: int) -> Any:
    return ((np.arange(n, dtype=np.int64) * 167 + 13) % 251).astype(np.uint8)


def dst_bytes(n: int) -> Any:
    return (255 - np.arange(n, dtype=np.int64) % 199).astype(np.uint8)


@st.composite
def layouts(draw: st.DrawFn, shape: Sequence[int]) -> tuple[Any, ...]:
    """A base shape, and slices and an axis order that make a view of
    `shape` in it: steps of either sign, gaps, permuted axes."""
    rank = len(shape)
    perm = draw(st.permutations(range(rank)))
    base_shape, cuts = [], []
    for axis in perm:
        n = shape[axis]
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        extra = draw(st.integers(0, 2))
        length = n * abs(step) + extra
        skip = draw(st.integers(0, extra))
        if n == 0:
            cut = slice(0, 0, step)
        elif step > 0:
            cut = slice(skip, skip + n * step, step)
        else:
            first = length - 1 - skip
            stop = first + n * step
            cut = slice(first, stop if stop >= 0 else None, step)
        base_shape.append(length)
        cuts.append(cut)
    order = sorted(range(rank), key=lambda j: perm[j])
    return base_shape, tuple(cuts), order


def make_view(memory: Any, esize: int, layout: tuple[Any, ...]) -> Any:
    """The view of `layout` over the first bytes of memory, as uint8 with a
    last axis for the element's bytes."""
    base_shape, cuts, order = layout
    size = int(np.prod(base_shape, dtype=np.int64)) * esize
    base = memory[:size].reshape(*base_shape, esize)
    return base[(*cuts, slice(None))].transpose(*order, len(order))


def layout_size(esize: int, layout: tuple[Any, ...]) -> int:
    return int(np.prod(layout[0], dtype=np.int64)) * esize


def byte_layout(memory: Any, view: Any) -> tuple[int, list[int]]:
    offset = view.__array_interface__["data"][0] - memory.__array_interface__["data"][0]
    return offset, list(view.strides[:-1])


@st.composite
def copy_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    esize = draw(st.sampled_from([1, 2, 3, 4, 8]))
    shape = draw(st.lists(st.integers(0, 4), max_size=5))
    shared = draw(st.booleans())
    return esize, shape, draw(layouts(shape)), draw(layouts(shape)), shared


def parse_plan(line: str) -> tuple[list[int], bytes]:
    words = line.split()
    assert words[0] == "ok", line
    return list(map(int, words[1:8])), bytes.fromhex(words[8] if len(words) > 8 else "")


def check_plan_summary(
    summary: list[int], nbytes: int, single: bool, fill: bool
) -> None:
    blocks, width, height, src_pitch, dst_pitch, pitched, _outer = summary
    assert blocks * width * height == nbytes
    if blocks == 0:
        return
    if fill:
        assert src_pitch == 0
        assert pitched == (dst_pitch >= width)
    else:
        assert pitched == (src_pitch >= width and dst_pitch >= width)
    if height == 1:
        assert pitched
    if single and nbytes:  # contiguous to contiguous: one memcpy
        assert (blocks, height, width) == (1, 1, nbytes)


def byte_contiguous(view: Any) -> bool:
    shape, strides = view.shape[:-1], view.strides[:-1]
    esize = view.shape[-1]
    return is_contiguous(shape, [s // esize if s % esize == 0 else -1 for s in strides])


def check_copy(exe: Path, batch: list[tuple[Any, ...]]) -> None:
    cases, expected, singles = [], [], []
    for esize, shape, src_layout, dst_layout, shared in batch:
        src_size = layout_size(esize, src_layout)
        dst_size = layout_size(esize, dst_layout)
        if shared:
            memory = src_bytes(max(src_size, dst_size))
            src_mem, dst_mem = memory, memory
        else:
            src_mem, dst_mem = src_bytes(src_size), dst_bytes(dst_size)
        src = make_view(src_mem, esize, src_layout)
        dst = make_view(dst_mem, esize, dst_layout)
        src_off, src_strides = byte_layout(src_mem, src)
        dst_off, dst_strides = byte_layout(dst_mem, dst)
        cases.append(
            [esize, len(shape), *shape, int(shared), src_mem.size, src_off]
            + src_strides
            + [dst_mem.size, dst_off, *dst_strides]
        )
        singles.append(byte_contiguous(src) and byte_contiguous(dst))
        dst[...] = src  # NumPy: as if through a temporary when they overlap
        expected.append(bytes(dst_mem))
    got = run_cases(exe, "copy", cases)
    for case, exp, g, single in zip(batch, expected, got, singles, strict=True):
        summary, result = parse_plan(g)
        assert result == exp, case
        nbytes = int(np.prod(case[1], dtype=np.int64)) * case[0]
        check_plan_summary(summary, nbytes, single, fill=False)


@needs_numpy
def test_copy_matches_numpy(program: Path) -> None:
    run_hypothesis(program, copy_cases(), check_copy)


@st.composite
def fill_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    esize = draw(st.sampled_from([1, 2, 3, 4, 8]))
    shape = draw(st.lists(st.integers(0, 4), max_size=5))
    pattern = draw(st.binary(min_size=esize, max_size=esize))
    return esize, shape, draw(layouts(shape)), pattern


def check_fill(exe: Path, batch: list[tuple[Any, ...]]) -> None:
    cases, expected, singles = [], [], []
    for esize, shape, layout, pattern in batch:
        memory = dst_bytes(layout_size(esize, layout))
        dst = make_view(memory, esize, layout)
        offset, strides = byte_layout(memory, dst)
        cases.append(
            [esize, len(shape), *shape, memory.size, offset, *strides, *pattern]
        )
        singles.append(byte_contiguous(dst))
        dst[...] = np.frombuffer(pattern, dtype=np.uint8)
        expected.append(bytes(memory))
    got = run_cases(exe, "fill", cases)
    for case, exp, g, single in zip(batch, expected, got, singles, strict=True):
        summary, result = parse_plan(g)
        assert result == exp, case
        nbytes = int(np.prod(case[1], dtype=np.int64)) * case[0]
        check_plan_summary(summary, nbytes, single, fill=True)


@needs_numpy
def test_fill_matches_numpy(program: Path) -> None:
    run_hypothesis(program, fill_cases(), check_fill)
