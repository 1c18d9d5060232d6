#!/usr/bin/env bash
# The real-GPU check, in one go, on a machine with an NVIDIA GPU:
#
#   1. preflight: a C compiler and Python's headers (Python.h), or stop;
#   2. build the extension in place (no pip: the GPU machine has no package
#      registry; setuptools builds it straight into max/_core/);
#   3. show the GPU (nvidia-smi -L) and what max.driver chose and probed
#      (python3 -m max.driver);
#   4. graph capture first (tests/accelerator/test_accel_capture.py and its
#      benchmark rows, python3 -m benchmarks.capture), then the rest of the
#      backend-generic SPEC suite for accelerators (tests/accelerator)
#      against the real driver (MAX_DRIVER_BACKEND=cuda, no fake), each in
#      a process of its own, with a per-test time limit;
#   5. the real-GPU tests (tests/gpu) but for the interop ones;
#   6. the GPU benchmarks (python3 -m benchmarks.gpu);
#   7. the interop tests last: PyTorch and CuPy leave a CUDA context
#      current, which could hide missing context handling in the steps
#      before;
#   8. a probe of the real-driver hazards (scripts/gpu_probe.py), one child
#      process per case.
#
# Every step has its own time limit (together five minutes), and a failed
# step does not stop the later ones; the exit status is non-zero if any step
# failed.  The whole log goes to $LOG_DIR/gpu-check.log, and when $OUT is
# set (the device tool's output folder) the log, the benchmark results
# (JSON, text, PNG) and the pytest reports are copied there.
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
unset MAX_DRIVER_CUDA_LIBRARY MAX_DRIVER_HIP_LIBRARY MAX_DRIVER_FAKE_LIBRARY

FAILED=()
SUMMARY=()

# step NAME SECONDS COMMAND...: runs COMMAND under a time limit, its output
# shown and appended to the log; records whether it passed.
step() {
    local name="$1" limit="$2"
    shift 2
    printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" | tee -a "$LOG"
    local start=$SECONDS status
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG"
    status=${PIPESTATUS[0]}
    local took=$((SECONDS - start))
    if [ "$status" -eq 0 ]; then
        SUMMARY+=("PASS  $name (${took}s)")
    else
        [ "$status" -eq 124 ] && status="$status: timed out"
        SUMMARY+=("FAIL  $name (${took}s, exit $status)")
        FAILED+=("$name")
    fi
    return 0
}

# Python's headers and a compiler, before anything is built.
preflight() {
    local cc
    cc="$(command -v cc || command -v gcc || true)"
    if [ -z "$cc" ]; then
        echo "no C compiler (cc or gcc) on PATH"
        return 1
    fi
    "$PYTHON" - <<'EOF' || return 1
import os, sys, sysconfig
include = sysconfig.get_paths()["include"]
header = os.path.join(include, "Python.h")
print(f"{sys.executable} {sys.version.split()[0]}; Python.h: {header}")
sys.exit(0 if os.path.exists(header) else "Python.h is missing (install python3-dev)")
EOF
    echo "compiler: $cc ($("$cc" --version | head -1))"
}

PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider -rfEs)

# Time limits, in seconds: 300 in all.
step "preflight" 10 preflight
if [ "${#FAILED[@]}" -eq 0 ]; then
    step "build" 50 "$PYTHON" setup.py build_ext --inplace --parallel 8
    step "nvidia-smi" 5 nvidia-smi -L
    step "max.driver" 15 env MAX_DRIVER_BACKEND=cuda "$PYTHON" -m max.driver
    step "capture tests" 10 env MAX_DRIVER_BACKEND=cuda \
        "${PYTEST[@]}" tests/accelerator/test_accel_capture.py --timeout=8 \
        --junitxml="$LOG_DIR/pytest-capture.xml"
    step "capture benchmarks" 10 env MAX_DRIVER_BACKEND=cuda \
        "$PYTHON" -m benchmarks.capture 41 --table
    step "accelerator suite (real driver)" 68 env MAX_DRIVER_BACKEND=cuda \
        "${PYTEST[@]}" tests/accelerator --timeout=30 \
        --ignore=tests/accelerator/test_accel_capture.py \
        --junitxml="$LOG_DIR/pytest-accelerator.xml"
    step "gpu tests" 45 "${PYTEST[@]}" tests/gpu --timeout=30 \
        --ignore=tests/gpu/test_gpu_interop.py --durations=10 \
        --junitxml="$LOG_DIR/pytest-gpu.xml"
    step "benchmarks" 42 "$PYTHON" -m benchmarks.gpu
    step "interop tests (last)" 25 "${PYTEST[@]}" tests/gpu/test_gpu_interop.py \
        --timeout=20 --junitxml="$LOG_DIR/pytest-interop.xml"
    step "probe" 20 env MAX_DRIVER_BACKEND=cuda "$PYTHON" scripts/gpu_probe.py \
        --timeout 6
fi

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
