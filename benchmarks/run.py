"""The benchmark command: ``python -m benchmarks [--quick] [--save | --out DIR]``.

Every figure is a ratio of two costs measured in the same process, with the
two measurements interleaved and each ratio the median of several
repetitions, so that a busy machine slows both sides alike.  Results are
printed as a table, written as JSON and drawn as a PNG (when matplotlib is
importable): into a folder of the temporary directory, so that a run changes
no tracked file, or with ``--save`` into benchmarks/results.

The figures come from the sections registered with
``benchmarks.common.section``: this runner imports every module of the
package (so a new module's sections need no edit here) and runs them in
order.  It imports no section module by name, and none imports it."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import benchmarks
from benchmarks import common
from benchmarks.common import Result, Run, Section

# Not sections: the runner itself, its shared pieces, and the probe that
# --vs-max runs as a script under each package (it parses its own argv).
NOT_SECTIONS = ("__main__", "run", "common", "vs_max_probe")


def load_sections() -> list[Section]:
    """Imports every module of the package; returns the registered sections."""
    for module in pkgutil.iter_modules(benchmarks.__path__):
        if module.name not in NOT_SECTIONS:
            importlib.import_module(f"benchmarks.{module.name}")
    return common.sections()


def _flag_dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def run_sections(
    sections: list[Section], run: Run, say: Callable[[str], None] = print
) -> list[Result]:
    """Each section's figures in order; a section that cannot run here says
    why (once per heading and reason), and one behind an option not given
    is left out."""
    results: list[Result] = []
    said: set[tuple[str, str]] = set()
    for sec in sections:
        if sec.flag and not getattr(run.options, _flag_dest(sec.flag), False):
            continue
        reason = sec.skip_reason() if sec.skip_reason else None
        if reason:
            if (sec.title, reason) not in said:
                say(f"[{sec.title}] skipped: {reason}")
                said.add((sec.title, reason))
            continue
        for result in sec.run(run):
            result.section = result.section or sec.title
            results.append(result)
    return results


def parser(sections: list[Section]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions (a smoke run, noisier)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where to write latest.json, latest.txt and latest.png (default: "
        f"{common.SCRATCH_DIR})",
    )
    where.add_argument(
        "--save",
        action="store_true",
        help=f"write them to {common.OUT_DIR}, the tracked results",
    )
    flags = {sec.flag: sec for sec in sections if sec.flag}
    for flag, sec in flags.items():
        parser.add_argument(
            flag, action="store_true", help=sec.flag_help or f"run [{sec.title}]"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    sections = load_sections()
    args = parser(sections).parse_args(argv)
    run = Run(quick=args.quick, options=args)
    out = common.OUT_DIR if args.save else (args.out or common.SCRATCH_DIR)

    results = run_sections(sections, run)

    machine = common.machine()
    print(f"machine: {machine}")
    text = common.table(results)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine,
        "results": [asdict(r) | {"status": r.status} for r in results],
    }
    (out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "latest.txt").write_text(text + "\n")
    print(f"results: {out / 'latest.json'}, {out / 'latest.txt'}")
    if common.plot(results, out / "latest.png"):
        print(f"plot: {out / 'latest.png'}")
    missed = [r.name for r in results if r.status == "MISS"]
    print(f"{len(missed)} target(s) missed" + (f": {missed}" if missed else ""))
    return 0
