/*
 * cmd_flamegraph.c - `probing <target> flamegraph [-o modules.svg] [--folded] [--stage S]`:
 * module time from python.torch_trace as a flame graph.
 *
 * Each row's self time (duration) is charged to a stack: the root, the depth-0 module whose
 * interval holds the row in the same step, thread and stage, then the prefixes of the row's
 * qualified name ("layer1", "layer1.0", "layer1.0.conv1"). A root row's stack is the root
 * alone; a row whose root is no longer recorded starts at its first prefix. With --stage all
 * each stack starts with its stage (forward, backward, step). Equal stacks are summed, so the
 * folded lines add up to SUM(duration) of the selected rows (each line rounded to a microsecond).
 *
 * --folded writes "frame;frame;frame <microseconds>" lines (flamegraph.pl's input). Otherwise
 * an SVG is drawn here, in flamegraph.pl's layout: the root at the bottom, each frame as wide as
 * its inclusive time, children sorted by name, a <title> with the time on every rectangle.
 */
#include "client/client.h"
#include "cmd/command.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_WIDTH 1200
#define FRAME_HEIGHT 16
#define PAD_TOP 40
#define PAD_SIDE 10
#define MIN_WIDTH_PX 0.1

typedef struct stack_time {
    char *stack;  /* owned, frames joined by ';' */
    double seconds;
} stack_time;

/* Orders stacks frame by frame (';' sorts before every other byte), so all stacks under one
 * frame are contiguous. */
static int by_frames(const void *x, const void *y)
{
    const unsigned char *a = (const unsigned char *)((const stack_time *)x)->stack;
    const unsigned char *b = (const unsigned char *)((const stack_time *)y)->stack;
    for (;; a++, b++) {
        unsigned ca = *a == ';' ? 1 : *a, cb = *b == ';' ? 1 : *b;
        if (ca != cb || !ca) return (int)ca - (int)cb;
    }
}

/* Appends the text of one frame to b, escaped (pb_buf_sanitize): a module name is the job's
 * and may hold a newline or an escape sequence, which must neither start a folded line of its
 * own (a forged frame with a forged time) nor reach the terminal. */
static int put_frame(pb_buf *b, const char *name, size_t len)
{
    return pb_buf_sanitize(b, name, len, 0);
}

/* Appends the stack of one row to b: [stage;]root;prefix;...;name. */
static int build_stack(pb_buf *b, const char *stage, const char *root, const char *module)
{
    int rc = 0;
    b->len = 0;
    if (stage) rc = put_frame(b, stage, strlen(stage));
    if (!rc && stage) rc = pb_buf_putc(b, ';');
    if (!rc && root && strcmp(root, module) != 0) rc = put_frame(b, root, strlen(root));
    if (!rc && root && strcmp(root, module) != 0) rc = pb_buf_putc(b, ';');
    for (const char *p = module; !rc; p++) {
        if (*p == '.' || *p == '\0') {
            rc = put_frame(b, module, (size_t)(p - module));
            if (!rc && *p) rc = pb_buf_putc(b, ';');
            if (!*p) break;
        }
    }
    if (!rc) rc = pb_buf_putc(b, '\0');
    return rc;
}

static void xml_text(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++) {
        switch (s[i]) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)s[i] >= 0x20 || s[i] == '\t') fputc(s[i], f);
        }
    }
}

static void draw_frame(FILE *f, const char *name, size_t name_len, int depth, int max_depth,
                       double x0_s, double x1_s, double total_s)
{
    double scale = (SVG_WIDTH - 2.0 * PAD_SIDE) / total_s;
    double x = PAD_SIDE + x0_s * scale, w = (x1_s - x0_s) * scale;
    if (w < MIN_WIDTH_PX) return;
    double y = PAD_TOP + (double)(max_depth - depth) * FRAME_HEIGHT;
    unsigned hash = 2166136261u;
    for (size_t i = 0; i < name_len; i++) hash = (hash ^ (unsigned char)name[i]) * 16777619u;
    fputs("<g><title>", f);
    xml_text(f, name, name_len);
    fprintf(f, " (%.0f us, %.2f%%)</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
               "height=\"%d\" fill=\"rgb(%u,%u,%u)\" rx=\"2\" ry=\"2\"/>",
            (x1_s - x0_s) * 1e6, 100.0 * (x1_s - x0_s) / total_s, x, y, w, FRAME_HEIGHT - 1,
            205 + hash % 50, (hash >> 8) % 180, (hash >> 16) % 55);
    size_t fits = w > 6 ? (size_t)((w - 6) / 7) : 0;
    if (fits >= 3) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 3, y + FRAME_HEIGHT - 4.5);
        if (name_len <= fits) {
            xml_text(f, name, name_len);
        } else {
            xml_text(f, name, fits - 2);
            fputs("..", f);
        }
        fputs("</text>", f);
    }
    fputs("</g>\n", f);
}

/* Splits a stack into frames: pointers into s (not terminated) and their lengths. */
static int split_frames(const char *s, const char **frames, size_t *lens, int max)
{
    int n = 0;
    while (n < max) {
        const char *semi = strchr(s, ';');
        frames[n] = s;
        lens[n++] = semi ? (size_t)(semi - s) : strlen(s);
        if (!semi) break;
        s = semi + 1;
    }
    return n;
}

#define MAX_FRAMES 256

static int write_svg(FILE *f, const stack_time *st, size_t count, const char *stage)
{
    const char *prev[MAX_FRAMES], *cur[MAX_FRAMES];
    size_t prev_len[MAX_FRAMES], cur_len[MAX_FRAMES];
    double open_at[MAX_FRAMES], total = 0, x = 0;
    int max_depth = 0, prev_n = 0;
    for (size_t i = 0; i < count; i++) {
        total += st[i].seconds;
        int n = split_frames(st[i].stack, cur, cur_len, MAX_FRAMES);
        if (n > max_depth) max_depth = n;
    }
    int height = PAD_TOP + (max_depth + 1) * FRAME_HEIGHT + 20;
    fprintf(f, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
               "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<style>text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }"
               "</style>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#f8f8f8\"/>\n"
               "<text x=\"%d\" y=\"24\" style=\"font-size:17px\">probing: module self time, "
               "stage %s</text>\n",
            SVG_WIDTH, height, SVG_WIDTH, height, SVG_WIDTH, height, SVG_WIDTH / 2 - 150, stage);
    if (total <= 0) {
        fputs("<text x=\"10\" y=\"60\">no module time recorded</text>\n</svg>\n", f);
        return 0;
    }
    /* Depth 0 is "all"; frame k of a stack is at depth k + 1. */
    for (size_t i = 0; i <= count; i++) {
        int n = i < count ? split_frames(st[i].stack, cur, cur_len, MAX_FRAMES) : 0, same = 0;
        while (same < n && same < prev_n && cur_len[same] == prev_len[same] &&
               memcmp(cur[same], prev[same], cur_len[same]) == 0)
            same++;
        for (int d = prev_n - 1; d >= same; d--)
            draw_frame(f, prev[d], prev_len[d], d + 1, max_depth, open_at[d], x, total);
        for (int d = same; d < n; d++) open_at[d] = x;
        if (i == count) break;
        x += st[i].seconds;
        memcpy(prev, cur, sizeof cur);
        memcpy(prev_len, cur_len, sizeof cur_len);
        prev_n = n;
    }
    draw_frame(f, "all", 3, 0, max_depth, 0, total, total);
    fputs("</svg>\n", f);
    return 0;
}

/* The options of flamegraph (option.h): the parser and 'flamegraph --help' read them. */
const pb_option pb_options_flamegraph[] = {
    PB_OPTION_OUTPUT("FILE", "write the SVG (or, with --folded, the text) to FILE",
                     PB_USAGE("(-o FILE.svg | --folded [-o FILE])")),
    PB_OPTION_FLAG_("folded", folded,
                    "folded-stack text, \"stack microseconds\" per line (flamegraph.pl input)",
                    PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_STRING_(0, "stage", "S", stage,
                      "forward (default), backward, step (optimizer) or all"),
    PB_OPTION_TABLE_END,
};

int cmd_flamegraph(const pb_cli_args *a)
{
    const char *stage = a->stage ? a->stage : "forward";
    const char *order = "ORDER BY step, stage, thread, time_offset, depth";
    json_t *rows = NULL, *row;
    stack_time *st = NULL;
    size_t count = 0, i;
    pb_buf b = PB_BUF_INIT;
    FILE *out = NULL;
    char *sql = NULL;
    int rc = PB_EXIT_ERROR, all = strcmp(stage, "all") == 0;

    if (!all && strcmp(stage, "forward") && strcmp(stage, "backward") && strcmp(stage, "step"))
        return pb_cli_usage_error("--stage wants forward, backward, step or all, not '%s'", stage);
    if (!a->folded && !a->output)
        return pb_cli_usage_error("flamegraph needs -o FILE.svg, or --folded for text: probing "
                                  "<target> flamegraph -o modules.svg");
    if (asprintf(&sql, "SELECT step, stage, thread, module, depth, time_offset, total_duration, "
                       "duration FROM python.torch_trace%s%s%s %s",
                 all ? "" : " WHERE stage = '", all ? "" : stage, all ? "" : "'", order) < 0)
        goto oom;
    if (pb_client_query_rows(&a->resolved, sql, &rows)) goto done;
    st = calloc(json_array_size(rows) + 1, sizeof *st);
    if (!st) goto oom;

    /* The current root of (step, stage, thread): rows come in start order, roots first. */
    long long root_step = -1, root_thread = -1;
    const char *root = NULL, *root_stage = NULL;
    double root_end = 0;
    json_array_foreach(rows, i, row) {
        long long step = json_integer_value(json_array_get(row, 0));
        const char *row_stage = json_string_value(json_array_get(row, 1));
        long long thread = json_integer_value(json_array_get(row, 2));
        const char *module = json_string_value(json_array_get(row, 3));
        long long depth = json_integer_value(json_array_get(row, 4));
        double offset = json_number_value(json_array_get(row, 5));
        double seconds = json_number_value(json_array_get(row, 7));
        if (!module || !row_stage) continue;
        if (depth == 0) {
            root = module;
            root_step = step;
            root_thread = thread;
            root_stage = row_stage;
            root_end = offset + json_number_value(json_array_get(row, 6));
        }
        int in_root = root && root_step == step && root_thread == thread &&
                      strcmp(root_stage, row_stage) == 0 && offset <= root_end;
        if (build_stack(&b, all ? row_stage : NULL, in_root ? root : NULL, module)) goto oom;
        if (!(st[count].stack = strdup(b.data))) goto oom;
        st[count++].seconds = isfinite(seconds) ? seconds : 0;
    }
    qsort(st, count, sizeof *st, by_frames);
    size_t merged = 0;
    for (i = 0; i < count; i++) {
        if (merged && strcmp(st[merged - 1].stack, st[i].stack) == 0) {
            st[merged - 1].seconds += st[i].seconds;
            free(st[i].stack);
        } else {
            st[merged++] = st[i];
        }
    }
    count = merged;

    out = !a->output || strcmp(a->output, "-") == 0 ? stdout : fopen(a->output, "w");
    if (!out) {
        pb_cli_error("cannot write %s: %s", a->output, strerror(errno));
        goto done;
    }
    if (a->folded) {
        for (i = 0; i < count; i++)
            fprintf(out, "%s %lld\n", st[i].stack, (long long)llround(st[i].seconds * 1e6));
    } else {
        write_svg(out, st, count, stage);
    }
    if ((out != stdout && fclose(out) != 0) || (out == stdout && fflush(out) != 0)) {
        out = NULL;
        pb_cli_error("cannot write %s: %s", a->output ? a->output : "the output",
                     strerror(errno));
        goto done;
    }
    out = NULL;
    rc = PB_EXIT_OK;
    goto done;
oom:
    pb_cli_error("out of memory");
done:
    if (out && out != stdout) fclose(out);
    for (i = 0; st && i < count; i++) free(st[i].stack);
    free(st);
    free(sql);
    pb_buf_free(&b);
    json_decref(rows);
    return rc;
}
