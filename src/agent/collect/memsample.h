/*
 * memsample.h - a background thread that samples the process's resident memory.
 *
 * Module hooks must not make a syscall, yet python.torch_trace has allocated/max_allocated
 * columns. On CPU those are the process RSS: this thread reads /proc/self/statm every
 * PROBING_MEM_SAMPLE_MS and publishes the current value and the peak since the last
 * pb_memsample_reset_peak() (called at each step boundary). Hooks read two relaxed atomics.
 */
#ifndef PB_AGENT_MEMSAMPLE_H
#define PB_AGENT_MEMSAMPLE_H

/* Starts the sampler. Returns 0 or a negative errno. [GIL held, start-up] */
int pb_memsample_start(void);
/* Stops and joins the sampler. NULL-safe to call when not started. */
void pb_memsample_stop(void);
/* In a forked child: forget the thread without joining it. [atfork child] */
void pb_memsample_forget_after_fork(void);

/* Latest RSS in MB and peak since the last reset. [any thread, lock-free] */
float pb_memsample_current_mb(void);
float pb_memsample_peak_mb(void);
/* Reads RSS now (one pread of /proc/self/statm), publishes it and returns it in MB; the last
 * sampled value when the sampler is not running. Once per step, never per module. [any thread] */
float pb_memsample_read_now_mb(void);
/* Starts a new peak window at the current value. [any thread] */
void pb_memsample_reset_peak(void);

#endif
