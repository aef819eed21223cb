/*
 * main.c - the `probing` command: argument parsing and dispatch.
 *
 * Accepted shapes (the target may come first, or as -t anywhere):
 *   probing [-t TARGET] [TARGET] COMMAND [OPTIONS] [ARGS]
 *   probing COMMAND -t TARGET [OPTIONS] [ARGS]
 * Commands live in one static table; each names the options it accepts and whether it needs a
 * target, so main() resolves the target before calling cmd_<name>(). An argument is an option
 * only when it starts with '-' and holds no whitespace, so SQL such as "-- comment\nSELECT 1"
 * passes as an argument; "--" ends the options.
 */
#include "cli.h"

#include "buf.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDIN_MAX_BYTES ((size_t)64 << 20)

enum {
    OPT_FORMAT = 1, OPT_TIMEOUT = 2, OPT_OUTPUT = 4, OPT_JSON = 8, OPT_LAST = 16,
    OPT_STAGE = 32, OPT_FOLDED = 64, OPT_NATIVE = 128, OPT_CAPTURE = 256, OPT_RECORD = 512,
    OPT_FORCE = 1024, OPT_EXPORTER = 2048, OPT_PARQUET = 4096,
    OPT_UI = 8192,
    OPT_RANKS = 16384, OPT_DEADLINE = 32768
};

typedef struct command {
    const char *name;
    int (*run)(const pb_cli_args *a); /* NULL: planned, not in this version */
    unsigned options;                 /* OPT_* it accepts */
    int needs_target;
    int takes_text;                   /* takes positional text (SQL, code) */
    const char *usage;
    const char *summary;
    const char *details;
} command;

static const command commands[] = {
    {"list", cmd_list, OPT_FORMAT, 0, 0, "probing list [-f table|json]",
     "list the processes traced by probing on this machine",
     "Scans the socket directory ($PROBING_DIR or /tmp/probing-<uid>) and asks each live agent\n"
     "who it is (1 s timeout each). Sockets of exited processes are skipped, not removed.\n"},
    {"query", cmd_query, OPT_FORMAT | OPT_RANKS | OPT_DEADLINE, 1, 1,
     "probing <target> query \"SQL\" [-f table|csv|json] [--ranks all|0,2-5 [--deadline S]]",
     "run a read-only SQL query in the target",
     "SQL may be split over several arguments (they are joined with spaces) or be '-' to read\n"
     "it from stdin. 'probing <target> tables' shows what can be queried.\n"
     "  -f table  aligned columns, NULL shown empty, \"(N rows)\" at the end (default)\n"
     "  -f csv    RFC 4180 with a header row\n"
     "  -f json   an array of objects, one per row\n"
     "  --ranks R   run it on ranks R of the target's torch.distributed job ('all', or a list\n"
     "              such as 0,2-5), in parallel; the rows get 'rank' and 'host' columns first\n"
     "  --deadline S  with --ranks: wait at most S seconds (default 5); ranks that do not\n"
     "              answer are named on stderr and the exit status is 3 (docs/cluster.md)\n"},
    {"eval", cmd_eval, OPT_TIMEOUT, 1, 1, "probing <target> eval \"CODE\" [--timeout S]",
     "run Python code in the target's __main__",
     "The code's stdout and stderr are printed as they were captured. CODE may be '-' to read\n"
     "it from stdin.\n"
     "  --timeout S  give up after S seconds (default 30); exit status 2 when it does\n"
     "Exit status 1 when the code raised (the traceback is printed on stderr).\n"},
    {"tables", cmd_tables, OPT_FORMAT, 1, 0, "probing <target> tables [-f table|json]",
     "list the tables the target can query, with their columns", ""},
    {"info", cmd_info, OPT_FORMAT, 1, 0, "probing <target> info [-f table|json]",
     "show the target's pid, command, Python and torch versions, uptime", ""},
    {"run", cmd_run, OPT_OUTPUT | OPT_FORCE, 0, 0,
     "probing run [-o FILE.db [--force]] -- COMMAND [ARGS...]",
     "start COMMAND with the probing agent loaded",
     "Sets PROBING=1, makes the probing package (and nothing else of its environment)\n"
     "importable, and executes COMMAND in place of probing (same pid, signals, exit status);\n"
     "the program keeps its own Python packages (its torch). Set PROBING_PYTHONPATH to the\n"
     "directory that contains probing/ when it cannot be found next to this program.\n"
     "  -o FILE.db  keep the whole record in the SQLite file FILE.db, flushed every second,\n"
     "              at exit and on SIGTERM; read it later with 'probing FILE.db query ...'\n"
     "              (docs/recordings.md). The ranks of a torchrun job record into\n"
     "              FILE.rank<R>.db (the launcher records nothing); %r, %h, %p in FILE are\n"
     "              replaced by the rank, host name and pid. FILE must not exist, or be a\n"
     "              recording and --force given; anything else is refused\n"
     "  --force     replace FILE.db when it is a recording (never another kind of file)\n"},
    {"report", cmd_report, OPT_JSON | OPT_LAST, 1, 1, "probing <target> report [--json] [--last N] [RANK.db ...]",
     "diagnose the training: baseline, bottleneck, component, what to look at next",
     "Follows the four phases of the profiling method (baseline, bottleneck type, component,\n"
     "operation) and its checks (memory growth, collectives, load imbalance, AMP, host syncs,\n"
     "first-iteration overhead) over the recorded steps. Every finding shows its numbers and\n"
     "the SQL behind them; what the data cannot support is listed as missing.\n"
     "  --json    the same content as JSON (schema in docs/report.md)\n"
     "  --last N  only the last N complete steps (default: every step recorded)\n"
     "  RANK.db   when the target is a recording: the recordings of the job's other ranks,\n"
     "            read together for the load-imbalance check (probing r0.db report r1.db)\n"},
    {"timeline", cmd_timeline, OPT_OUTPUT | OPT_RANKS | OPT_DEADLINE, 1, 0,
     "probing <target> timeline -o FILE.json [--ranks all|0,2-5 [--deadline S]]",
     "write the recorded steps, modules, data waits and collectives as a Chrome trace",
     "Writes Chrome-trace JSON (\"traceEvents\", complete events, microseconds) that\n"
     "https://ui.perfetto.dev and chrome://tracing open: one slice per step, module execution\n"
     "(forward, backward), optimizer step, data-loader wait and collective, pid = rank,\n"
     "tid = thread. '-o -' writes to stdout. See docs/cli.md for how times are derived.\n"
     "  --ranks R   one trace for ranks R of the target's job ('all' or 0,2-5): a process per\n"
     "              rank, on this machine's clock, each rank's clock offset and its uncertainty\n"
     "              in otherData (docs/cluster.md); exit status 3 when some ranks are missing\n"},
    {"flamegraph", cmd_flamegraph, OPT_OUTPUT | OPT_STAGE | OPT_FOLDED, 1, 0,
     "probing <target> flamegraph (-o FILE.svg | --folded [-o FILE]) [--stage S]",
     "draw module self time as a flame graph (SVG) or write folded stacks",
     "Stacks are root;layer1;layer1.0;layer1.0.conv1 (the root module, then the prefixes of\n"
     "the qualified name), weighted by the recorded self time (python.torch_trace.duration).\n"
     "  -o FILE       write the SVG (or, with --folded, the text) to FILE\n"
     "  --folded      folded-stack text, \"stack microseconds\" per line (flamegraph.pl input)\n"
     "  --stage S     forward (default), backward, step (optimizer) or all\n"},
    {"detach", cmd_detach, 0, 1, 0, "probing <target> detach",
     "remove the agent from the target; the process runs on without probing",
     "The agent answers, then removes its torch hooks and wrappers, stops its threads, frees\n"
     "its tables and removes its socket; training goes on unchanged. Waits until the socket\n"
     "is gone. Afterwards the process is no longer traced ('probing <pid> query' says so).\n"},
    {"backtrace", cmd_backtrace, OPT_FORMAT | OPT_NATIVE, 1, 0, "probing <pid> backtrace [--native] [-f table|json]",
     "show the Python stack of every thread, read from outside the process",
     "Reads the interpreter's memory with process_vm_readv: needs no agent, and works on a\n"
     "deadlocked process or one whose main thread holds the GIL in a long C call. Frames are\n"
     "printed innermost first as 'function (file:line)'. CPython 3.9 to 3.13 on\n"
     "x86_64. Needs the permission to ptrace the process (same user and\n"
     "kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE).\n"
     "  --native  also the native (C) stack of each thread: each thread is stopped for the\n"
     "            moment of its walk (ptrace) and unwound with libunwind\n"
     "  -f table  text, one block per thread (default)\n"
     "  -f json   {pid, cmdline, python, library, threads: [{native_id, thread_id, name,\n"
     "            holds_gil, truncated, frames: [{function, file, line}], with --native\n"
     "            native: [{ip, symbol, offset, object}]}]}\n"},
    {"inject", cmd_inject, OPT_TIMEOUT, 1, 0, "probing <pid> inject [--timeout S]",
     "load the agent into a running Python process, without restarting it",
     "The process needs no preparation: it never imported probing. On CPython 3.14+ this uses\n"
     "the interpreter's sys.remote_exec (PEP 768); before 3.14, ptrace: the main thread is\n"
     "stopped for a moment to queue a pending call (Py_AddPendingCall) and put back exactly as\n"
     "it was. The interpreter starts the agent at its next safe point (main thread, between two\n"
     "bytecodes). Modules, optimizers and data loaders that already exist are recorded from\n"
     "their next call. Needs the permission to ptrace the process (same user and\n"
     "kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE) and a probing package built for\n"
     "the process's Python version. A process already traced is left as it is.\n"
     "  --timeout S  wait at most S seconds for the agent to start (default 30); exit status 2\n"
     "               when it has not (it is still queued and starts when the main thread runs\n"
     "               Python code again)\n"},
    {"capture", cmd_capture, OPT_CAPTURE | OPT_OUTPUT | OPT_TIMEOUT | OPT_RANKS | OPT_DEADLINE, 1, 0,
     "probing <target> capture [--steps N] [--memory] [--shapes] [--stack] [-o FILE.json] "
     "[--timeout S] [--ranks all|0,2-5 [-o DIR] [--deadline S]]",
     "profile the next N training steps with torch.profiler (ops, modules, kernels)",
     "At the next step boundary the training thread starts torch.profiler (CPU, and CUDA when\n"
     "the program uses CUDA), runs it for N steps, stops it and goes on. The op-level results\n"
     "go to python.torch_ops: per step, op, module it ran under and stage, with self and\n"
     "total CPU and device times. Prints the top ops and the query for more. One capture at\n"
     "a time; the program's numbers are not changed.\n"
     "  --steps N    steps to capture, 1 to 20 (default 3)\n"
     "  --memory     also record memory allocated and freed per op (profile_memory)\n"
     "  --shapes     also record input shapes (record_shapes): one row per op and shapes\n"
     "  --stack      also record the Python frames that called each op (with_stack)\n"
     "  -o FILE      also write the profiler's Chrome trace (Perfetto, chrome://tracing);\n"
     "               '-o -' writes it to stdout and the summary to stderr\n"
     "  --timeout S  give up after S seconds (default 120) and cancel the capture; exit 2\n"
     "  --ranks R    the same capture on ranks R of the target's job at once ('all' or 0,2-5);\n"
     "               -o DIR then writes DIR/rank<R>.json per rank (an HTA trace directory);\n"
     "               ranks without a capture are named with why (then exit status 3)\n"
     "  --deadline S  with --ranks: wait at most S seconds for each round of answers (default 5)\n"},
    {"record", cmd_record, OPT_OUTPUT | OPT_RECORD, 1, 0,
     "probing <target> record [-o FILE.db [--force] | --stop]",
     "keep the record of a running process in a SQLite file, as 'run -o' does",
     "The agent in the process records into FILE.db as under 'probing run -o': first the rows\n"
     "its rings still hold, then every new row, flushed every second (its\n"
     "PROBING_RECORD_FLUSH_MS), at exit and on SIGTERM; what was flushed survives SIGKILL or a\n"
     "crash. The command returns at once; the recording goes on until --stop or the end of the\n"
     "process. Read the file with 'probing FILE.db query|report|timeline' (docs/recordings.md).\n"
     "Without options: whether the process records, where to, and the rows written so far.\n"
     "  -o FILE.db  start recording into FILE.db (relative to this directory); it must not exist\n"
     "  --force     replace FILE.db when it exists\n"
     "  --stop      make the last flush, close the file and print the rows written per table\n"
     "Not over TCP (host:port targets): the agent would write a file a network client names.\n"},
    {"exporter", cmd_exporter, OPT_EXPORTER | OPT_TIMEOUT, 0, 0,
     "probing exporter [--listen ADDR:PORT] [--sd FILE] [--timeout S]",
     "serve Prometheus metrics for every probing agent of this user on this node",
     "Serves GET /metrics (Prometheus text format) and GET /-/healthy. Each scrape asks every\n"
     "agent in the socket directory (as 'probing list' finds them) over its Unix socket; no\n"
     "request takes the GIL. Metrics, labels and PromQL: docs/exporter.md.\n"
     "  --listen ADDR:PORT  where to listen (default :10089, every interface; :0 picks a port)\n"
     "  --sd FILE           write a Prometheus file_sd target for this exporter to FILE\n"
     "                      (removed when the exporter stops)\n"
     "  --timeout S         deadline of a scrape in seconds (default 5, less when Prometheus\n"
     "                      announces a shorter scrape timeout); an agent that has not\n"
     "                      answered by then is reported as probing_up 0\n"},
    {"export", cmd_export, OPT_PARQUET, 1, 0,
     "probing <target-or-recording...> export --parquet DIR",
     "write every table of live processes or recordings as Parquet files",
     "Writes DIR/rank<R>-pid<P>/<table>.parquet for each target: one file per table, the\n"
     "table's column types kept, plus job, rank, host and pid columns; 'time' columns become\n"
     "UTC timestamps. Several targets may be given before the command (probing a.db b.db\n"
     "export ...). Needs pyarrow in the Python that runs it ($PROBING_PYTHON, else python3):\n"
     "pip install pyarrow. DuckDB reads them with read_parquet('DIR/*/steps.parquet')\n"
     "(docs/exporter.md).\n"
     "  --parquet DIR  the directory to write (created when missing)\n"},
    {"ui", cmd_ui, OPT_UI, 1, 0, "probing <target> ui [--listen ADDR:PORT] [--open]",
     "open a web view of the target: step time, modules, memory, ranks, SQL",
     "Starts a web server in this command and prints its URL with a one-time token; requests\n"
     "without the token get 403. The page reads the target only through this command (a\n"
     "recording works offline) and updates every second for a live target. Ctrl-C stops it.\n"
     "For one rank of a job, every rank of that job on this machine is shown. See docs/ui.md.\n"
     "  --listen ADDR:PORT  listen there (default 127.0.0.1 and a free port)\n"
     "  --open             open the URL in a browser ($BROWSER, else xdg-open)\n"},
    {"ranks", cmd_ranks, OPT_FORMAT | OPT_DEADLINE, 1, 0,
     "probing <target> ranks [-f table|csv|json] [--deadline S]",
     "list every rank of the target's torch.distributed job, on every node",
     "The roster comes from the job's own c10d store, where each rank's agent registers\n"
     "(docs/cluster.md). Each rank is asked for its step and state (training, in a collective,\n"
     "not answering, gone) at once; ranks on other hosts are reached over TCP with the job's\n"
     "token (PROBING_TOKEN, PROBING_TOKEN_FILE or --token).\n"
     "  --deadline S  wait at most S seconds for the ranks (default 5)\n"
     "Exit status 3 when some ranks did not answer (their reason is in the state column).\n"},
    {"hang", cmd_hang, OPT_DEADLINE, 1, 0, "probing <target> hang [--deadline S]",
     "say which rank a stalled job waits for, and where that rank is",
     "Compares every rank's last collective per process group (sequence number, entered or\n"
     "completed) and prints the collective the others wait in, the ranks that have not entered\n"
     "it with their Python stacks (read from outside the process), the waiting ranks' stacks\n"
     "grouped, and mismatched collectives (docs/cluster.md).\n"
     "  --deadline S  wait at most S seconds for the ranks (default 5)\n"
     "Exit status 3 when some ranks did not answer (they are named).\n"},
};

#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

void pb_cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("probing: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

char *pb_cli_positional_text(const pb_cli_args *a, const char *what)
{
    char *text = NULL;
    if (a->positional_count == 0) {
        pb_cli_error("%s needs %s: probing <target> %s \"%s\"", a->command, what, a->command,
                     strcmp(what, "SQL") == 0 ? "SELECT ..." : "print(...)");
        return NULL;
    }
    if (a->positional_count == 1 && strcmp(a->positional[0], "-") == 0) {
        pb_buf b = PB_BUF_INIT;
        char chunk[65536];
        size_t n;
        b.max_len = STDIN_MAX_BYTES;
        while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
            if (pb_buf_append(&b, chunk, n)) {
                pb_cli_error("the %s on stdin is too large (over 64 MiB)", what);
                pb_buf_free(&b);
                return NULL;
            }
        }
        if (ferror(stdin)) {
            pb_cli_error("cannot read the %s from stdin: %s", what, strerror(errno));
            pb_buf_free(&b);
            return NULL;
        }
        text = pb_buf_steal(&b, NULL);
    } else {
        pb_buf b = PB_BUF_INIT;
        int rc = 0;
        for (int i = 0; i < a->positional_count && !rc; i++) {
            if (i) rc = pb_buf_putc(&b, ' ');
            if (!rc) rc = pb_buf_puts(&b, a->positional[i]);
        }
        text = rc ? NULL : pb_buf_steal(&b, NULL);
        pb_buf_free(&b);
    }
    if (!text) {
        pb_cli_error("out of memory");
        return NULL;
    }
    if (strspn(text, " \t\r\n") == strlen(text)) {
        pb_cli_error("the %s is empty", what);
        free(text);
        return NULL;
    }
    return text;
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

/* Edit distance between a and b (insert, delete, replace, swap of neighbours), capped at 9. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 30 || lb > 30) return 9;
    int d[32][32];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] > 9 ? 9 : d[la][lb];
}

/* The command closest to a mistyped name (within 2 edits, or the only one it starts), or
 * NULL. */
static const char *closest_command(const char *name)
{
    const char *best = NULL, *prefixed = NULL;
    int best_d = 3, prefixes = 0;
    for (size_t i = 0; i < COMMAND_COUNT; i++) {
        if (!commands[i].run) continue;
        int d = distance(name, commands[i].name);
        if (d < best_d) {
            best_d = d;
            best = commands[i].name;
        }
        if (strlen(name) >= 2 && strncmp(commands[i].name, name, strlen(name)) == 0) {
            prefixes++;
            prefixed = commands[i].name;
        }
    }
    if (strcmp(name, "help") != 0 && best) return best;
    return prefixes == 1 ? prefixed : NULL;
}

static int unknown_command(const char *name)
{
    const char *guess = closest_command(name);
    if (guess)
        pb_cli_error("unknown command '%s'; did you mean '%s'? (see 'probing help')", name,
                     guess);
    else
        pb_cli_error("unknown command '%s'; see 'probing --help'", name);
    return PB_EXIT_USAGE;
}

static void print_help(FILE *out)
{
    fputs("probing - look inside a running PyTorch process\n\nUsage:\n", out);
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (commands[i].run) fprintf(out, "  %s\n", commands[i].usage);
    fputs("\nCommands:\n", out);
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (commands[i].run) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\nA target is a pid (12345), host:port or [::1]:port (an agent started with\n"
          "PROBING_LISTEN), the path of an agent socket, or a recording file (run.db, written by\n"
          "'probing run -o' or 'record -o'; query, tables, info, report, timeline, flamegraph,\n"
          "export and ui read it after the process is gone). It may also be given as -t TARGET\n"
          "(--target), before or after the command. A host:port target needs the agent's token:\n"
          "--token T, else $PROBING_TOKEN, else the agent's token file when readable\n"
          "(docs/security.md).\n"
          "\nOptions:\n  -h, --help     show this help; 'probing <command> --help' or 'probing help\n"
          "                 <command>' for one command\n"
          "  -V, --version  show the version\n"
          "\nExit status: 0 success; 1 error (including SQL errors and exceptions in eval);\n"
          "2 usage error or eval/capture timeout; 3 some ranks did not answer (ranks, hang,\n"
          "--ranks); 130 capture interrupted (Ctrl-C); run: the command's own status\n"
          "(127: not found).\n",
          out);
}

/* The commands that answer from a recording file as from a live agent (recording.c serves their
 * requests); the others with a target need a live process, backtrace and inject a pid. */
static const char *const reads_recordings[] = {"query", "tables", "info", "report", "timeline",
                                               "flamegraph", "export", "ui", NULL};

static void print_command_help(const command *c)
{
    int recording = 0;
    printf("Usage: %s\n\n%s.\n", c->usage, c->summary);
    if (c->details && *c->details) printf("\n%s", c->details);
    if (!c->needs_target) return;
    for (int i = 0; reads_recordings[i] && !recording; i++)
        recording = strcmp(c->name, reads_recordings[i]) == 0;
    if (recording)
        printf("\nTARGET: a pid, host:port, socket path, or a recording file (run.db, written by\n"
               "'probing run -o' or 'record -o'); may also be given as -t TARGET.\n");
    else if (c->run == cmd_backtrace || c->run == cmd_inject)
        printf("\nTARGET: the pid of a Python process on this machine (a recording file has no\n"
               "process to %s); may also be given as -t TARGET.\n", c->name);
    else
        printf("\nTARGET: a pid, host:port or socket path of a live process (a recording file,\n"
               "written by 'probing run -o' or 'record -o', has no process to %s); may also be\n"
               "given as -t TARGET.\n", c->name);
}

/* Options are arguments starting with '-' that are not "-" and contain no whitespace. */
static int is_option(const char *arg)
{
    return arg[0] == '-' && arg[1] && !strpbrk(arg, " \t\n\r");
}

/* Matches argv[*i] against -s / --long, taking a value as "-sVALUE", "-s VALUE", "--long=VALUE"
 * or "--long VALUE". Returns 1 (matched, *value set, *i advanced past a separate value), 0 (no
 * match) or -1 (matched but no value; message printed). */
static int match_valued(int argc, char **argv, int *i, char short_name, const char *long_name,
                        const char **value)
{
    const char *arg = argv[*i];
    size_t long_len = strlen(long_name);
    const char *attached = NULL;
    if (short_name && arg[0] == '-' && arg[1] == short_name) {
        if (arg[2]) attached = arg + 2;
    } else if (arg[0] == '-' && arg[1] == '-' && strncmp(arg + 2, long_name, long_len) == 0 &&
               (arg[2 + long_len] == '\0' || arg[2 + long_len] == '=')) {
        if (arg[2 + long_len] == '=') attached = arg + 3 + long_len;
    } else {
        return 0;
    }
    if (attached) {
        *value = attached;
        return 1;
    }
    if (*i + 1 >= argc) {
        pb_cli_error("option %s needs a value", arg);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

static int set_target(pb_cli_args *a, const char *target)
{
    if (a->target && strcmp(a->target, target) != 0) {
        pb_cli_error("two targets given ('%s' and '%s'); give one", a->target, target);
        return -1;
    }
    a->target = target;
    return 0;
}

static int unknown_option(const char *arg, const char *command_name)
{
    if (command_name)
        pb_cli_error("unknown option '%s' for %s; see 'probing %s --help' (use -- before an "
                     "argument that starts with '-')", arg, command_name, command_name);
    else
        pb_cli_error("unknown option '%s'; see 'probing --help'", arg);
    return PB_EXIT_USAGE;
}

/* Parses what follows the command name. Returns -1 to go on, or an exit code. */
static int parse_command_args(const command *c, int argc, char **argv, int i, pb_cli_args *a)
{
    int help = 0, positional_only = 0;
    const char *value = NULL;
    a->positional = calloc((size_t)argc + 1, sizeof *a->positional);
    if (!a->positional) {
        pb_cli_error("out of memory");
        return PB_EXIT_ERROR;
    }
    for (; i < argc; i++) {
        const char *arg = argv[i];
        int m;
        if (c->run == cmd_run) { /* everything from the first non-option is the command */
            if (strcmp(arg, "--") == 0) {
                i++;
                break;
            }
            if (!is_option(arg)) break;
        }
        if (positional_only || !is_option(arg)) {
            a->positional[a->positional_count++] = argv[i];
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            positional_only = 1;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            help = 1;
        } else if ((m = match_valued(argc, argv, &i, 't', "target", &value)) != 0) {
            if (m < 0 || set_target(a, value)) return PB_EXIT_USAGE;
        } else if (c->needs_target && (m = match_valued(argc, argv, &i, 0, "token", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            pb_target_set_token(value);
        } else if ((c->options & OPT_FORMAT) &&
                   (m = match_valued(argc, argv, &i, 'f', "format", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->format = value;
        } else if ((c->options & OPT_TIMEOUT) &&
                   (m = match_valued(argc, argv, &i, 0, "timeout", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            double t = strtod(value, &end);
            if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > 7 * 86400) {
                pb_cli_error("--timeout wants a number of seconds above 0 (up to 604800), not "
                             "'%s'", value);
                return PB_EXIT_USAGE;
            }
            a->timeout_s = t;
        } else if ((c->options & OPT_RANKS) &&
                   (m = match_valued(argc, argv, &i, 0, "ranks", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->ranks = value;
        } else if ((c->options & OPT_DEADLINE) &&
                   (m = match_valued(argc, argv, &i, 0, "deadline", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            double t = strtod(value, &end);
            if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > 3600) {
                pb_cli_error("--deadline wants a number of seconds above 0 (up to 3600), not "
                             "'%s'", value);
                return PB_EXIT_USAGE;
            }
            a->deadline_s = t;
        } else if ((c->options & OPT_NATIVE) && strcmp(arg, "--native") == 0) {
            a->native = 1;
        } else if ((c->options & OPT_JSON) && strcmp(arg, "--json") == 0) {
            a->json = 1;
        } else if ((c->options & OPT_LAST) &&
                   (m = match_valued(argc, argv, &i, 0, "last", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (errno || end == value || *end || n < 1 || n > 100000000) {
                pb_cli_error("--last wants a number of steps of 1 or more, not '%s'", value);
                return PB_EXIT_USAGE;
            }
            a->last_steps = (int)n;
        } else if ((c->options & OPT_OUTPUT) &&
                   (m = match_valued(argc, argv, &i, 'o', "output", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            if (strcmp(value, "--") == 0 || (value[0] == '-' && value[1] == '-')) {
                pb_cli_error("%s needs a file name before '%s': probing %s -o FILE ...", arg,
                             value, c->name);
                return PB_EXIT_USAGE;
            }
            a->output = value;
        } else if ((c->options & OPT_STAGE) &&
                   (m = match_valued(argc, argv, &i, 0, "stage", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->stage = value;
        } else if ((c->options & OPT_FOLDED) && strcmp(arg, "--folded") == 0) {
            a->folded = 1;
        } else if ((c->options & OPT_CAPTURE) &&
                   (m = match_valued(argc, argv, &i, 0, "steps", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (errno || end == value || *end || n < 1 || n > PB_CLI_CAPTURE_MAX_STEPS) {
                pb_cli_error("--steps wants a number of steps from 1 to %d, not '%s'",
                             PB_CLI_CAPTURE_MAX_STEPS, value);
                return PB_EXIT_USAGE;
            }
            a->steps = (int)n;
        } else if ((c->options & OPT_CAPTURE) && strcmp(arg, "--memory") == 0) {
            a->memory = 1;
        } else if ((c->options & OPT_CAPTURE) && strcmp(arg, "--shapes") == 0) {
            a->shapes = 1;
        } else if ((c->options & OPT_CAPTURE) && strcmp(arg, "--stack") == 0) {
            a->stack = 1;
        } else if ((c->options & OPT_RECORD) && strcmp(arg, "--stop") == 0) {
            a->stop = 1;
        } else if ((c->options & (OPT_RECORD | OPT_FORCE)) && strcmp(arg, "--force") == 0) {
            a->force = 1;
        } else if ((c->options & (OPT_EXPORTER | OPT_UI)) &&
                   (m = match_valued(argc, argv, &i, 0, "listen", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->listen = value;
        } else if ((c->options & OPT_EXPORTER) &&
                   (m = match_valued(argc, argv, &i, 0, "sd", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->sd_file = value;
        } else if ((c->options & OPT_PARQUET) &&
                   (m = match_valued(argc, argv, &i, 0, "parquet", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            a->parquet_dir = value;
        } else if ((c->options & OPT_UI) && strcmp(arg, "--open") == 0) {
            a->open_browser = 1;
        } else {
            return unknown_option(arg, c->name);
        }
    }
    if (help) {
        print_command_help(c);
        return PB_EXIT_OK;
    }
    if (c->run == cmd_run) {
        if (a->target) {
            pb_cli_error("run does not take a target; it starts a new process: "
                         "probing run -- python train.py");
            return PB_EXIT_USAGE;
        }
        a->exec_argv = argv + i;
        a->exec_argc = argc - i;
        if (a->exec_argc == 0) {
            pb_cli_error("run needs a command after '--': probing run -- python train.py");
            return PB_EXIT_USAGE;
        }
        return -1;
    }
    if (a->positional_count && !c->takes_text) {
        pb_cli_error("%s takes no arguments (got '%s'); see 'probing %s --help'", c->name,
                     a->positional[0], c->name);
        return PB_EXIT_USAGE;
    }
    if (!c->needs_target && a->target) {
        pb_cli_error("%s does not take a target (got '%s')", c->name, a->target);
        return PB_EXIT_USAGE;
    }
    if (c->needs_target && !a->target) {
        pb_cli_error("%s needs a target: %s (see 'probing list')", c->name, c->usage);
        return PB_EXIT_USAGE;
    }
    return -1;
}

static int run(int argc, char **argv)
{
    pb_cli_args a;
    const char *value;
    int i = 1, m;
    memset(&a, 0, sizeof a);

    for (; i < argc && is_option(argv[i]); i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            print_help(stdout);
            return PB_EXIT_OK;
        }
        if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
            printf("probing %s\n", PB_VERSION);
            return PB_EXIT_OK;
        }
        if ((m = match_valued(argc, argv, &i, 't', "target", &value)) != 0) {
            if (m < 0 || set_target(&a, value)) return PB_EXIT_USAGE;
            continue;
        }
        if ((m = match_valued(argc, argv, &i, 0, "token", &value)) != 0) {
            if (m < 0) return PB_EXIT_USAGE;
            pb_target_set_token(value);
            continue;
        }
        return unknown_option(arg, NULL);
    }
    if (i >= argc) {
        print_help(stderr);
        return PB_EXIT_USAGE;
    }
    if (strcmp(argv[i], "help") == 0 && !a.target) { /* probing help [COMMAND] */
        if (i + 1 >= argc) {
            print_help(stdout);
            return PB_EXIT_OK;
        }
        const command *h = find_command(argv[i + 1]);
        if (!h || !h->run) return unknown_command(argv[i + 1]);
        if (i + 2 < argc) {
            pb_cli_error("help takes one command name (got '%s' too): probing help %s",
                         argv[i + 2], h->name);
            return PB_EXIT_USAGE;
        }
        print_command_help(h);
        return PB_EXIT_OK;
    }
    const command *c = find_command(argv[i]);
    if (!c) {
        int next_is_command = i + 1 < argc && find_command(argv[i + 1]);
        if (!pb_target_looks_like(argv[i]) && !next_is_command) return unknown_command(argv[i]);
        if (set_target(&a, argv[i])) return PB_EXIT_USAGE;
        /* Several targets before the command (export of several recordings). */
        while (i + 2 < argc && !find_command(argv[i + 1]) && pb_target_looks_like(argv[i + 1])) {
            if (!a.more_targets && !(a.more_targets = calloc((size_t)argc, sizeof(char *)))) {
                pb_cli_error("out of memory");
                return PB_EXIT_ERROR;
            }
            a.more_targets[a.more_target_count++] = argv[++i];
        }
        if (++i >= argc) {
            pb_cli_error("missing command after the target: probing %s query \"SELECT ...\" "
                         "(see 'probing --help')", a.target);
            return PB_EXIT_USAGE;
        }
        if (!(c = find_command(argv[i]))) return unknown_command(argv[i]);
    }
    if (!c->run) {
        pb_cli_error("'%s' is not available in this version of probing (%s); see "
                     "'probing --help'", c->name, PB_VERSION);
        return PB_EXIT_USAGE;
    }
    a.command = c->name;
    int rc = parse_command_args(c, argc, argv, i + 1, &a);
    if (rc < 0 && a.more_target_count && c->run != cmd_export) {
        pb_cli_error("%s takes one target, not %d; only export takes several", c->name,
                     a.more_target_count + 1);
        rc = PB_EXIT_USAGE;
    }
    /* backtrace and inject work on the process from outside: their target is a pid, not an agent. */
    if (rc < 0 && a.target && c->run != cmd_backtrace && c->run != cmd_inject) {
        int resolve_rc = pb_target_resolve(a.target, &a.resolved);
        if (resolve_rc) rc = resolve_rc;
    }
    if (rc < 0) rc = c->run(&a);
    free(a.positional);
    free(a.more_targets);
    return rc;
}

int main(int argc, char **argv)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        pb_cli_error("cannot initialise libcurl");
        return PB_EXIT_ERROR;
    }
    int rc = run(argc, argv);
    if (fflush(stdout) != 0 && rc == PB_EXIT_OK) {
        pb_cli_error("cannot write the output: %s", strerror(errno));
        rc = PB_EXIT_ERROR;
    }
    curl_global_cleanup();
    return rc;
}
