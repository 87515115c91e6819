/* SPDX-License-Identifier: MIT */
/*
 * The owner's side: recording firings (fire), and reading the timers of owned shards (load, and
 * the loader's takeovers and polls, which share the reader below).
 *
 * FIRE (D2, P1). One statement, in a transaction of its own (so it has committed, synchronously,
 * when its result arrives): each firing's row gets attempt + 1 and fire_epoch = the firing's epoch,
 * if the version is still pending and the firing's (shard, epoch) is a lease this node holds, by
 * the database's clock, locked FOR KEY SHARE until the commit (lease.c, LOCK MODES: the lease's
 * renewal does not wait for it, the next acquisition does). A firing the statement does not return
 * is -ESTALE: replaced, cancelled, or its lease lapsed. The statement is idempotent (attempt is
 * set, not incremented), so a connection lost before its result simply runs it again, for the
 * firings whose lease this node still believes in; once a lease lapses locally its firings are
 * -ESTALE, so fire never waits longer than a lease for a database that is away.
 * A firing already recorded in the same epoch with that attempt or a later one is -ESTALE too: the
 * logic holds it from a read whose snapshot came before that record (reads skip what this epoch
 * fired, but only as their snapshot has it), handed over after the handler returned and the timer
 * left the table, while its acknowledgement still waited in a lane. The logic counts attempts up
 * from what it read, and after each recorded firing from what was recorded, so it never asks for
 * the same (version, attempt) twice in an epoch itself; only the statement's own run again after
 * a lost connection does, and that one allows an equal attempt (the record may be its own). Found
 * in review: a poll's snapshot taken while a firing was uncommitted armed the timer again once its
 * handler had returned, and the handler ran twice, attempt 1 both times (test_pg_loader).
 * The expiry is checked on the row the statement locked, against the statement's start:
 * s.expires > statement_timestamp() in the join (statements.h: the same for ack, bury and retry).
 * A row that only renewals changed since the snapshot is locked FOR KEY SHARE as the snapshot has
 * it, with no wait and no second look (PostgreSQL looks again only after a conflicting lock: an
 * acquisition's), so its expiry may be one that renewals have moved on since. Against the
 * statement's start that refuses nothing the node keeps: in an epoch it keeps, every moment is
 * covered by a belief resting on renewals already committed, each ending a quarter lease before
 * the expiry it wrote (P2), so the row a statement's snapshot shows is unexpired at its start,
 * however long the statement then waits for a key's row that another transaction holds. A row
 * expired at the start means the belief had lapsed, and a lapse is followed by a retake in a new
 * epoch, whose takeover reads the timer again. Not clock_timestamp(): when the check runs is the
 * plan's choice: PostgreSQL 15 plans a batch of a few keys as a nested loop with the locked shards
 * outer, so that a shard's row is locked and checked only after the waits for the keys of the
 * shards before it, and one of hundreds as a hash join that locks and checks every shard first
 * (another plan could check it again for each key). A check run past the expiry of the row as
 * locked would refuse a firing in an epoch the node goes on holding, its timer never armed again
 * in it. Against the statement's start it means the same whenever it runs (test_pg_lease #7). The
 * locking WHERE has `expires > now()`, only not to lock rows expired before the transaction began.
 *
 * READS (P7). A read covers the owned shards, each in the epoch this node holds, and hands over
 * each pending version with part in [from, until), skipping versions whose firing this node
 * recorded in that same epoch (its logic holds them: a poll must not fire them again). The range is
 * of part alone, never of due: successive loads read disjoint ranges of part, so every row is read
 * by the load whose range holds its part, even a row due before `from` (put, by a clock ahead of
 * this node's or while this node's boundary lagged, at a time past everything loaded and polled:
 * excluding it by due lost it until the shard changed hands). Such a row fires late, when the load
 * reaches its part; a row some other path handed over already (an arm, a notification, a poll) is
 * installed once (the logic skips a version it holds; one it no longer holds because its handler
 * returned is installed again, and its firing refused: FIRE).
 * The fence handed over is the epoch the database confirmed, in the same statement. Rows come
 * through a cursor, 4096 at a time, so that the logic installs them while the rest is read.
 *
 * EXPIRY IN A READ is `expires > now()`: the lease unexpired when the read's transaction began, on
 * the shard's row as the read's snapshot has it. Never clock_timestamp(): a cursor evaluates its
 * join when it fetches, possibly after the expiry its snapshot shows although renewals committed
 * since have moved it on, and then it skipped the shard whole, silently; the node held the shard on
 * in the same epoch, and its timers stayed unread until the shard changed hands (test_pg_lease
 * holds a takeover's cursor past that expiry; in test_pg_cluster under load, a dead node's timers
 * fired 200 s after their takeover, as this makes them). now() loses nothing: a belief at the
 * transaction's start rests on renewals answered before it, all in its snapshot, and ends a quarter
 * lease before the expiry the last of them wrote (P2); so a row that shows the lease expired at
 * now() means the belief had lapsed by then, and a lapse is followed by a retake in a new epoch,
 * whose takeover reads again. A read takes no lock: fire() checks the fences it hands over.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/pg/pg.h"

#define FETCH 4096

static const char fire_sql[] =
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int4[], $4::int4[], $5::int8[])"
    " WITH ORDINALITY AS f(key, version, attempt, shard, epoch, i)),"
    " s AS MATERIALIZED (SELECT shard, epoch, expires FROM chime.shards"
    " WHERE shard = ANY(ARRAY(SELECT DISTINCT shard FROM f)) AND owner = $6 AND token = $7::int8"
    " AND expires > now() ORDER BY shard FOR KEY SHARE)"
    " UPDATE chime.keys k SET attempt = f.attempt, fire_epoch = f.epoch"
    " FROM f JOIN s ON s.shard = f.shard AND s.epoch = f.epoch"
    " AND s.expires > statement_timestamp()"
    " WHERE k.key = f.key AND k.version = f.version AND k.end_epoch IS NULL"
    " AND (k.fire_epoch <> f.epoch OR k.attempt < f.attempt + $8::int4) RETURNING f.i";

static void be64(char out[8], uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (char)(v >> (56 - 8 * i));
}

int chime__pg_fire(struct chime__backend *b, struct chime__firing *f, size_t n)
{
    int err = chime__pg_error(b);
    if (err)
        return err;
    struct pg_array a[5];
    chime__pg_array_init(&a[0], PG_OID_BYTEA);
    chime__pg_array_init(&a[1], PG_OID_INT8);
    chime__pg_array_init(&a[2], PG_OID_INT4);
    chime__pg_array_init(&a[3], PG_OID_INT4);
    chime__pg_array_init(&a[4], PG_OID_INT8);
    size_t *index = malloc((n ? n : 1) * sizeof *index);
    char token[8];
    be64(token, (uint64_t)b->token);
    char again[4] = { 0, 0, 0, 0 }; /* $8: 1 once a run may have committed unseen (FIRE) */
    /* Counted before chime__pg_holds looks at draining (its comment says why seq_cst); the
     * firings not recorded are counted out below, the others once settled (backend.h, fire). */
    for (size_t i = 0; i < n; i++) {
        unsigned shard = pg_fence_shard(f[i].ref.fence);
        if (shard < b->schema.shards)
            atomic_fetch_add_explicit(&b->shards[shard].unsettled, 1, memory_order_seq_cst);
    }
    pthread_mutex_lock(&b->fire_lock);
    for (int tries = 0; !err; tries++) {
        /* Run again only while the store stays open: behind a key's row that another transaction
         * holds, a run ends at each lock timeout (conn.c) and would be run again as long as the
         * lease lasts, and close, which waits for the dispatcher, waited as long as the row stayed
         * held (found in review). What was not recorded fires at the next owner; a run whose
         * reply was lost may have recorded it, and the next owner fires it again (attempt + 1).
         * relaxed: a flag polled; the statuses are this call's own (-ESTALE since the last run). */
        if (tries && atomic_load_explicit(&b->closing, memory_order_relaxed))
            break;
        size_t k = 0;
        for (int i = 0; i < 5; i++)
            chime__pg_array_reset(&a[i]);
        for (size_t i = 0; index && i < n; i++) {
            unsigned shard = pg_fence_shard(f[i].ref.fence);
            uint64_t epoch = pg_fence_epoch(f[i].ref.fence);
            f[i].status = -ESTALE;
            if (!chime__pg_holds(b, shard, epoch))
                continue; /* lapsed (or never ours): its owner fires it */
            chime__pg_array_bytes(&a[0], f[i].key, f[i].key_len);
            chime__pg_array_i64(&a[1], (int64_t)f[i].ref.version);
            chime__pg_array_i32(&a[2], (int32_t)f[i].attempt);
            chime__pg_array_i32(&a[3], (int32_t)shard);
            chime__pg_array_i64(&a[4], (int64_t)epoch);
            index[k++] = i;
        }
        if (!index) {
            err = -ENOMEM;
            break;
        }
        if (!k)
            break;
        const char *v[8];
        int len[8], fmt[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
        for (int i = 0; i < 5; i++)
            v[i] = chime__pg_array_done(&a[i], &len[i]);
        v[5] = b->node;
        len[5] = (int)strlen(b->node);
        v[6] = token;
        len[6] = 8;
        v[7] = again;
        len[7] = 4;
        if (!v[0] || !v[1] || !v[2] || !v[3] || !v[4]) {
            err = -ENOMEM;
            break;
        }
        struct pg_conn *pc = &b->fire_conn;
        if (!pc->c && chime__pg_connect(pc) != 0) {
            chime__pg_disconnect(pc); /* away: try again while the leases last */
            struct timespec ts = { 0, 20000000 };
            nanosleep(&ts, NULL);
            continue;
        }
        int rc = chime__pg_prepare(pc, 0, "chime_fire", fire_sql);
        PGresult *r = NULL;
        if (rc == PG_OK) {
            r = chime__pg_result(pc, PQsendQueryPrepared(pc->c, "chime_fire", 8, v, len, fmt, 1));
            rc = chime__pg_status(pc, r);
        }
        if (rc == PG_OK) {
            for (int row = 0; row < PQntuples(r); row++) {
                int64_t i = chime__pg_i64(r, row, 0) - 1;
                if (i >= 0 && (size_t)i < k)
                    f[index[i]].status = 0;
            }
            PQclear(r);
            break;
        }
        PQclear(r);
        if (rc == PG_LOST) {
            chime__pg_disconnect(pc);
            again[3] = 1; /* the lost run may have committed: its own record is no refusal */
        } else if (rc == PG_FATAL)
            err = -EIO;
        /* PG_RETRY: again; PG_LOST: again on a new connection, for what is still held */
    }
    pthread_mutex_unlock(&b->fire_lock);
    for (size_t i = 0; i < n; i++)
        if (err || f[i].status != 0) /* an error: no handler starts (backend.h) */
            chime__pg_settled(b, pg_fence_shard(f[i].ref.fence), 1);
    for (int i = 0; i < 5; i++)
        chime__pg_array_free(&a[i]);
    free(index);
    if (err == -EIO)
        chime__pg_fail(b, err);
    return err;
}

/* ---- reads ---- */

size_t chime__pg_owned(struct chime__backend *b, int32_t *shards, int64_t *epochs)
{
    size_t n = 0;
    for (unsigned s = 0; s < b->schema.shards; s++) {
        uint64_t epoch = chime__pg_epoch_of(b, s);
        if (epoch) {
            shards[n] = (int32_t)s;
            epochs[n++] = (int64_t)epoch;
        }
    }
    return n;
}

static const char read_sql[] =
    "DECLARE chime_read NO SCROLL CURSOR FOR"
    " SELECT t.key, t.payload, t.due, k.version, k.attempt, t.shard, s.epoch"
    " FROM unnest($1::int4[], $2::int8[]) AS o(shard, epoch)"
    " JOIN chime.shards s ON s.shard = o.shard AND s.epoch = o.epoch AND s.owner = $3"
    " AND s.token = $4::int8 AND s.expires > now()"
    " JOIN chime.timers t ON t.shard = s.shard AND t.part >= $5::int8 AND t.part < $6::int8"
    " JOIN chime.keys k ON k.key = t.key AND k.version = t.version AND k.end_epoch IS NULL"
    " AND k.fire_epoch <> s.epoch";

/* The same, for a poll: only rows whose transaction the previous poll's snapshot did not see, and
 * none of the transactions in $9 (loader.c, SKIPPED TRANSACTIONS). Those rows are found through
 * the BRIN index on tx alone (the caller's transaction turns sequential scans off): the planner
 * cannot know how few rows are that recent, and given the choice it walked the (shard, part) index
 * through every pending row of the horizon, once a second (300 ms a poll with 200 000 pending). */
static const char poll_sql[] =
    "DECLARE chime_read NO SCROLL CURSOR FOR"
    " WITH t AS MATERIALIZED (SELECT key, payload, due, shard, version FROM chime.timers"
    " WHERE tx >= $7::int8 AND part >= $5::int8 AND part < $6::int8"
    " AND NOT pg_visible_in_snapshot(tx::text::xid8, $8::text::pg_snapshot)"
    " AND tx NOT IN (SELECT unnest($9::int8[])))"
    " SELECT t.key, t.payload, t.due, k.version, k.attempt, t.shard, s.epoch"
    " FROM t JOIN unnest($1::int4[], $2::int8[]) AS o(shard, epoch) ON o.shard = t.shard"
    " JOIN chime.shards s ON s.shard = o.shard AND s.epoch = o.epoch AND s.owner = $3"
    " AND s.token = $4::int8 AND s.expires > now()"
    " JOIN chime.keys k ON k.key = t.key AND k.version = t.version AND k.end_epoch IS NULL"
    " AND k.fire_epoch <> s.epoch";

void (*chime__pg_read_hook)(struct chime__backend *b, const char *since);

static int run(struct pg_conn *pc, const char *sql, PGresult **out)
{
    return chime__pg_exec(pc, sql, 0, NULL, out);
}

int chime__pg_read_cursor(struct chime__backend *b, struct pg_conn *pc, const int32_t *shards,
                          const int64_t *epochs, size_t n, uint64_t from, uint64_t until,
                          const char *since, const int64_t *skip, size_t n_skip,
                          chime__timer_fn *fn, void *ctx)
{
    if (!pc->c)
        return PG_LOST;
    struct pg_array sa, ea, xa;
    chime__pg_array_init(&sa, PG_OID_INT4);
    chime__pg_array_init(&ea, PG_OID_INT8);
    chime__pg_array_init(&xa, PG_OID_INT8);
    for (size_t i = 0; i < n; i++) {
        chime__pg_array_i32(&sa, shards[i]);
        chime__pg_array_i64(&ea, epochs[i]);
    }
    for (size_t i = 0; i < n_skip; i++)
        chime__pg_array_i64(&xa, skip[i]);
    char token[8], lo[8], hi[8], xmin[8];
    be64(token, (uint64_t)b->token);
    be64(lo, from > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : from);
    be64(hi, until > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : until);
    be64(xmin, since ? strtoull(since, NULL, 10) : 0); /* a snapshot is "xmin:xmax:xip,..." */
    const char *v[9] = { NULL, NULL, b->node, token, lo, hi, xmin, since, NULL };
    int len[9] = { 0, 0, (int)strlen(b->node), 8, 8, 8, 8, since ? (int)strlen(since) : 0, 0 };
    int fmt[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    v[0] = chime__pg_array_done(&sa, &len[0]);
    v[1] = chime__pg_array_done(&ea, &len[1]);
    v[8] = chime__pg_array_done(&xa, &len[8]);
    int rc = !v[0] || !v[1] || !v[8] ? -ENOMEM : PG_OK;
    if (rc == PG_OK) {
        PGresult *r = chime__pg_result(pc, PQsendQueryParams(pc->c, since ? poll_sql : read_sql,
                                                             since ? 9 : 6, NULL, v, len, fmt, 1));
        rc = chime__pg_status(pc, r);
        PQclear(r);
    }
    if (rc == PG_OK && chime__pg_read_hook)
        chime__pg_read_hook(b, since);
    int stop = 0;
    while (rc == PG_OK && !stop) {
        PGresult *r = NULL;
        char fetch[48];
        snprintf(fetch, sizeof fetch, "FETCH %d FROM chime_read", FETCH);
        rc = run(pc, fetch, &r);
        if (rc != PG_OK)
            break;
        int rows = PQntuples(r);
        for (int i = 0; i < rows && !stop; i++) {
            unsigned shard = (unsigned)chime__pg_i32(r, i, 5);
            uint64_t epoch = (uint64_t)chime__pg_i64(r, i, 6);
            struct chime__timer t = {
                .key = PQgetvalue(r, i, 0), .key_len = (size_t)PQgetlength(r, i, 0),
                .payload = PQgetvalue(r, i, 1), .payload_len = (size_t)PQgetlength(r, i, 1),
                .due_ns = (uint64_t)chime__pg_i64(r, i, 2),
                .attempt = (uint32_t)chime__pg_i32(r, i, 4),
                .ref = { (uint64_t)chime__pg_i64(r, i, 3), pg_fence(epoch, shard) } };
            stop = fn(ctx, &t);
        }
        PQclear(r);
        if (rows < FETCH)
            break;
    }
    if (rc == PG_OK)
        rc = run(pc, "CLOSE chime_read", NULL);
    chime__pg_array_free(&sa);
    chime__pg_array_free(&ea);
    chime__pg_array_free(&xa);
    return rc != PG_OK ? rc : stop;
}

int chime__pg_read_timers(struct chime__backend *b, struct pg_conn *pc, const int32_t *shards,
                          const int64_t *epochs, size_t n, uint64_t from, uint64_t until,
                          chime__timer_fn *fn, void *ctx)
{
    int rc = run(pc, "BEGIN", NULL);
    if (rc == PG_OK)
        rc = chime__pg_read_cursor(b, pc, shards, epochs, n, from, until, NULL, NULL, 0, fn, ctx);
    if (rc >= PG_OK) { /* done, or stopped by fn */
        int c = run(pc, "COMMIT", NULL);
        return c != PG_OK ? c : rc;
    }
    if (rc != PG_LOST && pc->c)
        run(pc, "ROLLBACK", NULL);
    return rc;
}

int chime__pg_load(struct chime__backend *b, uint64_t from, uint64_t until, chime__timer_fn *fn,
                   void *ctx)
{
    size_t cap = b->schema.shards;
    int32_t *shards = malloc(cap * sizeof *shards);
    int64_t *epochs = malloc(cap * sizeof *epochs);
    if (!shards || !epochs) {
        free(shards);
        free(epochs);
        return -ENOMEM;
    }
    int rc;
    for (;;) {
        /* The boundary first, then the shards and the snapshot (P7): a put committed after this
         * read's snapshot is armed by whoever put it, since it sees the new boundary. */
        pthread_mutex_lock(&b->own_lock);
        if (until > atomic_load_explicit(&b->max_until, memory_order_relaxed))
            atomic_store_explicit(&b->max_until, until, memory_order_release); /* pairs with apply() */
        size_t n = chime__pg_owned(b, shards, epochs);
        pthread_mutex_unlock(&b->own_lock);
        rc = n ? chime__pg_read_timers(b, &b->load_conn, shards, epochs, n, from, until, fn, ctx) : 0;
        if (rc == PG_LOST || rc == PG_RETRY) { /* again, for what is still held */
            if (chime__pg_wait_server(b, &b->load_conn, rc))
                continue;
            rc = 0; /* closing, or failed: what was not loaded stays in the database */
        }
        break;
    }
    free(shards);
    free(epochs);
    if (pg_rc_is_db(rc)) { /* a database error other than a lost connection */
        chime__pg_fail(b, -EIO);
        return -EIO;
    }
    return rc;
}
