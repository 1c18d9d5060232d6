"""What the benchmark command and its sections share: a figure (:class:`Result`),
the no-op baseline, process measurements, the table and plot, and the
section registry.

A section is a function that returns figures, registered with
:func:`section`; ``python -m benchmarks`` (benchmarks/run.py) imports every
module of this package and runs the registered sections in ``order``.  A
section module imports this one and nothing else of the package's runner,
so no module of the package imports one that imports it back."""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "results"  # tracked: --save
SCRATCH_DIR = Path(tempfile.gettempdir()) / "max-driver-benchmarks"
NOOP = "zero.bit_length()"  # a METH_NOARGS C method that does nothing


@dataclass
class Result:
    name: str
    ratio: float  # the figure the target applies to
    detail: str  # the raw costs behind the ratio
    target: float | None = None  # None: reported, no target
    higher_is_better: bool = False
    section: str = ""  # the table's heading above this row ("": none)

    @property
    def status(self) -> str:
        if self.target is None:
            return "info"
        met = (
            self.ratio >= self.target
            if self.higher_is_better
            else (self.ratio <= self.target)
        )
        return "PASS" if met else "MISS"

    @property
    def budget_used(self) -> float | None:
        """The figure as a share of its target: at most 1 means PASS."""
        if not self.target:
            return None
        if self.higher_is_better:
            return self.target / self.ratio if self.ratio > 0 else float("inf")
        return self.ratio / self.target

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"{'>=' if self.higher_is_better else '<='} {self.target:g}"


# ---- sections ----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What a section is told about the run."""

    quick: bool = False  # --quick: fewer repetitions (a smoke run, noisier)
    options: argparse.Namespace = field(default_factory=argparse.Namespace)

    @property
    def scale_down(self) -> int:
        """Divide loop counts by this (10 with --quick)."""
        return 10 if self.quick else 1

    def reps(self, full: int, quick: int) -> int:
        """Repetitions: `full` normally, `quick` with --quick."""
        return quick if self.quick else full


@dataclass(frozen=True)
class Section:
    title: str  # the table's heading above its rows
    order: int  # sections run and print in ascending order
    run: Callable[[Run], list[Result]]
    skip_reason: Callable[[], str | None] | None = None
    flag: str | None = None  # runs only when this option is given
    flag_help: str = ""


_SECTIONS: dict[tuple[str, str], Section] = {}


def section(
    title: str,
    *,
    order: int,
    skip_reason: Callable[[], str | None] | None = None,
    flag: str | None = None,
    flag_help: str = "",
) -> Callable[[Callable[[Run], list[Result]]], Callable[[Run], list[Result]]]:
    """Registers the decorated ``fn(run: Run) -> list[Result]`` as a section.

    ``skip_reason()`` returns why the section cannot run here (the runner
    prints it instead), or None.  With ``flag`` (e.g. ``"--vs-max"``) the
    runner adds that option and runs the section only when it is given.
    Results without a section of their own are put under ``title``; several
    sections may share a title (one heading when they are adjacent)."""

    def register(fn: Callable[[Run], list[Result]]) -> Callable[[Run], list[Result]]:
        key = (fn.__module__, fn.__qualname__)  # re-registering replaces
        _SECTIONS[key] = Section(title, order, fn, skip_reason, flag, flag_help)
        return fn

    return register


def sections() -> list[Section]:
    """Every registered section, in order."""
    return sorted(_SECTIONS.values(), key=lambda s: s.order)


# ---- process measurements ------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


# ---- output -------------------------------------------------------------------


def machine() -> dict[str, str]:
    from max import driver

    model = driver.CPU().model_name
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "system": platform.platform(),
        "backend": driver.accelerator_api(),
    }


def table(results: list[Result]) -> str:
    """The results as a text table, a ``[section]`` line wherever the section
    changes."""
    header = ("benchmark", "ratio", "target", "status", "measured")
    rows = [
        (r.name, f"{r.ratio:.2f}", r.target_text(), r.status, r.detail) for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]

    def line(row: tuple[str, ...]) -> str:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        return " | ".join(cells).rstrip()

    lines = [line(header), "-+-".join("-" * w for w in widths) + "-+-" + "-" * 8]
    section = ""
    for result, row in zip(results, rows, strict=True):
        if result.section != section:
            section = result.section
            lines.append(f"[{section}]")
        lines.append(line(row))
    return "\n".join(lines)


def plot(results: list[Result], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    # Figures have different units and baselines: draw each as the share of
    # its target it uses, so one axis shows them all (1 is the target).
    shown = [r for r in results if r.budget_used is not None]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(shown) + 1.5))
    colors = ["tab:green" if r.status == "PASS" else "tab:red" for r in shown]
    y = list(range(len(shown)))
    ax.barh(y, [max(r.budget_used or 0, 0) for r in shown], color=colors)
    ax.axvline(1.0, color="black", linewidth=1, label="target")
    ax.set_yticks(y, [f"{r.name} ({r.target_text()})" for r in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of the target used (below 1: target met)")
    ax.legend(loc="lower right")
    ax.set_title(f"max.driver benchmarks — {machine()['cpu']}", fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
