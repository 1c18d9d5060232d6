#!/usr/bin/env bash
# Builds max._core.driver for every other CPython >= 3.10 on this machine
# and runs the test suite against each build (CI runs this after the tests
# of the default interpreter and the sanitizer run).
#
#   scripts/test-other-pythons.sh [--ends] [pytest arguments...]
#   scripts/test-other-pythons.sh [--ends] --list  (only say which it would test)
#
# --ends tests only the oldest and the newest of them (what CI does, for
# time): the binding's version checks (csrc/python/compat.h) split at
# 3.11, 3.12 and 3.13, and with the default interpreter those two take
# every side of each.
#
# "Other" means: not the minor version of the default interpreter
# (${PYTHON:-python3}), which .ci/run has already tested.  Candidates are
# pyenv's interpreters ($PYENV_ROOT/versions/*/bin/python3) and every
# python3.N on PATH; one interpreter per minor version is tested (the first
# found, pyenv's before PATH's), since the C API and ABI are per minor version.
# pyenv shims of versions that are not active do not run and are ignored.
#
# Each interpreter gets its own copy of the working tree (tracked files plus
# new, not ignored ones) and its own virtual environment, so the editable
# install and the in-place build of the checkout are left alone.  The venv
# gets the test runner from PyPI (venv and pip themselves work offline, the
# install does not); the extension is built there with
# `python setup.py build_ext --inplace`.
#
# Any build or test failure makes the script exit non-zero, after every
# interpreter has been tried.  Environment: PYTHON (the default interpreter,
# default python3), KEEP=1 keeps the work directories.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# The tests run on each interpreter: the whole suite less the files below.
# Kept: the CPU SPEC suite (tests/test_{device,queue,event,flag,hostfn,
# waits,...}.py), the Buffer, DType, DLPack and protocol suites, argument
# fuzzing, the model check on the CPU and the documentation examples: the
# binding, whose use of the C API is what differs between Python versions,
# through every type and call.
# Left out, to keep CI within 30 minutes on 2 cores:
#   test_core_stress.py, test_core.py, test_core_layout.py,
#   test_core_dtype.py   the C core's own C programs (with Python or NumPy
#                        only as oracles): the same on every interpreter
#                        (75 s in all); the default run covers them
#   tests/fake_driver/   the fake driver's own tests (20 s): C, driven
#                        through ctypes; the accelerator suite uses it
#   test_pytest_plugin.py needs the pytest11 entry point, which only
#                        installing the package registers; its code is pure
#                        Python over pytest's hooks
#   test_wheel.py        packaging (needs `build`; builds wheels and a venv)
#   test_typing.py       mypy, a static check of the stub (test_dtype.py's
#                        one mypy check skips there for the same reason)
#   test_notebook.py     needs the Jupyter stack; runs on the default only
#   test_gpu_tooling.py  tooling for scripts/gpu-check.sh (CUDA machines)
#   test_dlpack_jax.py   JAX as a second DLPack peer (a 100 MB jaxlib per
#                        interpreter); NumPy's DLPack tests run everywhere
#   test_max_differential.py  MAX 26.7's wheel as an oracle: a venv of
#                        about 750 MB per interpreter; the programs' results
#                        are the binding's, which the suites here check
#   test_fake_backends.py, test_fault_injection.py, and test_model.py's
#                        runs on the fake GPU (about 140 s): the GPU
#                        backends driven through the same binding calls the
#                        CPU suites make; what differs between them is C
#                        below the binding, the same on every interpreter
IGNORED=(
    tests/test_core_stress.py
    tests/test_core.py
    tests/test_core_layout.py
    tests/test_core_dtype.py
    tests/fake_driver
    tests/test_pytest_plugin.py
    tests/test_wheel.py
    tests/test_typing.py
    tests/test_notebook.py
    tests/test_gpu_tooling.py
    tests/test_dlpack_jax.py
    tests/test_max_differential.py
    tests/test_fake_backends.py
    tests/test_fault_injection.py
)
DESELECTED=(
    "tests/test_model.py::test_model_on_fake_gpu"
)
# What the kept tests need: the test extra's runner part, NumPy and
# ml_dtypes (the oracles of the Buffer, DType and DLPack tests), and
# setuptools, which venvs of Python >= 3.12 no longer include, for setup.py
# (77 or later reads pyproject.toml's license expression).
REQUIREMENTS=("pytest>=7" "hypothesis>=6" "pytest-timeout>=2" "numpy>=1.24"
    "ml_dtypes>=0.5" "setuptools>=77")
MIN_MINOR=10

# "implementation X.Y X.Y.Z real-path has-headers new-enough" of an
# interpreter, or nothing when it does not run (e.g. a pyenv shim of an
# inactive version).
probe() {
    "$1" - "$MIN_MINOR" 2>/dev/null <<'EOF' || true
import os, platform, sys, sysconfig
include = sysconfig.get_paths()["include"]
fields = [platform.python_implementation(), "%d.%d" % sys.version_info[:2],
          platform.python_version(), os.path.realpath(sys.executable),
          os.path.exists(os.path.join(include, "Python.h")),
          sys.version_info >= (3, int(sys.argv[1]))]
sys.stdout.write(" ".join(str(int(f) if f in (True, False) else f)
                          for f in fields) + "\n")  # also on Python 2
EOF
}

candidates() {
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" dir name
    for exe in "$pyenv_root"/versions/*/bin/python3; do
        [ -x "$exe" ] && echo "$exe"
    done
    local IFS=:
    for dir in $PATH; do
        for exe in "$dir"/python3.[0-9] "$dir"/python3.[0-9][0-9]; do
            name="${exe##*/}"
            [[ "$name" =~ ^python3\.[0-9]+$ ]] && [ -x "$exe" ] && echo "$exe"
        done
    done
    return 0
}

ENDS=0
if [ "${1:-}" = --ends ]; then
    ENDS=1
    shift
fi

read -r _ DEFAULT_MINOR DEFAULT_VERSION DEFAULT_REAL _ < <(probe "${PYTHON:-python3}")
echo "test-other-pythons.sh: the default interpreter is CPython $DEFAULT_VERSION ($DEFAULT_REAL)"

declare -A seen_minor=() seen_path=()
seen_minor[$DEFAULT_MINOR]=1
seen_path[$DEFAULT_REAL]=1
SELECTED=()
while read -r exe; do
    info="$(probe "$exe")"
    [ -n "$info" ] || continue
    read -r impl minor version real headers new_enough <<<"$info"
    [ -z "${seen_path[$real]:-}" ] || continue
    seen_path[$real]=1
    if [ "$impl" != CPython ] || [ "$new_enough" != 1 ]; then
        echo "  skipped: $impl $version ($real): not CPython >= 3.$MIN_MINOR"
    elif [ -n "${seen_minor[$minor]:-}" ]; then
        echo "  skipped: $impl $version ($real): a $minor is already selected or the default"
    elif [ "$headers" != 1 ]; then
        echo "  skipped: $impl $version ($real): no Python.h (Debian: python$minor-dev)"
    else
        seen_minor[$minor]=1
        SELECTED+=("$version $real")
        echo "  found:   $impl $version ($real)"
    fi
done < <(candidates)

if [ "$ENDS" = 1 ] && [ "${#SELECTED[@]}" -gt 2 ]; then
    # By minor version (the version is the first field of each entry).
    mapfile -t SELECTED < <(printf '%s\n' "${SELECTED[@]}" | sort -t. -k2,2n)
    for entry in "${SELECTED[@]:1:${#SELECTED[@]}-2}"; do
        echo "  left out (--ends): CPython ${entry%% *}"
    done
    SELECTED=("${SELECTED[0]}" "${SELECTED[-1]}")
fi

if [ "${1:-}" = --list ]; then
    exit 0
fi
if [ "${#SELECTED[@]}" -eq 0 ]; then
    echo "test-other-pythons.sh: no other CPython >= 3.$MIN_MINOR found; nothing to test"
    exit 0
fi

# A copy of the working tree without build outputs, as scripts/sanitize.sh
# makes it: tracked files plus new, not ignored ones (so uncommitted work is
# tested), or the whole tree less build outputs outside git.
copy_tree() {
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
            (cd "$ROOT" && tar --null -T - -cf - --ignore-failed-read 2>/dev/null) |
            tar -xf - -C "$1"
    else
        tar -C "$ROOT" --exclude=build --exclude='*.so' --exclude='*.o' \
            --exclude=__pycache__ --exclude='.venv' -cf - . | tar -xf - -C "$1"
    fi
}

# One interpreter: copy, venv, build, tests.  Output goes to the terminal;
# the return status says whether everything passed.
test_one() {
    local version="$1" py="$2" work="$3"
    shift 3 # the rest: pytest arguments
    local src="$work/src" venv="$work/venv"
    mkdir -p "$src"
    copy_tree "$src" || return 1
    "$py" -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "${REQUIREMENTS[@]}" || return 1
    (cd "$src" && "$venv/bin/python" setup.py -q build_ext --inplace -j 2 \
        >"$work/build.log" 2>&1) || {
        cat "$work/build.log" >&2
        echo "test-other-pythons.sh: the build for CPython $version failed" >&2
        return 1
    }
    local ignores=() path
    for path in "${IGNORED[@]}"; do ignores+=("--ignore=$path"); done
    for path in "${DESELECTED[@]}"; do ignores+=("--deselect=$path"); done
    # The package is not installed there, so its pytest plugin is loaded by
    # module name instead of by its entry point (the docs' examples use it).
    # Argument fuzzing gets 10 s here instead of 30 (each run draws a seed
    # of its own).
    (cd "$src" && env -u PYTHONPATH \
        MAX_DRIVER_FUZZ_SECONDS="${MAX_DRIVER_FUZZ_SECONDS:-10}" \
        "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider -p max.pytest_plugin "${ignores[@]}" "$@")
}

unset MAX_DRIVER_BACKEND MAX_DRIVER_CUDA_LIBRARY MAX_DRIVER_HIP_LIBRARY
RESULTS=()
failed=0
for entry in "${SELECTED[@]}"; do
    read -r version py <<<"$entry"
    work="$(mktemp -d "${TMPDIR:-/tmp}/max-driver-py$version.XXXXXX")"
    echo
    echo "==================== CPython $version ($py) ===================="
    start=$(date +%s)
    if test_one "$version" "$py" "$work" "$@"; then
        outcome=passed
        [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
    else
        outcome=FAILED
        failed=1
        echo "test-other-pythons.sh: work directory kept: $work"
    fi
    elapsed=$(($(date +%s) - start))
    echo "test-other-pythons.sh: CPython $version: $outcome in $elapsed s (venv, build and tests)"
    RESULTS+=("$version $outcome")
done

echo
summary="$(printf '%s, ' "${RESULTS[@]}")"
echo "test-other-pythons.sh: tested CPython ${summary%, } (default $DEFAULT_VERSION tested by .ci/run)"
exit "$failed"
