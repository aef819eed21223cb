/*
 * exporter_scrape.h - one scrape of the exporter's GET /metrics (exporter_scrape.c): every
 * agent of this user's socket directory asked over the API, within one deadline, and the
 * Prometheus text exposition (out/exposition.h) of what they answered. The exporter's server
 * (exporter.c) is its only caller; it runs one scrape at a time under its scrape lock, and the
 * counters kept per agent between scrapes live here.
 */
#ifndef PB_CLI_EXPORTER_SCRAPE_H
#define PB_CLI_EXPORTER_SCRAPE_H

#include "buf.h"

/* The node's name that the series carry (labels host and Hostname). Before the first scrape.
 * [main thread] */
void pb_exporter_scrape_init(const char *host);

/* One scrape: every agent in parallel, then the exposition. Returns 0 and the body in out, or
 * -errno. [server thread, one at a time: the caller holds its scrape lock] */
int pb_exporter_scrape(double timeout_s, pb_buf *out);

/* Lets go of what is kept between scrapes (the agents' last findings). After the last scrape.
 * [main thread] */
void pb_exporter_scrape_free(void);

#endif
