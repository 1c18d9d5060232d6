"""The command line of ``python -m max.driver``: its options, what it says
when ``max.driver`` cannot be loaded, and which other installed
distributions also provide the ``max`` package.

Nothing here needs the compiled extension, so it still works when the
extension cannot be loaded: a forced backend that does not work (the
extension's ImportError carries ``backend_selection``, the reasons), or a
source checkout whose extension was never built.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any, NoReturn

from max._core import __version__

PROG = "python -m max.driver"
DISTRIBUTION = "max-driver"
# Exit statuses: the self-check passed, it failed, max.driver cannot load.
PASSED, FAILED, CANNOT_LOAD = 0, 1, 2


def version_text() -> str:
    return (
        f"{DISTRIBUTION} {__version__} (Python {platform.python_version()}, "
        f"{platform.python_implementation()})"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Prints how the accelerator backend was chosen (each driver "
            "library tried, and why it was or was not used), every device "
            "with its properties, and runs a short self-check: host work on "
            "two CPU queues ordered by an event and a completion flag, and "
            "per-operation timings."
        ),
        epilog=(
            f"Exit status: {PASSED} when the self-check passes, {FAILED} when "
            f"it fails, {CANNOT_LOAD} when max.driver cannot be loaded (for "
            "example MAX_DRIVER_BACKEND names a backend that cannot be "
            "used).  Environment: MAX_DRIVER_BACKEND=auto|cuda|hip|cpu, "
            "MAX_DRIVER_CUDA_LIBRARY, MAX_DRIVER_HIP_LIBRARY."
        ),
    )
    p.add_argument("--version", action="version", version=version_text())
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON object, and nothing else on stdout",
    )
    return p


# ---- other distributions that provide `max` --------------------------------


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _provides_max(dist: metadata.Distribution) -> bool:
    """Whether `dist` installs the top-level package ``max``: its
    top_level.txt says so, or its RECORD lists files under max/ (read as
    text: Python 3.10's packages_distributions() knows only top_level.txt,
    and Distribution.files checks that each file exists)."""
    if "max" in (dist.read_text("top_level.txt") or "").split():
        return True
    record = dist.read_text("RECORD") or ""
    return any(line.startswith("max/") for line in record.splitlines())


def other_max_distributions() -> list[str]:
    """``"name version"`` of every installed distribution other than this
    one that also installs the top-level package ``max`` (Modular's own
    ``max`` wheel, for one): installed together, they overwrite each
    other's files under ``max/``."""
    found = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and _canonical(name) != DISTRIBUTION and _provides_max(dist):
            found.add(f"{name} {dist.version}")
    return sorted(found)


def conflict_lines(others: list[str]) -> list[str]:
    """The warning the report prints when `others` is not empty."""
    if not others:
        return []
    return [
        "Warning: another installed distribution also provides the Python "
        f"package `max`: {', '.join(others)}.",
        f"  {DISTRIBUTION} and it install files into the same max/ folder, "
        "and whichever was installed last overwrote the other's; install "
        "each into its own virtual environment.",
    ]


# ---- when max.driver cannot be loaded ----------------------------------------


def requested() -> bool:
    """Whether this process is ``python -m max.driver`` still looking for
    its module: while it imports the package ``max.driver``, ``sys.argv[0]``
    is ``"-m"`` and ``sys.orig_argv`` names the module."""
    if sys.argv[:1] != ["-m"]:
        return False
    argv: list[str] = list(getattr(sys, "orig_argv", []))
    for i, arg in enumerate(argv):
        if arg == "-m":
            return argv[i + 1 : i + 2] == ["max.driver"]
        if arg.startswith("-m"):
            return arg[2:] == "max.driver"
    return False


def missing_extension_message(error: ImportError) -> str | None:
    """Why ``max._core.driver`` is absent, when that is the error: a source
    checkout without its build shadows the installed package."""
    if not isinstance(error, ModuleNotFoundError):
        return None
    if error.name != "max._core.driver":
        return None
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.dirname(here)
    is_checkout = os.path.exists(os.path.join(checkout, "setup.py"))
    lines = [f"max._core.driver, the compiled extension, is not in {here}/_core."]
    if is_checkout:
        lines += [
            f"This `max` is the source checkout {checkout}, which Python "
            "imports before an installed copy when the current directory "
            "(or PYTHONPATH) is the checkout, and a checkout holds no "
            "extension until it is built in place.",
            "Either build it there (pip install -e . , or python setup.py "
            "build_ext --inplace), or run from another directory to use "
            "the installed package (pip install . installs a copy into "
            "site-packages).",
        ]
        installed = _installed_copy()
        if installed and os.path.realpath(installed) != os.path.realpath(here):
            lines.append(f"An installed copy is in {installed}.")
    else:
        lines.append(
            f"The installation is incomplete: reinstall {DISTRIBUTION} (pip "
            f"install --force-reinstall {DISTRIBUTION})."
        )
    return "\n".join(lines)


def _installed_copy() -> str | None:
    """The folder max/ of an installed (not editable) max-driver that holds
    the extension, if any (a checkout's own build metadata is skipped)."""
    for dist in metadata.distributions(name=DISTRIBUTION):
        core = os.path.join(str(dist.locate_file("max")), "_core")
        if os.path.isdir(core) and any(
            name.startswith("driver.") and name.endswith(".so")
            for name in os.listdir(core)
        ):
            return os.path.dirname(core)
    return None


def selection_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One line per backend considered, as the report prints them."""
    return [
        f"  {e['api']}: library={e['library'] or '-'}"
        f" loaded={'yes' if e['loaded'] else 'no'}"
        f" devices={e['device_count']}"
        f" error={e['error'] or '-'}"
        f" chosen={'yes' if e['chosen'] else 'no'}"
        for e in entries
    ]


def load_failure(error: ImportError) -> NoReturn:
    """``python -m max.driver`` when ``max.driver`` cannot be imported:
    answers --help and --version, else says why (the selection reasons, or
    the missing build) on stderr, or as JSON with --json, and exits
    CANNOT_LOAD without a traceback."""
    args = parser().parse_args(sys.argv[1:])
    backend = os.environ.get("MAX_DRIVER_BACKEND", "auto") or "auto"
    entries = list(getattr(error, "backend_selection", None) or [])
    explanation = missing_extension_message(error) or str(error)
    if args.json:
        report = {
            "version": __version__,
            "loaded": False,
            "error": explanation,
            "requested_backend": backend,
            "backend_selection": entries,
            "other_max_distributions": other_max_distributions(),
            "passed": False,
        }
        print(json.dumps(report, indent=2))
    else:
        lines = [f"{PROG}: max.driver cannot be loaded: {explanation}"]
        if entries:
            lines.append(f"Backend selection (MAX_DRIVER_BACKEND={backend}):")
            lines += selection_lines(entries)
        if backend != "auto" and entries:
            lines.append(
                f"MAX_DRIVER_BACKEND={backend} asks for this backend only; "
                "unset it (or set auto) to fall back to the CPU when no GPU "
                "backend works."
            )
        lines += conflict_lines(other_max_distributions())
        print("\n".join(lines), file=sys.stderr)
    sys.exit(CANNOT_LOAD)


def import_failed(error: ImportError) -> None:
    """Called by ``max.driver``'s ``__init__`` when the extension does not
    import: reports and exits under ``python -m max.driver``; otherwise
    raises a ModuleNotFoundError that explains a missing build, or returns
    (the caller re-raises `error`)."""
    if requested():
        load_failure(error)
    message = missing_extension_message(error)
    if message is not None:
        raise ModuleNotFoundError(message, name="max._core.driver") from error
