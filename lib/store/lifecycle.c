/* SPDX-License-Identifier: MIT */
/*
 * Opening and closing a store, and the backend's calls into it (the sink).
 *
 * OPEN: the config gets its defaults, the backend locks and recovers the journal, the runtime starts,
 * the dispatcher starts, everything due within the horizon is loaded (what is overdue fires at once, as
 * the rate limit lets it), and the keeper starts watching the clock.
 *
 * CLOSE, in the order that keeps every pointer valid: no new calls (-ESHUTDOWN); the keeper stops
 * (no more loads); the dispatcher stops (no new handler starts, but the batch whose firings it
 * recorded is handed out); close waits for the running handlers to return and record their outcome;
 * the runtime stops (timers not yet due stay recorded); the dispatcher's queue is given up (seal);
 * the backend makes everything durable and stops its threads; the table is freed.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "store/lock.h"
#include "store/store.h"

#define DEFAULT_INTERVAL_NS UINT64_C(1000000)             /* 1 ms */
#define DEFAULT_HORIZON_NS (UINT64_C(3600) * 1000000000u) /* 1 hour */
#define MIN_HORIZON_NS UINT64_C(1000000000)               /* 1 s */
#define DEFAULT_ATTEMPTS 10

static uint64_t (*test_clock)(void);

void chime__store_set_clock(uint64_t (*now)(void))
{
    test_clock = now; /* tests set it before opening a store, from the thread that opens it */
}

static const struct chime__backend_ops *test_backend;

void chime__store_set_backend(const struct chime__backend_ops *ops)
{
    test_backend = ops; /* as test_clock: set before opening, from the thread that opens */
}

/* ---- the sink: the backend's calls into the logic ---- */

static void sink_arm(void *ctx, const struct chime__timer *t)
{
    struct chime_store *s = ctx;
    uint64_t hash = chime__store_hash(s, t->key, t->key_len);
    struct hot_stripe *st = chime__store_stripe(s, hash);
    pthread_mutex_lock(&st->lock);
    /* Not once close has begun: nothing fires it any more (it stays in the backend), and what
     * install may call, a bury of a timer out of attempts, would reach a backend whose close is
     * freeing its lanes (found in review: PostgreSQL's loader, mid-takeover, buried through a NULL
     * lane; test_pg_close). Read under the stripe's lock: close's sweep (fire.c,
     * chime__store_stop_dispatcher) takes every stripe's lock after setting closing, so an arm
     * that saw it clear has finished before ops->close. */
    uint64_t loading; /* the load running when looked at (its boundary), or 0 */
    if (!atomic_load_explicit(&s->closing, memory_order_acquire) &&
        t->due_ns < chime__store_limit(s, &loading))
        chime__store_install(s, st, hash, t, 0);
    pthread_mutex_unlock(&st->lock);
}

void chime__store_settle_unstarted(struct chime_store *s, struct hot *e)
{
    if (!s->ops->abandon || e->settled)
        return;
    struct chime__timer t = { e->data, e->key_len, e->data + e->key_len, e->payload_len, e->due_ns,
                              e->attempt, e->ref, 1 };
    s->ops->abandon(s->b, &t);
    e->settled = 1; /* once: chime__store_abandon, which ends e, calls this again */
}

/*
 * Drop what the backend no longer lets this process fire. A recorded firing whose handler has not
 * begun (rid set: it waits for its due time, or for a worker) never will: its fence stays invalid
 * (a lapse is final, and a drain ends in a release, or a retake in a new epoch), so run_handler
 * abandons it whenever it comes to it. It is settled now (backend.h, abandon), not then: until
 * then it held its shard's drain, which the PostgreSQL backend ends once the shard's firings are
 * settled (found in review: a firing waiting for a worker busy with another shard's handler held
 * the drain a whole lease, and the shard's timers fired nowhere meanwhile; test_pg_drain).
 */
static void sink_revoke(void *ctx)
{
    struct chime_store *s = ctx;
    if (!s->ops->fence_valid)
        return;
    for (int i = 0; i < HOT_STRIPES; i++) {
        struct hot_stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        for (size_t b = 0; b < st->nbuckets; b++)
            for (struct hot *e = st->buckets[b], *next; e; e = next) {
                next = e->next;
                /* RUNNING: begun (or about to check its fence), or settled here already */
                int left = e->state == HOT_RUNNING && (!e->rid || e->settled);
                if (e->state == HOT_FIRING || left || s->ops->fence_valid(s->b, e->ref.fence))
                    continue; /* recording, left to run_handler, or still valid */
                if (e->state != HOT_RUNNING) {
                    chime__store_drop(s, st, e);
                } else {
                    chime__store_settle_unstarted(s, e);
                }
            }
        pthread_mutex_unlock(&st->lock);
    }
}

static void sink_failed(void *ctx, int err)
{
    chime__store_fail(ctx, err);
}

/* ---- open ---- */

static int normalise(struct chime_store_config *c, const struct chime_store_config *in)
{
    *c = *in;
    if (chime__timer_config_check(&c->runtime) != 0) /* before the backend creates anything */
        return -EINVAL;
    if (c->sync == 0)
        c->sync = CHIME_SYNC_EACH;
    if (c->sync != CHIME_SYNC_EACH && c->sync != CHIME_SYNC_INTERVAL)
        return -EINVAL;
    if (!c->sync_interval_ns)
        c->sync_interval_ns = DEFAULT_INTERVAL_NS;
    if (!c->horizon_ns)
        c->horizon_ns = DEFAULT_HORIZON_NS;
    if (c->horizon_ns < MIN_HORIZON_NS)
        c->horizon_ns = MIN_HORIZON_NS;
    if (!c->max_attempts)
        c->max_attempts = DEFAULT_ATTEMPTS;
    c->runtime.max_pending = 0; /* a full runtime would leave durable timers unarmed */
    if (c->postgres) { /* the backend copies what it keeps of its fields; path is unused */
        c->path = NULL;
        return 0;
    }
    size_t n = strlen(in->path) + 1;
    char *path = malloc(n);
    if (!path)
        return -ENOMEM;
    memcpy(path, in->path, n);
    c->path = path;
    return 0;
}

static void free_table(struct chime_store *s)
{
    for (int i = 0; i < HOT_STRIPES; i++) {
        struct hot_stripe *st = &s->stripes[i];
        for (size_t b = 0; b < st->nbuckets; b++)
            for (struct hot *e = st->buckets[b], *next; e; e = next) {
                next = e->next;
                free(e);
            }
        free(st->buckets);
        pthread_mutex_destroy(&st->lock);
    }
}

static void free_store(struct chime_store *s)
{
    free_table(s);
    pthread_mutex_destroy(&s->load_lock);
    pthread_cond_destroy(&s->keeper_cond);
    pthread_mutex_destroy(&s->dlock);
    pthread_cond_destroy(&s->dwork);
    pthread_cond_destroy(&s->didle);
    free(s->dbuf);
    chime__store_acks_destroy(s);
    chime__store_outcomes_destroy(s);
    free((char *)s->cfg.path);
    if (s->event_fd >= 0)
        close(s->event_fd);
    free(s);
}

/*
 * After the dispatcher and the runtime have stopped, and before the backend's threads have (they
 * run until ops->close, and their sink calls may replace or drop entries meanwhile): give the
 * dispatcher's queue up. What only the queue held (detached) is freed here; from then on the store
 * is sealed: nothing joins the queue (fire.c, enqueue) and a drop frees a QUEUED entry itself
 * (store.c). Found by CI's valgrind: PostgreSQL's loader replaced a queued entry after the queue
 * was walked, and it was lost (test_store_seal). Under dlock, under which a drop marks a QUEUED
 * entry detached or finds the seal: its entry is either in this walk, marked, or freed by it.
 */
static void seal(struct chime_store *s)
{
    pthread_mutex_lock(&s->dlock);
    for (struct hot *e = s->qhead, *next; e; e = next) {
        next = e->qnext;
        if (e->detached)
            free(e);
    }
    s->qhead = s->qtail = NULL;
    s->qlen = 0;
    s->sealed = 1;
    pthread_mutex_unlock(&s->dlock);
}

/*
 * The runtime's on_unfired at close, on its thread. An entry the table no longer holds is freed
 * here; another is left to the table, marked as never armed (rid 0, counted in `unarmed`), which it
 * now is: a drop after this frees it rather than wait for a callback that will not come. Under the
 * stripe's lock, as chime__store_due: a drop may run beside it (a backend's thread, until
 * ops->close), and it either marked the entry detached before this looks, or sees rid 0 after.
 */
static void unfired(void *arg)
{
    struct hot *e = arg;
    if (e == e->s->acks.marker)
        return; /* the acknowledgements' flush (acks.c): in no table */
    struct hot_stripe *st = chime__store_stripe(e->s, e->hash);
    pthread_mutex_lock(&st->lock);
    int ours = e->detached;
    if (!ours && e->state == HOT_ARMED && e->rid) {
        e->rid = 0;
        atomic_fetch_add_explicit(&e->s->unarmed, 1, memory_order_relaxed); /* a count (store.c) */
    }
    pthread_mutex_unlock(&st->lock);
    if (ours)
        free(e);
}

CHIME_API int chime_store_open(chime_store **out, const struct chime_store_config *cfg,
                               chime_handler *handler, void *ctx)
{
    if (!out || !cfg || (!cfg->path && !cfg->postgres) || !handler)
        return -EINVAL;
    /* aligned: its stripes and counters have cache lines of their own (store.h); the size of a
     * type is a multiple of its alignment, as aligned_alloc wants */
    struct chime_store *s = aligned_alloc(_Alignof(struct chime_store), sizeof *s);
    if (!s)
        return -ENOMEM;
    memset(s, 0, sizeof *s);
    int err = normalise(&s->cfg, cfg);
    if (err) {
        free(s);
        return err;
    }
    s->handler = handler;
    s->ctx = ctx;
    s->wall = test_clock ? test_clock : chime__store_wall;
    s->event_fd = s->clock_fd = -1;
    uint64_t key[2] = { 0, 0 };
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
        key[0] = (uint64_t)(uintptr_t)s ^ chime__store_wall();
    s->hash_k0 = key[0];
    s->hash_k1 = key[1];
    pthread_mutex_init(&s->load_lock, NULL);
    pthread_cond_init(&s->keeper_cond, NULL);
    pthread_mutex_init(&s->dlock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the rate limit's waits ignore clock steps */
    pthread_cond_init(&s->dwork, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->didle, NULL);
    chime__store_outcomes_init(s);
    err = chime__store_acks_init(s);
    for (int i = 0; i < HOT_STRIPES; i++) {
        chime__short_lock_init(&s->stripes[i].lock);
        s->stripes[i].buckets = calloc(16, sizeof(struct hot *));
        /* 0 without them: free_table walks nbuckets chains (found in review: 16 NULL ones) */
        s->stripes[i].nbuckets = s->stripes[i].buckets ? 16 : 0;
        if (!s->stripes[i].buckets)
            err = -ENOMEM;
    }
    /* Before any thread that may arm a timer starts, and closed only with the store: a failed arm
     * on any thread wakes the keeper through it (keeper.c, chime__store_unarmed). */
    s->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->event_fd < 0 && !err)
        err = -errno;
    s->sink = (struct chime__sink){ s, sink_arm, sink_revoke, sink_failed };
    s->ops = test_backend ? test_backend : chime__backend_for(&s->cfg);
    if (!err) { /* first: a second opener fails on the directory's lock before any thread starts */
        err = s->ops->open(&s->b, &s->cfg, &s->sink);
        if (err)
            s->b = NULL;
    }
    if (!err)
        err = chime_timer_new(&s->rt, &s->cfg.runtime);
    if (!err)
        err = chime__store_start_dispatcher(s);
    if (!err) {
        /* A test's clock is its own: the test reports its steps (chime__store_clock_stepped). A set
         * of the kernel's clock would wake a keeper the test did not plan for (found in CI: one swept
         * the stripes while test_store_loads held one in a put, and the test hung). */
        if (s->wall == chime__store_wall)
            chime__store_watch_clock(s);
        err = chime__store_first_load(s);
    }
    if (!err)
        err = chime__store_start_keeper(s);
    if (err) {
        atomic_store_explicit(&s->closing, 1, memory_order_release);
        chime__store_stop_keeper(s);
        chime__store_stop_dispatcher(s);
        if (s->rt)
            chime_timer_stop(s->rt, CHIME_STOP_NOW, unfired);
        seal(s); /* a backend's thread may replace a queued one (found in review: PostgreSQL's
                    loader arms while open runs) */
        if (s->b)
            s->ops->close(s->b);
        chime_timer_free(s->rt);
        free_store(s);
        return err;
    }
    if (chime__store_open_hook)
        chime__store_open_hook(s);
    *out = s;
    /* Only now may handlers start: one that fires during open (an overdue timer the first load
     * armed) may call chime_store_* on its store, which it knows from *out alone (found in review:
     * on a restart after an outage, most handlers ran before open returned, and their calls got
     * -EINVAL on the application's NULL). The dispatcher's wait for this is under dlock. */
    pthread_mutex_lock(&s->dlock);
    s->opened = 1;
    pthread_cond_signal(&s->dwork);
    pthread_mutex_unlock(&s->dlock);
    return 0;
}

void (*chime__store_open_hook)(struct chime_store *s);

/* ---- close ---- */

static _Atomic int check_on_close; /* chime__store_check_on_close */

void chime__store_check_on_close(int on)
{
    atomic_store_explicit(&check_on_close, on, memory_order_relaxed); /* a test's switch */
}

CHIME_API int chime_store_close(chime_store *s)
{
    if (!s)
        return -EINVAL;
    if (chime__store_in_handler(s))
        return -EDEADLK;
    /* release: a call that sees closing also sees everything before it (pairs with usable()) */
    atomic_store_explicit(&s->closing, 1, memory_order_release);
    if (s->ops->closing)
        s->ops->closing(s->b); /* a load or listing waiting for a lost server gives up */
    chime__store_stop_keeper(s);
    chime__store_stop_dispatcher(s); /* also waits until no handler runs */
    chime_timer_stop(s->rt, CHIME_STOP_NOW, unfired);
    const char *bad = atomic_load_explicit(&check_on_close, memory_order_relaxed) /* as set */
                          ? chime__store_check(s) : NULL;
    if (bad) {
        fprintf(stderr, "chime: store: the table of loaded timers is wrong at close: %s\n", bad);
        abort();
    }
    seal(s);
    int err = s->ops->close(s->b);
    int sticky = atomic_load_explicit(&s->error, memory_order_relaxed);
    chime_timer_free(s->rt);
    free_store(s);
    return sticky ? sticky : err;
}
