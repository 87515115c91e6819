/* SPDX-License-Identifier: MIT */
/*
 * The write lanes: every put, cancel, acknowledgement, burial and dead-letter change goes through
 * one of PG_LANES lanes, each a thread with its own connection. A key's operations all go through
 * one lane (the lane of its shard), in the order the logic made them (D4): the logic holds the key's
 * lock while it enqueues, and a lane runs its queue in order.
 *
 * GROUP COMMIT. A lane takes everything queued when it becomes free (up to PG_BATCH operations
 * and chime__pg_batch_bytes of keys and payloads, and never two of one key: a second operation of
 * a key waits for the next batch) and runs it as one transaction, one statement per kind of
 * operation over arrays (statements.h). However many threads put at once, a lane's next commit
 * serves all of them.
 *
 * THE BYTE BOUND. A statement's arrays travel as one message, and PostgreSQL counts the time it
 * takes to receive a message toward idle_in_transaction_session_timeout (conn.c: max(lease / 2,
 * 1 s)), since the batch's transaction began before it. A message slower than that on the way has
 * the server end the session; the lane then ran the batch again, as slowly, for ever, and nothing
 * of it was ever reported (found under TSan on a loaded machine: 12 MiB through test_pg_cuts's
 * relay). So a batch holds at most 1 MiB of keys and payloads after its first operation (one
 * operation is at most 64 KiB + 256 bytes): on time over any link faster than about 1 MB/s with
 * the shortest lease, 0.2 MB/s with the default one (test_pg_link). Small operations fill
 * PG_BATCH first (2000 puts of 500 bytes), so the bound costs them nothing.
 *
 * THE PIPELINE of one try of a batch, and what a lost connection means at each point (P6):
 *     BEGIN; SELECT pg_current_xact_id(); Sync         -> the transaction's id (for the poll, P7)
 *     the try's mark, the statements; Sync             -> their results
 *     COMMIT; Sync                                     (sent once the id is known; and once the
 *                                                       results are, if a caller waits for them)
 *   - lost before COMMIT was sent: nothing committed (the server rolls back a transaction whose
 *     client is gone); the batch runs again on a new connection, as a new try;
 *   - lost after: the try's mark, inserted on a new connection unless it is there (batch.c,
 *     resolve), says committed or not (the insert waits while the old session is finishing).
 *     Committed: done; the results of puts may be lost with the connection, so the loader polls at
 *     once (P7) instead of the lane arming them. Not: runs again, as a new try.
 * An operation whose caller waits for a result (a cancel, a retry, a requeue, a dead-letter drop)
 * makes the lane read the results before it sends COMMIT, so they are never lost with it.
 *
 * WAITING. A put's ticket (CHIME_SYNC_EACH) is its operation: the caller sleeps on that
 * operation's own word, then releases it (OWNERSHIP). sync() waits for a lane's `committed` to
 * reach the sequence it had handed out when sync began (batches are prefixes of the queue).
 *
 * SETTLING A BATCH. The lane stores every waited operation's `done` (release: its status and
 * `wakes` are written before) and wakes only the first; each caller, once it sees `done`
 * (acquire), wakes the two its operation names, so that the waited operations form a binary tree
 * and the last caller is woken about log2(n) wakes after the commit. The lane thread makes one
 * wake per batch instead of one per caller: with hundreds of callers, waking each in turn kept
 * it from its next batch for milliseconds (each wake lets the woken thread run first).
 *
 * OWNERSHIP. An operation is its maker's until the lane takes it; one nobody waits for is then the
 * lane's, which frees it once settled. A waited one has two holders once settled, its caller and
 * its waker (the caller of its parent in the tree, or the lane for the first): a caller may see
 * `done` before its waker's futex call, and that call must not reach freed memory. `refs` counts
 * them, and the last to let go frees it (op_release). A maker whose operation the queue refused
 * (enqueue failed) still holds it alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "futex.h"
#include "store/hash.h"
#include "store/pg/lane.h"
#include "store/pg/statements.h"

#define GIVE_UP_NS UINT64_C(10000000000)

static uint64_t key_hash(const void *key, size_t len)
{
    return chime__siphash128(0x6c616e65u, 0, key, len).lo;
}

size_t chime__pg_batch_bytes = PG_BATCH_BYTES;

/* ---- queue ---- */

static struct pg_op *op_new(enum pg_op_kind kind, const void *key, size_t key_len,
                            const void *payload, size_t payload_len)
{
    struct pg_op *op = calloc(1, sizeof *op + key_len + payload_len);
    if (!op)
        return NULL;
    op->kind = (uint8_t)kind;
    op->key_len = (uint16_t)key_len;
    op->payload_len = (uint32_t)payload_len;
    memcpy(op->data, key, key_len);
    if (payload_len)
        memcpy(op->data + key_len, payload, payload_len);
    op->hash = key_hash(key, key_len);
    atomic_init(&op->refs, 1); /* its maker's (OWNERSHIP) */
    return op;
}

/* Free op. An outcome of a firing settles it here, once the lane has settled the operation
 * (committed or refused) or the queue refused it: every path ends in this free. */
static void op_free(struct pg_op *op)
{
    if (op->settles)
        chime__pg_settled(op->settles, op->shard, 1);
    free(op);
}

/* Let go of op; the last holder frees it (OWNERSHIP). */
static void op_release(struct pg_op *op)
{
    /* acq_rel: this holder's accesses to op come before the free, whichever holder frees it */
    if (atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) == 1)
        op_free(op);
}

/* Queue op on the lane of its shard. Return: 0 and *ticket (op is the lane's, or shared with it if
 * waited); the sticky error (op still the caller's alone). */
static int enqueue(struct chime__backend *b, struct pg_op *op, uint64_t *ticket)
{
    struct pg_lane *l = b->lanes[op->shard % PG_LANES];
    pthread_mutex_lock(&l->lock);
    int err = chime__pg_error(b);
    if (!err && atomic_load_explicit(&l->closed, memory_order_relaxed))
        err = -EIO; /* the lanes gave up (close, with the database unreachable) */
    if (err) {
        pthread_mutex_unlock(&l->lock);
        return err;
    }
    uint64_t seq = op->seq = ++l->next_seq;
    if (l->tail)
        l->tail->next = op;
    else
        l->head = op;
    l->tail = op;
    pthread_cond_signal(&l->work);
    pthread_mutex_unlock(&l->lock);
    /* op is the lane's now: an operation nobody waits for may already be done and freed. */
    if (ticket)
        *ticket = (uint64_t)(l->index + 1) << 56 | seq;
    return 0;
}

/* Sleep until the lane settles sequence seq, or the store fails (sync). */
static void wait_for_seq(struct chime__backend *b, struct pg_lane *l, uint64_t seq)
{
    for (;;) {
        /* Read the word first: a bump after this read makes the futex call return at once. */
        uint32_t seen = atomic_load_explicit(&l->commits, memory_order_acquire);
        if (atomic_load_explicit(&l->committed, memory_order_acquire) >= seq ||
            chime__pg_error(b) || atomic_load_explicit(&l->closed, memory_order_acquire))
            return;
        chime__futex_wait(&l->commits, seen, UINT64_MAX);
    }
}

/* Queue an operation whose maker keeps no hold on it once queued (its caller may still wait on a
 * put's ticket, as a holder the lane counted); a refused one is released here. Return: as enqueue. */
static int enqueue_or_release(struct chime__backend *b, struct pg_op *op)
{
    int err = enqueue(b, op, NULL);
    if (err)
        op_release(op);
    return err;
}

static void wake_op(struct pg_op *op)
{
    chime__futex_wake(&op->done, 1);
}

/* Sleep until the lane settles op (every queued op is settled, even when the store fails), then
 * pass the wake on (SETTLING A BATCH). */
static void wait_for_op(struct pg_op *op)
{
    /* acquire: pairs with the lane's release store of done (op's status, wakes and refs) */
    while (!atomic_load_explicit(&op->done, memory_order_acquire))
        chime__futex_wait(&op->done, 0, UINT64_MAX);
    for (int i = 0; i < 2; i++) {
        if (op->wakes[i]) {
            wake_op(op->wakes[i]);
            op_release(op->wakes[i]); /* as its waker */
        }
    }
}

/* Settle a batch's operations: free those nobody waits for, wake the callers of the others
 * (SETTLING A BATCH). err: the batch's failure, or 0. Reorders batch. */
static void settle(struct pg_op **batch, size_t n, int err)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        struct pg_op *op = batch[i];
        if (err)
            op->status = err;
        if (op->waited)
            batch[m++] = op; /* i >= m: nothing unread is overwritten */
        else
            op_free(op);
    }
    for (size_t i = 0; i < m; i++) {
        for (size_t k = 0; k < 2; k++)
            batch[i]->wakes[k] = 2 * i + 1 + k < m ? batch[2 * i + 1 + k] : NULL;
        /* its caller and its waker (OWNERSHIP); relaxed: published by the release below */
        atomic_store_explicit(&batch[i]->refs, 2, memory_order_relaxed);
    }
    struct pg_op *root = m ? batch[0] : NULL;
    for (size_t i = 0; i < m; i++) /* release: pairs with wait_for_op */
        atomic_store_explicit(&batch[i]->done, 1, memory_order_release);
    if (root) {
        wake_op(root);
        op_release(root); /* as its waker */
    }
}

/* After a batch (or a failure): wake whoever waits for the lane as a whole. */
static void wake_all(struct pg_lane *l)
{
    atomic_fetch_add_explicit(&l->commits, 1, memory_order_release); /* pairs with wait_for_seq */
    chime__futex_wake_all(&l->commits);
}

/* Queue op and wait for its result. Return: its status, or the queue's refusal; op is still the
 * caller's to read and to release (op_release). */
static int run_waited(struct chime__backend *b, struct pg_op *op)
{
    op->waited = 1;
    int err = enqueue(b, op, NULL);
    if (err)
        return err;
    wait_for_op(op);
    return op->status;
}

/* A ticket names its operation: with CHIME_SYNC_EACH a put's caller waits for exactly that one
 * (the logic calls wait once per put in that mode, and never otherwise). */
int chime__pg_wait(struct chime__backend *b, uint64_t ticket)
{
    (void)b;
    if (!ticket)
        return 0;
    struct pg_op *op = (struct pg_op *)(uintptr_t)ticket;
    wait_for_op(op);
    int err = op->status;
    op_release(op);
    return err;
}

static int wait_lane(struct chime__backend *b, struct pg_lane *l, uint64_t seq)
{
    wait_for_seq(b, l, seq);
    uint64_t failed = atomic_load_explicit(&l->failed_from, memory_order_acquire);
    if (atomic_load_explicit(&l->committed, memory_order_acquire) >= seq &&
        !(failed && seq >= failed))
        return 0;
    int err = chime__pg_error(b);
    return err ? err : -EIO; /* failed, or the lane gave up */
}

int chime__pg_lanes_sync(struct chime__backend *b)
{
    for (int i = 0; i < PG_LANES; i++) {
        struct pg_lane *l = b->lanes[i];
        pthread_mutex_lock(&l->lock);
        uint64_t seq = l->next_seq;
        pthread_mutex_unlock(&l->lock);
        int err = wait_lane(b, l, seq);
        if (err)
            return err;
    }
    return chime__pg_error(b);
}

/* ---- the operations ---- */

/* Due times are bigint in the database: beyond 2^63 - 1 ns (the year 2262) they do not fit. A put
 * there is refused (chime_store.h), but for UINT64_MAX, which is kept and never fires (as with the
 * journal), and a retry's saturated delay: both are stored as DUE_MAX, a row never read, since
 * every read takes parts below a bound that saturates at DUE_MAX too (firing.c, loader.c). So a put
 * at DUE_MAX itself is refused as well: stored, it would mean "never", where the journal fires it
 * in 2262 (found in review: it returned 0 and never fired). */
#define DUE_MAX ((uint64_t)INT64_MAX)

/* Whether a put due at `due` for a shard another node owns is notified to it (P7): due before
 * now + notify_ns, which may pass UINT64_MAX (a horizon that long: every put is). */
static bool due_soon(const struct chime__backend *b, uint64_t due)
{
    uint64_t now = chime__pg_wall();
    return due <= now || due - now < b->notify_ns;
}

static int due_stored(uint64_t due, int retry, uint64_t *stored)
{
    if (due >= DUE_MAX && due != UINT64_MAX && !retry)
        return -EINVAL; /* a user's put or requeue: refused, nothing written */
    *stored = due > DUE_MAX ? DUE_MAX : due;
    return 0;
}

int chime__pg_put(struct chime__backend *b, const struct chime__put *p, struct chime__put_result *res,
                  uint64_t *ticket)
{
    uint64_t due;
    if (due_stored(p->due_ns, p->if_version != 0, &due))
        return -EINVAL;
    struct pg_op *op = op_new(p->if_version ? PG_OP_RETRY : PG_OP_PUT, p->key, p->key_len,
                              p->payload, p->payload_len);
    unsigned fenced = pg_fence_shard(p->if_fence); /* a retry: its firing's shard */
    if (!op) {
        if (p->if_version)
            chime__pg_settled(b, fenced, 1); /* the logic fails the store (-ENOMEM) */
        return -ENOMEM;
    }
    op->shard = chime__pg_shard_of(p->key, p->key_len, b->schema.shards);
    if (p->if_version && fenced == op->shard)
        op->settles = b; /* a retry settles its firing (backend.h, fire), whatever its fate */
    else if (p->if_version)
        chime__pg_settled(b, fenced, 1); /* refused below (-ESTALE) */
    op->due = due; /* op->part: stamped by the lane before each attempt (batch.c, restamp) */
    op->attempt = p->attempt;
    op->version = p->if_version;
    op->epoch = pg_fence_epoch(p->if_fence);
    uint64_t held = chime__pg_epoch_of(b, op->shard);
    /* A put due soon for a shard another node owns is notified to it (P7); its own are armed by
     * the lane after the commit. */
    op->note = !held && due_soon(b, due);
    memset(res, 0, sizeof *res);
    res->owned = held != 0;
    if (!p->if_version) { /* deferred: the version is the database's (backend.h) */
        bool waited = b->cfg->sync == CHIME_SYNC_EACH; /* the logic waits for this ticket */
        op->waited = waited;
        int err = enqueue_or_release(b, op); /* unless waited, the lane may free op at once */
        *ticket = !err && waited ? (uint64_t)(uintptr_t)op : 0;
        return err;
    }
    /* Draining or not, as an acknowledgement: a retry asked for while the shard drains is
     * recorded in its epoch (the database checks it, P1), and the next owner's takeover reads it
     * with its delay; refused here, the next owner fired the old version at once (found in
     * review). */
    if (pg_fence_shard(p->if_fence) != op->shard ||
        !chime__pg_believes(b, op->shard, op->epoch)) {
        op_release(op);
        return -ESTALE; /* the firing's lease has lapsed: its new owner fires it again */
    }
    int err = run_waited(b, op);
    if (!err) {
        res->ref = (struct chime__ref){ op->out_version, pg_fence(op->epoch, op->shard) };
        *ticket = 0;
    }
    op_release(op);
    return err;
}

int chime__pg_cancel(struct chime__backend *b, const void *key, size_t key_len, uint64_t firing,
                     struct chime__ref *victim, uint64_t *ticket)
{
    struct pg_op *op = op_new(PG_OP_CANCEL, key, key_len, NULL, 0);
    if (!op)
        return -ENOMEM;
    op->shard = chime__pg_shard_of(key, key_len, b->schema.shards);
    op->version = firing;
    int err = run_waited(b, op);
    if (!err || err == -EINPROGRESS)
        *victim = (struct chime__ref){ op->out_version, 0 };
    op_release(op);
    *ticket = 0; /* committed before run_waited returned */
    return err;
}

/* An acknowledgement or burial that could not be made (no memory): a firing's is settled all the
 * same (the logic fails the store). */
static int outcome_unqueued(struct chime__backend *b, const struct chime__timer *t)
{
    if (t->fired)
        chime__pg_settled(b, pg_fence_shard(t->ref.fence), 1);
    return -ENOMEM;
}

int chime__pg_ack(struct chime__backend *b, const struct chime__timer *t, int current)
{
    (void)current; /* other nodes may put the key: the database checks the version (backend.h) */
    struct pg_op *op = op_new(PG_OP_ACK, t->key, t->key_len, NULL, 0);
    if (!op)
        return outcome_unqueued(b, t);
    op->shard = pg_fence_shard(t->ref.fence);
    op->settles = t->fired ? b : NULL;
    op->version = t->ref.version;
    op->epoch = pg_fence_epoch(t->ref.fence);
    return enqueue_or_release(b, op); /* D3: not waited for; refused in the database if stale (P1) */
}

int chime__pg_bury(struct chime__backend *b, const struct chime__timer *t)
{
    struct pg_op *op = op_new(PG_OP_BURY, t->key, t->key_len, t->payload, t->payload_len);
    if (!op)
        return outcome_unqueued(b, t);
    op->shard = pg_fence_shard(t->ref.fence);
    op->settles = t->fired ? b : NULL;
    op->version = t->ref.version;
    op->epoch = pg_fence_epoch(t->ref.fence);
    op->due = t->due_ns > DUE_MAX ? DUE_MAX : t->due_ns;
    op->attempt = t->attempt;
    return enqueue_or_release(b, op);
}

int chime__pg_unfire(struct chime__backend *b, const struct chime__timer *t)
{
    struct pg_op *op = op_new(PG_OP_UNFIRE, t->key, t->key_len, NULL, 0);
    if (!op)
        return outcome_unqueued(b, t);
    op->shard = pg_fence_shard(t->ref.fence);
    op->settles = b; /* once committed or refused: the drain's release waits for it (lease.c) */
    op->version = t->ref.version;
    op->epoch = pg_fence_epoch(t->ref.fence);
    op->attempt = t->attempt;
    return enqueue_or_release(b, op);
}

int chime__pg_dead_requeue(struct chime__backend *b, const void *key, size_t key_len,
                           uint64_t due_ns, const struct chime__dead *seen,
                           struct chime__put_result *res, chime__timer_fn *fn, void *ctx,
                           uint64_t *ticket)
{
    (void)seen; /* no dead_read: the database reads the dead letter in the same statement */
    uint64_t due;
    if (due_stored(due_ns, 0, &due))
        return -EINVAL;
    struct pg_op *op = op_new(PG_OP_REQUEUE, key, key_len, NULL, 0);
    if (!op)
        return -ENOMEM;
    op->shard = chime__pg_shard_of(key, key_len, b->schema.shards);
    op->due = due; /* op->part: stamped by the lane (restamp) */
    uint64_t held = chime__pg_epoch_of(b, op->shard);
    op->note = !held && due_soon(b, due_ns);
    int err = run_waited(b, op);
    if (!err) {
        *res = (struct chime__put_result){ .ref = { op->out_version, held ? pg_fence(held, op->shard) : 0 },
                                           .owned = held != 0 };
        struct chime__timer t = { key, key_len, op->out_payload, op->out_payload_len, due_ns, 0,
                                  res->ref, 0 };
        fn(ctx, &t);
        *ticket = 0;
    }
    free(op->out_payload);
    op_release(op);
    return err;
}

int chime__pg_dead_drop(struct chime__backend *b, const void *key, size_t key_len,
                        uint64_t *ticket)
{
    struct pg_op *op = op_new(PG_OP_DROP, key, key_len, NULL, 0);
    if (!op)
        return -ENOMEM;
    op->shard = chime__pg_shard_of(key, key_len, b->schema.shards);
    *ticket = 0;
    int err = run_waited(b, op);
    op_release(op);
    return err;
}

/* ---- the lane thread ---- */

/* Take the next batch off the queue: a prefix, with at most one operation per key, within the
 * byte bound. Lane locked. */
static size_t take(struct pg_lane *l, struct pg_op **batch)
{
    size_t n = 0, bytes = 0;
    memset(l->seen, 0, sizeof l->seen);
    while (l->head && n < PG_BATCH) {
        struct pg_op *op = l->head;
        bytes += (size_t)op->key_len + op->payload_len;
        if (n && bytes > chime__pg_batch_bytes)
            break; /* THE BYTE BOUND: the next batch takes it */
        /* A set of key hashes, 4096 slots with linear probing: PG_BATCH keys fill half of it. */
        size_t i = op->hash & (LANE_SEEN - 1);
        int dup = 0;
        while (l->seen[i]) {
            struct pg_op *o = l->seen[i];
            if (o->hash == op->hash && o->key_len == op->key_len &&
                !memcmp(o->data, op->data, op->key_len)) {
                dup = 1;
                break;
            }
            i = (i + 1) & (LANE_SEEN - 1);
        }
        if (dup)
            break; /* this key's second operation waits for the next batch (D4) */
        l->seen[i] = op;
        batch[n++] = op;
        l->head = op->next;
        if (!l->head)
            l->tail = NULL;
    }
    return n;
}

static void *lane_main(void *arg)
{
    struct pg_lane *l = arg;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        while (!l->head && !l->stop)
            pthread_cond_wait(&l->work, &l->lock);
        if (!l->head)
            break;
        size_t n = take(l, l->batch);
        pthread_mutex_unlock(&l->lock);
        int err = chime__pg_lane_run(l, l->batch, n);
        uint64_t last = l->batch[n - 1]->seq; /* n > 0: the queue was not empty */
        if (err && !atomic_load_explicit(&l->failed_from, memory_order_relaxed))
            atomic_store_explicit(&l->failed_from, l->batch[0]->seq, memory_order_relaxed);
        settle(l->batch, n, err);
        atomic_store_explicit(&l->committed, last, memory_order_release); /* pairs with wait_for */
        wake_all(l);
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

int chime__pg_lanes_start(struct chime__backend *b)
{
    for (int i = 0; i < PG_LANES; i++) {
        struct pg_lane *l = calloc(1, sizeof *l);
        if (!l)
            return -ENOMEM;
        b->lanes[i] = l;
        l->b = b;
        l->index = i;
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->work, NULL);
        l->conn = (struct pg_conn){ .conninfo = b->conninfo, .role = "lane", .node = b->node,
                                    .lease_ns = b->lease_ns };
        int err = chime__pg_connect(&l->conn);
        if (err)
            return err == PG_LOST ? -ECONNREFUSED : err;
        if (pthread_create(&l->thread, NULL, lane_main, l) != 0)
            return -ECHILD;
        l->started = 1;
    }
    return 0;
}

void chime__pg_lanes_stop(struct chime__backend *b)
{
    for (int i = 0; i < PG_LANES; i++) {
        struct pg_lane *l = b->lanes[i];
        if (!l)
            continue;
        if (l->started) {
            /* The lane ends once its queue is empty. If the database stays unreachable for
             * GIVE_UP_NS (three leases, at least 10 s), what is queued fails with -EIO instead. */
            uint64_t give_up = b->lease_ns * 3 > GIVE_UP_NS ? b->lease_ns * 3 : GIVE_UP_NS;
            uint64_t deadline = chime__pg_mono() + give_up;
            pthread_mutex_lock(&l->lock);
            l->stop = 1;
            uint64_t want = l->next_seq;
            pthread_cond_signal(&l->work);
            pthread_mutex_unlock(&l->lock);
            while (atomic_load_explicit(&l->committed, memory_order_acquire) < want &&
                   chime__pg_mono() < deadline) {
                struct timespec ts = { 0, 10000000 };
                nanosleep(&ts, NULL); /* close only: polling is simplest */
            }
            if (atomic_load_explicit(&l->committed, memory_order_acquire) < want) {
                /* What was queued is lost: the store fails, and close says so (found in review:
                 * the batch settled -EIO here without failing anything, and close returned 0 for
                 * puts it had never committed; test_pg_close). */
                chime__pg_fail(b, -EIO);
                atomic_store_explicit(&l->closed, 1, memory_order_release);
                atomic_store_explicit(&l->abandon, 1, memory_order_release); /* pairs with reconnect */
                wake_all(l);
            }
            pthread_join(l->thread, NULL);
        }
        for (struct pg_op *op = l->head, *next; op; op = next) { /* never started, or gave up */
            next = op->next;
            op_free(op);
        }
        chime__pg_disconnect(&l->conn);
        chime__pg_lane_free_arrays(l);
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->work);
        free(l);
        b->lanes[i] = NULL;
    }
    if (chime__pg_lanes_stopped_hook)
        chime__pg_lanes_stopped_hook(b);
}

void (*chime__pg_lanes_stopped_hook)(struct chime__backend *b);
