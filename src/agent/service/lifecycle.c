/* lifecycle.c - agent start/stop and fork safety; see lifecycle.h. */
#include <Python.h>

#include "lifecycle.h"

#include "buf.h"
#include "capture.h"
#include "capture_state.h"
#include "clock.h"
#include "collect.h"
#include "config.h"
#include "error.h"
#include "distributed.h"
#include "eval.h"
#include "gil.h"
#include "intern.h"
#include "job.h"
#include "jsonw.h"
#include "log.h"
#include "memsample.h"
#include "record.h"
#include "paths.h"
#include "server.h"
#include "device.h"
#include "sysmon.h"
#include "registry.h"
#include "torch_trace.h"
#include "torch_hooks.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int started;
static int stopping;        /* pb_agent_stop is running (it lets go of the GIL inside) */
static _Atomic int detach_requested;
static int forked_child;
static pb_server *server;
static char socket_path[512];
static char python_version[32];
static char cmdline[1024];
static int64_t started_wall_ns, started_mono_ns;

/* Unregisters every table and frees the hot path's and the distributed collector's rings. Only
 * after the server and all hooks are stopped. */
static void tables_free(void)
{
    pb_registry_reset();
    pb_torch_trace_free();
    pb_distributed_tables_free();
}

/* python.torch_trace and python.nccl_trace. Returns 0 or a negative errno (then none is
 * registered). [start-up, GIL held] */
static int tables_init(void)
{
    int rc = pb_torch_trace_init();
    if (!rc) rc = pb_distributed_tables_init();
    if (rc) tables_free();
    return rc;
}

static void read_cmdline(void)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
    close(fd);
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; i++)
        if (cmdline[i] == '\0') cmdline[i] = ' ';
    while (n > 0 && cmdline[n - 1] == ' ') n--;
    cmdline[n] = '\0';
}

/* /api/info body. [server thread] */
static int info_json(void *ctx, pb_buf *out)
{
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "pid");
    pb_jsonw_int(&w, getpid());
    pb_jsonw_key(&w, "cmdline");
    pb_jsonw_str(&w, cmdline);
    pb_jsonw_key(&w, "python");
    pb_jsonw_str(&w, python_version);
    pb_jsonw_key(&w, "torch");
    pb_jsonw_str(&w, pb_torch_version());
    pb_jsonw_key(&w, "started_unix");
    pb_jsonw_double(&w, (double)started_wall_ns / 1e9);
    pb_jsonw_key(&w, "uptime_s");
    pb_jsonw_double(&w, (double)(pb_now_ns() - started_mono_ns) / 1e9);
    pb_jsonw_key(&w, "endpoint");
    pb_jsonw_str(&w, socket_path);
    pb_jsonw_key(&w, "tcp");
    const char *tcp = pb_config_str("PROBING_LISTEN");
    pb_jsonw_str_or_null(&w, tcp);
    pb_jsonw_key(&w, "host");
    pb_jsonw_str(&w, pb_job_host());
    pb_jsonw_key(&w, "rank");
    const char *rank = getenv("RANK");
    pb_jsonw_int(&w, rank ? atoi(rank) : 0);
    /* The job this rank belongs to, so `report` can find the other ranks on this machine:
     * torchrun (and most launchers) give every rank of one job the same rendezvous address. */
    const char *world = getenv("WORLD_SIZE");
    pb_jsonw_key(&w, "world_size");
    pb_jsonw_int(&w, world && atoi(world) > 0 ? atoi(world) : 1);
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");
    pb_jsonw_key(&w, "job");
    if (world && addr && port) {
        char job[512];
        snprintf(job, sizeof job, "%s:%s%s%s", addr, port, run_id ? "/" : "", run_id ? run_id : "");
        pb_jsonw_str(&w, job);
    } else {
        pb_jsonw_null(&w);
    }
    pb_jsonw_key(&w, "step");
    pb_jsonw_int(&w, pb_step_current());
    pb_torch_detail_info d;
    pb_torch_detail(&d);
    pb_jsonw_key(&w, "detail");
    if (d.installed) {
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "every");
        if (d.automatic) pb_jsonw_str(&w, d.windows_only ? "windows" : "auto");
        else pb_jsonw_int(&w, d.period);
        pb_jsonw_key(&w, "mode"); /* what applies now (detail.h) */
        pb_jsonw_str(&w, !d.automatic ? "fixed" : d.every_step ? "every step" : "windows");
        pb_jsonw_key(&w, "steps"); /* PROBING_DETAIL_STEPS */
        pb_jsonw_int(&w, d.steps);
        pb_jsonw_key(&w, "period");
        pb_jsonw_int(&w, d.period);
        pb_jsonw_key(&w, "window");
        pb_jsonw_int(&w, d.window);
        pb_jsonw_key(&w, "budget_pct");
        pb_jsonw_double(&w, d.budget_pct);
        pb_jsonw_key(&w, "cost");
        if (d.cost < 0) pb_jsonw_null(&w);
        else pb_jsonw_double(&w, d.cost);
        pb_jsonw_key(&w, "spread"); /* quartiles of the samples behind cost */
        if (d.cost < 0) {
            pb_jsonw_null(&w);
        } else {
            pb_jsonw_arr_begin(&w);
            pb_jsonw_double(&w, d.spread_lo);
            pb_jsonw_double(&w, d.spread_hi);
            pb_jsonw_arr_end(&w);
        }
        pb_jsonw_key(&w, "descheduled"); /* steps the estimate left out */
        pb_jsonw_int(&w, d.rejected);
        pb_jsonw_key(&w, "now");
        pb_jsonw_bool(&w, d.now);
        pb_jsonw_key(&w, "backward"); /* how backward nodes are timed (torch_hooks.h) */
        pb_jsonw_str(&w, pb_torch_backward_probes());
        pb_jsonw_obj_end(&w);
    } else {
        pb_jsonw_null(&w);
    }
    /* which measurement paths are active, in words (`probing doctor` says what enables them) */
    char nvml[400];
    pb_sysmon_nvml_status(nvml, sizeof nvml);
    pb_jsonw_key(&w, "paths");
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "backward");
    pb_jsonw_str(&w, d.installed ? pb_torch_backward_probes() : "torch hooks not installed (torch not imported)");
    pb_jsonw_key(&w, "gil");
    pb_jsonw_str(&w, pb_gil_status());
    pb_jsonw_key(&w, "nvml");
    pb_jsonw_str(&w, nvml);
    pb_jsonw_key(&w, "device_time"); /* CUDA events (device.h) */
    pb_jsonw_str(&w, pb_device_status());
    pb_jsonw_obj_end(&w);
    pb_jsonw_key(&w, "version");
    pb_jsonw_str(&w, PB_VERSION);
    return pb_jsonw_obj_end(&w);
}

/* The detach helper: takes the GIL like any thread that calls into Python, stops the agent
 * (hooks and wrappers removed, threads joined, rings freed, socket removed) and drops the
 * import hooks of the Python package, so the process runs on as if probing had never been
 * there. A thread of its own because the server cannot stop itself from one of its threads,
 * and the eval thread is joined by the stop. [own detached thread] */
static void *detach_main(void *unused)
{
    (void)unused;
    if (!Py_IsInitialized()) return NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    pb_agent_stop();
    PyObject *hooks = PyImport_ImportModule("probing._importhook");
    PyObject *r = hooks ? PyObject_CallMethod(hooks, "remove", NULL) : NULL;
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(hooks);
    pb_log_debug("detached");
    atomic_store(&detach_requested, 0);
    PyGILState_Release(g);
    return NULL;
}

/* POST /api/detach, after the answer was sent. [server thread] */
static void detach_requested_cb(void *ctx)
{
    (void)ctx;
    if (atomic_exchange(&detach_requested, 1)) return;
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Signals keep going to the program's own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t, &attr, detach_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc) {
        pb_log_warn("cannot detach: cannot start a thread: %s", strerror(rc));
        atomic_store(&detach_requested, 0);
        pb_capture_state_reopen();
    }
}

/* The /api/record routes (pb_record_fn); record.c keeps the recorder. [server thread] */
static int record_serve(void *ctx, pb_record_verb verb, const pb_record_request *req, pb_buf *out)
{
    (void)ctx;
    switch (verb) {
    case PB_RECORD_START: {
        pb_buf info = PB_BUF_INIT;
        int rc = info_json(NULL, &info), status;
        if (rc)
            status = pb_api_error(out, 500, "cannot describe the process: %s", pb_strerror(rc));
        else
            status = pb_record_request_start(req->path, req->force,
                                             atomic_load(&detach_requested), &info, out);
        pb_buf_free(&info);
        return status;
    }
    case PB_RECORD_STATUS: return pb_record_status(out);
    case PB_RECORD_STOP: return pb_record_request_stop(out);
    }
    return 500;
}

/* ---- SIGTERM/SIGHUP: remove the socket and token files on the way out ----
 * Only where the signal would kill the process anyway (SIG_DFL): the handler unlinks the two
 * files (async-signal-safe), puts the default action back and raises the signal again, so the
 * process dies of it exactly as before (same status for the parent). A handler the program
 * set (Python's signal.signal) is left alone: it decides whether the process exits, and an
 * exit through Python runs atexit, which removes the files. A forked child (DataLoader worker)
 * inherits the handler but never removes its parent's files (pid check). While a recording
 * runs, SIGTERM is handed to the recorder after the files are removed (it flushes, then ends the
 * process with the default action): the recorder's own handler is not installed over ours. */
static const int exit_signals[] = {SIGTERM, SIGHUP};
#define N_EXIT_SIGNALS (int)(sizeof exit_signals / sizeof exit_signals[0])
static struct sigaction previous_action[N_EXIT_SIGNALS];
static int handler_installed[N_EXIT_SIGNALS];
static char signal_unlink_sock[512], signal_unlink_token[520];
static volatile pid_t signal_owner_pid;

static void on_exit_signal(int sig)
{
    int saved = errno;
    if (getpid() == signal_owner_pid) {
        if (signal_unlink_sock[0]) unlink(signal_unlink_sock);
        if (signal_unlink_token[0]) unlink(signal_unlink_token);
        /* A recording flushes first; its thread then re-sends SIGTERM with the default
         * action (record.c), a tick later. */
        if (sig == SIGTERM && pb_record_take_sigterm()) {
            errno = saved;
            return;
        }
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered when this handler returns: the default action, as before */
    errno = saved;
}

static void install_exit_signals(void)
{
    snprintf(signal_unlink_sock, sizeof signal_unlink_sock, "%s", socket_path);
    const char *token = pb_server_token_path(server);
    snprintf(signal_unlink_token, sizeof signal_unlink_token, "%s", token ? token : "");
    signal_owner_pid = getpid();
    for (int i = 0; i < N_EXIT_SIGNALS; i++) {
        struct sigaction cur, ours;
        if (handler_installed[i] || sigaction(exit_signals[i], NULL, &cur) != 0) continue;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
            memset(&ours, 0, sizeof ours);
            ours.sa_handler = on_exit_signal;
            sigemptyset(&ours.sa_mask);
            if (sigaction(exit_signals[i], &ours, &previous_action[i]) == 0) {
                handler_installed[i] = 1;
                if (exit_signals[i] == SIGTERM) pb_record_sigterm_via_agent(on_exit_signal);
            }
        }
    }
}

/* Puts back the default action where ours is still in place (the program may have replaced
 * it since: then theirs stays). */
static void remove_exit_signals(void)
{
    for (int i = 0; i < N_EXIT_SIGNALS; i++) {
        struct sigaction cur;
        if (!handler_installed[i]) continue;
        handler_installed[i] = 0;
        if (exit_signals[i] == SIGTERM) pb_record_sigterm_via_agent(NULL);
        if (sigaction(exit_signals[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
            cur.sa_handler == on_exit_signal)
            sigaction(exit_signals[i], &previous_action[i], NULL);
    }
    signal_unlink_sock[0] = signal_unlink_token[0] = '\0';
}

static void atfork_child(void)
{
    /* Only flags and close(): the child has one thread and every lock may be held. */
    forked_child = 1;
    pb_torch_hooks_disable();
    pb_distributed_disable();
    if (server) pb_server_forget_after_fork(server);
    server = NULL;
    pb_memsample_forget_after_fork();
    pb_sysmon_forget_after_fork();
    pb_device_forget_after_fork();
    pb_eval_forget_after_fork();
    pb_capture_forget_after_fork();
    pb_job_reset(1);
    pb_record_reset(1);
    pb_gil_forget_after_fork();
    started = 0;
}

/* A rank of a multi-process job (WORLD_SIZE > 1) with a token (PROBING_TOKEN, or the first
 * line of PROBING_TOKEN_FILE) listens on TCP, all interfaces, a port the kernel picks, unless
 * PROBING_LISTEN says where: its job registry entry advertises it (docs/cluster.md). Without a
 * token it does not listen. Returns 0, or -1 when the token file cannot be read. */
static int job_tcp(char *token, size_t len, pb_server_opts *opts)
{
    const char *ws = getenv("WORLD_SIZE");
    const char *given = pb_config_str("PROBING_TOKEN");
    const char *file = pb_config_str("PROBING_TOKEN_FILE");
    token[0] = '\0';
    if ((!given || !*given) && file && *file) {
        FILE *f = fopen(file, "re");
        if (!f || !fgets(token, (int)len, f)) {
            if (f) fclose(f);
            token[0] = '\0';
            return -1;
        }
        fclose(f);
        token[strcspn(token, "\r\n")] = '\0';
        opts->token = token;
        given = token;
    }
    if (!opts->tcp_listen && given && *given && ws && atoi(ws) > 1) opts->tcp_listen = ":0";
    return 0;
}

int pb_agent_tcp_port(void) { return started && server ? pb_server_tcp_port(server) : 0; }

int pb_agent_start(void)
{
    static int atfork_registered;
    int rc;
    if (started) return 0;
    if (forked_child) return PB_EDISABLED;
    /* A new agent: nothing of the last one in this process (a detach) is kept. */
    pb_job_reset(0);
    pb_record_reset(0);
    pb_config_load();
    started_wall_ns = pb_wall_ns();
    started_mono_ns = pb_now_ns();
    snprintf(python_version, sizeof python_version, "%s", Py_GetVersion());
    char *sp = strchr(python_version, ' ');
    if (sp) *sp = '\0';
    read_cmdline();

    {
        char why[768];
        if ((rc = pb_paths_prepare_dir(why, sizeof why))) {
            pb_log_warn("not starting: %s", why);
            return rc;
        }
    }
    if ((rc = pb_paths_socket(getpid(), socket_path, sizeof socket_path))) {
        pb_log_warn("not starting: socket path too long");
        return rc;
    }
    if ((rc = tables_init())) {
        pb_log_warn("not starting: cannot allocate tables: %s", pb_strerror(rc));
        return rc;
    }
    if ((rc = pb_sysmon_tables_init())) {
        pb_log_warn("not starting: cannot allocate the system tables: %s", pb_strerror(rc));
        tables_free();
        return rc;
    }
    /* Parts that can fail without stopping the agent; the user hears about them in the one
     * message below, not one line each. */
    pb_buf off = PB_BUF_INIT;
    if ((rc = pb_sysmon_start())) pb_buf_printf(&off, "%ssystem sampling (%s)", off.len ? ", " : "", pb_strerror(rc));
    if ((rc = pb_collect_tables_init()))
        pb_buf_printf(&off, "%sstep, data loader, memory and AMP tables (%s)", off.len ? ", " : "", pb_strerror(rc));
    if ((rc = pb_memsample_start())) pb_buf_printf(&off, "%smemory sampling (%s)", off.len ? ", " : "", pb_strerror(rc));
    {
        /* Capture trace files go beside the socket: <dir>/<pid>.capture-<n>.json. */
        char prefix[sizeof socket_path];
        snprintf(prefix, sizeof prefix, "%s", socket_path);
        char *dot = strrchr(prefix, '.');
        if (dot && strcmp(dot, ".sock") == 0) *dot = '\0';
        if ((rc = pb_capture_init(prefix)))
            pb_buf_printf(&off, "%scapture (%s)", off.len ? ", " : "", pb_strerror(rc));
    }
    if ((rc = pb_eval_start())) pb_buf_printf(&off, "%seval (%s)", off.len ? ", " : "", pb_strerror(rc));

    pb_server_opts opts = {0};
    opts.unix_path = socket_path;
    const char *tcp = pb_config_str("PROBING_LISTEN");
    opts.tcp_listen = (tcp && *tcp) ? tcp : NULL;
    char job_token[PB_SERVER_TOKEN_MAX + 2];
    if (job_tcp(job_token, sizeof job_token, &opts)) pb_buf_printf(&off, "%sTCP for the job (cannot read PROBING_TOKEN_FILE)", off.len ? ", " : "");
    opts.job = pb_job_json;
    opts.rank = pb_job_rank_json;
    opts.self_rank = pb_job_registered_rank;
    opts.stack = pb_job_stack_json;
    opts.arrivals = pb_job_arrivals_json;
    opts.eval = pb_eval_run;
    opts.info = info_json;
    opts.detach = detach_requested_cb;
    opts.capture = pb_capture_serve;
    opts.record = record_serve;
    opts.ctx = NULL;
    opts.limits.max_result_bytes = (size_t)pb_config_int("PROBING_MAX_RESULT_MB", 64) << 20;
    opts.limits.timeout_s = pb_config_double("PROBING_QUERY_TIMEOUT", 30);
    opts.max_connections = 64;
    opts.max_request_bytes = 4u << 20;
    pb_record_expect(); /* a record request that comes before pb_record_start() below waits */
    if ((rc = pb_server_start(&server, &opts))) {
        pb_log_warn("not starting: cannot listen on %s%s%s: %s%s%s", socket_path, opts.tcp_listen ? " / " : "",
                    opts.tcp_listen ? opts.tcp_listen : "", pb_strerror(rc), off.len ? "; also failed: " : "",
                    off.len ? off.data : "");
        pb_buf_free(&off);
        server = NULL;
        pb_eval_shutdown();
        Py_BEGIN_ALLOW_THREADS
        pb_memsample_stop();
        pb_sysmon_stop();
        Py_END_ALLOW_THREADS
        pb_capture_stop();
        tables_free();
        pb_sysmon_tables_free();
        pb_collect_tables_free();
        return rc;
    }
    if (!atfork_registered) {
        pthread_atfork(NULL, NULL, atfork_child);
        atfork_registered = 1;
    }
    started = 1;
    pb_job_set_endpoint(socket_path, pb_server_tcp_port(server), pb_server_agent_id(server));
    install_exit_signals();
    if (off.len) pb_log_warn("started on %s without: %s", socket_path, off.data);
    pb_buf_free(&off);
    {
        pb_buf info = PB_BUF_INIT;
        if (info_json(NULL, &info) == 0) pb_record_start(&info);
        pb_buf_free(&info);
        pb_record_refresh_info(info_json);
    }
    pb_log_debug("agent listening on %s", socket_path);
    return 0;
}

void pb_agent_stop(void)
{
    /* Callers hold the GIL, but the stop lets go of it while joining: a second caller (atexit
     * while a detach runs) must not stop twice. */
    if (!started || stopping) return;
    stopping = 1;
    remove_exit_signals();
    pb_record_refresh_info(NULL); /* the recording keeps the info of its last flush */
    pb_torch_hooks_remove();
    pb_job_stop();
    pb_distributed_remove();
    pb_eval_shutdown();
    pb_server *s = server;
    server = NULL;
    /* Server threads may be waiting on an eval that needs the GIL: let go of it while joining. */
    Py_BEGIN_ALLOW_THREADS
    pb_record_stop(); /* last flush, while the rings still exist */
    pb_server_stop(s);
    pb_memsample_stop();
    pb_sysmon_stop();
    Py_END_ALLOW_THREADS
    pb_capture_stop(); /* a capture this thread runs is stopped; the ring is freed */
    tables_free();
    pb_sysmon_tables_free();
    pb_collect_tables_free();
    pb_job_set_endpoint(NULL, 0, NULL);
    started = 0;
    stopping = 0;
    socket_path[0] = '\0';
}

const char *pb_agent_endpoint(void) { return started ? socket_path : NULL; }
