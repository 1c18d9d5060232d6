"""tests/conftest.py's ``_quiesce_cpu``: work that never drains (a gate a
failed test left closed) is waited for once, not once per later test
(issue 26: one failed docs example left a gate that made every later test
wait 20 s, and a CI run of 11 minutes take hours)."""

from __future__ import annotations

import importlib.util
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

from max.driver import CPU, CompletionFlag

CONFTEST = Path(__file__).resolve().parent / "conftest.py"


def _fresh_conftest():
    spec = importlib.util.spec_from_file_location("conftest_under_test", CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _teardown(module, nodeid: str) -> tuple[float, list[str]]:
    """Runs the fixture's teardown as pytest would after test `nodeid`:
    seconds taken and the warnings it gave."""
    definition = module._quiesce_cpu  # the undecorated function:
    fixture = getattr(definition, "__wrapped__", None)  # pytest >= 8.4
    if fixture is None:
        fixture = definition.__pytest_wrapped__.obj
    steps = fixture(SimpleNamespace(node=SimpleNamespace(nodeid=nodeid)))
    next(steps)
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in steps:
            pass
    return time.monotonic() - start, [str(w.message) for w in caught]


def test_a_stuck_cpu_is_waited_for_once():
    module = _fresh_conftest()
    module.WAIT = 0.3
    cpu = CPU()
    flag = CompletionFlag(cpu)
    cpu.default_queue.wait_for_host_value(flag, 1)
    try:
        took, said = _teardown(module, "t::first")
        assert took >= 0.3 and len(said) == 1 and "did not drain" in said[0]
        for nodeid in ("t::second", "t::third"):
            took, said = _teardown(module, nodeid)
            assert took < 0.2 and said == []  # no wait, no repeat
        assert module._cpu_stuck_since == ["t::first"]
    finally:
        flag.signal(1)
    cpu.synchronize(timeout=10)
    took, said = _teardown(module, "t::fourth")
    assert said == [] and module._cpu_stuck_since == [None]  # drained: normal
