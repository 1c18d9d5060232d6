"""Helpers shared by the accelerator suite (imported by its conftest and
tests; not a test module)."""

from __future__ import annotations

import ctypes
import os
import pathlib
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO_ROOT = str(HERE.parent.parent)
WAIT = 20.0
# Long enough that work which is (wrongly) not blocked would have run.
NOT_YET = 0.15
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"

# Set by tests/test_fake_backends.py to the path of the fake driver library.
FAKE_LIBRARY = os.environ.get("MAX_DRIVER_FAKE_LIBRARY") or None


# --------------------------------------------------------------------------
# The fake driver's control API (tests/fake_driver)


class FakeControl:
    """ctypes view of the fake driver's control entry points.  ``CDLL`` on the
    path the backend loaded returns the same library handle, so these talk to
    the instance the backend uses."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        self.lib = lib
        lib.fake_gpu_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.fake_gpu_fail.restype = ctypes.c_int
        lib.fake_gpu_reset.argtypes = []
        lib.fake_gpu_reset.restype = None
        lib.fake_gpu_calls.argtypes = [ctypes.c_char_p]
        lib.fake_gpu_calls.restype = ctypes.c_int
        lib.fake_gpu_live.argtypes = [ctypes.c_char_p]
        lib.fake_gpu_live.restype = ctypes.c_int
        lib.fake_gpu_async_error.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.fake_gpu_async_error.restype = ctypes.c_int
        lib.fake_gpu_stream_flags.argtypes = [ctypes.c_void_p]
        lib.fake_gpu_stream_flags.restype = ctypes.c_uint
        lib.fake_gpu_threads.argtypes = []
        lib.fake_gpu_threads.restype = ctypes.c_int
        lib.fake_gpu_violations.argtypes = []
        lib.fake_gpu_violations.restype = ctypes.c_int
        lib.fake_gpu_violation.argtypes = [ctypes.c_int]
        lib.fake_gpu_violation.restype = ctypes.c_char_p
        lib.fake_gpu_clear_violations.argtypes = []
        lib.fake_gpu_clear_violations.restype = None

    def fail(self, name, nth, code):
        return self.lib.fake_gpu_fail(name.encode(), nth, code)

    def calls(self, name):
        return self.lib.fake_gpu_calls(name.encode())

    def live(self, kind):
        return self.lib.fake_gpu_live(kind.encode())

    def lives(self):
        return {k: self.live(k) for k in ("stream", "event", "host_alloc")}

    def stream_flags(self, handle):
        return self.lib.fake_gpu_stream_flags(ctypes.c_void_p(handle))

    def async_error(self, handle, code):
        return self.lib.fake_gpu_async_error(ctypes.c_void_p(handle), code)

    def threads(self):
        return self.lib.fake_gpu_threads()

    def violations(self):
        """The real-driver rules the backend broke, as sentences."""
        n = self.lib.fake_gpu_violations()
        texts = (self.lib.fake_gpu_violation(i) for i in range(n))
        return [t.decode() if t else "?" for t in texts]

    def clear_violations(self):
        self.lib.fake_gpu_clear_violations()


def enqueue(queue, fn):
    """``fn()`` as a Python host function of ``queue``."""
    getattr(queue, ENQ)(fn)


def held(queue, gate, rec, tag):
    """Gates ``queue`` (the ``gate`` fixture) with a host function behind
    the gate that records ``tag`` (``rec``): the positive control that the
    gate holds the queue.  Returns the gate's flag."""
    flag = gate(queue)
    enqueue(queue, rec.fn(tag))
    return flag


def child_env(**overrides):
    env = dict(os.environ)
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


def wait_until(pred, timeout=WAIT, interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def drain():
    """Garbage collected, every device synchronized: what was dropped is
    on its way to being freed."""
    import gc

    from max import driver

    gc.collect()
    for i in range(driver.accelerator_count()):
        driver.Accelerator(i).synchronize(timeout=WAIT)
    driver.CPU().synchronize(timeout=WAIT)
    gc.collect()


def settled_allocs(fake):
    """The fake's live device allocation count once pending frees took
    effect (unchanged for 50 ms after a drain)."""
    drain()
    last = fake.live("device_alloc")
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = fake.live("device_alloc")
        if now == last:
            return now
        last = now
    return last
