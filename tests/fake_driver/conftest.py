"""Fixtures of the fake driver's self-test (helpers live in fakelib.py).

The library is built once per session into a private directory, so this
process is the first to load it and its environment-derived configuration
is the default one (2 devices).  Every fixture that hands out the library
fails the test if it left violations behind that it did not clear.
"""

from __future__ import annotations

import os

import pytest

from .build import build_fake_driver
from .fakelib import CFLAGS, SUCCESS, Api, Ctx, load, violations


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fake_gpu")


@pytest.fixture(scope="session")
def lib_path(build_dir):
    return build_fake_driver(build_dir, extra_cflags=CFLAGS)


@pytest.fixture(scope="session")
def lib(lib_path):
    # The first call reads the environment: make it the default one.
    saved = {
        k: os.environ.pop(k) for k in list(os.environ) if k.startswith("FAKE_GPU_")
    }
    try:
        lib = load(lib_path)
        assert lib.cuInit(0) == SUCCESS
    finally:
        os.environ.update(saved)
    return lib


def _fresh(lib):
    lib.fake_gpu_reset()
    lib.fake_gpu_clear_violations()


def _done(lib):
    lib.fake_gpu_reset()
    assert violations(lib) == [], "the test left violations behind"


@pytest.fixture
def cu(lib):
    _fresh(lib)
    with Ctx(lib):
        yield lib
    _done(lib)


@pytest.fixture
def hip(lib):
    _fresh(lib)
    assert lib.hipSetDevice(0) == SUCCESS
    yield lib
    _done(lib)


@pytest.fixture(params=["cuda", "hip"])
def api(request, lib):
    _fresh(lib)
    if request.param == "cuda":
        with Ctx(lib):
            yield Api(lib, "cuda")
    else:
        assert lib.hipSetDevice(0) == SUCCESS
        yield Api(lib, "hip")
    _done(lib)
