"""SPEC §15: pickling.

A Buffer pickles its dtype, shape and values (a view as a contiguous copy);
protocol 5 hands host memory out of band without a copy, older protocols
copy; unpickling gives a CPU buffer (accelerator buffers: tests/accelerator).
DType, Usage, DeviceSpec and devices pickle; queues, events and flags
refuse with a TypeError.  Other processes: multiprocessing with the spawn
start method, and ProcessPoolExecutor.
"""

from __future__ import annotations

import copy
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from buffer_support import FLOAT8, NUMPY_DTYPES, SUB_BYTE, sample_array

from max._core import driver as core
from max.driver import (
    CPU,
    Buffer,
    CompletionFlag,
    DeviceEvent,
    DeviceQueue,
    DeviceSpec,
    HostHazardCompletion,
    Usage,
)
from max.dtype import DType

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
ALL_DTYPES = list(DType)


def filled(dtype: DType, shape: tuple[int, ...]) -> Buffer:
    """A buffer of `shape` holding distinct bytes (any dtype)."""
    buf = Buffer(dtype, shape)
    raw = np.frombuffer(buf, np.uint8) if dtype not in NUMPY_DTYPES else None
    if raw is not None:  # bfloat16, float8/6/4: set the raw bytes
        raw[...] = (np.arange(raw.size) * 7 + 3) % 61
    else:
        buf.to_numpy()[...] = sample_array(dtype, shape)
    return buf


def same(a: Buffer, b: Buffer) -> bool:
    return (
        a.dtype is b.dtype
        and a.shape == b.shape
        and bytes(a.contiguous()) == bytes(b.contiguous())
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_buffers_round_trip_every_dtype_and_protocol(dtype, protocol):
    buf = filled(dtype, (3, 4))
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert type(back) is Buffer
    assert back.device == CPU() and back.is_contiguous
    assert same(back, buf)
    assert back._data_ptr() != buf._data_ptr()


@pytest.mark.parametrize("protocol", [2, 5])
def test_views_pickle_as_contiguous_copies(protocol):
    buf = filled(DType.int16, (4, 6))
    ref = buf.to_numpy()
    for view, expected in [
        (buf[1:3, :], ref[1:3, :]),
        (buf[:, 1::2], ref[:, 1::2]),
        (buf[::-1, ::-2], ref[::-1, ::-2]),
        (buf[2, 3], ref[2, 3]),
    ]:
        back = pickle.loads(pickle.dumps(view, protocol=protocol))
        assert back.shape == expected.shape and back.is_contiguous
        assert np.array_equal(back.to_numpy(), expected)


@pytest.mark.parametrize("dtype", [DType.bfloat16, *FLOAT8, *SUB_BYTE], ids=str)
def test_strided_views_of_raw_dtypes_pickle(dtype):
    buf = filled(dtype, (3, 4))
    back = pickle.loads(pickle.dumps(buf[:, ::2], protocol=5))
    assert same(back, buf[:, ::2])


def test_shapes_without_elements_and_rank_zero():
    for buf in (Buffer(DType.float32, (0, 3)), Buffer.scalar(-3, DType.int8)):
        for protocol in (0, 5):
            back = pickle.loads(pickle.dumps(buf, protocol=protocol))
            assert back.shape == buf.shape and same(back, buf)


def test_protocol_5_sends_host_memory_out_of_band_without_a_copy():
    buf = filled(DType.float32, (256,))
    out_of_band: list[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=out_of_band.append)
    assert len(out_of_band) == 1
    raw = out_of_band[0].raw()
    assert raw.nbytes == 1024 and len(data) < 300  # the bytes are not in it
    assert np.frombuffer(raw, np.uint8).ctypes.data == buf._data_ptr()
    # Loading with the same buffers aliases them, as NumPy's arrays do.
    back = pickle.loads(data, buffers=out_of_band)
    assert back._data_ptr() == buf._data_ptr()
    assert same(back, buf)


def test_out_of_band_buffers_a_receiver_provides_are_wrapped():
    buf = filled(DType.int32, (2, 5))
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=oob.append)
    received = bytearray(oob[0].raw())  # as a transport would deliver it
    back = pickle.loads(data, buffers=[received])
    assert back._data_ptr() == np.frombuffer(received, np.uint8).ctypes.data
    received[0:4] = (77).to_bytes(4, "little")  # zero-copy: one memory
    assert back[0, 0].item() == 77
    del received  # the Buffer keeps the bytearray alive
    assert back.to_numpy().tolist()[1] == buf.to_numpy().tolist()[1]


def test_read_only_or_misaligned_out_of_band_data_is_copied():
    buf = filled(DType.float64, (4,))
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=oob.append)
    frozen = bytes(oob[0].raw())
    back = pickle.loads(data, buffers=[frozen])  # read-only: Buffers are not
    assert same(back, buf)
    shifted = bytearray(33)
    view = memoryview(shifted)[1:]
    view[:] = frozen
    back = pickle.loads(data, buffers=[view])  # not 8-byte aligned
    assert back._aligned() and same(back, buf)


def test_protocols_before_5_copy_the_values():
    buf = filled(DType.uint8, (16,))
    data = pickle.dumps(buf, protocol=4)
    assert bytes(buf) in data
    buf[0] = 255
    assert pickle.loads(data)[0].item() != 255


def test_in_band_protocol_5_carries_the_values():
    buf = filled(DType.int64, (8,))
    data = pickle.dumps(buf, protocol=5)
    assert bytes(buf) in data
    assert same(pickle.loads(data), buf)


def test_copy_and_deepcopy_give_independent_buffers():
    buf = filled(DType.float32, (2, 2))
    for dup in (copy.copy(buf), copy.deepcopy(buf)):
        assert same(dup, buf) and dup._data_ptr() != buf._data_ptr()


def test_pickling_waits_as_a_host_read(gate):
    q = DeviceQueue(CPU())
    dst = Buffer.zeros((3,), DType.int32, q)
    flag = gate(q)
    dst.inplace_copy_from(Buffer.from_numpy(np.array([4, 5, 6], np.int32)))
    from buffer_support import Call

    call = Call(lambda: pickle.loads(pickle.dumps(dst, protocol=5)))
    assert call.blocked()
    flag.signal(1)
    assert call.value().to_numpy().tolist() == [4, 5, 6]


def test_rebuilding_checks_its_arguments():
    rebuild = core._rebuild_buffer
    data = bytes(12)
    assert rebuild(data, DType.int32, (3,), ("cpu", 0), False).shape == (3,)
    with pytest.raises(TypeError, match="5 positional"):
        rebuild(data, DType.int32, (3,))
    with pytest.raises(TypeError, match="DType"):
        rebuild(data, "int32", (3,), ("cpu", 0), False)
    with pytest.raises(TypeError, match="shape"):
        rebuild(data, DType.int32, 3, ("cpu", 0), False)
    for place in ("cpu", ("tpu", 0), ("cpu",), ("cpu", "0")):
        with pytest.raises(TypeError, match="device"):
            rebuild(data, DType.int32, (3,), place, False)
    with pytest.raises(ValueError, match="holds 12 bytes.*need 16"):
        rebuild(data, DType.int32, (4,), ("cpu", 0), False)
    with pytest.raises(TypeError):
        rebuild(object(), DType.int32, (3,), ("cpu", 0), False)


def test_an_accelerator_buffer_needs_that_accelerator_here():
    """Unpickling onto Accelerator(id) of this process, which has none with
    that id: RuntimeError naming the device."""
    data = bytes(8)
    missing = core.accelerator_count()  # one past the last
    with pytest.raises(RuntimeError, match=f"Device\\(type=gpu,id={missing}\\)"):
        core._rebuild_buffer(data, DType.float32, (2,), ("gpu", missing), False)
    with pytest.raises(RuntimeError, match=f"id={missing + 7}\\).*no such"):
        core._rebuild_buffer(data, DType.float32, (2,), ("gpu", missing + 7), True)


def test_dtype_usage_and_device_spec_pickle():
    for protocol in PROTOCOLS:
        for value in [*DType, *Usage, DeviceSpec.cpu(), DeviceSpec.accelerator(3)]:
            back = pickle.loads(pickle.dumps(value, protocol=protocol))
            assert back == value
            if not isinstance(value, DeviceSpec):
                assert back is value  # enum members unpickle as themselves


def test_devices_pickle_by_kind_and_id():
    for protocol in PROTOCOLS:
        assert pickle.loads(pickle.dumps(CPU(), protocol=protocol)) is CPU()
    assert b"CPU" in pickle.dumps(CPU())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_resources_of_one_process_refuse_with_a_type_error(protocol):
    cpu = CPU()
    q = DeviceQueue(cpu)
    for obj, name in [
        (q, "DeviceQueue"),
        (cpu.default_queue, "DeviceQueue"),
        (q.record_event(), "DeviceEvent"),
        (DeviceEvent(cpu), "DeviceEvent"),
        (CompletionFlag(cpu), "CompletionFlag"),
        (HostHazardCompletion.record_on(q), "HostHazardCompletion"),
    ]:
        refused = f"cannot pickle '{name}'.*one process"
        with pytest.raises(TypeError, match=refused) as e:
            pickle.dumps(obj, protocol=protocol)
        # The hint names only what the object has: a completion has no device.
        assert ("`.device`" in str(e.value)) == hasattr(obj, "device"), e.value
        with pytest.raises(TypeError, match="resource of one process"):
            copy.copy(obj)


# --------------------------------------------------------------------------
# Other processes (the spawn start method: a fresh interpreter)


def _double(buf: Buffer) -> Buffer:
    out = Buffer(buf.dtype, buf.shape)
    out.to_numpy()[...] = buf.to_numpy() * 2
    return out


def test_multiprocessing_spawn_pool_sends_and_returns_buffers():
    ctx = multiprocessing.get_context("spawn")
    inputs = [Buffer.from_numpy(np.full((3,), i, np.float32)) for i in range(4)]
    with ctx.Pool(2) as pool:
        outputs = pool.map(_double, inputs)
    assert [o.to_numpy().tolist() for o in outputs] == [[2.0 * i] * 3 for i in range(4)]
    assert all(o.device == CPU() for o in outputs)


def test_process_pool_executor_with_spawn():
    ctx = multiprocessing.get_context("spawn")
    buf = filled(DType.bfloat16, (5,))
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        back = pool.submit(copy.copy, buf).result(timeout=120)
    assert same(back, buf)
