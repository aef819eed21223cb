/*
 * test_hang.c - the hang analysis (src/report/hang.c) on made-up answers of /api/rank and
 * /api/stack, without a job, read through its renderer (hang_render.c): which rank a job waits
 * for, a running job, a rank that did not answer, a stall outside collectives with an odd rank,
 * the flight recorder's numbers, names a job controls kept fit for a terminal, and the renderer
 * on a document written by hand.
 */
#include "check.h"
#include "hang.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one analysis gave: its text (pb_hang_render of its document), pb_hang_finish's return,
 * the document's summary, and the ranks whose stack pb_hang_study asked for (bit r for rank r). */
typedef struct run {
    char *text;
    int rc;
    json_t *summary;
    unsigned wanted;
} run;

static json_t *stack_json(const char *frames)
{
    json_t *list = json_array();
    char *copy = strdup(frames), *save = NULL;
    for (char *f = strtok_r(copy, ";", &save); f; f = strtok_r(NULL, ";", &save)) {
        char file[256], fn[256];
        int line = 0;
        if (sscanf(f, "%255[^:]:%d:%255s", file, &line, fn) == 3)
            json_array_append_new(list, json_pack("{s:s,s:i,s:s}", "file", file, "line", line,
                                                  "function", fn));
    }
    free(copy);
    return json_pack("{s:[{s:b,s:o}]}", "threads", "main", 1, "frames", list);
}

/* One analysis of n ranks (rank r on host node<r/2>, pid 100+r): answers[r] is rank r's
 * /api/rank answer as JSON text (NULL: it did not answer, why[r] says why, process[r] its
 * process state), stacks[r] its main thread's frames "file:line:function;...", innermost first,
 * given for the ranks the analysis wants and the ranks that did not answer. */
static run analyse(int n, const char **answers, const char **why, const char **process,
                   const char **stacks)
{
    run out = {0};
    pb_hang_rank *ranks = calloc((size_t)n, sizeof *ranks);
    char (*hosts)[32] = calloc((size_t)n, 32);
    size_t len = 0;
    for (int r = 0; r < n; r++) {
        snprintf(hosts[r], 32, "node%d", r / 2);
        ranks[r].host = hosts[r];
        ranks[r].pid = 100 + r;
        ranks[r].answer = answers[r] ? json_loads(answers[r], 0, NULL) : NULL;
        ranks[r].answered = ranks[r].answer != NULL;
        ranks[r].why = why ? why[r] : NULL;
        ranks[r].process = process ? process[r] : NULL;
    }
    pb_hang *h = pb_hang_study(ranks, n);
    CHECK(h != NULL, "pb_hang_study returns an analysis");
    if (!h) exit(1);
    for (int r = 0; r < n; r++) {
        if (ranks[r].want_stack) out.wanted |= 1u << r;
        if ((ranks[r].want_stack || !ranks[r].answered) && stacks && stacks[r])
            ranks[r].stack = stack_json(stacks[r]);
        else if (ranks[r].want_stack)
            ranks[r].stack_err = "its agent did not answer";
    }
    json_t *doc = NULL;
    out.rc = pb_hang_finish(h, &doc);
    CHECK(doc != NULL, "pb_hang_finish hands out a document");
    pb_hang_free(h);
    FILE *f = open_memstream(&out.text, &len);
    CHECK(pb_hang_render(f, doc) == 0, "pb_hang_render writes the document");
    fclose(f);
    out.summary = json_incref(json_object_get(doc, "summary"));
    json_decref(doc);
    for (int r = 0; r < n; r++) {
        json_decref(ranks[r].answer);
        json_decref(ranks[r].stack);
    }
    free(ranks);
    free(hosts);
    return out;
}

static void done(run *r)
{
    free(r->text);
    json_decref(r->summary);
}

static int has(const run *r, const char *s)
{
    int found = r->text && strstr(r->text, s) != NULL;
    if (!found) printf("       text was:\n%s", r->text ? r->text : "(null)");
    return found;
}

static void collective_hang(void)
{
    const char *answers[] = {
        "{\"step\": 7, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 482, \"op\": \"all_reduce\", "
        "\"bytes\": 64, \"state\": \"entered\", \"for_s\": 94.0}]}",
        "{\"step\": 7, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 482, \"op\": \"all_reduce\", "
        "\"bytes\": 64, \"state\": \"entered\", \"for_s\": 93.0}]}",
        "{\"step\": 7, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 482, \"op\": \"all_reduce\", "
        "\"bytes\": 64, \"state\": \"entered\", \"for_s\": 92.0}]}",
        "{\"step\": 7, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 481, \"op\": \"all_reduce\", "
        "\"bytes\": 64, \"state\": \"completed\", \"for_s\": 95.0}]}",
    };
    const char *stacks[] = {"/w/train.py:61:step;/w/train.py:120:main",
                            "/w/train.py:61:step;/w/train.py:120:main",
                            "/w/train.py:61:step;/w/train.py:120:main",
                            ("/usr/lib/python3.11/threading.py:320:wait;/w/train.py:88:load_batch;"
                             "/w/train.py:120:main")};
    run r = analyse(4, answers, NULL, NULL, stacks);
    CHECK(has(&r, "all ranks but 3 are in all_reduce #482 on group WORLD, waiting 94 s; rank 3 has "
                  "not entered it\n"),
          "a collective hang names the rank that has not entered the collective");
    CHECK(has(&r, "  rank 3: its last on WORLD is all_reduce #481 (completed)\n"),
          "and says where that rank's last collective was");
    CHECK(r.wanted == 0xf, "the stacks of the waiting ranks and of the late one are wanted");
    CHECK(has(&r, "rank 3 (node1, pid 103) is in train.py:88 load_batch\n"),
          "the late rank is where its own code is, not in the standard library it called");
    CHECK(has(&r, "waiting ranks 0-2 are in train.py:61 step\n      train.py:61 step\n"),
          "the waiting ranks are one entry for one stack");
    CHECK(r.rc == 0, "every rank answered: 0");
    CHECK(json_is_true(json_object_get(r.summary, "stalled")), "94 s in a collective is a stall");
    json_t *g = json_array_get(json_object_get(r.summary, "groups"), 0);
    CHECK_STR(json_string_value(json_object_get(g, "not_entered_ranks")), "3", "summary: not entered");
    CHECK_STR(json_string_value(json_object_get(g, "waiting_ranks")), "0-2", "summary: waiting");
    CHECK_STR(json_string_value(json_object_get(r.summary, "source")), "probing",
              "summary: probing's own counters");
    done(&r);
}

static void running_job(void)
{
    const char *answers[] = {
        "{\"step\": 9, \"step_median_s\": 0.05, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 90, "
        "\"op\": \"all_gather\", \"bytes\": 8, \"state\": \"entered\", \"for_s\": 0.004}]}",
        "{\"step\": 9, \"step_median_s\": 0.05, \"collectives\": [{\"group\": \"WORLD\", \"seq\": 89, "
        "\"op\": \"all_gather\", \"bytes\": 8, \"state\": \"completed\", \"for_s\": 0.01}]}",
    };
    run r = analyse(2, answers, NULL, NULL, NULL);
    CHECK(has(&r, "nothing is stuck: the job is running (2 of 2 ranks answered); the longest wait in "
                  "a collective is 4 ms (rank 0 in all_gather #90 on group WORLD)"),
          "ranks a few milliseconds apart are a running job");
    CHECK(r.wanted == 0 && !strchr(strchr(r.text, '\n') + 1, '\n'), "one line, no stacks");
    CHECK(!json_is_true(json_object_get(r.summary, "stalled")) &&
              json_object_get(r.summary, "longest_wait_s"),
          "summary: not stalled, with the longest wait");
    done(&r);
}

static void rank_did_not_answer(void)
{
    const char *answers[] = {
        "{\"collectives\": [{\"group\": \"WORLD\", \"seq\": 12, \"op\": \"broadcast\", \"bytes\": 4, "
        "\"state\": \"entered\", \"for_s\": 30.0}]}",
        NULL,
    };
    const char *why[] = {NULL, "connection refused"};
    const char *process[] = {NULL, "stopped (state T)"};
    const char *stacks[] = {"/w/a.py:1:f", "/w/b.py:7:g"};
    run r = analyse(2, answers, why, process, stacks);
    CHECK(has(&r, "rank 1 (node0, pid 101) did not answer: connection refused; the job waits for it; "
                  "its process is stopped (state T), in b.py:7 g\n      b.py:7 g\n"),
          "a rank that did not answer: why, its process state and its stack read from outside");
    CHECK(r.rc == 1, "some rank did not answer: 1");
    CHECK(json_integer_value(json_array_get(json_object_get(r.summary, "not_answered"), 0)) == 1,
          "summary: the rank that did not answer");
    done(&r);
}

static void stall_outside_collectives(void)
{
    const char *a = "{\"step\": 40, \"step_for_s\": 41.0, \"step_median_s\": 0.054}";
    const char *answers[] = {a, a, a};
    const char *stacks[] = {"/w/train.py:27:load_batch", "/w/train.py:27:load_batch",
                            "/w/train.py:33:wait_for_lock"};
    run r = analyse(3, answers, NULL, NULL, stacks);
    CHECK(has(&r, "the job is stalled outside collectives: no step finished on any rank for 41 s "
                  "while the median step is 0.054 s; no rank is in a collective (3 of 3 ranks "
                  "answered)\n"),
          "no step for 10 median steps and no collective: stalled outside collectives");
    CHECK(has(&r, "ranks 0-1 are in train.py:27 load_batch\n"), "the largest group first");
    CHECK(has(&r, "rank 2 (node1, pid 102) is the odd one: it is in train.py:33 wait_for_lock\n"),
          "the rank outside it is the odd one");
    CHECK_STR(json_string_value(json_object_get(r.summary, "odd_ranks")), "2", "summary: odd ranks");
    done(&r);
}

static void flight_recorder(void)
{
    const char *a0 = "{\"collectives\": [], \"flight_recorder\": {\"fresh\": true, \"groups\": [{\"pg\": "
                     "\"0\", \"last_enqueued\": 7, \"last_completed\": 6, \"op\": \"nccl:all_reduce\", "
                     "\"input_sizes\": [[4, 4]], \"input_dtypes\": [\"Float\"], \"for_s\": 60.0}]}}";
    const char *a1 = "{\"collectives\": [], \"flight_recorder\": {\"fresh\": true, \"groups\": [{\"pg\": "
                     "\"0\", \"last_enqueued\": 6, \"last_completed\": 6, \"op\": \"nccl:all_reduce\", "
                     "\"input_sizes\": [[4, 4]], \"input_dtypes\": [\"Float\"], \"for_s\": 61.0}]}}";
    const char *answers[] = {a0, a1};
    run r = analyse(2, answers, NULL, NULL, NULL);
    CHECK(has(&r, "all ranks but 1 are in all_reduce #7 on group WORLD, waiting 60 s; rank 1 has not "
                  "entered it\n"),
          "the flight recorder's numbers are compared when every rank sent a fresh reading");
    CHECK(has(&r, "source: PyTorch's flight recorder"), "and the screen says so");
    CHECK_STR(json_string_value(json_object_get(r.summary, "source")), "flight_recorder",
              "summary: source");
    done(&r);
}

static void names_fit_for_a_terminal(void)
{
    const char *answers[] = {
        "{\"collectives\": [{\"group\": \"WORLD\", \"seq\": 3, \"op\": \"all_reduce\", \"bytes\": 4, "
        "\"state\": \"entered\", \"for_s\": 20.0}]}",
        "{\"collectives\": [{\"group\": \"WORLD\", \"seq\": 2, \"op\": \"all_reduce\", \"bytes\": 4, "
        "\"state\": \"completed\", \"for_s\": 20.0}]}",
    };
    const char *stacks[] = {"/w/a.py:1:f", "/w/evil\x1b[2J.py:5:g"};
    run r = analyse(2, answers, NULL, NULL, stacks);
    CHECK(!strchr(r.text, '\x1b') && has(&r, "evil\\x1b[2J.py:5 g"),
          "a file name from a stack is escaped, not sent to the terminal");
    done(&r);
}

/* The renderer reads the document alone: a document written by hand prints as the analysis's
 * would. */
static void render_from_the_document(void)
{
    json_t *doc = json_loads("{\"summary\": {}, \"screen\": ["
                             "{\"what\": \"no_wait\", \"answered\": 1, \"ranks\": 2},"
                             "{\"what\": \"not_answered\", \"rank\": 1, \"host\": \"\", \"pid\": 0, "
                             "\"why\": \"refused\", \"job_waits\": false, \"where\": \"b.py:7 g\", "
                             "\"stack\": [{\"file\": \"b.py\", \"line\": 7, \"function\": \"g\"}]}]}",
                             0, NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = pb_hang_render(f, doc);
    fclose(f);
    CHECK(rc == 0, "pb_hang_render: 0");
    CHECK_STR(text, "no rank is waiting in a collective (1 of 2 ranks answered)\n"
                    "rank 1 (host unknown) did not answer: refused, in b.py:7 g\n      b.py:7 g\n",
              "a hand-made document renders: no pid, an unknown host, the stack under its line");
    free(text);
    json_decref(doc);
}

int main(void)
{
    collective_hang();
    running_job();
    rank_did_not_answer();
    stall_outside_collectives();
    flight_recorder();
    names_fit_for_a_terminal();
    render_from_the_document();
    return check_summary();
}
