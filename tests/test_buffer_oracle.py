"""Buffer against NumPy as the oracle (SPEC §12.3 - §12.6), on the CPU.

Hypothesis draws dtypes, shapes, index sequences (ints, slices with any
sign of step, bounds past the ends) and element writes.  A buffer made with
``Buffer.from_numpy`` of a fresh C-contiguous array aliases that array, so
each view ``buf[i1][i2]...`` is checked against ``arr[i1][i2]...``: shape,
strides (in elements), the address of its first element, its values after
``to_numpy()``, ``is_contiguous`` against the SPEC's rule (not NumPy's
flags, which call negative-step views of one element contiguous), and
writes through the view.  Strides and addresses of views without elements
are left open by the SPEC and not compared, and neither are the strides of
shapes with a zero dimension (NumPy 2 gives them all-zero strides).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from buffer_support import (
    ELEMENT_SIZE,
    NUMPY_DTYPES,
    NUMPY_OF,
    bf16_bits,
    contiguous_strides,
    is_bf16_nan,
    np_strides,
    sample_array,
    spec_is_contiguous,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from max.driver import Buffer
from max.dtype import DType

SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

dtypes = st.sampled_from(NUMPY_DTYPES)
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
nonempty_shapes = st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple)


@st.composite
def entry(draw, size: int):
    """One index entry for a dimension of ``size``: an in-range int (either
    sign) or a slice with bounds that may lie past either end."""
    if size > 0 and draw(st.booleans()):
        return draw(st.integers(-size, size - 1))
    bound = st.none() | st.integers(-size - 3, size + 3)
    step = st.none() | st.integers(-3, 3).filter(bool)
    return slice(draw(bound), draw(bound), draw(step))


@st.composite
def index_for(draw, shape):
    return tuple(draw(entry(n)) for n in shape)


def np_index(arr: np.ndarray, idx: tuple) -> np.ndarray:
    """``arr[idx]`` as a view, also when every entry is an int (NumPy would
    give a scalar; ``...`` keeps a 0-d view)."""
    return arr[idx + (Ellipsis,)]


def check_view(view: Buffer, expected: np.ndarray, base_has_zero: bool) -> None:
    assert view.shape == expected.shape
    assert view.rank == expected.ndim
    assert view.num_elements == expected.size
    assert len(view.strides) == expected.ndim
    got = view.to_numpy()
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)
    if expected.size == 0:
        return
    if not base_has_zero:
        assert view.strides == np_strides(expected)
    assert view._data_ptr() == expected.ctypes.data
    assert got.ctypes.data == expected.ctypes.data  # to_numpy is an alias
    assert view.is_contiguous is spec_is_contiguous(view.shape, view.strides)


# --------------------------------------------------------------------------
# Fresh buffers


@settings(max_examples=150, **SETTINGS)
@given(dtype=st.sampled_from(list(DType)), shape=shapes)
def test_fresh_buffer_properties(dtype, shape):
    buf = Buffer(dtype, shape)
    assert buf.shape == shape
    assert buf.rank == len(shape)
    assert buf.num_elements == math.prod(shape)
    assert buf.element_size == ELEMENT_SIZE[dtype]
    assert buf.is_contiguous
    assert len(buf.strides) == len(shape)
    if 0 not in shape:
        assert buf.strides == contiguous_strides(shape)
        if dtype in NUMPY_OF:
            assert buf.strides == np_strides(np.empty(shape, NUMPY_OF[dtype]))


@settings(max_examples=100, **SETTINGS)
@given(dtype=dtypes, shape=shapes)
def test_zeros_match_numpy(dtype, shape):
    assert np.array_equal(
        Buffer.zeros(shape, dtype).to_numpy(), np.zeros(shape, NUMPY_OF[dtype])
    )


@settings(max_examples=100, **SETTINGS)
@given(dtype=dtypes, shape=shapes)
def test_from_numpy_round_trip(dtype, shape):
    arr = sample_array(dtype, shape)
    buf = Buffer.from_numpy(arr)
    assert buf.dtype is dtype
    assert buf.shape == arr.shape
    assert np.array_equal(buf.to_numpy(), arr)
    assert np.array_equal(buf.copy().to_numpy(), arr)


# --------------------------------------------------------------------------
# Views


@settings(max_examples=300, **SETTINGS)
@given(data=st.data(), dtype=dtypes, shape=shapes)
def test_index_sequences_match_numpy(data, dtype, shape):
    arr = sample_array(dtype, shape)
    buf = Buffer.from_numpy(arr)
    view, expected = buf, arr
    for _ in range(data.draw(st.integers(1, 3))):
        idx = data.draw(index_for(expected.shape))
        view, expected = view[idx], np_index(expected, idx)
        check_view(view, expected, 0 in shape)


@settings(max_examples=200, **SETTINGS)
@given(data=st.data(), dtype=dtypes, shape=nonempty_shapes)
def test_writes_through_views_match_numpy(data, dtype, shape):
    """``view[i, ...] = v`` writes the element NumPy's view would."""
    arr = sample_array(dtype, shape)
    ref = arr.copy()
    buf = Buffer.from_numpy(arr)
    idx = data.draw(index_for(shape))
    view, ref_view = buf[idx], np_index(ref, idx)
    assume(ref_view.size > 0)
    for _ in range(data.draw(st.integers(1, 4))):
        where = tuple(data.draw(st.integers(-n, n - 1)) for n in ref_view.shape)
        value = data.draw(st.integers(0, 100))
        if dtype is DType.bool:
            value = bool(value % 2)
        view[where] = value
        ref_view[where] = value
        assert view[where].item() == ref_view[where].item()
    assert np.array_equal(arr, ref)


@settings(max_examples=200, **SETTINGS)
@given(data=st.data(), dtype=dtypes, shape=shapes)
def test_copy_and_contiguous_of_views_match_numpy(data, dtype, shape):
    arr = sample_array(dtype, shape)
    buf = Buffer.from_numpy(arr)
    idx = data.draw(index_for(shape))
    view, expected = buf[idx], np_index(arr, idx)
    for made in (view.copy(), view.contiguous()):
        assert made.shape == expected.shape
        assert made.is_contiguous
        assert np.array_equal(made.to_numpy(), expected)
        if 0 not in expected.shape:
            assert made.strides == contiguous_strides(expected.shape)
        made.to_numpy()[...] = 0  # never an alias
    assert np.array_equal(arr, sample_array(dtype, shape))


@settings(max_examples=200, **SETTINGS)
@given(data=st.data(), dtype=dtypes, shape=nonempty_shapes)
def test_inplace_copy_from_follows_the_contiguity_rule(data, dtype, shape):
    """A view is a valid copy source exactly when the SPEC's rule calls it
    contiguous; the copy is row-major."""
    arr = sample_array(dtype, shape)
    buf = Buffer.from_numpy(arr)
    idx = data.draw(index_for(shape))
    view, expected = buf[idx], np_index(arr, idx)
    assume(expected.size > 0)
    dst = Buffer.zeros((expected.size,), dtype)
    if spec_is_contiguous(view.shape, view.strides):
        dst.inplace_copy_from(view)
        assert np.array_equal(dst.to_numpy(), expected.ravel())
        back = Buffer.zeros(expected.shape, dtype)
        view.inplace_copy_from(back)  # and a valid destination
        view.stream.synchronize(timeout=20)  # CPU copies run on the queue
        assert not expected.any()
    else:
        with pytest.raises(ValueError):
            dst.inplace_copy_from(view)
        with pytest.raises(ValueError):
            view.inplace_copy_from(dst.view(dtype, expected.shape))


@settings(max_examples=150, **SETTINGS)
@given(data=st.data(), src=dtypes, dst=dtypes, shape=nonempty_shapes)
def test_view_dtype_matches_numpy(data, src, dst, shape):
    """``view(dtype)`` rescales the last dimension as ``ndarray.view``."""
    assume(len(shape) > 0)
    arr = sample_array(src, shape)
    buf = Buffer.from_numpy(arr)
    row_bytes = shape[-1] * ELEMENT_SIZE[src]
    if row_bytes % ELEMENT_SIZE[dst]:
        with pytest.raises(ValueError):
            buf.view(dst)
        return
    view = buf.view(dst)
    expected = arr.view(NUMPY_OF[dst])
    assert view.dtype is dst
    assert view.shape == expected.shape
    assert view._data_ptr() == buf._data_ptr()
    got = view.to_numpy()
    assert got.tobytes() == expected.tobytes()
    flat = buf.view(dst, (arr.nbytes // ELEMENT_SIZE[dst],))
    assert flat.to_numpy().tobytes() == arr.tobytes()


# --------------------------------------------------------------------------
# Errors


@settings(max_examples=100, **SETTINGS)
@given(data=st.data(), shape=nonempty_shapes.filter(len))
def test_out_of_range_ints_index_error(data, shape):
    buf = Buffer(DType.int8, shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    bad = data.draw(st.integers(n, n + 2**40) | st.integers(-(2**40), -n - 1))
    idx = tuple(bad if i == axis else 0 for i in range(len(shape)))
    with pytest.raises(IndexError):
        buf[idx]
    with pytest.raises(IndexError):
        buf[idx] = 1


@settings(max_examples=100, **SETTINGS)
@given(data=st.data(), shape=shapes.filter(len))
def test_wrong_entry_counts_value_error(data, shape):
    buf = Buffer(DType.int8, shape)
    count = data.draw(st.integers(0, len(shape) + 2).filter(lambda c: c != len(shape)))
    with pytest.raises(ValueError):
        buf[(slice(None),) * count]


# --------------------------------------------------------------------------
# Element conversions


@settings(max_examples=300, **SETTINGS)
@given(value=st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_bfloat16_writes_round_to_nearest_even(value):
    """SPEC §12.5 (MAX truncates instead): float32-representable values, so
    the double's first rounding to float32 is exact."""
    buf = Buffer(DType.bfloat16, (1,))
    buf[0] = value
    bits = buf.view(DType.uint16).item()
    if math.isnan(value):
        assert is_bf16_nan(bits), hex(bits)
        assert math.isnan(buf.item())
    else:
        assert bits == bf16_bits(value), (value, hex(bits))


@settings(max_examples=200, **SETTINGS)
@given(
    dtype=st.sampled_from([d for d in NUMPY_DTYPES if d is not DType.bool]),
    data=st.data(),
)
def test_scalar_writes_match_numpy(dtype, data):
    """Values exactly representable in the dtype read back unchanged, from
    Python and NumPy scalars alike."""
    np_dtype = NUMPY_OF[dtype]
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        value = data.draw(st.integers(int(info.min), int(info.max)))
        kind = int
    else:
        width = {2: 16, 4: 32, 8: 64}[np_dtype.itemsize]
        value = data.draw(st.floats(width=width, allow_nan=False))
        kind = float
    buf = Buffer(dtype, ())
    for written in (value, np_dtype.type(value)):
        buf[()] = written
        got = buf.item()
        assert type(got) is kind
        assert got == value
        assert buf.to_numpy()[()] == np_dtype.type(value)
