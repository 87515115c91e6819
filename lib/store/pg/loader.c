/* SPDX-License-Identifier: MIT */
/*
 * The loader thread: everything that hands timers to the logic other than its own load() calls
 * (sink->arm), on a connection of its own that LISTENs on channel "chime".
 *
 *   takeovers   shards the lease thread just acquired: their pending timers due before max_until,
 *               read after the shards were registered (P7), in two chunks, the next two seconds
 *               first, so that a dead node's overdue timers fire before the rest is read;
 *   arms        this node's own puts, after their lane committed them (lanes never call the logic:
 *               a cancel holds its key's lock while it waits for a lane);
 *   notifies    other nodes' puts due soon in a shard this node owns ("shard:hexkey"): the keys'
 *               current versions are read and armed;
 *   polls       every POLL_NS (and at once after a reconnection, or when a lane lost a batch's
 *               results): every pending row of an owned shard due before max_until whose
 *               transaction the previous poll's snapshot did not see (P7), or, for the first
 *               poll on a new connection, every pending row of those (SERVER RESTARTS). A
 *               notification lost with a connection therefore delays a timer by at most POLL_NS,
 *               never loses it.
 *
 * The poll's order matters: its snapshot is taken first, then max_until and the owned shards are
 * read. A load or takeover that moves either forward after that reads with a later snapshot, so a
 * row committed before the poll's snapshot is seen by one of the two (pg.h, P7).
 *
 * SERVER RESTARTS. A snapshot says nothing of the transactions of a later server. After a crash
 * the server may give out again ids it had given out but never made durable (aborted transactions:
 * their abort records are not flushed), and after a failover the new primary those its WAL never
 * received. A row committed under such an id, below the previous snapshot's xmax and not in its
 * list, counts as seen by it: a poll from that snapshot skipped it, and so did every poll after,
 * and its timer was lost if its notification was (found in review; test_pg_cuts). So the first
 * poll after the loader (re)connects reads every pending row of the owned shards due before
 * max_until, as a takeover does, and the polls after it go on from its snapshot. What was armed
 * already is armed again (harmless, as below).
 *
 * SKIPPED TRANSACTIONS. Reading back what this node just wrote would double the database's work
 * for a node that puts its own timers (a poll after 200 000 puts due soon read all of them again,
 * and armed each a second time). A lane that committed a transaction and queued the arms of all
 * its puts (batch.c, apply) lists its id (chime__pg_armed_tx); the poll takes the list after its
 * snapshot and skips those transactions' rows. That loses nothing: each of those rows was armed,
 * or was for a shard this node did not hold or due after `loaded` when its lane looked, after the
 * commit; a takeover or load that changed either began after that look and so after the commit,
 * and reads the row itself (P7). A transaction whose results were lost, one of whose arms could
 * not be queued, or one that requeued a dead letter (its caller arms it with an epoch read before
 * the commit, which a takeover in between makes stale: batch.c, apply) is never listed: the poll
 * reads it. If the list outgrows ARMED_TX_MAX (polls stalled), it is dropped and the next poll
 * skips nothing. A transaction listed after a poll's snapshot but committed before it is read by
 * that poll (armed twice: harmless).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "store/pg/pg.h"

#define POLL_NS UINT64_C(1000000000)
#define FIRST_CHUNK_NS UINT64_C(2000000000)
#define ARMED_TX_MAX 65536 /* transactions listed for the next poll to skip, at most */

enum { TASK_TAKEOVER, TASK_ARM };

struct pg_task {
    struct pg_task *next;
    int kind;
    size_t n;                 /* takeover: shards */
    int32_t *shards;
    int64_t *epochs;
    struct chime__timer t;    /* arm: the timer; key and payload in data */
    unsigned char data[];
};

static void enqueue(struct chime__backend *b, struct pg_task *t)
{
    pthread_mutex_lock(&b->task_lock);
    if (b->tasks_tail)
        b->tasks_tail->next = t;
    else
        b->tasks = t;
    b->tasks_tail = t;
    pthread_mutex_unlock(&b->task_lock);
    uint64_t one = 1;
    ssize_t w = write(b->wake_fd, &one, sizeof one);
    (void)w; /* an eventfd counter does not overflow here */
}

void chime__pg_poll_soon(struct chime__backend *b)
{
    /* release: pairs with the loader's acq_rel exchange; what the caller did before is seen */
    atomic_store_explicit(&b->poll_now, 1, memory_order_release);
    uint64_t one = 1;
    ssize_t w = write(b->wake_fd, &one, sizeof one); /* or it polls only at its next POLL_NS */
    (void)w; /* an eventfd counter does not overflow here */
}

void chime__pg_takeover(struct chime__backend *b, const int32_t *shards, const int64_t *epochs,
                        size_t n)
{
    struct pg_task *t = calloc(1, sizeof *t + n * (sizeof *shards + sizeof *epochs));
    if (!t) { /* the poll reads new rows only: a lapse here would miss older ones */
        chime__pg_fail(b, -ENOMEM);
        return;
    }
    t->kind = TASK_TAKEOVER;
    t->n = n;
    t->epochs = (int64_t *)(void *)t->data;
    t->shards = (int32_t *)(void *)(t->data + n * sizeof *epochs);
    memcpy(t->epochs, epochs, n * sizeof *epochs);
    memcpy(t->shards, shards, n * sizeof *shards);
    enqueue(b, t);
}

int chime__pg_arm_later(struct chime__backend *b, const struct chime__timer *timer)
{
    struct pg_task *t = calloc(1, sizeof *t + timer->key_len + timer->payload_len);
    if (!t) { /* committed, not armed: the next poll finds it (its transaction is not listed) */
        chime__pg_poll_soon(b);
        return -ENOMEM;
    }
    t->kind = TASK_ARM;
    t->t = *timer;
    memcpy(t->data, timer->key, timer->key_len);
    memcpy(t->data + timer->key_len, timer->payload, timer->payload_len);
    t->t.key = t->data;
    t->t.payload = t->data + timer->key_len;
    enqueue(b, t);
    return 0;
}

void chime__pg_armed_tx(struct chime__backend *b, uint64_t xid)
{
    pthread_mutex_lock(&b->task_lock);
    if (!b->armed_tx && !b->armed_tx_lost)
        b->armed_tx = malloc(ARMED_TX_MAX * sizeof *b->armed_tx);
    if (b->armed_tx && b->armed_tx_n < ARMED_TX_MAX)
        b->armed_tx[b->armed_tx_n++] = (int64_t)xid;
    else
        b->armed_tx_lost = 1; /* the next poll reads everything */
    pthread_mutex_unlock(&b->task_lock);
}

/* Take the list of transactions the poll may skip into *out (n of them; NULL and 0: skip none). */
static size_t take_armed_tx(struct chime__backend *b, int64_t **out)
{
    pthread_mutex_lock(&b->task_lock);
    size_t n = b->armed_tx_lost ? 0 : b->armed_tx_n;
    *out = b->armed_tx_lost ? NULL : b->armed_tx;
    if (b->armed_tx_lost)
        free(b->armed_tx);
    b->armed_tx = NULL;
    b->armed_tx_n = 0;
    b->armed_tx_lost = 0;
    pthread_mutex_unlock(&b->task_lock);
    return n;
}

/* Hand a timer read for an owned shard to the logic, if this node still holds it. */
static int arm(void *ctx, const struct chime__timer *t)
{
    struct chime__backend *b = ctx;
    if (chime__pg_holds(b, pg_fence_shard(t->ref.fence), pg_fence_epoch(t->ref.fence))) {
        b->sink.arm(b->sink.ctx, t);
        atomic_fetch_add_explicit(&b->armed, 1, memory_order_relaxed); /* a statistic */
    }
    return 0;
}

/* ---- the loader's state ---- */

struct loader {
    struct chime__backend *b;
    struct pg_conn *pc;
    char *snapshot;          /* the previous poll's */
    int full;                /* the next poll reads every pending row (SERVER RESTARTS) */
    int32_t *shards;
    int64_t *epochs;
    struct pg_array keys;    /* notified keys waiting to be read */
};

static int listen_on(struct loader *ld)
{
    return chime__pg_exec(ld->pc, "LISTEN chime", 0, NULL, NULL);
}

static int takeover(struct loader *ld, const struct pg_task *t)
{
    struct chime__backend *b = ld->b;
    uint64_t until = atomic_load_explicit(&b->max_until, memory_order_acquire); /* after registering */
    uint64_t split = chime__pg_wall() + FIRST_CHUNK_NS;
    if (split > until)
        split = until;
    int rc = chime__pg_read_timers(b, ld->pc, t->shards, t->epochs, t->n, 0, split, arm, b);
    if (rc == PG_OK && split < until)
        rc = chime__pg_read_timers(b, ld->pc, t->shards, t->epochs, t->n, split, until, arm, b);
    return rc;
}

static int exec(struct pg_conn *pc, const char *sql, PGresult **out)
{
    return chime__pg_exec(pc, sql, 0, NULL, out);
}

/* One poll (see above). On success the snapshot moves on, and a full poll is done. */
static int poll_once(struct loader *ld)
{
    struct chime__backend *b = ld->b;
    PGresult *r = NULL;
    int rc = exec(ld->pc, "BEGIN ISOLATION LEVEL REPEATABLE READ", NULL);
    if (rc == PG_OK) /* the poll's rows through the BRIN index on tx (firing.c, poll_sql) */
        rc = exec(ld->pc, "SET LOCAL enable_seqscan = off", NULL);
    if (rc == PG_OK)
        rc = exec(ld->pc, "SELECT pg_current_snapshot()::text", &r);
    char *next = NULL;
    if (rc == PG_OK && !(next = strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0))))
        rc = -ENOMEM;
    PQclear(r);
    int64_t *skip = NULL;
    size_t n_skip = 0;
    if (rc == PG_OK) {
        n_skip = take_armed_tx(b, &skip); /* after the snapshot: see SKIPPED TRANSACTIONS */
        pthread_mutex_lock(&b->own_lock); /* after the snapshot: see above */
        uint64_t until = atomic_load_explicit(&b->max_until, memory_order_relaxed);
        size_t n = chime__pg_owned(b, ld->shards, ld->epochs);
        pthread_mutex_unlock(&b->own_lock);
        if (n && (ld->snapshot || ld->full)) /* since NULL: every pending row */
            rc = chime__pg_read_cursor(b, ld->pc, ld->shards, ld->epochs, n, 0, until,
                                       ld->full ? NULL : ld->snapshot, skip, n_skip, arm, b);
    }
    free(skip);
    if (rc == PG_OK)
        rc = exec(ld->pc, "COMMIT", NULL);
    else if (rc != PG_LOST && ld->pc->c)
        exec(ld->pc, "ROLLBACK", NULL);
    if (rc == PG_OK) {
        free(ld->snapshot);
        ld->snapshot = next;
        ld->full = 0;
        atomic_fetch_add_explicit(&b->polls, 1, memory_order_relaxed); /* a statistic */
    } else {
        free(next);
    }
    return rc;
}

static const char fetch_sql[] =
    "SELECT t.key, t.payload, t.due, k.version, k.attempt, t.shard, s.epoch"
    " FROM unnest($1::bytea[]) AS q(key)"
    " JOIN chime.keys k ON k.key = q.key AND k.end_epoch IS NULL"
    " JOIN chime.shards s ON s.shard = k.shard AND s.owner = $2 AND s.token = $3::int8"
    " AND s.expires > now() AND k.fire_epoch <> s.epoch"
    " JOIN chime.timers t ON t.shard = k.shard AND t.part = k.part AND t.key = k.key"
    " AND t.version = k.version WHERE t.part < $4::int8";

/* Read and arm the notified keys' current versions. */
static int fetch_notified(struct loader *ld)
{
    struct chime__backend *b = ld->b;
    char token[8], until[8];
    uint64_t tk = (uint64_t)b->token, u = atomic_load_explicit(&b->max_until, memory_order_acquire);
    if (u > (uint64_t)INT64_MAX)
        u = (uint64_t)INT64_MAX;
    for (int i = 0; i < 8; i++) {
        token[i] = (char)(tk >> (56 - 8 * i));
        until[i] = (char)(u >> (56 - 8 * i));
    }
    const char *v[4];
    int len[4], fmt[4] = { 1, 1, 1, 1 };
    v[0] = chime__pg_array_done(&ld->keys, &len[0]);
    v[1] = b->node;
    len[1] = (int)strlen(b->node);
    v[2] = token;
    len[2] = 8;
    v[3] = until;
    len[3] = 8;
    if (!v[0])
        return -ENOMEM;
    PGresult *r =
        chime__pg_result(ld->pc, PQsendQueryParams(ld->pc->c, fetch_sql, 4, NULL, v, len, fmt, 1));
    int rc = chime__pg_status(ld->pc, r);
    for (int i = 0; rc == PG_OK && i < PQntuples(r); i++) {
        unsigned shard = (unsigned)chime__pg_i32(r, i, 5);
        struct chime__timer t = {
            .key = PQgetvalue(r, i, 0), .key_len = (size_t)PQgetlength(r, i, 0),
            .payload = PQgetvalue(r, i, 1), .payload_len = (size_t)PQgetlength(r, i, 1),
            .due_ns = (uint64_t)chime__pg_i64(r, i, 2), .attempt = (uint32_t)chime__pg_i32(r, i, 4),
            .ref = { (uint64_t)chime__pg_i64(r, i, 3), pg_fence((uint64_t)chime__pg_i64(r, i, 6), shard) } };
        arm(b, &t);
    }
    PQclear(r);
    if (rc == PG_OK)
        chime__pg_array_reset(&ld->keys);
    return rc;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static _Atomic int drop_notifications; /* the test hook below */

void chime__pg_drop_notifications(int on)
{
    atomic_store_explicit(&drop_notifications, on, memory_order_relaxed); /* a test's switch */
}

/* Note the keys of notifications for shards this node holds. */
static void collect(struct loader *ld)
{
    PGnotify *nt;
    unsigned char key[CHIME_STORE_KEY_MAX];
    while ((nt = PQnotifies(ld->pc->c))) {
        if (atomic_load_explicit(&drop_notifications, memory_order_relaxed)) {
            PQfreemem(nt); /* lost, as with a connection that dropped */
            continue;
        }
        char *colon = strchr(nt->extra, ':');
        unsigned shard = (unsigned)strtoul(nt->extra, NULL, 10);
        size_t hex = colon ? strlen(colon + 1) : 1;
        if (colon && hex % 2 == 0 && hex / 2 <= sizeof key && shard < ld->b->schema.shards &&
            chime__pg_epoch_of(ld->b, shard)) {
            size_t n = hex / 2, ok = 1;
            for (size_t i = 0; i < n; i++) {
                int hi = hexval(colon[1 + 2 * i]), lo = hexval(colon[2 + 2 * i]);
                ok &= hi >= 0 && lo >= 0;
                key[i] = (unsigned char)(hi << 4 | (lo & 15));
            }
            if (ok && n)
                chime__pg_array_bytes(&ld->keys, key, n);
            atomic_fetch_add_explicit(&ld->b->notified, 1, memory_order_relaxed); /* a statistic */
        }
        PQfreemem(nt);
    }
}

/* Run the queued tasks, in order. Return: PG_OK or PG_LOST (the task is kept for the retry). */
static int run_tasks(struct loader *ld)
{
    struct chime__backend *b = ld->b;
    for (;;) {
        pthread_mutex_lock(&b->task_lock);
        struct pg_task *t = b->tasks;
        pthread_mutex_unlock(&b->task_lock);
        if (!t)
            return PG_OK;
        int rc = t->kind == TASK_ARM ? (arm(b, &t->t), PG_OK) : takeover(ld, t);
        if (rc == PG_LOST || rc == PG_RETRY)
            return PG_LOST;
        if (rc < 0)
            chime__pg_fail(b, -EIO); /* not a connection: the schema, or memory */
        pthread_mutex_lock(&b->task_lock);
        b->tasks = t->next;
        if (!b->tasks)
            b->tasks_tail = NULL;
        pthread_mutex_unlock(&b->task_lock);
        free(t);
    }
}

void chime__pg_revoke_later(struct chime__backend *b)
{
    /* release: pairs with the acquire exchange in loader_main (nothing else is published by it) */
    atomic_store_explicit(&b->revoke_wanted, 1, memory_order_release);
    uint64_t one = 1;
    ssize_t w = write(b->wake_fd, &one, sizeof one);
    (void)w; /* an eventfd counter does not overflow here */
}

static void *loader_main(void *arg)
{
    struct loader *ld = arg;
    struct chime__backend *b = ld->b;
    uint64_t next_poll = chime__pg_mono() + POLL_NS;
    while (!atomic_load_explicit(&b->stop, memory_order_acquire)) { /* pairs with loader_stop */
        if (atomic_exchange_explicit(&b->revoke_wanted, 0, memory_order_acquire))
            b->sink.revoke(b->sink.ctx); /* see chime__pg_revoke_later */
        if (!ld->pc->c) {
            if (chime__pg_reconnect(ld->pc, &b->stop) != 0)
                break;
            if (listen_on(ld) != PG_OK) {
                chime__pg_disconnect(ld->pc);
                continue;
            }
            atomic_store_explicit(&b->poll_now, 1, memory_order_relaxed); /* what LISTEN missed */
            ld->full = 1; /* the server may be another: SERVER RESTARTS */
        }
        int rc = run_tasks(ld);
        if (rc == PG_OK && PQconsumeInput(ld->pc->c))
            collect(ld);
        else
            rc = PG_LOST;
        if (rc == PG_OK && ld->keys.n)
            rc = fetch_notified(ld);
        uint64_t now = chime__pg_mono();
        /* acq_rel: pairs with chime__pg_poll_soon's release. Taken even when the time has come,
         * so that a request made before this poll does not make a second one at once. A failed
         * poll is made again on the new connection, which asks for one. */
        if (rc == PG_OK &&
            (atomic_exchange_explicit(&b->poll_now, 0, memory_order_acq_rel) || now >= next_poll)) {
            rc = poll_once(ld);
            next_poll = now + POLL_NS;
        }
        if (rc == PG_LOST || rc == PG_RETRY) {
            chime__pg_disconnect(ld->pc);
            continue;
        }
        if (rc != PG_OK)
            chime__pg_fail(b, -EIO);
        now = chime__pg_mono();
        long ms = next_poll > now ? (long)((next_poll - now) / 1000000u) + 1 : 0;
        struct pollfd pfd[2] = { { b->wake_fd, POLLIN, 0 }, { PQsocket(ld->pc->c), POLLIN, 0 } };
        if (poll(pfd, 2, (int)ms) > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t got = read(b->wake_fd, &v, sizeof v);
            (void)got;
        }
    }
    return NULL;
}

static struct loader *the_loader(struct chime__backend *b)
{
    return (struct loader *)b->loader;
}

int chime__pg_loader_start(struct chime__backend *b)
{
    struct loader *ld = calloc(1, sizeof *ld);
    if (!ld)
        return -ENOMEM;
    b->loader = ld;
    ld->b = b;
    ld->pc = &b->listen_conn;
    ld->shards = malloc(b->schema.shards * sizeof *ld->shards);
    ld->epochs = malloc(b->schema.shards * sizeof *ld->epochs);
    chime__pg_array_init(&ld->keys, PG_OID_BYTEA);
    b->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!ld->shards || !ld->epochs || b->wake_fd < 0)
        return -ENOMEM;
    *ld->pc = (struct pg_conn){ .conninfo = b->conninfo, .role = "loader", .node = b->node,
                                .lease_ns = b->lease_ns };
    int rc = chime__pg_connect(ld->pc);
    if (rc == 0)
        rc = listen_on(ld);
    if (rc == 0)
        rc = poll_once(ld); /* the first snapshot: every poll after it reads what came since */
    if (rc != 0)
        return rc == PG_LOST ? -ECONNREFUSED : pg_rc_is_db(rc) ? -EIO : rc;
    if (pthread_create(&b->loader_thread, NULL, loader_main, ld) != 0)
        return -ECHILD;
    b->loader_started = 1;
    return 0;
}

void chime__pg_loader_stop(struct chime__backend *b)
{
    struct loader *ld = the_loader(b);
    if (b->loader_started) {
        uint64_t one = 1;
        ssize_t w = write(b->wake_fd, &one, sizeof one); /* b->stop is set: it ends */
        (void)w;
        pthread_join(b->loader_thread, NULL);
        b->loader_started = 0;
    }
    while (b->tasks) {
        struct pg_task *t = b->tasks;
        b->tasks = t->next;
        free(t);
    }
    b->tasks_tail = NULL;
    free(b->armed_tx);
    b->armed_tx = NULL;
    b->armed_tx_n = 0;
    if (b->wake_fd >= 0)
        close(b->wake_fd);
    b->wake_fd = -1;
    chime__pg_disconnect(&b->listen_conn);
    if (ld) {
        free(ld->snapshot);
        free(ld->shards);
        free(ld->epochs);
        chime__pg_array_free(&ld->keys);
        free(ld);
        b->loader = NULL;
    }
}
