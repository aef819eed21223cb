/*
 * job.c - the job registry in the c10d store and per-group collective state; see job.h.
 *
 * Why the job's own store: every rank of a torch.distributed job already talks to it (it is how
 * init_process_group found the others), it is scoped to the job, and it needs no new service or
 * port. What goes there is small JSON per rank, written by that rank only:
 *   {"rank":3,"local_rank":1,"node_rank":1,"world":4,"host":"node-b","pid":123,
 *    "unix":"/tmp/probing-0/123.sock","tcp":"10.0.0.2:41234","started":1700000000.1,
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
 */
#include "job.h"

#include "clock.h"
#include "config.h"
#include "intern.h"
#include "jsonw.h"
#include "log.h"
#include "netaddr.h"
#include "pystack.h"
#include "registry.h"
#include "step.h"

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

#define MAX_GROUPS 16
#define ENTRY_MAX 1024


/* Where this agent listens (pb_job_set_endpoint): what its registry entry advertises. Written
 * at agent start and stop with the GIL held and the heartbeat thread not running. */
static char agent_unix[512];
static int agent_unix_set, agent_tcp_port;

static const char *agent_endpoint(void) { return agent_unix_set ? agent_unix : NULL; }

void pb_job_set_endpoint(const char *unix_path, int tcp_port)
{
    agent_unix_set = 0;
    agent_tcp_port = 0;
    if (!unix_path) return;
    snprintf(agent_unix, sizeof agent_unix, "%s", unix_path);
    agent_unix_set = 1;
    agent_tcp_port = tcp_port;
}

/* ---------------------------------------------------------------- collective state */

enum { COLL_NONE, COLL_ENTERED, COLL_COMPLETED, COLL_FAILED };

typedef struct coll_slot {
    PyObject *group;          /* strong ref; NULL for the default group [GIL held] */
    _Atomic uint32_t version; /* odd while being written */
    _Atomic uint32_t name_id; /* interned group name; 0: slot unused */
    _Atomic uint64_t seq;
    _Atomic uint32_t op_id;
    _Atomic int state;
    _Atomic int64_t bytes;
    _Atomic int64_t enter_wall_ns, enter_mono_ns, exit_mono_ns;
} coll_slot;

static coll_slot slots[MAX_GROUPS];

/* Per slot, the last PB_JOB_ARRIVALS calls (entry seq % PB_JOB_ARRIVALS): stragglers' input.
 * Written under the GIL (enter) or from a Work's future callback (exit), read by the HTTP
 * thread: one mutex per ring, held for a few stores or one copy. */
typedef struct arrival {
    uint64_t seq; /* 0: empty */
    uint32_t op_id;
    int64_t bytes, enter_wall_ns, enter_mono_ns, exit_mono_ns; /* exit 0: not completed */
} arrival;
static struct arrival_ring {
    pthread_mutex_t mu;
    arrival e[PB_JOB_ARRIVALS];
} rings[MAX_GROUPS] = {[0 ... MAX_GROUPS - 1] = {PTHREAD_MUTEX_INITIALIZER, {{0}}}};
static _Atomic int nslots;
static PyObject *default_group; /* the default process group object, to call it WORLD */

/* The slot of group, made on first use. -1 when the table is full. [GIL held] */
static int slot_of(PyObject *group)
{
    if (group == Py_None) group = NULL;
    if (group && group == default_group) group = NULL;
    int n = atomic_load(&nslots);
    for (int i = 0; i < n; i++)
        if (slots[i].group == group) return i;
    if (n >= MAX_GROUPS) return -1;
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
    slots[n].group = group;
    atomic_store(&slots[n].name_id, name);
    atomic_store(&nslots, n + 1);
    return n;
}

int pb_job_coll_enter(PyObject *group, uint32_t op_id, int64_t bytes)
{
    int i = slot_of(group);
    if (i < 0) return -1;
    coll_slot *s = &slots[i];
    atomic_fetch_add(&s->version, 1);
    atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_store_explicit(&s->op_id, op_id, memory_order_relaxed);
    atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&s->enter_wall_ns, pb_wall_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->enter_mono_ns, pb_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->state, COLL_ENTERED, memory_order_relaxed);
    atomic_fetch_add(&s->version, 1);
    struct arrival_ring *r = &rings[i];
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
    if (slot < 0 || slot >= MAX_GROUPS) return 0;
    return atomic_load_explicit(&slots[slot].seq, memory_order_relaxed);
}

void pb_job_coll_exit_at(int slot, uint64_t seq, int ok)
{
    if (slot < 0 || slot >= MAX_GROUPS) return;
    coll_slot *s = &slots[slot];
    struct arrival_ring *r = &rings[slot];
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

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static int registered;        /* [GIL held] */
static int thread_running;    /* under mu */
static int stop_requested;    /* under mu */
static int roster_wanted;     /* under mu */
static uint64_t roster_gen;   /* under mu: bumped after each roster read */
static int64_t roster_read_ns; /* under mu */
static pb_buf roster;         /* under mu: ",\"...\"" items of the "ranks" array */
static pb_buf missing;        /* under mu: "1,5" */
static int fr_wanted;         /* under mu: /api/rank asks for a flight recorder reading */
static uint64_t fr_gen;       /* under mu: bumped after each reading */
static int64_t fr_read_ns;    /* under mu */
static pb_buf fr_groups;      /* under mu: the "groups" array's items of the last reading */
static int fr_on = -1;        /* TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE > 0 */
static char job_id[256];
static char key_prefix[320];
static char self_key[340];
static int world, my_rank, local_rank, node_rank;
static _Atomic int rank_registered = -1; /* my_rank while registered, else -1 [any thread] */
static pid_t registered_pid;
static double started_unix;
static PyObject *store; /* strong ref, used by the thread with the GIL */
static char host[256];
static char tcp_addr[300];

const char *pb_job_host(void)
{
    if (!host[0]) pb_netaddr_host_name(pb_config_str("PROBING_HOST"), host, sizeof host);
    return host;
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

static int env_int(const char *name, int deflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : deflt;
}

/* This rank's entry as JSON (into a fixed buffer). */
static void entry_text(char *out, size_t outlen)
{
    pb_buf b = PB_BUF_INIT;
    pb_jsonw w;
    pb_jsonw_init(&w, &b);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "rank");
    pb_jsonw_int(&w, my_rank);
    pb_jsonw_key(&w, "local_rank");
    pb_jsonw_int(&w, local_rank);
    pb_jsonw_key(&w, "node_rank");
    pb_jsonw_int(&w, node_rank);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, world);
    pb_jsonw_key(&w, "host");
    pb_jsonw_str(&w, pb_job_host());
    pb_jsonw_key(&w, "pid");
    pb_jsonw_int(&w, registered_pid);
    pb_jsonw_key(&w, "unix");
    const char *ep = agent_endpoint();
    if (ep) pb_jsonw_str(&w, ep);
    else pb_jsonw_null(&w);
    pb_jsonw_key(&w, "tcp");
    if (tcp_addr[0]) pb_jsonw_str(&w, tcp_addr);
    else pb_jsonw_null(&w);
    pb_jsonw_key(&w, "started");
    pb_jsonw_double(&w, started_unix);
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
    PyObject *fn = args ? PyObject_GetAttrString(store, method) : NULL;
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
    PyObject *r = store_call("set", "(ss)", self_key, text);
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
    PyObject *keys = PyList_New(world), *has = NULL, *values = NULL;
    int done = 0;
    for (int r = 0; keys && r < world; r++) {
        char key[sizeof key_prefix + 16];
        snprintf(key, sizeof key, "%s%d", key_prefix, r);
        PyObject *k = PyUnicode_FromString(key);
        if (!k) goto out;
        PyList_SET_ITEM(keys, r, k);
    }
    if (!keys) goto out;
    PyObject *check = PyObject_GetAttrString(store, "check");
    has = check ? PyObject_CallOneArg(check, keys) : NULL;
    Py_XDECREF(check);
    if (!has || PyObject_IsTrue(has) != 1) goto out;
    PyObject *multi = PyObject_GetAttrString(store, "multi_get");
    values = multi ? PyObject_CallOneArg(multi, keys) : NULL;
    Py_XDECREF(multi);
    if (!values || !PyList_Check(values) || PyList_GET_SIZE(values) != world) goto out;
    for (int r = 0; r < world; r++) add_entry(items, PyList_GET_ITEM(values, r));
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
    for (int r = 0; r < world; r++) {
        char key[sizeof key_prefix + 16];
        snprintf(key, sizeof key, "%s%d", key_prefix, r);
        PyObject *keys = Py_BuildValue("[s]", key);
        PyObject *has = NULL;
        if (keys) {
            PyObject *fn = PyObject_GetAttrString(store, "check");
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

/* ---------------------------------------------------------------- PyTorch's flight recorder
 *
 * torch (2.5 and later) keeps a flight recorder of collectives when TORCH_FR_BUFFER_SIZE (or
 * TORCH_NCCL_TRACE_BUFFER_SIZE) is above 0 at init_process_group: per process group the last
 * enqueued and last completed collective, and a ring of entries (collective_seq_id,
 * profiling_name "gloo:all_reduce", input sizes and dtypes, time created). gloo records into it
 * too (checked with torch 2.13 on CPU; its entries stay in state "scheduled", but pg_status
 * moves). The job thread reads it with the GIL (torch's
 * _dump_fr_trace_json, then Python's json) when /api/rank asks, and keeps per group one item:
 *   {"pg": "0", "group": "default_pg", "last_enqueued": 4, "last_started": -1,
 *    "last_completed": 3, "op": "gloo:all_reduce", "input_sizes": [[8]], "input_dtypes":
 *    ["Float"], "for_s": 94.2}
 * ("op".. "for_s" are those of the last enqueued entry, when the ring still holds it). */

/* Whether the job has the recorder on (read once). [server thread] */
static int fr_enabled(void)
{
    if (fr_on < 0) {
        const char *a = getenv("TORCH_FR_BUFFER_SIZE"), *b = getenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
        fr_on = (a && atol(a) > 0) || (b && atol(b) > 0);
    }
    return fr_on;
}

/* d[key] as an integer (the recorder writes some as strings), -1 when absent. [GIL held] */
static long long dict_ll(PyObject *d, const char *key)
{
    PyObject *v = d && PyDict_Check(d) ? PyDict_GetItemString(d, key) : NULL; /* borrowed */
    long long r = -1;
    if (v && PyLong_Check(v)) r = PyLong_AsLongLong(v);
    else if (v && PyUnicode_Check(v)) r = atoll(PyUnicode_AsUTF8(v) ?: "-1");
    PyErr_Clear();
    return r;
}

/* json.dumps(v) into out as raw JSON (null when v is NULL or fails). [GIL held] */
static void put_json(pb_buf *out, PyObject *dumps, PyObject *v)
{
    PyObject *s = v && dumps ? PyObject_CallOneArg(dumps, v) : NULL;
    const char *t = s ? PyUnicode_AsUTF8(s) : NULL;
    pb_buf_printf(out, "%s", t ? t : "null");
    Py_XDECREF(s);
    PyErr_Clear();
}

/* Reads the flight recorder into items (the "groups" array's items). [GIL held, job thread] */
/* json.loads(_dump_fr_trace_json(includeCollectives=with_entries, onlyActive=True)), a dict or
 * NULL. [GIL held] */
static PyObject *fr_dump(PyObject *dump, PyObject *json, int with_entries)
{
    PyObject *kw = Py_BuildValue("{s:O,s:O}", "includeCollectives", with_entries ? Py_True : Py_False,
                                 "onlyActive", Py_True);
    PyObject *empty = kw ? PyTuple_New(0) : NULL;
    PyObject *raw = empty ? PyObject_Call(dump, empty, kw) : NULL;
    PyObject *doc = raw ? PyObject_CallMethod(json, "loads", "O", raw) : NULL;
    Py_XDECREF(raw);
    Py_XDECREF(empty);
    Py_XDECREF(kw);
    if (doc && !PyDict_Check(doc)) Py_CLEAR(doc);
    return doc;
}

/* The entries are dumped only when some group has a collective in flight (enqueued, not
 * completed): the dump of a full ring costs tens of milliseconds with the GIL (about 90 ms for
 * 2,000 entries, torch 2.13), pg_status alone next to nothing. */
static void read_flight_recorder(pb_buf *items)
{
    PyObject *c10d = PyImport_ImportModule("torch._C._distributed_c10d");
    PyObject *dump = c10d ? PyObject_GetAttrString(c10d, "_dump_fr_trace_json") : NULL;
    PyObject *json = dump ? PyImport_ImportModule("json") : NULL;
    PyObject *doc = json ? fr_dump(dump, json, 0) : NULL;
    PyObject *dumps = json ? PyObject_GetAttrString(json, "dumps") : NULL;
    PyObject *status = doc ? PyDict_GetItemString(doc, "pg_status") : NULL;
    PyObject *pg_key, *st;
    Py_ssize_t pos = 0;
    int in_flight = 0;
    while (status && PyDict_Check(status) && PyDict_Next(status, &pos, &pg_key, &st))
        in_flight |= dict_ll(st, "last_enqueued_collective") > dict_ll(st, "last_completed_collective");
    if (in_flight) {
        PyObject *full = fr_dump(dump, json, 1);
        if (full) {
            Py_SETREF(doc, full);
            status = PyDict_GetItemString(doc, "pg_status");
        }
    }
    PyObject *entries = doc ? PyDict_GetItemString(doc, "entries") : NULL;
    pos = 0;
    int64_t wall = pb_wall_ns();
    while (status && PyDict_Check(status) && PyDict_Next(status, &pos, &pg_key, &st)) {
        const char *pg = PyUnicode_Check(pg_key) ? PyUnicode_AsUTF8(pg_key) : NULL;
        if (!pg) continue;
        long long enq = dict_ll(st, "last_enqueued_collective");
        PyObject *last = NULL; /* borrowed: the entry of the last enqueued collective */
        Py_ssize_t n = entries && PyList_Check(entries) ? PyList_GET_SIZE(entries) : 0;
        for (Py_ssize_t i = n - 1; i >= 0 && !last; i--) {
            PyObject *e = PyList_GET_ITEM(entries, i);
            PyObject *p2p = PyDict_Check(e) ? PyDict_GetItemString(e, "is_p2p") : NULL;
            if (dict_ll(e, "pg_id") == atoll(pg) && dict_ll(e, "collective_seq_id") == enq && p2p != Py_True)
                last = e;
        }
        PyObject *names = last ? PyDict_GetItemString(last, "process_group") : NULL;
        PyObject *name = names && PyList_Check(names) && PyList_GET_SIZE(names) > 1 ? PyList_GET_ITEM(names, 1) : NULL;
        pb_buf_printf(items, "%s{\"pg\":", items->len ? "," : "");
        pb_json_escape(items, pg, strlen(pg));
        pb_buf_printf(items, ",\"group\":");
        const char *nm = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (nm) pb_json_escape(items, nm, strlen(nm));
        else pb_buf_printf(items, "null");
        pb_buf_printf(items, ",\"last_enqueued\":%lld,\"last_started\":%lld,\"last_completed\":%lld", enq,
                      dict_ll(st, "last_started_collective"), dict_ll(st, "last_completed_collective"));
        if (last) {
            pb_buf_printf(items, ",\"op\":");
            put_json(items, dumps, PyDict_GetItemString(last, "profiling_name"));
            pb_buf_printf(items, ",\"input_sizes\":");
            put_json(items, dumps, PyDict_GetItemString(last, "input_sizes"));
            pb_buf_printf(items, ",\"input_dtypes\":");
            put_json(items, dumps, PyDict_GetItemString(last, "input_dtypes"));
            long long created = dict_ll(last, "time_created_ns");
            if (created > 0) pb_buf_printf(items, ",\"for_s\":%.3f", (double)(wall - created) / 1e9);
        }
        pb_buf_printf(items, "}");
        PyErr_Clear();
    }
    PyErr_Clear();
    Py_XDECREF(dumps);
    Py_XDECREF(doc);
    Py_XDECREF(json);
    Py_XDECREF(dump);
    Py_XDECREF(c10d);
}

static void *job_main(void *arg)
{
    (void)arg;
    int64_t period_ns = (int64_t)(pb_config_double("PROBING_JOB_HEARTBEAT", 5) * 1e9);
    if (period_ns < 100000000) period_ns = 100000000;
    int64_t next_hb = 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!stop_requested && !roster_wanted && !fr_wanted && pb_now_ns() < next_hb) {
            int64_t wait = next_hb - pb_now_ns();
            if (wait > 1000000000) wait = 1000000000;
            if (wait < 1000000) wait = 1000000;
            struct timespec until = pb_deadline_ns(CLOCK_REALTIME, wait);
            pthread_cond_timedwait(&cv, &mu, &until);
        }
        int stop = stop_requested, want = roster_wanted, want_fr = fr_wanted;
        pthread_mutex_unlock(&mu);
        pb_buf items = PB_BUF_INIT, miss = PB_BUF_INIT, fr = PB_BUF_INIT;
        PyGILState_STATE g = PyGILState_Ensure();
        if (stop) {
            PyObject *r = store_call("delete_key", "(s)", self_key);
            Py_XDECREF(r);
        } else {
            if (pb_now_ns() >= next_hb) {
                heartbeat();
                next_hb = pb_now_ns() + period_ns;
            }
            if (want) read_roster(&items, &miss);
            if (want_fr) read_flight_recorder(&fr);
        }
        PyGILState_Release(g);
        pthread_mutex_lock(&mu);
        if (stop) {
            pb_buf_free(&fr);
            break;
        }
        if (want_fr) {
            fr_wanted = 0;
            pb_buf_free(&fr_groups);
            fr_groups = fr;
            fr_read_ns = pb_now_ns();
            fr_gen++;
            pthread_cond_broadcast(&cv);
        } else {
            pb_buf_free(&fr);
        }
        if (want) {
            roster_wanted = 0;
            pb_buf_free(&roster);
            pb_buf_free(&missing);
            roster = items;
            missing = miss;
            roster_read_ns = pb_now_ns();
            roster_gen++;
            pthread_cond_broadcast(&cv);
        } else {
            pb_buf_free(&items);
            pb_buf_free(&miss);
        }
    }
    thread_running = 0;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Registers as rank of world in store (a new reference is taken). [GIL held] */
static int register_with(PyObject *st, int rank, int size)
{
    world = size;
    my_rank = rank;
    Py_INCREF(st);
    Py_XSETREF(store, st);
    local_rank = env_int("LOCAL_RANK", -1);
    node_rank = env_int("GROUP_RANK", env_int("NODE_RANK", -1));
    registered_pid = getpid();
    started_unix = (double)pb_wall_ns() / 1e9;
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    snprintf(job_id, sizeof job_id, "%s", run && *run ? run : "-");
    snprintf(key_prefix, sizeof key_prefix, "probing/v1/%s/rank/", job_id);
    snprintf(self_key, sizeof self_key, "%s%d", key_prefix, my_rank);
    int port = agent_tcp_port;
    if (port > 0) {
        char addr[256];
        advertise_addr(addr, sizeof addr);
        if (addr[0]) snprintf(tcp_addr, sizeof tcp_addr, "%s:%d", addr, port);
    }
    heartbeat(); /* the first entry is there before init_process_group returns */
    pthread_mutex_lock(&mu);
    stop_requested = 0;
    int rc = -pthread_create(&thread, NULL, job_main, NULL);
    thread_running = rc == 0;
    pthread_mutex_unlock(&mu);
    if (rc) return rc;
    registered = 1;
    atomic_store(&rank_registered, rank);
    return 0;
}

int pb_job_registered_rank(void *ctx)
{
    (void)ctx;
    return atomic_load(&rank_registered);
}

int pb_job_register_store(PyObject *st, int rank, int size)
{
    if (registered || !agent_endpoint()) return -EALREADY;
    if (size < 1 || rank < 0 || rank >= size) return -EINVAL;
    return register_with(st, rank, size);
}

int pb_job_register(void)
{
    if (registered || !agent_endpoint()) return 0;
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
    Py_XDECREF(default_group);
    default_group = PyObject_CallMethod(c10d, "_get_default_group", NULL);
    if (!default_group) PyErr_Clear();
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
    if (!registered || registered_pid != getpid()) return;
    registered = 0;
    atomic_store(&rank_registered, -1);
    int joined = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&mu);
    stop_requested = 1;
    pthread_cond_broadcast(&cv);
    struct timespec until = pb_deadline_ns(CLOCK_REALTIME, 200 * 1000000);
    while (thread_running && pthread_cond_timedwait(&cv, &mu, &until) == 0) {}
    joined = !thread_running;
    pthread_mutex_unlock(&mu);
    if (joined) pthread_join(thread, NULL);
    else pthread_detach(thread); /* the store does not answer: never delay the exit for it */
    Py_END_ALLOW_THREADS
    if (joined) Py_CLEAR(store); /* else the thread may still use it */
}

void pb_job_forget_after_fork(void)
{
    agent_unix_set = 0; /* the child is no agent: it advertises nothing */
    agent_tcp_port = 0;
    registered = 0;
    atomic_store(&rank_registered, -1);
    thread_running = 0;
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
    for (int i = 0; i < MAX_GROUPS; i++) pthread_mutex_init(&rings[i].mu, NULL); /* a thread may have held one at fork */
}

/* ---------------------------------------------------------------- the routes [server thread] */

static void self_fields(pb_jsonw *w)
{
    pb_jsonw_key(w, "rank");
    pb_jsonw_int(w, registered ? my_rank : env_int("RANK", 0));
    pb_jsonw_key(w, "host");
    pb_jsonw_str(w, pb_job_host());
    pb_jsonw_key(w, "pid");
    pb_jsonw_int(w, getpid());
    pb_jsonw_key(w, "now");
    pb_jsonw_double(w, (double)pb_wall_ns() / 1e9);
}

/* Sets *wanted for the job thread and waits, at most `seconds`, for it to bump *gen (a fresh
 * reading). Returns 1 when it did, 0 on time-out or with no job thread (the caller then answers
 * with the last reading). [server thread, mu held] */
static int ask_job_thread(int *wanted, const uint64_t *gen, int seconds)
{
    uint64_t before = *gen;
    *wanted = 1;
    pthread_cond_broadcast(&cv);
    struct timespec until;
    until = pb_deadline_ns(CLOCK_REALTIME, (int64_t)seconds * 1000000000);
    while (thread_running && *gen == before && pthread_cond_timedwait(&cv, &mu, &until) == 0) {}
    return *gen != before;
}

int pb_job_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "registered");
    pb_jsonw_bool(&w, registered);
    self_fields(&w);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, registered ? world : 1);
    if (!registered) {
        pb_jsonw_key(&w, "reason");
        pb_jsonw_str(&w, "not part of a torch.distributed job: init_process_group has not run in "
                         "this process, or its world size is 1");
        pb_jsonw_obj_end(&w);
        return pb_jsonw_error(&w); /* sticky: the first failed write */
    }
    pb_jsonw_key(&w, "job");
    pb_jsonw_str(&w, job_id);
    pthread_mutex_lock(&mu);
    int fresh = ask_job_thread(&roster_wanted, &roster_gen, 2);
    pb_jsonw_key(&w, "fresh");
    pb_jsonw_bool(&w, fresh);
    pb_jsonw_key(&w, "roster_age_s");
    if (roster_read_ns) pb_jsonw_double(&w, (double)(pb_now_ns() - roster_read_ns) / 1e9);
    else pb_jsonw_null(&w);
    pb_buf_printf(out, ",\"ranks\":[%s],\"missing\":[%s]", roster.data ? roster.data : "",
                  missing.data ? missing.data : "");
    pthread_mutex_unlock(&mu);
    pb_jsonw_obj_end(&w);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

static const char *state_name(int s)
{
    switch (s) {
    case COLL_ENTERED: return "entered";
    case COLL_COMPLETED: return "completed";
    case COLL_FAILED: return "failed";
    default: return "none";
    }
}

/* "flight_recorder": when the job has PyTorch's flight recorder on, asks the job thread for a
 * reading and waits at most 1 s for it (the server thread never takes the GIL itself: a hung job
 * may hold it); else, or on time-out, the last reading with its age ("fresh": false). Absent when
 * the recorder is off or this rank is not registered. [server thread] */
static void flight_recorder_json(pb_jsonw *w, pb_buf *out)
{
    if (!registered || !fr_enabled()) return;
    pthread_mutex_lock(&mu);
    int fresh = ask_job_thread(&fr_wanted, &fr_gen, 1);
    if (fr_read_ns) {
        pb_jsonw_key(w, "flight_recorder");
        pb_jsonw_obj_begin(w);
        pb_jsonw_key(w, "fresh");
        pb_jsonw_bool(w, fresh);
        pb_jsonw_key(w, "age_s");
        pb_jsonw_double(w, (double)(pb_now_ns() - fr_read_ns) / 1e9);
        pb_jsonw_key(w, "groups");
        pb_buf_printf(out, "[%s]", fr_groups.data ? fr_groups.data : "");
        pb_jsonw_obj_end(w);
    }
    pthread_mutex_unlock(&mu);
}

/* The median wall time of the last (at most 31) rows of python.steps, in seconds; -1 when no
 * step has finished yet (or the table is not there). The rows are read from the table's ring
 * like a query would (a row overwritten during the read is skipped), found through the
 * registry, so this file needs nothing of the collector that writes them. [any thread] */
static double step_median_s(void)
{
    pb_table *t = pb_registry_find("python", "steps");
    int wall = -1;
    for (int c = 0; t && c < t->ncolumns; c++)
        if (strcmp(t->columns[c].name, "wall") == 0) wall = c;
    if (!t || !t->ring || wall < 0 || t->row_size > 512) return -1;
    unsigned char row[512];
    int64_t v[31];
    int n = 0;
    uint64_t head = pb_ring_head(t->ring), first = pb_ring_first(t->ring);
    for (uint64_t i = head; i > first && n < 31; i--) {
        if (!pb_ring_read(t->ring, i - 1, row)) continue;
        int64_t ns;
        memcpy(&ns, row + t->columns[wall].offset, sizeof ns);
        int k = n++;
        while (k > 0 && v[k - 1] > ns) { /* insertion sort: at most 31 values */
            v[k] = v[k - 1];
            k--;
        }
        v[k] = ns;
    }
    if (!n) return -1;
    return (n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) / 1e9;
}

int pb_job_rank_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    self_fields(&w);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, registered ? world : 1);
    int64_t now = pb_now_ns(), wall = pb_wall_ns();
    pb_jsonw_key(&w, "step");
    pb_jsonw_int(&w, pb_step_current());
    int64_t start = pb_step_start();
    pb_jsonw_key(&w, "step_started");
    if (start > 0) pb_jsonw_double(&w, (double)(wall - (now - start)) / 1e9);
    else pb_jsonw_null(&w);
    /* How long the current step has run, on this host's monotonic clock (no clock offset
     * between hosts matters), and the median of the recent steps: hang.c's stall check. */
    pb_jsonw_key(&w, "step_for_s");
    if (start > 0) pb_jsonw_double(&w, (double)(now - start) / 1e9);
    else pb_jsonw_null(&w);
    double median = step_median_s();
    pb_jsonw_key(&w, "step_median_s");
    if (median >= 0) pb_jsonw_double(&w, median);
    else pb_jsonw_null(&w);
    pb_jsonw_key(&w, "collectives");
    pb_jsonw_arr_begin(&w);
    int n = atomic_load(&nslots);
    for (int i = 0; i < n; i++) {
        coll_slot *s = &slots[i];
        uint32_t v0, v1, name, op;
        uint64_t seq;
        int state;
        int64_t bytes, ew, em, xm;
        int tries = 0;
        do {
            v0 = atomic_load(&s->version);
            name = atomic_load(&s->name_id);
            seq = atomic_load(&s->seq);
            op = atomic_load(&s->op_id);
            state = atomic_load(&s->state);
            bytes = atomic_load(&s->bytes);
            ew = atomic_load(&s->enter_wall_ns);
            em = atomic_load(&s->enter_mono_ns);
            xm = atomic_load(&s->exit_mono_ns);
            v1 = atomic_load(&s->version);
        } while ((v0 != v1 || (v0 & 1)) && ++tries < 100);
        if (!name || !seq) continue;
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "group");
        pb_jsonw_str(&w, pb_intern_get(name));
        pb_jsonw_key(&w, "seq");
        pb_jsonw_int(&w, (int64_t)seq);
        pb_jsonw_key(&w, "op");
        pb_jsonw_str(&w, pb_intern_get(op));
        pb_jsonw_key(&w, "bytes");
        pb_jsonw_int(&w, bytes);
        pb_jsonw_key(&w, "state");
        pb_jsonw_str(&w, state_name(state));
        pb_jsonw_key(&w, "entered");
        pb_jsonw_double(&w, (double)ew / 1e9);
        pb_jsonw_key(&w, "for_s");
        pb_jsonw_double(&w, (double)((state == COLL_ENTERED ? now : xm) - em) / 1e9);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    flight_recorder_json(&w, out);
    pb_jsonw_obj_end(&w);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

int pb_job_stack_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    char why[512] = "";
    pb_pystack *st = NULL;
    int rc = pb_pystack_read(getpid(), &st, why, sizeof why);
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    self_fields(&w);
    if (rc) {
        pb_jsonw_key(&w, "error");
        pb_jsonw_str(&w, why[0] ? why : "cannot read this process's Python stacks");
        pb_jsonw_obj_end(&w);
        return pb_jsonw_error(&w); /* sticky: the first failed write */
    }
    pb_jsonw_key(&w, "threads");
    pb_jsonw_arr_begin(&w);
    for (int t = 0; t < st->thread_count; t++) {
        pb_pythread *th = &st->threads[t];
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "native_id");
        pb_jsonw_int(&w, (int64_t)th->native_id);
        pb_jsonw_key(&w, "name");
        pb_jsonw_str(&w, th->name);
        if (th->python_name[0]) { /* threading's name (pystack.h) */
            pb_jsonw_key(&w, "python_name");
            pb_jsonw_str(&w, th->python_name);
        }
        pb_jsonw_key(&w, "main");
        pb_jsonw_bool(&w, (pid_t)th->native_id == getpid());
        pb_jsonw_key(&w, "frames");
        pb_jsonw_arr_begin(&w);
        for (int f = 0; f < th->frame_count; f++) {
            pb_jsonw_obj_begin(&w);
            pb_jsonw_key(&w, "function");
            pb_jsonw_str(&w, th->frames[f].function ? th->frames[f].function : "?");
            pb_jsonw_key(&w, "file");
            pb_jsonw_str(&w, th->frames[f].file ? th->frames[f].file : "?");
            pb_jsonw_key(&w, "line");
            pb_jsonw_int(&w, th->frames[f].line);
            pb_jsonw_obj_end(&w);
        }
        pb_jsonw_arr_end(&w);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    pb_jsonw_obj_end(&w);
    pb_pystack_free(st);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

int pb_job_arrivals_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    arrival *copy = malloc(sizeof rings[0].e);
    if (!copy) return ENOMEM;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "rank");
    pb_jsonw_int(&w, atomic_load(&rank_registered));
    pb_jsonw_key(&w, "now"); /* for the CLI's clock offset (fanout.h) */
    pb_jsonw_double(&w, (double)pb_wall_ns() / 1e9);
    pb_jsonw_key(&w, "host");
    pb_jsonw_str(&w, pb_job_host());
    double median = step_median_s();
    pb_jsonw_key(&w, "step_median_s");
    if (median >= 0) pb_jsonw_double(&w, median);
    else pb_jsonw_null(&w);
    pb_jsonw_key(&w, "groups");
    pb_jsonw_arr_begin(&w);
    int n = atomic_load(&nslots);
    for (int i = 0; i < n; i++) {
        uint32_t name = atomic_load(&slots[i].name_id);
        if (!name) continue;
        pthread_mutex_lock(&rings[i].mu);
        memcpy(copy, rings[i].e, sizeof rings[i].e);
        pthread_mutex_unlock(&rings[i].mu);
        /* Oldest first: the smallest seq present. */
        size_t first = 0;
        for (size_t k = 0; k < PB_JOB_ARRIVALS; k++)
            if (copy[k].seq && (!copy[first].seq || copy[k].seq < copy[first].seq)) first = k;
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "group");
        pb_jsonw_str(&w, pb_intern_get(name));
        pb_jsonw_key(&w, "arrivals");
        pb_jsonw_arr_begin(&w);
        for (size_t k = 0; k < PB_JOB_ARRIVALS; k++) {
            const arrival *a = &copy[(first + k) % PB_JOB_ARRIVALS];
            if (!a->seq) continue;
            pb_jsonw_arr_begin(&w);
            pb_jsonw_int(&w, (int64_t)a->seq);
            pb_jsonw_str(&w, pb_intern_get(a->op_id));
            pb_jsonw_int(&w, a->bytes);
            pb_jsonw_double(&w, (double)a->enter_wall_ns / 1e9);
            if (a->exit_mono_ns)
                pb_jsonw_double(&w, (double)(a->enter_wall_ns + (a->exit_mono_ns - a->enter_mono_ns)) / 1e9);
            else pb_jsonw_null(&w);
            pb_jsonw_arr_end(&w);
        }
        pb_jsonw_arr_end(&w);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    pb_jsonw_obj_end(&w);
    free(copy);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}
