"""examples/quickstart.ipynb: saved with outputs, and it runs top to bottom in
a real Jupyter kernel (nbclient + ipykernel) with the CPU backend only."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
ipykernel_spec = pytest.importorskip("ipykernel.kernelspec")

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO_ROOT / "examples" / "quickstart.ipynb"
README = REPO_ROOT / "README.md"
PYPROJECT = REPO_ROOT / "pyproject.toml"
CELL_TIMEOUT = 60
ORDER = ["a: first", "a: after the flag", "b: after a", "b: second"]

# Appended to the copy that the test executes: what the kernel really ran.
PROBE = """\
import json, os, sys
import max.driver
print("PROBE" + json.dumps({
    "executable": sys.executable,
    "backend": os.environ.get("MAX_DRIVER_BACKEND"),
    "accelerators": max.driver.accelerator_count(),
    "chosen": [e["api"] for e in max.driver.backend_selection() if e["chosen"]],
}))
"""


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def text_of(cell):
    """Everything a cell printed or displayed, as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts.append(out.get("data", {}).get("text/plain", ""))
            parts.append(out.get("data", {}).get("text/markdown", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
    return "\n".join(parts)


def check_outputs(nb):
    """What a reader of the notebook must see, saved or freshly run."""
    cells = code_cells(nb)
    assert cells
    for i, cell in enumerate(cells, 1):
        assert cell.outputs, f"code cell {i} has no output:\n{cell.source}"
        kinds = {out.output_type for out in cell.outputs}
        assert "error" not in kinds, text_of(cell)
        for out in cell.outputs:
            if out.output_type == "stream" and out.name == "stderr":
                # e.g. an exception in a host function (sys.unraisablehook)
                for bad in ("Traceback", "Exception ignored", "Error"):
                    assert bad not in out.text, f"code cell {i}:\n{out.text}"
    everything = "\n".join(text_of(c) for c in cells)
    # backend selection table, device table, reprs, ordering, timings, plot
    assert "| api | library | loaded | device_count | error | chosen |" in everything
    assert "Device(type=cpu,id=0)" in everything
    assert "cpu[0]:queue@0x" in everything and "(default)" in everything
    assert "cpu[0]:event@0x" in everything
    assert "CompletionFlag(device=Device(type=cpu,id=0)" in everything
    assert "before the signal: ['a: first']" in everything
    order_cell = next(c for c in cells if "before the signal" in text_of(c))
    table = next(
        out.data["text/markdown"]
        for out in order_cell.outputs
        if out.output_type == "display_data"
    )
    ran = [line.split(" | ")[1] for line in table.splitlines()[2:]]
    assert ran == ORDER
    assert "TimeoutError: " in everything
    assert "queue.record_event()" in everything and "ns per call" in everything
    assert "event.is_ready()" in everything
    assert "elapsed_time (ms)" in everything
    # buffers: a NumPy alias, views, and a copy ordered by hazard records
    assert "max.driver.Buffer(DType.float32, (3, 4), cpu[0])" in everything
    assert "data[0, 1] after writing through the view: -1.0" in everything
    assert "to_numpy() shares the array's memory: True" in everything
    assert "| buf[::-1, :] | (3, 4) | (-4, 1) | DType.float32 | False |" in everything
    assert "while dst_q is gated: ['src_q: after the copy']" in everything
    assert "target (waits for the copy): [0 1 2 3]" in everything
    pngs = [
        out for c in cells for out in c.outputs if "image/png" in out.get("data", {})
    ]
    assert len(pngs) == 1, "expected one matplotlib figure"
    # graph capture: MAX's scenario, and to_dot() drawn (or how to draw it)
    assert "launched 100 times; last result: [99. 99. 99. 99.]" in everything
    graph_cell = next(c for c in cells if "md.capture" in c.source)
    svgs = [o for o in graph_cell.outputs if "image/svg+xml" in o.get("data", {})]
    assert svgs or "Graphviz's dot is not installed" in text_of(graph_cell)
    assert not svgs or "wait for host value" in svgs[0].data["image/svg+xml"]


def test_saved_notebook_has_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"save the notebook after one clean run from the top: {counts}"
    )
    check_outputs(nb)


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A ``python3`` kernelspec for this interpreter (first on JUPYTER_PATH),
    private Jupyter/IPython directories, and the CPU backend forced."""
    jupyter = tmp_path / "jupyter"
    ipykernel_spec.write_kernel_spec(jupyter / "kernels" / "python3")
    spec = json.loads((jupyter / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend
    for name in list(os.environ):
        if name.startswith("MAX_DRIVER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MAX_DRIVER_BACKEND", "cpu")
    pp = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT) + (os.pathsep + pp if pp else ""))
    return jupyter


def test_notebook_runs_in_a_kernel_on_cpu_only(kernel_env, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        startup_timeout=60,
        allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError on any error

    probe = text_of(nb.cells[-1])
    info = json.loads(probe[probe.index("PROBE") + len("PROBE") :])
    assert info == {
        "executable": sys.executable,
        "backend": "cpu",
        "accelerators": 0,
        "chosen": [],
    }
    nb.cells.pop()
    check_outputs(nb)
    selection = next(c for c in code_cells(nb) if "backend_selection()" in c.source)
    assert "not tried: MAX_DRIVER_BACKEND=cpu" in text_of(selection)


def _notebook_extra() -> set[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {canonicalize_name(Requirement(r).name) for r in extras["notebook"]}


def _third_party_imports(nb) -> set[str]:
    """Top-level modules the notebook imports, less the stdlib and max."""
    names = set()
    for cell in code_cells(nb):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"max"}


def test_notebook_extra_installs_what_the_notebook_imports():
    """A reader who runs pip install -e '.[notebook]' can run every cell."""
    from packaging.utils import canonicalize_name

    nb = nbformat.read(NOTEBOOK, as_version=4)
    imported = _third_party_imports(nb)
    assert {"IPython", "matplotlib"} <= imported  # what the parser must find
    dists = packages_distributions()
    extra = _notebook_extra()
    for module in imported:
        provided_by = {canonicalize_name(d) for d in dists.get(module, [module])}
        assert provided_by & extra, f"{module} is not in the notebook extra {extra}"
    assert {"jupyterlab", "ipykernel"} <= extra  # to open it and run its kernel


def test_readme_installs_the_notebook_extra_to_open_it():
    text = README.read_text()
    command = r"pip install -e '\.\[notebook\]' &&\s+jupyter lab\s+"
    line = re.search(command + re.escape("examples/quickstart.ipynb"), text)
    assert line, "README: install the notebook extra before opening the notebook"
