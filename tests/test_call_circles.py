"""No call circles between the files of a layer: following the calls from
one file to another never leads back to where it started.

A circle means no file of it can be read, tested or changed without the
others.  The checks read the sources (no compiler): for C, which file
defines each global name (a function or data without ``static``) and which
files mention it; for Python, which modules import which, lazy imports
inside functions included.  Calls through function-pointer tables (the
backend operations, the fork and exit hooks that init.c registers with
process.c) are the intended way to call upwards, and are not edges.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Comments, string and character literals: nothing in them is a call.
_C_NOISE = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S
)
_C_IDENT = re.compile(r"[A-Za-z_]\w*")
_C_FUNCTION = re.compile(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$")
_C_DATA = re.compile(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$")


def _declarations(code: str) -> Iterable[tuple[str, bool]]:
    """(text, is a function definition) of each file-scope declaration; a
    braced initializer or type body is left out of the text."""
    depth, start, head = 0, 0, ""
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                head += code[start:i]
                if "=" not in head and _C_FUNCTION.search(_clean(head)):
                    yield _clean(head), True
                    head = ""
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif ch == ";" and depth == 0:
            yield _clean(head + code[start:i]), False
            head, start = "", i + 1


def _clean(text: str) -> str:
    """One line, preprocessor lines dropped."""
    lines = (ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    return " ".join(" ".join(lines).split())


def _c_definitions(code: str) -> set[str]:
    """The global (not static) functions and data a C file defines."""
    names = set()
    for text, is_function in _declarations(code):
        words = text.split()
        if not words or words[0] in ("static", "extern", "typedef"):
            continue
        if is_function:
            names.add(_C_FUNCTION.search(text).group(1))  # type: ignore[union-attr]
            continue
        head = text.split("=")[0].strip()
        if "(" in head or (words[0] in ("struct", "enum", "union") and len(words) <= 2):
            continue  # a prototype, or a type's definition
        if match := _C_DATA.search(head):
            names.add(match.group(1))
    return names


def c_call_graph(directory: Path) -> dict[str, set[str]]:
    """File stem -> the stems of the other files whose global names it uses."""
    codes = {
        p.stem: _C_NOISE.sub(" ", p.read_text()) for p in sorted(directory.glob("*.c"))
    }
    owner = {n: stem for stem, code in codes.items() for n in _c_definitions(code)}
    return {
        stem: {owner[w] for w in _C_IDENT.findall(code) if owner.get(w, stem) != stem}
        for stem, code in codes.items()
    }


def python_import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (anywhere in it)."""
    name = package.name
    modules = {p.stem for p in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        used = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x / from .x import y
                    base = f"{name}.{base}" if base else name
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                if parts[0] == name and len(parts) > 1 and parts[1] in modules:
                    used.add(parts[1])
        used.discard(path.stem)
        graph[path.stem] = used
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member
    (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# ---- the checker finds what it must ---------------------------------------


def test_circles_finds_a_circle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_c_graph_sees_calls_and_data_not_statics(tmp_path):
    (tmp_path / "low.c").write_text(
        "#include <x.h>\n"
        "int mxd_counter;\n"
        "const hooks mxd_low_hooks = {\n    a,\n    b,\n};\n"
        "static int helper(void) { return 1; }\n"
        "int mxd_low(int x)\n{\n    return helper() + x;\n}\n"
    )
    (tmp_path / "high.c").write_text(
        "/* mxd_low() in a comment is no call */\n"
        'static const char *s = "mxd_counter";\n'
        "static int helper(void) { return mxd_low(1); }\n"
        "void mxd_high(void)\n{\n    (void)&mxd_low_hooks;\n}\n"
    )
    (tmp_path / "quiet.c").write_text('void f(void) { g("mxd_low"); }\n')
    assert c_call_graph(tmp_path) == {"high": {"low"}, "low": set(), "quiet": set()}
    (tmp_path / "low.c").write_text("void mxd_low(void)\n{\n    mxd_high();\n}\n")
    assert circles(c_call_graph(tmp_path)) == [["high", "low"]]


def test_python_graph_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text("def main():\n    from pkg import cpu\n")
    (pkg / "cpu.py").write_text("from .run import main\nimport os\n")
    (pkg / "common.py").write_text("import pkg.other\n")
    graph = python_import_graph(pkg)
    assert graph["run"] == {"cpu"} and graph["cpu"] == {"run"}
    assert graph["common"] == set()  # pkg.other does not exist
    assert circles(graph) == [["cpu", "run"]]


# ---- the layers of this repository ------------------------------------------


@pytest.mark.parametrize(
    "directory",
    ["csrc/core", "csrc/python"],
)
def test_no_call_circle_in_c(directory):
    graph = c_call_graph(ROOT / directory)
    assert len(graph) > 10 and any(graph.values())  # it read the layer
    assert circles(graph) == []


def test_process_c_calls_no_module_by_name():
    """The fork and exit hooks come as tables (init.c registers them), so
    process.c, which every module calls back, depends on error.c alone."""
    assert c_call_graph(ROOT / "csrc" / "core")["process"] == {"error"}


def test_no_import_circle_in_benchmarks():
    graph = python_import_graph(ROOT / "benchmarks")
    assert "run" in graph and any(graph.values())
    assert circles(graph) == []


def test_the_buffer_object_is_under_every_buffer_file():
    """csrc/python: buffer_object.c (making, allocating and describing a
    Buffer) calls no other Buffer file; buffer.c (the type) is on top."""
    graph = c_call_graph(ROOT / "csrc/python")
    buffer_files = {f for f in graph if f.startswith("buffer") or f == "dlpack"}
    assert not graph["buffer_object"] & buffer_files
    assert not any("buffer" in graph[f] for f in graph if f != "module")


def test_the_capture_recorder_is_reached_through_its_table():
    """csrc/core: queue.c and memory.c route captured work to capture.c
    through mxd_recorder_in_use, which init.c sets, never by name."""
    graph = c_call_graph(ROOT / "csrc/core")
    assert "capture" not in graph["queue"] | graph["memory"]
    assert "queue" in graph["capture"] and "memory" in graph["capture"]
