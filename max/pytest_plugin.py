"""pytest plugin for suites that use ``max.driver`` (entry point ``max_driver``).

Installed with the package and loaded by pytest automatically (disable it with
``-p no:max_driver``).  It provides:

Fixtures
    ``max_cpu``          the CPU device.
    ``max_device``       parametrized over every device present: the CPU, then
                         each accelerator (test ids ``cpu``, ``gpu0``, ``gpu1``...).
    ``max_accelerator``  parametrized over the accelerators only (ids ``gpu0``...);
                         the test is skipped when there is none.

Markers
    ``@pytest.mark.max_accelerator``     skip unless an accelerator exists;
    ``@pytest.mark.max_accelerator(2)``  skip unless at least 2 exist.
    ``@pytest.mark.max_allow_pending``   no pending-work check for this test.

Pending-work check
    After a test's fixtures are torn down, every device the test got from the
    fixtures above must finish its work: the plugin calls
    ``device.synchronize(timeout=T)`` (``T`` is the ini option
    ``max_driver_leftover_timeout``, default 2 seconds).  If that times out
    (typically a queue gated by ``wait_for_host_value`` on a flag that was
    never signalled), the test errors at teardown with the message
    ``max_driver: work still pending on <device> ...``.  The plugin cannot
    release the work (it does not know the flag), so it leaves it: later
    tests on that device are not blamed for it (they get a warning, without
    waiting, until the device drains).  Turn the check off for one test with
    ``@pytest.mark.max_allow_pending`` or for the whole suite with the ini
    option ``max_driver_check_pending = false``.

Importing this module imports nothing from ``max.driver`` (which selects the
accelerator backend and may initialize a GPU driver): the package is imported
lazily, only by tests that use a fixture or marker of this plugin.
"""

from __future__ import annotations

from typing import Any

import pytest

_DEVICE_FIXTURES = ("max_cpu", "max_device", "max_accelerator")
_DEFAULT_TIMEOUT = 2.0

_WEDGED = pytest.StashKey[dict]()  # config: {device: nodeid that left work}
_CALL_FAILED = pytest.StashKey[bool]()  # item: the test body failed
_TIMEOUT = pytest.StashKey[float]()  # config: max_driver_leftover_timeout


class PendingWorkWarning(pytest.PytestWarning):
    """Work left by an earlier test is still pending on a device."""


# ---- configuration ---------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "max_driver_leftover_timeout",
        "seconds each device a test used may take to finish its work after "
        f"the test (max_driver plugin; default {_DEFAULT_TIMEOUT:g})",
        default=str(_DEFAULT_TIMEOUT),
    )
    parser.addini(
        "max_driver_check_pending",
        "fail tests that leave work pending on a max.driver device "
        "(max_driver plugin; default true)",
        type="bool",
        default=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "max_accelerator(count=1): skip the test unless at least `count` "
        "max.driver accelerators exist (max_driver plugin)",
    )
    config.addinivalue_line(
        "markers",
        "max_allow_pending: do not fail the test when it leaves work pending "
        "on a max.driver device (max_driver plugin)",
    )
    config.stash[_WEDGED] = {}
    config.stash[_TIMEOUT] = _leftover_timeout(config)


def _leftover_timeout(config: pytest.Config) -> float:
    raw = config.getini("max_driver_leftover_timeout")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"max_driver_leftover_timeout must be a number of seconds, got {raw!r}"
        ) from None
    if value < 0:
        raise pytest.UsageError(
            f"max_driver_leftover_timeout must be >= 0, got {raw!r}"
        )
    return value


# ---- fixtures and parametrization ------------------------------------------


def _accelerator_count() -> int:
    from max.driver import accelerator_count

    return accelerator_count()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "max_device" not in names and "max_accelerator" not in names:
        return
    count = _accelerator_count()
    gpus = [pytest.param(i, id=f"gpu{i}") for i in range(count)]
    if "max_device" in names:
        params = [pytest.param(-1, id="cpu"), *gpus]
        metafunc.parametrize("max_device", params, indirect=True)
    if "max_accelerator" in names:
        if not gpus:
            no_gpu = pytest.mark.skip(reason="no max.driver accelerator present")
            gpus = [pytest.param(None, id="no-accelerator", marks=no_gpu)]
        metafunc.parametrize("max_accelerator", gpus, indirect=True)


@pytest.fixture
def max_cpu() -> Any:
    """The CPU device, ``max.driver.CPU()``."""
    from max.driver import CPU

    return CPU()


@pytest.fixture
def max_device(request: pytest.FixtureRequest) -> Any:
    """Each device present in turn: the CPU (id ``cpu``), then every
    accelerator (ids ``gpu0``, ``gpu1``...)."""
    from max.driver import CPU, Accelerator

    index = getattr(request, "param", -1)
    return CPU() if index < 0 else Accelerator(index)


@pytest.fixture
def max_accelerator(request: pytest.FixtureRequest) -> Any:
    """Each accelerator in turn (ids ``gpu0``...); skipped when there is none."""
    from max.driver import Accelerator

    index = getattr(request, "param", None)
    if index is None:  # requested outside parametrization
        if _accelerator_count() == 0:
            pytest.skip("no max.driver accelerator present")
        index = 0
    return Accelerator(index)


# ---- marker ----------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    count = None
    for item in items:
        marker = item.get_closest_marker("max_accelerator")
        if marker is None:
            continue
        need = marker.args[0] if marker.args else marker.kwargs.get("count", 1)
        if count is None:
            count = _accelerator_count()
        if count < need:
            what = "none" if count == 0 else f"only {count}"
            plural = "s" if need != 1 else ""
            reason = f"needs {need} max.driver accelerator{plural}, {what} present"
            item.add_marker(pytest.mark.skip(reason=reason))


# ---- pending-work check ----------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


def _used_devices(item: pytest.Item) -> list[Any]:
    funcargs = getattr(item, "funcargs", None) or {}
    devices = []
    for name in _DEVICE_FIXTURES:
        dev = funcargs.get(name)
        if dev is not None and dev not in devices:
            devices.append(dev)
    return devices


def _fixture_queues(item: pytest.Item) -> list[Any]:
    """Queues the test's fixtures returned (for the message: which of them
    still has work)."""
    from max.driver import DeviceQueue

    values = (getattr(item, "funcargs", None) or {}).values()
    return [v for v in values if isinstance(v, DeviceQueue)]


def _pending(target: Any, timeout: float) -> bool:
    try:
        target.synchronize(timeout=timeout)
    except TimeoutError:
        return True
    return False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any) -> Any:
    # Collect the devices before teardown: fixture values go with it.
    devices = _used_devices(item)
    queues = _fixture_queues(item) if devices else []
    result = yield  # every fixture is torn down now (gates they held released)
    config = item.config
    if not devices or not config.getini("max_driver_check_pending"):
        return result
    wedged = config.stash[_WEDGED]
    allowed = item.get_closest_marker("max_allow_pending") is not None
    call_failed = item.stash.get(_CALL_FAILED, False)
    timeout = config.stash[_TIMEOUT]
    problems = []
    for dev in devices:
        if dev in wedged:
            if _pending(dev, 0):
                item.warn(
                    PendingWorkWarning(
                        f"max_driver: {dev!r} still has work pending that "
                        f"{wedged[dev]} left behind; pending-work check skipped"
                    )
                )
                continue
            del wedged[dev]  # drained since: check this test normally
        # A test that failed or allows pending work is not made to wait.
        if not _pending(dev, 0 if (allowed or call_failed) else timeout):
            continue
        wedged[dev] = item.nodeid
        if allowed or call_failed:
            continue
        candidates = [dev.default_queue]
        candidates += [q for q in queues if q.device == dev and q not in candidates]
        busy = [q for q in candidates if _pending(q, 0)]
        where = ", ".join(repr(q) for q in busy) or "a queue the test created"
        problems.append(
            f"max_driver: work still pending on {dev!r} {timeout:g} s after "
            f"the test ended ({where}; gated by wait_for_host_value on a flag "
            f"that was never signalled?).  Synchronize or release it in the "
            f"test, or mark the test @pytest.mark.max_allow_pending.  The work "
            f"is left enqueued; later tests on this device are not checked "
            f"until it drains."
        )
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return result
