/* SPDX-License-Identifier: MIT */
/*
 * Firing: from a loaded timer's runtime callback to its handler's outcome.
 *
 * THE WALL CLOCK. Deadlines are CLOCK_REALTIME; the runtime counts CLOCK_MONOTONIC. A timer is armed
 * at now_monotonic + (due - now_wall), and when the runtime calls back the wall clock is read again:
 * if it says "not yet" (it stepped back, or ran faster than the monotonic clock), the timer is armed
 * again for the rest. So a handler never starts before its due time by the wall clock. Because NTP
 * may slew the wall clock against the monotonic one by up to 0.05% (and adjtimex allows 0.05% more),
 * a timer more than a second away is armed early by 1/1024 of its delay, so that the check happens
 * before the deadline and the second arming lands on it: never early, and not late by the slew
 * either. A step forward is caught by the keeper (keeper.c), which re-arms everything.
 *
 * THE DISPATCHER. Due timers queue in FIFO order for one dispatcher thread, which takes as many as
 * the rate limit allows (a token bucket: max_fires_per_s tokens a second, at most max(1, rate/100)
 * stored), records their firings in one backend call (D2: durable before any handler starts, so a
 * crash from here on makes the restart fire them again with attempt + 1), and hands each handler to
 * the runtime as a timer due at once: it runs on a worker (or the advancing thread). One commit
 * serves a whole batch. A token pays for a handler handed out: one taken whose handler does not
 * start (cancelled or replaced while queued, armed again after a step back, refused by the
 * backend) goes back to the bucket. The bucket bounds the firings recorded; since a firing is
 * recorded up to the lead (below) before its handler starts, the starts are paced as well (pace()):
 * each handler handed out is given the earliest start, at or after its due time, that keeps the
 * starts of any t seconds to rate * t + the bucket's capacity.
 *
 * LEAD. Recording a firing costs a commit (an fdatasync: 0.2 ms on a quiet disk, milliseconds on a
 * busy one, tens at its worst), and the handler may not start before it is durable. So a loaded
 * timer is taken for firing the lead before its due time, its firing is recorded then, and its
 * handler is handed to the runtime as a timer due at the due time itself: the handler starts as late
 * as the runtime makes any timer, not a commit later (unless the commit takes longer than the lead).
 * The lead follows the longest recent commit, between 2 and 50 ms (lead.h): the dispatcher times
 * each one. A loaded timer is armed CHIME__LEAD_MAX_NS before its due time and, when that comes, armed
 * again for (due - lead), so that the lead of the moment applies. The price: from the lead before
 * its due time a timer cannot be cancelled (-EINPROGRESS), and a crash in the lead counts an attempt
 * that did not start (its restart fires it with attempt + 1).
 *
 * OUTCOMES, recorded with the key's stripe locked: 0 acknowledges (the backend removes the timer,
 * unless a put replaced it meanwhile); > 0 puts the same key again at now + delay with attempt
 * kept, only if it is still this version (else the newer put wins); a negative value, or a retry
 * past max_attempts, buries it. Then a newer firing of the key that was held back is released.
 * In a burst, acknowledgements are queued and recorded in groups (acks.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "store/deadline.h"
#include "store/store.h"

/* Firings recorded per backend call at most: the backend's fire_batch (backend.h). The arrays are
 * the dispatcher's (struct dispatch_buf), on the heap, not on its stack (256 KiB). */
#define BATCH CHIME__FIRE_BATCH_MAX
#define NS_PER_S UINT64_C(1000000000)

static _Thread_local const struct chime_store *tls_handler_store;

int chime__store_in_handler(const struct chime_store *s)
{
    return tls_handler_store == s;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* When a loaded timer is taken for firing: the lead before its due time (LEAD). */
static uint64_t take_at(struct chime_store *s, const struct hot *e)
{
    uint64_t lead = chime__lead_ns(&s->lead);
    return e->due_ns > lead ? e->due_ns - lead : 0;
}

/* The monotonic deadline for wall-clock time `at`; 0 (at once) if it has passed. */
static uint64_t mono_for(struct chime_store *s, uint64_t at)
{
    uint64_t now = s->wall();
    if (at <= now)
        return 0;
    uint64_t delay = at - now;
    if (delay > NS_PER_S)
        delay -= delay >> 10; /* early by 1/1024: see THE WALL CLOCK */
    return mono_ns() + delay;
}

static _Atomic unsigned refused_arms; /* chime__store_refuse_arms */

void chime__store_refuse_arms(unsigned n)
{
    atomic_store_explicit(&refused_arms, n, memory_order_relaxed); /* a test's switch */
}

/* Whether a test asked this arm to fail (taking one of its count). */
static int refuse_arm(void)
{
    unsigned n = atomic_load_explicit(&refused_arms, memory_order_relaxed); /* the CAS checks it */
    while (n && !atomic_compare_exchange_weak_explicit(&refused_arms, &n, n - 1,
                                                       memory_order_relaxed, memory_order_relaxed))
        ;
    return n != 0;
}

/* Arm e's runtime timer to call chime__store_due at wall-clock time `at`. */
static void arm_for(struct chime_store *s, struct hot *e, uint64_t at)
{
    e->state = HOT_ARMED;
    if (refuse_arm() ||
        chime_timer_schedule_at(s->rt, mono_for(s, at), chime__store_due, e, &e->rid) != 0) {
        e->rid = 0; /* out of memory (or stopping): the keeper arms it */
        chime__store_unarmed(s);
    }
}

void chime__store_arm(struct chime_store *s, struct hot *e)
{
    /* The longest lead before its due time: the callback arms it again for the lead it finds. */
    arm_for(s, e, e->due_ns > CHIME__LEAD_MAX_NS ? e->due_ns - CHIME__LEAD_MAX_NS : 0);
}

static void enqueue(struct chime_store *s, struct hot *e)
{
    pthread_mutex_lock(&s->dlock);
    if (s->sealed) { /* closing (lifecycle.c, seal): it stays in the table alone, never fired */
        pthread_mutex_unlock(&s->dlock);
        return;
    }
    e->qnext = NULL;
    if (s->qtail)
        s->qtail->qnext = e;
    else
        s->qhead = e;
    s->qtail = e;
    s->qlen++;
    pthread_cond_signal(&s->dwork);
    pthread_mutex_unlock(&s->dlock);
}

void chime__store_release_held(struct chime_store *s, struct hot *e)
{
    e->wait_prev = 0;
    if (e->state == HOT_HELD) {
        e->state = HOT_QUEUED;
        enqueue(s, e);
    }
}

void chime__store_due(void *arg)
{
    struct hot *e = arg;
    struct chime_store *s = e->s;
    struct hot_stripe *st = chime__store_stripe(s, e->hash);
    pthread_mutex_lock(&st->lock);
    if (e->detached) { /* cancelled or replaced after this callback had begun */
        pthread_mutex_unlock(&st->lock);
        free(e);
        return;
    }
    e->rid = 0;
    uint64_t take = take_at(s, e);
    if (s->wall() < take) { /* armed early on purpose (LEAD), or the wall clock stepped back */
        arm_for(s, e, take);
        pthread_mutex_unlock(&st->lock);
        return;
    }
    if (e->wait_prev) {
        e->state = HOT_HELD;
        pthread_mutex_unlock(&st->lock);
        return;
    }
    e->state = HOT_QUEUED;
    enqueue(s, e); /* under the stripe lock: a cancel now finds it QUEUED and in the queue */
    pthread_mutex_unlock(&st->lock);
}

/* The key's pending firing, held back while this one ran, may go. Stripe locked. */
static void release_successor(struct chime_store *s, struct hot_stripe *st, struct hot *e)
{
    if (!e->waited_for)
        return; /* no pending entry of the key waits for e: no lookup (a walk of cache misses) */
    struct hot *p, *r;
    chime__store_find(st, e->hash, e->data, e->key_len, &p, &r);
    if (p && p->wait_prev)
        chime__store_release_held(s, p);
}

/*
 * A handler ended (finished, or abandoned unstarted): count it out of `running`, the last thing the
 * caller does with the store. Close waits, under dlock, until running is 0, and then frees the
 * store; so the decrement to 0 is made under dlock, by a caller that then wakes close and is done
 * when it unlocks. The others decrement without the lock: one compare-and-swap, no lock shared
 * with the dispatcher at every acknowledgement.
 */
static void handler_ended(struct chime_store *s)
{
    /* relaxed: the compare-and-swap checks it */
    uint64_t n = atomic_load_explicit(&s->running, memory_order_relaxed);
    /* release, each decrement: close's acquire load of 0 then follows every earlier decrement and
     * what its caller did before it (the decrements are one release sequence of RMWs). */
    while (n > 1)
        if (atomic_compare_exchange_weak_explicit(&s->running, &n, n - 1, memory_order_release,
                                                  memory_order_relaxed))
            return;
    pthread_mutex_lock(&s->dlock);
    if (atomic_fetch_sub_explicit(&s->running, 1, memory_order_release) == 1) /* as above */
        pthread_cond_broadcast(&s->didle);
    pthread_mutex_unlock(&s->dlock);
}

/*
 * An outcome the backend could not record (an error other than -ESTALE: -ENOMEM, or the sticky
 * -EIO/-ENOSPC it has reported already): the timer is still pending on disk, with its firing
 * recorded, but it is leaving the table, and no load reads a due time below `loaded` again. So the
 * store fails, as when a recorded timer cannot be loaded (store.c): it starts no handler more,
 * every call reports the error, and the restart fires the timer again with attempt + 1 (found in
 * review: a retry, burial or acknowledgement refused with -ENOMEM left the timer on disk, unfired
 * until a restart, with the store running on and reporting nothing).
 */
static void outcome_lost(struct chime_store *s, int err)
{
    if (err && err != -ESTALE)
        chime__store_fail(s, err);
}

void chime__store_finish(struct chime_store *s, struct hot *e, int64_t rc, unsigned parity)
{
    struct hot_stripe *st = chime__store_stripe(s, e->hash);
    const void *key = e->data, *payload = e->data + e->key_len;
    pthread_mutex_lock(&st->lock);
    chime__store_unlink(st, e);
    struct chime__timer t = { key, e->key_len, payload, e->payload_len, e->due_ns, e->attempt,
                              e->ref, 1 };
    int reused = 0;
    if (rc == 0) {
        int err = s->ops->ack(s->b, &t, !e->superseded);
        if (err == 0)
            st->acked++;
        outcome_lost(s, err);
    } else if (rc > 0 && e->attempt < s->cfg.max_attempts) {
        uint64_t now = s->wall(), due = now + (uint64_t)rc < now ? UINT64_MAX : now + (uint64_t)rc;
        struct chime__put put = { key, e->key_len, payload, e->payload_len, due, e->attempt,
                                  e->ref.version, e->ref.fence };
        struct chime__put_result res;
        uint64_t ticket; /* a retry, like an ack, is not waited for (D3) */
        int err = s->ops->put(s->b, &put, &res, &ticket);
        outcome_lost(s, err); /* -ESTALE: a newer put won, as it should */
        if (err == 0) {
            st->retried++;
            e->ref = res.ref;
            e->due_ns = due;
            e->wait_prev = 0;
            e->waited_for = 0; /* a newer put, the only thing that waits for e, would have won */
            e->superseded = 0; /* res.ref is the key's pending version now */
            reused = 1;
            chime__store_place(s, st, e, res.owned); /* no newer put exists: it would have won */
        }
    } else {
        /* A firing whose key was put again since is not buried (backend.h): the newer timer wins,
         * as it does over an acknowledgement or a retry, and nothing went to the dead letters. */
        int err = s->ops->bury(s->b, &t);
        if (err == 0 && !e->superseded)
            st->buried++;
        outcome_lost(s, err);
    }
    if (!reused) {
        release_successor(s, st, e);
        free(e);
    }
    pthread_mutex_unlock(&st->lock);
    if (parity != CHIME__OUTCOME_ENDED) /* appended: before handler_ended, which lets close go */
        chime__store_outcome_end(s, parity);
    handler_ended(s);
}

/* A recorded firing whose handler will not start now (the store closes before its due time, or the
 * runtime refused it): it leaves the table without an outcome, and stays pending on disk (a restart
 * fires it, with attempt + 1). */
void chime__store_abandon(struct chime_store *s, struct hot *e)
{
    struct hot_stripe *st = chime__store_stripe(s, e->hash);
    pthread_mutex_lock(&st->lock);
    chime__store_settle_unstarted(s, e); /* unless a revoke did (lifecycle.c, sink_revoke) */
    chime__store_unlink(st, e);
    release_successor(s, st, e);
    pthread_mutex_unlock(&st->lock);
    free(e);
    handler_ended(s);
}

static void run_handler(void *arg);

void (*chime__store_rewait_hook)(uint64_t wall);

/* Hand e's handler to the runtime for its due time (rid: its runtime timer). Stripe locked.
 * Return: 0, or nonzero if the runtime refused (rid is 0 then). */
static int schedule_handler(struct chime_store *s, struct hot *e)
{
    uint64_t at = mono_for(s, e->due_ns);
    if (e->start_mono > at) /* the rate limit's pacing (pace) */
        at = e->start_mono;
    if (chime_timer_schedule_at(s->rt, at, run_handler, e, &e->rid) == 0)
        return 0;
    e->rid = 0;
    return -1;
}

static void run_handler(void *arg)
{
    struct hot *e = arg;
    struct chime_store *s = e->s;
    struct hot_stripe *st = chime__store_stripe(s, e->hash);
    pthread_mutex_lock(&st->lock);
    e->rid = 0; /* begun: chime__store_reschedule_handler leaves it alone */
    /* Never before the due time by the wall clock, which may have stepped back since the firing was
     * recorded (LEAD): then wait again for the rest. The timer stays RUNNING meanwhile. */
    uint64_t now = s->wall();
    if (now < e->due_ns) {
        /* acquire: pairs with close's release store; if close's sweep missed this, it is seen here */
        int closing = atomic_load_explicit(&s->closing, memory_order_acquire);
        int refused = !closing && schedule_handler(s, e) != 0;
        if (refused) /* out of memory: its firing is recorded, and no load reads it again */
            chime__store_fail(s, -ENOMEM);
        int gone = closing || refused;
        if (chime__store_rewait_hook)
            chime__store_rewait_hook(now);
        pthread_mutex_unlock(&st->lock);
        if (gone)
            chime__store_abandon(s, e);
        return;
    }
    pthread_mutex_unlock(&st->lock);
    /* A fence that lapsed since the firing was recorded (the process was paused past its lease, a
     * shard was lost): the shard's new owner fires the timer again, and starting it here would act
     * in a stale epoch. (A handler that has started runs on; its outcome is then refused.) */
    if (s->ops->fence_valid && !s->ops->fence_valid(s->b, e->ref.fence)) {
        chime__store_abandon(s, e);
        return;
    }
    /* A failed store starts no handler (chime_store.h; backend.h, D5), not even one whose firing
     * was recorded before the failure: that firing stays recorded, and the restart fires it again
     * (found in review: such handlers still started). relaxed: as the dispatcher's look; the
     * failure is stored before any caller can see it (chime__store_fail, from the sink). */
    if (atomic_load_explicit(&s->error, memory_order_relaxed)) {
        chime__store_abandon(s, e);
        return;
    }
    struct chime_fire f = { e->data, e->key_len, e->data + e->key_len, e->payload_len, e->due_ns,
                            e->attempt, e->ref.fence };
    tls_handler_store = s;
    int64_t rc = s->handler(s->ctx, &f);
    tls_handler_store = NULL;
    unsigned parity = chime__store_outcome_begin(s); /* a sync from here on covers it */
    if (rc == 0 && chime__store_ack_later(s, e, parity))
        return; /* in a burst: recorded with others (acks.c) */
    chime__store_finish(s, e, rc, parity);
}

struct dispatch_buf {
    struct hot *batch[BATCH];      /* taken from the queue */
    struct hot *live[BATCH];       /* of those, the ones not cancelled meanwhile */
    struct chime__firing f[BATCH]; /* their firings, for the backend */
};

/* The rate limit's bucket holds max(1, rate/100) tokens: the burst chime.h states. */
static uint64_t bucket_cap(uint64_t rate)
{
    return rate / 100 > 1 ? rate / 100 : 1;
}

/* The rate limit at the handlers' starts (THE DISPATCHER): when, on CLOCK_MONOTONIC, the handler
 * of a firing just recorded may start, due_ns being wall_now's time mono_now. The bucket lets
 * firings be recorded at the rate, but a firing is recorded up to the lead before its due time, so
 * the handlers of the firings recorded during one lead would start together at their due time
 * (found in review: 5 within 0.06 ms at 100/s, where the bucket holds 1). So the starts are spaced
 * as a bucket of the same rate and capacity would let them through (the generic cell rate
 * algorithm): pace_next is the start that the next handler would have at the rate, and a handler
 * may start up to capacity - 1 spacings before it. In absolute time, so that the time the firings'
 * commit took does not move one batch's starts closer to the last's. On the real clock, not on
 * rate_clock (a test's may stand still). The dispatcher's alone. */
static uint64_t pace(struct chime_store *s, uint64_t due, uint64_t wall_now, uint64_t mono_now)
{
    uint64_t rate = s->cfg.max_fires_per_s;
    uint64_t cap = bucket_cap(rate);
    /* rounded up: never faster than the rate */
    uint64_t spacing = rate < NS_PER_S ? (NS_PER_S + rate - 1) / rate : 1;
    uint64_t early = (cap - 1) * spacing;
    uint64_t want = mono_now + (due > wall_now ? due - wall_now : 0);
    uint64_t start = s->pace_next > want + early ? s->pace_next - early : want;
    s->pace_next = (s->pace_next > start ? s->pace_next : start) + spacing;
    return start;
}

/* Record the firings of a batch taken from the queue and hand out their handlers. Return: how many
 * were handed out (the rest were cancelled or replaced while queued, armed again for a clock that
 * stepped back, or refused by the backend: no handler of theirs starts). */
static size_t fire_batch(struct chime_store *s, struct dispatch_buf *d, size_t n)
{
    struct hot **batch = d->batch, **live = d->live;
    struct chime__firing *f = d->f;
    size_t k = 0;
    uint64_t now = s->wall(), now_mono = mono_ns();
    for (size_t i = 0; i < n; i++) {
        struct hot *e = batch[i];
        struct hot_stripe *st = chime__store_stripe(s, e->hash);
        pthread_mutex_lock(&st->lock);
        if (e->detached) {
            pthread_mutex_unlock(&st->lock);
            free(e);
            continue;
        }
        if (e->due_ns > now && e->due_ns - now > CHIME__LEAD_MAX_NS) {
            /* The clock stepped back while it waited (for the rate limit, or HELD): recorded now,
             * it would be uncancellable until its due time, beyond any lead (found in review).
             * Armed again, as chime__store_due does with a timer it finds early. (Not for a lead
             * that shrank since it was queued: that costs a few ms at most.) */
            arm_for(s, e, take_at(s, e));
            if (chime__store_rewait_hook)
                chime__store_rewait_hook(now);
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        e->state = HOT_FIRING; /* from here a cancel gets -EINPROGRESS, a put adds a new version */
        f[k] = (struct chime__firing){ e->data, e->key_len, e->due_ns, e->ref, e->attempt + 1, 0 };
        live[k++] = e;
        pthread_mutex_unlock(&st->lock);
    }
    if (!k)
        return 0;
    uint64_t begun = mono_ns();
    int err = s->ops->fire(s->b, f, k);
    uint64_t ended = mono_ns();
    chime__lead_note(&s->lead, ended - begun, ended); /* the dispatcher's alone (lead.h) */
    if (err) {
        chime__store_fail(s, err); /* no handler starts: the restart fires them */
        return 0;
    }
    size_t started = 0;
    for (size_t i = 0; i < k; i++) {
        struct hot *e = live[i];
        struct hot_stripe *st = chime__store_stripe(s, e->hash);
        pthread_mutex_lock(&st->lock);
        if (f[i].status != 0) { /* no longer ours to fire (another node's backend said so) */
            chime__store_unlink(st, e);
            release_successor(s, st, e);
            pthread_mutex_unlock(&st->lock);
            free(e);
            continue;
        }
        e->state = HOT_RUNNING;
        e->attempt = f[i].attempt;
        e->start_mono = s->cfg.max_fires_per_s ? pace(s, e->due_ns, now, now_mono) : 0;
        atomic_fetch_add_explicit(&s->running, 1, memory_order_relaxed); /* see handler_ended */
        st->fired++;
        started++;
        /* The handler starts at the due time (LEAD), or at once if that has passed. */
        int refused = schedule_handler(s, e);
        pthread_mutex_unlock(&st->lock);
        if (refused)
            run_handler(e); /* the runtime refused (out of memory): run it here rather than lose it */
    }
    return started;
}

int chime__store_reschedule_handler(struct chime_store *s, struct hot *e)
{
    if (!e->rid)
        return 0; /* its callback has begun: it reads the clock, and closing, itself */
    /* acquire: pairs with close's release store of closing */
    int closing = atomic_load_explicit(&s->closing, memory_order_acquire);
    /* Within the longest lead: its firing may have been recorded that long before its due time
     * (the lead of the moment may be shorter now), and it starts within that anyway: close waits
     * for it (found in review: a firing taken with a longer lead was abandoned, its attempt spent).
     * Its runtime timer is armed again from the wall clock now, which may have stepped since
     * (found in review: armed an hour out by a step back, then the clock stepped forward before
     * the keeper's sweep, and close waited that hour). */
    int waited_for = closing && s->wall() + CHIME__LEAD_MAX_NS >= e->due_ns;
    if (chime_timer_cancel(s->rt, e->rid) != 0)
        return 0; /* its callback has just begun */
    e->rid = 0;
    if (closing && !waited_for)
        return 1;
    if (schedule_handler(s, e) == 0)
        return 0;
    if (!closing) /* out of memory: abandoned, its firing recorded, and no load reads it again */
        chime__store_fail(s, -ENOMEM);
    return 1;
}

static uint64_t (*test_rate_clock)(void); /* chime__store_set_rate_clock */

void chime__store_set_rate_clock(uint64_t (*now)(void))
{
    test_rate_clock = now; /* as chime__store_set_clock: before opening, from the opening thread */
}

/* How many queued timers the rate limit lets start now; *wait_ns until the next token if none. */
static size_t allowance(struct chime_store *s, size_t want, uint64_t *wait_ns)
{
    uint64_t rate = s->cfg.max_fires_per_s;
    if (!rate)
        return want;
    double cap = (double)bucket_cap(rate);
    uint64_t now = s->rate_clock();
    s->tokens += (double)(now - s->tokens_at) * (double)rate / 1e9;
    s->tokens_at = now;
    if (s->tokens > cap)
        s->tokens = cap;
    if (s->tokens < 1.0) {
        *wait_ns = (uint64_t)((1.0 - s->tokens) * 1e9 / (double)rate) + 1;
        return 0;
    }
    size_t n = (size_t)s->tokens < want ? (size_t)s->tokens : want;
    s->tokens -= (double)n;
    return n;
}

static void *dispatcher_main(void *arg)
{
    struct chime_store *s = arg;
    struct dispatch_buf *d = s->dbuf;
    pthread_mutex_lock(&s->dlock);
    while (!s->dstop) {
        /* Not before open has handed the store out (lifecycle.c, `opened`). */
        if (!s->qhead || !s->opened || atomic_load_explicit(&s->error, memory_order_relaxed)) {
            pthread_cond_wait(&s->dwork, &s->dlock);
            continue;
        }
        uint64_t wait_ns = 0;
        size_t most = s->ops->fire_batch && s->ops->fire_batch < BATCH ? s->ops->fire_batch : BATCH;
        size_t n = allowance(s, s->qlen < most ? s->qlen : most, &wait_ns);
        if (!n) {
            /* dwork's clock (lifecycle.c) */
            struct timespec ts = chime__deadline_after(CLOCK_MONOTONIC, wait_ns);
            pthread_cond_timedwait(&s->dwork, &s->dlock, &ts);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            d->batch[i] = s->qhead;
            s->qhead = s->qhead->qnext;
        }
        if (!s->qhead)
            s->qtail = NULL;
        s->qlen -= n;
        pthread_mutex_unlock(&s->dlock);
        size_t started = fire_batch(s, d, n);
        pthread_mutex_lock(&s->dlock);
        /* Tokens pay for handlers that start: those of the batch that did not start give theirs
         * back (found in review: a timer cancelled while queued spent a token, so the live timer
         * behind it waited for the next one, a second at 1/s). No refill has happened since they
         * were taken (allowance, which refills, is the dispatcher's alone), so the bucket is back
         * to at most what it held then: never above its capacity, and the limit still bounds
         * the firings recorded. */
        if (s->cfg.max_fires_per_s)
            s->tokens += (double)(n - started);
    }
    pthread_mutex_unlock(&s->dlock);
    return NULL;
}

int chime__store_start_dispatcher(struct chime_store *s)
{
    if (!s->dbuf && !(s->dbuf = malloc(sizeof(struct dispatch_buf))))
        return -ENOMEM;
    s->rate_clock = test_rate_clock ? test_rate_clock : mono_ns;
    s->tokens_at = s->rate_clock();
    s->tokens = 1.0;
    /* The runtime calls back up to a tick late (0: its default, 1 ms: chime_timer.h). */
    chime__lead_init(&s->lead, s->cfg.runtime.tick_ns ? s->cfg.runtime.tick_ns : UINT64_C(1000000));
    if (pthread_create(&s->dispatcher, NULL, dispatcher_main, s) != 0)
        return -ECHILD;
    s->dispatcher_started = 1;
    return 0;
}

void chime__store_stop_dispatcher(struct chime_store *s)
{
    if (!s->dispatcher_started)
        return;
    pthread_mutex_lock(&s->dlock);
    s->dstop = 1;
    pthread_cond_signal(&s->dwork);
    pthread_mutex_unlock(&s->dlock);
    pthread_join(s->dispatcher, NULL);
    s->dispatcher_started = 0;
    /* A handler waiting for a wall clock that stepped back would keep close waiting: take it back. */
    chime__store_sweep(s, CHIME__SWEEP_CLOSE);
    pthread_mutex_lock(&s->dlock);
    /* acquire: pairs with handler_ended's release decrements; 0 is only ever made under dlock. */
    while (atomic_load_explicit(&s->running, memory_order_acquire))
        pthread_cond_wait(&s->didle, &s->dlock);
    pthread_mutex_unlock(&s->dlock);
}
