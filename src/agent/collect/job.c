/*
 * job.c - the job registry in the c10d store and per-group collective state; see job.h.
 *
 * Why the job's own store: every rank of a torch.distributed job already talks to it (it is how
 * init_process_group found the others), it is scoped to the job, and it needs no new service or
 * port. What goes there is small JSON per rank, written by that rank only:
 *   {"rank":3,"local_rank":1,"node_rank":1,"world":4,"host":"node-b","pid":123,
 *    "unix":"/tmp/probing-0/123.sock","tcp":"10.0.0.2:41234","agent":"<32 hex digits>",
 *    "started":1700000000.1,
 *    "hb":1700000100.2}
 * Keys: "probing/v1/<job>/rank/<rank>", <job> being TORCHELASTIC_RUN_ID or "-" (the default
 * group's store is already private to one run of init_process_group; the run id keeps an
 * elastic restart's entries apart).
 *
 * Reading the roster: store.check(every key), then store.multi_get(every key) when all are
 * there: two round trips for the whole job. When some are missing (a get on a missing key would
 * wait for the store's timeout), key by key: store.check([key]), then store.get, 2 round trips
 * per rank. Done only when someone asks (GET /api/job), never on a timer: a 1,000-rank job does
 * not load its store with probing's reads unless a user runs `probing ranks`.
 *
 * This file: the endpoint, the collective slots' writers, the job thread ("probing-job", all the
 * store traffic, with the GIL), registration, stop and the one reset of the state (pb_job_reset:
 * agent start, fork). The routes that read all this (GET /api/job, /api/rank, /api/stack,
 * /api/arrivals) are job_routes.c; the state of both is one struct, pb_job (job_state.h, which
 * says which thread writes what); PyTorch's flight recorder is read by flight_recorder.c.
 */
#include "job.h"
#include "job_state.h"

#include "clock.h"
#include "config.h"
#include "flight_recorder.h"
#include "intern.h"
#include "jsonw.h"
#include "log.h"
#include "netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ENTRY_MAX 1024

pb_job_state pb_job = {
    .rings = {[0 ... PB_JOB_MAX_GROUPS - 1] = {PTHREAD_MUTEX_INITIALIZER, {{0}}}},
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .rank_registered = -1,
};

/* Where this agent listens (pb_job_set_endpoint): what its registry entry advertises. */
static const char *agent_endpoint(void)
{
    return pb_job.agent_unix_set ? pb_job.agent_unix : NULL;
}

void pb_job_set_endpoint(const char *unix_path, int tcp_port, const char *agent_id)
{
    pb_job.agent_unix_set = 0;
    pb_job.agent_tcp_port = 0;
    pb_job.agent_id[0] = '\0';
    pb_job.agent_id[0] = '\0';
    if (!unix_path) return;
    snprintf(pb_job.agent_id, sizeof pb_job.agent_id, "%s", agent_id ? agent_id : "");
    snprintf(pb_job.agent_unix, sizeof pb_job.agent_unix, "%s", unix_path);
    pb_job.agent_unix_set = 1;
    pb_job.agent_tcp_port = tcp_port;
}

/* ---------------------------------------------------------------- collective state */

/* The slot of group, made on first use. -1 when the table is full. [GIL held] */
static int slot_of(PyObject *group)
{
    if (group == Py_None) group = NULL;
    if (group && group == pb_job.default_group) group = NULL;
    int n = atomic_load(&pb_job.nslots);
    for (int i = 0; i < n; i++)
        if (pb_job.slots[i].group == group) return i;
    if (n >= PB_JOB_MAX_GROUPS) return -1;
    uint32_t name = 0;
    if (!group) {
        name = pb_intern_cstr("WORLD");
    } else {
        PyObject *v = PyObject_GetAttrString(group, "group_name");
        PyObject *s = v ? PyObject_Str(v) : NULL;
        const char *t = s ? PyUnicode_AsUTF8(s) : NULL;
        char buf[80];
        snprintf(buf, sizeof buf, "%s", t && *t ? t : "?");
        name = pb_intern_cstr(buf);
        Py_XDECREF(s);
        Py_XDECREF(v);
        PyErr_Clear();
        Py_INCREF(group);
    }
    pb_job.slots[n].group = group;
    atomic_store(&pb_job.slots[n].name_id, name);
    atomic_store(&pb_job.nslots, n + 1);
    return n;
}

int pb_job_coll_enter(PyObject *group, uint32_t op_id, int64_t bytes)
{
    int i = slot_of(group);
    if (i < 0) return -1;
    coll_slot *s = &pb_job.slots[i];
    atomic_fetch_add(&s->version, 1);
    atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_store_explicit(&s->op_id, op_id, memory_order_relaxed);
    atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&s->enter_wall_ns, pb_wall_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->enter_mono_ns, pb_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->state, COLL_ENTERED, memory_order_relaxed);
    atomic_fetch_add(&s->version, 1);
    struct arrival_ring *r = &pb_job.rings[i];
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    pthread_mutex_lock(&r->mu);
    r->e[seq % PB_JOB_ARRIVALS] = (arrival){seq, op_id, bytes,
                                            atomic_load_explicit(&s->enter_wall_ns, memory_order_relaxed),
                                            atomic_load_explicit(&s->enter_mono_ns, memory_order_relaxed), 0};
    pthread_mutex_unlock(&r->mu);
    return i;
}

uint64_t pb_job_coll_seq(int slot)
{
    if (slot < 0 || slot >= PB_JOB_MAX_GROUPS) return 0;
    return atomic_load_explicit(&pb_job.slots[slot].seq, memory_order_relaxed);
}

void pb_job_coll_exit_at(int slot, uint64_t seq, int ok)
{
    if (slot < 0 || slot >= PB_JOB_MAX_GROUPS) return;
    coll_slot *s = &pb_job.slots[slot];
    struct arrival_ring *r = &pb_job.rings[slot];
    pthread_mutex_lock(&r->mu);
    arrival *a = &r->e[seq % PB_JOB_ARRIVALS];
    if (a->seq == seq && ok) a->exit_mono_ns = pb_now_ns();
    pthread_mutex_unlock(&r->mu);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq) return;
    atomic_fetch_add(&s->version, 1);
    atomic_store_explicit(&s->exit_mono_ns, pb_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->state, ok ? COLL_COMPLETED : COLL_FAILED, memory_order_relaxed);
    atomic_fetch_add(&s->version, 1);
}

/* ---------------------------------------------------------------- registry state */

const char *pb_job_host(void)
{
    if (!pb_job.host[0])
        pb_netaddr_host_name(pb_config_str("PROBING_HOST"), pb_job.host, sizeof pb_job.host);
    return pb_job.host;
}

/* The address other nodes reach us at: PROBING_ADVERTISE_ADDR, else the IPv4 address of the
 * interface the job's own traffic uses when it names one (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME:
 * their first name), else the first IPv4 address of an interface that is up and not loopback,
 * else "" (no TCP endpoint). */
static void advertise_addr(char *out, size_t outlen)
{
    const char *given = pb_config_str("PROBING_ADVERTISE_ADDR");
    out[0] = '\0';
    if (given && *given) {
        snprintf(out, outlen, "%s", given);
        return;
    }
    char want[IF_NAMESIZE + 1] = "";
    const char *named = getenv("GLOO_SOCKET_IFNAME");
    if (!named || !*named) named = getenv("NCCL_SOCKET_IFNAME");
    if (named && *named && *named != '^' && *named != '=') {
        snprintf(want, sizeof want, "%s", named);
        want[strcspn(want, ",")] = '\0';
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return;
    for (int pass = want[0] ? 0 : 1; pass < 2 && !out[0]; pass++) { /* 0: the named one */
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            if (pass == 0 && strcmp(i->ifa_name, want) != 0) continue;
            if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)outlen);
            break;
        }
    }
    freeifaddrs(ifs);
}

/* This rank's entry as JSON (into a fixed buffer). */
static void entry_text(char *out, size_t outlen)
{
    pb_buf b = PB_BUF_INIT;
    pb_jsonw w;
    pb_jsonw_init(&w, &b);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "rank");
    pb_jsonw_int(&w, pb_job.my_rank);
    pb_jsonw_key(&w, "local_rank");
    pb_jsonw_int(&w, pb_job.local_rank);
    pb_jsonw_key(&w, "node_rank");
    pb_jsonw_int(&w, pb_job.node_rank);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, pb_job.world);
    pb_jsonw_key(&w, "host");
    pb_jsonw_str(&w, pb_job_host());
    pb_jsonw_key(&w, "pid");
    pb_jsonw_int(&w, pb_job.registered_pid);
    pb_jsonw_key(&w, "unix");
    const char *ep = agent_endpoint();
    pb_jsonw_str_or_null(&w, ep);
    pb_jsonw_key(&w, "tcp");
    pb_jsonw_str_or_null(&w, pb_job.tcp_addr);
    pb_jsonw_key(&w, "agent"); /* what a signed TCP request names (common/auth.h) */
    pb_jsonw_str_or_null(&w, pb_job.agent_id[0] ? pb_job.agent_id : NULL);
    pb_jsonw_key(&w, "started");
    pb_jsonw_double(&w, pb_job.started_unix);
    pb_jsonw_key(&w, "hb");
    pb_jsonw_double(&w, (double)pb_wall_ns() / 1e9);
    pb_jsonw_obj_end(&w);
    snprintf(out, outlen, "%s", b.data && !pb_jsonw_error(&w) ? b.data : "{}");
    pb_buf_free(&b);
}

/* store.method(*args) with the GIL taken; returns a new reference or NULL (error cleared). */
static PyObject *store_call(const char *method, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    PyObject *fn = args ? PyObject_GetAttrString(pb_job.store, method) : NULL;
    PyObject *r = fn ? PyObject_CallObject(fn, args) : NULL;
    if (!r) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *s = v ? PyObject_Str(v) : NULL;
        pb_log_debug("job: store.%s failed: %s", method, s ? PyUnicode_AsUTF8(s) : "?");
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        PyErr_Clear();
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    return r;
}

static void heartbeat(void)
{
    char text[ENTRY_MAX];
    entry_text(text, sizeof text);
    PyObject *r = store_call("set", "(ss)", pb_job.self_key, text);
    Py_XDECREF(r);
}

static void add_entry(pb_buf *items, PyObject *v)
{
    char *data = NULL;
    Py_ssize_t len = 0;
    if (v && PyBytes_Check(v) && PyBytes_AsStringAndSize(v, &data, &len) == 0 && len > 0 &&
        len < ENTRY_MAX) {
        pb_buf_puts(items, items->len ? "," : "");
        pb_json_escape(items, data, (size_t)len); /* a JSON string, quotes included */
    }
}

/* When every rank has an entry: all of them in two round trips (store.check of every key, then
 * store.multi_get). Returns 1 when done, 0 to read key by key. [thread, GIL held] */
static int read_roster_at_once(pb_buf *items)
{
    PyObject *keys = PyList_New(pb_job.world), *has = NULL, *values = NULL;
    int done = 0;
    for (int r = 0; keys && r < pb_job.world; r++) {
        char key[sizeof pb_job.key_prefix + 16];
        snprintf(key, sizeof key, "%s%d", pb_job.key_prefix, r);
        PyObject *k = PyUnicode_FromString(key);
        if (!k) goto out;
        PyList_SET_ITEM(keys, r, k);
    }
    if (!keys) goto out;
    PyObject *check = PyObject_GetAttrString(pb_job.store, "check");
    has = check ? PyObject_CallOneArg(check, keys) : NULL;
    Py_XDECREF(check);
    if (!has || PyObject_IsTrue(has) != 1) goto out;
    PyObject *multi = PyObject_GetAttrString(pb_job.store, "multi_get");
    values = multi ? PyObject_CallOneArg(multi, keys) : NULL;
    Py_XDECREF(multi);
    if (!values || !PyList_Check(values) || PyList_GET_SIZE(values) != pb_job.world) goto out;
    for (int r = 0; r < pb_job.world; r++) add_entry(items, PyList_GET_ITEM(values, r));
    done = 1;
out:
    PyErr_Clear();
    Py_XDECREF(values);
    Py_XDECREF(has);
    Py_XDECREF(keys);
    return done;
}

/* Reads every rank's entry. [thread, GIL held] */
static void read_roster(pb_buf *items, pb_buf *miss)
{
    if (read_roster_at_once(items)) return;
    for (int r = 0; r < pb_job.world; r++) {
        char key[sizeof pb_job.key_prefix + 16];
        snprintf(key, sizeof key, "%s%d", pb_job.key_prefix, r);
        PyObject *keys = Py_BuildValue("[s]", key);
        PyObject *has = NULL;
        if (keys) {
            PyObject *fn = PyObject_GetAttrString(pb_job.store, "check");
            has = fn ? PyObject_CallOneArg(fn, keys) : NULL;
            Py_XDECREF(fn);
            PyErr_Clear();
        }
        Py_XDECREF(keys);
        PyObject *v = has && PyObject_IsTrue(has) == 1 ? store_call("get", "(s)", key) : NULL;
        Py_XDECREF(has);
        size_t before = items->len;
        add_entry(items, v);
        if (items->len == before) {
            pb_buf_printf(miss, "%s%d", miss->len ? "," : "", r);
        }
        Py_XDECREF(v);
        PyErr_Clear();
    }
}

static void *job_main(void *arg)
{
    (void)arg;
    int64_t period_ns = (int64_t)(pb_config_double("PROBING_JOB_HEARTBEAT", 5) * 1e9);
    if (period_ns < 100000000) period_ns = 100000000;
    int64_t next_hb = 0;
    pthread_mutex_lock(&pb_job.mu);
    for (;;) {
        while (!pb_job.stop_requested && !pb_job.roster_wanted && !pb_job.fr_wanted &&
               pb_now_ns() < next_hb) {
            int64_t wait = next_hb - pb_now_ns();
            if (wait > 1000000000) wait = 1000000000;
            if (wait < 1000000) wait = 1000000;
            struct timespec until = pb_deadline_ns(CLOCK_REALTIME, wait);
            pthread_cond_timedwait(&pb_job.cv, &pb_job.mu, &until);
        }
        int stop = pb_job.stop_requested, want = pb_job.roster_wanted, want_fr = pb_job.fr_wanted;
        pthread_mutex_unlock(&pb_job.mu);
        pb_buf items = PB_BUF_INIT, miss = PB_BUF_INIT, fr = PB_BUF_INIT;
        PyGILState_STATE g = PyGILState_Ensure();
        if (stop) {
            PyObject *r = store_call("delete_key", "(s)", pb_job.self_key);
            Py_XDECREF(r);
        } else {
            if (pb_now_ns() >= next_hb) {
                heartbeat();
                next_hb = pb_now_ns() + period_ns;
            }
            if (want) read_roster(&items, &miss);
            if (want_fr) pb_fr_read(&fr);
        }
        PyGILState_Release(g);
        pthread_mutex_lock(&pb_job.mu);
        if (stop) {
            pb_buf_free(&fr);
            break;
        }
        if (want_fr) {
            pb_job.fr_wanted = 0;
            pb_buf_free(&pb_job.fr_groups);
            pb_job.fr_groups = fr;
            pb_job.fr_read_ns = pb_now_ns();
            pb_job.fr_gen++;
            pthread_cond_broadcast(&pb_job.cv);
        } else {
            pb_buf_free(&fr);
        }
        if (want) {
            pb_job.roster_wanted = 0;
            pb_buf_free(&pb_job.roster);
            pb_buf_free(&pb_job.missing);
            pb_job.roster = items;
            pb_job.missing = miss;
            pb_job.roster_read_ns = pb_now_ns();
            pb_job.roster_gen++;
            pthread_cond_broadcast(&pb_job.cv);
        } else {
            pb_buf_free(&items);
            pb_buf_free(&miss);
        }
    }
    pb_job.thread_running = 0;
    pthread_cond_broadcast(&pb_job.cv);
    pthread_mutex_unlock(&pb_job.mu);
    return NULL;
}

/* Registers as rank of world in store (a new reference is taken). [GIL held] */
static int register_with(PyObject *st, int rank, int size)
{
    pb_job.world = size;
    pb_job.my_rank = rank;
    Py_INCREF(st);
    Py_XSETREF(pb_job.store, st);
    pb_job.local_rank = pb_job_env_int("LOCAL_RANK", -1);
    pb_job.node_rank = pb_job_env_int("GROUP_RANK", pb_job_env_int("NODE_RANK", -1));
    pb_job.registered_pid = getpid();
    pb_job.started_unix = (double)pb_wall_ns() / 1e9;
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    snprintf(pb_job.job_id, sizeof pb_job.job_id, "%s", run && *run ? run : "-");
    snprintf(pb_job.key_prefix, sizeof pb_job.key_prefix, "probing/v1/%s/rank/", pb_job.job_id);
    snprintf(pb_job.self_key, sizeof pb_job.self_key, "%s%d", pb_job.key_prefix, pb_job.my_rank);
    int port = pb_job.agent_tcp_port;
    if (port > 0) {
        char addr[256];
        advertise_addr(addr, sizeof addr);
        if (addr[0]) snprintf(pb_job.tcp_addr, sizeof pb_job.tcp_addr, "%s:%d", addr, port);
    }
    heartbeat(); /* the first entry is there before init_process_group returns */
    pthread_mutex_lock(&pb_job.mu);
    pb_job.stop_requested = 0;
    int rc = -pthread_create(&pb_job.thread, NULL, job_main, NULL);
    pb_job.thread_running = rc == 0;
    pthread_mutex_unlock(&pb_job.mu);
    if (rc) return rc;
    pb_job.registered = 1;
    atomic_store(&pb_job.rank_registered, rank);
    return 0;
}

int pb_job_registered_rank(void *ctx)
{
    (void)ctx;
    return atomic_load(&pb_job.rank_registered);
}

int pb_job_register_store(PyObject *st, int rank, int size)
{
    if (pb_job.registered || !agent_endpoint()) return -EALREADY;
    if (size < 1 || rank < 0 || rank >= size) return -EINVAL;
    return register_with(st, rank, size);
}

int pb_job_register(void)
{
    if (pb_job.registered || !agent_endpoint()) return 0;
    PyObject *c10d = PyImport_ImportModule("torch.distributed.distributed_c10d");
    PyObject *init = c10d ? PyObject_CallMethod(c10d, "is_initialized", NULL) : NULL;
    int rc = -ENOENT;
    if (!init || PyObject_IsTrue(init) != 1) goto out;
    PyObject *ws = PyObject_CallMethod(c10d, "get_world_size", NULL);
    PyObject *rk = ws ? PyObject_CallMethod(c10d, "get_rank", NULL) : NULL;
    int size = ws ? (int)PyLong_AsLong(ws) : 0;
    int rank = rk ? (int)PyLong_AsLong(rk) : 0;
    Py_XDECREF(ws);
    Py_XDECREF(rk);
    if (size < 2) goto out;
    PyObject *st = PyObject_CallMethod(c10d, "_get_default_store", NULL);
    if (!st) goto out;
    Py_XDECREF(pb_job.default_group);
    pb_job.default_group = PyObject_CallMethod(c10d, "_get_default_group", NULL);
    if (!pb_job.default_group) PyErr_Clear();
    rc = register_with(st, rank, size);
    Py_DECREF(st);
out:
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(init);
    Py_XDECREF(c10d);
    if (rc && rc != -ENOENT) pb_log_debug("job: not registered (%d)", rc);
    return rc;
}

void pb_job_stop(void)
{
    if (!pb_job.registered || pb_job.registered_pid != getpid()) return;
    pb_job.registered = 0;
    atomic_store(&pb_job.rank_registered, -1);
    int joined = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&pb_job.mu);
    pb_job.stop_requested = 1;
    pthread_cond_broadcast(&pb_job.cv);
    struct timespec until = pb_deadline_ns(CLOCK_REALTIME, 200 * 1000000);
    while (pb_job.thread_running && pthread_cond_timedwait(&pb_job.cv, &pb_job.mu, &until) == 0) {}
    joined = !pb_job.thread_running;
    pthread_mutex_unlock(&pb_job.mu);
    if (joined) pthread_join(pb_job.thread, NULL);
    else pthread_detach(pb_job.thread); /* the store does not answer: never delay the exit for it */
    Py_END_ALLOW_THREADS
    if (joined) Py_CLEAR(pb_job.store); /* else the thread may still use it */
}

void pb_job_reset(int forked)
{
    /* The endpoint: a forked child is no agent and advertises nothing; a new agent sets its own. */
    pb_job.agent_unix[0] = '\0';
    pb_job.agent_unix_set = 0;
    pb_job.agent_tcp_port = 0;
    pb_job.agent_id[0] = '\0';

    /* Collective state: the next agent numbers each group's calls from 1 again and keeps no
     * arrival from before it started. */
    int n = atomic_load(&pb_job.nslots);
    for (int i = 0; i < PB_JOB_MAX_GROUPS; i++) {
        struct arrival_ring *r = &pb_job.rings[i];
        if (forked) pthread_mutex_init(&r->mu, NULL); /* a thread may have held one at fork */
        if (i >= n) continue; /* never used: still zero */
        coll_slot *s = &pb_job.slots[i];
        if (!forked) Py_XDECREF(s->group); /* a child forgets the parent's reference */
        s->group = NULL;
        atomic_store(&s->name_id, 0);
        atomic_store(&s->seq, 0);
        atomic_store(&s->op_id, 0);
        atomic_store(&s->state, COLL_NONE);
        atomic_store(&s->bytes, 0);
        atomic_store(&s->enter_wall_ns, 0);
        atomic_store(&s->enter_mono_ns, 0);
        atomic_store(&s->exit_mono_ns, 0);
        atomic_store(&s->version, 0);
        if (!forked) pthread_mutex_lock(&r->mu); /* a Work's callback may complete a call */
        memset(r->e, 0, sizeof r->e);
        if (!forked) pthread_mutex_unlock(&r->mu);
    }
    atomic_store(&pb_job.nslots, 0);
    if (!forked) Py_XDECREF(pb_job.default_group);
    pb_job.default_group = NULL;

    /* Registry state. A job thread that the last stop could not join (its store did not
     * answer) still uses the store, the keys and the fields under mu until its call returns:
     * they stay as they are then. */
    int thread_left = 0;
    if (forked) {
        pthread_mutex_init(&pb_job.mu, NULL);
        pthread_cond_init(&pb_job.cv, NULL);
    } else {
        pthread_mutex_lock(&pb_job.mu);
        thread_left = pb_job.thread_running;
        pthread_mutex_unlock(&pb_job.mu);
    }
    pb_job.registered = 0;
    atomic_store(&pb_job.rank_registered, -1);
    pb_job.host[0] = '\0'; /* PROBING_HOST is read again */
    if (thread_left) return;
    if (!forked) {
        pb_buf_free(&pb_job.roster);
        pb_buf_free(&pb_job.missing);
        pb_buf_free(&pb_job.fr_groups);
        Py_CLEAR(pb_job.store);
    }
    /* A forked child forgets the parent's buffers and store without touching them. */
    pb_job.roster = (pb_buf)PB_BUF_INIT;
    pb_job.missing = (pb_buf)PB_BUF_INIT;
    pb_job.fr_groups = (pb_buf)PB_BUF_INIT;
    pb_job.store = NULL;
    pb_job.thread_running = pb_job.stop_requested = 0;
    pb_job.roster_wanted = pb_job.fr_wanted = 0;
    pb_job.roster_gen = pb_job.fr_gen = 0;
    pb_job.roster_read_ns = pb_job.fr_read_ns = 0;
    pb_job.job_id[0] = pb_job.key_prefix[0] = pb_job.self_key[0] = '\0';
    pb_job.world = pb_job.my_rank = pb_job.local_rank = pb_job.node_rank = 0;
    pb_job.registered_pid = 0;
    pb_job.started_unix = 0;
    pb_job.tcp_addr[0] = '\0';
}
