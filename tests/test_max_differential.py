"""Modular's max==26.7.0 as the oracle: the same programs run under MAX's
wheel and under this project, and every observable result is compared.

A program is a list of steps (tests/max_runner.py's language); each step's
observation is its result (a Buffer's dtype, shape, strides, flags, repr
and values element by element; an array's dtype, shape, strides and
bytes; the type and text of anything else) or the type of the exception
it raised.  Two parts:

- seeded random programs of CPU operations (tests/max_programs.py), as
  many as ``MAX_DRIVER_DIFF_PROGRAMS`` (default 600) from the seed
  ``MAX_DRIVER_DIFF_SEED`` (default: fixed, so CI's failures reproduce);
- the named cases (tests/max_named.py): the witnesses of the divergence
  table, and the behaviours where we conform to MAX.

Every divergence must be explained by an entry of the one table,
docs/max-26.7-divergences.json (which docs/differences.md renders), and
every entry's named cases must still diverge as it says.  MAX's wheel
lives in a virtual environment of its own (tests/max_wheel.py), made on
first use: without network the tests skip saying why, except in CI
(``MAX_DRIVER_REQUIRE_MAX_WHEEL=1``), where they must run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import max_divergences as md
import max_named
import max_programs
import max_wheel
import pytest

PROGRAMS = int(os.environ.get("MAX_DRIVER_DIFF_PROGRAMS", "600"))
SEED = int(os.environ.get("MAX_DRIVER_DIFF_SEED", "24"))


def _max_python_or_skip() -> Path:
    try:
        return max_wheel.ensure_venv()
    except max_wheel.Unavailable as exc:
        if max_wheel.required():
            pytest.fail(f"MAX_DRIVER_REQUIRE_MAX_WHEEL=1 but {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def max_python() -> Path:
    return _max_python_or_skip()


def test_without_network_it_skips_saying_why_unless_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index to reach (a closed port): a skip naming the reason, a
    failure where CI requires the wheel, and no half-made environment."""
    monkeypatch.setenv("MAX_DRIVER_MAX_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple")
    monkeypatch.delenv("MAX_DRIVER_REQUIRE_MAX_WHEEL", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no network: 127.0.0.1:1"):
        _max_python_or_skip()
    monkeypatch.setenv("MAX_DRIVER_REQUIRE_MAX_WHEEL", "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_MAX_WHEEL=1 but no"):
        _max_python_or_skip()
    assert [p.name for p in tmp_path.iterdir()] == [".venv.lock"]


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    return md.load_table()


def compare_all(
    table: dict[str, Any], programs: list[dict[str, Any]], max_python: Path
) -> tuple[dict[str, md.Outcome], max_wheel.Run]:
    ours, theirs = max_wheel.run_both(programs, max_python)
    assert not ours.aftermath, f"our interpreter died after programs: {ours.aftermath}"
    outcomes = {
        p["id"]: md.compare_program(
            table, p, ours.obs.get(p["id"]), theirs.obs.get(p["id"])
        )
        for p in programs
    }
    return outcomes, theirs


@pytest.fixture(scope="module")
def named(max_python: Path, table: dict[str, Any]) -> dict[str, md.Outcome]:
    outcomes, _ = compare_all(table, max_named.all_programs(), max_python)
    return {name.removeprefix("case:"): outcome for name, outcome in outcomes.items()}


@pytest.fixture(scope="module")
def random_runs(max_python: Path, table: dict[str, Any]) -> list[md.Outcome]:
    programs = [
        max_programs.random_program(SEED * 1_000_003 + i) for i in range(PROGRAMS)
    ]
    outcomes, theirs = compare_all(table, programs, max_python)
    # MAX's interpreter may die in a program after the one that corrupted
    # its memory; that program then ran again alone, and is compared.
    print(f"MAX died after earlier programs' corruption in: {theirs.aftermath}")
    print(md.summary(table, list(outcomes.values())))
    return list(outcomes.values())


def _report(divergences: list[md.Divergence], limit: int = 25) -> str:
    lines = [str(d) for d in divergences[:limit]]
    if len(divergences) > limit:
        lines.append(f"... and {len(divergences) - limit} more")
    return "\n".join(lines)


def test_random_programs_diverge_only_as_the_table_says(
    random_runs: list[md.Outcome],
) -> None:
    unlisted = [d for run in random_runs for d in run.divergences if d.entry is None]
    compared = sum(run.compared for run in random_runs)
    assert compared > 5 * PROGRAMS, "the programs compared too few steps to mean much"
    assert not unlisted, (
        f"{len(unlisted)} divergences from MAX 26.7 that "
        f"docs/max-26.7-divergences.json does not list (fix them, or list "
        f"them with their reason):\n{_report(unlisted)}"
    )


def test_every_table_entry_still_diverges(
    named: dict[str, md.Outcome], table: dict[str, Any]
) -> None:
    stale = []
    for entry in table["entries"]:
        assert entry["cases"], f"{entry['id']} names no case that shows it"
        for name in entry["cases"]:
            assert name in named, f"{entry['id']} names an unknown case {name!r}"
            if not any(d.entry == entry["id"] for d in named[name].divergences):
                stale.append(f"{entry['id']}: case {name!r} no longer diverges")
    assert not stale, "table entries MAX 26.7 no longer differs on:\n" + "\n".join(
        stale
    )


def test_named_cases_diverge_only_as_the_table_says(
    named: dict[str, md.Outcome], table: dict[str, Any]
) -> None:
    witnessed = {name for e in table["entries"] for name in e["cases"]}
    wrong = []
    for name, outcome in named.items():
        for d in outcome.divergences:
            if d.entry is None or (
                name not in witnessed and d.entry not in max_named.ALWAYS
            ):
                wrong.append(d)
    assert not wrong, (
        "named cases that differ from MAX 26.7 where they should not:\n"
        + _report(wrong)
    )


def test_the_table_is_rendered_in_the_differences_page(table: dict[str, Any]) -> None:
    text = md.DIFFERENCES.read_text(encoding="utf-8")
    assert md.rendered_section(text) == md.render(table), (
        "docs/differences.md's divergence list is out of date: run "
        "`python tests/max_divergences.py`"
    )


def test_a_divergence_outside_the_table_is_caught(table: dict[str, Any]) -> None:
    """Positive control of the comparison: an observation that differs in
    a field no entry explains is unlisted; one an entry explains is not;
    a step after a divergence in a storage is not compared again."""

    def step(name: str, tags: list[str], **storage: list[int]) -> dict[str, Any]:
        base = {"name": name, "tags": tags, "uses": [0], "reads": [], "writes": []}
        return {**base, **storage, "out": None}

    program = {
        "id": "control",
        "steps": [
            step("item", [], reads=[1]),
            step("setitem", ["pending:fill"], writes=[1]),
            step("item", [], reads=[1]),
        ],
    }
    ours = [
        {"result": 1},
        {"result": None, "v0": {"kind": "Buffer", "values": [5]}},
        {"result": 5},
    ]
    theirs = [
        {"result": 2},
        {"result": None, "v0": {"kind": "Buffer", "values": [0]}},
        {"result": 0},
    ]
    outcome = md.compare_program(table, program, ours, theirs)
    assert [(d.step, d.field, d.entry) for d in outcome.divergences] == [
        (0, "result", None),
        (1, "after.values", "cpu-writes-land-late"),
    ]
    assert outcome.skipped == 1
    assert md.summary(table, [outcome]) == (
        "1 programs, 2 steps compared, 1 skipped after a divergence; "
        "divergences by class {'UNLISTED': 1, 'max-wrong': 1}; "
        "by entry {'UNLISTED': 1, 'cpu-writes-land-late': 1}"
    )


def test_a_crash_of_our_side_is_never_listed(table: dict[str, Any]) -> None:
    program = {"id": "crash", "steps": []}
    outcome = md.compare_program(table, program, {"crash": "exit -11"}, [])
    assert [d.entry for d in outcome.divergences] == [None]
