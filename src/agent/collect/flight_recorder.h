/*
 * flight_recorder.h - PyTorch's flight recorder of collectives, read for GET /api/rank's
 * "flight_recorder" (job.c asks; the analysis is src/report/hang.c's).
 *
 * torch (2.5 and later) keeps it when TORCH_FR_BUFFER_SIZE (or TORCH_NCCL_TRACE_BUFFER_SIZE) is
 * above 0 at init_process_group. This unit only reads it, into JSON; it keeps no state but
 * whether the recorder is on. Who calls what: the server thread asks pb_fr_enabled() (no GIL),
 * job.c's thread ("probing-job") calls pb_fr_read() with the GIL when a reading is wanted.
 */
#ifndef PB_AGENT_FLIGHT_RECORDER_H
#define PB_AGENT_FLIGHT_RECORDER_H

#include "buf.h"

/* Whether the job has the recorder on: TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE
 * above 0 (read once, then remembered). [server thread] */
int pb_fr_enabled(void);

/* Appends to items the items of a "groups" array, one per process group (see
 * flight_recorder.c for their fields), comma-separated, starting with a comma when items is not
 * empty. Nothing when torch has no recorder. [GIL held, job thread] */
void pb_fr_read(pb_buf *items);

#endif
