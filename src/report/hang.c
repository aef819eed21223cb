/*
 * hang.c - the hang analysis: which rank a job is waiting for, and where it is (hang.h).
 *
 * Pure analysis: it reads the ranks' answers it is given and builds one document (hang.h) of
 * everything the screen shows plus the summary `report` keeps, and never opens a socket nor
 * reads a process nor writes text (hang_render.c does, from the document alone). The CLI
 * (src/cli/client/hang_fetch.c) asks the ranks, reads the stacks this analysis wants between its
 * two halves (pb_hang_study, pb_hang_finish), and is what `probing <target> hang` (cmd_hang.c)
 * and the "Hang" section of `probing <target> report` (cmd_report.c) call; neither calls the
 * other.
 *
 * Every agent keeps, per process group, the sequence number of the last collective it entered
 * and whether it completed (src/agent/collect/job.h). The analysis asks every rank for that (GET
 * /api/rank) at once, and for each group compares: the ranks inside collective #N (entered, not
 * completed) wait for the ranks that have not entered #N yet. Its document renders as one screen:
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

/* The main thread's stack: its frames as text lines ("file:line function"), innermost first, in
 * a malloc'ed string, and the same frames as {"file", "line", "function"} objects for the
 * document. top is where the rank is: the innermost frame outside Python's standard library (a
 * rank waiting in threading.py's wait() or caught inside os.path.exists is where its own code
 * called them; the whole stack still follows), the innermost frame when every frame is the
 * standard library's. key is the same stack from that frame down: what ranks are grouped by, so
 * two ranks in the same line of user code are one entry whichever stdlib call a snapshot caught
 * them in. NULL text when unknown (why in err). */
typedef struct stack_text {
    char top[512];
    char *text;
    size_t key;       /* offset in text of the frame named by top */
    json_t *frames;   /* every frame read, as objects (owned) */
    size_t key_frame; /* index in frames of the frame named by top */
    int found;        /* top names a frame outside the standard library */
    int oom;          /* a frame could not be kept */
} stack_text;

#define STACK_KEY(st) ((st).text + (st).key)

static void stack_text_free(stack_text *st)
{
    free(st->text);
    json_decref(st->frames);
}

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

/* Appends one frame to st: a line ("      file:line function") to st->text, grown as needed,
 * and an object to st->frames; the first frame is also st->top. Returns -1 out of memory. */
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
        st->key_frame = json_array_size(st->frames);
        st->found = !stdlib_frame(path);
    }
    for (;;) {
        int w = snprintf(st->text + *len, *cap - *len, "      %s:%d %s\n", file, line, fn);
        if (w < 0) return -1;
        if ((size_t)w < *cap - *len) {
            *len += (size_t)w;
            break;
        }
        char *bigger = realloc(st->text, *cap * 2);
        if (!bigger) return -1;
        st->text = bigger;
        *cap *= 2;
    }
    json_t *frame = json_object();
    int bad = !frame || json_object_set_new(frame, "file", json_string_nocheck(file)) ||
              json_object_set_new(frame, "line", json_integer(line)) ||
              json_object_set_new(frame, "function", json_string_nocheck(fn));
    if (bad) json_decref(frame);
    if (bad || json_array_append_new(st->frames, frame)) st->oom = 1;
    return 0;
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
    st->frames = json_array();
    if (!st->frames) st->oom = 1;
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
    double *medians = calloc((size_t)(n > 0 ? n : 1), sizeof *medians);
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

struct pb_hang {
    pb_hang_rank *ranks; /* borrowed */
    int n;
    json_t *doc;         /* the document being made (hang.h): {"summary", "screen"} */
    json_t *sum;         /* its "summary" (borrowed from doc) */
    json_t *screen;      /* its "screen" (borrowed from doc) */
    int oom;             /* some part of the document could not be made */
    unsigned char *answered, *waiting, *behind, *need_stack, *done;
    int from_fr, any_hang, running, stalled_outside;
};

/* The document's builders: each marks h->oom instead of failing, and the analysis checks it
 * once, in pb_hang_finish. */

/* A new entry of the screen, {"what": what}, appended to it: borrowed, NULL out of memory. */
static json_t *entry(pb_hang *h, const char *what)
{
    json_t *e = json_pack("{s:s}", "what", what);
    if (!e || json_array_append_new(h->screen, e)) {
        h->oom = 1;
        return NULL;
    }
    return e;
}

static void put(pb_hang *h, json_t *e, const char *key, json_t *value)
{
    if (!e) {
        json_decref(value);
        return;
    }
    if (json_object_set_new(e, key, value)) h->oom = 1;
}

/* A string of the screen: already fit for a terminal, not checked as UTF-8 (a stack read from
 * another process is only ever printed escaped). NULL leaves the key out. */
static void put_str(pb_hang *h, json_t *e, const char *key, const char *value)
{
    if (value) put(h, e, key, json_string_nocheck(value));
}

static void put_int(pb_hang *h, json_t *e, const char *key, long long value)
{
    put(h, e, key, json_integer((json_int_t)value));
}

static void put_real(pb_hang *h, json_t *e, const char *key, double value)
{
    put(h, e, key, json_real(value));
}

static void put_bool(pb_hang *h, json_t *e, const char *key, int value)
{
    put(h, e, key, json_boolean(value));
}

/* "rank", "host", "pid" of rank r. */
static void put_rank(pb_hang *h, json_t *e, int r)
{
    put_int(h, e, "rank", r);
    put_str(h, e, "host", h->ranks[r].host);
    put_int(h, e, "pid", h->ranks[r].pid);
}

/* "where" (the frame the rank is said to be in) and "stack" (the frames from there down). */
static void put_stack(pb_hang *h, json_t *e, const stack_text *st)
{
    json_t *frames = json_array();
    if (st->oom) h->oom = 1;
    for (size_t i = st->key_frame; frames && i < json_array_size(st->frames); i++)
        if (json_array_append(frames, json_array_get(st->frames, i))) h->oom = 1;
    put_str(h, e, "where", st->top);
    put(h, e, "stack", frames);
    if (!frames) h->oom = 1;
}

/* The stacks of a job stalled outside collectives: ranks with identical stacks are one entry
 * with their rank list, the largest group first; when one group holds more ranks than any other,
 * the ranks outside it are the odd ones and are named so (in summary's "odd_ranks" too). */
static void stall_stacks(pb_hang *h, stack_text *stacks, char (*stack_err)[512])
{
    const pb_hang_rank *ranks = h->ranks;
    const unsigned char *need_stack = h->need_stack;
    int n = h->n;
    int *group = malloc((size_t)n * sizeof *group), *size = calloc((size_t)n, sizeof *size);
    unsigned char *flag = calloc((size_t)n, 1), *odd = calloc((size_t)n, 1);
    if (!group || !size || !flag || !odd) {
        h->oom = 1;
        goto out;
    }
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
            char list[4096];
            rank_list(flag, n, list, sizeof list);
            int many = size[g] > 1;
            /* "all": every rank is in it; "odd": the ranks outside the largest group; else
             * "some" */
            const char *kind = ngroups == 1 && many ? "all" : majority && g != big ? "odd" : "some";
            json_t *e = entry(h, "stalled_group");
            put_str(h, e, "kind", kind);
            put_str(h, e, "ranks", list);
            put_int(h, e, "count", size[g]);
            put_rank(h, e, first);
            if (!same_step)
                put_int(h, e, "step", (long long)json_integer_value(json_object_get(ranks[first].answer, "step")));
            put_stack(h, e, &stacks[first]);
        }
    }
    for (int r = 0; r < n; r++)
        if (need_stack[r] && !stacks[r].text) {
            json_t *e = entry(h, "no_stack");
            put_rank(h, e, r);
            put_str(h, e, "why", stack_err[r]);
        }
    char list[4096];
    rank_list(odd, n, list, sizeof list);
    put(h, h->sum, "odd_ranks", json_string(list));
out:
    free(group);
    free(size);
    free(flag);
    free(odd);
}

void pb_hang_free(pb_hang *h)
{
    if (!h) return;
    json_decref(h->doc);
    free(h->answered);
    free(h->waiting);
    free(h->behind);
    free(h->need_stack);
    free(h->done);
    free(h);
}

pb_hang *pb_hang_study(pb_hang_rank *ranks, int n)
{
    pb_hang *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ranks = ranks;
    h->n = n;
    size_t size = (size_t)(n > 0 ? n : 1);
    h->doc = json_pack("{s:{s:b,s:[],s:[]},s:[]}", "summary", "stalled", 0, "groups", "not_answered",
                       "screen");
    h->sum = json_object_get(h->doc, "summary");
    h->screen = json_object_get(h->doc, "screen");
    h->answered = calloc(size, 1);
    h->waiting = calloc(size, 1);
    h->behind = calloc(size, 1);
    h->need_stack = calloc(size, 1);
    h->done = calloc(size, 1);
    if (!h->answered || !h->waiting || !h->behind || !h->need_stack || !h->done || !h->doc) {
        pb_hang_free(h);
        return NULL;
    }
    unsigned char *answered = h->answered, *waiting = h->waiting, *behind = h->behind,
                  *need_stack = h->need_stack, *done = h->done;
    json_t *sum = h->sum;
    for (int r = 0; r < n; r++) answered[r] = ranks[r].answered && ranks[r].answer;
    int from_fr = h->from_fr = use_flight_recorder(ranks, answered, n);
    put(h, sum, "source", json_string(from_fr ? "flight_recorder" : "probing"));

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
        json_t *e = entry(h, "running");
        put_int(h, e, "answered", count(answered, n));
        put_int(h, e, "ranks", n);
        put_real(h, e, "longest_wait_s", longest_all);
        put_int(h, e, "rank", longest_rank);
        put_str(h, e, "op", json_string_value(json_object_get(longest_c, "op")) ?: "?");
        put_int(h, e, "seq", (long long)json_integer_value(json_object_get(longest_c, "seq")));
        put_str(h, e, "group", json_string_value(json_object_get(longest_c, "group")) ?: "?");
        put_real(h, e, "stall_s", wait_limit);
        put(h, sum, "longest_wait_s", json_real(longest_all));
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
        /* Stalled for report: a wait longer than a healthy step explains (stall_limit). */
        if (longest > wait_limit) put(h, sum, "stalled", json_true());
        json_t *g = json_pack("{s:s,s:s,s:I,s:f,s:s,s:s,s:b}", "group", groups[k], "op", op ? op : "?",
                              "seq", (json_int_t)max_seq, "waiting_s", longest, "waiting_ranks", wl,
                              "not_entered_ranks", bl, "mismatch", mismatch);
        if (!g || json_array_append_new(json_object_get(sum, "groups"), g)) h->oom = 1;
        int nb = count(behind, n);
        int nmissing = 0;
        for (int r = 0; r < n; r++) nmissing += !answered[r];
        json_t *e = entry(h, "collective");
        put_str(h, e, "group", groups[k]);
        put_str(h, e, "op", op ? op : "?");
        put_int(h, e, "seq", max_seq);
        put_real(h, e, "waiting_s", longest);
        put_str(h, e, "waiting_ranks", wl);
        put_int(h, e, "waiting_count", count(waiting, n));
        put_str(h, e, "not_entered_ranks", bl);
        put_int(h, e, "not_entered_count", nb);
        /* every rank answered and is either in it, past it or behind it: "all ranks but ..." */
        put_bool(h, e, "all_but", nb && count(waiting, n) + nb + count(done, n) == n);
        put_bool(h, e, "some_not_answered", nmissing != 0);
        for (int r = 0; r < n; r++) {
            if (!behind[r]) continue;
            json_t *c = group_of(h->ranks[r].answer, groups[k]);
            need_stack[r] = 1;
            json_t *b = entry(h, "not_entered");
            put_int(h, b, "rank", r);
            put_str(h, b, "group", groups[k]);
            if (c) {
                json_t *last = json_object();
                put_str(h, last, "op", json_string_value(json_object_get(c, "op")));
                put_int(h, last, "seq", (long long)json_integer_value(json_object_get(c, "seq")));
                put_str(h, last, "state", json_string_value(json_object_get(c, "state")) ?: "?");
                put(h, b, "last", last);
                if (!last) h->oom = 1;
            }
        }
        if (mismatch) {
            json_t *m = entry(h, "mismatch"), *list = json_array();
            put_int(h, m, "seq", max_seq);
            put_str(h, m, "group", groups[k]);
            for (int r = 0; list && r < n; r++) {
                if (!waiting[r] && !done[r]) continue;
                json_t *c = group_of(h->ranks[r].answer, groups[k]);
                json_t *one = json_pack("{s:i,s:I}", "rank", r, "bytes",
                                        (json_int_t)json_integer_value(json_object_get(c, "bytes")));
                put_str(h, one, "op", json_string_value(json_object_get(c, "op")) ?: "?");
                if (!one || json_array_append_new(list, one)) h->oom = 1;
            }
            put(h, m, "ranks", list);
            if (!list) h->oom = 1;
        }
        for (int r = 0; r < n; r++) need_stack[r] |= waiting[r];
    }
    if (!h->any_hang && !running) {
        int na = count(answered, n);
        stall st;
        if (stall_check(h->ranks, answered, n, &st)) {
            h->stalled_outside = 1;
            json_t *e = entry(h, "stalled_outside");
            put_real(h, e, "no_step_for_s", st.no_step_for_s);
            put_real(h, e, "median_step_s", st.median_s);
            put_int(h, e, "answered", na);
            put_int(h, e, "ranks", n);
            for (int r = 0; r < n; r++) need_stack[r] = answered[r];
            put(h, sum, "stalled", json_true());
            put(h, sum, "no_step_for_s", json_real(st.no_step_for_s));
            put(h, sum, "median_step_s", json_real(st.median_s));
        } else {
            json_t *e = entry(h, "no_wait");
            put_int(h, e, "answered", na);
            put_int(h, e, "ranks", n);
        }
    }

    for (int r = 0; r < n; r++) ranks[r].want_stack = need_stack[r];
    return h;
}

int pb_hang_finish(pb_hang *h, json_t **doc)
{
    int rc = 0, n = h->n;
    unsigned char *answered = h->answered, *waiting = h->waiting, *need_stack = h->need_stack;
    *doc = NULL;
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
        json_t *e = entry(h, "not_answered");
        put_int(h, e, "rank", r);
        put_str(h, e, "host", k->host);
        put_int(h, e, "pid", k->pid);
        put_str(h, e, "why", k->why ? k->why : "?");
        put_bool(h, e, "job_waits", h->any_hang);
        put_str(h, e, "process", k->process);
        if (lost.text && lost.top[0]) put_stack(h, e, &lost);
        else if (lost_err[0]) put_str(h, e, "no_stack", lost_err);
        stack_text_free(&lost);
        if (json_array_append_new(json_object_get(h->sum, "not_answered"), json_integer(r))) h->oom = 1;
        rc = 1;
    }
    if (h->stalled_outside) stall_stacks(h, stacks, stack_err);
    /* The odd ranks, each with its stack. */
    for (int r = 0; r < n; r++) {
        if (h->stalled_outside || !need_stack[r] || waiting[r]) continue;
        json_t *e = entry(h, stacks[r].text ? "rank" : "no_stack");
        put_rank(h, e, r);
        if (stacks[r].text) put_stack(h, e, &stacks[r]);
        else put_str(h, e, "why", stack_err[r]);
    }
    /* The waiting ranks, grouped by where they wait. */
    for (int r = 0; r < n; r++) {
        if (!waiting[r] || !stacks[r].text) continue;
        unsigned char *same = calloc((size_t)n, 1);
        if (!same) {
            h->oom = 1;
            break;
        }
        for (int q = r; q < n; q++)
            if (waiting[q] && stacks[q].text && strcmp(STACK_KEY(stacks[q]), STACK_KEY(stacks[r])) == 0) {
                same[q] = 1;
                if (q != r) waiting[q] = 0;
            }
        char list[4096];
        rank_list(same, n, list, sizeof list);
        json_t *e = entry(h, "waiting");
        put_str(h, e, "ranks", list);
        put_int(h, e, "count", count(same, n));
        put_stack(h, e, &stacks[r]);
        free(same);
    }
    if (h->from_fr) entry(h, "source_flight_recorder");
    if (h->oom) {
        rc = -1;
        goto finish;
    }
    *doc = h->doc;
    h->doc = h->sum = h->screen = NULL;
finish:
    for (int r = 0; stacks && r < n; r++) stack_text_free(&stacks[r]);
    free(stacks);
    free(stack_err);
    return rc;
}
