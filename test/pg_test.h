/* SPDX-License-Identifier: MIT */
/*
 * What the PostgreSQL backend's tests share: a recorder of firings that keeps each firing's fence,
 * opening a node, and reading the database directly (the tests check what chime wrote against what
 * it claims).
 */
#ifndef CHIME_TEST_PG_TEST_H
#define CHIME_TEST_PG_TEST_H

#include "pg_util.h"
#include "store_util.h"

struct pg_firing {
    char key[64];
    char payload[64];
    uint64_t due, at, fence;
    uint32_t attempt;
};

struct pg_rec {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct pg_firing *f;
    size_t n, cap;
    _Atomic int early;
    /* What the handler returns for a firing (NULL: 0). May block (the tests hold handlers). */
    int64_t (*reply)(struct pg_rec *r, const struct chime_fire *fire);
    void *user;
};

static inline void pg_rec_init(struct pg_rec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
}

static inline void pg_rec_free(struct pg_rec *r)
{
    free(r->f);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
}

static inline int64_t pg_rec_handler(void *ctx, const struct chime_fire *fire)
{
    struct pg_rec *r = ctx;
    struct pg_firing f;
    memset(&f, 0, sizeof f);
    f.at = wall_ns();
    if (f.at < fire->due_ns)
        atomic_store(&r->early, 1);
    memcpy(f.key, fire->key, fire->key_len < 63 ? fire->key_len : 63);
    memcpy(f.payload, fire->payload, fire->payload_len < 63 ? fire->payload_len : 63);
    f.due = fire->due_ns;
    f.attempt = fire->attempt;
    f.fence = fire->fence;
    pthread_mutex_lock(&r->lock);
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->f = realloc(r->f, r->cap * sizeof *r->f);
    }
    r->f[r->n++] = f;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return r->reply ? r->reply(r, fire) : 0;
}

static inline void pg_rec_wait(struct pg_rec *r, size_t n)
{
    pthread_mutex_lock(&r->lock);
    while (r->n < n)
        pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

/* Wait until key has fired at least n times; the last firing into *out. */
static inline void pg_rec_wait_key(struct pg_rec *r, const char *key, size_t n,
                                   struct pg_firing *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->lock);
    for (;;) {
        size_t c = 0;
        for (size_t i = 0; i < r->n; i++)
            if (!strcmp(r->f[i].key, key)) {
                c++;
                if (out)
                    *out = r->f[i];
            }
        if (c >= n)
            break;
        pthread_cond_wait(&r->cond, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
}

static inline size_t pg_rec_count_key(struct pg_rec *r, const char *key)
{
    size_t c = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        c += !strcmp(r->f[i].key, key);
    pthread_mutex_unlock(&r->lock);
    return c;
}

/* Open a node on conninfo. lease_ns and horizon_ns 0: the defaults. */
static inline int pg_open_node(chime_store **s, const char *conninfo, const char *node,
                               struct pg_rec *r, uint64_t lease_ns, uint64_t horizon_ns)
{
    struct chime_store_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.postgres = conninfo;
    cfg.node = node;
    cfg.lease_ns = lease_ns;
    cfg.horizon_ns = horizon_ns;
    cfg.runtime.workers = 2;
    return chime_store_open(s, &cfg, pg_rec_handler, r);
}

/* ---- the database, directly ---- */

static inline PGconn *pg_connect_or_die(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        printf("# %s", PQerrorMessage(c));
        exit(1);
    }
    return c;
}

/* The first value of a query, as a number (-1 if none or on error). */
static inline long long pg_value(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long long v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = atoll(PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK)
        printf("# %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return v;
}

static inline int pg_command(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        printf("# %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

/* A key (text) of the given shard, numbered from `from` upwards: "<prefix>-<n>". */
static inline void pg_key_in_shard(char *out, size_t n, const char *prefix, unsigned shard,
                                   unsigned shards)
{
    for (unsigned i = 0;; i++) {
        snprintf(out, n, "%s-%u", prefix, i);
        if (chime__pg_shard_of(out, strlen(out), shards) == shard)
            return;
    }
}

/* The shard's owner in the database (into out) and epoch; 0 if it has none unexpired. */
static inline long long pg_owner(PGconn *c, unsigned shard, char *out, size_t n)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT epoch, owner FROM chime.shards WHERE shard = %u AND owner IS NOT NULL"
             " AND expires > now()",
             shard);
    PGresult *r = PQexec(c, sql);
    long long e = 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        e = atoll(PQgetvalue(r, 0, 0));
        if (out)
            snprintf(out, n, "%s", PQgetvalue(r, 0, 1));
    }
    PQclear(r);
    return e;
}

/* main() of a test file: start the cluster (or skip the whole file, "1..0 # SKIP", when the
 * server's binaries are not installed), run the tests, stop and remove the cluster. A failing
 * test exits at once; the reaper (pg_util.h) removes the cluster then. */
static inline int pg_tests_main(struct pg_cluster *c, const struct tap_test *tests, int n)
{
    int rc = pg_cluster_start(c);
    if (rc == PG_SKIP) {
        printf("1..0 # SKIP PostgreSQL is not installed\n");
        return 0;
    }
    if (rc != 0) {
        printf("Bail out! could not start a PostgreSQL cluster\n");
        return 1;
    }
    rc = tap_run(tests, n);
    pg_cluster_stop(c);
    return rc;
}

#endif /* CHIME_TEST_PG_TEST_H */
