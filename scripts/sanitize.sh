#!/usr/bin/env bash
# The sanitizer run: builds max._core.driver with AddressSanitizer and
# UndefinedBehaviorSanitizer in a copy of the working tree (the in-place
# build of the checkout is left alone) and runs the whole pytest suite
# against it, CPU and fake-driver tests alike.  The C core's own programs
# (tests/core/*.c) are built and run by the suite itself, plain, under TSan
# and under ASan+UBSan.
#
#   scripts/sanitize.sh [pytest arguments...]
#
# Python is not instrumented, so the ASan runtime is preloaded into it and
# into every Python subprocess the tests start (they inherit the
# environment); compilers and shells the tests run get it removed (see the
# shims below), and so do the C test programs (tests/test_core*.py).
# Sanitizer reports go to files (log_path) so that none is lost in a child
# whose output a test ignores; any report, or any test failure, makes the
# script exit non-zero.  LeakSanitizer runs in the C programs only (see
# ASAN_OPTIONS below for why).
#
# Environment: PYTHON (default python3), KEEP=1 keeps the work directory.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"

# The real interpreter: pyenv's `python3` may be a shell script, and the
# preloaded runtime must go into the interpreter, not into a shim.
PY="$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')"
CC_BIN="$(command -v cc || command -v gcc)"
ASAN_LIB="$("$CC_BIN" -print-file-name=libasan.so)"
# Preloaded with it so that ASan's __cxa_throw interceptor finds the real
# one when a C++ library (e.g. matplotlib's) is loaded later.
CXX_LIB="$("$CC_BIN" -print-file-name=libstdc++.so)"
if [ ! -e "$ASAN_LIB" ]; then
    echo "sanitize.sh: the compiler has no ASan runtime ($ASAN_LIB)" >&2
    exit 2
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/max-driver-sanitize.XXXXXX")"
cleanup() {
    if [ "${KEEP:-0}" = 1 ]; then
        echo "sanitize.sh: work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
SRC="$WORK/src"
LOGS="$WORK/logs"
SHIMS="$WORK/shims"
mkdir -p "$SRC" "$LOGS" "$SHIMS"

start=$(date +%s)

# 1. A copy of the working tree: tracked files plus new, not ignored ones
#    (so uncommitted work is tested); no build outputs.
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
        (cd "$ROOT" && tar --null -T - -cf - --ignore-failed-read 2>/dev/null) |
        tar -xf - -C "$SRC"
else
    tar -C "$ROOT" --exclude=build --exclude='*.so' --exclude='*.o' \
        --exclude=__pycache__ --exclude='.venv' -cf - . | tar -xf - -C "$SRC"
fi

# 2. The instrumented build, in the copy.
echo "sanitize.sh: building with $SAN_FLAGS"
(cd "$SRC" && env -u LD_PRELOAD MAX_DRIVER_CFLAGS="$SAN_FLAGS" \
    "$PY" setup.py -q build_ext --inplace >"$WORK/build.log" 2>&1) || {
    cat "$WORK/build.log" >&2
    echo "sanitize.sh: the build failed" >&2
    exit 1
}

# 3. Programs the tests start that are not Python: run them without the
#    preloaded runtime (the compiler's own leaks are not ours, and a
#    TSan-built program crashes with the ASan runtime loaded).
for tool in cc gcc bash; do
    real="$(command -v "$tool" || true)"
    [ -n "$real" ] || continue
    printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$real" >"$SHIMS/$tool"
    chmod +x "$SHIMS/$tool"
done

# 4. The suite, under the sanitizers.
export PATH="$SHIMS:$PATH"
export CC="$SHIMS/cc"
export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
export MAX_DRIVER_SANITIZER=asan # lets RSS/thread-count tests skip
export FAKE_DRIVER_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# LeakSanitizer is off for the Python processes: work still pending or gated
# when the interpreter exits is dropped by design (SPEC §10), as is what a
# GPU driver never runs after an asynchronous error, and LSan reports both.
# Leaks are checked instead by LSan in the C core's programs (tests/core,
# built with ASan by the suite) and by the suite's own counters (RSS and
# threads in tests/test_lifetime.py, live driver objects via the fake).
export ASAN_OPTIONS="detect_leaks=0:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=0:log_path=$LOGS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan"
export PYTHONFAULTHANDLER=1
unset MAX_DRIVER_BACKEND MAX_DRIVER_CUDA_LIBRARY MAX_DRIVER_HIP_LIBRARY

echo "sanitize.sh: running pytest on $PY with $ASAN_LIB preloaded"
set +e
(cd "$SRC" && LD_PRELOAD="$ASAN_LIB $CXX_LIB" "$PY" -m pytest -q \
    -o cache_dir="$WORK/pytest_cache" "$@" 2>&1 | tee "$WORK/pytest.log")
status=${PIPESTATUS[0]}
set -e
end=$(date +%s)

# 5. Summary.
reports=$(find "$LOGS" -type f | wc -l)
echo
echo "==================== sanitizer run summary ===================="
echo "wall time:      $((end - start)) s (build + tests)"
echo "pytest:         $(grep -E '^[=]* ?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$WORK/pytest.log" | tail -1)"
echo "pytest status:  $status"
echo "report files:   $reports (processes that printed a sanitizer report)"
if [ "$reports" -gt 0 ]; then
    grep -h -E '^SUMMARY: |runtime error:' "$LOGS"/* | sort | uniq -c | sort -rn | head -20
    for f in $(find "$LOGS" -type f | head -5); do
        echo "---- $f"
        head -60 "$f"
    done
fi
echo "==============================================================="
if [ "$status" -ne 0 ] || [ "$reports" -gt 0 ]; then
    KEEP=1
    echo "sanitize.sh: FAILED"
    exit 1
fi
echo "sanitize.sh: passed"
