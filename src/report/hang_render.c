/*
 * hang_render.c - the hang analysis's document (pb_hang_finish, hang.h) as the text `probing
 * <target> hang` prints, and the lines of the "Hang" section of `report`.
 *
 * Reads the document alone: one block of lines per entry of its "screen", in order, each stack
 * one frame a line ("      file:line function") under the line that names where the rank is.
 * Every string in the document is already fit for a terminal, so nothing is escaped here.
 */
#include "hang.h"

#include <errno.h>
#include <string.h>

static const char *str(json_t *e, const char *key)
{
    return json_string_value(json_object_get(e, key));
}

static long long num(json_t *e, const char *key)
{
    return (long long)json_integer_value(json_object_get(e, key));
}

static double real(json_t *e, const char *key)
{
    return json_number_value(json_object_get(e, key));
}

static int yes(json_t *e, const char *key)
{
    return json_is_true(json_object_get(e, key));
}

/* The frames of e's "stack", one a line. */
static void print_stack(FILE *out, json_t *e)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(e, "stack"), i, f)
        fprintf(out, "      %s:%d %s\n", str(f, "file"), (int)num(f, "line"), str(f, "function"));
}

static void print_running(FILE *out, json_t *e)
{
    char wait[64];
    double longest = real(e, "longest_wait_s");
    if (longest < 1) snprintf(wait, sizeof wait, "%.0f ms", longest * 1e3);
    else snprintf(wait, sizeof wait, "%.1f s", longest);
    fprintf(out, "nothing is stuck: the job is running (%lld of %lld ranks answered); the longest "
                 "wait in a collective is %s (rank %lld in %s #%lld on group %s), under the "
                 "%.3g s that makes a stall (10 times the median step, at least 5 s)\n",
            num(e, "answered"), num(e, "ranks"), wait, num(e, "rank"), str(e, "op"), num(e, "seq"),
            str(e, "group"), real(e, "stall_s"));
}

static void print_collective(FILE *out, json_t *e)
{
    long long nwaiting = num(e, "waiting_count"), nb = num(e, "not_entered_count");
    const char *bl = str(e, "not_entered_ranks");
    if (yes(e, "all_but"))
        fprintf(out, "all ranks but %s are in %s #%lld on group %s, waiting %.0f s; rank%s %s %s not "
                     "entered it\n", bl, str(e, "op"), num(e, "seq"), str(e, "group"),
                real(e, "waiting_s"), nb > 1 ? "s" : "", bl, nb > 1 ? "have" : "has");
    else
        fprintf(out, "rank%s %s %s in %s #%lld on group %s, waiting %.0f s%s%s%s\n",
                nwaiting > 1 ? "s" : "", str(e, "waiting_ranks"), nwaiting > 1 ? "are" : "is",
                str(e, "op"), num(e, "seq"), str(e, "group"), real(e, "waiting_s"),
                nb ? "; not entered: " : "", nb ? bl : "",
                yes(e, "some_not_answered") ? "; some ranks did not answer (below)" : "");
}

static void print_not_entered(FILE *out, json_t *e)
{
    json_t *last = json_object_get(e, "last");
    if (!last) {
        fprintf(out, "  rank %lld: has made no collective call on %s yet\n", num(e, "rank"), str(e, "group"));
        return;
    }
    const char *op = str(last, "op");
    int named = op && strcmp(op, "?") != 0; /* "?": a flight recorder without the entry */
    fprintf(out, "  rank %lld: its last on %s is %s%s#%lld (%s)\n", num(e, "rank"), str(e, "group"),
            named ? op : "", named ? " " : "", num(last, "seq"), str(last, "state"));
}

static void print_mismatch(FILE *out, json_t *e)
{
    size_t i;
    json_t *r;
    fprintf(out, "mismatch at #%lld on group %s:", num(e, "seq"), str(e, "group"));
    json_array_foreach(json_object_get(e, "ranks"), i, r)
        fprintf(out, " rank %lld %s %lld bytes;", num(r, "rank"), str(r, "op"), num(r, "bytes"));
    fprintf(out, "\n");
}

static void print_not_answered(FILE *out, json_t *e)
{
    const char *host = str(e, "host");
    char pid_text[32] = "";
    if (num(e, "pid")) snprintf(pid_text, sizeof pid_text, ", pid %lld", num(e, "pid"));
    fprintf(out, "rank %lld (%s%s) did not answer: %s", num(e, "rank"), host && host[0] ? host : "host unknown",
            pid_text, str(e, "why"));
    if (yes(e, "job_waits")) fprintf(out, "; the job waits for it");
    if (str(e, "process")) fprintf(out, "; its process is %s", str(e, "process"));
    if (str(e, "where")) {
        fprintf(out, ", in %s\n", str(e, "where"));
        print_stack(out, e);
    } else if (str(e, "no_stack")) {
        fprintf(out, "; no stack: %s\n", str(e, "no_stack"));
    } else {
        fprintf(out, "\n");
    }
}

static void print_stalled_group(FILE *out, json_t *e)
{
    char steps[64] = "";
    const char *kind = str(e, "kind");
    int many = num(e, "count") > 1;
    if (json_object_get(e, "step")) snprintf(steps, sizeof steps, " (step %lld)", num(e, "step"));
    if (strcmp(kind, "all") == 0)
        fprintf(out, "all ranks%s are in %s\n", steps, str(e, "where"));
    else if (strcmp(kind, "odd") == 0 && !many)
        fprintf(out, "rank %lld (%s, pid %lld)%s is the odd one: it is in %s\n", num(e, "rank"),
                str(e, "host"), num(e, "pid"), steps, str(e, "where"));
    else if (strcmp(kind, "odd") == 0)
        fprintf(out, "ranks %s%s are odd ones: they are in %s\n", str(e, "ranks"), steps, str(e, "where"));
    else
        fprintf(out, "rank%s %s%s %s in %s\n", many ? "s" : "", str(e, "ranks"), steps,
                many ? "are" : "is", str(e, "where"));
    print_stack(out, e);
}

int pb_hang_render(FILE *out, json_t *doc)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "screen"), i, e) {
        const char *what = str(e, "what");
        if (!what) continue;
        if (strcmp(what, "running") == 0) {
            print_running(out, e);
        } else if (strcmp(what, "collective") == 0) {
            print_collective(out, e);
        } else if (strcmp(what, "not_entered") == 0) {
            print_not_entered(out, e);
        } else if (strcmp(what, "mismatch") == 0) {
            print_mismatch(out, e);
        } else if (strcmp(what, "stalled_outside") == 0) {
            fprintf(out, "the job is stalled outside collectives: no step finished on any rank for %.0f s "
                         "while the median step is %.3g s; no rank is in a collective (%lld of %lld ranks "
                         "answered)\n", real(e, "no_step_for_s"), real(e, "median_step_s"),
                    num(e, "answered"), num(e, "ranks"));
        } else if (strcmp(what, "no_wait") == 0) {
            fprintf(out, "no rank is waiting in a collective (%lld of %lld ranks answered)\n",
                    num(e, "answered"), num(e, "ranks"));
        } else if (strcmp(what, "not_answered") == 0) {
            print_not_answered(out, e);
        } else if (strcmp(what, "stalled_group") == 0) {
            print_stalled_group(out, e);
        } else if (strcmp(what, "no_stack") == 0) {
            fprintf(out, "rank %lld (%s, pid %lld): no stack: %s\n", num(e, "rank"), str(e, "host"),
                    num(e, "pid"), str(e, "why"));
        } else if (strcmp(what, "rank") == 0) {
            fprintf(out, "rank %lld (%s, pid %lld) is in %s\n", num(e, "rank"), str(e, "host"),
                    num(e, "pid"), str(e, "where"));
            print_stack(out, e);
        } else if (strcmp(what, "waiting") == 0) {
            int many = num(e, "count") > 1;
            fprintf(out, "waiting rank%s %s %s in %s\n", many ? "s" : "", str(e, "ranks"),
                    many ? "are" : "is", str(e, "where"));
            print_stack(out, e);
        } else if (strcmp(what, "source_flight_recorder") == 0) {
            fprintf(out, "source: PyTorch's flight recorder (TORCH_FR_BUFFER_SIZE): each process group's "
                         "last enqueued and last completed collective\n");
        }
    }
    return ferror(out) ? -EIO : 0;
}
