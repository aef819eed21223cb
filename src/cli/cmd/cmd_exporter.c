/*
 * cmd_exporter.c - `probing exporter [--listen ADDR:PORT] [--sd FILE] [--timeout S]`: one
 * process per node serving Prometheus metrics for every probing agent of this user
 * (docs/exporter.md), served by serve/exporter.c until Ctrl-C.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "serve/exporter.h"

/* The options of exporter (option.h): the parser and 'exporter --help' read them. */
const pb_option pb_options_exporter[] = {
    PB_OPTION_LISTEN("where to listen (default :10089, every interface; :0 picks a port)"),
    PB_OPTION_STRING_(0, "sd", "FILE", sd_file,
                      "write a Prometheus file_sd target for this exporter to FILE (removed when "
                      "the exporter stops)"),
    PB_OPTION_TIMEOUT("deadline of a scrape in seconds (default 5, less when Prometheus announces "
                      "a shorter scrape timeout); an agent that has not answered by then is "
                      "reported as probing_up 0"),
    PB_OPTION_TABLE_END,
};

int cmd_exporter(const pb_cli_args *a)
{
    /* A stopped rank is probing_up 0 at the scrape's deadline, as any rank that does not
     * answer (docs/exporter.md). */
    pb_client_watch_stopped(0);
    pb_exporter_options o = {
        .listen = a->listen,
        .sd_file = a->sd_file,
        .timeout_s = a->timeout_s,
    };
    return pb_exporter_serve(&o);
}
