/*
 * cmd_exporter.c - `probing exporter [--listen ADDR:PORT] [--sd FILE] [--timeout S]`: one
 * process per node serving Prometheus metrics for every probing agent of this user
 * (docs/exporter.md), served by serve/exporter.c until Ctrl-C.
 */
#include "cmd/command.h"
#include "serve/exporter.h"

int cmd_exporter(const pb_cli_args *a)
{
    pb_exporter_options o = {
        .listen = a->listen,
        .sd_file = a->sd_file,
        .timeout_s = a->timeout_s,
    };
    return pb_exporter_serve(&o);
}
