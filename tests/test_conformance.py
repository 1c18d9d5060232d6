"""The parts of MAX's public surface that MAX code meets first
(issue 17): ``max.driver.__version__``, the ``Buffer(array, device)``
constructor, MAX's keyword names (``from_numpy(arr=)``,
``from_dlpack(array=, *, copy=)``, ``to(device=|stream=|devices=|streams=)``),
``Buffer.mmap(..., shape=int)``, sequence keys (``buf[[0, 1]]``) and the
error texts MAX code matches on.  max.dtype's additions are in
test_dtype.py, virtual device mode in test_virtual_devices.py."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from dlpack_support import Holder

import max._core
import max.driver
from max.driver import CPU, Buffer, DevicePinnedBuffer, DeviceQueue
from max.dtype import DType

REPO_ROOT = Path(__file__).resolve().parent.parent


# ---- __version__ -----------------------------------------------------------


def test_version_is_max_core_s() -> None:
    version = max.driver.__version__
    assert version is max._core.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)*", version), version
    assert "__version__" not in max.driver.__all__  # as MAX


def test_version_is_the_distribution_s() -> None:
    """pyproject.toml reads the version from max._core (one place)."""
    text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dynamic = \["version"\]$', text, re.M)
    assert re.search(r'^version = \{ attr = "max\._core\.__version__" \}$', text, re.M)


# ---- Buffer(array, device) -------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([True, False, True]),
        np.arange(-4, 4, dtype=np.int8),
        np.linspace(0, 1, 5).astype(np.float16),
        np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16),
        np.array(7, dtype=np.int64),  # rank 0
        np.zeros((2, 0), dtype=np.uint16),  # empty
    ],
    ids=lambda a: f"{a.dtype}{a.shape}",
)
def test_buffer_of_an_array_is_a_copy_on_the_device(array: np.ndarray) -> None:
    cpu = CPU()
    buf = Buffer(array, cpu)
    assert type(buf) is Buffer and buf.device is cpu
    assert buf.stream is cpu.default_queue
    assert buf.shape == array.shape and buf.dtype is DType.from_numpy(array.dtype)
    assert buf.is_contiguous
    back = buf.to_numpy()
    assert back.dtype == array.dtype and np.array_equal(back, array)
    if array.size:
        assert buf._data_ptr() != array.ctypes.data  # never an alias
        before = array.copy()
        array[...] = 0  # the array was read: the buffer keeps its values
        assert np.array_equal(buf.to_numpy(), before)


def test_buffer_of_strided_and_read_only_arrays() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    for array in (base.T, base[:, ::2], base[::-1]):
        buf = Buffer(array, CPU())
        assert buf.is_contiguous and buf.to_numpy().tolist() == array.tolist()
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    buf = Buffer(frozen, device=CPU())
    buf[0] = 9.0  # ours, writable
    assert frozen[0] == 0.0


def test_buffer_of_other_producers() -> None:
    src = Buffer.from_numpy(np.arange(4, dtype=np.int16))
    copied = Buffer(src, CPU())  # a Buffer is a DLPack producer too
    assert copied is not src and copied._data_ptr() != src._data_ptr()
    assert copied.to_numpy().tolist() == [0, 1, 2, 3]
    holder = Holder(src.__dlpack__(max_version=(1, 0)))
    assert Buffer(holder, CPU()).to_numpy().tolist() == [0, 1, 2, 3]


def test_buffer_of_an_array_in_a_subclass() -> None:
    class Mine(Buffer):
        pass

    buf = Mine(np.arange(3), CPU())
    assert type(buf) is Mine and buf.to_numpy().tolist() == [0, 1, 2]


def test_buffer_of_an_array_by_keyword() -> None:
    class Mine(Buffer):  # tp_new's path, besides vectorcall's
        pass

    for cls in (Buffer, Mine):
        buf = cls(array=np.arange(3), device=CPU())
        assert type(buf) is cls and buf.to_numpy().tolist() == [0, 1, 2]
        with pytest.raises(TypeError, match="missing required argument 'device'"):
            cls(array=np.arange(3))  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="unexpected keyword argument 'dtype'"):
            cls(array=np.arange(3), device=CPU(), dtype=DType.int8)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be a NumPy array or another DLPack"):
        Buffer(array=[1, 2], device=CPU())  # type: ignore[call-overload]


def test_buffer_of_an_array_bad_arguments() -> None:
    array = np.arange(3)
    with pytest.raises(TypeError, match="missing required argument 'device'"):
        Buffer(array)  # type: ignore[call-overload]
    for bad in (None, "cpu", CPU().default_queue, 0):
        with pytest.raises(TypeError, match="argument 'device' must be Device"):
            Buffer(array, bad)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="at most 2 arguments"):
        Buffer(array, CPU(), None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'usage'"):
        Buffer(array, CPU(), usage=max.driver.Usage.DEFAULT)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="takes a dtype and a shape"):
        DevicePinnedBuffer(array, CPU())  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="unsupported NumPy dtype"):
        Buffer(np.zeros(2, np.complex64), CPU())
    # Not an array either: the first argument is a bad dtype, as before.
    for bad in ([1, 2], "float32", 3):
        with pytest.raises(TypeError, match="argument 'dtype' must be a max.dtype"):
            Buffer(bad, CPU())  # type: ignore[call-overload]


# ---- MAX's keyword names ---------------------------------------------------


def test_from_numpy_arr_keyword() -> None:
    array = np.arange(4, dtype=np.float64)
    buf = Buffer.from_numpy(arr=array)
    assert buf._data_ptr() == array.ctypes.data  # zero-copy, as positionally
    assert list(inspect.signature(Buffer.from_numpy).parameters) == ["arr"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'array'"):
        Buffer.from_numpy(array=array)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing required argument 'arr'"):
        Buffer.from_numpy()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="at most 1 argument"):
        Buffer.from_numpy(array, array)  # type: ignore[call-arg]


def test_from_dlpack_array_keyword_and_keyword_only_copy() -> None:
    array = np.arange(4, dtype=np.int32)
    assert Buffer.from_dlpack(array=array)._data_ptr() == array.ctypes.data
    copied = Buffer.from_dlpack(array=array, copy=True)
    assert copied._data_ptr() != array.ctypes.data
    params = inspect.signature(Buffer.from_dlpack).parameters
    assert list(params) == ["array", "copy"]
    assert params["copy"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="takes 1 positional argument but 2"):
        Buffer.from_dlpack(array, True)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'obj'"):
        Buffer.from_dlpack(obj=array)  # type: ignore[call-arg]


def test_to_keywords() -> None:
    cpu = CPU()
    q = DeviceQueue(cpu)
    buf = Buffer.from_numpy(np.arange(3, dtype=np.int8))
    assert buf.to(device=cpu) is buf
    assert buf.to(stream=cpu.default_queue) is buf
    rebound = buf.to(stream=q)
    assert rebound.stream is q and rebound._data_ptr() == buf._data_ptr()
    listed = buf.to(devices=[cpu, cpu])
    assert listed == [buf, buf]
    on_queues = buf.to(streams=(q, cpu.default_queue))
    assert on_queues[0].stream is q and on_queues[1] is buf
    assert buf.to(devices=[]) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"device": DeviceQueue(CPU())},
        {"stream": CPU()},
        {"devices": CPU()},
        {"devices": [CPU().default_queue]},
        {"streams": [CPU()]},
        {"streams": "q"},
        {"device": CPU(), "stream": CPU().default_queue},
        {"target": CPU()},
    ],
    ids=lambda kw: ",".join(kw) or "none",
)
def test_to_keywords_that_match_no_overload(kwargs: dict[str, object]) -> None:
    buf = Buffer(DType.int8, (2,))
    with pytest.raises(TypeError) as info:
        buf.to(**kwargs)  # type: ignore[call-overload]
    text = str(info.value)
    if "target" in kwargs:
        assert "unexpected keyword argument 'target'" in text
    else:
        assert text.startswith("to(): incompatible function arguments.")
        assert "4. to(self, streams: Sequence[DeviceQueue]) -> list[Buffer]" in text


def test_to_positional_and_keyword_together() -> None:
    buf = Buffer(DType.int8, (2,))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        buf.to(CPU(), stream=CPU().default_queue)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="multiple values for argument 'device'"):
        buf.to(CPU(), device=CPU())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="expected a Device, a DeviceQueue"):
        buf.to(5)  # type: ignore[call-overload]


def test_mmap_shape_as_an_int(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    np.arange(8, dtype=np.int16).tofile(path)
    buf = Buffer.mmap(path, DType.int16, 8)
    assert buf.shape == (8,) and buf.to_numpy().tolist() == list(range(8))
    assert Buffer.mmap(path, DType.int16, shape=np.int64(3), offset=2).shape == (3,)
    assert Buffer.mmap(path, DType.int16, 0).shape == (0,)
    with pytest.raises(ValueError):
        Buffer.mmap(path, DType.int16, -1)
    with pytest.raises(ValueError, match="fewer than"):
        Buffer.mmap(path, DType.int16, 9)
    with pytest.raises(OverflowError):
        Buffer.mmap(path, DType.int16, 2**70)
    with pytest.raises(TypeError):
        Buffer.mmap(path, DType.int16, 2.0)  # type: ignore[arg-type]


# ---- sequence keys ---------------------------------------------------------


def test_getitem_with_a_list_is_the_tuple() -> None:
    buf = Buffer.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert buf[[1, 2]].item() == buf[1, 2].item() == 6
    view = buf[[slice(None), 1]]
    assert view.shape == (3,) and view.to_numpy().tolist() == [1, 5, 9]
    assert buf[[0, slice(1, None, 2)]].to_numpy().tolist() == [1, 3]
    assert buf[range(2)].item() == 1  # any sequence of entries
    assert buf[[-1, -1]].item() == 11
    assert Buffer(DType.int8, ())[[]].rank == 0


def test_setitem_with_a_list() -> None:
    buf = Buffer.from_numpy(np.zeros((2, 2), dtype=np.float32))
    buf[[1, 0]] = 2.5
    assert buf.to_numpy().tolist() == [[0, 0], [2.5, 0]]


def test_bad_sequence_keys() -> None:
    buf = Buffer(DType.int32, (3, 4))
    with pytest.raises(ValueError, match="expected 2 indices"):
        buf[[0]]
    with pytest.raises(IndexError):
        buf[[3, 0]]
    for bad in ([0, None], [0, 1.5], [[0], 0], (0, [1])):
        with pytest.raises(TypeError, match="only integers and slices"):
            buf[bad]  # type: ignore[index]
    for bad in ("01", b"01", np.array([0, 1])):
        with pytest.raises(TypeError):
            buf[bad]  # type: ignore[index]
    with pytest.raises(ValueError, match="more than any buffer has"):
        buf[[0] * 65]
    with pytest.raises(TypeError, match="slices are not supported"):
        buf[[0, slice(None)]] = 1  # a slice is not an element (as MAX 26.7)


# ---- MAX's error texts -----------------------------------------------------


def test_inplace_copy_from_texts_and_order() -> None:
    """MAX's texts first (MAX code matches on them), in MAX's order:
    contiguity, then sizes, then dtypes."""
    dst = Buffer(DType.float32, (4,))
    cases = [
        (dst, Buffer(DType.int32, (5,)), "Cannot copy buffers of different sizes"),
        (dst, Buffer(DType.int32, (4,)), "Cannot copy buffers of different dtypes"),
        (dst, Buffer(DType.float32, (8,))[::2], "Cannot copy from non-contiguous"),
        (Buffer(DType.float32, (8,))[::2], dst, "Cannot copy to non-contiguous"),
        (Buffer(DType.int8, (8,))[::2], dst, "Cannot copy to non-contiguous"),
    ]
    for target, source, text in cases:
        with pytest.raises(ValueError) as info:
            target.inplace_copy_from(source)
        assert str(info.value).startswith(text), str(info.value)
        assert "inplace_copy_from()" in str(info.value)  # then what we saw


class TorchLike:
    """A producer with PyTorch's is_contiguous(), which MAX's message
    tells apart."""

    def __init__(self, inner: Holder) -> None:
        self.inner = inner

    def is_contiguous(self) -> bool:
        return False

    def __dlpack__(self, **kwargs: object) -> object:
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()


def test_from_dlpack_non_contiguous_texts() -> None:
    with pytest.raises(ValueError) as info:
        Buffer.from_dlpack(np.arange(6)[::2])
    assert str(info.value) == (
        "driver buffer's from_dlpack only accepts contiguous arrays. First "
        "call np.ascontiguousarray(array)"
    )
    strided = Buffer(DType.int32, (6,))[::2]
    with pytest.raises(ValueError) as info:
        Buffer.from_dlpack(TorchLike(Holder(strided.__dlpack__(max_version=(1, 0)))))
    assert str(info.value) == (
        "driver buffer's from_dlpack only accepts contiguous tensors. First "
        "call .contiguous() on the tensor"
    )
    with pytest.raises(ValueError) as info:
        Buffer.from_dlpack(Holder(strided.__dlpack__(max_version=(1, 0))))
    assert str(info.value).startswith(
        "driver buffer's from_dlpack only accepts contiguous tensors."
    )
    assert ".contiguous()" not in str(info.value)


def test_from_dlpack_copy_text() -> None:
    holder = Holder(Buffer(DType.int8, (2,)).__dlpack__(max_version=(1, 0)))
    with pytest.raises(ValueError) as info:
        Buffer.from_dlpack(holder, copy=True)
    assert str(info.value) == (
        "`Buffer.from_dlpack` supports the `copy` flag only for numpy array "
        "and `Buffer` inputs"
    )
