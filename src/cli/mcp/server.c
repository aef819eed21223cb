/*
 * server.c - the MCP server's protocol (server.h): JSON-RPC 2.0 over the stdio transport.
 *
 * Every line is one message. A request (it has an "id") gets exactly one answer, its result or
 * an error with JSON-RPC's codes: -32700 the line is not JSON, -32600 it is not a request
 * (a batch, a wrong "jsonrpc", no method, an id that is neither a string nor a number, a line
 * over 4 MiB), -32601 no such method, -32602 bad params (an unknown tool or prompt), -32002 no
 * such resource. A notification gets no answer. A request cancelled by the client
 * (notifications/cancelled) while it runs gets none either, as the specification asks, and
 * nor does one whose client closed our stdout meanwhile. When stdin ends, the requests read
 * before are answered and the server ends (exit status 0).
 *
 * initialize answers with the client's protocol version when it is one of `versions` (newest
 * first), else the newest; the server offers tools, resources and prompts, none of which
 * change during a session (listChanged false). A tool that fails is not a JSON-RPC error but
 * a result with isError (tools.h).
 */
#include "mcp/server.h"

#include "client/client.h"
#include "mcp/prompts.h"
#include "mcp/resources.h"
#include "mcp/stdio.h"
#include "mcp/tools.h"
#include "out/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    PARSE_ERROR = -32700,
    INVALID_REQUEST = -32600,
    METHOD_NOT_FOUND = -32601,
    INVALID_PARAMS = -32602,
    INTERNAL_ERROR = -32603,
    RESOURCE_NOT_FOUND = -32002,
};

/* The protocol versions this server speaks, newest first. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

typedef struct session {
    const pb_mcp_options *opts;
    int initialized;       /* notifications/initialized came */
    char message[1024];    /* a method's error message */
    json_t *error_data;    /* ... and its data (owned), or NULL */
} session;

/* Sets s's error message; returns code. */
static int fail(session *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(session *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->message, sizeof s->message, fmt, ap);
    va_end(ap);
    return code;
}

/* A method: 0 with *result (an object), or a JSON-RPC error code (fail()). */
typedef int (*method_fn)(session *s, json_t *params, json_t **result);

static int m_initialize(session *s, json_t *params, json_t **result)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked) return fail(s, INVALID_PARAMS, "initialize needs params.protocolVersion (a string)");
    const char *version = versions[0];
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if (strcmp(asked, versions[i]) == 0) version = versions[i];
    const char *instructions =
        s->opts->allow_eval
            ? "probing reads the PyTorch jobs it traces on this machine, live or recorded. Start "
              "with list_targets. Profile before you optimise: run the report tool (the four "
              "phases of the method; the diagnose prompt holds it) before proposing a change, "
              "and check its numbers with query (probing://tables says what each column means). "
              "eval runs Python inside the training process: use it to read state, not to "
              "change it."
            : "probing reads the PyTorch jobs it traces on this machine, live or recorded. Start "
              "with list_targets. Profile before you optimise: run the report tool (the four "
              "phases of the method; the diagnose prompt holds it) before proposing a change, "
              "and check its numbers with query (probing://tables says what each column means). "
              "Every tool only reads (eval is off: start the server with --allow-eval for it).";
    *result = json_pack("{s:s,s:{s:{s:b},s:{s:b,s:b},s:{s:b}},s:{s:s,s:s,s:s},s:s}",
                        "protocolVersion", version, "capabilities", "tools", "listChanged", 0,
                        "resources", "subscribe", 0, "listChanged", 0, "prompts", "listChanged",
                        0, "serverInfo", "name", "probing", "title",
                        "probing: a live profiler for PyTorch", "version", PB_VERSION,
                        "instructions", instructions);
    return *result ? 0 : fail(s, INTERNAL_ERROR, "out of memory");
}

static int m_ping(session *s, json_t *params, json_t **result)
{
    (void)s, (void)params;
    *result = json_object();
    return 0;
}

/* {key: list} for a list method. */
static int listing(session *s, const char *key, json_t *list, json_t **result)
{
    *result = list ? json_pack("{s:o}", key, list) : NULL;
    return *result ? 0 : fail(s, INTERNAL_ERROR, "out of memory");
}

static int m_tools_list(session *s, json_t *params, json_t **result)
{
    (void)params;
    return listing(s, "tools", pb_mcp_tools_list(s->opts->allow_eval), result);
}

static int m_tools_call(session *s, json_t *params, json_t **result)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    if (!name) return fail(s, INVALID_PARAMS, "tools/call needs params.name (a string): a tool of tools/list");
    if (args && !json_is_object(args) && !json_is_null(args))
        return fail(s, INVALID_PARAMS, "tools/call's params.arguments must be an object");
    int rc = pb_mcp_tools_call(name, json_is_object(args) ? args : NULL, s->opts->allow_eval, result);
    if (rc == -ENOENT) return fail(s, INVALID_PARAMS, "Unknown tool: %s (tools/list names them)", name);
    return rc ? fail(s, INTERNAL_ERROR, "out of memory") : 0;
}

static int m_resources_list(session *s, json_t *params, json_t **result)
{
    (void)params;
    return listing(s, "resources", pb_mcp_resources_list(), result);
}

static int m_resource_templates(session *s, json_t *params, json_t **result)
{
    (void)params;
    return listing(s, "resourceTemplates", json_array(), result);
}

static int m_resources_read(session *s, json_t *params, json_t **result)
{
    const char *uri = json_string_value(json_object_get(params, "uri"));
    if (!uri) return fail(s, INVALID_PARAMS, "resources/read needs params.uri (a string)");
    int rc = pb_mcp_resources_read(uri, result);
    if (rc == -ENOENT) {
        s->error_data = json_pack("{s:s}", "uri", uri);
        return fail(s, RESOURCE_NOT_FOUND, "Resource not found: %s (resources/list names them)", uri);
    }
    return rc ? fail(s, INTERNAL_ERROR, "out of memory") : 0;
}

static int m_prompts_list(session *s, json_t *params, json_t **result)
{
    (void)params;
    return listing(s, "prompts", pb_mcp_prompts_list(), result);
}

static int m_prompts_get(session *s, json_t *params, json_t **result)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    char err[512] = "";
    if (!name) return fail(s, INVALID_PARAMS, "prompts/get needs params.name (a string)");
    if (args && !json_is_object(args) && !json_is_null(args))
        return fail(s, INVALID_PARAMS, "prompts/get's params.arguments must be an object");
    int rc = pb_mcp_prompts_get(name, json_is_object(args) ? args : NULL, result, err, sizeof err);
    if (rc == -ENOENT) return fail(s, INVALID_PARAMS, "Unknown prompt: %s (prompts/list names them)", name);
    if (rc == -EINVAL) return fail(s, INVALID_PARAMS, "%s", err);
    return rc ? fail(s, INTERNAL_ERROR, "out of memory") : 0;
}

static const struct {
    const char *name;
    method_fn run;
} methods[] = {
    {"initialize", m_initialize},
    {"ping", m_ping},
    {"tools/list", m_tools_list},
    {"tools/call", m_tools_call},
    {"resources/list", m_resources_list},
    {"resources/templates/list", m_resource_templates},
    {"resources/read", m_resources_read},
    {"prompts/list", m_prompts_list},
    {"prompts/get", m_prompts_get},
};

/* Sends {"jsonrpc": "2.0", "id": id, key: value} (takes value). Returns 0 or the transport's
 * error. */
static int send_message(json_t *id, const char *key, json_t *value)
{
    json_t *msg = json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), key,
                            value);
    if (!msg) return -ENOMEM;
    int rc = pb_mcp_stdio_send(msg);
    json_decref(msg);
    return rc;
}

static int send_error(json_t *id, int code, const char *message, json_t *data)
{
    json_t *error = json_pack("{s:i,s:s}", "code", code, "message", message);
    if (error && data) json_object_set_new(error, "data", data);
    else json_decref(data);
    return error ? send_message(id, "error", error) : -ENOMEM;
}

/* Answers one line. Returns 0, or the transport's error (the client is gone). */
static int handle(session *s, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    char text[400];
    int rc = 0;
    if (!msg) {
        snprintf(text, sizeof text, "Parse error: %s (column %d)", jerr.text, jerr.column);
        return send_error(NULL, PARSE_ERROR, text, NULL);
    }
    json_t *id = json_object_get(msg, "id");
    const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));
    json_t *method = json_object_get(msg, "method"), *params = json_object_get(msg, "params");
    if (json_is_array(msg)) {
        rc = send_error(NULL, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not "
                        "supported (MCP 2025-06-18 removed them): send one message per line", NULL);
    } else if (!json_is_object(msg)) {
        rc = send_error(NULL, INVALID_REQUEST, "Invalid Request: a message is a JSON object", NULL);
    } else if (id && !json_is_string(id) && !json_is_number(id)) {
        rc = send_error(NULL, INVALID_REQUEST, "Invalid Request: the id must be a string or a "
                        "number", NULL);
    } else if (!jsonrpc || strcmp(jsonrpc, "2.0") != 0) {
        rc = send_error(id, INVALID_REQUEST, "Invalid Request: \"jsonrpc\" must be \"2.0\"", NULL);
    } else if (!json_is_string(method)) {
        /* A response (to a request this server never sends) needs no answer. */
        if (!id || !(json_object_get(msg, "result") || json_object_get(msg, "error")))
            rc = send_error(id, INVALID_REQUEST, "Invalid Request: no \"method\" (a string)", NULL);
    } else if (!id) { /* a notification */
        if (strcmp(json_string_value(method), "notifications/initialized") == 0) s->initialized = 1;
        /* notifications/cancelled was seen by the reader (stdio.c); others need nothing */
    } else if (params && !json_is_object(params)) {
        rc = send_error(id, INVALID_PARAMS, "Invalid params: \"params\" must be an object", NULL);
    } else {
        const char *name = json_string_value(method);
        method_fn run = NULL;
        for (size_t i = 0; i < sizeof methods / sizeof methods[0] && !run; i++)
            if (strcmp(methods[i].name, name) == 0) run = methods[i].run;
        if (!run) {
            snprintf(text, sizeof text, "Method not found: %s", name);
            rc = send_error(id, METHOD_NOT_FOUND, text, NULL);
        } else {
            json_t *result = NULL;
            s->message[0] = '\0';
            s->error_data = NULL;
            pb_mcp_stdio_working_on(id);
            int code = run(s, params, &result);
            int cancelled = pb_mcp_stdio_cancelled();
            pb_mcp_stdio_working_on(NULL);
            if (cancelled) {
                json_decref(result);
                json_decref(s->error_data);
            } else if (code) {
                rc = send_error(id, code, s->message, s->error_data);
            } else {
                rc = send_message(id, "result", result);
            }
            s->error_data = NULL;
        }
    }
    json_decref(msg);
    return rc;
}

int pb_mcp_serve(const pb_mcp_options *opts)
{
    session s = {opts, 0, "", NULL};
    json_object_seed(0); /* before the reader thread makes objects too */
    int rc = pb_mcp_stdio_start();
    if (rc) return pb_cli_error("cannot serve MCP on stdin/stdout: %s", strerror(-rc));
    pb_client_set_cancel(pb_mcp_stdio_cancelled);
    fprintf(stderr, "probing mcp %s: serving the Model Context Protocol on stdin/stdout "
            "(eval %s)\n", PB_VERSION, opts->allow_eval ? "allowed" : "off");
    for (;;) {
        pb_mcp_input in;
        pb_mcp_stdio_next(&in);
        if (in.kind == PB_MCP_EOF) break;
        if (in.kind == PB_MCP_TOO_LONG)
            rc = send_error(NULL, INVALID_REQUEST, "Invalid Request: the message is over 4 MiB "
                            "(the longest line this server reads) and was discarded", NULL);
        else
            rc = handle(&s, in.line, in.len);
        free(in.line);
        if (rc == -EPIPE || rc == -EIO) break; /* the client is gone */
    }
    pb_client_set_cancel(NULL);
    pb_mcp_stdio_stop();
    return PB_EXIT_OK;
}
