"""The test-only fake GPU driver (see build.py and fake_gpu.h)."""

from .build import build_fake_driver

__all__ = ["build_fake_driver"]
