"""Graph capture and replay on the CPU backend (SPEC §16): the checks of
capture_support.py, which the accelerator suite runs on CUDA and HIP too."""

from __future__ import annotations

import capture_support as checks
import pytest
from capture_support import CHECKS, REFUSALS, Kit

from max.driver import CPU


@pytest.fixture
def kit():
    return Kit(CPU())


@pytest.mark.parametrize("name", CHECKS)
def test_capture(kit, name):
    getattr(checks, name)(kit)


@pytest.mark.parametrize("what", sorted(REFUSALS))
def test_refused_while_capturing(kit, what):
    checks.check_refusal(kit, *REFUSALS[what])
