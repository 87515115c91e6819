/* SPDX-License-Identifier: MIT */
/*
 * Running one batch of a write lane: the pipeline, its results, and what a lost connection or a
 * failed statement means (lanes.c, THE PIPELINE, describes the protocol; pg.h, P6, the invariant).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/pg/lane.h"
#include "store/pg/statements.h"

void (*chime__pg_commit_hook)(void);

_Atomic uint64_t chime__pg_ask_within_ns = UINT64_C(12) * 3600 * 1000000000;

/* CLOCK_BOOTTIME: a machine suspended meanwhile counts, as the database's clock does. */
static uint64_t boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

_Static_assert(PG_BATCH < PG_VERSION_ROWS, "a statement's rows are numbered within one version base");

enum { ST_MARK, ST_PUT, ST_RETRY, ST_CANCEL, ST_ACK, ST_BURY, ST_REQUEUE, ST_DROP, ST_UNFIRE,
       ST_NOTIFY, ST_COUNT };

static const struct {
    const char *name, *sql;
    int kind; /* the operations it carries; -1: sent with every batch (ST_NOTIFY if any notifies) */
} stmts[ST_COUNT] = {
    [ST_MARK] = { "chime_mark", PG_SQL_MARK, -1 },
    [ST_PUT] = { "chime_put", PG_SQL_PUT, PG_OP_PUT },
    [ST_RETRY] = { "chime_retry", PG_SQL_RETRY, PG_OP_RETRY },
    [ST_CANCEL] = { "chime_cancel", PG_SQL_CANCEL, PG_OP_CANCEL },
    [ST_ACK] = { "chime_ack", PG_SQL_ACK, PG_OP_ACK },
    [ST_BURY] = { "chime_bury", PG_SQL_BURY, PG_OP_BURY },
    [ST_REQUEUE] = { "chime_requeue", PG_SQL_REQUEUE, PG_OP_REQUEUE },
    [ST_DROP] = { "chime_drop", PG_SQL_DROP, PG_OP_DROP },
    [ST_UNFIRE] = { "chime_unfire", PG_SQL_UNFIRE, PG_OP_UNFIRE },
    [ST_NOTIFY] = { "chime_notify", PG_SQL_NOTIFY, -1 },
};

static void pause_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

void chime__pg_lane_free_arrays(struct pg_lane *l)
{
    for (size_t i = 0; i < sizeof l->arrays / sizeof *l->arrays; i++)
        chime__pg_array_free(&l->arrays[i]);
}

/* ---- building a statement's parameters ---- */

struct params {
    const char *values[12];
    int lengths[12], formats[12];
    int n;
    int oom;
};

static struct pg_array *array(struct pg_lane *l, struct params *p, uint32_t oid)
{
    struct pg_array *a = &l->arrays[p->n];
    if (!a->cap)
        chime__pg_array_init(a, oid);
    a->oid = oid;
    chime__pg_array_reset(a);
    return a;
}

/* Close the array most recently begun as parameter n. */
static void close_array(struct pg_lane *l, struct params *p)
{
    struct pg_array *a = &l->arrays[p->n];
    p->values[p->n] = chime__pg_array_done(a, &p->lengths[p->n]);
    p->formats[p->n] = 1;
    p->oom |= !p->values[p->n];
    p->n++;
}

static void scalar(struct params *p, const char *value, int len)
{
    p->values[p->n] = value;
    p->lengths[p->n] = len;
    p->formats[p->n++] = 1;
}

#define EACH(l, kind, op) \
    for (size_t i_ = 0; i_ < (l)->kind_n[kind] && ((op) = (l)->kind_ops[kind][i_], 1); i_++)

static const void *payload_of(const struct pg_op *op)
{
    return op->data + op->key_len;
}

static void keys_array(struct pg_lane *l, struct params *p, int kind)
{
    struct pg_array *a = array(l, p, PG_OID_BYTEA);
    struct pg_op *op;
    EACH(l, kind, op) chime__pg_array_bytes(a, op->data, op->key_len);
    close_array(l, p);
}

#define I64_ARRAY(l, p, kind, field)                                                               \
    do {                                                                                           \
        struct pg_array *a_ = array(l, p, PG_OID_INT8);                                            \
        struct pg_op *op_;                                                                         \
        EACH(l, kind, op_) chime__pg_array_i64(a_, (int64_t)op_->field);                           \
        close_array(l, p);                                                                         \
    } while (0)

#define I32_ARRAY(l, p, kind, field)                                                               \
    do {                                                                                           \
        struct pg_array *a_ = array(l, p, PG_OID_INT4);                                            \
        struct pg_op *op_;                                                                         \
        EACH(l, kind, op_) chime__pg_array_i32(a_, (int32_t)op_->field);                           \
        close_array(l, p);                                                                         \
    } while (0)

static void payloads_array(struct pg_lane *l, struct params *p, int kind)
{
    struct pg_array *a = array(l, p, PG_OID_BYTEA);
    struct pg_op *op;
    EACH(l, kind, op) chime__pg_array_bytes(a, payload_of(op), op->payload_len);
    close_array(l, p);
}

/* v as n bytes, big-endian (the binary format of int4 and int8), at out. */
static const char *big_endian(char *out, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (char)(v >> (8 * (n - 1 - i)));
    return out;
}

/* The owner and token parameters of an owner statement (P1). */
static void owner_params(struct pg_lane *l, struct params *p, char scratch[20])
{
    scalar(p, l->b->node, (int)strlen(l->b->node));
    scalar(p, big_endian(scratch, (uint64_t)l->b->token, 8), 8);
}

/* Fill the parameters of statement st, some of them in scratch. Return: 0, 1 if there is no
 * statement to send, or -ENOMEM. */
static int build(struct pg_lane *l, int st, struct params *p, char scratch[20])
{
    memset(p, 0, sizeof *p);
    switch (st) {
    case ST_MARK:
        scalar(p, big_endian(scratch, (uint64_t)l->b->token, 8), 8);
        scalar(p, big_endian(scratch + 8, (uint64_t)l->index, 4), 4);
        scalar(p, l->b->node, (int)strlen(l->b->node));
        scalar(p, big_endian(scratch + 12, l->mark, 8), 8);
        break;
    case ST_PUT:
        keys_array(l, p, PG_OP_PUT);
        I64_ARRAY(l, p, PG_OP_PUT, due);
        I64_ARRAY(l, p, PG_OP_PUT, part);
        I32_ARRAY(l, p, PG_OP_PUT, shard);
        I32_ARRAY(l, p, PG_OP_PUT, attempt);
        payloads_array(l, p, PG_OP_PUT);
        break;
    case ST_RETRY:
        keys_array(l, p, PG_OP_RETRY);
        I64_ARRAY(l, p, PG_OP_RETRY, version);
        I32_ARRAY(l, p, PG_OP_RETRY, shard);
        I64_ARRAY(l, p, PG_OP_RETRY, epoch);
        I64_ARRAY(l, p, PG_OP_RETRY, due);
        I64_ARRAY(l, p, PG_OP_RETRY, part);
        I32_ARRAY(l, p, PG_OP_RETRY, attempt);
        payloads_array(l, p, PG_OP_RETRY);
        owner_params(l, p, scratch);
        break;
    case ST_CANCEL:
        keys_array(l, p, PG_OP_CANCEL);
        I64_ARRAY(l, p, PG_OP_CANCEL, version);
        break;
    case ST_ACK:
        keys_array(l, p, PG_OP_ACK);
        I64_ARRAY(l, p, PG_OP_ACK, version);
        I32_ARRAY(l, p, PG_OP_ACK, shard);
        I64_ARRAY(l, p, PG_OP_ACK, epoch);
        owner_params(l, p, scratch);
        break;
    case ST_BURY:
        keys_array(l, p, PG_OP_BURY);
        I64_ARRAY(l, p, PG_OP_BURY, version);
        I32_ARRAY(l, p, PG_OP_BURY, shard);
        I64_ARRAY(l, p, PG_OP_BURY, epoch);
        I64_ARRAY(l, p, PG_OP_BURY, due);
        I32_ARRAY(l, p, PG_OP_BURY, attempt);
        payloads_array(l, p, PG_OP_BURY);
        owner_params(l, p, scratch);
        break;
    case ST_REQUEUE:
        keys_array(l, p, PG_OP_REQUEUE);
        I64_ARRAY(l, p, PG_OP_REQUEUE, due);
        I64_ARRAY(l, p, PG_OP_REQUEUE, part);
        break;
    case ST_DROP:
        keys_array(l, p, PG_OP_DROP);
        break;
    case ST_UNFIRE:
        keys_array(l, p, PG_OP_UNFIRE);
        I64_ARRAY(l, p, PG_OP_UNFIRE, version);
        I32_ARRAY(l, p, PG_OP_UNFIRE, attempt);
        I32_ARRAY(l, p, PG_OP_UNFIRE, shard);
        I64_ARRAY(l, p, PG_OP_UNFIRE, epoch);
        owner_params(l, p, scratch);
        break;
    case ST_NOTIFY: { /* "shard:hexkey" for the puts and requeues that notify */
        struct pg_array *a = array(l, p, PG_OID_TEXT);
        static const char hex[] = "0123456789abcdef";
        char text[16 + 2 * CHIME_STORE_KEY_MAX];
        for (int kind = PG_OP_PUT; kind <= PG_OP_REQUEUE; kind += PG_OP_REQUEUE - PG_OP_PUT) {
            struct pg_op *op;
            EACH(l, kind, op) {
                if (!op->note)
                    continue;
                int n = snprintf(text, sizeof text, "%u:", op->shard);
                for (size_t i = 0; i < op->key_len; i++) {
                    text[n++] = hex[op->data[i] >> 4];
                    text[n++] = hex[op->data[i] & 15];
                }
                chime__pg_array_bytes(a, text, (size_t)n);
            }
        }
        if (!a->n)
            return 1; /* nothing to notify: no statement */
        close_array(l, p);
        break;
    }
    }
    return p->oom ? -ENOMEM : 0;
}

/* ---- the pipeline ---- */

static int prepare_all(struct pg_lane *l, const int *sent, int nsent)
{
    for (int i = 0; i < nsent; i++) {
        int rc = chime__pg_prepare(&l->conn, sent[i], stmts[sent[i]].name, stmts[sent[i]].sql);
        if (rc != PG_OK)
            return rc;
    }
    return PG_OK;
}

/* One try of the batch. *xid is set once known, *commit_sent once COMMIT is being sent; res[st]
 * keeps each statement's result. Return: PG_OK (committed) or PG_*. */
static int attempt(struct pg_lane *l, uint64_t *xid, int *commit_sent, PGresult **res)
{
    struct pg_conn *pc = &l->conn;
    int sent[ST_COUNT], nsent = 0, waited = 0;
    char scratch[20];
    struct params p;
    l->mark++; /* this try's: resolve looks for it */
    for (int st = 0; st < ST_COUNT; st++) {
        if (stmts[st].kind >= 0 && !l->kind_n[stmts[st].kind])
            continue;
        sent[nsent++] = st;
    }
    /* A put's caller (CHIME_SYNC_EACH) waits for the commit, not for a result: its version is
     * the lane's to arm, and the loader's poll finds it if the results are lost (P7). */
    for (int k = 0; k < PG_OP_KINDS; k++) {
        if (k == PG_OP_PUT)
            continue;
        for (size_t i = 0; i < l->kind_n[k]; i++)
            waited |= l->kind_ops[k][i]->waited;
    }
    int rc = prepare_all(l, sent, nsent);
    if (rc != PG_OK)
        return rc;
    PGconn *c = pc->c;
    if (!PQenterPipelineMode(c) || PQsetnonblocking(c, 1))
        return PG_LOST;
    int ok = PQsendQueryParams(c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) &&
             PQsendQueryParams(c, "SELECT pg_current_xact_id()::text", 0, NULL, NULL, NULL, NULL,
                               0) &&
             PQpipelineSync(c);
    int nstmt = 0, order[ST_COUNT];
    for (int i = 0; ok && i < nsent; i++) {
        int b = build(l, sent[i], &p, scratch);
        if (b > 0)
            continue; /* nothing to notify */
        if (b < 0) {
            PQexitPipelineMode(c); /* fails with queries pending: the connection is dropped */
            return PG_LOST;
        }
        ok = PQsendQueryPrepared(c, stmts[sent[i]].name, p.n, p.values, p.lengths, p.formats, 1);
        order[nstmt++] = sent[i];
    }
    ok = ok && PQpipelineSync(c);
    if (!ok || chime__pg_flush(pc) != PG_OK)
        return PG_LOST;
    PGresult *x = NULL;
    rc = chime__pg_pipeline_result(pc, NULL);
    if (rc == PG_OK)
        rc = chime__pg_pipeline_result(pc, &x);
    if (rc == PG_OK)
        rc = chime__pg_pipeline_sync(pc);
    if (rc == PG_OK)
        *xid = strtoull(PQgetvalue(x, 0, 0), NULL, 10);
    PQclear(x); /* also when the sync after it was lost */
    if (rc != PG_OK)
        return PG_LOST; /* BEGIN cannot fail otherwise: nothing committed */
    int failed = PG_OK;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == (waited ? 1 : 0)) { /* the results first if a caller waits for them */
            /* Before sending, not after: a COMMIT cut off mid-send may still have reached the
             * server and taken effect (in the extended protocol it does at Execute, before Sync).
             * Marked sent, a lost connection is resolved by the try's mark (resolve) instead of
             * being retried blindly, which would apply the batch twice. */
            *commit_sent = failed == PG_OK;
            l->commit_at = boot_ns(); /* resolve's bound counts from here */
            ok = PQsendQueryParams(c, failed == PG_OK ? "COMMIT" : "ROLLBACK", 0, NULL, NULL, NULL,
                                   NULL, 0) &&
                 PQpipelineSync(c);
            if (!ok || chime__pg_flush(pc) != PG_OK)
                return PG_LOST;
            if (*commit_sent && chime__pg_commit_hook)
                chime__pg_commit_hook();
        } else {
            for (int i = 0; i < nstmt; i++) {
                int s = chime__pg_pipeline_result(pc, &res[order[i]]);
                if (s == PG_LOST)
                    return PG_LOST;
                if (s != PG_OK && (failed == PG_OK || failed == PG_RETRY))
                    failed = s; /* the first real error, not the aborted ones after it */
            }
            if (chime__pg_pipeline_sync(pc) != PG_OK)
                return PG_LOST;
        }
    }
    PGresult *end = NULL;
    rc = chime__pg_pipeline_result(pc, &end);
    if (rc == PG_OK && chime__pg_pipeline_sync(pc) != PG_OK)
        rc = PG_LOST;
    int committed = rc == PG_OK && !strcmp(PQcmdStatus(end), "COMMIT");
    PQclear(end);
    if (rc != PG_OK)
        return rc;
    if (!PQexitPipelineMode(c) || PQsetnonblocking(c, 0))
        return PG_LOST;
    if (failed != PG_OK)
        return failed;
    return committed ? PG_OK : PG_RETRY;
}

/* Whether the lane's last try committed, asked on a new connection. Return: 1, 0, or -EIO.
 * The try's mark (ST_MARK) is the answer, and a fence (PG_SQL_FENCE: pg.h, P6): the ask inserts it
 * unless it is there. The try's own mark there, the try committed. Absent, it is inserted as a
 * fence: the try did not commit, and never will, since its own insert of the mark would now fail
 * on the key; asked again (this ask's reply lost), the fence answers the same (found in review: a
 * plain insert then found its own row, and read it as the try's). Inserted by a try still in
 * progress, the ask waits for that try to end. That holds on the same server, after a restart or
 * a crash recovery, and after a failover alike. The transaction id does not: a server that
 * recovered from a crash (a restart, or one backend's crash, after which the postmaster and its
 * start time stay) may give the id out again, if nothing of ours reached its WAL, and
 * pg_xact_status then reports another transaction's fate (found in review twice: a put reported
 * durable that the database never had, the second time with the start time unchanged). Before the
 * marks the batch ran again after a restart, and a put that had committed was applied twice,
 * undoing a cancel another node made of its key in between (found in review). test_pg_cuts and
 * test_pg_restart have each case. The try's session, if the server still has it, is ended first
 * (conn.c, STALE SESSIONS), so that the ask does not wait on it for long. */
static int resolve(struct pg_lane *l)
{
    char tok[24], lane[12], mark[24];
    snprintf(tok, sizeof tok, "%" PRId64, l->b->token);
    snprintf(lane, sizeof lane, "%d", l->index);
    snprintf(mark, sizeof mark, "%" PRIu64, l->mark);
    const char *v[] = { tok, lane, l->b->node, mark };
    struct pg_session tried = l->conn.stale; /* the try's: the next connect ends it (conn.c) */
    /* relaxed: a bound read once per ask; only tests change it */
    uint64_t since = l->commit_at, within = atomic_load_explicit(&chime__pg_ask_within_ns,
                                                               memory_order_relaxed);
    long delay_ms = 10; /* between tries to connect (chime__pg_connect_or_wait) */
    for (;;) {
        /* The marks are deleted a day old (house.c), the try's own with them: asked later than
         * that, a committed try would read as not committed, and run again (found in review).
         * Half a day after its COMMIT went out (a database away that long, or this process
         * paused), the lane no longer asks: the outcome is unknown, and the store fails rather
         * than guess. */
        if (boot_ns() - since >= within)
            return -EIO;
        /* Asked only while the answer is wanted: close gave up on the lane (abandon), or the store
         * failed. Before, a try's session that the server kept (stuck, or its client's flow lost
         * behind a proxy) made the ask wait for ever, and close with it (found in review). */
        /* acquire: pairs with lanes_stop's release, as reconnect's load does */
        if (atomic_load_explicit(&l->abandon, memory_order_acquire) || chime__pg_error(l->b))
            return -EIO;
        if (!l->conn.c) { /* one try a round, so that the bounds above are looked at */
            int c = chime__pg_connect_or_wait(&l->conn, &delay_ms);
            if (c == PG_LOST)
                continue;
            if (c != 0)
                return -EIO;
        }
        PGresult *r = NULL;
        int rc = chime__pg_exec_text(&l->conn, PG_SQL_FENCE, 4, v, &r);
        int fence = rc == PG_OK && PQntuples(r) == 1 ? PQgetvalue(r, 0, 0)[0] == 't' : -1;
        PQclear(r);
        if (rc == PG_OK && fence >= 0)
            return !fence;
        if (rc == PG_LOST)
            chime__pg_disconnect(&l->conn);
        else if (rc == PG_RETRY && chime__pg_end_session(&l->conn, tried) == PG_LOST)
            chime__pg_disconnect(&l->conn); /* a timeout, the try still in progress: ended again */
        else if (rc == PG_RETRY)
            pause_ms(10);
        else
            return -EIO;
    }
}

/* Fill the operations' results from the statements' (committed). Return: 0 if every timer the
 * transaction wrote is queued to be armed, or was for a shard not held or due after what is
 * loaded when looked at after the commit (loader.c, SKIPPED TRANSACTIONS); nonzero if the poll
 * must read it back: an arm could not be queued (-ENOMEM), or the transaction requeued a dead
 * letter (1), whose caller arms it with the epoch it read before the commit (lanes.c): a takeover
 * in between reads the shard without the row and makes that epoch stale, so only the poll has it
 * (found in review: with its notification lost, the requeued timer never fired). */
static int apply(struct pg_lane *l, PGresult **res)
{
    int handed = 0;
    struct chime__backend *b = l->b;
    struct pg_op *op;
    EACH(l, PG_OP_RETRY, op) op->status = -ESTALE;    /* unless returned below */
    EACH(l, PG_OP_CANCEL, op) op->status = -ENOENT;
    EACH(l, PG_OP_REQUEUE, op) op->status = -ENOENT;
    EACH(l, PG_OP_DROP, op) op->status = -ENOENT;
    static const int with_version[] = { ST_PUT, ST_RETRY, ST_CANCEL, ST_REQUEUE, ST_DROP };
    for (size_t k = 0; k < sizeof with_version / sizeof *with_version; k++) {
        int st = with_version[k];
        PGresult *r = res[st];
        for (int row = 0; r && row < PQntuples(r); row++) {
            int64_t i = chime__pg_i64(r, row, 0) - 1;
            if (i < 0 || (size_t)i >= l->kind_n[stmts[st].kind])
                continue;
            op = l->kind_ops[stmts[st].kind][i];
            op->status = 0;
            if (st == ST_DROP)
                continue;
            op->out_version = (uint64_t)chime__pg_i64(r, row, 1);
            if (st == ST_CANCEL && !*PQgetvalue(r, row, 2))
                op->status = -EINPROGRESS; /* its firing is recorded or has begun */
            if (st == ST_REQUEUE && (op->out_payload = malloc((size_t)PQgetlength(r, row, 2) + 1))) {
                op->out_payload_len = (size_t)PQgetlength(r, row, 2);
                memcpy(op->out_payload, PQgetvalue(r, row, 2), op->out_payload_len);
                if (!handed)
                    handed = 1; /* see above: the poll reads it back */
            } else if (st == ST_REQUEUE) {
                op->status = -ENOMEM; /* committed, but not handed over: the poll reads it */
                handed = -ENOMEM;
            }
        }
    }
    /* Our own puts due before what is loaded, for shards we hold: armed now that they are
     * committed (backend.h: a deferred put), by the loader thread (never a lane: a lane must not
     * take the logic's locks, which a cancel holds while it waits for a lane). */
    uint64_t loaded = atomic_load_explicit(&b->max_until, memory_order_acquire); /* pairs with load */
    EACH(l, PG_OP_PUT, op) {
        uint64_t epoch = op->out_version ? chime__pg_epoch_of(b, op->shard) : 0;
        /* A row due INT64_MAX (a put due UINT64_MAX: lanes.c, DUE_MAX) is never read, so never
         * armed either: with an endless horizon `loaded` passes it (found in review;
         * test_pg_retire 6). */
        if (!epoch || op->due >= loaded || op->due >= (uint64_t)INT64_MAX)
            continue;
        struct chime__timer t = { op->data, op->key_len, payload_of(op), op->payload_len, op->due,
                                  0, { op->out_version, pg_fence(epoch, op->shard) }, 0 };
        if (chime__pg_arm_later(b, &t) != 0)
            handed = -ENOMEM;
    }
    return handed;
}

/* The kinds of operation that write a row of timers (and so have a part). */
static const int row_kinds[] = { PG_OP_PUT, PG_OP_RETRY, PG_OP_REQUEUE };

/* Create the partitions the batch's puts need, each once (a batch of 1000 puts into one new
 * partition made it 1000 times, a round trip each). */
static int make_partitions(struct pg_lane *l)
{
    struct pg_parts_made made = { .count = 0 };
    for (size_t k = 0; k < 3; k++) {
        struct pg_op *op;
        EACH(l, row_kinds[k], op) {
            int rc = chime__pg_partition_need(&l->conn, &l->b->schema, op->part, &made);
            if (rc != PG_OK)
                return rc;
        }
    }
    return PG_OK;
}

/* Give the batch's new rows their partition key from the clock now, before each attempt: a batch
 * that waited (an outage, a restart, retries) must not put its rows in a partition that ended
 * meanwhile, which the housekeeper may be about to drop (schema.c, SETTLED PARTITIONS, copes with
 * it, but only by making the put fail and run again). */
static void restamp(struct pg_lane *l)
{
    uint64_t now = chime__pg_wall();
    for (size_t k = 0; k < 3; k++) {
        struct pg_op *op;
        EACH(l, row_kinds[k], op)
            op->part = pg_part(op->due, now);
    }
}

int chime__pg_lane_run(struct pg_lane *l, struct pg_op **batch, size_t n)
{
    struct chime__backend *b = l->b;
    memset(l->kind_n, 0, sizeof l->kind_n);
    for (size_t i = 0; i < n; i++)
        l->kind_ops[batch[i]->kind][l->kind_n[batch[i]->kind]++] = batch[i];
    for (;;) {
        int err = chime__pg_error(b);
        if (err)
            return err;
        if (!l->conn.c && chime__pg_reconnect(&l->conn, &l->abandon) != 0)
            return -EIO; /* gave up: close, with the database unreachable */
        restamp(l);
        PGresult *res[ST_COUNT] = { 0 };
        uint64_t xid = 0;
        int commit_sent = 0;
        int rc = attempt(l, &xid, &commit_sent, res);
        if (rc == PG_LOST && commit_sent) {
            chime__pg_disconnect(&l->conn);
            int committed = resolve(l);
            if (committed < 0) {
                rc = PG_FATAL;
            } else if (committed) {
                /* Committed, and the results read if a caller waited for them; puts' results may
                 * be lost: the loader's poll finds them instead (P7). */
                apply(l, res);
                chime__pg_poll_soon(b);
                rc = PG_OK;
            }
        } else if (rc == PG_OK && apply(l, res) == 0) {
            chime__pg_armed_tx(b, xid); /* the poll need not read it back */
        }
        for (int st = 0; st < ST_COUNT; st++)
            PQclear(res[st]);
        if (rc == PG_OK)
            return 0;
        switch (rc) {
        case PG_LOST:
            chime__pg_disconnect(&l->conn);
            break;
        case PG_RETRY: /* a deadlock, a timeout: rolled back; again, after a breath */
            pause_ms(1);
            break;
        case PG_NOPART:
            rc = make_partitions(l);
            if (rc == PG_LOST)
                chime__pg_disconnect(&l->conn);
            else if (rc == PG_FATAL)
                goto fatal;
            break;
        default:
        fatal:
            chime__pg_fail(b, -EIO);
            return -EIO;
        }
    }
}
