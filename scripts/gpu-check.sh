#!/usr/bin/env bash
# The real-GPU check, in one go, on a machine with an NVIDIA GPU:
#
#   1. build the extension in place (no pip: the GPU machine has no package
#      registry; setuptools builds it straight into max/_core/);
#   2. show the GPU (nvidia-smi -L) and what max.driver chose (python3 -m
#      max.driver);
#   3. run the real-GPU tests (tests/gpu) and the backend-generic SPEC suite
#      for accelerators (tests/accelerator);
#   4. run the GPU benchmarks (python3 -m benchmarks.gpu).
#
# Every step has its own time limit (together under five minutes), and a
# failed step does not stop the later ones; the exit status is non-zero if
# any step failed.  The whole log goes to $LOG_DIR/gpu-check.log, and when
# $OUT is set (the device tool's output folder) the log, the benchmark
# results (JSON, text, PNG) and the pytest report are copied there.
#
# Usage, from anywhere:  bash scripts/gpu-check.sh
# Environment: PYTHON (default python3), OUT (optional output folder).
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
PYTHON="${PYTHON:-python3}"
LOG_DIR="${OUT:-$ROOT/build/gpu-check}"
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu-check.log"
: >"$LOG"

# The in-place build, not an installed copy, is what gets imported.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1

FAILED=()
SUMMARY=()

# step NAME SECONDS COMMAND...: runs COMMAND under a time limit, its output
# shown and appended to the log; records whether it passed.
step() {
    local name="$1" limit="$2"
    shift 2
    printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" | tee -a "$LOG"
    local start=$SECONDS status
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    status=${PIPESTATUS[0]}
    local took=$((SECONDS - start))
    if [ "$status" -eq 0 ]; then
        SUMMARY+=("PASS  $name (${took}s)")
    else
        [ "$status" -eq 124 ] && status="$status: timed out"
        SUMMARY+=("FAIL  $name (${took}s, exit $status)")
        FAILED+=("$name")
    fi
}

# Time limits, in seconds: 300 in all.
step "build" 60 "$PYTHON" setup.py build_ext --inplace --parallel 8
step "nvidia-smi" 10 nvidia-smi -L
step "max.driver" 20 "$PYTHON" -m max.driver
step "pytest" 140 "$PYTHON" -m pytest tests/gpu tests/accelerator -q \
    -p no:cacheprovider -rs --durations=15 --junitxml="$LOG_DIR/pytest.xml"
step "benchmarks" 70 "$PYTHON" -m benchmarks.gpu

# Hand back the results with the log.
if [ -n "${OUT:-}" ]; then
    for f in gpu-latest.json gpu-latest.txt gpu-latest.png gpu-frameworks.png; do
        [ -f "benchmarks/results/$f" ] && cp "benchmarks/results/$f" "$OUT/"
    done
fi

{
    printf '\n===== summary\n'
    printf '%s\n' "${SUMMARY[@]}"
    if [ "${#FAILED[@]}" -eq 0 ]; then
        echo "gpu-check: all steps passed"
    else
        echo "gpu-check: FAILED: ${FAILED[*]}"
    fi
} | tee -a "$LOG"
[ "${#FAILED[@]}" -eq 0 ]
