/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend's operations table (backend.h), open and close. pg.h describes the
 * protocol; the other files of this folder implement it.
 *
 * OPEN: connect and read the schema (-ENOENT: none; -EPROTO: another version; -EINVAL: the shards
 * asked for differ); refuse a node name another live process holds (-EBUSY); start the lanes, the
 * loader (which takes the first poll's snapshot), the lease thread (whose first round, run before
 * open returns, takes this node's share of the free shards) and the housekeeper (which makes the
 * partitions of the next stretch of time first).
 *
 * CLOSE: the logic has stopped firing. The lanes commit everything queued (acknowledgements
 * included, in this node's epochs, which the lease thread renews meanwhile; it acquires nothing new
 * once close has begun); the lease thread stops; then this node releases its shards and deletes its
 * heartbeat, so that the others take its shards at once rather than after a lease.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "store/pg/pg.h"

void chime__pg_fail(struct chime__backend *b, int err)
{
    int none = 0;
    atomic_compare_exchange_strong_explicit(&b->error, &none, err, memory_order_acq_rel,
                                            memory_order_relaxed);
    if (!atomic_exchange_explicit(&b->failed_told, 1, memory_order_acq_rel))
        b->sink.failed(b->sink.ctx, atomic_load_explicit(&b->error, memory_order_acquire));
}

int chime__pg_error(const struct chime__backend *b)
{
    return atomic_load_explicit(&b->error, memory_order_acquire); /* pairs with chime__pg_fail */
}

int chime__pg_holds(struct chime__backend *b, unsigned shard, uint64_t epoch)
{
    /* seq_cst: fire() counts a firing in `unsettled`, then asks here; the lease thread sets
     * draining, then (a round later) reads `unsettled` before it releases. Both sides seq_cst, so
     * that one of them sees the other's write: a firing is refused here, or the release waits for
     * it (lease.c). A plain load on x86, as acquire on ARMv8. */
    return chime__pg_believes(b, shard, epoch) &&
           !atomic_load_explicit(&b->shards[shard].draining, memory_order_seq_cst);
}

void chime__pg_settled(struct chime__backend *b, unsigned shard, uint32_t n)
{
    /* release: pairs with the lease thread's load before a release (lease.c); the outcome's
     * commit came first */
    if (shard < b->schema.shards && n)
        atomic_fetch_sub_explicit(&b->shards[shard].unsettled, n, memory_order_release);
}

int chime__pg_believes(struct chime__backend *b, unsigned shard, uint64_t epoch)
{
    if (shard >= b->schema.shards || !epoch)
        return 0;
    struct pg_shard *sh = &b->shards[shard];
    for (;;) {
        /* Acquire, each: pairs with the lease thread's release stores (lease.c, believe, forget and
         * the renewal's compare-and-swap): a new epoch is never seen with the old one's deadline. */
        if (atomic_load_explicit(&sh->epoch, memory_order_acquire) != epoch)
            return 0;
        uint64_t until = atomic_load_explicit(&sh->valid_until, memory_order_acquire);
        /* The epoch again: a believe() of the next epoch between the two loads would pair this
         * epoch with the next one's deadline (found in review). The deadline read is the one
         * believe() stores after the epoch, so if it is the next's, this load sees the next
         * epoch. */
        if (atomic_load_explicit(&sh->epoch, memory_order_acquire) != epoch)
            return 0;
        if (until && chime__pg_mono() >= until) {
            /* Lapsed. Make it final before anything is refused for it (P2): a renewal that checked
             * the belief just before it lapsed then fails its compare-and-swap on this 0 and retakes
             * the shard in a new epoch, instead of extending one in which a firing was dropped.
             * relaxed: the word itself is the decision. A failure means a renewal or a new belief
             * came first: look again. */
            if (atomic_compare_exchange_strong_explicit(&sh->valid_until, &until, 0,
                                                        memory_order_relaxed, memory_order_relaxed))
                return 0;
            continue;
        }
        return until != 0;
    }
}

uint64_t chime__pg_epoch_of(struct chime__backend *b, unsigned shard)
{
    uint64_t epoch = atomic_load_explicit(&b->shards[shard].epoch, memory_order_acquire);
    return chime__pg_holds(b, shard, epoch) ? epoch : 0;
}

/*
 * A recorded firing whose handler has not begun and never will (backend.h, abandon). On a shard
 * that drains, in the epoch this node still believes in, it is un-recorded (lanes.c,
 * chime__pg_unfire): the shard's next owner then fires it with the attempt it would have had, and
 * a join spends no attempt (found in review: with max_attempts 1 such a timer went to the dead
 * letters unrun; test_pg_drain). It stays unsettled until the un-record has committed or been
 * refused, so the drain's release waits for it (lease.c, DRAIN); if the drain's lease bound
 * releases the shard first, the un-record either holds the shard's row FOR KEY SHARE and commits
 * before the next acquisition (which waits for it), or finds the shard gone and changes nothing.
 * Elsewhere (a lapse, a lost lease, close, a failure) it is settled at once: the next owner or the
 * restart fires it with attempt + 1, as after a crash.
 */
static void pg_abandon(struct chime__backend *b, const struct chime__timer *t)
{
    unsigned shard = pg_fence_shard(t->ref.fence);
    uint64_t epoch = pg_fence_epoch(t->ref.fence);
    /* relaxed: either answer is safe, since the database checks the epoch (P1); and the logic saw
     * this fence invalid (chime__pg_holds: a seq_cst load of draining) on this thread before, so a
     * drain of this epoch is seen here */
    if (chime__pg_believes(b, shard, epoch) &&
        atomic_load_explicit(&b->shards[shard].draining, memory_order_relaxed))
        chime__pg_unfire(b, t);
    else
        chime__pg_settled(b, shard, 1);
}

static int pg_fence_valid(struct chime__backend *b, uint64_t fence)
{
    return chime__pg_holds(b, pg_fence_shard(fence), pg_fence_epoch(fence));
}

static int pg_sync(struct chime__backend *b)
{
    return chime__pg_lanes_sync(b);
}

static void pg_stats(struct chime__backend *b, struct chime__backend_stats *out)
{
    uint64_t now = chime__pg_mono();
    atomic_store_explicit(&b->stats_wanted, now ? now : 1, memory_order_relaxed);
    pthread_mutex_lock(&b->lease_lock);
    pthread_cond_broadcast(&b->lease_cond); /* the housekeeper counts soon */
    pthread_mutex_unlock(&b->lease_lock);
    out->pending = atomic_load_explicit(&b->count_pending, memory_order_relaxed);
    out->dead = atomic_load_explicit(&b->count_dead, memory_order_relaxed);
    out->bytes = atomic_load_explicit(&b->count_bytes, memory_order_relaxed);
}

void (*chime__pg_wait_hook)(struct chime__backend *b, struct pg_conn *pc);

int chime__pg_wait_server(struct chime__backend *b, struct pg_conn *pc, int rc)
{
    if (chime__pg_wait_hook)
        chime__pg_wait_hook(b, pc);
    if (rc == PG_LOST) {
        chime__pg_disconnect(pc);
        rc = chime__pg_connect(pc);
    }
    if (rc != PG_OK) { /* a retry asked for, or no server yet */
        struct timespec ts = { 0, 50000000 };
        nanosleep(&ts, NULL);
    }
    /* acquire: pairs with close's release store of stop; relaxed: closing is a flag alone */
    return !chime__pg_error(b) && !atomic_load_explicit(&b->stop, memory_order_acquire) &&
           !atomic_load_explicit(&b->closing, memory_order_relaxed);
}

/* The store's close began: a load or listing waiting for a lost server gives up (backend.h). Were
 * it to wait, close would wait with it, in stopping the keeper (a load) or for a handler (a
 * listing), for as long as the server stays away (found in review). */
static void pg_closing(struct chime__backend *b)
{
    atomic_store_explicit(&b->closing, 1, memory_order_relaxed); /* see chime__pg_wait_server */
}

/* A snapshot of the dead letters, read whole, so that fn runs with nothing held. A lost connection
 * or a restarted server is waited for, as every call does (chime_store.h), until the store closes
 * or stops (-ESHUTDOWN) or fails (its error); it gave up after 5 s with -EIO, which the contract
 * keeps for a schema the database rejects (found in review). It waits as loads do
 * (chime__pg_wait_server). */
static int pg_dead_list(struct chime__backend *b, chime__timer_fn *fn, void *ctx)
{
    int err = chime__pg_error(b);
    if (err)
        return err;
    PGresult *r = NULL;
    int rc;
    pthread_mutex_lock(&b->misc_lock);
    for (;;) {
        rc = b->misc_conn.c ? PG_OK : chime__pg_connect(&b->misc_conn);
        if (rc == PG_OK)
            rc = chime__pg_exec(&b->misc_conn,
                                "SELECT key, payload, due, attempt FROM chime.dead ORDER BY seq",
                                0, NULL, &r);
        if (rc != PG_LOST && rc != PG_RETRY)
            break;
        if (!chime__pg_wait_server(b, &b->misc_conn, rc))
            break;
    }
    pthread_mutex_unlock(&b->misc_lock);
    if (rc != PG_OK) {
        err = chime__pg_error(b);
        if (!err) /* stopped while it waited; a statement the database rejected; -ENOMEM */
            err = rc == PG_LOST || rc == PG_RETRY ? -ESHUTDOWN : pg_rc_is_db(rc) ? -EIO : rc;
        return err;
    }
    int got = 0;
    for (int i = 0; i < PQntuples(r) && !got; i++) {
        struct chime__timer t = { PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0),
                                  PQgetvalue(r, i, 1), (size_t)PQgetlength(r, i, 1),
                                  (uint64_t)chime__pg_i64(r, i, 2),
                                  (uint32_t)chime__pg_i32(r, i, 3), { 0, 0 }, 0 };
        got = fn(ctx, &t);
    }
    PQclear(r);
    return got;
}

/* ---- open and close ---- */

static void free_backend(struct chime__backend *b)
{
    chime__pg_disconnect(&b->fire_conn);
    chime__pg_disconnect(&b->load_conn);
    chime__pg_disconnect(&b->misc_conn);
    chime__pg_disconnect(&b->lease_conn);
    pthread_mutex_destroy(&b->own_lock);
    pthread_mutex_destroy(&b->fire_lock);
    pthread_mutex_destroy(&b->misc_lock);
    pthread_mutex_destroy(&b->lease_lock);
    pthread_mutex_destroy(&b->task_lock);
    pthread_cond_destroy(&b->lease_cond);
    free(b->shards);
    free(b->conninfo);
    free(b->node);
    free(b);
}

/* Stop every thread (the order of CLOSE above), release the shards if asked. The lanes first,
 * while the lease thread still renews: what they commit as the owner (acknowledgements, burials)
 * is checked against this node's leases (P1), and a lane slower than what was left of the lease
 * (a lock wait, a server restarting) had its acknowledgements refused, and their timers fired
 * again (found in review; test_pg_close). Nothing reaches the lanes once they stop: the logic has
 * stopped calling, and its sink arms nothing once close has begun (lifecycle.c, sink_arm). */
static void shut_down(struct chime__backend *b, int release)
{
    chime__pg_lanes_stop(b);
    atomic_store_explicit(&b->stop, 1, memory_order_release); /* pairs with the threads' loops */
    chime__pg_lease_stop(b);
    chime__pg_loader_stop(b);
    chime__pg_house_stop(b);
    if (release)
        chime__pg_lease_release_all(b);
}

static int connect_role(struct chime__backend *b, struct pg_conn *pc, const char *role)
{
    *pc = (struct pg_conn){ .conninfo = b->conninfo, .role = role, .node = b->node,
                            .lease_ns = b->lease_ns };
    int rc = chime__pg_connect(pc);
    return rc == PG_LOST ? -ECONNREFUSED : rc;
}

/* Host name + ":" + pid, the host cut so that the whole fits the 63 bytes a node's name may have
 * (the same limit as cfg->node's; a long host name would make it longer). */
static char *default_node(void)
{
    char host[64] = "", pid[24], *out;
    if (gethostname(host, sizeof host - 1) != 0)
        strcpy(host, "localhost");
    int n = snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    return asprintf(&out, "%.*s%s", 63 - n, host, pid) < 0 ? NULL : out;
}

/* Whether s is UTF-8 by its bytes' shapes (the database refuses a name that is not, and open said
 * it could not be reached: found in review). What the shapes let through and the server refuses
 * (an overlong form, a surrogate) is -EIO, the database's refusal. */
static bool utf8(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int more = *p < 0x80 ? 0 : *p >= 0xc2 && *p < 0xe0 ? 1 : *p >= 0xe0 && *p < 0xf0 ? 2
                 : *p >= 0xf0 && *p < 0xf5 ? 3 : -1;
        if (more < 0)
            return false;
        for (p++; more > 0; more--, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

static int pg_open(struct chime__backend **out, const struct chime_store_config *cfg,
                   const struct chime__sink *sink)
{
    if (cfg->node && (!*cfg->node || strlen(cfg->node) > 63 || !utf8(cfg->node)))
        return -EINVAL;
    struct chime__backend *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->cfg = cfg;
    b->sink = *sink;
    b->wake_fd = -1;
    pthread_mutex_init(&b->own_lock, NULL);
    pthread_mutex_init(&b->fire_lock, NULL);
    pthread_mutex_init(&b->misc_lock, NULL);
    pthread_mutex_init(&b->lease_lock, NULL);
    pthread_mutex_init(&b->task_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the lease thread's deadlines */
    pthread_cond_init(&b->lease_cond, &ca);
    pthread_condattr_destroy(&ca);
    b->conninfo = strdup(cfg->postgres);
    b->node = cfg->node ? strdup(cfg->node) : default_node();
    b->lease_ns = cfg->lease_ns ? cfg->lease_ns : PG_DEFAULT_LEASE_NS;
    if (b->lease_ns < PG_MIN_LEASE_NS)
        b->lease_ns = PG_MIN_LEASE_NS;
    /* Puts due before a node's `loaded` must reach it: loaded stays below now + horizon + two
     * granules of horizon / 8 (keeper.c), so a margin of a quarter covers it. */
    b->notify_ns = cfg->horizon_ns + cfg->horizon_ns / 4;
    if (b->notify_ns < cfg->horizon_ns) /* a horizon beyond 0.8 * 2^64 ns: everything */
        b->notify_ns = UINT64_MAX;
    if (getrandom(&b->token, sizeof b->token, 0) != (ssize_t)sizeof b->token)
        b->token = (int64_t)(chime__pg_wall() ^ (uint64_t)getpid() << 32);
    b->token &= INT64_MAX;
    int err = b->conninfo && b->node ? connect_role(b, &b->misc_conn, "misc") : -ENOMEM;
    if (!err) {
        err = chime__pg_schema_read(&b->misc_conn, &b->schema);
        if (err == PG_LOST)
            err = -ECONNREFUSED;
        else if (pg_rc_is_db(err))
            err = -EIO;
    }
    if (!err && cfg->shards && cfg->shards != b->schema.shards)
        err = -EINVAL; /* the schema fixed another number */
    if (!err && !(b->shards = calloc(b->schema.shards, sizeof *b->shards)))
        err = -ENOMEM;
    if (!err) { /* a live process with this name: refused before anything is taken */
        const char *v[] = { b->node };
        PGresult *r = NULL;
        int rc = chime__pg_exec(&b->misc_conn,
                                "SELECT 1 FROM chime.nodes WHERE node = $1 AND expires > now()", 1,
                                v, &r);
        err = rc == PG_LOST ? -ECONNREFUSED : rc != PG_OK ? -EIO : PQntuples(r) ? -EBUSY : 0;
        PQclear(r);
    }
    if (!err)
        err = connect_role(b, &b->fire_conn, "fire");
    if (!err)
        err = connect_role(b, &b->load_conn, "load");
    if (!err)
        err = chime__pg_house_start(b);
    if (!err)
        err = chime__pg_lanes_start(b);
    if (!err)
        err = chime__pg_loader_start(b);
    if (!err)
        err = chime__pg_lease_start(b);
    if (err) {
        shut_down(b, b->lease_started || b->lease_conn.c);
        free_backend(b);
        return err;
    }
    *out = b;
    return 0;
}

static int pg_close(struct chime__backend *b)
{
    shut_down(b, 1);
    int err = chime__pg_error(b);
    free_backend(b);
    return err;
}

const struct chime__backend_ops chime__pg_ops = {
    .name = "postgres",
    .fire_batch = 1024, /* 4096 measured no better in pg_bench's fire_ack (docs/perf.md) */
    .open = pg_open,
    .put = chime__pg_put,
    .cancel = chime__pg_cancel,
    .wait = chime__pg_wait,
    .fire = chime__pg_fire,
    .ack = chime__pg_ack,
    .bury = chime__pg_bury,
    .load = chime__pg_load,
    .dead_list = pg_dead_list,
    .dead_read = NULL, /* one statement reads and requeues the dead letter (lanes.c) */
    .dead_requeue = chime__pg_dead_requeue,
    .dead_drop = chime__pg_dead_drop,
    .sync = pg_sync,
    .abandon = pg_abandon,
    .fence_valid = pg_fence_valid,
    .stats = pg_stats,
    .closing = pg_closing,
    .close = pg_close,
};
