/* Backend selection at import time (SPEC §2). */
#ifndef MXD_SELECT_H
#define MXD_SELECT_H

#include "mxd.h"

/* Accelerator `id` of the selected backend; id must be in range. */
mxd_device *mxd_selected_device(int id);

#endif /* MXD_SELECT_H */
