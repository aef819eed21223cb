/*
 * exporter.h - the exporter's server (exporter.c, its scrape exporter_scrape.c;
 * docs/exporter.md): a libmicrohttpd server inside the CLI that, per scrape of GET /metrics,
 * asks every agent of this user's socket directory over the API and writes the Prometheus text
 * exposition (out/exposition.h).
 * `probing exporter` (cmd/cmd_exporter.c) is its only caller.
 */
#ifndef PB_CLI_EXPORTER_H
#define PB_CLI_EXPORTER_H

typedef struct pb_exporter_options {
    const char *listen;  /* --listen ADDR:PORT, NULL for every interface on the default port */
    const char *sd_file; /* --sd FILE: a Prometheus file_sd target list to write, NULL none */
    double timeout_s;    /* --timeout: each scrape's deadline; 0 for the default (5 s) */
} pb_exporter_options;

/* Serves the agents' metrics until SIGINT or SIGTERM (SIGHUP is ignored); prints the URL on
 * stdout first. Returns PB_EXIT_OK when stopped by a signal, PB_EXIT_USAGE for a bad --listen,
 * PB_EXIT_ERROR after printing why it could not start. [main thread] */
int pb_exporter_serve(const pb_exporter_options *o);

#endif
