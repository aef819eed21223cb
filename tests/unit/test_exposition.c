/*
 * test_exposition.c - the Prometheus text exposition of `probing exporter` (src/cli/out/exposition.c):
 * label values escaped as the format requires, each family's HELP and TYPE written once with the
 * samples of every agent after it, families without samples left out, special values spelled as
 * the format spells them. promtool checks the real output in tests/integration/test_exporter.py.
 */
#include "check.h"
#include "out/exposition.h"
#include "phases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_label_escaping(void)
{
    pb_buf b = PB_BUF_INIT;
    pb_exposition_label_value(&b, "a\\b\"c\nd");
    CHECK_STR(b.data, "a\\\\b\\\"c\\nd", "backslash, quote and newline are escaped");
    pb_buf_free(&b);
    /* bytes that are not UTF-8 become U+FFFD; valid characters pass */
    pb_exposition_label_value(&b, "x\xff\xc3(\xe2\x82\xac\xed\xa0\x80y");
    CHECK_STR(b.data, "x\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdy",
              "invalid UTF-8 replaced, the euro sign kept");
    pb_buf_free(&b);
    /* a long value: cut before the escape or character that does not fit, "..." after */
    char big[4096];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = "\"\xc3\xa9"[i % 3];
    big[sizeof big - 1] = '\0';
    pb_exposition_label_value(&b, big);
    CHECK(b.len <= PB_EXPOSITION_LABEL_MAX, "at most PB_EXPOSITION_LABEL_MAX bytes");
    CHECK(b.len > PB_EXPOSITION_LABEL_MAX - 8, "and not much less");
    CHECK(b.len >= 3 && strcmp(b.data + b.len - 3, "...") == 0, "the cut is marked");
    size_t quotes = 0;
    for (size_t i = 0; i + 3 < b.len; i++) {
        if (b.data[i] == '"') {
            CHECK(i > 0 && b.data[i - 1] == '\\', "every quote stays escaped");
            quotes++;
        }
        if ((unsigned char)b.data[i] == 0xc3)
            CHECK((unsigned char)b.data[i + 1] == 0xa9, "no character is cut");
    }
    CHECK(quotes > 50, "quotes were written");
    pb_buf_free(&b);
}

static void test_families_once_across_agents(void)
{
    pb_exposition a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    pb_exposition_add(&a, PB_METRIC_UP, NULL, "rank=\"0\"", NULL, 1);
    pb_exposition_add(&b, PB_METRIC_UP, NULL, "rank=\"1\"", NULL, 0);
    pb_exposition_add(&a, PB_METRIC_STEP_DURATION, "_bucket", "rank=\"0\"", "le=\"+Inf\"", 3);
    pb_exposition_add(&a, PB_METRIC_STEP_DURATION, "_count", "rank=\"0\"", NULL, 3);
    pb_exposition_add(&b, PB_METRIC_EXPORTER_AGENTS, NULL, "", NULL, 2);
    pb_exposition_add(&b, PB_METRIC_STEP, NULL, "rank=\"1\"", NULL, NAN);
    pb_exposition *all[] = {&a, &b};
    pb_buf out = PB_BUF_INIT;
    CHECK(pb_exposition_write(&out, all, 2) == 0, "write succeeds");
    const char *text = out.data ? out.data : "";
    const char *up = strstr(text, "# TYPE probing_up gauge\n");
    CHECK(up != NULL, "probing_up has its TYPE line");
    CHECK(up && strstr(up, "# TYPE probing_up gauge\nprobing_up{rank=\"0\"} 1\nprobing_up{rank=\"1\"} 0\n"),
          "both agents' samples follow the one header, in agent order");
    CHECK(strstr(up ? up + 1 : "", "# TYPE probing_up") == NULL, "the header is written once");
    CHECK(strstr(text, "probing_step_duration_seconds_bucket{rank=\"0\",le=\"+Inf\"} 3\n") != NULL,
          "histogram buckets get the le label after the agent's labels");
    CHECK(strstr(text, "# TYPE probing_step_duration_seconds histogram\n") != NULL,
          "the histogram family is typed histogram");
    CHECK(strstr(text, "probing_exporter_agents 2\n") != NULL, "a sample without labels has no braces");
    CHECK(strstr(text, "probing_step{rank=\"1\"} NaN\n") != NULL, "NaN is spelled NaN");
    CHECK(strstr(text, "probing_finding") == NULL, "a family without samples is left out");
    CHECK(strstr(text, "probing_up") < strstr(text, "probing_step_duration_seconds"),
          "families come in the table's order");
    pb_buf_free(&out);
    pb_exposition_free(&a);
    pb_exposition_free(&b);
}

/* The HELP of the phase family names the phases of the one table (phases.h), in its order: the
 * families table spells them out, and this keeps the text from drifting from the exporter's
 * phase labels. */
static void test_phase_help_names_the_table(void)
{
    pb_exposition e;
    memset(&e, 0, sizeof e);
    pb_exposition_add(&e, PB_METRIC_STEP_PHASE_SECONDS, NULL, "rank=\"0\"", "phase=\"forward\"", 1);
    pb_exposition *all[] = {&e};
    pb_buf out = PB_BUF_INIT;
    char columns[256], help[512];
    CHECK(pb_phase_columns(columns, sizeof columns, 0, ", ") > 0, "the phases' columns");
    snprintf(help, sizeof help,
             "# HELP probing_step_phase_seconds_total seconds of completed steps spent in each "
             "phase: %s (python.steps)\n", columns);
    CHECK(pb_exposition_write(&out, all, 1) == 0 && out.data && strstr(out.data, help),
          "the phase family's HELP lists phases.h's phases: %s", help);
    pb_buf_free(&out);
    pb_exposition_free(&e);
}

int main(void)
{
    test_label_escaping();
    test_families_once_across_agents();
    test_phase_help_names_the_table();
    return check_summary();
}
