"""pytest plugin for suites that use ``max.driver`` (entry point ``max_driver``).

Installed with the package and loaded by pytest automatically (disable it with
``-p no:max_driver``), but it acts only on tests that use its fixtures or its
``max_accelerator`` marker; a suite that uses neither is not changed by it,
and does not even import ``max.driver``.  It provides:

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
    The devices a test uses (from the fixtures above; accelerators 0 to n-1
    for the marker ``max_accelerator(n)``) are looked at when the test
    starts and again after its fixtures are torn down.  At the end the
    plugin calls ``device.synchronize(timeout=T)`` (``T`` is the ini option
    ``max_driver_leftover_timeout``, default 2 seconds).  If that times out
    (typically a queue gated by ``wait_for_host_value`` on a flag that was
    never signalled), the test errors at teardown with the message
    ``max_driver: work still pending on <device> ...``, naming the queues
    it can (the default queue, queues the test's fixtures returned).  Work
    already pending when the test started is not the test's: it belongs to
    an earlier test (one the plugin did not check, since it used no
    fixture), which the warning names.  The plugin cannot release work (it
    does not know the flag), so it leaves it: later tests on that device get
    a ``PendingWorkWarning`` instead of a check, without waiting, until the
    device drains.  Turn the check off for one test with
    ``@pytest.mark.max_allow_pending`` or for the whole suite with the ini
    option ``max_driver_check_pending = false``; turn it on for every test
    of a session, fixtures or not, on every device, with
    ``--max-driver-check-all`` or the ini option
    ``max_driver_check_all = true``.

Importing this module imports nothing from ``max.driver`` (which selects the
accelerator backend and may initialize a GPU driver): the package is imported
lazily, only by tests that use a fixture or marker of this plugin.
"""

from __future__ import annotations

from typing import Any

import pytest

_DEFAULT_TIMEOUT = 2.0

_WEDGED = pytest.StashKey[dict]()  # config: {device: who left its work}
_RAN = pytest.StashKey[list]()  # config: nodeids of the tests run so far
_IDLE_SINCE = pytest.StashKey[dict]()  # config: {device: len(_RAN) when idle}
_CHECK_ALL = pytest.StashKey[bool]()  # config: every test, every device
_CALL_FAILED = pytest.StashKey[bool]()  # item: the test body failed
_DEVICES = pytest.StashKey[list]()  # item: the devices checked for it
_TIMEOUT = pytest.StashKey[float]()  # config: max_driver_leftover_timeout


class PendingWorkWarning(pytest.PytestWarning):
    """Work left by an earlier test is still pending on a device."""


# ---- configuration ---------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--max-driver-check-all",
        action="store_true",
        default=None,
        help="max_driver plugin: check every test for work left pending on "
        "every max.driver device, not only the tests that use the plugin's "
        "fixtures or marker (also the ini option max_driver_check_all)",
    )
    parser.addini(
        "max_driver_check_all",
        "check every test for pending work on every device, not only those "
        "using the fixtures or marker (max_driver plugin; default false)",
        type="bool",
        default=False,
    )
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
    config.stash[_RAN] = []
    config.stash[_IDLE_SINCE] = {}
    config.stash[_TIMEOUT] = _leftover_timeout(config)
    option = config.getoption("max_driver_check_all", default=None)
    config.stash[_CHECK_ALL] = bool(
        option if option is not None else config.getini("max_driver_check_all")
    )


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


def _marker_count(item: pytest.Item) -> int:
    marker = item.get_closest_marker("max_accelerator")
    if marker is None:
        return 0
    return int(marker.args[0] if marker.args else marker.kwargs.get("count", 1))


def _devices_of(item: pytest.Item) -> list[Any]:
    """The devices the test uses, from its fixtures' parameters and its
    marker (without setting up a fixture); every device present when the
    session checks all tests; none for a test out of the plugin's scope."""
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    check_all = item.config.stash[_CHECK_ALL]
    wanted: list[int] = []  # -1: the CPU, i: Accelerator(i)
    if "max_cpu" in names:
        wanted.append(-1)
    if "max_device" in names:
        wanted.append(params.get("max_device", -1))
    if "max_accelerator" in names and params.get("max_accelerator") is not None:
        wanted.append(params["max_accelerator"])
    need = _marker_count(item)
    if not (wanted or need or check_all):
        return []  # out of scope: max.driver is not even imported
    count = _accelerator_count()
    if check_all:
        wanted += [-1, *range(count)]
    wanted += range(min(need, count))
    from max.driver import CPU, Accelerator

    devices: list[Any] = []
    for index in wanted:
        dev = CPU() if index < 0 else Accelerator(index)
        if dev not in devices:
            devices.append(dev)
    return devices


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


def _pending(target: Any, timeout: float) -> bool:
    try:
        target.synchronize(timeout=timeout)
    except TimeoutError:
        return True
    return False


def _earlier_tests(config: pytest.Config, dev: Any, nodeid: str) -> str:
    """Who left work that was pending on `dev` before test `nodeid` started:
    the tests run since the device was last seen idle."""
    ran = config.stash[_RAN]
    since = ran[config.stash[_IDLE_SINCE].get(dev, 0) :]
    if not since:
        return f"work started before the session's first test ({nodeid})"
    names = ", ".join(since[-3:])
    if len(since) > 3:
        names = f"one of {len(since)} tests ({names} and earlier ones)"
    elif len(since) > 1:
        names = f"one of {names}"
    return (
        f"{names} (run after {dev!r} was last seen idle and before {nodeid} "
        "started; not checked: it uses no max_driver fixture, and "
        "--max-driver-check-all checks every test)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """Before the fixtures: work already pending on a device the test uses
    is an earlier test's, and is marked so, not blamed on this test."""
    config = item.config
    devices = _devices_of(item) if config.getini("max_driver_check_pending") else []
    item.stash[_DEVICES] = devices
    wedged = config.stash[_WEDGED]
    for dev in devices:
        if dev in wedged:
            continue  # teardown warns, or checks it again once it drains
        if _pending(dev, 0):
            wedged[dev] = _earlier_tests(config, dev, item.nodeid)
        else:
            config.stash[_IDLE_SINCE][dev] = len(config.stash[_RAN])
    return (yield)


def _fixture_queues(item: pytest.Item) -> list[Any]:
    """Queues the test's fixtures returned (for the message: which of them
    still has work)."""
    from max.driver import DeviceQueue

    values = (getattr(item, "funcargs", None) or {}).values()
    return [v for v in values if isinstance(v, DeviceQueue)]


def _where(dev: Any, queues: list[Any]) -> str:
    candidates = [dev.default_queue]
    candidates += [q for q in queues if q.device == dev and q not in candidates]
    busy = [repr(q) for q in candidates if _pending(q, 0)]
    if busy:
        return ", ".join(busy)
    return (
        "on a queue that is neither the device's default queue nor one the "
        "test's fixtures returned; the device was idle when the test started"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any) -> Any:
    devices = item.stash.get(_DEVICES, [])
    # Before teardown: fixture values go with it.
    queues = _fixture_queues(item) if devices else []
    try:
        result = yield  # every fixture is torn down now (gates they held released)
    finally:
        item.config.stash[_RAN].append(item.nodeid)
    if devices:
        _check_pending(item, devices, queues)
    return result


def _check_pending(item: pytest.Item, devices: list[Any], queues: list[Any]) -> None:
    config = item.config
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
            config.stash[_IDLE_SINCE][dev] = len(config.stash[_RAN])
            continue
        wedged[dev] = item.nodeid
        if allowed or call_failed:
            continue
        problems.append(
            f"max_driver: work still pending on {dev!r} {timeout:g} s after "
            f"the test ended ({_where(dev, queues)}; gated by "
            f"wait_for_host_value on a flag that was never signalled?).  "
            f"Synchronize or release it in the test, or mark the test "
            f"@pytest.mark.max_allow_pending.  The work is left enqueued; "
            f"later tests on this device are not checked until it drains."
        )
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
