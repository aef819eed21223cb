/*
 * commands.c - the table of commands (see commands.h): names, entry points, option tables, needs
 * and the help prose `probing --help` and `probing <command> --help` print. The options
 * themselves, with their help lines and the positional arguments, are declared beside each
 * command (cmd/cmd_<name>.c); each usage line is made from them (usage.c).
 */
#include "commands.h"

#include <string.h>

const pb_command pb_commands_table[] = {
    {"list", cmd_list, pb_options_list, 0,
     "list the processes traced by probing on this machine",
     "Scans the socket directory ($PROBING_DIR or /tmp/probing-<uid>) and asks each live agent\n"
     "who it is (1 s timeout each). Sockets of exited processes are skipped, not removed.\n"},
    {"query", cmd_query, pb_options_query, PB_CMD_TARGET | PB_CMD_TEXT | PB_CMD_RECORDINGS,
     "run a read-only SQL query in the target",
     "SQL may be split over several arguments (they are joined with spaces) or be '-' to read\n"
     "it from stdin. 'probing <target> tables' shows what can be queried.\n"},
    {"eval", cmd_eval, pb_options_eval, PB_CMD_TARGET | PB_CMD_TEXT,
     "run Python code in the target's __main__",
     "The code's stdout and stderr are printed as they were captured. CODE may be '-' to read\n"
     "it from stdin.\n"
     "Exit status 1 when the code raised (the traceback is printed on stderr).\n"},
    {"tables", cmd_tables, pb_options_tables, PB_CMD_TARGET | PB_CMD_RECORDINGS,
     "list the tables the target can query, with their columns", ""},
    {"info", cmd_info, pb_options_info, PB_CMD_TARGET | PB_CMD_RECORDINGS,
     "show the target's pid, command, Python and torch versions, uptime", ""},
    {"run", cmd_run, pb_options_run, PB_CMD_EXEC,
     "start COMMAND with the probing agent loaded",
     "Sets PROBING=1, makes the probing package (and nothing else of its environment)\n"
     "importable, and executes COMMAND in place of probing (same pid, signals, exit status);\n"
     "the program keeps its own Python packages (its torch). Set PROBING_PYTHONPATH to the\n"
     "directory that contains probing/ when it cannot be found next to this program.\n"},
    {"report", cmd_report, pb_options_report, PB_CMD_TARGET | PB_CMD_TEXT | PB_CMD_RECORDINGS,
     "diagnose the training: baseline, bottleneck, component, what to look at next",
     "Follows the four phases of the profiling method (baseline, bottleneck type, component,\n"
     "operation) and its checks (memory growth, collectives, load imbalance, AMP, host syncs,\n"
     "first-iteration overhead) over the recorded steps. Every finding shows its numbers and\n"
     "the SQL behind them; what the data cannot support is listed as missing.\n"
     "RANK.db: when the target is a recording, the recordings of the job's other ranks, read\n"
     "together for the load-imbalance check (probing r0.db report r1.db).\n"},
    {"timeline", cmd_timeline, pb_options_timeline, PB_CMD_TARGET | PB_CMD_RECORDINGS,
     "write the recorded steps, modules, data waits and collectives as a Chrome trace",
     "Writes Chrome-trace JSON (\"traceEvents\", complete events, microseconds) that\n"
     "https://ui.perfetto.dev and chrome://tracing open: one slice per step, module execution\n"
     "(forward, backward), optimizer step, data-loader wait and collective, pid = rank,\n"
     "tid = thread. See docs/cli.md for how times are derived.\n"},
    {"flamegraph", cmd_flamegraph, pb_options_flamegraph, PB_CMD_TARGET | PB_CMD_RECORDINGS,
     "draw module self time as a flame graph (SVG) or write folded stacks",
     "Stacks are root;layer1;layer1.0;layer1.0.conv1 (the root module, then the prefixes of\n"
     "the qualified name), weighted by the recorded self time (python.torch_trace.duration).\n"},
    {"detach", cmd_detach, NULL, PB_CMD_TARGET,
     "remove the agent from the target; the process runs on without probing",
     "The agent answers, then removes its torch hooks and wrappers, stops its threads, frees\n"
     "its tables and removes its socket; training goes on unchanged. Waits until the socket\n"
     "is gone. Afterwards the process is no longer traced ('probing <pid> query' says so).\n"},
    {"backtrace", cmd_backtrace, pb_options_backtrace, PB_CMD_TARGET | PB_CMD_PID,
     "show the Python stack of every thread, read from outside the process",
     "Reads the interpreter's memory with process_vm_readv: needs no agent, and works on a\n"
     "deadlocked process or one whose main thread holds the GIL in a long C call. Frames are\n"
     "printed innermost first as 'function (file:line)'. CPython 3.9 to 3.13 on\n"
     "x86_64. Needs the permission to ptrace the process (same user and\n"
     "kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE).\n"},
    {"inject", cmd_inject, pb_options_inject, PB_CMD_TARGET | PB_CMD_PID,
     "load the agent into a running Python process, without restarting it",
     "The process needs no preparation: it never imported probing. On CPython 3.14+ this uses\n"
     "the interpreter's sys.remote_exec (PEP 768); before 3.14, ptrace: the main thread is\n"
     "stopped for a moment to queue a pending call (Py_AddPendingCall) and put back exactly as\n"
     "it was. The interpreter starts the agent at its next safe point (main thread, between two\n"
     "bytecodes). Modules, optimizers and data loaders that already exist are recorded from\n"
     "their next call. Needs the permission to ptrace the process (same user and\n"
     "kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE) and a probing package built for\n"
     "the process's Python version. A process already traced is left as it is.\n"},
    {"capture", cmd_capture, pb_options_capture, PB_CMD_TARGET,
     "profile the next N training steps with torch.profiler (ops, modules, kernels)",
     "At the next step boundary the training thread starts torch.profiler (CPU, and CUDA when\n"
     "the program uses CUDA), runs it for N steps, stops it and goes on. The op-level results\n"
     "go to python.torch_ops: per step, op, module it ran under and stage, with self and\n"
     "total CPU and device times. Prints the top ops and the query for more. One capture at\n"
     "a time; the program's numbers are not changed.\n"},
    {"record", cmd_record, pb_options_record, PB_CMD_TARGET,
     "keep the record of a running process in a SQLite file, as 'run -o' does",
     "The agent in the process records into FILE.db as under 'probing run -o': first the rows\n"
     "its rings still hold, then every new row, flushed every second (its\n"
     "PROBING_RECORD_FLUSH_MS), at exit and on SIGTERM; what was flushed survives SIGKILL or a\n"
     "crash. The command returns at once; the recording goes on until --stop or the end of the\n"
     "process. Read the file with 'probing FILE.db query|report|timeline' (docs/recordings.md).\n"
     "Without options: whether the process records, where to, and the rows written so far.\n"
     "Not over TCP (host:port targets): the agent would write a file a network client names.\n"},
    {"exporter", cmd_exporter, pb_options_exporter, 0,
     "serve Prometheus metrics for every probing agent of this user on this node",
     "Serves GET /metrics (Prometheus text format) and GET /-/healthy. Each scrape asks every\n"
     "agent in the socket directory (as 'probing list' finds them) over its Unix socket; no\n"
     "request takes the GIL. Metrics, labels and PromQL: docs/exporter.md.\n"},
    {"export", cmd_export, pb_options_export,
     PB_CMD_TARGET | PB_CMD_RECORDINGS | PB_CMD_TARGETS,
     "write every table of live processes or recordings as Parquet files",
     "Writes DIR/rank<R>-pid<P>/<table>.parquet for each target: one file per table, the\n"
     "table's column types kept, plus job, rank, host and pid columns; 'time' columns become\n"
     "UTC timestamps. Several targets may be given before the command (probing a.db b.db\n"
     "export ...). Needs pyarrow in the Python that runs it ($PROBING_PYTHON, else python3):\n"
     "pip install pyarrow. DuckDB reads them with read_parquet('DIR/*/steps.parquet')\n"
     "(docs/exporter.md).\n"},
    {"compare", cmd_compare, pb_options_compare, PB_CMD_TEXT,
     "say whether AFTER is faster or slower than BEFORE, by how much, where, and if it is noise",
     "Each side is a recording, a live target, or a window of its steps: run.db:100-200,\n"
     "run.db:500- (from step 500), run.db:-500 (up to step 500), 12345:last200 (its last 200\n"
     "steps). The first line is the verdict: slower, faster or no significant change, from the\n"
     "medians of the steady steps (warm-up and outliers left out as 'report' does) with the\n"
     "Hodges-Lehmann shift and its 95 % interval; below --min-effect it is no change. Then the\n"
     "conditions that differ, phases, modules (self time on detail steps), throughput, memory\n"
     "and the report findings that changed. With different batch sizes, per sample.\n"
     "Exit status 0 whatever the verdict; 1 with --fail-if-slower PCT when slower by more.\n"},
    {"ui", cmd_ui, pb_options_ui, PB_CMD_TARGET | PB_CMD_RECORDINGS,
     "open a web view of the target: step time, modules, memory, ranks, SQL",
     "Starts a web server in this command and prints its URL with a one-time token; requests\n"
     "without the token get 403. The page reads the target only through this command (a\n"
     "recording works offline) and updates every second for a live target. Ctrl-C stops it.\n"
     "For one rank of a job, every rank of that job on this machine is shown. See docs/ui.md.\n"},
    {"ranks", cmd_ranks, pb_options_ranks, PB_CMD_TARGET,
     "list every rank of the target's torch.distributed job, on every node",
     "The roster comes from the job's own c10d store, where each rank's agent registers\n"
     "(docs/cluster.md). Each rank is asked for its step and state (training, in a collective,\n"
     "not answering, gone) at once; ranks on other hosts are reached over TCP with the job's\n"
     "token (PROBING_TOKEN, PROBING_TOKEN_FILE or --token).\n"
     "Exit status 3 when some ranks did not answer (their reason is in the state column).\n"},
    {"stragglers", cmd_stragglers, pb_options_stragglers, PB_CMD_TARGET,
     "say which rank makes the others wait in collectives, by how much, and in which phase",
     "Every rank's agent keeps, per process group, when it entered and completed its last 512\n"
     "collectives (torch.distributed calls and DDP gradient buckets); the clocks are aligned as in\n"
     "'timeline --ranks all'. Per collective that every member reported, the rank that entered\n"
     "last and its lag behind the median entry. A rank is named only when it is last in >= 60 %\n"
     "of them with a median lag >= max(2 ms, 5 % of the median step); its phase is the one of\n"
     "its own python.steps longer than the other ranks' by at least half that lag. A node whose\n"
     "ranks are all last is named as the node (docs/cli.md).\n"
     "Exit status 3 when some ranks did not answer (they are named on stderr).\n"},
    {"hang", cmd_hang, pb_options_hang, PB_CMD_TARGET,
     "say which rank a stalled job waits for, and where that rank is",
     "Compares every rank's last collective per process group (sequence number, entered or\n"
     "completed) and prints the collective the others wait in, the ranks that have not entered\n"
     "it with their Python stacks (read from outside the process), the waiting ranks' stacks\n"
     "grouped, and mismatched collectives (docs/cluster.md).\n"
     "Exit status 3 when some ranks did not answer (they are named).\n"},
    {"mcp", cmd_mcp, pb_options_mcp, 0,
     "serve the Model Context Protocol on stdin/stdout, for AI assistants",
     "An MCP server over stdio (JSON-RPC 2.0, one message per line) that an assistant such as\n"
     "Claude Code, Cursor or VS Code starts as you: claude mcp add probing -- probing mcp.\n"
     "Its tools are the commands (list_targets, query, report, tables, info, backtrace, hang,\n"
     "stragglers, ranks, compare), run in this process with the same checks as on the\n"
     "command line; its prompts carry the profiling method (diagnose, is_it_stuck,\n"
     "did_my_change_help); its resources are docs/report.md's method and docs/tables.md.\n"
     "Logs go to stderr only. It ends when stdin ends. See docs/mcp.md.\n"},
    {"doctor", cmd_doctor, pb_options_doctor, 0,
     "say which measurement paths this machine, Python and torch give, and what enables the rest",
     "No target: runs the Python that would run the training ($PROBING_PYTHON, else the python3\n"
     "beside this program, else python3 on PATH) and says, for module backward timing (the C++\n"
     "extension probing._autograd or Python-level probes; a build made on first use for this\n"
     "torch), the GIL sampler, NVML and CUDA device timing, whether each is active and what\n"
     "would enable it. Builds and installs nothing. A running job's paths: probing <target> info.\n"},
};

const size_t pb_commands_count = sizeof pb_commands_table / sizeof pb_commands_table[0];

const pb_command *pb_commands_find(const char *name)
{
    for (size_t i = 0; i < pb_commands_count; i++)
        if (strcmp(pb_commands_table[i].name, name) == 0) return &pb_commands_table[i];
    return NULL;
}
