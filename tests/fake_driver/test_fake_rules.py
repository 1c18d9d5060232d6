"""Self-test of the fake driver's real-driver rules of the GPU memory path
(README, "Real-driver rules" from 8 on), one section per rule.

Fixtures are in conftest.py and helpers in fakelib.py.  Whatever needs
other environment variables, or changes state for good (peer access cannot
be disabled), runs in a child interpreter.
"""

from __future__ import annotations

from .fakelib import (
    DISABLE_TIMING,
    INVALID_HANDLE,
    SUCCESS,
    violations,
)


def take_violations(lib):
    v = violations(lib)
    lib.fake_gpu_clear_violations()
    return v


# --------------------------------------------------------------------------
# Rule 8: an event recorded on a stream of another device


def test_cross_device_event_record_is_a_violation(api):
    e = api.event(DISABLE_TIMING)  # device 0's
    with api.on_device(1):
        s = api.stream()
        assert api.record(e, s) == INVALID_HANDLE
    assert api.event_query(e) == SUCCESS  # not recorded
    name = "cuEventRecord" if api.api == "cuda" else "hipEventRecord"
    assert take_violations(api.lib) == [
        f"{name}: an event of device 0 recorded on a stream of device 1; real "
        "drivers refuse it (CUDA_ERROR_INVALID_HANDLE / hipErrorInvalidHandle)"
    ]
    assert api.event_destroy(e) == SUCCESS
    assert api.destroy(s) == SUCCESS
