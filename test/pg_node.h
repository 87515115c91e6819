/* SPDX-License-Identifier: MIT */
/*
 * A node process for the PostgreSQL backend's cluster tests: a child the test forks, which opens a
 * store on the shared database and runs a load generator through it, logging every call that was
 * acknowledged and every handler start to a file of its own. The test kills, pauses and continues
 * these children, and afterwards checks the logs and the database against each other (pg_oracle.h).
 *
 * THE LOG (one line per event, each written with one write() to a file opened O_APPEND, so a line
 * is whole or absent whatever happens to the process):
 *   B key op               a call begins (op: P put, C cancel)
 *   P key payload due at   a put returned 0 (acknowledged) at wall time `at`
 *   C key at               a cancel returned 0
 *   c key rc               a cancel returned -ENOENT or -EINPROGRESS (nothing was acknowledged)
 *   E key rc               any other failure of a call (the oracle fails on it)
 *   F key payload due attempt fence at   a handler started at wall time `at`
 * Each generator thread owns its keys ("<node>g<thread>-<n>"), so one key's calls are a sequence,
 * in log order. Payloads are unique per put ("<node>g<thread>s<seq>"), so a firing names its put.
 *
 * COMMANDS on the control pipe (one byte each): 'q' stops the generators; 'x' closes the store and
 * exits 0. An end of file is 'x' (the test died).
 */
#ifndef CHIME_TEST_PG_NODE_H
#define CHIME_TEST_PG_NODE_H

#include "pg_test.h"
#include "rng.h"

#include <fcntl.h>
#include <inttypes.h>

struct pg_node_cfg {
    const char *conninfo;
    const char *name;
    const char *log_path;
    uint64_t lease_ns;
    unsigned threads;     /* generator threads */
    unsigned keys;        /* keys per generator thread */
    uint64_t seed;
};

struct pg_node {
    const struct pg_node_cfg *cfg;
    chime_store *s;
    int log_fd;
    _Atomic int stop;
};

struct pg_gen {
    struct pg_node *node;
    unsigned index;
    pthread_t thread;
};

static inline void pg_node_log(struct pg_node *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void pg_node_log(struct pg_node *n, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (len > 0 && (size_t)len < sizeof line && write(n->log_fd, line, (size_t)len) != len)
        _exit(3); /* a node that cannot log is useless to the oracle */
}

static inline int64_t pg_node_handler(void *ctx, const struct chime_fire *f)
{
    struct pg_node *n = ctx;
    uint64_t at = wall_ns();
    pg_node_log(n, "F %.*s %.*s %" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu64 "\n", (int)f->key_len,
                (const char *)f->key, (int)f->payload_len, (const char *)f->payload, f->due_ns,
                f->attempt, f->fence, at);
    return 0;
}

static inline void *pg_gen_main(void *arg)
{
    struct pg_gen *g = arg;
    struct pg_node *n = g->node;
    struct rng r = { n->cfg->seed * 1000003u + g->index };
    for (uint64_t seq = 0; !atomic_load_explicit(&n->stop, memory_order_relaxed); seq++) {
        char key[64], payload[64];
        snprintf(key, sizeof key, "%sg%u-%u", n->cfg->name, g->index,
                 (unsigned)rng_below(&r, n->cfg->keys));
        if (rng_below(&r, 10) < 7) {
            int len = snprintf(payload, sizeof payload, "%sg%us%" PRIu64, n->cfg->name, g->index, seq);
            uint64_t due = wall_ns() + 50 * MS + rng_below(&r, 1500 * MS);
            pg_node_log(n, "B %s P\n", key);
            int rc = chime_store_put(n->s, key, strlen(key), payload, (size_t)len, due);
            if (rc == 0)
                pg_node_log(n, "P %s %s %" PRIu64 " %" PRIu64 "\n", key, payload, due, wall_ns());
            else
                pg_node_log(n, "E %s %d\n", key, rc);
        } else {
            pg_node_log(n, "B %s C\n", key);
            int rc = chime_store_cancel(n->s, key, strlen(key));
            if (rc == 0)
                pg_node_log(n, "C %s %" PRIu64 "\n", key, wall_ns());
            else if (rc == -ENOENT || rc == -EINPROGRESS)
                pg_node_log(n, "c %s %d\n", key, rc);
            else
                pg_node_log(n, "E %s %d\n", key, rc);
        }
    }
    return NULL;
}

/* The child's whole life: never returns. */
static inline void pg_node_run(const struct pg_node_cfg *cfg, int control)
{
    struct pg_node n = { .cfg = cfg };
    n.log_fd = open(cfg->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (n.log_fd < 0)
        _exit(4);
    struct chime_store_config sc;
    memset(&sc, 0, sizeof sc);
    sc.postgres = cfg->conninfo;
    sc.node = cfg->name;
    sc.lease_ns = cfg->lease_ns;
    sc.runtime.workers = 2;
    int rc = chime_store_open(&n.s, &sc, pg_node_handler, &n);
    if (rc != 0) {
        pg_node_log(&n, "E open %d\n", rc);
        _exit(5);
    }
    struct pg_gen *gens = calloc(cfg->threads, sizeof *gens);
    for (unsigned i = 0; gens && i < cfg->threads; i++) {
        gens[i] = (struct pg_gen){ &n, i, 0 };
        if (pthread_create(&gens[i].thread, NULL, pg_gen_main, &gens[i]) != 0)
            _exit(6);
    }
    int stopped = 0;
    for (;;) {
        char c = 'x';
        ssize_t got = read(control, &c, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            c = 'x';
        if ((c == 'q' || c == 'x') && !stopped) {
            atomic_store_explicit(&n.stop, 1, memory_order_relaxed);
            for (unsigned i = 0; gens && i < cfg->threads; i++)
                pthread_join(gens[i].thread, NULL);
            stopped = 1;
        }
        if (c == 'x')
            break;
    }
    free(gens);
    rc = chime_store_close(n.s);
    if (rc != 0)
        pg_node_log(&n, "E close %d\n", rc);
    close(n.log_fd);
    _exit(rc == 0 ? 0 : 7);
}

/* The test's handle on a node child. */
struct pg_child {
    pid_t pid;
    int control;          /* the write end of its control pipe */
    char name[16];
    char log_path[300];
};

/* Fork a node. cluster: the reaper's pipe is let go in the child. */
static inline int pg_child_start(struct pg_child *c, struct pg_cluster *cluster,
                                 const struct pg_node_cfg *cfg)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        pg_cluster_forked(cluster);
        /* nothing of the parent's but our end of the pipe: not the other nodes' control pipes
         * (each must see its end of file when the test dies), not the test's connections */
        for (int fd = 3; fd < 1024; fd++)
            if (fd != fds[0])
                close(fd);
        pg_node_run(cfg, fds[0]);
    }
    close(fds[0]);
    c->pid = pid;
    c->control = fds[1];
    snprintf(c->name, sizeof c->name, "%s", cfg->name);
    snprintf(c->log_path, sizeof c->log_path, "%s", cfg->log_path);
    return 0;
}

static inline void pg_child_send(struct pg_child *c, char cmd)
{
    if (c->control >= 0 && write(c->control, &cmd, 1) != 1)
        printf("# could not send %c to %s\n", cmd, c->name);
}

/* Close the node (after 'q') and wait for it. Return: its exit status, or -1. */
static inline int pg_child_finish(struct pg_child *c)
{
    pg_child_send(c, 'x');
    close(c->control);
    c->control = -1;
    int st;
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline void pg_child_kill(struct pg_child *c)
{
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    close(c->control);
    c->control = -1;
}

#endif /* CHIME_TEST_PG_NODE_H */
