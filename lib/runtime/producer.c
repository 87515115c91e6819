/*
 * The threaded runtime's producer side: schedule, cancel and reschedule, callable from any thread.
 * Each takes no lock and makes no system call in the common case; the protocol they follow (the state
 * word, the queue, the wake-up) is described at the top of runtime.c.
 */
#include <errno.h>

#include "runtime/timer.h"

/* This thread's shard, plus one (0: not yet assigned). */
static _Thread_local unsigned tls_shard;
static _Atomic unsigned next_shard;

static unsigned my_shard(void)
{
    if (!tls_shard) {
        /* relaxed: the counter only spreads threads over shards; nothing is published through it. */
        tls_shard = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % CHIME__SHARDS + 1;
    }
    return tls_shard - 1;
}

/* Take a record, fill it in, queue it. The producer's whole path: no lock, no system call unless the
 * advancing thread must be woken. */
static int submit(chime_timer *t, uint64_t deadline_ns, uint64_t period_ns, chime_fn *fn, void *arg,
                  chime_id *id)
{
    /* relaxed: a fast refusal only; the closed pool is what guarantees no timer slips past stop. */
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != MODE_RUNNING)
        return -ESHUTDOWN;
    /* relaxed: a count (Netty's pendingTimeouts); it orders nothing. */
    if (t->max_pending &&
        atomic_fetch_add_explicit(&t->limited, 1, memory_order_relaxed) >= t->max_pending) {
        atomic_fetch_sub_explicit(&t->limited, 1, memory_order_relaxed);
        return -EAGAIN;
    }
    unsigned shard = my_shard();
    struct chime__rec *rec;
    int got = chime__records_take(&t->recs, shard, &rec);
    if (got < 0) {
        chime__timer_unlimit(t);
        return got;
    }
    /* relaxed: the record is ours since take's acquire; its state holds the generation to use. */
    uint64_t gen = atomic_load_explicit(&rec->state, memory_order_relaxed) >> 32;
    rec->fn = fn;
    rec->arg = arg;
    rec->period_ns = period_ns;
    rec->wheel_id = 0;
    /* relaxed, both: published by the push (release), which the advancing thread pops (acquire). A
     * stale id's holder may read the state meanwhile: it sees a generation that is not its own. */
    atomic_store_explicit(&rec->deadline_ns, deadline_ns, memory_order_relaxed);
    atomic_store_explicit(&rec->state,
                          gen << 32 | (uint64_t)shard << 8 | LIFE_PENDING | ST_Q | ST_R,
                          memory_order_relaxed);
    if (id)
        *id = gen << 32 | rec->idx; /* before the push: the callback may read it */
    chime__mpsc_push(&t->queue, &rec->q);
    chime__timer_wake_before(t, got > 0 ? 0 : deadline_ns); /* got > 0: the shard ran dry; get records back */
    return 0;
}

static int deadline_after(const chime_timer *t, uint64_t delay_ns, uint64_t *deadline)
{
    uint64_t now = chime__timer_now(t);
    if (delay_ns > UINT64_MAX - now)
        return -ERANGE;
    *deadline = now + delay_ns;
    return 0;
}

int chime_timer_schedule(chime_timer *t, uint64_t delay_ns, chime_fn *fn, void *arg, chime_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    uint64_t deadline;
    int err = deadline_after(t, delay_ns, &deadline);
    return err ? err : submit(t, deadline, 0, fn, arg, id);
}

int chime_timer_schedule_at(chime_timer *t, uint64_t deadline_ns, chime_fn *fn, void *arg,
                            chime_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    return submit(t, deadline_ns, 0, fn, arg, id);
}

int chime_timer_schedule_every(chime_timer *t, uint64_t first_delay_ns, uint64_t period_ns,
                               chime_fn *fn, void *arg, chime_id *id)
{
    if (!t || !fn || !period_ns)
        return -EINVAL;
    uint64_t deadline;
    int err = deadline_after(t, first_delay_ns, &deadline);
    return err ? err : submit(t, deadline, period_ns, fn, arg, id);
}

int chime_timer_cancel(chime_timer *t, chime_id id)
{
    if (!t)
        return -EINVAL;
    /* acquire: pairs with the release store of MODE_STOPPED in chime_timer_stop. */
    if (atomic_load_explicit(&t->mode, memory_order_acquire) == MODE_STOPPED)
        return -ESHUTDOWN;
    struct chime__rec *rec = chime__records_find(&t->recs, id); /* the CAS checks the generation */
    if (!rec)
        return -ENOENT;
    /* acquire: pairs with the release halves of the other CASes on the state. */
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire);
    do {
        if (GEN_OF(s) != (uint32_t)(id >> 32) || (s & LIFE_MASK) != LIFE_PENDING)
            return -ENOENT;
        /* acq_rel: the CAS firing races with (on_fire, claim); release publishes the cancel to the
         * advancing thread that pops the record. */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s,
                                                    (s & ~(uint64_t)(LIFE_MASK | ST_P)) | LIFE_CANCELLED | ST_Q,
                                                    memory_order_acq_rel, memory_order_acquire));
    chime__timer_unlimit(t);
    if (!(s & ST_Q))
        chime__timer_requeue(t, rec);
    return 0;
}

int chime_timer_reschedule(chime_timer *t, chime_id id, uint64_t delay_ns)
{
    if (!t)
        return -EINVAL;
    if (atomic_load_explicit(&t->mode, memory_order_acquire) == MODE_STOPPED) /* as in cancel */
        return -ESHUTDOWN;
    uint64_t deadline;
    int err = deadline_after(t, delay_ns, &deadline);
    if (err)
        return err;
    struct chime__rec *rec = chime__records_find(&t->recs, id); /* the CAS checks the generation */
    if (!rec)
        return -ENOENT;
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire); /* as in cancel */
    do {
        if (GEN_OF(s) != (uint32_t)(id >> 32) || (s & LIFE_MASK) != LIFE_PENDING)
            return -ENOENT;
        if (s & ST_W)
            return 0; /* another reschedule is writing: ours is ordered just before it, and loses */
        /* acquire: the record is ours to write (W) only once this succeeds. */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s,
                                                    (s & ~(uint64_t)ST_P) | ST_W | ST_R | ST_Q,
                                                    memory_order_acquire, memory_order_acquire));
    /* We hold W, so no one else writes deadline_ns and the record cannot be given back (Q is set). */
    atomic_store_explicit(&rec->deadline_ns, deadline, memory_order_relaxed); /* published below */
    /* release: pairs with the acquire CAS in apply(), which waits for W to clear before it reads. */
    atomic_fetch_and_explicit(&rec->state, ~(uint64_t)ST_W, memory_order_release);
    if (!(s & ST_Q))
        chime__mpsc_push(&t->queue, &rec->q);
    chime__timer_wake_before(t, deadline);
    return 0;
}

