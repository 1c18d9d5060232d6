"""The landing page and the documents around it (issue 26): the README is
short, names the two commands CI runs, and its example runs as pasted into
`python`; CONTRIBUTING's benchmark example registers a section that runs;
no document sends readers to files outside the repository; every relative
link resolves.  (docs/*.md's own examples run in tests/test_docs.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [
    README,
    ROOT / "CONTRIBUTING.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
INSTALL = "pip install -e . && python -m max.driver"
TEST = "pip install -e '.[test]' && python -m pytest"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _python(args: list[str], cwd: Path, stdin: str | None = None):
    """A fresh interpreter outside the checkout that imports this checkout's
    max and benchmarks (through PYTHONPATH, as the editable install would)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_readme_is_a_landing_page():
    text = README.read_text()
    assert len(text.encode()) < 8 * 1024
    commands = [ln.strip() for ln in text.splitlines() if ln.startswith("    ")]
    assert INSTALL in commands and TEST in commands
    for heading in (
        "## Install and check",
        "## A first program",
        "## Where to go next",
    ):
        assert heading in text


def test_ci_runs_the_readme_test_command():
    """.ci/run installs the test extra (and more) editable, then runs the
    README's test command from the root of the checkout."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = next(i for i, ln in enumerate(lines) if "pip install -e '.[test" in ln)
    assert lines[install + 1] == "python3 -m pytest"


def test_readme_example_runs_as_pasted(tmp_path):
    """Fed line by line to an interactive interpreter, as a paste is, in a
    folder outside the checkout (the package comes from PYTHONPATH here, as
    from the install in the README)."""
    (block,) = _BLOCK.findall(README.read_text())
    proc = _python(["-i", "-q"], tmp_path, stdin=block)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines() == [
        "[]",
        "['ran']",
        "[[0. 1. 2.]",
        " [3. 4. 5.]]",
    ]


def test_contributing_benchmark_example_registers_a_section(tmp_path):
    (block,) = _BLOCK.findall((ROOT / "CONTRIBUTING.md").read_text())
    check = (
        "\nfrom benchmarks import common, run\n"
        "(mine,) = [s for s in common.sections() if s.title == 'my feature']\n"
        "(result,) = run.run_sections([mine], common.Run(quick=True))\n"
        "assert result.section == 'my feature' and result.status == 'PASS'\n"
        "print('registered')\n"
    )
    proc = _python(["-c", block + check], tmp_path)
    assert proc.stdout.strip() == "registered", proc.stdout + proc.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_points_outside_the_repository(page):
    """SPEC.md and DESIGN.md were the project's working papers; readers of
    the repository do not have them."""
    text = page.read_text()
    found = re.findall(r"SPEC\b|DESIGN\.md|\.\./shared", text)
    assert not found, f"{page.name} refers to {sorted(set(found))}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_the_package_names_no_outside_document():
    shipped = [
        p
        for p in (ROOT / "max").rglob("*")
        if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts
    ]
    found = [
        str(p.relative_to(ROOT))
        for p in shipped
        if re.search(r"SPEC\b|DESIGN\.md", p.read_text())
    ]
    assert not found
