/* Virtual devices (mxd.h, "Virtual devices"): what the generic layer and
 * the virtual backend share.  Not part of the public interface. */
#ifndef MXD_VIRTUAL_H
#define MXD_VIRTUAL_H

#include "backend.h"

/* The table of virtual devices (csrc/backends/virtual.c): it answers
 * what a device is asked about and refuses every object a device would
 * make (queues, events, flags), so no other entry is ever reached. */
extern const mxd_backend mxd_virtual_backend;

/* What a virtual device was made for; dev->native points to it, and it
 * never changes (a new setting makes new devices). */
typedef struct mxd_virtual_target {
    char api[MXD_VIRTUAL_VALUE_SIZE];  /* never empty */
    char arch[MXD_VIRTUAL_VALUE_SIZE]; /* empty when none was set */
} mxd_virtual_target;

static inline const mxd_virtual_target *
mxd_virtual_target_of(const mxd_device *dev)
{
    return (const mxd_virtual_target *)dev->native;
}

/* The RuntimeError (MXD_UNAVAILABLE) for asking virtual device `dev` to
 * `what` ("have a queue", ...): it names virtual device mode. */
mxd_status mxd_virtual_refuse(const mxd_device *dev, const char *what,
                              mxd_error *err);

/* The fork handlers' part (registered by init.c). */
extern const mxd_fork_hooks mxd_virtual_fork_hooks;

#endif /* MXD_VIRTUAL_H */
