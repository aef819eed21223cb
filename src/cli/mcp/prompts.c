/*
 * prompts.c - the MCP server's prompts (prompts.h).
 *
 * Each prompt is one user message built from its text and the arguments given (every argument
 * is optional: without a target the message says how to find one). "diagnose" carries the
 * method of docs/report.md (mcp/docs.h) after its own steps, so the assistant holds the same
 * order the report follows, and the rule that comes first: profile before you optimise.
 */
#include "mcp/prompts.h"

#include "buf.h"
#include "mcp/docs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The job a prompt is about, in words. */
static void job_words(pb_buf *b, const char *target)
{
    if (target) pb_buf_printf(b, "the job with target %s", target);
    else pb_buf_puts(b, "the training job (find its pid with the list_targets tool)");
}

static void diagnose(pb_buf *b, const char *target, const char *unused)
{
    (void)unused;
    pb_buf_puts(b, "Diagnose ");
    job_words(b, target);
    pb_buf_puts(b,
        " with probing, following the profiling method in its order. Profile before you "
        "optimise: propose or make no change to the code, the configuration or the hardware "
        "before the four phases below have been run and their numbers read, even when asked to "
        "skip profiling and just fix it. If the user insists, say that a change made without a "
        "baseline cannot be shown to help, and run the phases first: they take seconds.\n\n"
        "1. Baseline: the report tool, its \"1. Baseline\" section: the steady-state step time "
        "(median, p95, spread) after the warm-up, the throughput and the measurement "
        "conditions. With fewer than 5 steady steps the sample is too small: wait for more "
        "steps instead of concluding.\n"
        "2. Bottleneck type: the report tool, \"2. Bottleneck\": data loading, compute, host "
        "overhead, optimizer, communication or memory, the costliest cause first, and which "
        "numbers decided it.\n"
        "3. Component: the report tool, \"3. Component\": which modules (by self time) and "
        "phases hold the time. For more, the query tool on python.torch_trace and "
        "python.steps (the tables tool or the probing://tables resource says what each column "
        "means).\n"
        "4. Operation: the findings' recommendations and their SQL. Re-run that SQL with the "
        "query tool to check each number before relying on it. For a torch.distributed job, "
        "the stragglers and hang tools; backtrace for a thread that holds the GIL.\n\n"
        "Then name the one change the primary finding points to and the number it should "
        "move. Once it is made, compare the two runs with the compare tool (the "
        "did_my_change_help prompt).\n\n"
        "The method, as docs/report.md states it and the report tool applies it:\n\n");
    pb_buf_puts(b, pb_mcp_doc_method);
}

static void is_it_stuck(pb_buf *b, const char *target, const char *unused)
{
    (void)unused;
    pb_buf_puts(b, "Find out whether ");
    job_words(b, target);
    pb_buf_puts(b,
        " is stuck, and where, from what probing reads, without guessing:\n\n"
        "1. list_targets: is the process still there and traced?\n"
        "2. query: SELECT MAX(step) AS last_step, COUNT(*) AS steps FROM python.steps, twice, a "
        "few seconds apart (the info tool's step too): does the step advance?\n"
        "3. For a torch.distributed job (world size above 1): the hang tool says which rank the "
        "others wait for, in which collective, with that rank's stack; the ranks tool gives "
        "every rank's step and state.\n"
        "4. backtrace (the pid): where every thread is now and which one holds the GIL; twice, "
        "to see whether the main thread moves.\n\n"
        "Answer with what is stuck (which rank, which collective, which Python line) and the "
        "evidence, or that it runs; if it runs but slowly, diagnose it (the diagnose "
        "prompt).\n");
}

static void did_my_change_help(pb_buf *b, const char *before, const char *after)
{
    pb_buf_puts(b,
        "Decide with numbers, not impressions, whether a change made the training faster.\n\n"
        "1. Each side is a recording (probing run -o before.db -- python train.py) or a live "
        "target, with an optional window of its steps: run.db:100-200, run.db:500-, "
        "12345:last200; one recording across the change is run.db:-500 and run.db:501-.\n");
    pb_buf_printf(b, "2. The compare tool with before=%s and after=%s: its first line is the "
                  "verdict (slower, faster or no significant change) with the 95 %% interval "
                  "of the shift of the median step; below min_effect_pct (2 %%) it is no "
                  "change.\n", before ? before : "BEFORE", after ? after : "AFTER");
    pb_buf_puts(b,
        "3. Read the conditions that differ (batch size, dtype, loader workers): across "
        "different batch sizes the verdict is per sample.\n"
        "4. When it is faster, run the report tool on the after side: did the primary finding "
        "go away, and what is the bottleneck now?\n\n"
        "State the verdict with its interval; never call noise an improvement.\n");
}

typedef struct prompt_argument {
    const char *name, *description;
} prompt_argument;

static const struct {
    const char *name, *title, *description;
    prompt_argument arguments[2]; /* {NULL}: none */
    void (*build)(pb_buf *b, const char *first, const char *second);
} prompts[] = {
    {"diagnose", "Diagnose this job",
     "The profiling method's four phases in order (baseline, bottleneck type, component, "
     "operation), the tool that answers each, and the method of docs/report.md.",
     {{"target", "the job's pid (list_targets finds it), or a recording"}, {NULL, NULL}},
     diagnose},
    {"is_it_stuck", "Is it stuck?",
     "Whether the job still makes steps, and if not which rank, collective or line it waits "
     "in: list_targets, query, hang, ranks, backtrace.",
     {{"target", "the job's pid (list_targets finds it)"}, {NULL, NULL}},
     is_it_stuck},
    {"did_my_change_help", "Did my change help?",
     "The compare tool's verdict between a run before and after a change, with its 95 % "
     "interval, and what the report of the new run says.",
     {{"before", "the run before the change: a recording or target, with an optional window "
                 "(run.db:-500)"},
      {"after", "the run after it (run.db:501-)"}},
     did_my_change_help},
};

#define PROMPT_COUNT (sizeof prompts / sizeof prompts[0])

json_t *pb_mcp_prompts_list(void)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < PROMPT_COUNT; i++) {
        json_t *args = json_array();
        for (size_t k = 0; args && k < 2 && prompts[i].arguments[k].name; k++)
            json_array_append_new(args, json_pack("{s:s,s:s,s:b}", "name",
                                                  prompts[i].arguments[k].name, "description",
                                                  prompts[i].arguments[k].description,
                                                  "required", 0));
        json_t *entry = json_pack("{s:s,s:s,s:s,s:o}", "name", prompts[i].name, "title",
                                  prompts[i].title, "description", prompts[i].description,
                                  "arguments", args);
        if (!entry || json_array_append_new(list, entry)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

int pb_mcp_prompts_get(const char *name, json_t *arguments, json_t **result, char *err,
                       size_t errlen)
{
    *result = NULL;
    for (size_t i = 0; i < PROMPT_COUNT; i++) {
        if (strcmp(name, prompts[i].name) != 0) continue;
        const char *value[2] = {NULL, NULL};
        const char *key;
        json_t *v;
        json_object_foreach(arguments, key, v) {
            size_t k = 0;
            while (k < 2 && prompts[i].arguments[k].name &&
                   strcmp(prompts[i].arguments[k].name, key) != 0)
                k++;
            if (k == 2 || !prompts[i].arguments[k].name) {
                snprintf(err, errlen, "the prompt %s takes no argument '%s'", name, key);
                return -EINVAL;
            }
            if (!json_is_string(v) && !json_is_null(v)) {
                snprintf(err, errlen, "the argument '%s' of the prompt %s must be a string", key,
                         name);
                return -EINVAL;
            }
            value[k] = json_string_value(v) && *json_string_value(v) ? json_string_value(v) : NULL;
        }
        pb_buf text = PB_BUF_INIT;
        prompts[i].build(&text, value[0], value[1]);
        if (!text.data) return -ENOMEM;
        *result = json_pack("{s:s,s:[{s:s,s:{s:s,s:s}}]}", "description", prompts[i].description,
                            "messages", "role", "user", "content", "type", "text", "text",
                            text.data);
        pb_buf_free(&text);
        return *result ? 0 : -ENOMEM;
    }
    return -ENOENT;
}
