/* Symmetric multicast pools (MAX 26.7's SymmetricPool): one fixed-size
 * allocation per set of accelerators, each device's own memory bound to
 * one multicast object, registered for the process and never freed (the
 * driver owns it; handles come and go).  Backends that have multicast
 * objects (CUDA) provide it through their operations table. */
#ifndef MXD_SYMMETRIC_H
#define MXD_SYMMETRIC_H

#include <stdbool.h>
#include <stdint.h>

#include "memory.h"
#include "mxd.h"

typedef struct mxd_symmetric mxd_symmetric;

/* The most devices a pool spans (a multicast team: an NVLink switch
 * connects up to 72 GPUs). */
enum { MXD_MAX_SYMMETRIC_DEVICES = 128 };

/* Whether every one of devs[0..n) can back a multicast pool (answered
 * before anything is allocated; false for a device of a backend without
 * multicast objects, the CPU included). */
bool mxd_symmetric_supported(mxd_device *const *devs, int n);

/* Allocates a pool of `bytes` usable bytes per device over devs[0..n), in
 * any order, and registers it.  MXD_UNAVAILABLE when fewer than two
 * distinct devices are given, a device lacks multicast support, a pool is
 * registered for these devices already, or the driver fails. */
mxd_status mxd_symmetric_allocate(mxd_device *const *devs, int n,
                                  uint64_t bytes, mxd_symmetric **out,
                                  mxd_error *err);

/* The pool registered for exactly these devices (in any order), or NULL. */
mxd_symmetric *mxd_symmetric_lookup(mxd_device *const *devs, int n);

uint64_t mxd_symmetric_byte_size(const mxd_symmetric *pool);

/* A new reference to memory over dev's view of the pool: its own memory,
 * or (multicast) the multicast object, byte_size bytes, owned by the pool
 * (releasing the memory frees nothing).  MXD_UNAVAILABLE when the pool
 * does not span dev. */
mxd_status mxd_symmetric_memory(mxd_symmetric *pool, mxd_device *dev,
                                bool multicast, mxd_memory **out,
                                mxd_error *err);

#endif /* MXD_SYMMETRIC_H */
