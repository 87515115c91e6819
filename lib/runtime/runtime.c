/*
 * The threaded runtime: lock-free producers, one advancing thread that owns the wheel.
 *
 * WHO OWNS WHAT
 * The advancing thread alone touches the wheel, the records' wheel ids, the give-back batches and the
 * live count. Producers (any thread: schedule, cancel, reschedule) touch only a record's atomic state
 * word and, for a record they have just taken or whose deadline they hold the write bit for, its other
 * fields; they hand records to the advancing thread through the MPSC queue (mpsc.h). Records come from
 * and go back to the pool of records.h.
 *
 * THE STATE WORD (one per record; every cross-thread decision is a compare-and-swap on it)
 *     bits 63..32  generation: the high half of the id; bumped when the record is given back
 *     bit  16  P   a periodic run is handed out (to a worker, or about to run) and has not started;
 *                  cancel, reschedule and a draining stop clear it, and the run is then skipped
 *     bits 15..8   shard: which free stack the record returns to
 *     bits  1..0   life: FREE, PENDING, CANCELLED, DONE (ended by firing or by stop)
 *     bit 2  Q     queued: the record is on the queue or about to be pushed; whoever sets Q pushes
 *     bit 3  R     a new deadline is in deadline_ns: (re)place the timer when popped; never fire it
 *                  at the old one
 *     bit 4  RUN   a periodic timer's callback is running; the next boundary is skipped
 *     bit 5  KNOWN the advancing thread has seen the record (it counts in `live`)
 *     bit 6  W     a reschedule is writing deadline_ns; pop leaves the record queued until it is done
 *     bit 7  E     CHIME_STOP_DRAIN is ending this periodic timer once its running callback returns
 *
 * WHO WINS A RACE
 * Firing (advancing thread) is PENDING -> DONE for a one-shot timer, PENDING -> PENDING|RUN for a
 * periodic one; cancel is PENDING -> CANCELLED|Q. Both are CASes on the same word, so exactly one
 * succeeds: cancel returns 0 only if it got there first, and then the callback never starts. A
 * reschedule sets R (and Q), which firing refuses to fire through. Stop's sweep is PENDING -> DONE too,
 * so a timer is fired, cancelled or unfired, exactly once.
 *
 * SLEEPING AND WAKING
 * The thread sleeps on a futex until the wheel's next event (tickless: no wake-up per tick), after
 * publishing that time in sleep_until. A producer whose deadline is earlier than sleep_until (or whose
 * free records ran out) swaps sleep_until to 0 and wakes it; one producer wins that swap, the rest
 * make no system call. The handshake is store-then-load on both sides, seq_cst (see chime__mpsc_push).
 * Everything else the sleeper must not miss joins the same handshake: a stop or sync request (mode,
 * sync_req) and, for a draining stop that waits for idle workers, a worker going idle (idle_seq).
 */
#define _GNU_SOURCE /* syscall(SYS_futex), prctl: Linux interfaces beyond C11 */
#include "runtime/runtime.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "runtime/timer.h"
#include "wheel/wheel.h"

#define FIRE_BATCH 1024  /* callbacks per bounded advance: the queue is drained between batches */
#define DRAIN_BATCH 4096 /* queue entries applied per iteration before time is looked at again */
#define DEFAULT_TICK_NS UINT64_C(1000000)

/* The timer whose advancing thread or worker this thread is: stop from it would wait on itself. */
static _Thread_local chime_timer *tls_owner;
static uint64_t monotonic_ns(void *unused)
{
    (void)unused;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- sleeping and waking ---- */

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleep while *word == seen, until deadline_ns on CLOCK_MONOTONIC (UINT64_MAX: no timeout). Spurious
 * returns are fine: every caller re-checks what it waits for. */
static void futex_wait_until(_Atomic uint32_t *word, uint32_t seen, uint64_t deadline_ns)
{
    struct timespec ts, *timeout = NULL;
    if (deadline_ns != UINT64_MAX) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
        ts.tv_nsec = (long)(deadline_ns % 1000000000u);
        timeout = &ts;
    }
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
    syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, seen, timeout, NULL, FUTEX_BITSET_MATCH_ANY);
}

void chime__timer_wake(chime_timer *t, uint64_t when_ns, uint64_t s)
{
    do {
        /* seq_cst, as the load in chime__timer_wake_before; only the waker whose swap succeeds makes
         * the system call. */
        if (atomic_compare_exchange_weak_explicit(&t->sleep_until, &s, 0, memory_order_seq_cst,
                                                  memory_order_seq_cst)) {
            /* release: pairs with the acquire load of wake_seq in sleep_until_due. */
            atomic_fetch_add_explicit(&t->wake_seq, 1, memory_order_release);
            futex_wake_all(&t->wake_seq);
            return;
        }
    } while (s != 0 && when_ns < s);
}

/* The advancing thread: sleep until wake_ns unless something arrived since it last looked. */
static void sleep_until_due(chime_timer *t, uint64_t wake_ns, int mode_seen, uint32_t sync_seen,
                            uint32_t idle_seen)
{
    /* acquire: pairs with the release increment in wake_before; read before sleep_until is
     * published, so a wake after that publication changes the value and the futex returns at once. */
    uint32_t seq = atomic_load_explicit(&t->wake_seq, memory_order_acquire);
    /* seq_cst: the sleeper's store in the handshake; the loads below (seq_cst) come after it. */
    atomic_store_explicit(&t->sleep_until, wake_ns, memory_order_seq_cst);
    if (chime__mpsc_empty(&t->queue) &&
        atomic_load_explicit(&t->mode, memory_order_seq_cst) == mode_seen &&
        atomic_load_explicit(&t->sync_req, memory_order_seq_cst) == sync_seen &&
        atomic_load_explicit(&t->idle_seq, memory_order_seq_cst) == idle_seen)
        futex_wait_until(&t->wake_seq, seq, t->real_clock ? wake_ns : UINT64_MAX);
    /* relaxed: being awake needs no publication; producers that still see the old value wake a
     * thread that is awake, which costs a system call and nothing else. */
    atomic_store_explicit(&t->sleep_until, 0, memory_order_relaxed);
}

/* ---- statistics ---- */

static void count_lateness(chime_timer *t, uint64_t deadline_ns)
{
    uint64_t start = chime__timer_now(t);
    uint64_t late = start > deadline_ns ? start - deadline_ns : 0;
    uint64_t us = late / 1000;
    unsigned bucket = 0;
    while (us && bucket < CHIME_LATENESS_BUCKETS - 1) {
        us >>= 1;
        bucket++;
    }
    /* relaxed throughout: counters, read as a snapshot by chime_timer_stats. */
    atomic_fetch_add_explicit(&t->late_hist[bucket], 1, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&t->late_max, memory_order_relaxed);
    while (late > max && !atomic_compare_exchange_weak_explicit(&t->late_max, &max, late,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed))
        ;
    atomic_fetch_add_explicit(&t->runs, 1, memory_order_relaxed);
}

/* Bump a statistic that only the advancing thread writes. release: pairs with the acquire loads in
 * chime_timer_stats, so a reader that sees a timer's end also sees its schedule counted. */
static void count(_Atomic uint64_t *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* ---- the advancing thread's record handling ---- */

/* Give a record back; every id naming it dies. */
static void release(chime_timer *t, struct chime__rec *rec)
{
    chime__records_give(&t->recs, t->give, rec);
    t->live--;
    t->freed_since_trim++;
}

/* Take a record's timer out of the wheel, if the wheel still holds it. */
static void drop_wheel_timer(chime_timer *t, struct chime__rec *rec)
{
    if (rec->wheel_id) {
        chime_wheel_cancel(t->wheel, rec->wheel_id);
        rec->wheel_id = 0;
    }
}

/* A timer ends without firing: hand its argument to on_unfired, count it. */
static void count_unfired(chime_timer *t, void *arg)
{
    if (t->on_unfired)
        t->on_unfired(arg);
    /* release: pairs with the acquire loads in chime_timer_stats. */
    atomic_fetch_add_explicit(&t->unfired, 1, memory_order_release);
    chime__timer_unlimit(t);
}

/* End a timer that will never fire: on_unfired, counted. The caller won the CAS to DONE. */
static void end_unfired(chime_timer *t, struct chime__rec *rec, uint64_t old_state)
{
    drop_wheel_timer(t, rec);
    count_unfired(t, rec->arg);
    if (!(old_state & ST_Q))
        release(t, rec); /* if queued, apply() gives it back when it is popped */
}

/* CAS a PENDING record to DONE. Return: the state it had, or 0 if it was no longer PENDING. */
static uint64_t claim(struct chime__rec *rec)
{
    /* acquire: pairs with the release halves of the producers' CASes on the state. */
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire);
    do {
        if ((s & LIFE_MASK) != LIFE_PENDING)
            return 0;
        /* acq_rel: this is the CAS cancel races with; acquire as above. */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s, (s & ~(uint64_t)LIFE_MASK) | LIFE_DONE,
                                                    memory_order_acq_rel, memory_order_acquire));
    return s;
}

static void on_fire(void *arg);

static uint64_t ticks_up(const chime_timer *t, uint64_t ns)
{
    return ns / t->tick_ns + (ns % t->tick_ns != 0);
}

/* Put a record's timer in the wheel at its requested deadline (never early: rounded up). */
static void place(chime_timer *t, struct chime__rec *rec)
{
    /* relaxed: ordered by the acquire CAS in apply(), which saw R after the write was published. */
    uint64_t tick = ticks_up(t, atomic_load_explicit(&rec->deadline_ns, memory_order_relaxed));
    if (rec->wheel_id && chime_wheel_reschedule(t->wheel, rec->wheel_id, tick) == 0)
        return;
    int err = rec->period_ns ? chime_wheel_schedule_every(t->wheel, tick, ticks_up(t, rec->period_ns),
                                                          on_fire, rec, &rec->wheel_id)
                             : chime_wheel_schedule(t->wheel, tick, on_fire, rec, &rec->wheel_id);
    if (err) {
        /* The wheel's pool could not grow. The producer was told 0, so the timer must not be lost:
         * mark it for placing again and requeue it; the next iteration retries. */
        rec->wheel_id = 0;
        if (!(atomic_fetch_or_explicit(&rec->state, ST_Q | ST_R, memory_order_relaxed) & ST_Q))
            chime__mpsc_push(&t->queue, &rec->q); /* a cancel or reschedule may have set Q meanwhile */
    }
}

/* Apply a record popped from the queue: a new timer, a new deadline, a cancel, or a run's end. */
static void apply(chime_timer *t, struct chime__rec *rec)
{
    /* acquire: pairs with the release of whoever set Q (schedule's push, cancel's CAS,
     * reschedule's fetch_and, finish_run's CAS): deadline_ns and the fields are theirs. */
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire);
    uint64_t ns;
    do {
        if (s & ST_W) {
            chime__mpsc_push(&t->queue, &rec->q); /* still Q: look again once the writer is done */
            return;
        }
        ns = (s & ~(uint64_t)(ST_Q | ST_R)) | ST_KNOWN;
        /* acquire: as above. */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s, ns, memory_order_acquire,
                                                    memory_order_acquire));
    if (!(s & ST_KNOWN)) {
        t->live++;
        count(&t->scheduled);
    }
    switch (s & LIFE_MASK) {
    case LIFE_CANCELLED:
        drop_wheel_timer(t, rec);
        if (!(s & ST_RUN)) {
            count(&t->cancelled);
            release(t, rec); /* a running periodic timer comes back when its run ends */
        }
        return;
    case LIFE_DONE:
        if (!(s & ST_RUN))
            release(t, rec); /* ended by stop's sweep while queued */
        return;
    case LIFE_PENDING:
        if ((s & ST_E) && !(s & ST_RUN)) {
            uint64_t old = claim(rec);
            if (old)
                end_unfired(t, rec, old); /* a Q in old was set after our CAS: its setter pushes */
            return;
        }
        if (s & ST_R)
            place(t, rec);
        return;
    }
}

/* Apply up to `limit` queued records. Return: true if it stopped at the limit. */
static bool drain(chime_timer *t, size_t limit)
{
    for (size_t i = 0; i < limit; i++) {
        struct chime__mpsc_node *n = chime__mpsc_pop(&t->queue);
        if (!n)
            return false;
        apply(t, (struct chime__rec *)n); /* q is the record's first member */
    }
    return true;
}

/* End a periodic run: clear RUN; if the timer was cancelled or is ending meanwhile, queue it so the
 * advancing thread gives it back. Any thread. */
static void finish_run(chime_timer *t, struct chime__rec *rec)
{
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_relaxed); /* the CAS checks it */
    uint64_t ns;
    do {
        ns = s & ~(uint64_t)(ST_RUN | ST_P);
        if (((s & LIFE_MASK) != LIFE_PENDING || (s & ST_E)) && !(s & ST_Q))
            ns |= ST_Q;
        /* release: pairs with the acquire in apply(). */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s, ns, memory_order_release,
                                                    memory_order_relaxed));
    if ((ns & ST_Q) && !(s & ST_Q))
        chime__timer_requeue(t, rec);
}

static void run_item(void *ctx, const struct chime__item *it)
{
    chime_timer *t = ctx;
    tls_owner = t; /* on a worker: a callback here must not stop t (-EDEADLK) */
    if (it->rec) {
        /* A periodic run starts only if nobody withdrew it (cleared P) since it was fired: a cancel
         * or reschedule that returned 0 in between must keep it from starting. */
        uint64_t s = atomic_load_explicit(&it->rec->state, memory_order_relaxed); /* the CAS checks it */
        do {
            if (!(s & ST_P)) {
                finish_run(t, it->rec); /* withdrawn: end the run without starting it */
                return;
            }
            /* acq_rel: the CAS cancel and reschedule race with (they clear P in theirs). */
        } while (!atomic_compare_exchange_weak_explicit(&it->rec->state, &s, s & ~(uint64_t)ST_P,
                                                        memory_order_acq_rel, memory_order_relaxed));
    }
    count_lateness(t, it->deadline_ns);
    if (!it->rec) {
        /* release: pairs with the acquire loads in chime_timer_stats. */
        atomic_fetch_add_explicit(&t->fired, 1, memory_order_release);
        chime__timer_unlimit(t);
    }
    it->fn(it->arg);
    if (it->rec)
        finish_run(t, it->rec);
}

/* A worker found nothing to do: a draining runtime may be waiting for exactly that. */
static void workers_went_idle(void *ctx)
{
    chime_timer *t = ctx;
    /* seq_cst, both: the waker's half of the sleep handshake; the advancing thread snapshots idle_seq
     * before it asks whether the workers are idle, and compares it after publishing sleep_until. */
    atomic_fetch_add_explicit(&t->idle_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&t->mode, memory_order_seq_cst) != MODE_RUNNING)
        chime__timer_wake_before(t, 0);
}

/* The wheel's callback for every record: decide, by CAS, whether the timer fires. */
static void on_fire(void *arg)
{
    struct chime__rec *rec = arg;
    chime_timer *t = tls_owner;
    bool again = rec->period_ns && chime__wheel_is_pending(t->wheel, rec->wheel_id);
    if (!again)
        rec->wheel_id = 0; /* the wheel has let go of its node */
    /* acquire: as in claim(). */
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire);
    uint64_t ns;
    do {
        /* Cancelled: given back when popped. R: a new deadline is queued. RUN: the last run is
         * still going (skip this boundary). E: ending. */
        if ((s & LIFE_MASK) != LIFE_PENDING || (s & (ST_R | ST_RUN | ST_E)))
            return;
        ns = again ? s | ST_RUN | ST_P : (s & ~(uint64_t)LIFE_MASK) | LIFE_DONE;
        /* acq_rel: the CAS cancel races with (see the top of the file). */
    } while (!atomic_compare_exchange_weak_explicit(&rec->state, &s, ns, memory_order_acq_rel,
                                                    memory_order_acquire));
    struct chime__item it = {
        .fn = rec->fn,
        .arg = rec->arg,
        .rec = again ? rec : NULL,
        /* relaxed: the advancing thread's own earlier reading, through apply()'s acquire. */
        .deadline_ns = rec->period_ns ? chime_wheel_now(t->wheel) * t->tick_ns
                                      : atomic_load_explicit(&rec->deadline_ns, memory_order_relaxed),
    };
    if (!again)
        release(t, rec); /* Q is clear (no R), so nobody will push it: its ids die now */
    if (t->use_workers) {
        if (t->batch_n == t->batch_cap) {
            size_t cap = t->batch_cap ? t->batch_cap * 2 : 256;
            struct chime__item *b = chime__realloc_sized(t->batch, t->batch_cap * sizeof(*b), cap * sizeof(*b));
            if (!b) {
                run_item(t, &it); /* no memory to hand it over: run it here rather than lose it */
                return;
            }
            t->batch = b;
            t->batch_cap = cap;
        }
        t->batch[t->batch_n++] = it;
    } else {
        run_item(t, &it);
    }
}

static void hand_to_workers(chime_timer *t)
{
    if (!t->batch_n)
        return;
    if (chime__workers_submit(&t->workers, t->batch, t->batch_n) != 0) {
        for (size_t i = 0; i < t->batch_n; i++)
            run_item(t, &t->batch[i]); /* the queue could not grow: run them here */
    }
    t->batch_n = 0;
}

/* A worker item that never ran because of CHIME_STOP_NOW. */
static void item_unfired(void *ctx, const struct chime__item *it)
{
    chime_timer *t = ctx;
    if (it->rec) {
        finish_run(t, it->rec); /* the sweep ends the periodic timer itself */
        return;
    }
    count_unfired(t, it->arg);
}

/*
 * Give memory back once load has dropped. A pass walks the free records, so it runs only when at
 * least a chunk's worth were freed since the last pass and either a quarter of the spare records were
 * (amortised O(1) per freed timer) or nothing is pending any more (the end of a burst: every chunk
 * is free, so the pass is sure to give back all but the reserve).
 */
static void maybe_trim(chime_timer *t)
{
    size_t cap = chime__records_capacity(&t->recs);
    size_t spare = cap > t->live ? cap - t->live : 0;
    if (t->freed_since_trim >= CHIME__REC_CHUNK &&
        (t->freed_since_trim >= spare / 4 || t->live == 0)) {
        size_t keep = t->live > 2 * CHIME__REC_CHUNK ? t->live : 2 * CHIME__REC_CHUNK;
        chime__records_shrink(&t->recs, keep);
        chime__wheel_trim(t->wheel); /* gives the nodes back once none is pending */
        t->freed_since_trim = 0;
    }
    /* relaxed: figures for chime__timer_memory, exact only after a sync. */
    atomic_store_explicit(&t->mem_records, chime__records_capacity(&t->recs), memory_order_relaxed);
    atomic_store_explicit(&t->mem_wheel, chime__wheel_capacity(t->wheel), memory_order_relaxed);
}

/* End one record at stop if it will not fire: under NOW every pending timer, under DRAIN the periodic
 * ones (a running one is marked E and ended when its run is over). */
static void sweep_one(chime_timer *t, struct chime__rec *rec, int mode)
{
    for (;;) {
        uint64_t s = atomic_load_explicit(&rec->state, memory_order_acquire); /* as in claim() */
        if (mode == CHIME_STOP_NOW && (s & ST_KNOWN) && (s & LIFE_MASK) == LIFE_CANCELLED &&
            (s & ST_Q)) {
            count(&t->cancelled); /* its canceller's push comes after this thread has gone */
            return;
        }
        if (!(s & ST_KNOWN) || (s & LIFE_MASK) != LIFE_PENDING)
            return;
        if (mode == CHIME_STOP_DRAIN && !rec->period_ns)
            return; /* one-shot timers fire as usual */
        if (s & ST_RUN) {
            /* Only under DRAIN (NOW joined the workers first). relaxed: finish_run's CAS sees E or
             * fails; if the run ended first, this CAS fails and the loop claims the timer. */
            if (atomic_compare_exchange_weak_explicit(&rec->state, &s, (s & ~(uint64_t)ST_P) | ST_E,
                                                      memory_order_relaxed, memory_order_relaxed))
                return;
            continue;
        }
        uint64_t old = claim(rec); /* RUN is set by this thread only, so it stays clear */
        if (old) {
            end_unfired(t, rec, old);
            return;
        }
    }
}

/*
 * Stop has begun: close the pool and wait until every record a producer took has reached the queue
 * and been applied, so that `live` accounts for every timer; then end what will not fire.
 */
static void begin_stop(chime_timer *t, int mode)
{
    t->closed = true;
    if (mode == CHIME_STOP_NOW && t->use_workers) {
        chime__workers_stop(&t->workers, true, item_unfired);
        t->use_workers = false;
    }
    chime__records_close(&t->recs);
    /*
     * Not "until the queue is empty": reschedules and cancels may go on pushing records the thread
     * already knows for as long as they like (a thread rescheduling one timer in a loop would hold a
     * stop off forever). What must arrive is every record taken from the pool, and they are counted.
     */
    for (;;) {
        drain(t, DRAIN_BATCH);
        chime__records_flush(&t->recs, t->give);
        size_t taken = chime__records_capacity(&t->recs) - chime__records_count_free(&t->recs);
        if (taken == t->live)
            break;
        sched_yield(); /* a producer took a record and has not pushed it yet */
    }
    /* The sweep: every record the advancing thread knows, in index order. */
    uint32_t nchunks = atomic_load_explicit(&t->recs.nchunks, memory_order_relaxed); /* closed */
    for (uint32_t c = 0; c < nchunks; c++) {
        if (t->recs.meta[c].dropped) /* written by this thread (shrink), and growth is closed */
            continue;
        for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++) {
            sweep_one(t, &t->recs.dir[c][i], mode);
        }
    }
}

static void publish_sync(chime_timer *t, uint32_t sync)
{
    if (atomic_load_explicit(&t->sync_done, memory_order_relaxed) != sync) { /* ours to write */
        /* release: pairs with the acquire load in chime__timer_sync. */
        atomic_store_explicit(&t->sync_done, sync, memory_order_release);
        futex_wake_all(&t->sync_done);
    }
}

static void *advancing_main(void *p)
{
    chime_timer *t = p;
    tls_owner = t;
    /* Wake within about a microsecond of a deadline instead of the default 50 us of timer slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (;;) {
        /* acquire: pairs with the seq_cst stores in chime__timer_sync and chime_timer_stop. */
        uint32_t sync = atomic_load_explicit(&t->sync_req, memory_order_acquire);
        int mode = atomic_load_explicit(&t->mode, memory_order_acquire);
        if (mode != MODE_RUNNING && !t->closed) {
            begin_stop(t, mode);
            if (mode == CHIME_STOP_NOW)
                break;
        }
        bool more = drain(t, DRAIN_BATCH);
        uint64_t now = chime__timer_now(t);
        bool done;
        chime__wheel_advance_some(t->wheel, now / t->tick_ns, FIRE_BATCH, &done);
        hand_to_workers(t);
        if (more || !done)
            continue; /* a storm: take the producers' news before the next batch */
        chime__records_flush(&t->recs, t->give);
        /* seq_cst: see workers_went_idle. */
        uint32_t idle = atomic_load_explicit(&t->idle_seq, memory_order_seq_cst);
        if (mode == CHIME_STOP_DRAIN && t->live == 0 &&
            (!t->use_workers || chime__workers_idle(&t->workers)))
            break;
        uint64_t next_tick, wake = UINT64_MAX;
        if (chime_wheel_next(t->wheel, &next_tick) == 0)
            wake = next_tick > UINT64_MAX / t->tick_ns ? UINT64_MAX : next_tick * t->tick_ns;
        if (wake <= now)
            continue;
        maybe_trim(t);
        publish_sync(t, sync);
        sleep_until_due(t, wake, mode, sync, idle);
    }
    if (t->use_workers) {
        chime__workers_stop(&t->workers, false, item_unfired); /* DRAIN: they are idle already */
        t->use_workers = false;
    }
    chime__records_flush(&t->recs, t->give);
    maybe_trim(t);
    return NULL;
}

/* ---- the public functions ---- */

int chime__timer_new_clocked(chime_timer **out, const struct chime_timer_config *cfg,
                             chime__clock_fn *clock, void *clock_arg)
{
    if (!out)
        return -EINVAL;
    struct chime_timer_config c = cfg ? *cfg : (struct chime_timer_config){ 0 };
    if (c.workers > CHIME_MAX_WORKERS)
        return -EINVAL;
    chime_timer *t = chime__alloc_aligned(sizeof(*t), 64);
    if (!t)
        return -ENOMEM;
    t->tick_ns = c.tick_ns ? c.tick_ns : DEFAULT_TICK_NS;
    t->max_pending = c.max_pending;
    t->clock = clock ? clock : monotonic_ns;
    t->clock_arg = clock_arg;
    t->real_clock = !clock;
    chime__mpsc_init(&t->queue);
    atomic_init(&t->sleep_until, 0);
    atomic_init(&t->wake_seq, 0);
    atomic_init(&t->mode, MODE_RUNNING);
    atomic_init(&t->sync_req, 0);
    atomic_init(&t->sync_done, 0);
    atomic_init(&t->idle_seq, 0);
    atomic_init(&t->limited, 0);
    /* The counters are zero from the zeroed allocation. */

    struct chime_wheel_config wc = { .start = chime__timer_now(t) / t->tick_ns, .levels = c.levels };
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        wc.slots[i] = c.slots[i];
    int err = chime_wheel_new(&t->wheel, &wc);
    if (err)
        goto fail_wheel;
    err = chime__records_init(&t->recs);
    if (err)
        goto fail_records;
    if (pthread_mutex_init(&t->stop_lock, NULL)) {
        err = -ENOMEM;
        goto fail_lock;
    }
    if (c.workers) {
        err = chime__workers_start(&t->workers, c.workers, run_item, workers_went_idle, t);
        if (err)
            goto fail_workers;
        t->use_workers = true;
    }
    if (pthread_create(&t->thread, NULL, advancing_main, t)) {
        err = -EAGAIN;
        goto fail_thread;
    }
    *out = t;
    return 0;

fail_thread:
    if (t->use_workers)
        chime__workers_stop(&t->workers, true, NULL);
fail_workers:
    pthread_mutex_destroy(&t->stop_lock);
fail_lock:
    chime__records_destroy(&t->recs);
fail_records:
    chime_wheel_free(t->wheel, NULL);
fail_wheel:
    chime__free_aligned(t, sizeof(*t), 64);
    return err;
}

int chime_timer_new(chime_timer **out, const struct chime_timer_config *cfg)
{
    return chime__timer_new_clocked(out, cfg, NULL, NULL);
}

int chime_timer_stop(chime_timer *t, enum chime_stop how, chime_fn *on_unfired)
{
    if (!t || (how != CHIME_STOP_DRAIN && how != CHIME_STOP_NOW))
        return -EINVAL;
    if (tls_owner == t)
        return -EDEADLK;
    if (pthread_mutex_trylock(&t->stop_lock))
        return -ESHUTDOWN; /* another stop is under way */
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != MODE_RUNNING) { /* under stop_lock */
        pthread_mutex_unlock(&t->stop_lock);
        return -ESHUTDOWN;
    }
    t->on_unfired = on_unfired;
    /* seq_cst: publishes on_unfired (release, read after the acquire load of mode in
     * advancing_main) and is the waker's store in the sleep handshake before wake_before's load. */
    atomic_store_explicit(&t->mode, (int)how, memory_order_seq_cst);
    chime__timer_wake_before(t, 0);
    pthread_join(t->thread, NULL);
    /* release: pairs with the acquire loads of mode in cancel and reschedule. */
    atomic_store_explicit(&t->mode, MODE_STOPPED, memory_order_release);
    pthread_mutex_unlock(&t->stop_lock);
    return 0;
}

void chime_timer_free(chime_timer *t)
{
    if (!t)
        return;
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != MODE_STOPPED) /* no call runs */
        chime_timer_stop(t, CHIME_STOP_NOW, NULL);
    chime_wheel_free(t->wheel, NULL);
    chime__records_destroy(&t->recs);
    chime__free(t->batch, t->batch_cap * sizeof(*t->batch));
    pthread_mutex_destroy(&t->stop_lock);
    chime__free_aligned(t, sizeof(*t), 64);
}

void chime_timer_stats(const chime_timer *t, struct chime_stats *out)
{
    if (!t || !out)
        return;
    chime_timer *m = (chime_timer *)t; /* C11 atomics cannot be loaded through a const pointer */
    struct chime_stats st = { 0 };
    /* acquire: pairs with the release increments, so a timer counted as ended here was counted as
     * scheduled before; scheduled is read last and so is at least the sum of the ends. */
    st.fired = atomic_load_explicit(&m->fired, memory_order_acquire);
    st.unfired = atomic_load_explicit(&m->unfired, memory_order_acquire);
    st.cancelled = atomic_load_explicit(&m->cancelled, memory_order_acquire);
    st.scheduled = atomic_load_explicit(&m->scheduled, memory_order_acquire);
    uint64_t ended = st.fired + st.cancelled + st.unfired;
    st.pending = st.scheduled > ended ? st.scheduled - ended : 0;
    st.runs = atomic_load_explicit(&m->runs, memory_order_relaxed);
    st.late_max_ns = atomic_load_explicit(&m->late_max, memory_order_relaxed);
    for (unsigned b = 0; b < CHIME_LATENESS_BUCKETS; b++)
        st.late_hist[b] = atomic_load_explicit(&m->late_hist[b], memory_order_relaxed);
    *out = st;
}

void chime__timer_sync(chime_timer *t)
{
    /* seq_cst: the waker's store in the sleep handshake (see wake_before). */
    uint32_t target = atomic_fetch_add_explicit(&t->sync_req, 1, memory_order_seq_cst) + 1;
    chime__timer_wake_before(t, 0);
    for (;;) {
        /* acquire: pairs with the release store in publish_sync. */
        uint32_t done = atomic_load_explicit(&t->sync_done, memory_order_acquire);
        if ((int32_t)(done - target) >= 0)
            return;
        futex_wait_until(&t->sync_done, done, UINT64_MAX);
    }
}

void chime__timer_poke(chime_timer *t)
{
    chime__timer_wake_before(t, 0);
}

void chime__timer_memory(const chime_timer *t, size_t *records, size_t *wheel_nodes)
{
    chime_timer *m = (chime_timer *)t; /* as in chime_timer_stats */
    *records = atomic_load_explicit(&m->mem_records, memory_order_relaxed);
    *wheel_nodes = atomic_load_explicit(&m->mem_wheel, memory_order_relaxed);
}
