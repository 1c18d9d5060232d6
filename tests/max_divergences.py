"""The divergence table (docs/max-26.7-divergences.json): loading it,
comparing two runs of a program against it, and rendering it into
docs/differences.md.  Not a test module.

    python tests/max_divergences.py    rewrites the rendered section of
                                       docs/differences.md from the table

A run of one program under each package gives one observation per step
(tests/max_runner.py).  ``compare`` turns two observations into the names
of the fields that differ (``exc``, ``values``, ``repr``, ``after.values``
for a variable the step wrote, ...), and each such field must be explained
by an entry of the table: one of its matchers names the step (``names``,
``"*"`` for any), its tags include every tag the matcher lists in ``tags``,
at least one of ``any`` when given (a list of such lists: one of each) and
none of ``none``, and the field is among its ``fields``.

Once two runs disagree about a variable or a storage, the steps that touch
it are not compared any more (they would only repeat the first
divergence), unless the fields that differed are descriptive only
(``repr``, ``str``, ``usage``, ``_host_hazard_tracked``, ``writeable``).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
TABLE = REPO_ROOT / "docs" / "max-26.7-divergences.json"
DIFFERENCES = REPO_ROOT / "docs" / "differences.md"
BEGIN = "<!-- max-26.7-divergences: generated from docs/max-26.7-divergences.json -->"
END = "<!-- max-26.7-divergences: end -->"
DESCRIPTIVE = {"repr", "str", "usage", "_host_hazard_tracked", "writeable"}
CLASSES = {
    "max-wrong": "MAX 26.7 is wrong here",
    "beyond": "We go beyond",
    "deliberate": "Deliberately different",
}


@dataclass
class Divergence:
    program: str
    step: int
    name: str
    tags: list[str]
    field: str
    ours: Any
    theirs: Any
    entry: str | None = None

    def __str__(self) -> str:
        return (
            f"{self.program} step {self.step} {self.name} [{' '.join(self.tags)}]"
            f" field {self.field}: ours {_short(self.ours)} / MAX {_short(self.theirs)}"
        )


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class Outcome:
    divergences: list[Divergence] = field(default_factory=list)
    compared: int = 0  # steps compared
    skipped: int = 0  # steps not compared: they touch a diverged variable or storage


def summary(table: dict[str, Any], outcomes: list[Outcome]) -> str:
    """One run's figures: steps compared and skipped, and the divergences
    by class and by entry (most first)."""
    klass = {e["id"]: e["class"] for e in table["entries"]}
    by_entry: Counter[str] = Counter()
    for outcome in outcomes:
        by_entry.update(d.entry or "UNLISTED" for d in outcome.divergences)
    by_class: Counter[str] = Counter()
    for entry, count in by_entry.items():
        by_class[klass.get(entry, entry)] += count
    return (
        f"{len(outcomes)} programs, {sum(o.compared for o in outcomes)} steps "
        f"compared, {sum(o.skipped for o in outcomes)} skipped after a "
        f"divergence; divergences by class {dict(by_class.most_common())}; "
        f"by entry {dict(by_entry.most_common())}"
    )


def load_table(path: Path = TABLE) -> dict[str, Any]:
    table = json.loads(path.read_text(encoding="utf-8"))
    ids = [e["id"] for e in table["entries"]]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate ids in {path}")
    for entry in table["entries"]:
        if entry["class"] not in CLASSES:
            raise ValueError(f"{entry['id']}: unknown class {entry['class']!r}")
    return table


def _fields(prefix: str, a: Any, b: Any) -> Iterable[tuple[str, Any, Any]]:
    """The differing fields of two descriptions (a list's items compared
    one by one, as ``items.<field>``)."""
    if (
        isinstance(a, dict)
        and isinstance(b, dict)
        and "kind" in a
        and a.get("kind") == b.get("kind")
    ):
        for key in sorted(set(a) | set(b)):
            x, y = a.get(key), b.get(key)
            if x == y:
                continue
            if (
                key == "items"
                and isinstance(x, list)
                and isinstance(y, list)
                and len(x) == len(y)
            ):
                seen = set()
                for p, q in zip(x, y, strict=True):
                    for fld, u, v in _fields(prefix + "items.", p, q):
                        if fld not in seen:
                            seen.add(fld)
                            yield fld, u, v
            else:
                yield prefix + key, x, y
    elif a != b:
        yield prefix + ("result" if not prefix else "value"), a, b


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The fields in which two observations of one step differ."""
    if "exc" in a or "exc" in b:
        if a.get("exc") != b.get("exc"):
            return [
                (
                    "exc",
                    a.get("exc") or a.get("result"),
                    b.get("exc") or b.get("result"),
                )
            ]
        diffs = []
    else:
        diffs = list(_fields("", a.get("result"), b.get("result")))
    for key in sorted(k for k in set(a) | set(b) if k.startswith("v")):
        diffs += _fields("after.", a.get(key), b.get(key))
    return diffs


def _matches(matcher: dict[str, Any], name: str, tags: set[str], fld: str) -> bool:
    names = matcher.get("names", ["*"])
    if "*" not in names and name not in names:
        return False
    if not set(matcher.get("tags", [])) <= tags:
        return False
    groups = matcher.get("any", [])
    if groups and not isinstance(groups[0], list):
        groups = [groups]
    if any(not tags & set(group) for group in groups):
        return False
    if "none" in matcher and tags & set(matcher["none"]):
        return False
    return fld in matcher["fields"]


def explain(table: dict[str, Any], name: str, tags: set[str], fld: str) -> str | None:
    for entry in table["entries"]:
        if any(_matches(m, name, tags, fld) for m in entry["match"]):
            return entry["id"]
    return None


def compare_program(
    table: dict[str, Any], program: dict[str, Any], ours: Any, theirs: Any
) -> Outcome:
    out = Outcome()
    pid = program["id"]
    if (
        isinstance(ours, dict)
        or isinstance(theirs, dict)
        or ours is None
        or theirs is None
    ):
        # A crash (or a runner failure) on either side: ours is never listed.
        ours_text = ours.get("crash") if isinstance(ours, dict) else "ran"
        theirs_text = theirs.get("crash") if isinstance(theirs, dict) else "ran"
        index = (theirs or ours or {}).get("step", -1)
        step = program["steps"][index] if 0 <= index < len(program["steps"]) else {}
        name = step.get("name", "program")
        # A crash may come from any step before it that corrupted memory:
        # its tags are every tag up to it.
        tags = sorted({t for s in program["steps"][: index + 1] for t in s["tags"]})
        div = Divergence(pid, index, name, tags, "crash", ours_text, theirs_text)
        if isinstance(theirs, dict) and not isinstance(ours, dict):
            div.entry = explain(table, name, set(tags), "crash")
        out.divergences.append(div)
        return out
    tainted_vars: set[int] = set()
    tainted_storages: set[int] = set()
    for index, (step, a, b) in enumerate(
        zip(program["steps"], ours, theirs, strict=True)
    ):
        touched = set(step["reads"]) | set(step["writes"])
        observed = {v for v, _ in step.get("observe", [])}
        if tainted_vars & (set(step["uses"]) | observed) or tainted_storages & touched:
            out.skipped += 1
            _taint(step, tainted_vars, tainted_storages)
            continue
        out.compared += 1
        tags = set(step["tags"])
        diffs = compare(a, b)
        for fld, x, y in diffs:
            div = Divergence(
                pid,
                index,
                step["name"],
                step["tags"],
                fld,
                x,
                y,
                explain(table, step["name"], tags, fld),
            )
            out.divergences.append(div)
        if any(f.split(".")[-1] not in DESCRIPTIVE for f, _, _ in diffs):
            _taint(step, tainted_vars, tainted_storages)
    return out


def _taint(step: dict[str, Any], variables: set[int], storages: set[int]) -> None:
    if step.get("out") is not None:
        variables.add(step["out"])
    storages.update(step["writes"])
    variables.update(v for v, _ in step.get("observe", []))


# ---- rendering ----------------------------------------------------------------


def render(table: dict[str, Any]) -> str:
    """The section of docs/differences.md that lists every divergence."""
    lines = [BEGIN, ""]
    for cls, heading in CLASSES.items():
        entries = [e for e in table["entries"] if e["class"] == cls]
        if not entries:
            continue
        lines += [f"#### {heading}", ""]
        for entry in entries:
            text = f"- **{entry['title']}** {entry['reason']}"
            lines += textwrap.wrap(
                text,
                75,
                subsequent_indent="  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            lines.append("")
    lines.append(END)
    return "\n".join(lines)


def rendered_section(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def rewrite_docs() -> bool:
    """Rewrites the section; True when it changed."""
    text = DIFFERENCES.read_text(encoding="utf-8")
    new = text.replace(rendered_section(text), render(load_table()))
    if new != text:
        DIFFERENCES.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    changed = rewrite_docs()
    print(f"{DIFFERENCES}: {'rewritten' if changed else 'already up to date'}")
    sys.exit(0)
