/*
 * ui_server.h - the web view server's state, shared by ui.c (the HTTP server and its routes)
 * and ui_ranks.c (which ranks of the target's job the view shows). Private to serve/: the
 * command's interface is serve/ui.h.
 */
#ifndef PB_UI_SERVER_H
#define PB_UI_SERVER_H

#include "client/target.h"
#include "reaper.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>

typedef struct ui_target {
    pb_target t;
    int rank;
    long long pid;
    char host[256];  /* the rank's host as its job roster names it; "" when not known */
    int node_rank;
} ui_target;

typedef struct ui_server {
    const struct pb_ui_options *a; /* serve/ui.h */
    char token[65];       /* in the URL; needed by every /ui/ route */
    char cookie[65];      /* the cookie's value: a secret of its own, opens the page only */
    char cookie_name[32]; /* UI_COOKIE_PREFIX and the port */
    int port;
    int loopback;         /* listening on a loopback address: Host must name one */
    char web_dir[PATH_MAX];
    char queries_dir[PATH_MAX]; /* "" when no cookbook was found */
    char exe[PATH_MAX];
    char node[256];
    ui_target *targets; /* targets[0] is the target; then the job's other reachable ranks */
    size_t ntargets;
    json_t *missing;    /* ranks of the job that cannot be asked: [{"rank","host","why"}] */
    pthread_mutex_t file_lock;
    pb_reaper *reaper;
} ui_server;

/* /api/info of target t (a recording's under s->file_lock: its handle is shared), or NULL. */
json_t *pb_ui_info_of(ui_server *s, const pb_target *t, long timeout_ms);

/* The other ranks of the target's job from the job's roster, after targets[0]; the ones that
 * cannot be asked go to s->missing. Returns 0, or -1 when there is no roster of several ranks:
 * then pb_ui_find_ranks. */
int pb_ui_roster_ranks(ui_server *s, json_t *info);

/* The other local ranks of the target's job (same job and world size), after targets[0]. */
void pb_ui_find_ranks(ui_server *s, json_t *info);

#endif
