"""MAX 26.7's behaviour where we conform to it (issue 24's decisions, found
by the differential test, tests/test_max_differential.py) and MAX 26.7's
newer surface on the CPU: ``Usage.DEFAULT`` listed, rank-1 iteration, the
element conversions NumPy and MAX share, keyword names, import paths,
``load_max_buffer``, ``_release_buffers_to_borrowed``, the private Buffer
methods, and ``_ChunkedStagingRegion`` / ``SymmetricPool`` refusing the
CPU.  (The accelerator side is tests/accelerator/test_accel_max26.py.)"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from max_named import MAGIC, checkpoint

from max import driver
from max._core.driver import (
    HostHazardCompletion,
    SymmetricPool,
    _batch_inplace_copy,
    _ChunkedStagingRegion,
    _release_buffers_to_borrowed,
)
from max.driver import CPU, Buffer, DeviceQueue, Usage
from max.dtype import DType

# ---- Usage ------------------------------------------------------------------


def test_usage_lists_default_and_reprs_as_it_prints():
    assert len(Usage) == 3
    assert list(Usage) == [Usage.DEFAULT, Usage.STAGING, Usage.UNTRACKED]
    assert repr(Usage.STAGING) == "Usage.STAGING"
    assert repr(Usage.STAGING | Usage.UNTRACKED) == "Usage.STAGING|UNTRACKED"
    assert Usage(0) is Usage.DEFAULT and Usage(3) == Usage.STAGING | Usage.UNTRACKED
    assert pickle.loads(pickle.dumps(Usage.UNTRACKED)) is Usage.UNTRACKED
    assert Usage.__module__ == "max._core.driver"


@pytest.mark.parametrize("value", [-1, -3, 4, 8, "STAGING"])
def test_usage_refuses_what_is_no_usage(value):
    # The same words on every CPython (3.10's Flag raised TypeError for a str).
    with pytest.raises(ValueError, match=f"^{value!r} is not a valid Usage$"):
        Usage(value)


# ---- iteration --------------------------------------------------------------


def test_a_rank1_buffer_iterates_element_views():
    buf = Buffer.from_numpy(np.arange(3, dtype=np.int32))
    views = list(buf)
    assert [v.shape for v in views] == [(), (), ()]
    assert [v.item() for v in views] == [0, 1, 2]
    views[1][()] = 9  # views, not copies
    assert buf[1].item() == 9
    assert list(Buffer(DType.int8, (0,))) == []


@pytest.mark.parametrize("shape", [(), (2, 2), (1, 1, 1)])
def test_other_ranks_do_not_iterate(shape):
    with pytest.raises(ValueError, match="rank-1"):
        list(Buffer(DType.int8, shape))
    with pytest.raises(TypeError):
        len(Buffer(DType.int8, shape))


def test_a_buffer_is_never_an_index_or_a_list_of_buffers():
    buf = Buffer.from_numpy(np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError):
        buf[buf]
    with pytest.raises(TypeError, match="sequence of Buffers"):
        driver.batch_inplace_copy(buf, buf)
    with pytest.raises(TypeError, match="sequence of Buffers"):
        driver.copy_pinned_to_destinations(buf, buf)
    with pytest.raises(TypeError, match="sequence of Buffers"):
        _release_buffers_to_borrowed(buf)


# ---- element conversions ----------------------------------------------------


@pytest.mark.parametrize(
    "dtype, value, expected",
    [
        (DType.float32, 2**64, 1.8446744073709552e19),
        (DType.float64, -(2**70), -1.1805916207174113e21),
        (DType.bfloat16, 2**64, 1.8446744073709552e19),
        (DType.int32, np.array(1.5), 1),
        (DType.float32, np.array(1.5), 1.5),
        (DType.int64, np.array(-7), -7),
        (DType.bool, 2**64, True),
    ],
)
def test_values_stored_as_numpy_and_max_store_them(dtype, value, expected):
    buf = Buffer(dtype, (1,))
    buf[0] = value
    assert buf.item() == expected


def test_an_integer_dtype_refuses_a_wider_integer():
    buf = Buffer(DType.int64, (1,))
    with pytest.raises(OverflowError):
        buf[0] = 2**64
    with pytest.raises(OverflowError):
        Buffer(DType.float64, (1,))[0] = 10**400
    with pytest.raises(TypeError):
        buf[0] = np.array([1, 2])


@pytest.mark.parametrize(
    "key", [slice(1), (slice(None, None, 0), 0), [0, slice(1)], (0, slice(1))]
)
def test_a_slice_in_an_assignment_is_a_type_error(key):
    with pytest.raises(TypeError, match="slices are not supported"):
        Buffer(DType.int8, (2, 2))[key] = 1


def test_an_import_ignores_the_strides_of_size_1_dimensions():
    """np.arange(4).reshape(1, 1, 4)[::-1] is C-contiguous for NumPy (and
    MAX 26.7), with a negative stride in its first dimension."""
    arr = np.arange(4).reshape(1, 1, 4)[::-1]
    assert arr.flags.c_contiguous and arr.strides[0] < 0
    buf = Buffer.from_dlpack(arr)
    assert buf.is_contiguous and buf.strides == (4, 4, 1)
    assert buf.to_numpy().tolist() == arr.tolist()
    assert np.shares_memory(buf.to_numpy(), arr)


# ---- keyword names ----------------------------------------------------------


def test_max_s_keyword_names():
    assert driver.devices_exist(devices=[driver.DeviceSpec.cpu()])
    q = DeviceQueue(CPU())
    poisoned = HostHazardCompletion.poisoned(queue=q, error="producer failed")
    with pytest.raises(driver.HostHazardError, match="producer failed"):
        poisoned.wait()
    done = HostHazardCompletion.record_on(queue=q)
    done.poison(message="late")
    buf = Buffer.from_numpy(np.arange(3, dtype=np.int32))
    buf._stamp_write(completion=HostHazardCompletion.record_on(q))
    buf._stamp_read(completion=HostHazardCompletion.record_on(q))
    assert buf.__getitem__(idx=2).item() == 2
    buf.__setitem__(idx=0, value=5)
    assert buf[0].item() == 5


# ---- import paths and private methods ---------------------------------------


def test_max_s_module_paths():
    import max.driver.buffer
    import max.dtype.dtype

    assert max.driver.buffer.Buffer is Buffer
    assert max.driver.buffer.load_max_buffer is driver.load_max_buffer
    assert max.dtype.dtype.DType is DType
    assert "load_max_buffer" in driver.__all__
    assert driver._ChunkedStagingRegion is _ChunkedStagingRegion


def test_max_s_private_buffer_methods():
    buf = Buffer.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3))
    assert list(buf._iterate_indices()) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    assert list(Buffer(DType.int8, ())._iterate_indices()) == [()]
    assert buf._view(DType.int8, (12,)).shape == (12,)
    dst = Buffer(DType.int16, (6,))
    dst._inplace_copy_from(buf.view(DType.int16, (6,)))
    assert dst.to_numpy().tolist() == list(range(6))
    again = Buffer(DType.int16, (6,))
    _batch_inplace_copy([again], [dst])
    assert again.to_numpy().tolist() == list(range(6))


# ---- _release_buffers_to_borrowed -------------------------------------------


def test_borrowed_handles_share_views_and_records():
    q = DeviceQueue(CPU())
    buf = Buffer(DType.float32, (2, 3), q)
    view = buf[:, 1:]
    handles = _release_buffers_to_borrowed([buf, view])
    assert [h.shape for h in handles] == [(2, 3), (2, 2)]
    assert [h.strides for h in handles] == [(3, 1), (3, 1)]
    assert all(h.stream is q for h in handles)
    assert handles[1]._data_ptr() == view._data_ptr()
    handles[0][1, 2] = 4.5
    assert buf[1, 2].item() == 4.5
    del buf, view
    assert handles[1][1, 1].item() == 4.5  # the memory stays
    assert _release_buffers_to_borrowed([]) == []
    assert _release_buffers_to_borrowed(buffers=(handles[0],))[0].shape == (2, 3)


@pytest.mark.parametrize("bad", [[1], [None], 3, "ab"])
def test_borrowed_handles_of_what_is_no_buffer(bad):
    with pytest.raises(TypeError):
        _release_buffers_to_borrowed(bad)


# ---- load_max_buffer --------------------------------------------------------


def _write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "weights.max"
    path.write_bytes(bytes.fromhex(spec["file"]))
    return path


@pytest.mark.parametrize(
    "dtype, shape, data, expected",
    [
        (DType.float32, [2, 3], struct.pack("<6f", *range(6)), [[0, 1, 2], [3, 4, 5]]),
        (DType.int32, [4], struct.pack("<4i", -1, 2, -3, 4), [-1, 2, -3, 4]),
        (DType.uint8, [], b"\x07", 7),
        (DType.bfloat16, [2], bytes.fromhex("c03f0040"), [1.5, 2.0]),
        (DType.bfloat16, [], bytes.fromhex("c03f"), 1.5),
        (DType.float8_e4m3fn, [3], bytes([0x38, 0x40, 0xC0]), [1.0, 2.0, -2.0]),
        (DType.float4_e2m1fn, [2], bytes([0x02, 0x0A]), [1.0, -1.0]),
    ],
    ids=lambda x: str(x) if isinstance(x, DType) else None,
)
def test_load_max_buffer_reads_max_s_checkpoint_format(
    tmp_path, dtype, shape, data, expected
):
    path = _write(tmp_path, checkpoint(dtype.value, shape, data))
    buf = driver.load_max_buffer(path)
    assert buf.dtype is dtype and buf.shape == tuple(shape)
    assert buf.device == CPU() and buf.is_contiguous
    assert np.asarray(_decoded(buf)).tolist() == expected
    assert driver.load_max_buffer(str(path)).dtype is dtype  # a str path too


def _decoded(buf: Buffer) -> object:
    """The values, element by element (as item() decodes every dtype)."""
    if buf.rank == 0:
        return buf.item()
    rest = (slice(None),) * (buf.rank - 1)
    return [_decoded(buf[(i, *rest)]) for i in range(buf.shape[0])]


def test_load_max_buffer_returns_a_copy(tmp_path):
    path = _write(
        tmp_path, checkpoint(DType.int32.value, [2], struct.pack("<2i", 1, 2))
    )
    buf = driver.load_max_buffer(path)
    buf[0] = 9
    assert driver.load_max_buffer(path)[0].item() == 1


@pytest.mark.parametrize(
    "spec, match",
    [
        (checkpoint(81, [2], b"\0" * 8, magic=b"NOTAMAX!"), "not a max checkpoint"),
        (checkpoint(81, [2], b"\0" * 8, major=1), "version > 0"),
        (checkpoint(81, [2], b"\0" * 8, extra=9), "Multiple buffers"),
        (checkpoint(99, [2], b"\0" * 8), "DType"),
        (checkpoint(81, [2], b"", cut=12), "truncated"),
        (checkpoint(81, [2], b"", cut=len(MAGIC) + 8 + 8 + 4 + 3), "truncated"),
        ({"file": ""}, "not a max checkpoint"),
    ],
)
def test_load_max_buffer_refuses_other_files(tmp_path, spec, match):
    with pytest.raises(ValueError, match=match):
        driver.load_max_buffer(_write(tmp_path, spec))


def test_load_max_buffer_of_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        driver.load_max_buffer(tmp_path / "none.max")


def test_load_max_buffer_takes_no_file_descriptor(tmp_path):
    """open() would take an int as a descriptor and close it (MAX's does:
    load_max_buffer(1) closed the argument fuzzer's stdout)."""
    path = _write(tmp_path, checkpoint(DType.int8.value, [1], b"\x07"))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(TypeError, match="path must be a str, bytes or"):
            driver.load_max_buffer(fd)  # type: ignore[arg-type]
        os.fstat(fd)  # still open
    finally:
        os.close(fd)
    assert driver.load_max_buffer(os.fsencode(path))[0].item() == 7  # bytes


# ---- _ChunkedStagingRegion and SymmetricPool on the CPU ---------------------


def test_a_staging_region_is_for_accelerators():
    with pytest.raises(ValueError, match="accelerator"):
        _ChunkedStagingRegion(4096, 64, CPU())
    with pytest.raises(TypeError, match="device"):
        _ChunkedStagingRegion(4096, 64, "cpu")
    with pytest.raises(TypeError):
        _ChunkedStagingRegion(4096, 64)


def test_the_cpu_has_no_symmetric_pool():
    cpu = CPU()
    assert not SymmetricPool.is_supported([cpu])
    assert not SymmetricPool.is_supported([])
    assert SymmetricPool.lookup([cpu, cpu]) is None
    with pytest.raises(RuntimeError, match="multicast"):
        SymmetricPool.allocate([cpu, cpu], 1024)
    with pytest.raises(RuntimeError, match="at least two"):
        SymmetricPool.allocate([cpu], 1024)
    with pytest.raises(TypeError, match="cannot be created"):
        SymmetricPool()
    with pytest.raises(TypeError):
        SymmetricPool.lookup([1])
    with pytest.raises(TypeError):
        SymmetricPool.is_supported(cpu)
