/*
 * lifecycle.h - starting and stopping the agent inside the traced process.
 *
 * Start order: settings, tables (rings), memory sampler, eval thread, server. Any failure turns
 * the agent off with one message on stderr; the user's program goes on. A fork()ed child keeps
 * nothing running: an atfork handler disables the hooks and closes the inherited listening
 * socket without touching threads or locks, so DataLoader workers behave exactly as before.
 */
#ifndef PB_AGENT_LIFECYCLE_H
#define PB_AGENT_LIFECYCLE_H

/* Starts the agent (idempotent). Returns 0 or a negative error; on error the agent is off and a
 * message was printed. [GIL held] */
int pb_agent_start(void);

/* Stops everything and frees the rings; also what POST /api/detach does (from a thread of its
 * own, after the answer was sent). [GIL held; releases it while joining threads] */
void pb_agent_stop(void);

/* Unix socket path, or NULL when not running. */
const char *pb_agent_endpoint(void);

/* The TCP port the agent listens on, 0 when none. [any thread] */
int pb_agent_tcp_port(void);

#endif
