/* SPDX-License-Identifier: MIT */
/*
 * The housekeeper thread, every HOUSE_NS:
 *   - partitions of chime.timers for the next stretch of time exist before puts need them (a put
 *     that finds none creates it itself: lanes.c; this keeps that off the common path): those of
 *     the puts due before a node's `loaded` (notify_ns) and two widths more, AHEAD_MAX widths at
 *     most (see ahead_until);
 *   - settled partitions are dropped (schema.c, SETTLED PARTITIONS), by one node at a time (an
 *     advisory lock), every RETIRE_EVERY rounds;
 *   - this node's marks of tries (batch.c, resolve) but each lane's latest are deleted, every
 *     round (fences stay: statements.h, PG_SQL_MARKS_TRIM);
 *   - the lease history older than 7 days, the rows of nodes dead for a day and the marks a day
 *     old (fences, and the marks of nodes that did not close) are deleted, at a node's first
 *     round and every CLEAN_EVERY rounds (only every 30 min of a node's life before: where no
 *     node lives that long, a crash loop or short jobs, they stayed for ever; found in review);
 *   - the counts chime_store_stats reports, when someone has asked for them in the last 10 s
 *     (a count reads every pending key: not something to do unasked), at most every 500 ms.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "store/pg/pg.h"
#include "store/pg/statements.h"

#define HOUSE_NS UINT64_C(2000000000)
#define RETIRE_EVERY 15  /* rounds: 30 s */
#define CLEAN_EVERY 900  /* rounds: 30 min */
#define STATS_WINDOW_NS UINT64_C(10000000000)
#define STATS_MIN_NS UINT64_C(500000000) /* counts at most every 500 ms, however often asked */
#define AHEAD_MAX 64     /* partitions made ahead of now at most (see ahead_until) */

/* The end of the stretch whose partitions are made ahead of puts. Bounded: the horizon, which
 * notify_ns follows, may be long beside the width (a day of partitions of a minute), or UINT64_MAX
 * (everything in memory), and open made a partition per width of it before returning, for years
 * of them (found in review; test_pg_partitions). A put beyond makes its own (lanes.c), once per
 * width. Saturates, like every due time, at INT64_MAX. */
static uint64_t ahead_until(const struct chime__backend *b, uint64_t now)
{
    uint64_t w = b->schema.partition_ns, ahead = AHEAD_MAX * w;
    if (w > (uint64_t)INT64_MAX / AHEAD_MAX)
        ahead = (uint64_t)INT64_MAX;
    if (b->notify_ns / w < AHEAD_MAX - 2)
        ahead = b->notify_ns + 2 * w;
    return ahead > (uint64_t)INT64_MAX - now ? (uint64_t)INT64_MAX : now + ahead;
}

static int retire(struct chime__backend *b)
{
    PGresult *r = NULL;
    int rc = chime__pg_run(&b->house_conn,
                           "SELECT pg_try_advisory_lock(hashtext('chime.retire'))", &r);
    int locked = rc == PG_OK && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!locked)
        return rc;
    unsigned dropped = 0;
    rc = chime__pg_partitions_retire(&b->house_conn, &b->schema, chime__pg_wall(), &dropped);
    if (rc != PG_LOST)
        chime__pg_run(&b->house_conn, "SELECT pg_advisory_unlock(hashtext('chime.retire'))", NULL);
    return rc;
}

static int count(struct chime__backend *b)
{
    PGresult *r = NULL;
    int rc = chime__pg_run(&b->house_conn,
                           "SELECT (SELECT count(*) FROM chime.keys WHERE end_epoch IS NULL),"
                           " (SELECT count(*) FROM chime.dead),"
                           " (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)"
                           " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                           " WHERE n.nspname = 'chime' AND c.relkind = 'r')",
                           &r);
    if (rc == PG_OK) {
        atomic_store_explicit(&b->count_pending, strtoull(PQgetvalue(r, 0, 0), NULL, 10),
                              memory_order_relaxed); /* statistics: no ordering */
        atomic_store_explicit(&b->count_dead, strtoull(PQgetvalue(r, 0, 1), NULL, 10),
                              memory_order_relaxed);
        atomic_store_explicit(&b->count_bytes, strtoull(PQgetvalue(r, 0, 2), NULL, 10),
                              memory_order_relaxed);
    }
    PQclear(r);
    return rc;
}

/* This node's marks of tries but each lane's latest (statements.h, PG_SQL_MARKS_TRIM). */
static int trim_marks(struct chime__backend *b)
{
    char tok[24];
    snprintf(tok, sizeof tok, "%" PRId64, b->token);
    const char *v[] = { tok };
    return chime__pg_exec_text(&b->house_conn, PG_SQL_MARKS_TRIM, 1, v, NULL);
}

static int house_round(struct chime__backend *b, uint64_t round, uint64_t *ensured)
{
    uint64_t now = chime__pg_wall(), w = b->schema.partition_ns;
    uint64_t from = now - w, to = ahead_until(b, now);
    int rc = PG_OK;
    if (to / w != *ensured) {
        rc = chime__pg_partitions_ensure(&b->house_conn, &b->schema, from, to);
        if (rc == PG_OK)
            *ensured = to / w;
    }
    if (rc == PG_OK)
        rc = trim_marks(b);
    if (rc == PG_OK && round % RETIRE_EVERY == RETIRE_EVERY - 1)
        rc = retire(b);
    if (rc == PG_OK && round % CLEAN_EVERY == 0)
        rc = chime__pg_run(&b->house_conn,
                           "DELETE FROM chime.leases WHERE acquired < now() - interval '7 days';"
                           " DELETE FROM chime.nodes WHERE expires < now() - interval '1 day';"
                           " DELETE FROM chime.marks WHERE at < now() - interval '1 day'",
                           NULL);
    return rc;
}

/* Count, if someone asked in the last STATS_WINDOW_NS and the last count is STATS_MIN_NS old. */
static int maybe_count(struct chime__backend *b, uint64_t *counted_at)
{
    uint64_t now = chime__pg_mono();
    uint64_t asked = atomic_load_explicit(&b->stats_wanted, memory_order_relaxed);
    if (!asked || now - asked >= STATS_WINDOW_NS || now - *counted_at < STATS_MIN_NS)
        return PG_OK;
    *counted_at = now;
    return count(b);
}

static void *house_main(void *arg)
{
    struct chime__backend *b = arg;
    uint64_t round = 0, ensured = 0, next_round = 0, counted_at = 0;
    pthread_mutex_lock(&b->lease_lock);
    while (!atomic_load_explicit(&b->stop, memory_order_acquire)) { /* pairs with house_stop */
        pthread_mutex_unlock(&b->lease_lock);
        if (!b->house_conn.c && chime__pg_connect(&b->house_conn) != 0)
            chime__pg_disconnect(&b->house_conn);
        int rc = b->house_conn.c ? PG_OK : PG_LOST;
        if (rc == PG_OK && chime__pg_mono() >= next_round) {
            rc = house_round(b, round++, &ensured);
            next_round = chime__pg_mono() + HOUSE_NS;
        }
        if (rc == PG_OK)
            rc = maybe_count(b, &counted_at);
        if (rc == PG_LOST) {
            chime__pg_disconnect(&b->house_conn);
            next_round = chime__pg_mono() + HOUSE_NS; /* try again then */
        } else if (rc == PG_FATAL) {
            chime__pg_fail(b, -EIO);
        }
        /* Until the next round; a stats() call in between wakes us (it broadcasts lease_cond) so
         * that its counts come soon, but they are counted at most every STATS_MIN_NS: a caller
         * polling stats must not keep a count of every pending key running in the database. */
        pthread_mutex_lock(&b->lease_lock);
        uint64_t asked = atomic_load_explicit(&b->stats_wanted, memory_order_relaxed);
        while (!atomic_load_explicit(&b->stop, memory_order_acquire)) {
            uint64_t now = chime__pg_mono(), until = next_round;
            if (atomic_load_explicit(&b->stats_wanted, memory_order_relaxed) != asked) {
                if (now >= counted_at + STATS_MIN_NS)
                    break;
                if (counted_at + STATS_MIN_NS < until)
                    until = counted_at + STATS_MIN_NS;
            }
            if (now >= until)
                break;
            struct timespec ts = { (time_t)(until / 1000000000u), (long)(until % 1000000000u) };
            pthread_cond_timedwait(&b->lease_cond, &b->lease_lock, &ts);
        }
    }
    pthread_mutex_unlock(&b->lease_lock);
    return NULL;
}

int chime__pg_house_start(struct chime__backend *b)
{
    b->house_conn = (struct pg_conn){ .conninfo = b->conninfo, .role = "house", .node = b->node,
                                      .lease_ns = b->lease_ns };
    int rc = chime__pg_connect(&b->house_conn);
    if (rc != 0)
        return rc == PG_LOST ? -ECONNREFUSED : rc;
    do { /* PG_RETRY: another session's reader held chime.timers for a moment (schema.c) */
        uint64_t now = chime__pg_wall();
        rc = chime__pg_partitions_ensure(&b->house_conn, &b->schema, now - b->schema.partition_ns,
                                         ahead_until(b, now));
    } while (rc == PG_RETRY);
    if (rc != PG_OK)
        return rc == PG_LOST ? -ECONNREFUSED : -EIO;
    if (pthread_create(&b->house_thread, NULL, house_main, b) != 0)
        return -ECHILD;
    b->house_started = 1;
    return 0;
}

void chime__pg_house_stop(struct chime__backend *b)
{
    if (b->house_started) {
        pthread_mutex_lock(&b->lease_lock);
        pthread_cond_broadcast(&b->lease_cond); /* b->stop is set */
        pthread_mutex_unlock(&b->lease_lock);
        pthread_join(b->house_thread, NULL);
        b->house_started = 0;
    }
    chime__pg_disconnect(&b->house_conn);
}
