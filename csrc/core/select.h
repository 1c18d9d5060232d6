/* Backend selection at import time (SPEC §2). */
#ifndef MXD_SELECT_H
#define MXD_SELECT_H

#include "mxd.h"

/* mxd_init's work (init.c): sets the host runner and picks the backend,
 * once; later calls return the first call's outcome. */
mxd_status mxd_select_backend(const mxd_host_runner *runner, mxd_error *err);

/* Accelerator `id` of the selected backend, prepared for use on first
 * call; id must be in range. */
mxd_status mxd_selected_device(int id, mxd_device **out, mxd_error *err);

/* True in the child of a fork() made after a GPU backend was chosen. */
bool mxd_gpu_forked(void);

#endif /* MXD_SELECT_H */
