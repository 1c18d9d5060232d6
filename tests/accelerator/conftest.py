"""The SPEC suite for ACCELERATOR devices (CUDA or HIP), generic over the
backend.

It runs unchanged against a real GPU driver and against the test-only fake
driver of ``tests/fake_driver`` (CI runs it that way from
``tests/test_fake_backends.py``, once with ``MAX_DRIVER_BACKEND=cuda`` and
once with ``MAX_DRIVER_BACKEND=hip``).  On a machine where
``max.driver.accelerator_count() == 0`` every test in this folder is skipped
with one clear reason, so the default ``pytest`` run stays green on CPU-only
machines.

Fixtures shared with the CPU suite (``rec``, ``gate``, ``unraisable``,
``enqueue``, ``enqueue_async``, ``wait_until``) come from ``tests/conftest.py``;
this file adds the accelerator ones.  Everything that can block is bounded.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import warnings

import pytest

from max import driver

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from accel_support import (  # noqa: E402
    FAKE_LIBRARY,
    HERE,
    REPO_ROOT,
    WAIT,
    FakeControl,
    child_env,
)

ACCELERATOR_COUNT = driver.accelerator_count()
SKIP_REASON = (
    "no accelerator (max.driver.accelerator_count() == 0): the accelerator "
    "suite needs a GPU, or the fake driver: run tests/test_fake_backends.py"
)


def pytest_collection_modifyitems(config, items):
    # A conftest hook sees every collected item: only touch this folder's.
    if ACCELERATOR_COUNT > 0:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        try:
            inside = pathlib.Path(str(item.path)).resolve().is_relative_to(HERE)
        except (AttributeError, ValueError):  # pragma: no cover
            inside = False
        if inside:
            item.add_marker(skip)


# --------------------------------------------------------------------------
# Devices


@pytest.fixture
def acc():
    """The first accelerator."""
    return driver.Accelerator(0)


@pytest.fixture
def acc1():
    """The second accelerator; the test is skipped on a one-GPU machine."""
    if ACCELERATOR_COUNT < 2:
        pytest.skip("needs two accelerators")
    return driver.Accelerator(1)


@pytest.fixture
def api(acc):
    return acc.api


@pytest.fixture
def aq(acc):
    """A fresh queue on the first accelerator."""
    return driver.DeviceQueue(acc)


@pytest.fixture(autouse=True)
def _quiesce_accelerators(_driver_rules_kept):
    """After each test (after its gates were released) let every accelerator
    drain, so that leftover work does not leak into the next test (and
    before the rule check below, so that late work is checked too)."""
    yield
    if ACCELERATOR_COUNT == 0:
        return
    for i in range(ACCELERATOR_COUNT):
        try:
            driver.Accelerator(i).synchronize(timeout=WAIT)
        except Exception as exc:  # report, but do not blame the next test
            warnings.warn(
                f"accelerator {i} did not drain after test: {exc!r}", stacklevel=1
            )


@pytest.fixture(autouse=True)
def _driver_rules_kept():
    """Every test fails when the backend broke a rule of real drivers that
    the fake enforces (a driver call from a callback, a free or enqueue that
    would deadlock) or when a driver destroy failed on the cleanup thread."""
    from max._core import driver as core

    fake = FakeControl(FAKE_LIBRARY) if FAKE_LIBRARY else None
    if fake is not None:
        fake.clear_violations()
    failures_before, _ = core._cleanup_failures()
    yield
    if fake is not None:
        broken = fake.violations()
        fake.clear_violations()
        assert not broken, "real-driver rules broken:\n" + "\n".join(broken)
    failures, last = core._cleanup_failures()
    assert failures == failures_before, f"driver cleanup failed: {last}"


@pytest.fixture
def fake():
    """The fake driver's control API; skipped on a real driver."""
    if FAKE_LIBRARY is None:
        pytest.skip("not running on the fake driver (MAX_DRIVER_FAKE_LIBRARY unset)")
    return FakeControl(FAKE_LIBRARY)


# --------------------------------------------------------------------------
# Subprocesses that keep the accelerator configuration (MAX_DRIVER_*,
# FAKE_GPU_*) of this run, unlike tests/conftest.py's clean_env.


@pytest.fixture
def run_acc_py():
    """``run_acc_py(code, *argv, timeout=60) -> CompletedProcess``."""

    def run(code, *argv, timeout=60, **env):
        return subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(**env),
            cwd=REPO_ROOT,
        )

    return run


@pytest.fixture
def popen_acc_py():
    def start(code, *argv, **env):
        return subprocess.Popen(
            [sys.executable, "-c", code, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(**env),
            cwd=REPO_ROOT,
        )

    return start
