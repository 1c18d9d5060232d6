"""Runs differential programs against whichever ``max.driver`` this
interpreter imports, and prints what every step observed, as JSON lines.

Not a test module: ``tests/test_max_differential.py`` runs this file as a
script twice, once under our interpreter (``--prepend`` puts this project
first on ``sys.path``) and once under the virtual environment that holds
Modular's ``max`` wheel.  Both packages are named ``max``, so each side has
an interpreter of its own.  The script needs only NumPy and the ``max``
package it finds, never the test suite.

Input (stdin): ``{"programs": [{"id": ..., "steps": [...]}, ...]}``.  A step
is ``{"op": kind, ...}``; values in it are encoded as ``decode`` says.
Output (stdout): one line per program, ``{"id": ..., "obs": [...]}``, one
observation per step, flushed as it goes, so that the parent knows which
program a crash interrupted and can resume after it (``--skip N``).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import re
import sys
import tempfile
from typing import Any

# The most elements a Buffer's description reads one by one.
MAX_READ = 48
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prepend", default=None, help="put this on sys.path first")
    parser.add_argument("--skip", type=int, default=0, help="programs to skip")
    return parser.parse_args()


ARGS = _parse_args()
if ARGS.prepend:
    sys.path.insert(0, ARGS.prepend)

import numpy as np  # noqa: E402

import max._core.driver as core  # noqa: E402
import max.driver as driver  # noqa: E402
from max.driver import CPU, Buffer, DeviceEvent, DeviceQueue, Usage  # noqa: E402
from max.dtype import DType  # noqa: E402

try:
    from max.dtype import finfo
except ImportError:  # pragma: no cover - both packages have it
    finfo = None

# Names a program may call: the API under test, NumPy and a few builtins.
GLOBALS: dict[str, Any] = {
    "driver": driver,
    "core": core,
    "Buffer": Buffer,
    "CPU": CPU,
    "DeviceQueue": DeviceQueue,
    "DeviceEvent": DeviceEvent,
    "Usage": Usage,
    "DType": DType,
    "finfo": finfo,
    "np": np,
    "repr": repr,
    "str": str,
    "len": len,
    "list": list,
    "bool": bool,
    "int": int,
    "float": float,
    "isinstance": isinstance,
}


class Env:
    """The variables of one program: step ``i`` with ``"out": n`` binds n."""

    def __init__(self) -> None:
        self.vars: dict[int, Any] = {}

    def decode(self, enc: Any) -> Any:
        """Turns the JSON encoding of a value into the value.

        Plain JSON scalars stand for themselves; a dict with one key is
        ``{"v": n}`` (variable n), ``{"g": "Buffer.zeros"}`` (a dotted name
        from GLOBALS), ``{"dt": name}``, ``{"usage": name}``, ``{"t": [...]}``
        (tuple), ``{"l": [...]}`` (list), ``{"sl": [a, b, c]}`` (slice),
        ``{"ell": 1}``, ``{"f": "nan"}`` (float), ``{"cpu": 1}``, ``{"defq": 1}``
        (its default queue), ``{"npdt": name}`` (a NumPy dtype),
        ``{"nps": [dtype, value]}`` (NumPy scalar), ``{"np0": [dtype, value]}``
        (rank-0 array), ``{"nd": {...}}`` (see ``make_array``),
        ``{"mod": name}`` (a module, imported), ``{"file": hex}`` (the path
        of a temporary file holding those bytes), ``{"fd": hex}`` (an open
        file descriptor of one)."""
        if not isinstance(enc, dict):
            return enc
        ((key, val),) = enc.items()
        if key == "v":
            return self.vars[val]
        if key == "g":
            obj: Any = GLOBALS[val.split(".")[0]]
            for part in val.split(".")[1:]:
                obj = getattr(obj, part)
            return obj
        if key == "dt":
            return getattr(DType, val)
        if key == "usage":
            return getattr(Usage, val)
        if key == "t":
            return tuple(self.decode(x) for x in val)
        if key == "l":
            return [self.decode(x) for x in val]
        if key == "sl":
            return slice(*(self.decode(x) for x in val))
        if key == "ell":
            return Ellipsis
        if key == "f":
            return float(val)
        if key == "cpu":
            return CPU()
        if key == "defq":
            return CPU().default_queue
        if key == "npdt":
            return np.dtype(val)
        if key == "nps":
            return np.dtype(val[0]).type(self.decode(val[1]))
        if key == "np0":
            return np.array(self.decode(val[1]), dtype=val[0])
        if key == "nd":
            return make_array(val)
        if key == "mod":
            return importlib.import_module(val)
        if key == "file":
            return write_file(bytes.fromhex(val))
        if key == "fd":
            return os.open(write_file(bytes.fromhex(val)), os.O_RDONLY)
        raise ValueError(f"unknown encoding {enc!r}")


_FILES: list[str] = []


def write_file(data: bytes) -> str:
    """A temporary file holding ``data`` (removed when the runner exits)."""
    fd, path = tempfile.mkstemp(suffix=".max")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    _FILES.append(path)
    return path


def make_array(spec: dict[str, Any]) -> np.ndarray:
    """A deterministic NumPy array: ``dtype``, ``shape`` (of the base),
    ``seed``, then optionally ``index`` (basic indexing of the base, as a
    list of ``[a, b, c]`` slices or ints), ``fortran`` and ``readonly``."""
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    size = math.prod(shape)
    rng = np.random.default_rng(spec["seed"])
    if dtype.kind == "b":
        base = rng.integers(0, 2, size).astype(bool)
    elif dtype.kind == "f":
        base = (rng.integers(-64, 64, size) / 4).astype(dtype)
    else:
        info = np.iinfo(dtype)
        base = rng.integers(max(info.min, -100), min(info.max, 200), size).astype(dtype)
    arr = base.reshape(shape)
    if spec.get("fortran"):
        arr = np.asfortranarray(arr)
    if spec.get("index") is not None:
        arr = arr[tuple(slice(*e) if isinstance(e, list) else e for e in spec["index"])]
    if spec.get("readonly"):
        arr.flags.writeable = False
    return arr


# ---- descriptions ----------------------------------------------------------


def _text(value: Any) -> str:
    return _ADDRESS.sub("0x?", value)


def _scalar(value: Any) -> Any:
    """A JSON form of a Python scalar that keeps -0.0, NaN and infinities."""
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    return {"type": type(value).__name__, "repr": _text(repr(value))}


def _indices(shape: tuple[int, ...]) -> Any:
    """Every index of ``shape`` in row-major order, lazily (a shape may be
    huge where a package accepted it)."""
    if any(n <= 0 for n in shape):
        return
    idx = [0] * len(shape)
    while True:
        yield tuple(idx)
        for dim in reversed(range(len(shape))):
            idx[dim] += 1
            if idx[dim] < shape[dim]:
                break
            idx[dim] = 0
        else:
            return


def _values(buf: Any) -> Any:
    """The first MAX_READ elements, each read as ``buf[i, j, ...].item()``
    (a rank-0 view and its item: the path both packages read correctly for
    every layout, unlike their bulk reads)."""
    out = []
    for idx in itertools.islice(_indices(tuple(buf.shape)), MAX_READ):
        try:
            out.append(_scalar(buf[idx].item() if idx else buf.item()))
        except Exception as exc:  # noqa: BLE001 - recorded, compared
            out.append({"exc": type(exc).__name__})
    return out


def describe_buffer(buf: Any, read: bool) -> dict[str, Any]:
    desc: dict[str, Any] = {"kind": "Buffer"}
    for name in ("dtype", "shape", "strides", "rank", "num_elements", "element_size"):
        desc[name] = _attr(buf, name)
    for name in ("is_contiguous", "is_host", "pinned", "usage", "_host_hazard_tracked"):
        desc[name] = _attr(buf, name)
    desc["repr"] = _attr(buf, "__repr__", call=True)
    if read:
        desc["values"] = _values(buf)
    return desc


def _attr(obj: Any, name: str, call: bool = False) -> Any:
    try:
        value = getattr(obj, name)
        if call:
            value = value()
    except Exception as exc:  # noqa: BLE001 - recorded, compared
        return {"exc": type(exc).__name__}
    return describe(value, read=False)


def describe(value: Any, read: bool = True) -> Any:
    """What a result looks like, in JSON: Buffers by dtype, shape, strides,
    flags, repr and values; arrays by dtype, shape, strides, flags and bytes;
    everything else by type and repr (addresses masked)."""
    if isinstance(value, Buffer):
        return describe_buffer(value, read)
    if isinstance(value, np.ndarray):
        desc = {
            "kind": "ndarray",
            "dtype": str(value.dtype),
            "shape": list(value.shape),
            "strides": list(value.strides),
            "writeable": bool(value.flags.writeable),
        }
        if read:
            desc["bytes"] = (
                value.tobytes().hex() if value.nbytes <= 512 else f"{value.nbytes}B"
            )
        return desc
    if isinstance(value, (tuple, list)):
        return {
            "kind": type(value).__name__,
            "items": [describe(x, read) for x in value[:16]],
        }
    if isinstance(value, dict):
        return {
            "kind": "dict",
            "keys": sorted(map(str, value)),
            "types": sorted({type(v).__name__ for v in value.values()}),
        }
    if isinstance(value, (DType, Usage)):
        return {"kind": type(value).__name__, "repr": repr(value), "str": str(value)}
    if isinstance(value, np.generic):
        return {
            "kind": "npscalar",
            "dtype": str(value.dtype),
            "repr": repr(value.item()),
        }
    if isinstance(value, (bool, int, float, str)) or value is None:
        return _scalar(_text(value) if isinstance(value, str) else value)
    if finfo is not None and isinstance(value, finfo):
        return {"kind": "finfo", "repr": _text(repr(value))}
    return {"kind": type(value).__name__, "repr": _text(repr(value))}


# ---- steps -----------------------------------------------------------------


def run_step(env: Env, step: dict[str, Any]) -> Any:
    op = step["op"]
    if op == "call":
        fn = env.decode(step["fn"])
        if "method" in step:
            fn = getattr(fn, step["method"])
        args = [env.decode(a) for a in step.get("args", [])]
        kwargs = {k: env.decode(v) for k, v in step.get("kw", {}).items()}
        return fn(*args, **kwargs)
    if op == "attr":
        return getattr(env.decode(step["obj"]), step["name"])
    if op == "getitem":
        return env.decode(step["obj"])[env.decode(step["key"])]
    if op == "setitem":
        target = env.decode(step["obj"])
        target[env.decode(step["key"])] = env.decode(step["value"])
        return None
    if op == "iter":
        return list(env.decode(step["obj"]))
    if op == "binop":
        left, right = env.decode(step["left"]), env.decode(step["right"])
        return {
            "|": lambda: left | right,
            "&": lambda: left & right,
            "in": lambda: left in right,
            "==": lambda: left == right,
            "is": lambda: left is right,
            "~": lambda: ~left,
        }[step["sym"]]()
    if op == "value":
        return env.decode(step["value"])
    raise ValueError(f"unknown op {op!r}")


def run_program(program: dict[str, Any]) -> list[Any]:
    env = Env()
    observations = []
    for index, step in enumerate(program["steps"]):
        # The last line on stderr names the step a crash killed.
        sys.stderr.write(f"step {index} {step.get('name', step['op'])}\n")
        obs: dict[str, Any] = {}
        try:
            result = run_step(env, step)
        except Exception as exc:  # noqa: BLE001 - the observation
            obs["exc"] = type(exc).__name__
            result = None
        else:
            if step.get("out") is not None:
                env.vars[step["out"]] = result
            obs["result"] = describe(result, read=step.get("read", True))
        for var, read in step.get("observe", []):
            if var in env.vars:
                obs[f"v{var}"] = describe(env.vars[var], read)
        observations.append(obs)
    return observations


def main() -> None:
    programs = json.load(sys.stdin)["programs"]
    try:
        for program in programs[ARGS.skip :]:
            line = json.dumps({"id": program["id"], "obs": run_program(program)})
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
    finally:
        for path in _FILES:
            os.unlink(path)


if __name__ == "__main__":
    main()
