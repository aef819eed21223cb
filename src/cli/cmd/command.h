/*
 * command.h - what a command receives and the commands themselves: options.c fills a
 * pb_cli_args by the command's pb_options_<name> table (option.h), commands.c's table names the
 * cmd_<name>() to call, and each returns the process exit code (cli.h). Header only: it sits
 * below the table and the commands alike.
 */
#ifndef PB_CLI_COMMAND_H
#define PB_CLI_COMMAND_H

#include "client/target.h"
#include "cmd/option.h"
#include "out/cli.h"

typedef struct pb_cli_args {
    const char *command;    /* the command name as typed */
    const char *target;     /* as typed, NULL when none */
    pb_target resolved;     /* valid when target != NULL (resolved before the command runs) */
    const char *format;     /* -f/--format value, NULL when not given */
    double timeout_s;       /* --timeout value; 0 when not given */
    char **positional;      /* borrowed from argv */
    int positional_count;
    int json;               /* --json given */
    int last_steps;         /* --last N value; 0 when not given */
    int last_collectives;   /* stragglers: --last N (collectives a group); 0 when not given */
    const char *output;     /* -o/--output value (timeline, flamegraph), NULL when not given */
    const char *stage;      /* --stage value (flamegraph), NULL when not given */
    int folded;             /* --folded given */
    int native;             /* --native given (backtrace) */
    int steps;              /* --steps N (capture); 0 when not given */
    int memory, shapes, stack; /* capture: --memory, --shapes, --stack given */
    int stop, force;        /* record: --stop, --force given */
    const char *ranks;      /* --ranks all|0,2-5 (query, timeline), NULL when not given */
    double deadline_s;      /* --deadline S (ranks, hang, --ranks); 0 when not given */
    char **exec_argv;       /* run: the command after "--" (NULL-terminated, borrowed) */
    int exec_argc;
    const char *listen;     /* exporter, ui: --listen ADDR:PORT, NULL when not given */
    const char *sd_file;    /* exporter: --sd FILE, NULL when not given */
    const char *parquet_dir; /* export: --parquet DIR, NULL when not given */
    char **more_targets;    /* export: targets after the first one (borrowed from argv) */
    int more_target_count;
    int open_browser;       /* ui: --open given */
    double min_effect_pct;  /* compare: --min-effect PCT; 0 when not given */
    double fail_if_slower_pct; /* compare: --fail-if-slower PCT; 0 when not given */
    int allow_eval;         /* mcp: --allow-eval given */
} pb_cli_args;

int cmd_list(const pb_cli_args *a);
int cmd_query(const pb_cli_args *a);
int cmd_eval(const pb_cli_args *a);
int cmd_tables(const pb_cli_args *a);
int cmd_info(const pb_cli_args *a);
int cmd_run(const pb_cli_args *a);
int cmd_report(const pb_cli_args *a);
int cmd_timeline(const pb_cli_args *a);
int cmd_flamegraph(const pb_cli_args *a);
int cmd_backtrace(const pb_cli_args *a);
int cmd_detach(const pb_cli_args *a);
int cmd_inject(const pb_cli_args *a);
int cmd_capture(const pb_cli_args *a);
int cmd_record(const pb_cli_args *a);
int cmd_exporter(const pb_cli_args *a);
int cmd_export(const pb_cli_args *a);
int cmd_ui(const pb_cli_args *a);
int cmd_ranks(const pb_cli_args *a);
int cmd_hang(const pb_cli_args *a);
int cmd_stragglers(const pb_cli_args *a);
int cmd_doctor(const pb_cli_args *a);
int cmd_compare(const pb_cli_args *a);
int cmd_mcp(const pb_cli_args *a);

/* Each command's options (option.h), defined beside it in cmd/cmd_<name>.c; detach has none. */
extern const pb_option pb_options_list[], pb_options_query[], pb_options_eval[],
    pb_options_tables[], pb_options_info[], pb_options_run[], pb_options_report[],
    pb_options_timeline[], pb_options_flamegraph[], pb_options_backtrace[], pb_options_inject[],
    pb_options_capture[], pb_options_record[], pb_options_exporter[], pb_options_export[],
    pb_options_ui[], pb_options_ranks[], pb_options_hang[], pb_options_stragglers[],
    pb_options_doctor[], pb_options_compare[], pb_options_mcp[];

#endif
