"""JAX on the CPU as a second, independent DLPack producer and consumer
(SPEC §13), next to NumPy (test_dlpack.py).

What JAX (jaxlib 0.4 to 0.10) does, which these tests pin:

- As a consumer (``jax.dlpack.from_dlpack``, ``jnp.from_dlpack``) it calls
  ``__dlpack__(stream=None)`` only: it never passes ``max_version``, so it
  gets the legacy ``"dltensor"`` capsule, and types the legacy ABI cannot
  name (float8, float6, float4) cannot reach it (BufferError).  It aliases
  our memory when it is 64-byte aligned (fresh buffers always are, and
  row slices that start on 64 bytes) and copies otherwise; strided views
  other than transpositions it refuses itself.
- As a producer its ``__dlpack__`` ignores ``max_version`` and returns a
  legacy capsule, so it cannot flag its arrays read-only.  JAX arrays are
  immutable, but by SPEC §13 only a *flagged* read-only capsule is copied:
  ``Buffer.from_dlpack(jax_array)`` is a writable zero-copy alias, and
  writing through it changes the JAX array.  Do not write to such buffers
  (copy first: ``Buffer.from_dlpack(jax_array).copy()``).
- ``copy=`` is refused for JAX arrays as for every producer that is
  neither a NumPy array nor a Buffer (ValueError, as MAX).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from buffer_support import sample_array
from dlpack_support import LEGACY, capsule_name

from max.driver import Buffer
from max.dtype import DType

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

# Types JAX holds as they are (64-bit ones it narrows unless x64 is on).
JAX_DTYPES = [
    DType.bool,
    DType.int8,
    DType.int16,
    DType.int32,
    DType.uint8,
    DType.uint16,
    DType.uint32,
    DType.float16,
    DType.float32,
    DType.bfloat16,
]


def jax_dtype(dtype: DType):
    return jnp.dtype(dtype.name if dtype is not DType.bool else "bool")


def filled(dtype: DType, shape):
    """A buffer holding sample values, and them as a NumPy array."""
    buf = Buffer(dtype, shape)
    ref = sample_array(DType.int8, shape).astype(jax_dtype(dtype))
    if dtype is DType.bool:
        ref = ref.astype(bool)
    buf.to_numpy()[...] = ref
    return buf, ref


class Recording:
    """Forwards the DLPack protocol to ``target``, recording the calls."""

    def __init__(self, target):
        self.target, self.calls = target, []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.target.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.target.__dlpack_device__()


# --------------------------------------------------------------------------
# JAX consumes our buffers


@pytest.mark.parametrize("dtype", JAX_DTYPES, ids=str)
@pytest.mark.parametrize("consume", ["jax.dlpack", "jnp"])
def test_jax_consumes_a_buffer_zero_copy(dtype, consume):
    buf, ref = filled(dtype, (4, 16))
    fn = jax.dlpack.from_dlpack if consume == "jax.dlpack" else jnp.from_dlpack
    arr = fn(buf)
    assert arr.dtype == jax_dtype(dtype) and arr.shape == (4, 16)
    assert np.array_equal(np.asarray(arr), ref)
    assert arr.unsafe_buffer_pointer() == buf._data_ptr()


def test_jax_asks_for_a_legacy_capsule_without_a_stream():
    buf, _ = filled(DType.float32, (8,))
    rec = Recording(buf)
    jnp.from_dlpack(rec)
    assert rec.calls == [{"stream": None}]
    assert capsule_name(buf.__dlpack__(stream=None)) == LEGACY


def test_jax_sees_the_memory_we_write():
    buf, ref = filled(DType.int32, (16,))
    arr = jnp.from_dlpack(buf)
    buf[3] = -1  # the alias is plain memory (SPEC §12.6)
    assert int(arr[3]) == -1


def test_jax_keeps_our_memory_after_the_buffer_is_gone():
    buf, ref = filled(DType.int32, (1024,))
    arr = jnp.from_dlpack(buf)
    del buf
    gc.collect()
    others = [Buffer.zeros((1024,), DType.int32) for _ in range(8)]
    assert np.array_equal(np.asarray(arr), ref)
    del others


def test_jax_aliases_aligned_row_slices_and_copies_others():
    buf, ref = filled(DType.float32, (4, 16))  # rows of 64 bytes
    rows = buf[1:3, :]
    arr = jnp.from_dlpack(rows)
    assert arr.unsafe_buffer_pointer() == rows._data_ptr()
    assert np.array_equal(np.asarray(arr), ref[1:3])
    shifted = Buffer.zeros((17,), DType.float32)[1:]  # 4 bytes past 64
    copied = jnp.from_dlpack(shifted)
    assert copied.unsafe_buffer_pointer() != shifted._data_ptr()
    assert np.array_equal(np.asarray(copied), np.zeros(16, np.float32))


@pytest.mark.parametrize("dtype", [DType.float8_e4m3fn, DType.float8_e5m2], ids=str)
def test_jax_cannot_take_float8_through_the_legacy_capsule(dtype):
    with pytest.raises(BufferError):
        jnp.from_dlpack(Buffer.zeros((4,), dtype))


# --------------------------------------------------------------------------
# We consume JAX arrays


@pytest.mark.parametrize(
    "dtype", [*JAX_DTYPES, DType.float8_e4m3fn, DType.float8_e5m2], ids=str
)
def test_buffer_from_jax_is_zero_copy(dtype):
    arr = jnp.ones((3, 5), jax_dtype(dtype))
    buf = Buffer.from_dlpack(arr)
    assert buf.dtype is dtype and buf.shape == (3, 5)
    assert buf._data_ptr() == arr.unsafe_buffer_pointer()
    if dtype in JAX_DTYPES:
        assert np.array_equal(buf.to_numpy(), np.asarray(arr))


def test_buffer_from_jax_shapes():
    assert Buffer.from_dlpack(jnp.asarray(5.0, jnp.float32)).item() == 5.0
    assert Buffer.from_dlpack(jnp.zeros((0, 3))).shape == (0, 3)
    # JAX materialises transposes: the result is C-contiguous.
    t = Buffer.from_dlpack(jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4).T)
    assert t.shape == (4, 3) and t.is_contiguous
    assert np.array_equal(t.to_numpy(), np.arange(12.0).reshape(3, 4).T)


def test_buffer_from_jax_is_writable_since_jax_cannot_say_read_only():
    arr = jnp.zeros((4,), jnp.float32)
    buf = Buffer.from_dlpack(arr)
    buf[0] = 9.0
    assert float(arr[0]) == 9.0  # the "immutable" JAX array changed


@pytest.mark.parametrize("copy", [True, False])
def test_copy_is_refused_for_jax_arrays(copy):
    with pytest.raises(ValueError):
        Buffer.from_dlpack(jnp.zeros((4,), jnp.float32), copy=copy)


def test_buffer_from_jax_keeps_the_memory_alive():
    arr = jnp.arange(1024, dtype=jnp.int32)
    buf = Buffer.from_dlpack(arr)
    del arr
    gc.collect()
    others = [jnp.zeros((1024,), jnp.int32) + i for i in range(8)]
    assert np.array_equal(buf.to_numpy(), np.arange(1024, dtype=np.int32))
    del others


def test_round_trip_buffer_jax_buffer():
    buf, ref = filled(DType.float32, (2, 16))
    back = Buffer.from_dlpack(jnp.from_dlpack(buf))
    assert back._data_ptr() == buf._data_ptr()
    assert np.array_equal(back.to_numpy(), ref)
