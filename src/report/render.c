/*
 * render.c - the report (the JSON of pb_report_build) as text for a terminal.
 *
 * Walks the document in the method's order: baseline, bottleneck type, component, operation,
 * then the checks, then what data was missing. Times are shown in ms, shares in %. Every
 * finding prints its SQL indented under it so it can be copied into `probing <target> query`.
 */
#include "report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static void print_sql(FILE *out, const char *sql)
{
    const char *p = sql;
    fputs("      sql: ", out);
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        fwrite(p, 1, len, out);
        p += len;
        if (*p) {
            fputs("\n           ", out);
            p++;
        }
    }
    fputc('\n', out);
}

static void print_value(FILE *out, json_t *v)
{
    if (json_is_integer(v))
        fprintf(out, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fprintf(out, "%.6g", json_real_value(v));
    else if (json_is_string(v))
        fputs(json_string_value(v), out);
    else if (json_is_true(v))
        fputs("true", out);
    else if (json_is_false(v))
        fputs("false", out);
    else if (json_is_array(v) || json_is_object(v)) {
        char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        fputs(text ? text : "-", out);
        free(text);
    } else
        fputs("-", out);
}

/* One line: label, then "key<sep>value" for each member of obj, comma-separated. */
static void print_pairs(FILE *out, const char *label, json_t *obj, const char *sep)
{
    const char *key;
    json_t *v;
    int first = 1;
    fputs(label, out);
    json_object_foreach(obj, key, v) {
        fprintf(out, "%s%s%s", first ? "" : ", ", key, sep);
        print_value(out, v);
        first = 0;
    }
    fputc('\n', out);
}

static void print_finding(FILE *out, json_t *f)
{
    const char *sev = json_string_value(json_object_get(f, "severity"));
    char tag[16];
    size_t i;
    for (i = 0; sev && sev[i] && i < sizeof tag - 1; i++)
        tag[i] = (char)(sev[i] >= 'a' && sev[i] <= 'z' ? sev[i] - 32 : sev[i]);
    tag[i] = '\0';
    fprintf(out, "  [%s] %s\n", tag, json_string_value(json_object_get(f, "claim")));
    json_t *nums = json_object_get(f, "numbers");
    if (json_object_size(nums)) print_pairs(out, "      numbers: ", nums, "=");
    json_t *sql;
    json_array_foreach(json_object_get(f, "sql"), i, sql) print_sql(out, json_string_value(sql));
    const char *rec = json_string_value(json_object_get(f, "recommendation"));
    if (rec) fprintf(out, "      recommendation: %s\n", rec);
}

static void print_findings(FILE *out, json_t *findings, const char *phase)
{
    size_t i;
    json_t *f;
    json_array_foreach(findings, i, f) {
        if (!strcmp(json_string_value(json_object_get(f, "phase")), phase)) print_finding(out, f);
    }
}

static void print_modules(FILE *out, const char *title, json_t *rows, const char *sql)
{
    size_t i;
    json_t *row;
    fprintf(out, "  %s:\n", title);
    json_array_foreach(rows, i, row) {
        fprintf(out, "    %-32s %-8s calls %-6lld self %9.3f ms (%4.1f%%)  total %9.3f ms\n",
                json_string_value(json_object_get(row, "module")),
                json_string_value(json_object_get(row, "stage")),
                (long long)num(row, "calls"), num(row, "self_s") * 1e3,
                100 * num(row, "self_share"), num(row, "total_s") * 1e3);
    }
    print_sql(out, sql);
}

static void print_baseline(FILE *out, json_t *doc)
{
    json_t *b = json_object_get(doc, "baseline");
    fputs("\n1. Baseline\n", out);
    if (!json_is_object(b)) {
        print_findings(out, json_object_get(doc, "findings"), "baseline");
        return;
    }
    json_t *st = json_object_get(b, "step_time");
    fprintf(out, "  steps %lld..%lld: %lld steady, %lld warm-up step(s) left out; step time from "
                 "%s\n",
            (long long)num(b, "first_step"), (long long)num(b, "last_step"),
            (long long)num(b, "steady_steps"), (long long)num(b, "warmup_steps"),
            json_string_value(json_object_get(b, "step_source")));
    if (json_is_true(json_object_get(b, "detail_steps_left_out")))
        fprintf(out,
                "  %lld detail step(s) (every module recorded, python.steps.detail = 1) timed apart: "
                "median %.3f ms vs %.3f ms; the figures below are the other steps\n",
                (long long)num(b, "detail_steps"), num(b, "detail_median_s") * 1e3,
                num(b, "summary_median_s") * 1e3);
    else if (num(b, "detail_steps") > 0)
        fprintf(out, "  %lld of the %lld steady steps in detail (every module recorded, python.steps.detail = 1); "
                     "the figures below include them\n",
                (long long)num(b, "detail_steps"), (long long)num(b, "steady_steps"));
    if (json_is_object(st))
        fprintf(out,
                "  step time (ms): mean %.3f  std %.3f  median %.3f  p95 %.3f  p99 %.3f  "
                "min %.3f  max %.3f\n",
                num(st, "mean_s") * 1e3, num(st, "std_s") * 1e3, num(st, "median_s") * 1e3,
                num(st, "p95_s") * 1e3, num(st, "p99_s") * 1e3, num(st, "min_s") * 1e3,
                num(st, "max_s") * 1e3);
    if (json_is_number(json_object_get(b, "samples_per_s"))) {
        long long extra = (long long)num(b, "steps_with_extra_samples");
        fprintf(out, "  throughput: %.1f samples/s (batch size %g, from %s", num(b, "samples_per_s"),
                num(b, "batch_size"), json_string_value(json_object_get(b, "batch_size_source")));
        if (extra > 0)
            fprintf(out, "; training samples only: %lld step%s that also took an evaluation's "
                         "batches counted at the batch size", extra, extra == 1 ? "" : "s");
        fprintf(out, ")\n");
    }
    else if (json_is_string(json_object_get(b, "throughput_note")))
        fprintf(out, "  throughput: unknown (%s)\n",
                json_string_value(json_object_get(b, "throughput_note")));
    json_t *c = json_object_get(b, "conditions");
    if (json_is_object(c))
        print_pairs(out, "  conditions: ", c, " ");
    else if (json_is_string(json_object_get(b, "conditions_note")))
        fprintf(out, "  conditions: %s\n", json_string_value(json_object_get(b, "conditions_note")));
    print_sql(out, json_string_value(json_object_get(b, "sql")));
    print_findings(out, json_object_get(doc, "findings"), "baseline");
    print_findings(out, json_object_get(doc, "findings"), "compile"); /* compile.c: torch.compile */
}

static void print_part(FILE *out, const char *name, json_t *mem, const char *key,
                       const char *share_key, const char *note)
{
    json_t *v = json_object_get(mem, key);
    json_t *share = json_object_get(json_object_get(mem, "shares"), share_key);
    fprintf(out, "    %-16s", name);
    if (json_is_number(v)) fprintf(out, " %10.3f MB", json_number_value(v));
    else fputs("    unknown   ", out);
    if (json_is_number(share)) fprintf(out, "  %5.1f%%", 100 * json_number_value(share));
    else fputs("        ", out);
    if (note && *note) fprintf(out, "  %s", note);
    fputc('\n', out);
}

/* The memory section (the breakdown of docs/report.md, "Memory"), then its findings. */
static void print_memory(FILE *out, json_t *doc)
{
    json_t *mem = json_object_get(doc, "memory");
    fputs("\nMemory (parameters, gradients, optimizer state, activations)\n", out);
    if (json_is_object(mem)) {
        char note[320];
        json_t *step = json_object_get(mem, "breakdown_step");
        if (json_is_integer(step))
            fprintf(out, "  breakdown at step %lld on %s (python.memory_breakdown: each storage "
                         "counted once)\n",
                    (long long)json_integer_value(step),
                    json_string_value(json_object_get(mem, "device")));
        else
            fputs("  no breakdown of parameters, gradients and optimizer state (see below)\n",
                  out);
        print_part(out, "parameters", mem, "parameters_mb", "parameters", NULL);
        print_part(out, "gradients", mem, "gradients_mb", "gradients", NULL);
        note[0] = '\0';
        if (json_is_number(json_object_get(mem, "state_to_parameters")))
            snprintf(note, sizeof note, "%.2fx the parameters",
                     num(mem, "state_to_parameters"));
        print_part(out, "optimizer state", mem, "optimizer_state_mb", "optimizer_state", note);
        note[0] = '\0';
        if (json_is_integer(json_object_get(mem, "activations_step")))
            snprintf(note, sizeof note, "at step %lld: %s",
                     (long long)num(mem, "activations_step"),
                     json_string_value(json_object_get(mem, "activations_source")));
        else
            snprintf(note, sizeof note, "%s",
                     json_string_value(json_object_get(mem, "activations_source")));
        print_part(out, "activations", mem, "activations_mb", "activations", note);
        print_part(out, "tracked", mem, "tracked_mb", "", NULL);
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(mem, "optimizers"), i, o) {
            fprintf(out, "    %s: %lld parameter tensors on %s, state %.3f MB in %lld tensors\n",
                    json_string_value(json_object_get(o, "optimizer")),
                    (long long)num(o, "params"), json_string_value(json_object_get(o, "device")),
                    num(o, "state_mb"), (long long)num(o, "state_tensors"));
        }
        if (json_is_number(json_object_get(mem, "peak_mb")))
            fprintf(out, "  peak %.1f MB (%s)", num(mem, "peak_mb"),
                    json_string_value(json_object_get(mem, "peak_source")));
        if (json_is_number(json_object_get(mem, "reserved_mb")))
            fprintf(out, "; reserved %.1f MB", num(mem, "reserved_mb"));
        if (json_is_number(json_object_get(mem, "device_total_mb")))
            fprintf(out, " of %.1f MB on the device (%.0f%%)", num(mem, "device_total_mb"),
                    100 * num(mem, "pressure"));
        if (json_is_number(json_object_get(mem, "peak_mb"))) fputc('\n', out);
        json_t *phases = json_object_get(mem, "phases");
        if (json_array_size(phases)) {
            fprintf(out, "  phases at step %lld (allocated MB):",
                    (long long)num(mem, "phases_step"));
            json_array_foreach(phases, i, o) {
                fprintf(out, "%s %s %.1f", i ? "," : "",
                        json_string_value(json_object_get(o, "phase")), num(o, "allocated_mb"));
            }
            fputc('\n', out);
        }
        json_t *sql;
        json_array_foreach(json_object_get(mem, "sql"), i, sql)
            print_sql(out, json_string_value(sql));
    }
    print_findings(out, json_object_get(doc, "findings"), "memory");
}

/* The "Hang" section (docs/report.md, "Hang"): present only when the job was stalled when the
 * report was taken; its lines are those `probing <target> hang` printed. */
static void print_hang(FILE *out, json_t *hang)
{
    size_t i;
    json_t *line;
    if (!json_is_object(hang)) return;
    fputs("\nHang: the job is stalled (as `probing <target> hang` shows it)\n", out);
    json_array_foreach(json_object_get(hang, "text"), i, line)
        fprintf(out, "  %s\n", json_string_value(line) ? json_string_value(line) : "");
}

/* "x.xxx" milliseconds of a seconds member, or "n/a" (null: no rows). */
static const char *ms(char *buf, size_t size, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (json_is_number(v))
        snprintf(buf, size, "%.3f", json_number_value(v) * 1e3);
    else
        snprintf(buf, size, "n/a");
    return buf;
}

/* The "requests" section (docs/report.md, "Inference", "Requests") as section `number`, then its
 * findings. */
static void print_requests(FILE *out, json_t *doc, int number)
{
    json_t *s = json_object_get(doc, "requests");
    char a[32], b[32], c[32];
    fprintf(out, "\n%d. Serving: requests (python.requests)\n", number);
    if (!json_is_object(s)) return;
    long long n = (long long)num(s, "requests"), threads = (long long)num(s, "threads");
    fprintf(out, "  %lld request%s to %s (%lld answered 2xx/3xx, %lld 4xx, %lld 5xx, %lld without a status) in %.3f s",
            n, n == 1 ? "" : "s", json_string_value(json_object_get(s, "server")), (long long)num(s, "ok"),
            (long long)num(s, "client_errors"), (long long)num(s, "server_errors"), (long long)num(s, "no_status"),
            num(s, "span_s"));
    if (json_is_number(json_object_get(s, "requests_per_s"))) fprintf(out, ": %.1f requests/s", num(s, "requests_per_s"));
    fprintf(out, ", begun on %lld thread%s\n", threads, threads == 1 ? "" : "s");
    fprintf(out, "  latency (ms): p50 %s  p95 %s  p99 %s\n", ms(a, sizeof a, s, "latency_p50_s"),
            ms(b, sizeof b, s, "latency_p95_s"), ms(c, sizeof c, s, "latency_p99_s"));
    fprintf(out, "  in flight: max %lld, mean ", (long long)num(s, "in_flight_max"));
    if (json_is_number(json_object_get(s, "in_flight_mean"))) fprintf(out, "%.2f", num(s, "in_flight_mean"));
    else fputs("n/a", out);
    fprintf(out, "; in the model at once: at most %lld\n", (long long)num(s, "model_concurrency_max"));
    fprintf(out, "  per request that ran the model (%lld; p50, ms): in the model %s, outside it %s, before its first forward %s",
            (long long)num(s, "model_requests"), ms(a, sizeof a, s, "model_p50_s"), ms(b, sizeof b, s, "outside_p50_s"),
            ms(c, sizeof c, s, "first_forward_p50_s"));
    if (json_is_number(json_object_get(s, "model_share")))
        fprintf(out, "; %.1f%% of their time in the model", 100 * num(s, "model_share"));
    fputc('\n', out);
    if (json_is_integer(json_object_get(s, "tokens")))
        fprintf(out, "  %lld tokens generated for them, %.1f tokens/s\n", (long long)num(s, "tokens"),
                num(s, "tokens_per_s"));
    if (json_is_true(json_object_get(s, "truncated")))
        fputs("  (the oldest requests have left the ring: the figures are of the latest ones)\n", out);
    print_sql(out, json_string_value(json_object_get(s, "sql")));
    print_findings(out, json_object_get(doc, "findings"), "serving");
}

/* The "inference" section (docs/report.md, "Inference") as section `number`, then its findings. */
static void print_inference(FILE *out, json_t *doc, int number)
{
    json_t *s = json_object_get(doc, "inference");
    char a[32], b[32];
    fprintf(out, "\n%d. Inference: generate() calls (python.generations, python.tokens)\n", number);
    if (!json_is_object(s)) return;
    long long threads = (long long)num(s, "threads");
    fprintf(out, "  %lld generation%s of %lld sequence%s on %lld thread%s: %lld new tokens in %.3f s of generation",
            (long long)num(s, "generations"), num(s, "generations") == 1 ? "" : "s", (long long)num(s, "sequences"),
            num(s, "sequences") == 1 ? "" : "s", threads, threads == 1 ? "" : "s", (long long)num(s, "new_tokens"),
            num(s, "generating_s"));
    if (json_is_number(json_object_get(s, "tokens_per_s"))) fprintf(out, ", %.1f tokens/s", num(s, "tokens_per_s"));
    fputc('\n', out);
    fprintf(out, "  time to first token (ms): p50 %s", ms(a, sizeof a, s, "ttft_p50_s"));
    fprintf(out, "  p95 %s\n", ms(b, sizeof b, s, "ttft_p95_s"));
    fprintf(out, "  time per output token (ms): p50 %s", ms(a, sizeof a, s, "tpot_p50_s"));
    fprintf(out, "  p99 %s", ms(b, sizeof b, s, "tpot_p99_s"));
    fprintf(out, "; inter-token latency p50 %s", ms(a, sizeof a, s, "itl_p50_s"));
    fprintf(out, "  p99 %s\n", ms(b, sizeof b, s, "itl_p99_s"));
    fprintf(out, "  prefill (ms): p50 %s", ms(a, sizeof a, s, "prefill_p50_s"));
    if (json_is_number(json_object_get(s, "prefill_share")))
        fprintf(out, " (%.1f%% of generation time)", 100 * num(s, "prefill_share"));
    fprintf(out, "; %lld decode forwards (ms): p50 %s", (long long)num(s, "decode_forwards"),
            ms(a, sizeof a, s, "decode_forward_p50_s"));
    fprintf(out, "  p99 %s\n", ms(b, sizeof b, s, "decode_forward_p99_s"));
    if (json_is_integer(json_object_get(s, "kv_cache_last_bytes")))
        fprintf(out, "  KV cache at the end of the last generation: %.3f MB (largest %.3f MB)\n",
                num(s, "kv_cache_last_bytes") / 1e6, num(s, "kv_cache_max_bytes") / 1e6);
    else
        fputs("  KV cache at the end of the last generation: none read (use_cache=False, or a cache of another kind)\n",
              out);
    if (json_is_true(json_object_get(s, "truncated")))
        fputs("  (the oldest generations have left the ring: the figures are of the latest ones)\n", out);
    print_sql(out, json_string_value(json_object_get(s, "sql")));
    print_findings(out, json_object_get(doc, "findings"), "inference");
}

/* Sections 1 to 3 of a training job's report: baseline, bottleneck type, component. */
static void print_training(FILE *out, json_t *doc)
{
    json_t *findings = json_object_get(doc, "findings");
    print_baseline(out, doc);

    json_t *bn = json_object_get(doc, "bottleneck");
    fputs("\n2. Bottleneck type\n", out);
    if (json_is_object(bn)) {
        fprintf(out, "  %s\n  decided by: %s\n", json_string_value(json_object_get(bn, "label")),
                json_string_value(json_object_get(bn, "decided_by")));
        if (json_is_number(json_object_get(bn, "gpu_utilization")))
            fprintf(out, "  GPU utilisation: %.0f%%\n", num(bn, "gpu_utilization"));
    }
    print_findings(out, findings, "bottleneck");

    json_t *comp = json_object_get(doc, "component");
    fputs("\n3. Component\n", out);
    if (json_is_object(comp)) {
        const char *key;
        json_t *v;
        fputs("  share of the mean step:", out);
        json_object_foreach(json_object_get(comp, "shares"), key, v) {
            if (json_is_number(v))
                fprintf(out, " %s %.1f%%", key, 100 * json_number_value(v));
            else
                fprintf(out, " %s n/a", key);
        }
        fputc('\n', out);
        if (json_is_string(json_object_get(comp, "unaccounted_means")))
            fprintf(out, "  unaccounted = %s\n",
                    json_string_value(json_object_get(comp, "unaccounted_means")));
        if (json_is_string(json_object_get(comp, "module_steps_note")))
            fprintf(out, "  modules: steps %lld..%lld; %s\n", (long long)num(comp, "module_first_step"),
                    (long long)num(comp, "module_last_step"),
                    json_string_value(json_object_get(comp, "module_steps_note")));
        print_modules(out, "top modules by self time", json_object_get(comp, "top_by_self"),
                      json_string_value(json_object_get(comp, "top_by_self_sql")));
        print_modules(out, "top modules by total time", json_object_get(comp, "top_by_total"),
                      json_string_value(json_object_get(comp, "top_by_total_sql")));
    }
    print_findings(out, findings, "component");

}

int pb_report_render(FILE *out, json_t *doc)
{
    json_t *target = json_object_get(doc, "target");
    json_t *findings = json_object_get(doc, "findings");
    if (json_is_object(target)) {
        fprintf(out, "probing report for pid %lld", (long long)num(target, "pid"));
        json_t *cmd = json_object_get(target, "cmdline");
        size_t i;
        json_t *arg;
        if (json_array_size(cmd)) {
            fputs(" (", out);
            json_array_foreach(cmd, i, arg) fprintf(out, "%s%s", i ? " " : "",
                                                    json_string_value(arg));
            fputc(')', out);
        }
        fputc('\n', out);
    } else {
        fputs("probing report\n", out);
    }
    const char *primary = json_string_value(json_object_get(doc, "primary"));
    size_t i;
    json_t *f;
    if (primary) {
        json_array_foreach(findings, i, f) {
            if (!strcmp(json_string_value(json_object_get(f, "id")), primary))
                fprintf(out, "primary finding: %s\n",
                        json_string_value(json_object_get(f, "claim")));
        }
    } else {
        json_t *b = json_object_get(doc, "baseline");
        json_t *steady = json_object_get(b, "steady_steps");
        if (json_is_integer(steady) && json_integer_value(steady) < PB_REPORT_MIN_STEADY)
            fprintf(out, "primary finding: none, but the sample is too small to conclude: %lld "
                         "steady step%s (%d or more wanted); run the report again later\n",
                    (long long)json_integer_value(steady),
                    json_integer_value(steady) == 1 ? "" : "s", PB_REPORT_MIN_STEADY);
        else
            fputs("primary finding: none - no problem found in the recorded data\n", out);
    }
    /* The other problems, so that the answer is in the first lines. */
    size_t also = 0;
    json_array_foreach(findings, i, f) {
        const char *sev = json_string_value(json_object_get(f, "severity"));
        const char *id = json_string_value(json_object_get(f, "id"));
        if (also >= 3 || !sev || !id || (primary && !strcmp(id, primary))) continue;
        if (strcmp(sev, "critical") && strcmp(sev, "warning")) continue;
        fprintf(out, "also (%s): %s\n", sev, json_string_value(json_object_get(f, "claim")));
        also++;
    }
    print_hang(out, json_object_get(doc, "hang"));
    const char *workload = json_string_value(json_object_get(doc, "workload"));
    int inference = workload && !strcmp(workload, "inference"), section = 4;
    if (inference) { /* a server's requests, then its generations: each section when it has rows */
        section = 1;
        if (json_is_object(json_object_get(doc, "requests"))) print_requests(out, doc, section++);
        if (json_is_object(json_object_get(doc, "inference")) || section == 1) print_inference(out, doc, section++);
    } else {
        print_training(out, doc);
    }
    fprintf(out, "\n%d. Operation: what to look at next\n", section);
    json_array_foreach(json_object_get(doc, "next"), i, f) {
        fprintf(out, "  - %s:\n      $ %s\n", json_string_value(json_object_get(f, "why")),
                json_string_value(json_object_get(f, "command")));
    }

    if (!inference) print_memory(out, doc);

    fputs("\nChecks\n", out);
    print_findings(out, findings, "check");

    json_t *missing = json_object_get(doc, "missing");
    if (json_array_size(missing)) {
        fputs("\nMissing data\n", out);
        json_array_foreach(missing, i, f) {
            fprintf(out, "  - %s (%s): needed for %s\n",
                    json_string_value(json_object_get(f, "table")),
                    json_string_value(json_object_get(f, "state")),
                    json_string_value(json_object_get(f, "needed_for")));
        }
    }
    json_t *errors = json_object_get(doc, "query_errors");
    if (json_array_size(errors)) {
        fputs("\nQueries that failed\n", out);
        json_array_foreach(errors, i, f) {
            fprintf(out, "  - %s\n", json_string_value(json_object_get(f, "error")));
            print_sql(out, json_string_value(json_object_get(f, "sql")));
        }
    }
    return ferror(out) ? -EIO : 0;
}
