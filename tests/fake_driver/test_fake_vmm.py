"""Self-test of the fake driver's memory mapped by hand and multicast
objects (fake_vmm.c): the granularities, the order CUDA requires (every
device joins a multicast object before memory is bound), and copies
through the mappings."""

from __future__ import annotations

import ctypes

from .fakelib import (
    INVALID_VALUE,
    NOT_SUPPORTED,
    SUCCESS,
    U64,
    run_child,
    take_violations,
)

SIZE_T = ctypes.c_size_t
MIB2 = 2 << 20


class AllocProp(ctypes.Structure):
    """CUmemAllocationProp."""

    _fields_ = [
        ("type", ctypes.c_uint),
        ("handle_types", ctypes.c_uint),
        ("location_type", ctypes.c_uint),
        ("location_id", ctypes.c_int),
        ("win32", ctypes.c_void_p),
        ("flags", ctypes.c_ubyte * 8),
    ]


class MulticastProp(ctypes.Structure):
    """CUmulticastObjectProp."""

    _fields_ = [
        ("num_devices", ctypes.c_uint),
        ("size", SIZE_T),
        ("handle_types", ctypes.c_ulonglong),
        ("flags", ctypes.c_ulonglong),
    ]


class AccessDesc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint), ("id", ctypes.c_int), ("flags", ctypes.c_uint)]


def prop(device):
    return AllocProp(type=1, location_type=1, location_id=device)


def create(lib, device, size=MIB2):
    handle = ctypes.c_ulonglong()
    p = prop(device)
    assert lib.cuMemCreate(ctypes.byref(handle), SIZE_T(size), ctypes.byref(p), 0) == 0
    return handle


def multicast(lib, devices, size=MIB2):
    handle = ctypes.c_ulonglong()
    p = MulticastProp(num_devices=devices, size=size)
    assert lib.cuMulticastCreate(ctypes.byref(handle), ctypes.byref(p)) == SUCCESS
    return handle


def mapped(lib, handle, device, size=MIB2):
    ptr = ctypes.c_ulonglong()
    assert lib.cuMemAddressReserve(ctypes.byref(ptr), SIZE_T(size), 0, 0, 0) == 0
    assert lib.cuMemMap(ptr, SIZE_T(size), 0, handle, 0) == SUCCESS
    desc = AccessDesc(1, device, 3)
    assert lib.cuMemSetAccess(ptr, SIZE_T(size), ctypes.byref(desc), 1) == 0
    return ptr.value


def test_granularities(cu):
    g = SIZE_T()
    p = prop(0)
    assert cu.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(p), 0) == 0
    assert g.value == MIB2
    mp = MulticastProp(num_devices=2, size=MIB2)
    assert cu.cuMulticastGetGranularity(ctypes.byref(g), ctypes.byref(mp), 1) == 0
    assert g.value % MIB2 == 0 and g.value > MIB2  # recommended: larger
    value = ctypes.c_int()
    assert cu.cuDeviceGetAttribute(ctypes.byref(value), 132, 0) == SUCCESS
    assert value.value == 1


def test_sizes_must_be_whole_granules(cu):
    handle = ctypes.c_ulonglong()
    p = prop(0)
    assert cu.cuMemCreate(ctypes.byref(handle), SIZE_T(4096), ctypes.byref(p), 0) == (
        INVALID_VALUE
    )
    ptr = ctypes.c_ulonglong()
    assert cu.cuMemAddressReserve(ctypes.byref(ptr), SIZE_T(4096), 0, 0, 0) == (
        INVALID_VALUE
    )


def test_every_device_joins_before_memory_is_bound(cu):
    mc = multicast(cu, 2)
    memory = create(cu, 0)
    # Bound too early: device 1 has not joined.
    assert cu.cuMulticastAddDevice(mc, 0) == SUCCESS
    assert cu.cuMulticastBindMem(mc, 0, memory, 0, SIZE_T(MIB2), 0) == INVALID_VALUE
    assert cu.cuMulticastAddDevice(mc, 1) == SUCCESS
    assert cu.cuMulticastAddDevice(mc, 1) == INVALID_VALUE  # twice, or a third
    assert cu.cuMulticastBindMem(mc, 0, memory, 0, SIZE_T(MIB2), 0) == SUCCESS
    assert cu.cuMulticastBindMem(mc, 0, memory, 0, SIZE_T(MIB2), 0) == INVALID_VALUE
    other = create(cu, 1)
    assert cu.cuMulticastBindMem(mc, 0, other, 0, SIZE_T(MIB2), 0) == SUCCESS


def test_copies_through_the_mappings(cu):
    mc = multicast(cu, 2)
    mems = [create(cu, d) for d in (0, 1)]
    for d in (0, 1):
        assert cu.cuMulticastAddDevice(mc, d) == SUCCESS
    for m in mems:
        assert cu.cuMulticastBindMem(mc, 0, m, 0, SIZE_T(MIB2), 0) == SUCCESS
    own = mapped(cu, mems[0], 0)
    through = mapped(cu, mc, 0)
    stream = ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(stream), 1) == SUCCESS
    assert cu.cuMemsetD8Async(U64(own), 7, SIZE_T(16), stream) == SUCCESS
    out = ctypes.create_string_buffer(16)
    assert cu.cuMemcpyDtoHAsync_v2(ctypes.addressof(out), U64(through), 16, stream) == 0
    assert cu.cuStreamSynchronize(stream) == SUCCESS
    assert out.raw == b"\x07" * 16  # the multicast mapping reaches device 0's
    assert cu.cuStreamDestroy_v2(stream) == SUCCESS


def test_a_range_nothing_may_use_is_no_memory(cu):
    """Reserved and mapped, but no cuMemSetAccess: a copy into it is a
    violation (a device faults), never a host write to it."""
    memory = create(cu, 0)
    ptr = ctypes.c_ulonglong()
    assert cu.cuMemAddressReserve(ctypes.byref(ptr), SIZE_T(MIB2), 0, 0, 0) == 0
    assert cu.cuMemMap(ptr, SIZE_T(MIB2), 0, memory, 0) == SUCCESS
    stream = ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(stream), 1) == SUCCESS
    cu.cuMemsetD8Async(ptr, 7, SIZE_T(16), stream)
    cu.cuStreamSynchronize(stream)
    assert any("outside any live allocation" in v for v in take_violations(cu))
    assert cu.cuStreamDestroy_v2(stream) == SUCCESS


def test_a_driver_without_multicast(lib_path):
    code = (
        "v = ctypes.c_int(-1)\n"
        "assert lib.cuDeviceGetAttribute(ctypes.byref(v), 132, 0) == 0\n"
        "h = ctypes.c_ulonglong()\n"
        "p = (ctypes.c_uint * 8)(2, 0, 0, 0, 0, 0, 0, 0)\n"
        "out['attribute'] = v.value\n"
        "out['create'] = lib.cuMulticastCreate(ctypes.byref(h), p)\n"
    )
    out, _ = run_child(lib_path, code, FAKE_GPU_MULTICAST="0")
    assert out == {"attribute": 0, "create": NOT_SUPPORTED}
