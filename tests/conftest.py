"""Shared fixtures for the max.driver native-type tests.

Everything that can block is bounded: host functions wait on
``threading.Event`` with a timeout, queue waits pass ``timeout=``, and every
test carries a ``pytest-timeout`` limit (added below when the plugin is
installed) so that a bug makes a test fail instead of hanging the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:  # Prefer the installed package; fall back to an in-place build.
    import max.driver  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the project was built
    sys.path.insert(0, REPO_ROOT)

# tests/accelerator/ is the SPEC suite for accelerators.  Without one it
# would only skip, so it is not collected: CI runs it against the fake
# driver through tests/test_fake_backends.py, and scripts/gpu-check.sh runs
# it on a real GPU.
from max import driver as _driver  # noqa: E402

collect_ignore_glob = [] if _driver.accelerator_count() else ["accelerator/*"]

# How long anything that "should happen" may take before a test gives up.
WAIT = 20.0
# Default per-test limit when pytest-timeout is installed.
DEFAULT_TEST_TIMEOUT = 90


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: long-running stress test (still runs by default)"
    )
    config.addinivalue_line(
        "markers", "timeout(seconds): per-test time limit (pytest-timeout)"
    )


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT))


# --------------------------------------------------------------------------
# Basic objects


@pytest.fixture
def cpu():
    from max.driver import CPU

    return CPU()


@pytest.fixture
def queue(cpu):
    from max.driver import DeviceQueue

    return DeviceQueue(cpu)


def _enqueue(target, fn):
    """Enqueue a Python host function on a queue or device."""
    return getattr(target, "__unsafe_enqueue_py_host_func")(fn)


def _enqueue_async(target, fn, flag, value, cpu):
    return getattr(target, "__unsafe_enqueue_async_py_host_func")(fn, flag, value, cpu)


@pytest.fixture
def enqueue():
    """``enqueue(queue_or_device, fn)``: the literal ``__unsafe_`` name."""
    return _enqueue


@pytest.fixture
def enqueue_async():
    """``enqueue_async(queue_or_device, fn, flag, value, cpu)``."""
    return _enqueue_async


class Recorder:
    """Thread-safe log of what host functions did, in completion order."""

    def __init__(self):
        self._lock = threading.Lock()
        self.items = []
        self._events = {}

    def _event(self, key):
        with self._lock:
            ev = self._events.get(key)
            if ev is None:
                ev = self._events[key] = threading.Event()
            return ev

    def add(self, item):
        with self._lock:
            self.items.append(item)
        self._event(item).set()

    def fn(self, item):
        """A host function that records ``item``."""

        def host_fn():
            self.add(item)

        return host_fn

    def wait(self, item, timeout=WAIT):
        """Block until ``item`` was recorded; True when it was."""
        return self._event(item).wait(timeout)

    def has(self, item):
        with self._lock:
            return item in self.items

    def snapshot(self):
        with self._lock:
            return list(self.items)


@pytest.fixture
def rec():
    return Recorder()


@pytest.fixture
def gate():
    """``gate(queue, value=1) -> flag``: later work on ``queue`` waits until
    the returned flag is signalled ``value``.  Every gate is released when the
    test ends so that a failing test never leaves a queue blocked."""
    from max.driver import CompletionFlag

    made = []

    def make(queue, value=1):
        flag = CompletionFlag(queue.device)
        queue.wait_for_host_value(flag, value)
        made.append((flag, value))
        return flag

    yield make
    for flag, value in made:
        flag.signal(value)


# The test after which the CPU device last failed to drain (None: it drained).
_cpu_stuck_since: list[str | None] = [None]


@pytest.fixture(autouse=True)
def _quiesce_cpu(request):
    """After each test (and after its gates were released), let the CPU
    device drain so that leftover work does not leak into the next test.
    Work that never drains (a gate a failed test left closed) is waited for
    once: later tests look without waiting until it drains, so that one
    failure does not add WAIT seconds to every test after it."""
    yield
    from max.driver import CPU

    stuck_since = _cpu_stuck_since[0]
    try:
        CPU().synchronize(timeout=0 if stuck_since else WAIT)
    except TimeoutError as exc:
        if stuck_since is None:
            _cpu_stuck_since[0] = request.node.nodeid
            warnings.warn(f"CPU device did not drain after test: {exc!r}", stacklevel=1)
        return
    except Exception as exc:  # report, but do not blame the next test
        warnings.warn(f"CPU device did not drain after test: {exc!r}", stacklevel=1)
    _cpu_stuck_since[0] = None


@pytest.fixture
def unraisable(monkeypatch):
    """Collects what reaches ``sys.unraisablehook`` (from any thread)."""

    class Collector:
        def __init__(self):
            self.lock = threading.Lock()
            self.records = []
            self.event = threading.Event()

        def hook(self, u):
            with self.lock:
                self.records.append((u.exc_type, str(u.exc_value)))
            self.event.set()

        def wait(self, count=1, timeout=WAIT):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with self.lock:
                    if len(self.records) >= count:
                        return True
                self.event.wait(0.05)
                self.event.clear()
            with self.lock:
                return len(self.records) >= count

    c = Collector()
    monkeypatch.setattr(sys, "unraisablehook", c.hook)
    return c


# --------------------------------------------------------------------------
# Subprocesses


def clean_env(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAX_DRIVER_")}
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + pp if pp else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONWARNINGS", None)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _run_py(code, timeout=60, env=None, **env_overrides):
    """Run ``code`` in a fresh interpreter; returns CompletedProcess."""
    if env is None:
        env = clean_env(**env_overrides)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )


@pytest.fixture
def run_py():
    return _run_py


# --------------------------------------------------------------------------
# Misc helpers


def _wait_until(pred, timeout=WAIT, interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@pytest.fixture
def wait_until():
    return _wait_until


@pytest.fixture
def popen_py():
    """``popen_py(code, *argv) -> Popen`` with text pipes for stdout/stderr."""

    def start(code, *argv, **env_overrides):
        return subprocess.Popen(
            [sys.executable, "-c", code, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(**env_overrides),
            cwd=REPO_ROOT,
        )

    return start
