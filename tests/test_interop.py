"""SPEC §13 and §15 with the real clients users bring: NumPy, PyTorch (the
CPU side of the PyPI wheel), JAX, mpi4py (two ranks under mpiexec), Dask's
distributed scheduler, multiprocessing's spawn start method.  Each client
is the ``interop`` extra's (``pip install -e '.[interop]'``); a test whose
client is missing is skipped, saying which.  What each client does with a
Buffer is tabulated in docs/interop.md.
"""

from __future__ import annotations

import importlib.util
import io
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from max.driver import CPU, Buffer
from max.dtype import DType

REPO_ROOT = Path(__file__).resolve().parent.parent
FLOAT8 = [
    DType.float8_e4m3fn,
    DType.float8_e4m3fnuz,
    DType.float8_e5m2,
    DType.float8_e5m2fnuz,
    DType.float8_e8m0fnu,
]


def need(module: str):
    """The client, or a skip naming the extra that installs it."""
    return pytest.importorskip(
        module, reason=f"{module} is not installed (pip install -e '.[interop]')"
    )


def arange(n: int, dtype=np.float32) -> Buffer:
    return Buffer.from_numpy(np.arange(n, dtype=dtype))


# --------------------------------------------------------------------------
# NumPy


def test_numpy_reads_and_writes_through_the_buffer_protocol():
    buf = arange(6)
    arr = np.frombuffer(buf, dtype=np.float32)
    assert arr.ctypes.data == buf._data_ptr()
    arr[2] = -1
    assert buf[2].item() == -1
    assert np.asarray(memoryview(buf[::2])).tolist() == [0, -1, 4]


def test_numpy_arrays_and_buffers_pickle_together_out_of_band():
    payload = {"a": np.ones(1000), "b": arange(1000), "c": [arange(3, np.int8)]}
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=oob.append)
    assert len(oob) == 3 and len(data) < 1000
    back = pickle.loads(data, buffers=oob)
    assert back["b"]._data_ptr() == payload["b"]._data_ptr()
    assert back["c"][0].to_numpy().tolist() == [0, 1, 2]


# --------------------------------------------------------------------------
# PyTorch


def test_torch_frombuffer_aliases_host_memory():
    torch = need("torch")
    buf = arange(8)
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert t.data_ptr() == buf._data_ptr()
    t[0] = 42
    assert buf[0].item() == 42
    raw = torch.frombuffer(Buffer.zeros((4,), DType.bfloat16), dtype=torch.bfloat16)
    assert raw.tolist() == [0.0] * 4


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_torch_takes_float8_through_dlpack_both_ways(dtype):
    torch = need("torch")
    torch_dtype = getattr(torch, dtype.name)
    buf = Buffer(dtype, (4,))
    for i in range(4):
        buf[i] = 2.0 ** (i - 1)
    t = torch.from_dlpack(buf)  # PyTorch asks for max_version=(1, 0)
    assert t.dtype is torch_dtype and t.data_ptr() == buf._data_ptr()
    assert t.float().tolist() == [0.5, 1.0, 2.0, 4.0]
    back = Buffer.from_dlpack(t)
    assert back.dtype is dtype and back._data_ptr() == buf._data_ptr()


def test_torch_refuses_the_padded_sub_byte_types():
    """float4 and float6 cross as DLPack 1.1's padded codes, which PyTorch
    does not take (its float4 is packed two to a byte): a clear error."""
    torch = need("torch")
    for dtype in (DType.float4_e2m1fn, DType.float6_e2m3fn):
        with pytest.raises(BufferError):
            torch.from_dlpack(Buffer.zeros((2,), dtype))


def test_torch_save_and_load_a_buffer():
    torch = need("torch")
    f = io.BytesIO()
    torch.save({"weights": arange(5), "t": torch.ones(2)}, f)
    f.seek(0)
    back = torch.load(f, weights_only=False)
    assert back["weights"].to_numpy().tolist() == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------
# JAX


def test_jax_reads_the_buffer_protocol_and_dlpack():
    jnp = need("jax.numpy")
    buf = arange(4)
    assert jnp.frombuffer(buf, dtype=jnp.float32).tolist() == [0, 1, 2, 3]
    assert np.asarray(jnp.from_dlpack(buf)).tolist() == [0, 1, 2, 3]
    assert Buffer.from_dlpack(jnp.arange(3.0)).to_numpy().tolist() == [0, 1, 2]


# --------------------------------------------------------------------------
# multiprocessing (spawn), beyond tests/test_pickling.py's pools


def _echo(q_in, q_out):
    q_out.put(q_in.get())


def test_multiprocessing_spawn_queues_carry_buffers():
    ctx = multiprocessing.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_echo, args=(q_in, q_out))
    p.start()
    q_in.put(Buffer.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3)))
    back = q_out.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0
    assert back.shape == (2, 3) and back.to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


# --------------------------------------------------------------------------
# mpi4py, two ranks


MPI_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from mpi4py import MPI
    from mpi4py.util import pkl5
    from max.driver import Buffer
    from max.dtype import DType

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    # Send / Recv through the buffer protocol (typed: format "f").
    if rank == 0:
        comm.Send(Buffer.from_numpy(np.arange(8, dtype=np.float32)), dest=1)
    else:
        got = Buffer.zeros((8,), DType.float32)
        comm.Recv(got, source=0)
        assert got.to_numpy().tolist() == list(range(8)), got
    # Bcast and Allreduce into Buffers.
    b = Buffer.from_numpy(np.full(4, 7 if rank == 0 else 0, np.int64))
    comm.Bcast(b, root=0)
    assert b.to_numpy().tolist() == [7] * 4
    total = Buffer.zeros((4,), DType.int64)
    comm.Allreduce(b, total, op=MPI.SUM)
    assert total.to_numpy().tolist() == [14] * 4
    # Raw bytes of a dtype without a struct format.
    f8 = Buffer.zeros((3,), DType.float8_e4m3fn)
    if rank == 0:
        f8[1] = 2.0
    comm.Bcast(f8, root=0)
    assert f8[1].item() == 2.0
    # Pickled objects: comm.send (in band), pkl5 (protocol 5 out of band).
    obj = comm.bcast({"buf": Buffer.from_numpy(np.ones(3))} if rank == 0 else None)
    assert obj["buf"].to_numpy().tolist() == [1.0] * 3
    big = pkl5.Intracomm(comm)
    if rank == 0:
        big.send(Buffer.from_numpy(np.arange(1 << 20, dtype=np.uint8)), dest=1)
    else:
        got = big.recv(source=0)
        assert got.shape == (1 << 20,) and got[255].item() == 255
    print(f"rank {rank} ok", flush=True)
    """
)


def test_mpi4py_two_ranks_under_mpiexec(tmp_path):
    need("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec is not installed (Debian: openmpi-bin)")
    script = tmp_path / "ranks.py"
    script.write_text(MPI_SCRIPT)
    env = dict(os.environ)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    # Open MPI refuses root unless told, and wants slots for two ranks.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    args = [mpiexec, "-n", "2"]
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True)
    if "Open MPI" in version.stdout or "OpenRTE" in version.stdout:
        args.append("--oversubscribe")
    r = subprocess.run(
        [*args, sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=REPO_ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # (The two ranks' lines may interleave in mpiexec's output.)
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout, r.stdout


# --------------------------------------------------------------------------
# Dask (distributed): worker processes, protocol 5 frames


def _double(buf: Buffer) -> Buffer:
    out = Buffer(buf.dtype, buf.shape)
    out.to_numpy()[...] = buf.to_numpy() * 2
    return out


def test_dask_distributed_ships_buffers_to_worker_processes():
    need("distributed")
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        big = arange(1 << 20)
        future = client.scatter(big)
        assert client.submit(lambda b: b.num_elements, future).result(60) == 1 << 20
        r = client.submit(_double, arange(4)).result(timeout=60)
    assert type(r) is Buffer and r.device == CPU()
    assert r.to_numpy().tolist() == [0, 2, 4, 6]


def test_every_client_of_the_interop_extra_is_declared():
    """The extra names what this file uses (and CI installs it)."""
    text = (REPO_ROOT / "pyproject.toml").read_text()
    start = text.index("interop = [")
    extra = text[start : text.index("\n]", start)]
    for client in ("numpy", "torch", "jax", "mpi4py", "distributed", "anyio"):
        assert f'"{client}' in extra, client
    assert importlib.util.find_spec("numpy") is not None
