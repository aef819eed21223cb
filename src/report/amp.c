/*
 * amp.c - the mixed-precision hardware checks of the report (docs/report.md, "Mixed precision"):
 * bf16 on a GPU without bf16 tensor cores, and matrix dimensions that do not suit tensor cores.
 *
 * Both apply only where mixed precision runs on a GPU, and say so otherwise (a CPU run, or a GPU
 * run in float32): bf16 compute on CUDA is seen in python.amp_trace (autocast dtype bfloat16 on
 * device 'cuda') or in python.layers (a Linear or convolution whose output is bfloat16 on a cuda
 * device); the device's compute capability is python.amp_trace.cuda_capability. The alignment
 * check takes the Linear/convolution shapes python.layers captured at each module's first
 * forward (in/out features, and the GEMM's M = batch x sequence), weighs the misaligned ones by
 * their share of module self time in python.torch_trace, and warns only when that share is worth
 * it (TC_SHARE): a 10-class head that is not a multiple of 8 is normal and costs little.
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BF16_MIN_CAPABILITY 8.0 /* bf16 needs Ampere or newer (docs/report.md, "Mixed precision") */
#define TC_MULTIPLE_FP16 8      /* multiples of 8 for fp16, 16 for bf16 (the same section) */
#define TC_MULTIPLE_BF16 16
#define TC_SHARE 0.10 /* misaligned layers' share of module self time worth a warning */
#define TC_LIST 5     /* misaligned layers named in the claim and numbers */
#define CONV_STEM_CHANNELS                                                                         \
    4 /* a convolution's input channels up to this (an RGB stem) are
                                   left out: cuDNN pads them itself */

static int starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static int half(const char *dtype)
{
    return dtype && (!strcmp(dtype, "float16") || !strcmp(dtype, "bfloat16"));
}

/* What mixed precision the recorded data shows. */
typedef struct amp_use {
    int gpu_bf16, gpu_fp16, cpu_autocast, gpu_layers, cpu_layers;
    double capability; /* < 0 unknown */
    char cpu_dtype[32];
    char amp_sql[SQL_MAX], layers_sql[SQL_MAX];
    char *amp_error; /* python.amp_trace could not be read with the columns needed */
} amp_use;

static void read_use(pb__report *r, amp_use *u)
{
    u->capability = -1;
    if (r->n_amp > 0) {
        pb__report_sqlf(u->amp_sql,
                        "SELECT autocast_dtype, autocast_device, COUNT(*) AS steps,\n"
                        "       MAX(cuda_capability) AS cuda_capability\n"
                        "FROM python.amp_trace WHERE step BETWEEN %lld AND %lld\n"
                        "GROUP BY autocast_dtype, autocast_device",
                        r->lo, r->hi);
        json_t *rows = pb__report_try(r, u->amp_sql, &u->amp_error), *row;
        size_t i;
        json_array_foreach(rows, i, row) {
            const char *dtype = json_string_value(json_object_get(row, "autocast_dtype"));
            const char *device = json_string_value(json_object_get(row, "autocast_device"));
            int ok;
            double cap = pb__report_num(row, "cuda_capability", &ok);
            if (ok && cap > u->capability) u->capability = cap;
            if (!half(dtype)) continue;
            if (starts_with(device, "cuda")) {
                if (!strcmp(dtype, "bfloat16"))
                    u->gpu_bf16 = 1;
                else
                    u->gpu_fp16 = 1;
            } else if (starts_with(device, "cpu")) {
                u->cpu_autocast = 1;
                snprintf(u->cpu_dtype, sizeof u->cpu_dtype, "%s", dtype);
            }
        }
        json_decref(rows);
    }
    if (r->n_layers > 0) {
        pb__report_sqlf(u->layers_sql, "SELECT device, compute_dtype, COUNT(*) AS layers FROM "
                                       "python.layers GROUP BY device, compute_dtype");
        json_t *rows = pb__report_run(r, u->layers_sql), *row;
        size_t i;
        json_array_foreach(rows, i, row) {
            const char *dtype = json_string_value(json_object_get(row, "compute_dtype"));
            const char *device = json_string_value(json_object_get(row, "device"));
            if (starts_with(device, "cuda")) {
                u->gpu_layers = 1;
                if (dtype && !strcmp(dtype, "bfloat16")) u->gpu_bf16 = 1;
                if (dtype && !strcmp(dtype, "float16")) u->gpu_fp16 = 1;
            } else {
                u->cpu_layers = 1;
            }
        }
        json_decref(rows);
    }
}

/* Why the GPU checks do not apply, for a claim. */
static const char *not_applicable(const amp_use *u)
{
    if (u->gpu_layers || u->gpu_fp16 || u->gpu_bf16)
        return "the GPU layers compute in float32 (tensor cores here are for float16/bfloat16)";
    if (u->cpu_autocast) return "autocast runs on the CPU, not a GPU";
    if (u->cpu_layers) return "the model runs on the CPU";
    return "no mixed precision on a GPU in the recorded data";
}

static void check_bf16(pb__report *r, const amp_use *u)
{
    char sql[2 * SQL_MAX + 8];
    snprintf(sql, sizeof sql, "%s%s%s", u->amp_sql, *u->amp_sql && *u->layers_sql ? "\n;\n" : "",
             u->layers_sql);
    if (r->n_amp <= 0 && r->n_layers <= 0) {
        pb__report_finding(r, "amp_bf16", "check", "skipped",
                           pb__report_textf("bf16 hardware support not checked: python.amp_trace "
                                            "and python.layers are %s",
                                            r->n_amp < 0 && r->n_layers < 0 ? "absent" : "empty"),
                           NULL, NULL, NULL);
        return;
    }
    if (u->amp_error && !u->gpu_layers) {
        pb__report_finding(r, "amp_bf16", "check", "skipped",
                           pb__report_textf("bf16 hardware support not checked: python.amp_trace "
                                            "lacks autocast_device/cuda_capability (%s: an agent "
                                            "or recording from before them)",
                                            u->amp_error),
                           NULL, NULL, NULL);
        return;
    }
    json_t *nums = json_object();
    json_object_set_new(nums, "bf16_on_gpu", json_boolean(u->gpu_bf16));
    json_object_set_new(nums, "fp16_on_gpu", json_boolean(u->gpu_fp16));
    json_object_set_new(nums, "cuda_capability",
                        u->capability >= 0 ? pb__report_real(u->capability) : json_null());
    if (u->cpu_autocast) json_object_set_new(nums, "cpu_autocast_dtype", json_string(u->cpu_dtype));
    if (!u->gpu_bf16) {
        pb__report_finding(r, "amp_bf16", "check", "skipped",
                           pb__report_textf("bf16 on a GPU without bf16 support: does not apply "
                                            "(%s)",
                                            u->gpu_fp16
                                                ? "the GPU computes in float16, not bfloat16"
                                                : not_applicable(u)),
                           nums, sql, NULL);
    } else if (u->capability < 0) {
        pb__report_finding(
            r, "amp_bf16", "check", "skipped",
            pb__report_textf("bf16 runs on a GPU, but its compute capability was not "
                             "recorded (python.amp_trace.cuda_capability is NULL)"),
            nums, sql, NULL);
    } else if (u->capability < BF16_MIN_CAPABILITY) {
        pb__report_finding(
            r, "amp_bf16", "check", "warning",
            pb__report_textf("bf16 on a GPU of compute capability %.1f, which has no bf16 "
                             "tensor cores (Ampere, 8.0, is the first): bf16 is emulated, as "
                             "fast as FP32 or slower",
                             u->capability),
            nums, sql,
            "BF16 needs Ampere (A100) or newer; on Volta/Turing (V100, T4) use FP16 with "
            "autocast(dtype=torch.float16) and a GradScaler: FP16 tensor cores give the 2-3x "
            "speedup (docs/report.md, \"Mixed precision\").");
    } else {
        pb__report_finding(r, "amp_bf16", "check", "ok",
                           pb__report_textf("bf16 on a GPU with bf16 tensor cores (compute "
                                            "capability %.1f)",
                                            u->capability),
                           nums, sql, NULL);
    }
}

static void check_alignment(pb__report *r, const amp_use *u)
{
    if (r->n_layers <= 0) {
        pb__report_finding(r, "tensor_cores", "check", "skipped",
                           pb__report_textf(r->n_layers < 0
                                                ? "tensor-core alignment not checked: "
                                                  "python.layers is absent (an agent or "
                                                  "recording from before it)"
                                                : "tensor-core alignment not checked: no "
                                                  "nn.Linear or convolution has run (outside "
                                                  "compiled regions)"),
                           NULL, NULL, NULL);
        return;
    }
    if (!u->gpu_bf16 && !u->gpu_fp16) {
        pb__report_finding(
            r, "tensor_cores", "check", "skipped",
            pb__report_textf("tensor-core alignment: does not apply (%s)", not_applicable(u)), NULL,
            u->layers_sql, NULL);
        return;
    }
    char sql[SQL_MAX];
    long long first = r->mod_lo;
    pb__report_sqlf(
        sql,
        "SELECT l.module, l.type, l.in_features, l.out_features, l.rows, l.compute_dtype,\n"
        "       t.self_s, (SELECT SUM(duration) FROM python.torch_trace\n"
        "                  WHERE step BETWEEN %lld AND %lld) AS total_s\n"
        "FROM python.layers l LEFT JOIN\n"
        "     (SELECT module, SUM(duration) AS self_s FROM python.torch_trace\n"
        "      WHERE step BETWEEN %lld AND %lld GROUP BY module) t ON t.module = l.module\n"
        "WHERE l.device LIKE 'cuda%%' AND l.compute_dtype IN ('float16', 'bfloat16')\n"
        "ORDER BY t.self_s DESC",
        first, r->mod_hi, first, r->mod_hi);
    json_t *rows = pb__report_run(r, sql), *row;
    size_t i, checked = 0, misaligned = 0;
    double total = 0, bad_s = 0;
    json_t *worst = json_array();
    char list[640] = "";
    json_array_foreach(rows, i, row) {
        const char *dtype = json_string_value(json_object_get(row, "compute_dtype"));
        const char *type = json_string_value(json_object_get(row, "type"));
        long long in = (long long)pb__report_num(row, "in_features", NULL);
        long long out = (long long)pb__report_num(row, "out_features", NULL);
        long long rows_m = (long long)pb__report_num(row, "rows", NULL);
        /* torch's convolutions (Conv2d, ConvTranspose1d, ...): channels, no GEMM rows check.
         * Hugging Face's Conv1D is a Linear with its weight transposed: a GEMM. */
        size_t tlen = type ? strlen(type) : 0;
        int conv = tlen > 4 && !strncmp(type, "Conv", 4) && type[tlen - 1] == 'd';
        long long mult = dtype && !strcmp(dtype, "bfloat16") ? TC_MULTIPLE_BF16 : TC_MULTIPLE_FP16;
        double self = pb__report_num(row, "self_s", NULL);
        total = pb__report_num(row, "total_s", NULL);
        checked++;
        char bad[96] = "";
        size_t len = 0;
        if (in > 0 && in % mult && !(conv && in <= CONV_STEM_CHANNELS))
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%s %lld",
                                    conv ? "in_channels" : "in_features", in);
        if (out > 0 && out % mult && len < sizeof bad)
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%s%s %lld", len ? ", " : "",
                                    conv ? "out_channels" : "out_features", out);
        if (!conv && rows_m > 0 && rows_m % mult && len < sizeof bad)
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%srows (batch x sequence) %lld",
                                    len ? ", " : "", rows_m);
        if (!len) continue;
        misaligned++;
        bad_s += self;
        if (json_array_size(worst) < TC_LIST) {
            json_t *w = json_object();
            json_object_set(w, "module", json_object_get(row, "module"));
            json_object_set(w, "type", json_object_get(row, "type"));
            json_object_set(w, "compute_dtype", json_object_get(row, "compute_dtype"));
            json_object_set_new(w, "multiple_of", json_integer(mult));
            json_object_set_new(w, "not_multiples", json_string(bad));
            json_object_set_new(w, "self_s", pb__report_real(self));
            json_array_append_new(worst, w);
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%s (%s, %s: %s)", used ? "; " : "",
                     json_string_value(json_object_get(row, "module")), type ? type : "?", dtype,
                     bad);
        }
    }
    json_decref(rows);
    double share = total > 0 ? bad_s / total : 0;
    json_t *nums = json_object();
    json_object_set_new(nums, "layers_checked", json_integer((json_int_t)checked));
    json_object_set_new(nums, "misaligned", json_integer((json_int_t)misaligned));
    json_object_set_new(nums, "misaligned_self_s", pb__report_real(bad_s));
    json_object_set_new(nums, "module_self_s", pb__report_real(total));
    json_object_set_new(nums, "misaligned_share", pb__report_real(share));
    json_object_set_new(nums, "layers", worst);
    const char *advice = "Ensure dimensions are multiples of 8 (FP16) or 16 (BF16): BAD (batch=31, "
                         "seq_len=127, hidden=509), GOOD (batch=32, seq_len=128, hidden=512) "
                         "(docs/report.md, \"Mixed precision\"). Pad hidden sizes and vocabularies, and pick batch sizes and "
                         "sequence lengths (or pad them) to such multiples.";
    if (!misaligned)
        pb__report_finding(r, "tensor_cores", "check", "ok",
                           pb__report_textf("the %zu float16/bfloat16 layers on the GPU have "
                                            "tensor-core friendly dimensions (multiples of 8 for "
                                            "float16, 16 for bfloat16)",
                                            checked),
                           nums, sql, NULL);
    else if (share >= TC_SHARE)
        pb__report_finding(r, "tensor_cores", "check", "warning",
                           pb__report_textf("%zu of %zu mixed-precision layers on the GPU have "
                                            "dimensions tensor cores handle badly, and they take "
                                            "%.0f%% of module time: %s",
                                            misaligned, checked, 100 * share, list),
                           nums, sql, advice);
    else
        pb__report_finding(r, "tensor_cores", "check", "info",
                           pb__report_textf("%zu of %zu mixed-precision layers on the GPU are not "
                                            "multiples of 8/16, but they take only %.0f%% of "
                                            "module time: little to gain (%s)",
                                            misaligned, checked, 100 * share, list),
                           nums, sql, NULL);
}

/* What share of the matrix-multiply work runs in reduced precision (python.layers: each GEMM or
 * convolution layer's first forward, its work taken as rows x in x out), and the largest layers
 * outside it (issue 50: autocast around blocks 0-1 only read as autocast off and the report said
 * nothing). Silent when no layer computes in float16/bfloat16. */
#define AMP_FP32_SHARE 0.25 /* float32 share of the GEMM work, beside reduced precision, to warn */

static void check_coverage(pb__report *r)
{
    if (r->n_layers <= 0) return;
    char sql[SQL_MAX];
    pb__report_sqlf(sql, "SELECT module, type, compute_dtype, device,\n"
                         "       MAX(rows, 1) * in_features * out_features AS work\n"
                         "FROM python.layers ORDER BY work DESC");
    json_t *rows = pb__report_run(r, sql), *row;
    size_t i, nhalf = 0, nfull = 0;
    double half_work = 0, total = 0;
    char dtype[32] = "";
    json_array_foreach(rows, i, row) {
        double w = pb__report_num(row, "work", NULL);
        const char *d = json_string_value(json_object_get(row, "compute_dtype"));
        if (!(w > 0)) continue;
        total += w;
        if (half(d)) {
            half_work += w;
            nhalf++;
            if (!dtype[0]) snprintf(dtype, sizeof dtype, "%s", d);
        } else {
            nfull++;
        }
    }
    if (!nhalf || !(total > 0)) {
        json_decref(rows);
        return;
    }
    double share = half_work / total;
    json_t *outside = json_array();
    char names[400] = "";
    size_t len = 0, named = 0;
    json_array_foreach(rows, i, row) {
        const char *d = json_string_value(json_object_get(row, "compute_dtype"));
        const char *m = json_string_value(json_object_get(row, "module"));
        if (half(d) || !m || named >= TC_LIST) continue;
        json_array_append_new(outside, json_string(m));
        if (len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s (%s)",
                                    named ? ", " : "", m, d ? d : "?");
        named++;
    }
    json_t *nums = json_object();
    json_object_set_new(nums, "reduced_share", pb__report_real(share));
    json_object_set_new(nums, "reduced_dtype", json_string(dtype));
    json_object_set_new(nums, "reduced_layers", json_integer((json_int_t)nhalf));
    json_object_set_new(nums, "full_layers", json_integer((json_int_t)nfull));
    json_object_set_new(nums, "largest_outside", outside);
    int warn = nfull && 1 - share >= AMP_FP32_SHARE;
    pb__report_finding(
        r, "amp_coverage", "check", warn ? "warning" : nfull ? "info" : "ok",
        nfull ? pb__report_textf("%.0f%% of the matrix-multiply work runs in %s (%zu of %zu "
                                 "layers); the rest in full precision, the largest: %s%s",
                                 100 * share, dtype, nhalf, nhalf + nfull, names,
                                 nfull > named ? ", ..." : "")
              : pb__report_textf("every matrix-multiply layer runs in %s (%zu layers)", dtype,
                                 nhalf),
        nums, sql,
        warn ? "Autocast covers only part of the model: widen the torch.autocast block to the "
               "whole forward (the loss too), or, if these layers are meant to run in float32, "
               "nothing to do (docs/report.md, \"Mixed precision\")."
             : NULL);
    json_decref(rows);
}

void pb__report_amp_hardware(pb__report *r)
{
    amp_use u;
    memset(&u, 0, sizeof u);
    read_use(r, &u);
    check_bf16(r, &u);
    check_alignment(r, &u);
    check_coverage(r);
    free(u.amp_error);
}
