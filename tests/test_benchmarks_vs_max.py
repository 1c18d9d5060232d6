"""``python -m benchmarks --vs-max``: the probe runs under this package in
its own interpreter and yields every row, the table compares two probes'
figures, and the command writes only where it is told.  MAX's side runs the
same probe under the wheel's interpreter (tests/max_wheel.py), which the
differential test already exercises; what the figures are is not checked
(a loaded test machine says nothing about them)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # for `benchmarks`, a top-level directory
    sys.path.insert(0, str(REPO))

from benchmarks import vs_max  # noqa: E402


@pytest.fixture(scope="module")
def ours() -> dict:
    argv = [sys.executable, "-I", str(vs_max.PROBE), "--prepend", str(REPO)]
    return vs_max._probe(argv, quick=True)


def test_probe_measures_every_row_in_its_own_interpreter(ours):
    assert Path(ours["module"]).is_relative_to(REPO)  # this tree's package
    rows = list(ours["per_call"])
    assert rows[-1] == "no-op C call" and len(rows) > 20
    assert {"device.synchronize() idle", "Buffer.from_numpy(a)"} <= set(rows)
    for figure in ours["per_call"].values():
        assert figure["ratio"] > 0 and math.isfinite(figure["ns"])
    assert ours["copy_64MiB"]["ratio"] > 0 and ours["copy_64MiB"]["gbps"] > 0
    assert math.isfinite(ours["memory"]["bytes"])


def test_table_gives_both_figures_their_ratio_and_notes_where_ours_lose(ours):
    theirs = copy.deepcopy(ours)
    theirs["version"] = "26.7.0"
    slower = "device.synchronize() idle"  # a row no note explains
    theirs["per_call"][slower]["ratio"] = ours["per_call"][slower]["ratio"] / 2
    memory = "memory per live Buffer(float32, (16,))"
    theirs["memory"]["bytes"] = ours["memory"]["bytes"] / 2
    lines = vs_max.rows(ours, theirs)
    assert len(lines) == len(ours["per_call"]) + 2  # + the copy and memory
    by_name = {line[0]: line for line in lines}
    assert by_name[slower][3:] == ("2.00", vs_max.UNEXPECTED)
    assert by_name[memory][3:] == ("2.00", vs_max.NOTES[memory])
    assert by_name["buf.to_numpy()"][3:] == ("1.00", vs_max.UNEXPECTED)  # a tie
    assert by_name[vs_max.COPY][3:] == ("1.00", vs_max.NOTES[vs_max.COPY])
    text = vs_max.table(lines, ours, theirs)
    assert "| ours (" in text and "| MAX 26.7.0 |" in text
    assert all(f"| {name} |" in text for name in by_name)
    theirs["per_call"]["record_event()"]["ratio"] *= 2  # ours faster: no note
    faster = {line[0]: line for line in vs_max.rows(ours, theirs)}
    assert faster["record_event()"][3:] == ("0.50", "")


def test_command_writes_only_where_told(tmp_path, monkeypatch, ours, capsys):
    monkeypatch.setattr(vs_max, "measure", lambda quick: (dict(ours), dict(ours)))
    monkeypatch.setattr(vs_max, "OUT_DIR", tmp_path / "tracked")
    assert vs_max.main(["--vs-max", "--quick"]) == 0
    assert not (tmp_path / "tracked").exists()
    assert vs_max.main(["--vs-max", "--out", str(tmp_path / "mine")]) == 0
    saved = json.loads((tmp_path / "mine" / "vs_max.json").read_text())
    figures = {k: v for k, v in ours.items() if k != "module"}  # this machine's
    assert saved == {"ours": figures, "max": figures}
    assert vs_max.main(["--vs-max", "--save"]) == 0
    assert (tmp_path / "tracked" / "vs_max.txt").read_text().startswith("| row |")
    assert "| no-op C call |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        vs_max.main(["--save", "--out", str(tmp_path)])


def test_benchmarks_command_dispatches_vs_max():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--vs-max", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "python -m benchmarks --vs-max" in proc.stdout
    assert "Modular's MAX 26.7 wheel" in proc.stdout
