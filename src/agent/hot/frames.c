/* frames.c - per-thread frame stacks; see frames.h. */
#include "frames.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread pb_tstate *pb_frames_tls __attribute__((tls_model("initial-exec")));

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p) { free(p); /* frames' grad_fn refs leak if a thread dies mid-forward */ }
static void tls_init(void) { pthread_key_create(&tls_key, tls_free); }

pb_tstate *pb_frames_new(void)
{
    pb_tstate *ts = pb_frames_tls;
    if (ts) return ts;
    pthread_once(&tls_once, tls_init);
    ts = calloc(1, sizeof *ts); /* once per thread */
    if (!ts) return NULL;
    ts->tid = (uint32_t)syscall(SYS_gettid);
    pthread_setspecific(tls_key, ts);
    pb_frames_tls = ts;
    return ts;
}
