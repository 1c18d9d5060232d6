"""Graph capture and replay on accelerators (SPEC §16): the checks of
tests/capture_support.py (shared with the CPU suite), then what only
accelerators have: pinned and pageable memory, layouts a graph cannot copy,
several devices."""

from __future__ import annotations

import capture_support as checks
import numpy as np
import pytest
from capture_support import ACCELERATOR_REFUSALS, CHECKS, INTACT, REFUSALS, Kit

from max import driver
from max.driver import Buffer, DeviceQueue

ALL_REFUSALS = {**REFUSALS, **ACCELERATOR_REFUSALS}


@pytest.fixture
def kit(acc):
    return Kit(acc)


@pytest.mark.parametrize("name", CHECKS)
def test_capture(kit, name):
    getattr(checks, name)(kit)


@pytest.mark.parametrize("what", sorted(ALL_REFUSALS))
def test_refused_while_capturing(kit, what):
    checks.check_refusal(kit, *ALL_REFUSALS[what])


def test_pinned_with_another_devices_memory_is_refused(kit, aq, acc1):
    remote = Buffer.from_numpy(np.arange(2, dtype=np.float32)).to(acc1)
    pinned = kit.empty(aq, 2, pinned=True)
    acc1.synchronize()
    with driver.capture(aq) as graph:
        with pytest.raises(RuntimeError, match="another device's memory") as info:
            pinned.inplace_copy_from(remote)
        assert INTACT in str(info.value)
    assert graph.num_nodes == 0


def test_other_devices(kit, aq, acc1):
    """A peer copy is captured; another device's queue cannot join, and a
    graph runs only on its own device."""
    remote = Buffer.from_numpy(np.arange(4, dtype=np.float32)).to(acc1)
    dst = kit.empty(aq, 4)
    other = DeviceQueue(acc1)
    acc1.synchronize()
    with driver.capture(aq) as graph:
        dst.inplace_copy_from(remote)
        with pytest.raises(RuntimeError, match="another device"):
            other.wait_for(aq)
    assert not other.is_capturing
    with pytest.raises(ValueError, match="cannot be launched"):
        graph.launch(other)
    graph.launch()
    assert checks.read(dst) == [0, 1, 2, 3]


def test_capture_on_a_busy_queue(kit, aq):
    """Work enqueued before the capture goes on running (gated here); the
    capture does not wait for it and adds nothing to it."""
    gate = driver.CompletionFlag(kit.device)
    aq.wait_for_host_value(gate, 1)
    ran = []
    with driver.capture(aq) as graph:
        checks.enqueue(aq, lambda: ran.append(1))
    gate.signal(1)
    aq.synchronize(timeout=checks.WAIT)
    assert ran == []
    graph.launch()
    aq.synchronize(timeout=checks.WAIT)
    assert ran == [1]


def test_operation_failing_halfway_discards_the_capture(kit, aq, api, fake):
    """A host function's node is in the driver's graph when its gate's wait
    fails (an injected fault): the capture cannot be launched, so
    end_capture() discards it instead of handing out a broken graph."""
    wait_value = {"cuda": "cuStreamWaitValue64", "hip": "hipStreamWaitValue64"}
    aq.begin_capture()
    assert fake.fail(wait_value[api], 1, 1) == 0
    with pytest.raises((ValueError, RuntimeError)):
        checks.enqueue(aq, lambda: None)
    with pytest.raises(RuntimeError, match="failed halfway") as info:
        aq.end_capture()
    assert "discarded" in str(info.value)
    assert not aq.is_capturing
    ran = []
    with driver.capture(aq) as graph:  # the queue captures again
        checks.enqueue(aq, lambda: ran.append(1))
    graph.launch()
    aq.synchronize(timeout=checks.WAIT)
    assert ran == [1]
