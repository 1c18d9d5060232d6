/* Backend selection at import time (SPEC §2). */
#ifndef MXD_SELECT_H
#define MXD_SELECT_H

#include "mxd.h"

/* Accelerator `id` of the selected backend, prepared for use on first
 * call; id must be in range. */
mxd_status mxd_selected_device(int id, mxd_device **out, mxd_error *err);

#endif /* MXD_SELECT_H */
