/*
 * hang.c - the hang analysis: which rank a job is waiting for, and where it is (hang.h).
 *
 * Pure analysis and its text: it reads the ranks' answers it is given and writes to a FILE, and
 * never opens a socket nor reads a process. The CLI (src/cli/client/hang_fetch.c) asks the ranks,
 * reads the stacks this analysis wants between its two halves (pb_hang_study, pb_hang_finish),
 * and is what `probing <target> hang` (cmd_hang.c) and the "Hang" section of `probing <target>
 * report` (cmd_report.c) call; neither calls the other.
 *
 * Every agent keeps, per process group, the sequence number of the last collective it entered
 * and whether it completed (src/agent/collect/job.h). The analysis asks every rank for that (GET
 * /api/rank) at once, and for each group compares: the ranks inside collective #N (entered, not
 * completed) wait for the ranks that have not entered #N yet. It writes one screen:
 *   all ranks but 3 are in all_reduce #482 on group WORLD, waiting 94 s; rank 3 has not entered it
 *   rank 3 (node-b, pid 4242) is in train.py:88 load_batch
 *       train.py:88 load_batch
 *       train.py:120 main
 *   waiting ranks 0-2: train.py:61 step  (one line per distinct stack)
 * Stacks are read from outside the interpreter (src/remote/pystack.h), so a rank holding the GIL
 * in a C call still shows where it is: by the CLI for ranks on this host (through their pid), by
 * the rank's own agent (GET /api/stack, the same reader on its own pid) for ranks on other hosts;
 * both arrive here in /api/stack's shape.
 * Ranks at the same sequence number with a different operation or size are named as a mismatch
 * ("mismatch at #N on group G: rank 0 all_reduce 64 bytes; rank 1 broadcast 64 bytes;").
 *
 * When no rank is inside a collective, the job may still be stalled: every rank in its data
 * pipeline, a deadlock in user code. That is judged from step progress (each rank's current step
 * against its median step, stall_check), never from wall time alone; then every rank's stack is
 * read, identical ones are grouped, and the ranks outside the largest group are named as the odd
 * ones (stall_stacks):
 *   the job is stalled outside collectives: no step finished on any rank for 41 s while the
 *   median step is 0.054 s; no rank is in a collective (3 of 3 ranks answered)
 *   ranks 0-1 are in train.py:27 load_batch      (the stack follows)
 *   rank 2 (node-a, pid 4242) is the odd one: it is in train.py:33 wait_for_lock
 *
 * A running job is not a hang: when every rank answered and no wait in a collective is as long
 * as a stall (stall_limit: 10 median steps, at least 5 s), the screen is one line, "nothing is
 * stuck: ...", with the longest wait; ranks a few milliseconds apart (FSDP's all-gathers) are
 * never named as what the job waits for. A rank that does not answer is named first; when it
 * runs on this host its process state (/proc, e.g. T for SIGSTOP) and its stack are read from
 * outside, and while other ranks wait in a collective it is the rank the job waits for. Stacks
 * are whole (every frame), so the user's own line under a framework's is there; a rank is said to
 * be in the innermost frame outside Python's standard library, and its stack is printed from
 * there (stack_text).
 *
 * When the job has PyTorch's flight recorder on (TORCH_FR_BUFFER_SIZE) and every rank that
 * answered sent a fresh reading of it in /api/rank (job_routes.c), the comparison runs on the
 * recorder's per-group last enqueued / last completed numbers instead (use_flight_recorder),
 * and the screen ends with a "source:" line saying so.
 */
#include "hang.h"

#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 32

/* Appends "0-2,5" for the ranks with flag set. */
static void rank_list(const unsigned char *flag, int n, char *out, size_t outlen)
{
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < n; r++) {
        if (!flag[r]) continue;
        int e = r;
        while (e + 1 < n && flag[e + 1]) e++;
        int w = e > r ? snprintf(out + len, outlen - len, "%s%d-%d", len ? "," : "", r, e)
                      : snprintf(out + len, outlen - len, "%s%d", len ? "," : "", r);
        if (w < 0 || (size_t)w >= outlen - len) break;
        len += (size_t)w;
        r = e;
    }
}

static int count(const unsigned char *flag, int n)
{
    int c = 0;
    for (int r = 0; r < n; r++) c += flag[r] != 0;
    return c;
}

/* The collective record of group in a rank's answer, or NULL. */
static json_t *group_of(json_t *answer, const char *group)
{
    json_t *colls = json_object_get(answer, "collectives"), *c;
    size_t i;
    json_array_foreach(colls, i, c) {
        const char *g = json_string_value(json_object_get(c, "group"));
        if (g && strcmp(g, group) == 0) return c;
    }
    return NULL;
}

/* The main thread's stack as text lines ("file:line function"), innermost first, into a
 * malloc'ed string. top is where the rank is: the innermost frame outside Python's standard
 * library (a rank waiting in threading.py's wait() or caught inside os.path.exists is where its
 * own code called them; the whole stack still follows), the innermost frame when every frame is
 * the standard library's. key is the same stack from that frame down: what ranks are grouped by,
 * so two ranks in the same line of user code are one entry whichever stdlib call a snapshot
 * caught them in. NULL text when unknown (why in err). */
typedef struct stack_text {
    char top[512];
    char *text;
    size_t key; /* offset in text of the frame named by top */
    int found;  /* top names a frame outside the standard library */
} stack_text;

#define STACK_KEY(st) ((st).text + (st).key)

/* A frame of Python's standard library: frozen modules, and files under lib/pythonX.Y/ that are
 * not installed packages (site-packages, dist-packages). Torch, Lightning and the user's code
 * are not: where a job waits inside them is worth telling apart. */
static int stdlib_frame(const char *path)
{
    if (!path) return 0;
    if (strncmp(path, "<frozen ", 8) == 0) return 1;
    if (strstr(path, "/site-packages/") || strstr(path, "/dist-packages/")) return 0;
    const char *lib = strstr(path, "/lib/python");
    return lib && (lib[11] >= '0' && lib[11] <= '9');
}

static void short_file(const char *file, char *out, size_t outlen)
{
    const char *slash = strrchr(file, '/');
    snprintf(out, outlen, "%s", slash ? slash + 1 : file);
}

/* Appends one frame line ("      file:line function") to st->text, grown as needed; the first
 * frame is also st->top. Returns -1 out of memory. */
static int add_frame(stack_text *st, size_t *cap, size_t *len, const char *path, int line,
                     const char *fn)
{
    char raw[256], file[256], fn_clean[256];
    short_file(path ? path : "?", raw, sizeof raw);
    pb_buf_sanitize_into(file, sizeof file, raw); /* the job controls both: fit for a terminal */
    pb_buf_sanitize_into(fn_clean, sizeof fn_clean, fn ? fn : "?");
    fn = fn_clean;
    if (*len == 0 || (!st->found && !stdlib_frame(path))) {
        snprintf(st->top, sizeof st->top, "%.240s:%d %.240s", file, line, fn);
        st->key = *len;
        st->found = !stdlib_frame(path);
    }
    for (;;) {
        int w = snprintf(st->text + *len, *cap - *len, "      %s:%d %s\n", file, line, fn);
        if (w < 0) return -1;
        if ((size_t)w < *cap - *len) {
            *len += (size_t)w;
            return 0;
        }
        char *bigger = realloc(st->text, *cap * 2);
        if (!bigger) return -1;
        st->text = bigger;
        *cap *= 2;
    }
}

/* A stack in /api/stack's shape ({"threads": [{"main", "frames": [{"file", "line",
 * "function"}]}]} or {"error"}) as text: every frame of the main thread, since the user's own
 * line sits under the framework's (FSDP, a Lightning loop), so the stack is never cut. */
static int stack_from_answer(json_t *ans, stack_text *st, char *err, size_t errlen)
{
    const char *e = json_string_value(json_object_get(ans, "error"));
    json_t *threads = json_object_get(ans, "threads"), *t, *main_thread = NULL;
    size_t i;
    if (e) {
        snprintf(err, errlen, "%s", e);
        return -1;
    }
    json_array_foreach(threads, i, t) {
        if (json_is_true(json_object_get(t, "main"))) main_thread = t;
    }
    if (!main_thread) main_thread = json_array_get(threads, 0);
    if (!main_thread) {
        snprintf(err, errlen, "its agent sent no stack");
        return -1;
    }
    size_t cap = 4096, len = 0;
    st->text = calloc(1, cap);
    json_t *frames = json_object_get(main_thread, "frames"), *f;
    json_array_foreach(frames, i, f) {
        if (!st->text || add_frame(st, &cap, &len, json_string_value(json_object_get(f, "file")),
                                   (int)json_integer_value(json_object_get(f, "line")),
                                   json_string_value(json_object_get(f, "function"))))
            break;
    }
    return 0;
}

/* Bytes of one element of a flight recorder dtype name ("Float", "BFloat16", ...); 0 unknown. */
static long long dtype_bytes(const char *t)
{
    static const struct { const char *name; int size; } sizes[] = {
        {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Int", 4}, {"Long", 8}, {"Short", 2},
        {"Char", 1}, {"Byte", 1}, {"Bool", 1}, {"ComplexFloat", 8}, {"ComplexDouble", 16},
        {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}, {"UInt16", 2}, {"UInt32", 4}, {"UInt64", 8},
    };
    for (size_t i = 0; t && i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(t, sizes[i].name) == 0) return sizes[i].size;
    return 0;
}

/* One group of a rank's flight recorder reading (flight_recorder.c) as the collective record of
 * our own counters ({"group", "seq", "op", "bytes", "state", "for_s"}), or NULL to leave out. */
static json_t *fr_record(json_t *g)
{
    long long seq = (long long)json_integer_value(json_object_get(g, "last_enqueued"));
    long long done = (long long)json_integer_value(json_object_get(g, "last_completed"));
    if (seq <= 0) return NULL;
    /* Named by the recorder's pg_id, which every rank has (the name is in the entries only):
     * pg 0 is the default group, WORLD as in probing's own counters. */
    const char *pg = json_string_value(json_object_get(g, "pg"));
    char group[128];
    if (pg && strcmp(pg, "0") == 0) snprintf(group, sizeof group, "WORLD");
    else snprintf(group, sizeof group, "pg %s", pg ? pg : "?");
    const char *op = json_string_value(json_object_get(g, "op"));
    const char *colon = op ? strchr(op, ':') : NULL;
    long long bytes = 0;
    json_t *sizes = json_object_get(g, "input_sizes"), *dtypes = json_object_get(g, "input_dtypes"), *shape, *d;
    size_t i, k;
    json_array_foreach(sizes, i, shape) {
        long long elems = 1, each = dtype_bytes(json_string_value(json_array_get(dtypes, i)));
        json_array_foreach(shape, k, d) elems *= (long long)json_integer_value(d);
        if (!each) {
            bytes = -1;
            break;
        }
        bytes += elems * each;
    }
    if (!json_is_array(sizes)) bytes = -1;
    return json_pack("{s:s,s:I,s:s,s:I,s:s,s:f}", "group", group, "seq", (json_int_t)seq, "op",
                     colon ? colon + 1 : (op ? op : "?"), "bytes", (json_int_t)bytes, "state",
                     done >= seq ? "completed" : "entered", "for_s",
                     json_number_value(json_object_get(g, "for_s")));
}

/* When every rank that answered sent a fresh flight recorder reading, replaces each answer's
 * "collectives" by the records made from it and returns 1: the analysis then runs on PyTorch's
 * own sequence numbers (which count every collective of the process group, DDP's too).
 * Else leaves the answers alone and returns 0. */
static int use_flight_recorder(pb_hang_rank *ranks, const unsigned char *answered, int n)
{
    int any = 0;
    for (int r = 0; r < n; r++) {
        if (!answered[r]) continue;
        json_t *fr = json_object_get(ranks[r].answer, "flight_recorder");
        if (!json_is_true(json_object_get(fr, "fresh")) || !json_array_size(json_object_get(fr, "groups")))
            return 0;
        any = 1;
    }
    for (int r = 0; any && r < n; r++) {
        if (!answered[r]) continue;
        json_t *list = json_array(), *g;
        size_t i;
        json_array_foreach(json_object_get(json_object_get(ranks[r].answer, "flight_recorder"), "groups"), i, g) {
            json_t *c = fr_record(g);
            if (c) json_array_append_new(list, c);
        }
        json_object_set_new(ranks[r].answer, "collectives", list ? list : json_array());
    }
    return any;
}

/* A stall with no rank inside a collective: judged from step progress, never from wall time
 * alone. The job is stalled when every rank that answered has finished at least one step and its
 * current step has run for more than STALL_FACTOR times its median step (the last 31 steps) and
 * more than STALL_MIN_S: a job that still finishes steps on any rank, or whose steps are merely
 * slow and steady, is never called stalled. A rank that has not finished a step yet (no median)
 * leaves the job unjudged. */
#define STALL_FACTOR 10.0
#define STALL_MIN_S 5.0

typedef struct stall {
    double no_step_for_s; /* the shortest time since a step finished, over the ranks */
    double median_s;      /* the median over the ranks of their median step */
} stall;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* How long a wait in a collective (or a step) may last before the job is called stalled: 10 times
 * the median over the ranks of their median step, at least 5 s (5 s when no rank has finished
 * a step yet). */
static double stall_limit(const pb_hang_rank *ranks, const unsigned char *answered, int n)
{
    double *medians = calloc((size_t)(n > 0 ? n : 1), sizeof *medians), m_s = 0;
    int m = 0;
    for (int r = 0; medians && r < n; r++) {
        json_t *md = answered[r] ? json_object_get(ranks[r].answer, "step_median_s") : NULL;
        if (json_is_number(md)) medians[m++] = json_number_value(md);
    }
    if (m) {
        qsort(medians, (size_t)m, sizeof *medians, cmp_double);
        m_s = m % 2 ? medians[m / 2] : (medians[m / 2 - 1] + medians[m / 2]) / 2;
    }
    free(medians);
    return STALL_FACTOR * m_s > STALL_MIN_S ? STALL_FACTOR * m_s : STALL_MIN_S;
}

static int stall_check(const pb_hang_rank *ranks, const unsigned char *answered, int n, stall *st)
{
    double *medians = calloc((size_t)n, sizeof *medians);
    int m = 0, stalled = medians != NULL;
    st->no_step_for_s = -1;
    st->median_s = 0;
    for (int r = 0; stalled && r < n; r++) {
        if (!answered[r]) continue;
        json_t *f = json_object_get(ranks[r].answer, "step_for_s"), *md = json_object_get(ranks[r].answer, "step_median_s");
        if (!json_is_number(f) || !json_is_number(md)) {
            stalled = 0;
            break;
        }
        double for_s = json_number_value(f), median = json_number_value(md);
        double limit = STALL_FACTOR * median > STALL_MIN_S ? STALL_FACTOR * median : STALL_MIN_S;
        if (for_s <= limit) stalled = 0;
        if (st->no_step_for_s < 0 || for_s < st->no_step_for_s) st->no_step_for_s = for_s;
        medians[m++] = median;
    }
    if (stalled && m) {
        qsort(medians, (size_t)m, sizeof *medians, cmp_double);
        st->median_s = m % 2 ? medians[m / 2] : (medians[m / 2 - 1] + medians[m / 2]) / 2;
    }
    free(medians);
    return stalled && m > 0;
}

/* The stacks of a job stalled outside collectives: ranks with identical stacks are one entry
 * with their rank list, the largest group first; when one group holds more ranks than any other,
 * the ranks outside it are the odd ones and are named so (in summary's "odd_ranks" too). */
static void stall_stacks(const pb_hang_rank *ranks, stack_text *stacks, char (*stack_err)[512],
                         const unsigned char *need_stack, int n, FILE *out, json_t *sum)
{
    int *group = malloc((size_t)n * sizeof *group), *size = calloc((size_t)n, sizeof *size);
    unsigned char *flag = calloc((size_t)n, 1), *odd = calloc((size_t)n, 1);
    if (!group || !size || !flag || !odd) goto out;
    int ngroups = 0;
    for (int r = 0; r < n; r++) {
        group[r] = -1;
        if (!need_stack[r] || !stacks[r].text) continue;
        for (int q = 0; q < r && group[r] < 0; q++)
            if (group[q] >= 0 && strcmp(STACK_KEY(stacks[q]), STACK_KEY(stacks[r])) == 0) group[r] = group[q];
        if (group[r] < 0) group[r] = ngroups++;
        size[group[r]]++;
    }
    int big = -1, tie = 0;
    for (int g = 0; g < ngroups; g++) {
        if (big < 0 || size[g] > size[big]) {
            big = g;
            tie = 0;
        } else if (size[g] == size[big]) {
            tie = 1;
        }
    }
    int majority = big >= 0 && !tie && ngroups > 1;
    long long step0 = -1;
    int same_step = 1;
    for (int r = 0; r < n; r++) {
        if (!need_stack[r]) continue;
        long long s = (long long)json_integer_value(json_object_get(ranks[r].answer, "step"));
        if (step0 < 0) step0 = s;
        else same_step &= s == step0;
    }
    /* Largest group first, then the others in the order of their first rank. */
    for (int pass = 0; pass < 2; pass++) {
        for (int g = 0; g < ngroups; g++) {
            if ((pass == 0) != (g == big)) continue;
            int first = -1;
            memset(flag, 0, (size_t)n);
            for (int r = 0; r < n; r++)
                if (group[r] == g) {
                    flag[r] = 1;
                    if (first < 0) first = r;
                    if (majority && g != big) odd[r] = 1;
                }
            char list[4096], steps[64] = "";
            rank_list(flag, n, list, sizeof list);
            int many = size[g] > 1;
            if (!same_step)
                snprintf(steps, sizeof steps, " (step %lld)",
                         (long long)json_integer_value(json_object_get(ranks[first].answer, "step")));
            if (ngroups == 1 && many)
                fprintf(out, "all ranks%s are in %s\n%s", steps, stacks[first].top, STACK_KEY(stacks[first]));
            else if (majority && g != big && !many)
                fprintf(out, "rank %d (%s, pid %d)%s is the odd one: it is in %s\n%s", first, ranks[first].host,
                        ranks[first].pid, steps, stacks[first].top, STACK_KEY(stacks[first]));
            else if (majority && g != big)
                fprintf(out, "ranks %s%s are odd ones: they are in %s\n%s", list, steps, stacks[first].top,
                        STACK_KEY(stacks[first]));
            else
                fprintf(out, "rank%s %s%s %s in %s\n%s", many ? "s" : "", list, steps, many ? "are" : "is",
                        stacks[first].top, STACK_KEY(stacks[first]));
        }
    }
    for (int r = 0; r < n; r++)
        if (need_stack[r] && !stacks[r].text)
            fprintf(out, "rank %d (%s, pid %d): no stack: %s\n", r, ranks[r].host, ranks[r].pid, stack_err[r]);
    if (sum) {
        char list[4096];
        rank_list(odd, n, list, sizeof list);
        json_object_set_new(sum, "odd_ranks", json_string(list));
    }
out:
    free(group);
    free(size);
    free(flag);
    free(odd);
}

struct pb_hang {
    pb_hang_rank *ranks; /* borrowed */
    int n;
    json_t *sum;         /* the summary being made; NULL when none is wanted */
    unsigned char *answered, *waiting, *behind, *need_stack, *done;
    int from_fr, any_hang, running, stalled_outside;
};

void pb_hang_free(pb_hang *h)
{
    if (!h) return;
    json_decref(h->sum);
    free(h->answered);
    free(h->waiting);
    free(h->behind);
    free(h->need_stack);
    free(h->done);
    free(h);
}

pb_hang *pb_hang_study(pb_hang_rank *ranks, int n, int want_summary, FILE *out)
{
    pb_hang *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ranks = ranks;
    h->n = n;
    size_t size = (size_t)(n > 0 ? n : 1);
    h->sum = want_summary ? json_pack("{s:b,s:[],s:[]}", "stalled", 0, "groups", "not_answered") : NULL;
    h->answered = calloc(size, 1);
    h->waiting = calloc(size, 1);
    h->behind = calloc(size, 1);
    h->need_stack = calloc(size, 1);
    h->done = calloc(size, 1);
    if (!h->answered || !h->waiting || !h->behind || !h->need_stack || !h->done ||
        (want_summary && !h->sum)) {
        pb_hang_free(h);
        return NULL;
    }
    unsigned char *answered = h->answered, *waiting = h->waiting, *behind = h->behind,
                  *need_stack = h->need_stack, *done = h->done;
    json_t *sum = h->sum;
    for (int r = 0; r < n; r++) answered[r] = ranks[r].answered && ranks[r].answer;
    int from_fr = h->from_fr = use_flight_recorder(ranks, answered, n);
    if (sum) json_object_set_new(sum, "source", json_string(from_fr ? "flight_recorder" : "probing"));

    /* The groups any rank knows. */
    const char *groups[MAX_GROUPS];
    int ngroups = 0;
    for (int r = 0; r < n; r++) {
        if (!answered[r]) continue;
        json_t *c;
        size_t i;
        json_array_foreach(json_object_get(h->ranks[r].answer, "collectives"), i, c) {
            const char *g = json_string_value(json_object_get(c, "group"));
            int known = 0;
            for (int k = 0; g && k < ngroups; k++) known |= strcmp(groups[k], g) == 0;
            if (g && !known && ngroups < MAX_GROUPS) groups[ngroups++] = g;
        }
    }

    double wait_limit = stall_limit(h->ranks, answered, n);
    /* A running job: every rank answered and no wait in a collective is as long as a stall
     * (wait_limit). Ranks a few milliseconds apart are in and out of collectives all the time
     * (FSDP's all-gathers); a rank that has not entered one yet is then not what anyone waits
     * for. */
    double longest_all = -1;
    int longest_rank = -1;
    json_t *longest_c = NULL;
    for (int r = 0; r < n; r++) {
        json_t *c;
        size_t i;
        json_array_foreach(answered[r] ? json_object_get(h->ranks[r].answer, "collectives") : NULL, i, c) {
            const char *state = json_string_value(json_object_get(c, "state"));
            double f = json_number_value(json_object_get(c, "for_s"));
            if (state && strcmp(state, "entered") == 0 && f > longest_all) {
                longest_all = f;
                longest_rank = r;
                longest_c = c;
            }
        }
    }
    int running = h->running = count(answered, n) == n && longest_rank >= 0 && longest_all <= wait_limit;
    if (running) {
        char wait[64];
        if (longest_all < 1) snprintf(wait, sizeof wait, "%.0f ms", longest_all * 1e3);
        else snprintf(wait, sizeof wait, "%.1f s", longest_all);
        fprintf(out, "nothing is stuck: the job is running (%d of %d ranks answered); the longest "
                     "wait in a collective is %s (rank %d in %s #%lld on group %s), under the "
                     "%.3g s that makes a stall (10 times the median step, at least 5 s)\n",
                count(answered, n), n, wait, longest_rank,
                json_string_value(json_object_get(longest_c, "op")) ?: "?",
                (long long)json_integer_value(json_object_get(longest_c, "seq")),
                json_string_value(json_object_get(longest_c, "group")) ?: "?", wait_limit);
        if (sum) json_object_set_new(sum, "longest_wait_s", json_real(longest_all));
    }
    for (int k = 0; !running && k < ngroups; k++) {
        long long max_seq = 0;
        for (int r = 0; r < n; r++) {
            json_t *c = answered[r] ? group_of(h->ranks[r].answer, groups[k]) : NULL;
            long long s = c ? json_integer_value(json_object_get(c, "seq")) : 0;
            if (s > max_seq) max_seq = s;
        }
        memset(waiting, 0, (size_t)(unsigned)n);
        memset(behind, 0, (size_t)(unsigned)n);
        memset(done, 0, (size_t)(unsigned)n);
        const char *op = NULL;
        long long bytes = -1;
        double longest = 0;
        int mismatch = 0;
        for (int r = 0; r < n; r++) {
            if (!answered[r]) continue;
            json_t *c = group_of(h->ranks[r].answer, groups[k]);
            long long s = c ? json_integer_value(json_object_get(c, "seq")) : 0;
            const char *state = c ? json_string_value(json_object_get(c, "state")) : NULL;
            if (s < max_seq) {
                behind[r] = 1;
                continue;
            }
            const char *o = json_string_value(json_object_get(c, "op"));
            long long b = json_integer_value(json_object_get(c, "bytes"));
            int known = !o || strcmp(o, "?") != 0; /* "?": a flight recorder without the entry */
            if (known && !op) {
                op = o;
                bytes = b;
            } else if (known && ((o && strcmp(o, op) != 0) || b != bytes)) {
                mismatch = 1;
            }
            if (state && strcmp(state, "entered") == 0) {
                waiting[r] = 1;
                double f = json_number_value(json_object_get(c, "for_s"));
                if (f > longest) longest = f;
            } else {
                done[r] = 1;
            }
        }
        if (!count(waiting, n)) continue;
        h->any_hang = 1;
        char wl[4096], bl[4096];
        rank_list(waiting, n, wl, sizeof wl);
        rank_list(behind, n, bl, sizeof bl);
        if (sum) {
            /* Stalled for report: a wait longer than a healthy step explains (stall_limit). */
            if (longest > wait_limit) json_object_set_new(sum, "stalled", json_true());
            json_array_append_new(json_object_get(sum, "groups"),
                                  json_pack("{s:s,s:s,s:I,s:f,s:s,s:s,s:b}", "group", groups[k],
                                            "op", op ? op : "?", "seq", (json_int_t)max_seq,
                                            "waiting_s", longest, "waiting_ranks", wl,
                                            "not_entered_ranks", bl, "mismatch", mismatch));
        }
        int nb = count(behind, n);
        int nmissing = 0;
        for (int r = 0; r < n; r++) nmissing += !answered[r];
        if (nb && count(waiting, n) + nb + count(done, n) == n)
            fprintf(out, "all ranks but %s are in %s #%lld on group %s, waiting %.0f s; rank%s %s %s not "
                   "entered it\n", bl, op ? op : "?", max_seq, groups[k], longest, nb > 1 ? "s" : "",
                   bl, nb > 1 ? "have" : "has");
        else
            fprintf(out, "rank%s %s %s in %s #%lld on group %s, waiting %.0f s%s%s%s\n",
                   count(waiting, n) > 1 ? "s" : "", wl, count(waiting, n) > 1 ? "are" : "is", op ? op : "?",
                   max_seq, groups[k], longest, nb ? "; not entered: " : "", nb ? bl : "",
                   nmissing ? "; some ranks did not answer (below)" : "");
        for (int r = 0; r < n; r++) {
            if (!behind[r]) continue;
            json_t *c = group_of(h->ranks[r].answer, groups[k]);
            need_stack[r] = 1;
            const char *lop = c ? json_string_value(json_object_get(c, "op")) : NULL;
            if (c)
                fprintf(out, "  rank %d: its last on %s is %s%s#%lld (%s)\n", r, groups[k],
                       lop && strcmp(lop, "?") != 0 ? lop : "", lop && strcmp(lop, "?") != 0 ? " " : "",
                       (long long)json_integer_value(json_object_get(c, "seq")),
                       json_string_value(json_object_get(c, "state")) ?: "?");
            else
                fprintf(out, "  rank %d: has made no collective call on %s yet\n", r, groups[k]);
        }
        if (mismatch) {
            fprintf(out, "mismatch at #%lld on group %s:", max_seq, groups[k]);
            for (int r = 0; r < n; r++) {
                if (!waiting[r] && !done[r]) continue;
                json_t *c = group_of(h->ranks[r].answer, groups[k]);
                fprintf(out, " rank %d %s %lld bytes;", r, json_string_value(json_object_get(c, "op")) ?: "?",
                       (long long)json_integer_value(json_object_get(c, "bytes")));
            }
            fprintf(out, "\n");
        }
        for (int r = 0; r < n; r++) need_stack[r] |= waiting[r];
    }
    if (!h->any_hang && !running) {
        int na = count(answered, n);
        stall st;
        if (stall_check(h->ranks, answered, n, &st)) {
            h->stalled_outside = 1;
            fprintf(out, "the job is stalled outside collectives: no step finished on any rank for %.0f s "
                         "while the median step is %.3g s; no rank is in a collective (%d of %d ranks "
                         "answered)\n", st.no_step_for_s, st.median_s, na, n);
            for (int r = 0; r < n; r++) need_stack[r] = answered[r];
            if (sum) {
                json_object_set_new(sum, "stalled", json_true());
                json_object_set_new(sum, "no_step_for_s", json_real(st.no_step_for_s));
                json_object_set_new(sum, "median_step_s", json_real(st.median_s));
            }
        } else {
            fprintf(out, "no rank is waiting in a collective (%d of %d ranks answered)\n", na, n);
        }
    }

    for (int r = 0; r < n; r++) ranks[r].want_stack = need_stack[r];
    return h;
}

int pb_hang_finish(pb_hang *h, FILE *out, json_t **summary)
{
    int rc = 0, n = h->n;
    unsigned char *answered = h->answered, *waiting = h->waiting, *need_stack = h->need_stack;
    json_t *sum = h->sum;
    if (summary) *summary = NULL;
    stack_text *stacks = calloc((size_t)(n > 0 ? n : 1), sizeof *stacks);
    char (*stack_err)[512] = calloc((size_t)(n > 0 ? n : 1), sizeof *stack_err);
    if (!stacks || !stack_err) {
        rc = -1;
        goto finish;
    }
    for (int r = 0; r < n; r++) {
        if (!need_stack[r]) continue;
        if (h->ranks[r].stack)
            stack_from_answer(h->ranks[r].stack, &stacks[r], stack_err[r], sizeof stack_err[r]);
        else
            snprintf(stack_err[r], sizeof stack_err[r], "%s", h->ranks[r].stack_err ? h->ranks[r].stack_err : "");
    }
    /* The ranks that did not answer: on this host, their process state and stack were read from
     * outside (a stopped process cannot answer, but its memory can be read); while other ranks
     * wait in a collective, such a rank is the one the job waits for. */
    for (int r = 0; r < n; r++) {
        if (answered[r]) continue;
        const pb_hang_rank *k = &h->ranks[r];
        stack_text lost = {.top = "", .text = NULL};
        char lost_err[512] = "";
        if (k->stack) stack_from_answer(k->stack, &lost, lost_err, sizeof lost_err);
        else if (k->stack_err) snprintf(lost_err, sizeof lost_err, "%s", k->stack_err);
        char pid_text[32] = "";
        if (k->pid) snprintf(pid_text, sizeof pid_text, ", pid %d", k->pid);
        fprintf(out, "rank %d (%s%s) did not answer: %s", r, k->host && k->host[0] ? k->host : "host unknown",
                pid_text, k->why ? k->why : "?");
        if (h->any_hang) fprintf(out, "; the job waits for it");
        if (k->process) fprintf(out, "; its process is %s", k->process);
        if (lost.text && lost.top[0]) fprintf(out, ", in %s\n%s", lost.top, STACK_KEY(lost));
        else if (lost_err[0]) fprintf(out, "; no stack: %s\n", lost_err);
        else fprintf(out, "\n");
        free(lost.text);
        if (sum) json_array_append_new(json_object_get(sum, "not_answered"), json_integer(r));
        rc = 1;
    }
    if (h->stalled_outside) stall_stacks(h->ranks, stacks, stack_err, need_stack, n, out, sum);
    /* The odd ranks, each with its stack. */
    for (int r = 0; r < n; r++) {
        if (h->stalled_outside || !need_stack[r] || waiting[r]) continue;
        if (stacks[r].text)
            fprintf(out, "rank %d (%s, pid %d) is in %s\n%s", r, h->ranks[r].host, h->ranks[r].pid, stacks[r].top, STACK_KEY(stacks[r]));
        else
            fprintf(out, "rank %d (%s, pid %d): no stack: %s\n", r, h->ranks[r].host, h->ranks[r].pid, stack_err[r]);
    }
    /* The waiting ranks, grouped by where they wait. */
    for (int r = 0; r < n; r++) {
        if (!waiting[r] || !stacks[r].text) continue;
        unsigned char *same = calloc((size_t)n, 1);
        if (!same) break;
        for (int q = r; q < n; q++)
            if (waiting[q] && stacks[q].text && strcmp(STACK_KEY(stacks[q]), STACK_KEY(stacks[r])) == 0) {
                same[q] = 1;
                if (q != r) waiting[q] = 0;
            }
        char list[4096];
        rank_list(same, n, list, sizeof list);
        fprintf(out, "waiting rank%s %s %s in %s\n%s", count(same, n) > 1 ? "s" : "", list,
               count(same, n) > 1 ? "are" : "is", stacks[r].top, STACK_KEY(stacks[r]));
        free(same);
    }
    if (h->from_fr)
        fprintf(out, "source: PyTorch's flight recorder (TORCH_FR_BUFFER_SIZE): each process group's "
                     "last enqueued and last completed collective\n");
    if (summary) {
        *summary = sum;
        h->sum = NULL;
    }
finish:
    for (int r = 0; stacks && r < n; r++) free(stacks[r].text);
    free(stacks);
    free(stack_err);
    return rc;
}
