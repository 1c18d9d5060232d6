"""Self-test of the fake driver's device memory, copies and fills.

Fixtures are in conftest.py and helpers in fakelib.py; the default library
has 2 devices and 80 GiB each.  Each violation kind, checked here, is what
a real GPU would fault on (or hang in).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from .fakelib import (
    DISABLE_TIMING,
    ILLEGAL_ADDRESS,
    INVALID_CONTEXT,
    INVALID_DEVICE,
    INVALID_VALUE,
    LAUNCH_FAILED,
    NOT_READY,
    NOT_SUPPORTED,
    OUT_OF_MEMORY,
    SUCCESS,
    TESTS_DIR,
    WAIT,
    Ctx,
    Memcpy2D,
    P,
    gate,
    pattern,
    pinned,
    ref,
    run_child,
    take_violations,
)

POISON = 0xA5  # what fresh device memory holds
HEX = r"0x[0-9a-f]+"


def read_back(api, dptr, n, s):
    """Device bytes through pageable memory (synchronous)."""
    out = ctypes.create_string_buffer(n)
    assert api.d2h(ctypes.addressof(out), dptr, n, s) == SUCCESS
    return out.raw


HOST, DEVICE, ARRAY = 1, 2, 3


# --------------------------------------------------------------------------
# Allocation


def test_allocations_are_aligned_accounted_and_not_reused_at_once(api):
    lib = api.lib
    base = lib.fake_gpu_live(b"device_alloc"), lib.fake_gpu_live(b"device_bytes")
    ptrs = []
    for size in (1, 100, 257, 4096, 12345):
        rc, p = api.malloc(size)
        assert rc == SUCCESS and p and p % 256 == 0, size
        ptrs.append(p)
    assert len(set(ptrs)) == len(ptrs)
    assert lib.fake_gpu_live(b"device_alloc") == base[0] + 5
    assert lib.fake_gpu_live(b"device_bytes") == base[1] + 1 + 100 + 257 + 4096 + 12345
    s = api.stream()
    assert read_back(api, ptrs[3], 4096, s) == bytes([POISON]) * 4096  # not zeroed
    for p in ptrs:
        assert api.free(p) == SUCCESS
    assert (
        lib.fake_gpu_live(b"device_alloc"),
        lib.fake_gpu_live(b"device_bytes"),
    ) == base
    rc, again = api.malloc(100)
    assert rc == SUCCESS and again not in ptrs  # a stale pointer hits nothing
    assert api.free(again) == SUCCESS
    api.destroy(s)


def test_free_errors(api):
    rc, p = api.malloc(512)
    assert rc == SUCCESS
    assert api.free(p + 256) == INVALID_VALUE  # not the start
    assert api.free(12345) == INVALID_VALUE
    assert api.free(p) == SUCCESS
    assert api.free(p) == INVALID_VALUE  # twice


def test_zero_bytes(api):
    rc, p = api.malloc(0)
    if api.api == "cuda":
        assert rc == INVALID_VALUE  # documented for cuMemAlloc
    else:
        assert (rc, p) == (SUCCESS, None)  # HIP: NULL
        assert api.free(None) == SUCCESS


def test_out_of_memory_and_free_memory(cu):
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    before = free.value
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ref(d), before + 1) == OUT_OF_MEMORY
    assert cu.cuMemAlloc_v2(ref(d), 1 << 20) == SUCCESS
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    assert free.value == before - (1 << 20)
    big = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ref(big), free.value) == SUCCESS  # all of it
    assert cu.cuMemAlloc_v2(ref(ctypes.c_uint64()), 1) == OUT_OF_MEMORY
    assert cu.cuMemFree_v2(big) == SUCCESS
    assert cu.cuMemFree_v2(d) == SUCCESS
    assert cu.cuMemGetInfo_v2(ref(free), ref(total)) == SUCCESS
    assert free.value == before


def test_hip_out_of_memory(hip):
    p = P()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert hip.hipMemGetInfo(ref(free), ref(total)) == SUCCESS
    assert hip.hipMalloc(ref(p), free.value + 1) == OUT_OF_MEMORY


def test_cuda_allocation_needs_a_context(lib):
    d = ctypes.c_uint64()
    assert lib.cuMemAlloc_v2(ref(d), 256) == INVALID_CONTEXT
    with Ctx(lib, 1):
        assert lib.cuMemAlloc_v2(ref(d), 256) == SUCCESS
    assert lib.cuMemFree_v2(d) == INVALID_CONTEXT
    with Ctx(lib):
        assert lib.cuMemFree_v2(d) == SUCCESS


def test_allocation_uses_the_current_device(api):
    with api.on_device(1):
        rc, p = api.malloc(256)
    assert rc == SUCCESS
    assert api.pointer_device(p) == (SUCCESS, 1)
    assert api.free(p) == SUCCESS


NOT_ADDRESSABLE = r"""
import ctypes, sys
sys.path.insert(0, sys.argv[2])
import fake_driver.fakelib as t
lib = t.load(sys.argv[1])
assert lib.cuInit(0) == 0
api = t.child_api(lib, "cuda")
rc, p = api.malloc(4096)
assert rc == 0
print("allocated", flush=True)
ctypes.c_uint8.from_address(p).value
print("read device memory from the host")
"""


def test_device_memory_is_not_host_addressable(lib_path):
    # The fault is the point: no faulthandler, and under the sanitizer run
    # no ASan handler (whose report would count as a finding).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":handle_segv=0"
    r = subprocess.run(
        [sys.executable, "-c", NOT_ADDRESSABLE, str(lib_path), str(TESTS_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.stdout.strip() == "allocated", r.stderr
    assert r.returncode == -signal.SIGSEGV, r.stderr


def test_device_pointer_attribute(api):
    rc, p = api.malloc(1024)
    with api.on_device(1):
        rc1, q = api.malloc(1024)
        host = api.host_alloc(64)  # pinned, allocated on device 1
    _, view = api.device_ptr(host)
    assert rc == rc1 == SUCCESS
    assert api.pointer_device(p) == (SUCCESS, 0)
    assert api.pointer_device(p + 1000) == (SUCCESS, 0)  # inside
    assert api.pointer_device(q) == (SUCCESS, 1)
    assert api.pointer_device(host + 8) == (SUCCESS, 1)
    assert api.pointer_device(view) == (SUCCESS, 1)
    pageable = ctypes.create_string_buffer(8)
    assert api.pointer_device(ctypes.addressof(pageable))[0] == INVALID_VALUE
    assert api.pointer_device(p + 1024)[0] == INVALID_VALUE  # past the end
    assert api.pointer_device(p, attribute=1)[0] == INVALID_VALUE  # unsupported
    for x in (p, q):
        assert api.free(x) == SUCCESS
    assert api.pointer_device(p)[0] == INVALID_VALUE  # freed
    api.free_host(host)


def test_fault_injection_and_counting(api):
    lib, cuda = api.lib, api.api == "cuda"
    name = b"cuMemAlloc" if cuda else b"hipMalloc"
    assert lib.fake_gpu_fail(name, 1, OUT_OF_MEMORY) == 0
    assert api.malloc(256)[0] == OUT_OF_MEMORY
    rc, p = api.malloc(256)
    assert rc == SUCCESS
    s = api.stream()
    assert read_back(api, p, 16, s) == bytes([POISON]) * 16
    copy = b"cuMemcpyDtoHAsync" if cuda else b"hipMemcpyDtoHAsync"
    assert lib.fake_gpu_calls(copy) == 1
    if cuda:
        assert lib.fake_gpu_calls(b"cuMemcpyDtoHAsync_v2") == 1
    assert lib.fake_gpu_calls(name) == 2
    assert api.free(p) == SUCCESS
    api.destroy(s)


# --------------------------------------------------------------------------
# Copies and fills


def test_round_trip_through_pinned_memory_is_asynchronous(api):
    s = api.stream()
    data = pattern(4096)
    src, _ = pinned(api, data)
    dst, dst_view = pinned(api, bytes(4096))
    rc, d = api.malloc(4096)
    assert rc == SUCCESS
    flag, release = api.value_gate(s)
    assert api.h2d(d, src, 4096, s) == SUCCESS  # returns at once
    assert api.d2h(dst, d, 4096, s) == SUCCESS
    time.sleep(0.05)
    assert api.query(s) == NOT_READY and dst_view.raw == bytes(4096)
    release()
    assert api.sync(s) == SUCCESS
    assert dst_view.raw == data
    assert api.free(d) == SUCCESS
    for h in (src, dst, flag):
        api.free_host(h)
    api.destroy(s)


def test_round_trip_through_pageable_memory_is_synchronous(api):
    s = api.stream()
    rc, d = api.malloc(1024)
    assert rc == SUCCESS
    data = pattern(1024, seed=3)
    src = ctypes.create_string_buffer(data, 1024)
    flag, release = api.value_gate(s)
    done = []

    def copy():
        with api.on_device(0):  # CUDA: the stream's context on this thread
            done.append(api.h2d(d, ctypes.addressof(src), 1024, s))

    t = threading.Thread(target=copy)
    t.start()
    time.sleep(0.1)
    assert done == []  # waits for the stream's earlier work
    release()
    t.join(WAIT)
    assert done == [SUCCESS]
    src[:] = bytes(1024)  # copied at the call: the device keeps the old bytes
    out = ctypes.create_string_buffer(1024)
    assert api.d2h(ctypes.addressof(out), d, 1024, s) == SUCCESS
    assert out.raw == data  # complete on return, no synchronize needed
    assert api.free(d) == SUCCESS
    api.free_host(flag)
    api.destroy(s)


def test_device_to_device_and_fills(api):
    s = api.stream()
    rc, a = api.malloc(4096)
    rc2, b = api.malloc(4096)
    assert rc == rc2 == SUCCESS
    assert api.memset(8, a, 0x11, 4096, s) == SUCCESS
    assert api.memset(16, a + 256, 0xBEEF, 8, s) == SUCCESS
    assert api.memset(32, a + 512, 0x01020304, 4, s) == SUCCESS
    assert api.d2d(b, a, 1024, s) == SUCCESS
    assert api.d2d(b + 1024, a, 16, s) == SUCCESS  # into the same allocation
    got = read_back(api, b, 1040 + 16, s)
    expected = bytearray(b"\x11" * 1024)
    expected[256:272] = (0xBEEF).to_bytes(2, "little") * 8
    expected[512:528] = (0x01020304).to_bytes(4, "little") * 4
    assert got[:1024] == bytes(expected)
    assert got[1024:1040] == b"\x11" * 16
    assert got[1040:] == bytes([POISON]) * 16  # untouched
    # The pointer must be aligned to the element.
    assert api.memset(16, a + 1, 0, 4, s) == INVALID_VALUE
    assert api.memset(32, a + 2, 0, 4, s) == INVALID_VALUE
    assert api.memset(8, a, 0, 0, s) == SUCCESS  # nothing to do
    assert api.sync(s) == SUCCESS
    for p in (a, b):
        assert api.free(p) == SUCCESS
    api.destroy(s)


def test_fill_mapped_pinned_memory_through_its_device_view(api):
    s = api.stream()
    host, view = pinned(api, bytes(64))
    _, dev = api.device_ptr(host)
    assert api.memset(32, dev, 0xCAFEF00D, 16, s) == SUCCESS
    assert api.sync(s) == SUCCESS
    assert view.raw == (0xCAFEF00D).to_bytes(4, "little") * 16
    api.free_host(host)
    api.destroy(s)


def test_host_and_device_sides_are_not_interchangeable(api):
    s = api.stream()
    rc, d = api.malloc(256)
    assert rc == SUCCESS
    host, _ = pinned(api, bytes(256))
    pageable = ctypes.create_string_buffer(256)
    # The host view of pinned memory and pageable memory are no device
    # memory (the fake has no unified addressing), nor device memory host's.
    assert api.h2d(host, host, 256, s) == INVALID_VALUE
    assert api.h2d(ctypes.addressof(pageable), host, 256, s) == INVALID_VALUE
    assert api.d2h(host, ctypes.addressof(pageable), 256, s) == INVALID_VALUE
    assert api.h2d(d, d, 256, s) == INVALID_VALUE
    assert api.d2h(d, d, 256, s) == INVALID_VALUE
    assert api.h2d(0, host, 256, s) == INVALID_VALUE
    if api.api == "cuda":  # the NULL stream is refused (HIP's 0 is a stream)
        assert api.h2d(d, host, 256, None) != SUCCESS
    assert api.sync(s) == SUCCESS
    assert api.free(d) == SUCCESS
    api.free_host(host)
    api.destroy(s)


def test_peer_copies(api):
    s = api.stream()  # device 0's
    rc, a = api.malloc(512)
    with api.on_device(1):
        rc1, b = api.malloc(512)
    assert rc == rc1 == SUCCESS
    src, _ = pinned(api, pattern(512))
    assert api.h2d(a, src, 512, s) == SUCCESS
    assert api.peer(b, 1, a, 0, 512, s) == SUCCESS  # device 0 to device 1
    assert api.sync(s) == SUCCESS
    with api.on_device(1):
        other = api.stream()
        assert read_back(api, b, 512, other) == pattern(512)
    if api.api == "cuda":
        bogus = api.lib.cuMemcpyPeerAsync(b, P(12345), a, P(12345), 512, s)
        assert bogus == INVALID_CONTEXT
    else:
        assert api.peer(b, 5, a, 0, 512, s) == INVALID_DEVICE
    # Each side must be memory of the device the call names for it.
    assert api.peer(b, 0, a, 0, 512, s) == SUCCESS
    assert api.sync(s) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    name = "cuMemcpyPeerAsync" if api.api == "cuda" else "hipMemcpyPeerAsync"
    assert re.fullmatch(
        rf"{name} wrote {HEX} \+ 512: memory of device 1, not of device 0 "
        "as the call says",
        v,
    )
    for p in (a, b):
        assert api.free(p) == SUCCESS
    api.free_host(src)
    api.destroy(s)
    api.destroy(other)


def test_cuda_2d_copies(cu):
    api_s = P()
    assert cu.cuStreamCreate(ref(api_s), 1) == SUCCESS
    s = api_s
    pitch, width, height = 64, 40, 5
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ref(d), pitch * height) == SUCCESS
    src = ctypes.create_string_buffer(pattern(width * height), width * height)
    back = ctypes.create_string_buffer(width * height)
    up = Memcpy2D(
        srcMemoryType=HOST,
        srcHost=ctypes.addressof(src),
        srcPitch=width,
        dstMemoryType=DEVICE,
        dstDevice=d.value,
        dstPitch=pitch,
        WidthInBytes=width,
        Height=height,
    )
    assert cu.cuMemcpy2DAsync_v2(ref(up), s) == SUCCESS
    down = Memcpy2D(
        srcMemoryType=DEVICE,
        srcDevice=d.value,
        srcPitch=pitch,
        dstMemoryType=HOST,
        dstHost=ctypes.addressof(back),
        dstPitch=width,
        WidthInBytes=width,
        Height=height,
    )
    assert cu.cuMemcpy2DAsync_v2(ref(down), s) == SUCCESS
    assert back.raw == src.raw
    # Offsets: rows 1..2, bytes 8.. of the device rows.
    part = ctypes.create_string_buffer(16 * 2)
    down2 = Memcpy2D(
        srcXInBytes=8,
        srcY=1,
        srcMemoryType=DEVICE,
        srcDevice=d.value,
        srcPitch=pitch,
        dstMemoryType=HOST,
        dstHost=ctypes.addressof(part),
        dstPitch=16,
        WidthInBytes=16,
        Height=2,
    )
    assert cu.cuMemcpy2DAsync_v2(ref(down2), s) == SUCCESS
    rows = [src.raw[r * width : (r + 1) * width] for r in range(height)]
    assert part.raw == rows[1][8:24] + rows[2][8:24]
    # Pitches below the width, arrays, missing pointers: INVALID_VALUE.
    bad = Memcpy2D.from_buffer_copy(up)
    bad.srcPitch = width - 1
    assert cu.cuMemcpy2DAsync_v2(ref(bad), s) == INVALID_VALUE
    bad = Memcpy2D.from_buffer_copy(up)
    bad.dstMemoryType = ARRAY
    assert cu.cuMemcpy2DAsync_v2(ref(bad), s) == INVALID_VALUE
    bad = Memcpy2D.from_buffer_copy(up)
    bad.srcHost = None
    assert cu.cuMemcpy2DAsync_v2(ref(bad), s) == INVALID_VALUE
    assert cu.cuMemcpy2DAsync_v2(None, s) == INVALID_VALUE
    # The last row's end must be inside the allocation.
    over = Memcpy2D.from_buffer_copy(up)
    over.dstY = 1
    assert cu.cuMemcpy2DAsync_v2(ref(over), s) == ILLEGAL_ADDRESS  # pageable: now
    (v,) = take_violations(cu)
    extent = (height - 1) * pitch + width
    assert re.fullmatch(
        rf"cuMemcpy2DAsync wrote {HEX} \+ {extent} outside any live "
        "allocation of device 0",
        v,
    )
    assert cu.cuMemFree_v2(d) == SUCCESS
    assert cu.cuStreamDestroy_v2(s) == SUCCESS


def test_hip_2d_copies(hip):
    s = P()
    assert hip.hipStreamCreateWithFlags(ref(s), 1) == SUCCESS
    pitch, width, height = 128, 100, 3
    d, d2 = P(), P()
    assert hip.hipMalloc(ref(d), pitch * height) == SUCCESS
    assert hip.hipMalloc(ref(d2), pitch * height) == SUCCESS
    src = ctypes.create_string_buffer(pattern(width * height), width * height)
    back = ctypes.create_string_buffer(width * height)
    args = (width, height)
    assert hip.hipMemcpy2DAsync(d, pitch, src, width, *args, 1, s) == SUCCESS
    assert hip.hipMemcpy2DAsync(d2, pitch, d, pitch, *args, 3, s) == SUCCESS
    assert hip.hipMemcpy2DAsync(back, width, d2, pitch, *args, 2, s) == SUCCESS
    assert back.raw == src.raw
    again = ctypes.create_string_buffer(width * height)
    assert hip.hipMemcpy2DAsync(again, width, d, pitch, *args, 4, s) == SUCCESS
    assert again.raw == src.raw  # hipMemcpyDefault: sides by address
    host_copy = ctypes.create_string_buffer(width * height)
    assert hip.hipMemcpy2DAsync(host_copy, width, src, width, *args, 0, s) == 0
    assert host_copy.raw == src.raw
    assert hip.hipMemcpy2DAsync(d, pitch, src, width, *args, 2, s) == INVALID_VALUE
    assert hip.hipMemcpy2DAsync(d, width - 1, src, width, *args, 1, s) == 1
    assert hip.hipMemcpy2DAsync(d, pitch, src, width, *args, 5, s) == 21
    assert hip.hipStreamSynchronize(s) == SUCCESS
    for p in (d, d2):
        assert hip.hipFree(p) == SUCCESS
    assert hip.hipStreamDestroy(s) == SUCCESS


def test_a_stream_with_an_error_copies_nothing(api):
    s = api.stream()
    rc, d = api.malloc(64)
    assert rc == SUCCESS
    src, _ = pinned(api, pattern(64))
    assert api.lib.fake_gpu_async_error(s, LAUNCH_FAILED) == 0
    assert api.h2d(d, src, 64, s) == SUCCESS
    assert api.sync(s) == LAUNCH_FAILED
    out = ctypes.create_string_buffer(64)
    assert api.d2h(ctypes.addressof(out), d, 64, s) == LAUNCH_FAILED
    assert out.raw == bytes(64)
    assert api.free(d) == SUCCESS
    api.free_host(src)
    api.destroy(s)


# --------------------------------------------------------------------------
# Violations: what a GPU faults on


def test_reading_outside_an_allocation(api):
    s = api.stream()
    rc, d = api.malloc(4096)
    assert rc == SUCCESS
    dst, view = pinned(api, bytes(8192))
    assert api.d2h(dst, d, 8192, s) == SUCCESS  # checked when it runs
    assert api.sync(s) == ILLEGAL_ADDRESS
    assert api.query(s) == ILLEGAL_ADDRESS
    assert view.raw == bytes(8192)  # nothing copied
    (v,) = take_violations(api.lib)
    name = "cuMemcpyDtoHAsync" if api.api == "cuda" else "hipMemcpyDtoHAsync"
    assert v == f"{name} read {d:#x} + 8192 outside any live allocation of device 0"
    assert api.free(d) == SUCCESS
    api.free_host(dst)
    api.destroy(s)


def test_use_after_free(api):
    s = api.stream()
    rc, d = api.malloc(256)
    assert rc == SUCCESS
    assert api.free(d) == SUCCESS
    assert api.memset(8, d, 0, 256, s) == SUCCESS
    assert api.sync(s) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    assert v.endswith(f"wrote {d:#x} + 256 outside any live allocation of device 0")
    api.destroy(s)


def test_memory_of_another_device(api):
    s = api.stream()  # device 0's
    with api.on_device(1):
        rc, d = api.malloc(256)
    rc0, e = api.malloc(256)
    assert rc == rc0 == SUCCESS
    assert api.d2d(e, d, 256, s) == SUCCESS
    assert api.sync(s) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    assert v.endswith(
        f"read {d:#x} + 256: memory of device 1 used on a stream of device 0"
    )
    for p in (d, e):
        assert api.free(p) == SUCCESS
    api.destroy(s)


def test_pinned_range_beyond_its_allocation(api):
    s = api.stream()
    rc, d = api.malloc(1024)
    assert rc == SUCCESS
    src, _ = pinned(api, bytes(100))
    assert api.h2d(d, src + 50, 100, s) == SUCCESS
    assert api.sync(s) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    assert v.endswith(
        f"read {src + 50:#x} + 100 beyond the end of its pinned allocation "
        f"({src:#x} + 100)"
    )
    assert api.free(d) == SUCCESS
    api.free_host(src)
    api.destroy(s)


# --------------------------------------------------------------------------
# Stream-ordered allocation


def test_stream_ordered_allocation(api):
    lib = api.lib
    s, other = api.stream(), api.stream()
    # Pinned memory first: allocating it waits for the device.
    src, _ = pinned(api, pattern(256))
    dst, view = pinned(api, bytes(256))
    flag, release = api.value_gate(s)
    base = lib.fake_gpu_live(b"device_alloc")
    rc, d = api.malloc_async(256, s)
    assert rc == SUCCESS and d % 256 == 0
    assert lib.fake_gpu_live(b"device_alloc") == base + 1  # charged at once
    assert api.pointer_device(d) == (SUCCESS, 0)
    assert api.h2d(d, src, 256, s) == SUCCESS  # after it on its stream: fine
    # Ordered after it through an event: fine too.
    e = api.event(DISABLE_TIMING)
    api.record(e, s)
    api.wait_event(other, e)
    assert api.d2h(dst, d, 256, other) == SUCCESS
    assert api.free_async(d, other) == SUCCESS
    assert api.free_async(d, other) == INVALID_VALUE  # already on its way
    assert lib.fake_gpu_live(b"device_alloc") == base + 1  # not reached yet
    release()
    assert api.sync(s) == SUCCESS and api.sync(other) == SUCCESS
    assert view.raw == pattern(256)
    assert lib.fake_gpu_live(b"device_alloc") == base
    assert api.pointer_device(d)[0] == INVALID_VALUE
    api.event_destroy(e)
    for h in (src, dst, flag):
        api.free_host(h)
    api.destroy(s)
    api.destroy(other)


def test_use_before_a_stream_ordered_allocation(api):
    s, other = api.stream(), api.stream()
    flag, release = api.value_gate(s)
    rc, d = api.malloc_async(256, s)
    assert rc == SUCCESS
    assert api.memset(8, d, 0, 256, other) == SUCCESS  # not ordered after it
    assert api.sync(other) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    assert v.endswith(f"wrote {d:#x} + 256 outside any live allocation of device 0")
    release()
    assert api.free_async(d, s) == SUCCESS
    assert api.sync(s) == SUCCESS
    api.free_host(flag)
    api.destroy(s)
    api.destroy(other)


def test_free_overtaking_its_allocation(api):
    s, other = api.stream(), api.stream()
    flag, release = api.value_gate(s)
    base = api.lib.fake_gpu_live(b"device_alloc")
    rc, d = api.malloc_async(256, s)
    assert rc == SUCCESS
    assert api.free_async(d, other) == SUCCESS  # not ordered after it
    assert api.sync(other) == ILLEGAL_ADDRESS
    (v,) = take_violations(api.lib)
    name = "cuMemFreeAsync" if api.api == "cuda" else "hipFreeAsync"
    assert v == f"{name} freed {d:#x} before its allocation took effect"
    release()
    assert api.sync(s) == SUCCESS
    assert api.lib.fake_gpu_live(b"device_alloc") == base
    api.free_host(flag)
    api.destroy(s)
    api.destroy(other)


def test_synchronous_free_of_a_stream_ordered_allocation(api):
    s = api.stream()
    rc, d = api.malloc_async(4096, s)
    assert rc == SUCCESS
    assert api.free(d) == SUCCESS  # synchronises the device first
    assert api.pointer_device(d)[0] == INVALID_VALUE
    assert api.sync(s) == SUCCESS
    api.destroy(s)


def test_memory_pools_are_reported(lib):
    v = ctypes.c_int(-1)
    assert lib.cuDeviceGetAttribute(ref(v), 115, 0) == SUCCESS and v.value == 1
    v.value = -1
    assert lib.hipDeviceGetAttribute(ref(v), 88, 0) == SUCCESS and v.value == 1


NO_POOLS = r"""
v = ctypes.c_int(-1)
lib.cuDeviceGetAttribute(ctypes.byref(v), 115, 0); out["cu_attr"] = v.value
lib.hipDeviceGetAttribute(ctypes.byref(v), 88, 0); out["hip_attr"] = v.value
for name in ("cuda", "hip"):
    api = t.child_api(lib, name)
    s = api.stream()
    out[name] = [api.malloc_async(256, s)[0], api.free_async(12345, s)]
"""


def test_memory_pools_can_be_absent(lib_path):
    out, _ = run_child(lib_path, NO_POOLS, FAKE_GPU_MEMORY_POOLS=0)
    assert out["cu_attr"] == out["hip_attr"] == 0
    assert out["cuda"] == out["hip"] == [NOT_SUPPORTED, NOT_SUPPORTED]


# --------------------------------------------------------------------------
# Waits a real driver hangs in


def test_free_synchronizes_the_device(api):
    s = api.stream()
    rc, d = api.malloc(256)
    assert rc == SUCCESS
    release, blocker = gate()
    api.host_fn(s, blocker)
    done = []

    def free():
        with api.on_device(0):
            done.append(api.free(d))

    t = threading.Thread(target=free)
    t.start()
    time.sleep(0.1)
    assert done == []
    release.set()
    t.join(WAIT)
    assert done == [SUCCESS]
    api.destroy(s)


HANGS = r"""
api = t.child_api(lib, API)
s = api.stream()
src, dst = api.host_alloc(64), api.host_alloc(64)  # before the gate (rule 11)
_, dst_dev = api.device_ptr(dst)
flag, release = api.value_gate(s)  # waits for the host to set the flag
rc, d = api.malloc(64)
t0 = time.monotonic()
out["free"] = api.free(d)  # a real driver hangs here
rc, d = api.malloc(64)
buf = ctypes.create_string_buffer(64)
out["h2d"] = api.h2d(d, ctypes.addressof(buf), 64, s)  # and here
out["host_copy"] = api.h2d(dst_dev, src, 64, s)  # here (rule 10)
out["alloc"] = bool(api.host_alloc(8))  # and here (rule 11)
out["waited"] = time.monotonic() - t0
out["violations"] = t.violations(lib)
release()
out["sync"] = api.sync(s)
"""


@pytest.mark.parametrize("api_name", ["cuda", "hip"])
def test_waits_that_would_hang(lib_path, api_name):
    out, err = run_child(
        lib_path, f"API = {api_name!r}\n" + HANGS, FAKE_GPU_HANG_SECONDS=1
    )
    free, h2d, alloc = (
        ("cuMemFree", "cuMemcpyHtoDAsync", "cuMemHostAlloc")
        if api_name == "cuda"
        else ("hipFree", "hipMemcpyHtoDAsync", "hipHostMalloc")
    )
    assert out["free"] == out["h2d"] == out["host_copy"] == out["sync"] == SUCCESS
    assert out["alloc"] is True
    assert out["waited"] >= 3.9
    assert out["violations"] == [
        f"{free} would deadlock: device 0 still busy after 1 s; "
        "a real driver hangs here",
        f"{h2d} with pageable host memory would deadlock: its stream is "
        "still busy after 1 s; a real driver hangs here",
        f"{h2d} between host memory would deadlock: its stream is still busy "
        "after 1 s; a real driver hangs here",
        f"{alloc} would deadlock: device 0 still busy after 1 s; a real "
        "driver hangs here",
    ]
    assert "fake_gpu: violation: " in err
