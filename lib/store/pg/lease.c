/* SPDX-License-Identifier: MIT */
/*
 * The lease thread: this node's heartbeat, its leases, and the balance of shards between nodes.
 *
 * A ROUND, every lease / 4 (and at the instant a foreign lease expires, if this node would take
 * its shard): in one transaction, so that one now() serves it all,
 *   1. heartbeat: the node's row expires at now() + lease (a row of the same name with another
 *      token that has not expired is another process: this one fails, -EIO);
 *   2. renewal: every shard this node (owner, token) holds unexpired gets expires = now() + lease;
 *      the rows returned are the leases it holds, each in its epoch. A lease locally believed and
 *      not returned was lost (the node was paused past it, and another took it): it is dropped
 *      and the logic told (sink->revoke, which the loader thread calls: chime__pg_revoke_later
 *      says why this thread never does). A lease returned and not locally believed (it lapsed
 *      locally, e.g. the renewal came late, but the database had not expired it) is taken back
 *      in a new epoch, as an acquisition (its timers were dropped when it lapsed, and a firing of
 *      the old epoch may still be on its way to a refusal);
 *   3. the nodes alive (expires > now()) and every shard's owner and time left.
 * Then the balance: with N nodes alive, sorted by name, node i's share is shards / N, plus one if
 * i < shards mod N. Below its share, a node acquires free or expired shards; a shard left free for
 * two rounds is taken by whoever sees it, share or not (nobody else is going to). Above its share,
 * while some node is below its own, a node drains its highest shards: it stops firing them at once
 * (sink->revoke) and releases them once their firings are settled: a round later at the earliest,
 * a lease at the latest (DRAIN).
 *
 * DRAIN. A released shard's next owner fires again whatever the old one fired and had not yet
 * settled: its acknowledgement, burial or retry, committed after the release, is refused (P1), and
 * a retry's delay is lost with it. So a draining shard is released at the first round, a round
 * or more after the drain began, that finds none of its firings unsettled (pg_shard.unsettled:
 * counted by fire() before it records, counted out by the outcome's operation when the lane has
 * committed or refused it, or by abandon: at the revoke that follows the drain, for a firing
 * whose handler has not begun, lifecycle.c, once its un-record has committed or been refused,
 * backend.c, pg_abandon), and after a lease at the latest: a handler that runs
 * longer then has its outcome refused, as on a lease lost, rather than hold back the node that
 * waits for its share (test_pg_drain: a handler that outlasts a round keeps its retry's delay).
 *
 * BELIEF (P2). A renewal sent at monotonic time t makes the lease believed until t + 3/4 lease.
 * The database set expires = now() + lease with now() no earlier than t, so the belief ends at
 * least lease / 4 before the database's expiry, whatever the clocks read, as long as the two
 * clocks' rates differ by less than a quarter. The lease thread drops a belief that lapses
 * (sink->revoke) even when it cannot reach the database. A belief that lapsed is never simply
 * renewed, even when the database still shows the lease: while it was lapsed, fire() refused the
 * shard's firings and the logic dropped those timers, so the shard is taken back in a new epoch,
 * whose takeover reads them again.
 *
 * ACQUISITION is an UPDATE of the shard's row, epoch + 1, from rows locked FOR UPDATE SKIP LOCKED:
 * a row an owner statement holds FOR KEY SHARE (P1) is skipped, and taken next round. Each
 * acquisition is recorded in chime.leases, `acquired` by clock_timestamp() once the row is taken:
 * the statement's now() is its start, before it tried the row's lock, and an acknowledgement of the
 * old epoch may record its ended_at and commit in between (legitimately: it checked the row while
 * the row still said that epoch, and held it FOR KEY SHARE until its commit), which would then look
 * later than the new epoch's start. This holds for a retake and for an expired lease alike (an
 * acknowledgement checks expiry as of its statement's start, and takes ended_at after). The shards
 * acquired are registered (under own_lock) and handed to the loader, which reads their timers (P7).
 *
 * TAKEOVER TIME. A node killed with its lease renewed at database time r: its leases and heartbeat
 * expire at r + lease, at most lease after it died. The others wake at that instant (they know the
 * time left of every foreign lease from the last round) plus 2 ms, see it dead, acquire its shards
 * and read their timers, the next two seconds' first (loader.c). So its timers fire again within
 * lease + (a round trip + the read of that first chunk + a firing's commit); docs/perf.md gives the
 * measured figure. A node paused inside a transaction holds FOR KEY SHARE locks until the server
 * ends its session (idle_in_transaction_session_timeout, conn.c): add at most max(lease / 2, 1 s)
 * then.
 *
 * LOCK MODES. An owner statement (fire, ack, bury, retry) holds its shards' rows locked until it
 * commits (P1), and may wait meanwhile for the row of a key that another transaction holds: another
 * node's put in a long transaction, an operator's SELECT ... FOR UPDATE, a process paused. It locks
 * them FOR KEY SHARE, which conflicts only with FOR UPDATE. The renewal and a release update no key
 * column of the row (FOR NO KEY UPDATE, in PostgreSQL's terms), so they go on meanwhile. Found in
 * review: owner statements locked FOR SHARE, which the renewal's UPDATE queues behind; a key held
 * longer than the lease cost a live node its lease, and the shard came back in a new epoch whose
 * takeover fired its timers again (test_pg_lease). What must wait for an owner statement is a new
 * epoch, and only an acquisition begins one: it locks the rows FOR UPDATE before it updates them,
 * so it waits for (or, SKIP LOCKED, skips) every owner statement that holds one, also after
 * renewals updated the row (PostgreSQL carries KEY SHARE locks over to a row's new version across
 * updates of no key column; test_pg_lease takes the row so while an acknowledgement waits). Keep
 * that FOR UPDATE: the acquisition's UPDATE alone takes FOR NO KEY UPDATE, and would not wait. A
 * release committed while an owner statement of the released epoch holds its row lets that
 * statement commit in its epoch, before the next acquisition, which waits for it: what a drain is
 * for. The statement itself still waits for the key, and its thread (a lane, or fire()) with it, as
 * a put of that key would; the node's leases no longer do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/pg/pg.h"

#define ROUNDS_PER_LEASE 4
#define RELEASE_WAIT_NS UINT64_C(10000000000) /* close's release waits for the server: see there */

void (*chime__pg_renew_hook)(struct chime__backend *b, unsigned shard);
void (*chime__pg_release_failed_hook)(struct chime__backend *b);

struct round_state {
    uint64_t round;
    uint8_t *free_rounds; /* per shard: consecutive rounds seen free */
};

/* Believe shard's lease in epoch until `until` (lease thread; own_lock held for a registration). */
static void believe(struct pg_shard *sh, uint64_t epoch, uint64_t until)
{
    /* Readers (chime__pg_holds) load epoch, then valid_until, then epoch again, then draining: a
     * new epoch is never seen with the old epoch's deadline, nor the old with the new's. Release:
     * pairs with their acquire loads. */
    atomic_store_explicit(&sh->valid_until, 0, memory_order_release);
    atomic_store_explicit(&sh->draining, 0, memory_order_release);
    atomic_store_explicit(&sh->epoch, epoch, memory_order_release);
    atomic_store_explicit(&sh->valid_until, until, memory_order_release);
}

static void forget(struct pg_shard *sh)
{
    atomic_store_explicit(&sh->valid_until, 0, memory_order_release); /* as in believe */
    atomic_store_explicit(&sh->epoch, 0, memory_order_release);
    atomic_store_explicit(&sh->draining, 0, memory_order_release);
}

/* Register shards just acquired (or taken back) and hand them to the loader. */
static void take(struct chime__backend *b, const int32_t *shards, const int64_t *epochs, size_t n,
                 uint64_t sent)
{
    if (!n)
        return;
    uint64_t until = sent + b->lease_ns / 4 * 3;
    pthread_mutex_lock(&b->own_lock); /* a registration, then the loader reads max_until (P7) */
    for (size_t i = 0; i < n; i++)
        believe(&b->shards[shards[i]], (uint64_t)epochs[i], until);
    pthread_mutex_unlock(&b->own_lock);
    chime__pg_takeover(b, shards, epochs, n);
    atomic_fetch_add_explicit(&b->acquired, n, memory_order_relaxed); /* a statistic */
}

static void params3(struct chime__backend *b, char tok[24], char lease[24], const char *v[3])
{
    snprintf(tok, 24, "%" PRId64, b->token);
    snprintf(lease, 24, "%" PRIu64, b->lease_ns / 1000);
    v[0] = b->node;
    v[1] = tok;
    v[2] = lease;
}

/* A shard list as a text array "{1,2,3}" (malloc'ed). */
static char *int_list(const int32_t *s, size_t n)
{
    char *out = malloc(n * 12 + 3), *p = out;
    if (!out)
        return NULL;
    *p++ = '{';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, i ? ",%d" : "%d", s[i]);
    *p++ = '}';
    *p = 0;
    return out;
}

/* $1 node, $2 token, $3 shards. Not static: test_pg_lease runs it against an owner statement. */
const char chime__pg_release_sql[] =
    "UPDATE chime.shards SET owner = NULL, token = NULL, expires = now()"
    " WHERE shard = ANY($3::int4[]) AND owner = $1 AND token = $2::int8";

/* $1 node, $2 token, $3 lease (us), $4 candidate shards, $5 how many: free or expired shards, each
 * in a new epoch. Not static: test_pg_lease runs it against an owner statement. */
const char chime__pg_acquire_sql[] =
    "WITH c AS (SELECT shard FROM chime.shards WHERE shard = ANY($4::int4[])"
    " AND (owner IS NULL OR expires <= now()) ORDER BY shard LIMIT $5::int8"
    " FOR UPDATE SKIP LOCKED),"
    " u AS (UPDATE chime.shards s SET owner = $1, token = $2::int8, epoch = s.epoch + 1,"
    " expires = now() + $3::int8 * interval '1 microsecond', since = now() FROM c"
    " WHERE s.shard = c.shard RETURNING s.shard, s.epoch),"
    " h AS (INSERT INTO chime.leases (shard, epoch, owner, acquired)"
    " SELECT shard, epoch, $1, clock_timestamp() FROM u)"
    " SELECT shard, epoch FROM u";

static int release(struct chime__backend *b, const int32_t *shards, size_t n)
{
    char tok[24], lease[24], *list = int_list(shards, n);
    const char *v[4];
    params3(b, tok, lease, v);
    v[2] = list;
    if (!list)
        return -ENOMEM;
    int rc = chime__pg_exec_text(&b->lease_conn, chime__pg_release_sql, 3, v, NULL);
    free(list);
    if (rc == PG_OK) {
        for (size_t i = 0; i < n; i++)
            forget(&b->shards[shards[i]]);
        atomic_fetch_add_explicit(&b->released, n, memory_order_relaxed); /* a statistic */
    }
    return rc;
}

/* Acquire up to `want` of the candidate shards, each in a new epoch: free or expired ones, or
 * (retake) ones this node still holds in the database but no longer believes in. */
static int acquire(struct chime__backend *b, const int32_t *cand, size_t ncand, size_t want,
                   int retake)
{
    char tok[24], lease[24], limit[24], *list = int_list(cand, ncand);
    const char *v[5];
    params3(b, tok, lease, v);
    snprintf(limit, sizeof limit, "%zu", want);
    v[3] = list;
    v[4] = limit;
    if (!list)
        return -ENOMEM;
    PGresult *r = NULL;
    uint64_t sent = chime__pg_mono();
    int rc = chime__pg_exec_text(
        &b->lease_conn,
        retake ? "WITH c AS (SELECT shard FROM chime.shards WHERE shard = ANY($4::int4[])"
                 " AND owner = $1 AND token = $2::int8 AND expires > now() ORDER BY shard"
                 " LIMIT $5::int8 FOR UPDATE SKIP LOCKED),"
                 " u AS (UPDATE chime.shards s SET owner = $1, token = $2::int8,"
                 " epoch = s.epoch + 1, expires = now() + $3::int8 * interval '1 microsecond',"
                 " since = now() FROM c WHERE s.shard = c.shard RETURNING s.shard, s.epoch),"
                 " h AS (INSERT INTO chime.leases (shard, epoch, owner, acquired)"
                 " SELECT shard, epoch, $1, clock_timestamp() FROM u)"
                 " SELECT shard, epoch FROM u"
               : chime__pg_acquire_sql,
        5, v, &r);
    free(list);
    if (rc != PG_OK)
        return rc;
    size_t n = (size_t)PQntuples(r);
    int32_t *s = malloc((n ? n : 1) * sizeof *s);
    int64_t *e = malloc((n ? n : 1) * sizeof *e);
    for (size_t i = 0; s && e && i < n; i++) {
        s[i] = (int32_t)atoi(PQgetvalue(r, (int)i, 0));
        e[i] = strtoll(PQgetvalue(r, (int)i, 1), NULL, 10);
    }
    PQclear(r);
    if (s && e)
        take(b, s, e, n, sent);
    else
        chime__pg_fail(b, -ENOMEM);
    free(s);
    free(e);
    return PG_OK;
}

/* Drop every belief that lapsed (lease thread). Return: whether one did. */
static int drop_lapsed(struct chime__backend *b)
{
    uint64_t now = chime__pg_mono();
    int dropped = 0;
    for (unsigned s = 0; s < b->schema.shards; s++) {
        struct pg_shard *sh = &b->shards[s];
        if (atomic_load_explicit(&sh->epoch, memory_order_relaxed) &&
            atomic_load_explicit(&sh->valid_until, memory_order_relaxed) <= now) {
            forget(sh);
            dropped = 1;
        }
    }
    return dropped;
}

/* One round (see above). *wake: when the next is due (monotonic). */
static int lease_round(struct chime__backend *b, struct round_state *rs, uint64_t *wake)
{
    struct pg_conn *pc = &b->lease_conn;
    unsigned S = b->schema.shards;
    char tok[24], lease[24];
    const char *v[3];
    params3(b, tok, lease, v);
    PGresult *hb = NULL, *renewed = NULL, *nodes = NULL, *view = NULL;
    uint64_t sent = chime__pg_mono();
    *wake = sent + b->lease_ns / ROUNDS_PER_LEASE;
    int rc = chime__pg_exec_text(pc, "BEGIN", 0, NULL, NULL);
    if (rc == PG_OK)
        rc = chime__pg_exec_text(
                pc,
                "INSERT INTO chime.nodes AS n (node, token, expires)"
                " VALUES ($1, $2::int8, now() + $3::int8 * interval '1 microsecond')"
                " ON CONFLICT (node) DO UPDATE SET token = excluded.token,"
                " expires = excluded.expires"
                " WHERE n.token = excluded.token OR n.expires <= now() RETURNING 1",
                3, v, &hb);
    if (rc == PG_OK)
        rc = chime__pg_exec_text(
                pc,
                "UPDATE chime.shards SET expires = now() + $3::int8 * interval '1 microsecond'"
                " WHERE owner = $1 AND token = $2::int8 AND expires > now()"
                " RETURNING shard, epoch",
                3, v, &renewed);
    if (rc == PG_OK)
        rc = chime__pg_exec_text(
                pc, "SELECT node FROM chime.nodes WHERE expires > now() ORDER BY node", 0,
                NULL, &nodes);
    if (rc == PG_OK)
        rc = chime__pg_exec_text(
                pc,
                "SELECT shard, owner, owner IS NULL OR expires <= now(),"
                " (extract(epoch FROM greatest(expires, now()) - now()) * 1e6)::int8"
                " FROM chime.shards ORDER BY shard",
                0, NULL, &view);
    if (rc == PG_OK)
        rc = chime__pg_exec_text(pc, "COMMIT", 0, NULL, NULL);
    if (rc == PG_OK && PQntuples(hb) != 1 && !b->lease_started) {
        /* Open's first round: another process opening under this name took it since open's
         * check (both passed it). -EBUSY, as the check says, not a failure (found in review:
         * -EIO, with a message on stderr). */
        rc = -EBUSY;
    } else if (rc == PG_OK && PQntuples(hb) != 1) {
        fprintf(stderr, "chime: node name %s is taken by another live process\n", b->node);
        chime__pg_fail(b, -EIO);
        rc = PG_FATAL;
    } else if (rc == PG_OK) {
        b->beat_sent = sent; /* the node's row and leases expire lease_ns after it, or later */
    }
    int32_t *list = malloc(S * sizeof *list);
    if (rc == PG_OK && !list)
        rc = -ENOMEM;
    int revoke = 0;
    if (rc == PG_OK) {
        /* 2. renewal: what the database says this node holds */
        uint64_t *db = calloc(S, sizeof *db);
        size_t nback = 0;
        for (int i = 0; db && i < PQntuples(renewed); i++) {
            unsigned s = (unsigned)atoi(PQgetvalue(renewed, i, 0));
            if (s < S)
                db[s] = strtoull(PQgetvalue(renewed, i, 1), NULL, 10);
        }
        for (unsigned s = 0; db && s < S; s++) {
            struct pg_shard *sh = &b->shards[s];
            uint64_t mine = atomic_load_explicit(&sh->epoch, memory_order_relaxed);
            uint64_t until = atomic_load_explicit(&sh->valid_until, memory_order_relaxed);
            int extended = 0;
            if (mine && db[s] == mine && until > chime__pg_mono()) {
                if (chime__pg_renew_hook)
                    chime__pg_renew_hook(b, s);
                /* Fails if a reader saw the belief lapse since the check and made the lapse final
                 * (chime__pg_holds set it to 0): then it is retaken below, as a lapse noticed.
                 * release: pairs with chime__pg_holds's acquire loads. */
                extended = atomic_compare_exchange_strong_explicit(
                        &sh->valid_until, &until, sent + b->lease_ns / 4 * 3, memory_order_release,
                        memory_order_relaxed);
            }
            if (extended) {
                /* renewed: the same epoch, believed for another three quarters of the lease */
            } else if (mine && db[s] == mine) {
                /* The belief lapsed before this renewal came (a slow round): meanwhile fire()
                 * refused the shard's firings and the logic dropped them, and nothing would arm
                 * them again in this epoch. Retake it, in a new epoch, like a lapse noticed. */
                forget(sh);
                revoke = 1;
                list[nback++] = (int32_t)s;
            } else if (mine) {
                forget(sh); /* lost */
                revoke = 1;
                atomic_fetch_add_explicit(&b->lost, 1, memory_order_relaxed);
            } else if (db[s]) {
                list[nback++] = (int32_t)s; /* lapsed here, still ours there: take it back */
            }
        }
        free(db);
        if (revoke)
            chime__pg_revoke_later(b);
        /* In a new epoch, not the old one: the logic may still hold a firing of the old epoch
         * that fire() is about to refuse (the lapse made its fence invalid), and it ignores an
         * arm of a timer it holds with the same fence; under a newer fence the arm replaces it
         * (backend.h, refs). Acknowledgements still in flight in the old epoch are refused, and
         * their timers fire again: at least once. */
        if (nback)
            rc = acquire(b, list, nback, nback, 1);

        /* 3. the balance */
        int alive = PQntuples(nodes), me = -1;
        for (int i = 0; i < alive; i++)
            if (!strcmp(PQgetvalue(nodes, i, 0), b->node))
                me = i;
        if (me < 0 || alive == 0)
            alive = 1, me = 0;
        size_t share = S / (unsigned)alive + ((unsigned)me < S % (unsigned)alive);
        size_t held = 0, nfree = 0, orphans = 0, below = 0;
        uint64_t soonest = UINT64_MAX;
        for (unsigned s = 0; s < S; s++)
            held += chime__pg_epoch_of(b, s) != 0;
        for (int i = 0; i < PQntuples(view); i++) {
            unsigned s = (unsigned)atoi(PQgetvalue(view, i, 0));
            int is_free = PQgetvalue(view, i, 2)[0] == 't';
            if (s >= S)
                continue;
            rs->free_rounds[s] = is_free ? (uint8_t)(rs->free_rounds[s] < 9 ? rs->free_rounds[s] + 1 : 9) : 0;
            if (is_free)
                list[nfree++] = (int32_t)s;
            orphans += is_free && rs->free_rounds[s] >= 2;
            long long left = atoll(PQgetvalue(view, i, 3));
            if (!is_free && strcmp(PQgetvalue(view, i, 1), b->node) && left > 0 &&
                (uint64_t)left * 1000 < soonest)
                soonest = (uint64_t)left * 1000; /* a foreign lease: when it would expire */
        }
        /* Is some live node below its share? (counts of the shards each live node holds) */
        for (int i = 0; i < PQntuples(nodes) && !below; i++) {
            size_t count = 0, its = S / (unsigned)alive + ((unsigned)i < S % (unsigned)alive);
            for (int k = 0; k < PQntuples(view); k++)
                count += PQgetvalue(view, k, 2)[0] != 't' &&
                         !strcmp(PQgetvalue(view, k, 1), PQgetvalue(nodes, i, 0));
            below = count < its;
        }
        size_t want = held < share ? share - held : 0;
        if (orphans > want)
            want = orphans;
        /* relaxed: a flag alone. Not once close has begun: it would hand the shards back at once */
        if (rc == PG_OK && want && nfree &&
            !atomic_load_explicit(&b->closing, memory_order_relaxed))
            rc = acquire(b, list, nfree, want, 0);
        /* Wake just after the soonest foreign lease would expire, whatever this node holds: if
         * its owner died, this node's share grows then (found in review: a node at its share
         * slept its full lease / 4, and took a dead node's shards that much late). A live owner
         * renews long before, so that wake-up is later than the next round and never taken. */
        if (soonest != UINT64_MAX) {
            uint64_t at = chime__pg_mono() + soonest + 2000000; /* just after it expires */
            if (at < *wake)
                *wake = at;
        }
        /* Release what drained for a round, once its firings are settled (DRAIN); drain the excess
         * if someone is below its share. */
        size_t nrel = 0, ndrain = 0;
        for (unsigned s = 0; s < S; s++) {
            struct pg_shard *sh = &b->shards[s];
            if (!atomic_load_explicit(&sh->draining, memory_order_relaxed) ||
                sh->drain_since >= rs->round)
                continue;
            /* seq_cst: chime__pg_holds says why; it also acquires the settling decrements (their
             * outcomes committed, or refused, before them) */
            uint32_t unsettled = atomic_load_explicit(&sh->unsettled, memory_order_seq_cst);
            if (unsettled == 0 || rs->round - sh->drain_since >= ROUNDS_PER_LEASE)
                list[nrel++] = (int32_t)s;
        }
        if (rc == PG_OK && nrel)
            rc = release(b, list, nrel);
        for (unsigned s = S; rc == PG_OK && below && held > share && s-- > 0;) {
            struct pg_shard *sh = &b->shards[s];
            if (chime__pg_epoch_of(b, s)) {
                sh->drain_since = rs->round;
                /* seq_cst: pairs with chime__pg_holds (which says why) */
                atomic_store_explicit(&sh->draining, 1, memory_order_seq_cst);
                held--;
                ndrain++;
            }
        }
        if (ndrain)
            chime__pg_revoke_later(b);
    }
    PQclear(hb);
    PQclear(renewed);
    PQclear(nodes);
    PQclear(view);
    free(list);
    if (rc != PG_OK && rc != PG_LOST && pc->c)
        chime__pg_exec_text(pc, "ROLLBACK", 0, NULL, NULL);
    rs->round++;
    atomic_fetch_add_explicit(&b->rounds, 1, memory_order_relaxed); /* a statistic */
    return rc;
}

static void *lease_main(void *arg)
{
    struct chime__backend *b = arg;
    struct round_state rs = { 1, calloc(b->schema.shards, 1) };
    pthread_mutex_lock(&b->lease_lock);
    while (!atomic_load_explicit(&b->stop, memory_order_acquire) && rs.free_rounds) {
        pthread_mutex_unlock(&b->lease_lock);
        uint64_t wake = chime__pg_mono() + b->lease_ns / 8;
        if (!b->lease_conn.c && chime__pg_connect(&b->lease_conn) != 0)
            chime__pg_disconnect(&b->lease_conn); /* unreachable: beliefs lapse on their own */
        else if (lease_round(b, &rs, &wake) == PG_LOST)
            chime__pg_disconnect(&b->lease_conn);
        if (drop_lapsed(b))
            chime__pg_revoke_later(b);
        pthread_mutex_lock(&b->lease_lock);
        while (!atomic_load_explicit(&b->stop, memory_order_acquire) && chime__pg_mono() < wake) {
            struct timespec ts = { (time_t)(wake / 1000000000u), (long)(wake % 1000000000u) };
            pthread_cond_timedwait(&b->lease_cond, &b->lease_lock, &ts);
        }
    }
    pthread_mutex_unlock(&b->lease_lock);
    free(rs.free_rounds);
    return NULL;
}

int chime__pg_lease_start(struct chime__backend *b)
{
    b->lease_conn = (struct pg_conn){ .conninfo = b->conninfo, .role = "lease", .node = b->node,
                                      .lease_ns = b->lease_ns };
    int rc = chime__pg_connect(&b->lease_conn);
    if (rc != 0)
        return rc == PG_LOST ? -ECONNREFUSED : rc;
    /* The first round here, so that a node alone takes its shards before open returns and the
     * logic's first load covers them. */
    struct round_state rs = { 0, calloc(b->schema.shards, 1) };
    uint64_t wake;
    rc = rs.free_rounds ? lease_round(b, &rs, &wake) : -ENOMEM;
    free(rs.free_rounds);
    if (rc != 0)
        return rc == PG_LOST ? -ECONNREFUSED : pg_rc_is_db(rc) ? -EIO : rc;
    if (chime__pg_error(b))
        return chime__pg_error(b);
    if (pthread_create(&b->lease_thread, NULL, lease_main, b) != 0)
        return -ECHILD;
    b->lease_started = 1;
    return 0;
}

void chime__pg_lease_stop(struct chime__backend *b)
{
    if (!b->lease_started)
        return;
    pthread_mutex_lock(&b->lease_lock);
    pthread_cond_broadcast(&b->lease_cond); /* b->stop is set */
    pthread_mutex_unlock(&b->lease_lock);
    pthread_join(b->lease_thread, NULL);
    b->lease_started = 0;
}

/* At close (backend.c), with every other thread stopped: one statement releases every shard the
 * database says is this node's (those whose lease it stopped believing too: nothing of it runs any
 * more), deletes its row, and its lanes' marks of tries (batch.c, resolve; not the fences, kept a
 * day: statements.h, PG_SQL_MARKS_TRIM). Released, the shards go to the others now and the node's
 * name is free for its next process (open's -EBUSY), rather than lease_ns after its last heartbeat.
 * So a connection found broken at once (cut while idle: a server restart, a failover) is replaced,
 * and a server that refuses connections (down, or "starting up" during a restart: 57P03) is tried
 * again with the reconnects' back-off (test_pg_close 5), for RELEASE_WAIT_NS at most (a
 * restart's time; a close during a longer outage must not wait it out: test_pg_cuts 9), and not
 * past lease_ns after the last heartbeat that committed (all of it has lapsed then). A server that
 * went silent (a statement or a connect that failed only after a second or more) is not: close
 * waits for a stuck server once, not again and again. */
void chime__pg_lease_release_all(struct chime__backend *b)
{
    static const char sql[] =
            "WITH s AS (UPDATE chime.shards SET owner = NULL, token = NULL, expires = now()"
            " WHERE owner = $1 AND token = $2::int8),"
            " m AS (DELETE FROM chime.marks WHERE token = $2::int8 AND NOT fence)"
            " DELETE FROM chime.nodes WHERE node = $1 AND token = $2::int8";
    const uint64_t silent = UINT64_C(1000000000), lapse = b->beat_sent + b->lease_ns;
    const uint64_t wait_end = chime__pg_mono() + RELEASE_WAIT_NS;
    const uint64_t until = lapse < wait_end ? lapse : wait_end;
    char tok[24], lease[24];
    const char *v[3];
    params3(b, tok, lease, v);
    long delay_ms = 10;
    for (int tries = 0;; tries++) {
        if (tries && chime__pg_mono() >= until)
            break; /* waited long enough, or everything it would release has lapsed */
        uint64_t began = chime__pg_mono();
        int rc = b->lease_conn.c ? PG_OK : chime__pg_connect_or_wait(&b->lease_conn, &delay_ms);
        if (rc == PG_OK)
            rc = chime__pg_exec_text(&b->lease_conn, sql, 2, v, NULL);
        if (rc != PG_LOST)
            break;
        if (chime__pg_release_failed_hook)
            chime__pg_release_failed_hook(b);
        if (chime__pg_mono() - began >= silent)
            break;
        chime__pg_disconnect(&b->lease_conn);
    }
    for (unsigned s = 0; s < b->schema.shards; s++)
        forget(&b->shards[s]);
}
