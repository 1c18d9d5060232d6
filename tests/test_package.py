"""Package layout: exports, deprecations, typing files and the stub (SPEC §1)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.resources
import inspect
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import max.driver
from max._core import driver as core

EXPECTED_ALL = {
    "CPU",
    "Accelerator",
    "Device",
    "DeviceQueue",
    "DeviceEvent",
    "CompletionFlag",
    "DeviceSpec",
    "accelerator_api",
    "accelerator_architecture_name",
    "accelerator_count",
    "calculate_virtual_device_count",
    "calculate_virtual_device_count_from_cli",
    "devices_exist",
    "load_devices",
    "scan_available_devices",
    "backend_selection",
    "Buffer",
    "DevicePinnedBuffer",
    "Usage",
    "DLPackArray",
    "LaunchTraceEntry",
    "begin_launch_trace",
    "take_launch_trace",
    "launch_trace",
    # SPEC §12.6: hazard records (HostHazardCompletion stays in max._core)
    "HostHazardError",
    "batch_inplace_copy",
    "copy_pinned_to_destinations",
    # MAX 26.7's newer surface (issue 24).
    "SymmetricPool",
    "load_max_buffer",
    # MAX's peer access between accelerators (test_peer_access.py).
    "enable_all_peer_access",
    # MAX's virtual device mode (test_virtual_devices.py).
    "set_virtual_device_count",
    "get_virtual_device_count",
    "is_virtual_device_mode",
    "set_virtual_device_api",
    "get_virtual_device_api",
    "set_virtual_device_target_arch",
    "get_virtual_device_target_arch",
    "set_virtual_cpu_target",
    "get_virtual_cpu_target",
    # SPEC §16: graph capture (test_capture.py).
    "DeviceGraph",
    "capture",
}
NATIVE_TYPES = (
    "Device",
    "CPU",
    "Accelerator",
    "DeviceQueue",
    "DeviceEvent",
    "CompletionFlag",
    "Buffer",
    "DevicePinnedBuffer",
    "Usage",
    "LaunchTraceEntry",
    "DeviceGraph",
)
PACK = "__unsafe_pack_py_host_func"
Py_TPFLAGS_BASETYPE = 1 << 10


# ---- exports ---------------------------------------------------------------


def test_all_exact() -> None:
    assert set(max.driver.__all__) == EXPECTED_ALL
    assert len(max.driver.__all__) == len(EXPECTED_ALL)
    for name in max.driver.__all__:
        assert getattr(max.driver, name) is not None


def test_star_import() -> None:
    namespace: dict[str, Any] = {}
    exec("from max.driver import *", namespace)
    assert set(namespace) - {"__builtins__"} == EXPECTED_ALL


def test_native_types_reexported() -> None:
    for name in (*NATIVE_TYPES, "backend_selection"):
        assert getattr(max.driver, name) is getattr(core, name)
        assert getattr(max.driver.driver, name) is getattr(core, name)


def test_unsafe_pack_importable_not_in_all() -> None:
    namespace: dict[str, Any] = {}
    exec(f"from max.driver import {PACK}", namespace)
    assert namespace[PACK] is getattr(core, PACK)
    assert getattr(max.driver, PACK) is getattr(core, PACK)
    assert PACK not in max.driver.__all__


def test_device_stream_deprecated_alias() -> None:
    with pytest.warns(DeprecationWarning, match="DeviceStream"):
        alias = max.driver.DeviceStream  # type: ignore[attr-defined]
    assert alias is max.driver.DeviceQueue
    namespace: dict[str, Any] = {}
    with pytest.warns(DeprecationWarning):
        exec("from max.driver import DeviceStream", namespace)
    assert namespace["DeviceStream"] is max.driver.DeviceQueue
    assert "DeviceStream" not in max.driver.__all__


def test_device_default_stream_deprecated_alias() -> None:
    cpu = max.driver.CPU()
    with pytest.warns(DeprecationWarning):
        queue = cpu.default_stream  # type: ignore[attr-defined]
    assert queue is cpu.default_queue


def test_no_warning_for_regular_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert max.driver.DeviceQueue is core.DeviceQueue


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        max.driver.nope  # type: ignore[attr-defined]  # noqa: B018


def test_driver_submodule_importable() -> None:
    mod = importlib.import_module("max.driver.driver")
    assert sys.modules["max.driver.driver"] is mod
    assert max.driver.driver is mod
    assert callable(mod.accelerator_count)
    assert mod.load_devices is max.driver.load_devices


# ---- typing files ----------------------------------------------------------


def test_typing_files_present() -> None:
    assert importlib.resources.files("max").joinpath("py.typed").is_file()
    assert importlib.resources.files("max._core").joinpath("driver.pyi").is_file()
    assert importlib.resources.files("max.dtype").joinpath("__init__.pyi").is_file()


# ---- the stub matches the runtime ------------------------------------------


def _stub_tree() -> ast.Module:
    text = importlib.resources.files("max._core").joinpath("driver.pyi").read_text()
    return ast.parse(text)


def _decorators(node: ast.FunctionDef | ast.ClassDef) -> set[str]:
    names = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def _stub_functions(body: list[ast.stmt]) -> dict[str, list[ast.FunctionDef]]:
    functions: dict[str, list[ast.FunctionDef]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            functions.setdefault(node.name, []).append(node)
    return functions


def _stub_attributes(body: list[ast.stmt]) -> set[str]:
    """Names a class body assigns (enum members such as ``Usage.STAGING``)
    or defines as nested classes (``LaunchTraceEntry.MemcpyKind``)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _stub_base(name: str) -> type:
    """A stub class's base: a type of the module, one the stub imports from
    the standard library (``enum.Flag``), or a builtin exception."""
    if hasattr(core, name):
        return getattr(core, name)
    builtin = getattr(__import__("builtins"), name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return builtin
    for node in _stub_tree().body:
        if isinstance(node, ast.ImportFrom) and node.module in ("enum",):
            if any(alias.name == name for alias in node.names):
                return getattr(importlib.import_module(node.module), name)
    raise AssertionError(f"stub base {name} is neither native nor imported")


def _stub_classes() -> dict[str, ast.ClassDef]:
    return {n.name: n for n in _stub_tree().body if isinstance(n, ast.ClassDef)}


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name.startswith("__unsafe")


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _literal(node: ast.expr) -> Any:
    return ast.literal_eval(node)


_P = inspect.Parameter


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, Any, Any]]:
    """(name, default or inspect.Parameter.empty, kind), without ``self``."""
    args = fn.args
    positional = [
        *((a, _P.POSITIONAL_ONLY) for a in args.posonlyargs),
        *((a, _P.POSITIONAL_OR_KEYWORD) for a in args.args),
    ]
    defaults: list[Any] = [_P.empty] * (len(positional) - len(args.defaults))
    defaults += [_literal(d) for d in args.defaults]
    params = [
        (a.arg, d, kind) for (a, kind), d in zip(positional, defaults, strict=True)
    ]
    params += [
        (a.arg, _P.empty if d is None else _literal(d), _P.KEYWORD_ONLY)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if params and params[0][0] in ("self", "cls"):
        params = params[1:]
    return params


def _runtime_params(obj: Any) -> list[tuple[str, Any, Any]]:
    """As _stub_params; SPEC §10 wants positional-or-keyword parameters, so
    another kind must be declared the same way in the stub (DLPack's and
    NumPy's conventions: ``from_numpy(array, /)``, ``from_dlpack(obj, /, *,
    copy=None)``)."""
    sig = inspect.signature(obj)
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls", "$self", "type"):
        params = params[1:]
    return [(p.name, p.default, p.kind) for p in params]


def test_stub_module_names_match_runtime() -> None:
    tree = _stub_tree()
    stub_names = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.ClassDef) and _is_public(n.name)
    }
    runtime_names = {n for n in dir(core) if _is_public(n)}
    assert stub_names == runtime_names
    assert PACK in stub_names


BUFFER_SLOTS = ("__buffer__", "__release_buffer__")


def test_stub_class_members_exist_at_runtime() -> None:
    for cls_name, node in _stub_classes().items():
        cls = getattr(core, cls_name)
        for name in [*_stub_functions(node.body), *_stub_attributes(node.body)]:
            if name == "__cuda_stream__":
                continue  # only on CUDA queues
            if name in BUFFER_SLOTS and sys.version_info < (3, 12):
                continue  # the buffer protocol's slots show as these from 3.12
            assert hasattr(cls, name), f"{cls_name}.{name} missing at runtime"


def test_runtime_class_members_are_in_stub() -> None:
    classes = _stub_classes()
    for cls_name, node in classes.items():
        cls = getattr(core, cls_name)
        stub_members = set(_stub_functions(node.body)) | _stub_attributes(node.body)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                stub_members |= set(_stub_functions(classes[base.id].body))
            elif isinstance(base, ast.Name):  # a builtin base's own members
                stub_members |= set(dir(_stub_base(base.id)))
        runtime = {n for n in dir(cls) if _is_public(n)}
        assert runtime <= stub_members, f"{cls_name}: {runtime - stub_members}"


def test_cuda_stream_only_on_cuda_queues() -> None:
    queue = max.driver.DeviceQueue(max.driver.CPU())
    assert not hasattr(queue, "__cuda_stream__")


def test_final_types_match_stub() -> None:
    for cls_name, node in _stub_classes().items():
        cls = getattr(core, cls_name)
        stub_final = "final" in _decorators(node)
        runtime_final = not cls.__flags__ & Py_TPFLAGS_BASETYPE
        assert stub_final == runtime_final, cls_name
        for base in node.bases:
            assert isinstance(base, ast.Name)
            assert issubclass(cls, _stub_base(base.id))


def _callables() -> list[tuple[str, Any, list[ast.FunctionDef]]]:
    """(qualified name, runtime object, stub definitions) of every callable."""
    out = []
    tree = _stub_tree()
    for name, defs in _stub_functions(tree.body).items():
        out.append((name, getattr(core, name), defs))
    for cls_name, node in _stub_classes().items():
        cls = getattr(core, cls_name)
        for name, defs in _stub_functions(node.body).items():
            decorators = _decorators(defs[0])
            if "property" in decorators or _is_dunder(name):
                continue
            out.append((f"{cls_name}.{name}", getattr(cls, name), defs))
        if "__new__" in _stub_functions(node.body):
            out.append((cls_name, cls, _stub_functions(node.body)["__new__"]))
    return out


def test_every_callable_has_doc_and_text_signature() -> None:
    for qualname, obj, _ in _callables():
        assert obj.__doc__, f"{qualname} has no docstring"
        assert obj.__text_signature__, f"{qualname} has no __text_signature__"
        inspect.signature(obj)  # parses


def test_parameter_names_match_stub() -> None:
    for qualname, obj, defs in _callables():
        if len(defs) > 1:
            continue  # overloaded: checked through the docstring below
        assert _runtime_params(obj) == _stub_params(defs[0]), qualname


def test_overloads_listed_in_docstring() -> None:
    overloaded = [(q, o, d) for q, o, d in _callables() if len(d) > 1]
    assert {q for q, _, _ in overloaded} == {
        "DeviceQueue.record_event",
        "DeviceQueue.wait_for",
        "Buffer",
        "Buffer.zeros",
        "Buffer.copy",
        "Buffer.to",
        "DevicePinnedBuffer",
    }
    for qualname, obj, defs in overloaded:
        name = qualname.rsplit(".", 1)[-1]
        lines = [ln for ln in obj.__doc__.splitlines() if f"{name}(" in ln]
        for fn in defs:
            assert "overload" in _decorators(fn)
            params = [p for p, _, _ in _stub_params(fn)]
            assert any(all(p in ln for p in params) for ln in lines), (
                qualname,
                params,
                obj.__doc__,
            )
        assert len(lines) >= len(defs), obj.__doc__


def test_stub_parses_as_python() -> None:
    path = Path(str(importlib.resources.files("max._core").joinpath("driver.pyi")))
    compile(path.read_text(), str(path), "exec")
