/*
 * autograd_ext.h - which probing._autograd the agent can use, if any (autograd_ext.c). The
 * probes themselves are autograd.c's; this is only the finding, the background build's arrival
 * and the status line. [GIL held]
 */
#ifndef PB_AGENT_AUTOGRAD_EXT_H
#define PB_AGENT_AUTOGRAD_EXT_H

#include <stdint.h>

#include "autograd_api.h"

/* probing._autograd's interface when backward is recorded, PROBING_AUTOGRAD_EXT is not 0 and
 * the extension is there for this very torch (built with the package or on first use); NULL
 * otherwise, with the reason in pb_autograd_backward_probes() (a build may be started in the
 * background: pb_autograd_ext_built). */
const pb_autograd_api *pb_autograd_ext_open(int record_backward);

/* How backward nodes are timed: "extension (...)", "python (why)" or "off (PROBING_BACKWARD=0)".
 * Static text. [any thread] */
const char *pb_autograd_backward_probes(void);

/* Called at step boundaries: 1, once, when the background build has written the extension
 * (looked for every 16th call). */
int pb_autograd_ext_built(void);

/* The extension from the background build is in use from `step`: said in the status line. */
void pb_autograd_ext_in_use_from(int64_t step);

/* No background build is waited for any more (the agent is reset). */
void pb_autograd_ext_forget_build(void);

#endif
