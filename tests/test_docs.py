"""The documentation in docs/ is executed and checked against the runtime.

- Every fenced ```python block of docs/*.md runs.  The blocks of one page run
  in order in one shared namespace (a later block may use an earlier one's
  names), in this process, in the main thread.
- Blocks whose first line is ``# a script: run it as a file`` are whole
  programs (``if __name__ == "__main__":`` and all): each runs as a file in
  its own interpreter, as a reader who pasted it into one would run it.
- Blocks whose first line is ``# requires: accelerator`` run instead in a
  child process against the fake CUDA driver of tests/fake_driver
  (``MAX_DRIVER_BACKEND=cuda``, ``MAX_DRIVER_CUDA_LIBRARY=<fake>``), again in
  order with one namespace per page.
- Any exception fails the test, with the page and line of the block.
- docs/api.md must name every public name of ``max.driver`` (``__all__``),
  every public member of each class found at run time, and the signature
  ``help()`` shows for every native callable, so the reference cannot fall
  behind the code.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

from max import driver

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
FAKE_BUILD = REPO_ROOT / "tests" / "fake_driver" / "build.py"
GPU_MARK = "# requires: accelerator"
# Blocks that need a client library, e.g. ``# requires: jax`` (the test
# extra) or ``# requires: torch`` (the interop extra): left out, saying so,
# where it is not installed (the other interpreters
# scripts/test-other-pythons.sh tests have neither).
_REQUIRES = re.compile(r"^# requires: (?P<module>[A-Za-z_][\w.]*)$")
SCRIPT_MARK = "# a script: run it as a file"
PAGES = sorted(DOCS.glob("*.md"))
EXPECTED_PAGES = {"index.md", "guide.md", "api.md", "differences.md", "interop.md"}

_FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)$")


@dataclasses.dataclass
class Block:
    page: str
    line: int  # 1-based line of the first code line
    code: str

    @property
    def mark(self) -> str:
        return self.code.lstrip("\n").split("\n", 1)[0].strip()

    @property
    def needs_accelerator(self) -> bool:
        return self.mark == GPU_MARK

    @property
    def is_script(self) -> bool:
        return self.mark == SCRIPT_MARK

    @property
    def missing_client(self) -> str | None:
        """The library a ``# requires: <module>`` block needs, when it is
        not installed."""
        m = _REQUIRES.match(self.mark)
        if m is None or self.needs_accelerator:
            return None
        module = m.group("module")
        return None if importlib.util.find_spec(module) else module

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page``, in order."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info = m.group("info").strip().split()
        start = i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        assert j < len(lines), f"docs/{page.name}:{i + 1}: unclosed code fence"
        if info and info[0] == "python":
            code = textwrap.dedent("\n".join(lines[start:j])) + "\n"
            blocks.append(Block(page.name, start + 1, code))
        i = j + 1
    return blocks


def _page_id(page: Path) -> str:
    return page.name


def test_docs_pages_exist() -> None:
    assert EXPECTED_PAGES <= {p.name for p in PAGES}
    # The user's pages teach by example: none of them may lose all of its.
    assert EXPECTED_PAGES <= {p.name for p in PAGES_WITH_CPU_EXAMPLES}


def cpu_blocks(page: Path) -> list[Block]:
    return [b for b in python_blocks(page) if not (b.needs_accelerator or b.is_script)]


# Each page parsed once; pages without a CPU example (design notes, driver
# notes) are not test cases.
CPU_BLOCKS = {page: cpu_blocks(page) for page in PAGES}
PAGES_WITH_CPU_EXAMPLES = [page for page in PAGES if CPU_BLOCKS[page]]


@pytest.mark.parametrize("page", PAGES_WITH_CPU_EXAMPLES, ids=_page_id)
def test_cpu_examples_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's CPU blocks, in order, in one namespace, in this process."""
    blocks = CPU_BLOCKS[page]
    left_out = [f"{b.where} ({b.missing_client})" for b in blocks if b.missing_client]
    blocks = [b for b in blocks if not b.missing_client]
    # Children started by an example import this checkout.
    pp = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT) + (os.pathsep + pp if pp else ""))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        try:
            exec(compile(block.code, block.where, "exec"), namespace)
        except BaseException as exc:  # KeyboardInterrupt included
            detail = "".join(traceback.format_exception(exc))
            pytest.fail(f"example at {block.where} raised:\n{detail}")
    if left_out:  # the others ran and passed
        pytest.skip(f"clients not installed: {', '.join(left_out)} not run")


SCRIPT_BLOCKS = [b for p in PAGES for b in python_blocks(p) if b.is_script]


def _run_child(
    args: list[str], cwd: Path, timeout: float, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """A child interpreter of this checkout, without this run's backend
    configuration (MAX_DRIVER_*, FAKE_GPU_*), with `env` added."""
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MAX_DRIVER_", "FAKE_GPU_"))
    }
    pp = child.get("PYTHONPATH")
    child["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    child.update(env)
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child,
        cwd=cwd,
    )


@pytest.mark.parametrize("block", SCRIPT_BLOCKS, ids=lambda b: b.where)
def test_script_examples_run_as_files(block: Block, tmp_path: Path) -> None:
    """A whole-program example, as a file in a fresh interpreter: the
    spawn start method re-imports it there, so it must be one as pasted."""
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    result = _run_child([str(script)], tmp_path, 180)
    assert result.returncode == 0, (
        f"the script at {block.where} failed (exit {result.returncode}):\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )
    assert "Warning" not in result.stderr, result.stderr


# --------------------------------------------------------------------------
# GPU examples, against the fake CUDA driver

_RUNNER = r"""
import json, sys, traceback
blocks = json.load(sys.stdin)
namespace = {"__name__": "docs_gpu"}
for where, code in blocks:
    try:
        exec(compile(code, where, "exec"), namespace)
    except BaseException:
        print("EXAMPLE FAILED at " + where, file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def _load_builder():
    spec = importlib.util.spec_from_file_location("fake_driver_build", FAKE_BUILD)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_fake_driver


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FAKE_BUILD.exists():
        pytest.skip("fake driver sources missing (tests/fake_driver/build.py)")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the fake driver")
    build = _load_builder()
    return Path(build(tmp_path_factory.mktemp("docs-fake")))


GPU_PAGES = [p for p in PAGES if any(b.needs_accelerator for b in python_blocks(p))]


@pytest.mark.parametrize("page", GPU_PAGES, ids=_page_id)
def test_accelerator_examples_run(page: Path, fake_cuda: Path) -> None:
    """The page's ``# requires: accelerator`` blocks on the fake CUDA driver."""
    blocks = [b for b in python_blocks(page) if b.needs_accelerator]
    result = _run_child(
        ["-c", _RUNNER],
        REPO_ROOT,
        120,
        stdin=json.dumps([[b.where, b.code] for b in blocks]),
        MAX_DRIVER_BACKEND="cuda",
        MAX_DRIVER_CUDA_LIBRARY=str(fake_cuda),
        PYTHONUNBUFFERED="1",
    )
    assert result.returncode == 0, (
        f"accelerator examples of docs/{page.name} failed "
        f"(exit {result.returncode}):\n{result.stderr[-6000:]}"
    )


def test_examples_are_marked_consistently() -> None:
    """The marker must be the first line, or the block would run on the CPU."""
    for page in PAGES:
        for block in python_blocks(page):
            if GPU_MARK in block.code:
                assert block.needs_accelerator, (
                    f"{block.where}: '{GPU_MARK}' must be the block's first line"
                )


# --------------------------------------------------------------------------
# The API reference covers the runtime

API_PAGE = DOCS / "api.md"
NATIVE_CLASSES = (
    "Device",
    "DeviceQueue",
    "DeviceGraph",
    "DeviceEvent",
    "CompletionFlag",
    "Buffer",
    "DevicePinnedBuffer",
)
# Special methods every reader knows; documented as "==, hash, repr" instead.
_OBJECT_DUNDERS = set(dir(object)) | {"__reduce__"}
# Protocol methods users call or hand to other libraries: documented too.
_PROTOCOL_DUNDERS = {
    "__cuda_stream__",
    "__dlpack__",
    "__dlpack_device__",
    "__array__",
    "__cuda_array_interface__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__await__",
    "__buffer__",  # Python 3.12+ show the buffer protocol as these two
    "__release_buffer__",
}


def _is_sunder(name: str) -> bool:
    """enum's own names (``_member_map_``, ``_generate_next_value_``)."""
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_"


def _class_members(cls: type) -> list[str]:
    """Members a user can call: public names, the SPEC's ``__unsafe_*``
    methods, the protocol methods above and the single-underscore names of
    the native types (``_device_context_ptr``, ``_unsafe_ptr``, but not
    enum's own names of ``Usage``)."""
    names: list[str] = []
    for name in vars(cls):
        if name in _OBJECT_DUNDERS or name.startswith("__dataclass"):
            continue
        if name.startswith("__") and name.endswith("__"):
            if name in _PROTOCOL_DUNDERS:
                names.append(name)
            continue
        if _is_sunder(name) and issubclass(cls, enum.Enum):
            continue
        if name.startswith("_") and cls.__module__ != "max._core.driver":
            continue
        names.append(name)
    if dataclasses.is_dataclass(cls):
        names += [f.name for f in dataclasses.fields(cls)]
    return sorted(set(names))


def _api_sections() -> dict[str, str]:
    """docs/api.md's ``### `Name` `` sections: heading name -> body."""
    text = API_PAGE.read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    for part in re.split(r"^### ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.strip().strip("`")] = body.split("\n## ", 1)[0]
    return sections


def _public_classes() -> list[tuple[str, type]]:
    return [
        (name, obj)
        for name in driver.__all__
        if isinstance(obj := getattr(driver, name), type)
    ]


def test_api_has_a_section_for_every_public_name() -> None:
    sections = _api_sections()
    names = [*driver.__all__, "DeviceStream", "__unsafe_pack_py_host_func"]
    missing = [n for n in names if n not in sections]
    assert not missing, f"docs/api.md has no '### `name`' section for: {missing}"


def test_api_has_a_section_for_every_class_member() -> None:
    sections = _api_sections()
    missing = [
        f"{name}.{member}"
        for name, cls in _public_classes()
        for member in _class_members(cls)
        if f"{name}.{member}" not in sections
    ]
    assert not missing, f"docs/api.md has no section for: {missing}"


def _help_signatures() -> dict[str, str]:
    """section name -> ``name(signature)`` as ``help()`` shows it, for every
    native callable."""
    out: dict[str, str] = {}
    for cls_name in NATIVE_CLASSES:
        cls = getattr(driver, cls_name)
        for name, value in vars(cls).items():
            fn = value.__func__ if isinstance(value, staticmethod) else value
            if name in _OBJECT_DUNDERS or not callable(fn):
                continue
            if type(value).__name__ == "classmethod_descriptor":
                fn = getattr(cls, name)  # as help() shows it: without cls
            if getattr(fn, "__text_signature__", None) is None:
                continue
            out[f"{cls_name}.{name}"] = f"{name}{inspect.signature(fn)}"
    for cls_name in (
        "CPU",
        "Accelerator",
        "DeviceQueue",
        "DeviceEvent",
        "CompletionFlag",
        "Buffer",
        "DevicePinnedBuffer",
    ):
        sig = inspect.signature(getattr(driver, cls_name))
        out[cls_name] = f"{cls_name}{sig}"
    for fn_name in (
        "accelerator_count",
        "backend_selection",
        "enable_all_peer_access",
        "__unsafe_pack_py_host_func",
        # virtual device mode's functions
        *(
            n
            for n in driver.__all__
            if n.startswith(("set_virt", "get_virt", "is_virt"))
        ),
    ):
        sig = inspect.signature(getattr(driver, fn_name))
        out[fn_name] = f"{fn_name}{sig}"
    return out


def test_api_shows_help_signatures() -> None:
    sections = _api_sections()
    wrong = {
        where: sig
        for where, sig in _help_signatures().items()
        if sig not in sections.get(where, "")
    }
    assert not wrong, (
        "docs/api.md does not show these signatures (section: signature) as "
        f"help() does: {wrong}"
    )


OVERLOADED = (
    "DeviceQueue.record_event",
    "DeviceQueue.wait_for",
    "Buffer",
    "Buffer.zeros",
    "Buffer.copy",
    "Buffer.to",
    "DevicePinnedBuffer",
)


def test_api_documents_overloads() -> None:
    """Every overload a docstring lists is in the section, word for word."""
    sections = _api_sections()
    for where in OVERLOADED:
        obj = driver
        for part in where.split("."):
            obj = getattr(obj, part)
        doc = obj.__doc__
        assert doc
        overloads = re.findall(r"^\s*\d+\. (\w+\(.*\)(?: -> .+)?)$", doc, re.M)
        assert len(overloads) >= 2, doc
        body = sections[where]
        missing = [o for o in overloads if o not in body]
        assert not missing, f"{where}: overloads missing: {missing}"
