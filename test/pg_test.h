/* SPDX-License-Identifier: MIT */
/*
 * What the PostgreSQL backend's tests share besides store_util.h's recorder (which keeps each
 * firing's fence): opening a node, and reading the database directly (the tests check what chime
 * wrote against what it claims).
 */
#ifndef CHIME_TEST_PG_TEST_H
#define CHIME_TEST_PG_TEST_H

#include "pg_util.h"
#include "store/pg/pg.h"
#include "store_util.h"

/* A fresh database on c with chime's schema (shards; partitions of width_s seconds), named
 * "<tag>_<n>" with n counting up in this program: its connection string into conninfo (cap bytes)
 * and, if name is not NULL, its name (32 bytes). Every test that wants a clean database of its
 * own takes one so. */
static inline void pg_fresh_db(struct pg_cluster *c, const char *tag, unsigned shards,
                               unsigned width_s, char *conninfo, size_t cap, char *name)
{
    static int seq;
    char own[32];
    if (!name)
        name = own;
    snprintf(name, 32, "%s_%d", tag, ++seq);
    CHECK_EQ(pg_cluster_db(c, name, shards, width_s, conninfo, cap), 0);
}

/* A node's configuration on conninfo (the tests' defaults; a test may change fields before opening
 * with pg_open_config). lease_ns and horizon_ns 0: the store's defaults. */
static inline void pg_node_config(struct chime_store_config *cfg, const char *conninfo,
                                  const char *node, uint64_t lease_ns, uint64_t horizon_ns)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->postgres = conninfo;
    cfg->node = node;
    cfg->lease_ns = lease_ns;
    cfg->horizon_ns = horizon_ns;
    cfg->runtime.workers = 2;
}

/* Open; an open that could not reach the database also prints what libpq says of a connection
 * made now on the same string (chime's error code alone does not tell a refused connection from a
 * reply that came too late or a server that ended the session). */
static inline int pg_open_config(chime_store **s, const struct chime_store_config *cfg,
                                 struct recorder *r)
{
    int rc = chime_store_open(s, cfg, recorder_handler, r);
    if (rc == -ECONNREFUSED) {
        PGconn *c = PQconnectdb(cfg->postgres);
        const char *msg = PQstatus(c) == CONNECTION_OK ? "connected\n" : PQerrorMessage(c);
        printf("# open of %s: -ECONNREFUSED; a connection on the same string now: %s",
               cfg->node ? cfg->node : "(default)", msg);
        PQfinish(c);
    }
    return rc;
}

/* Open a node on conninfo with pg_node_config's configuration. */
static inline int pg_open_node(chime_store **s, const char *conninfo, const char *node,
                               struct recorder *r, uint64_t lease_ns, uint64_t horizon_ns)
{
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, node, lease_ns, horizon_ns);
    return pg_open_config(s, &cfg, r);
}

/* Put n timers "<prefix>-<i>" with the same payload, due in an hour (nothing fires). */
static inline void pg_put_far(chime_store *s, const char *prefix, int n, const void *payload,
                              size_t len)
{
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s-%d", prefix, i);
        int rc = chime_store_put(s, key, strlen(key), payload, len, wall_ns() + 3600 * SEC);
        CHECK(rc == 0, "put %s: %s", key, chime_strerror(rc));
    }
}

/* Wait until every firing s recorded is settled (lib/store/backend.h, fire): its outcome committed
 * or refused, or abandoned. A count that went below zero (settled twice) fails at once; one never
 * settled hangs here (the watchdog). */
static inline void pg_wait_settled(chime_store *s)
{
    for (unsigned i = 0; i < s->b->schema.shards; i++) {
        uint32_t n;
        while ((n = atomic_load(&s->b->shards[i].unsettled)) != 0) {
            CHECK(n < UINT32_C(1) << 31, "shard %u's unsettled firings went below zero", i);
            sleep_ms(2); /* a poll: a lane settles without telling anyone */
        }
    }
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

/* How many rows chime.pending has of key (0 or 1; more would be a key pending twice). */
static inline long long pg_pending_rows(PGconn *c, const char *key)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM chime.pending WHERE key = '%s'", key);
    return pg_value(c, sql);
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

/* Whether the server process pid waits for a lock another holds (how a test waits for a statement
 * to reach a row it has made busy: a poll on the server's lock table, not a guess at timing). */
static inline int pg_blocked(PGconn *c, int pid)
{
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT cardinality(pg_blocking_pids(%d))", pid);
    return pg_value(c, sql) > 0;
}

/* Open a transaction on c that holds key's row of chime.keys. */
static inline void pg_hold_key(PGconn *c, const char *key)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT 1 FROM chime.keys WHERE key = '%s'::bytea FOR UPDATE", key);
    CHECK(pg_command(c, "BEGIN") && pg_value(c, sql) == 1, "could not hold %s", key);
}

/* How many pending timers on conninfo have keys beginning with prefix ("<prefix>-..."). */
static inline long long pg_pending_of(const char *conninfo, const char *prefix)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM chime.pending WHERE key LIKE '%s-%%'", prefix);
    PGconn *c = pg_connect_or_die(conninfo);
    long long n = pg_value(c, sql);
    PQfinish(c);
    return n;
}

/*
 * Wait until the store is idle: no key pending in conninfo's database (every node's), and then
 * none of s's handlers running. store_wait_idle is not exact here: stats' pending is a count the
 * housekeeper takes at most every 500 ms, the first call after a quiet spell returning the last
 * (0 before any), and running drops once an outcome is queued, before its commit (backend.h, D3);
 * so it may return with an acknowledgement uncommitted or a retry still to fire. This counts as
 * house.c does (chime.pending shows the same keys, joined with their timers' rows). In this order:
 * a key stays pending until its outcome commits, so once none is, no firing can begin, and running
 * 0 after that means every handler has ended; read first, running could miss a firing whose
 * outcome committed before the count, its handler still ending. For puts already committed
 * (CHIME_SYNC_EACH, or a sync) and a database whose every timer ends: one left pending hangs here.
 */
static inline void pg_wait_idle(chime_store *s, const char *conninfo)
{
    PGconn *c = pg_connect_or_die(conninfo);
    for (struct chime_store_stats st;; sleep_ms(2)) { /* a poll: neither tells when it is idle */
        long long n = pg_value(c, "SELECT count(*) FROM chime.keys WHERE end_epoch IS NULL");
        CHECK(n >= 0, "could not count the pending keys");
        if (n > 0)
            continue;
        chime_store_stats(s, &st);
        if (st.running == 0)
            break;
    }
    PQfinish(c);
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

/* Whether the store's table holds a timer of key (pending, firing or running). Asked before the
 * recorder: a firing is recorded before its timer leaves the table. */
static inline int in_table(chime_store *s, const char *key)
{
    uint64_t hash = chime__store_hash(s, key, strlen(key));
    struct hot_stripe *st = chime__store_stripe(s, hash);
    struct hot *p, *r;
    pthread_mutex_lock(&st->lock);
    chime__store_find(st, hash, key, strlen(key), &p, &r);
    pthread_mutex_unlock(&st->lock);
    return p || r;
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
