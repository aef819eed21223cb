/*
 * autograd_api.h - the contract between the agent and probing._autograd, the optional C++
 * extension that records backward node executions below Python.
 *
 * Why a C++ extension: autograd nodes (torch::autograd::Node) and their pre-hooks exist only in
 * C++. From Python, timing a node means building a Python object for it (grad_fn), registering
 * a Python callable and, in backward, one Python call per node with its gradients wrapped as
 * Python tensors. Here a tensor's node is read straight from its autograd meta, a hook is a
 * small C++ object on the node, and running it appends (tag, time) to an array: no Python
 * object, no GIL in backward.
 *
 * How the agent uses it: it imports probing._autograd when torch is imported, takes the
 * pb_autograd_api struct from the capsule `_C_API`, and checks `version`. A missing extension
 * (not built: no C++ compiler or no torch headers at build time), a torch other than the one it
 * was built against, or a version mismatch leaves the agent on its Python-level probes.
 *
 * Node handles: node_of() returns a handle that holds a reference to the node (so its address
 * cannot be reused by another node) until release_all(); a handle from before the last
 * release_all() is stale and hook() refuses it. The address written to *id identifies the
 * node while its handle is held.
 *
 * Events: a hooked node appends {tag, CLOCK_MONOTONIC ns} when the engine is about to run it,
 * from whatever thread runs it, without the GIL. The first event after reset() queues the
 * callable given to set_pass_end() with the engine as a final callback (it runs with the GIL
 * once the backward pass is over); the agent reads events() there and calls reset().
 * The agent appends its own markers with mark() (tags with PB_AUTOGRAD_MARK set).
 */
#ifndef PB_AUTOGRAD_API_H
#define PB_AUTOGRAD_API_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define PB_AUTOGRAD_API_VERSION 1
#define PB_AUTOGRAD_CAPSULE "probing._autograd._C_API"
#define PB_AUTOGRAD_MARK ((uint64_t)1 << 63) /* tags the agent appends itself */
#define PB_AUTOGRAD_MAX_EVENTS 65536         /* per backward pass; more are counted, not kept */

typedef struct pb_autograd_event {
    uint64_t tag;
    int64_t ns;
} pb_autograd_event;

typedef struct pb_autograd_api {
    int version; /* PB_AUTOGRAD_API_VERSION */
    const char *torch_version; /* the torch it was built against */
    /* The autograd node of `obj` if it is a tensor with one: a handle (0: none) and the node's
     * address in *id. Never raises. [GIL held] */
    uint64_t (*node_of)(PyObject *obj, const void **id);
    /* Adds a pre-hook to the node that appends an event with `tag` each time the node runs; a
     * node hooked before gets its tag replaced instead. 0, or -1 for a stale handle or no
     * memory. [GIL held] */
    int (*hook)(uint64_t node, uint64_t tag);
    /* Lets go of every node handle. [GIL held] */
    void (*release_all)(void);
    /* The callable (borrowed; the extension keeps a reference) queued at a pass's first event. */
    void (*set_pass_end)(PyObject *callable);
    /* A backward pass has events since the last reset(). [any thread] */
    int (*pass_running)(void);
    /* The events since reset() in order, their count in *n and how many did not fit in
     * *dropped. The array is valid until reset(). [GIL held, no backward pass running] */
    const pb_autograd_event *(*events)(size_t *n, size_t *dropped);
    /* Appends an event of the agent's own (tag | PB_AUTOGRAD_MARK). [GIL held] */
    void (*mark)(uint64_t tag, int64_t ns);
    /* Forgets the events and ends the pass. [GIL held] */
    void (*reset)(void);
    /* torch.is_grad_enabled() for the calling thread, without a Python call. [any thread] */
    int (*grad_enabled)(void);
} pb_autograd_api;

#endif
