/* SPDX-License-Identifier: MIT */
/*
 * The store's logic (everything of chime_store that does not depend on where records live): what its
 * files share. store.c holds the API and the table of loaded timers, lifecycle.c open and close,
 * fire.c firing (the runtime's callback, the dispatcher, handlers and their outcomes), keeper.c the
 * wall clock and the loading of timers as they come within the horizon.
 *
 * A LOADED TIMER (struct hot) is one version of one key held in memory because it is due within the
 * horizon. Its life:
 *
 *     ARMED ──due──> QUEUED ──dispatcher──> FIRING ──recorded──> RUNNING ──handler returned──> gone
 *       │  └─(newer firing of the key still running)─> HELD ──released──> QUEUED
 *       └── cancel, or a put that replaces it (any state before FIRING) ──> gone
 *
 *   ARMED    a runtime timer (rid) will call chime__store_due.
 *   HELD     due, but the key's previous firing is still running; its end releases it.
 *   QUEUED   in the dispatcher's queue (waiting for the rate limit); still cancellable.
 *   FIRING   taken by the dispatcher, the lead (lead.h) before its due time; its firing is being
 *            recorded. No longer cancellable: cancel gets -EINPROGRESS, a put schedules a new
 *            version beside it.
 *   RUNNING  its handler was handed to the runtime, or runs.
 *
 * A key has at most one loaded timer that is not FIRING or RUNNING (its pending version) and at most
 * one that is (its running firing); both sit in the key's stripe of the table. Every change of state
 * happens with the stripe's lock held. An entry taken out of the table while someone else still
 * holds a pointer to it (the runtime's callback, the dispatcher's queue) is marked `detached`, and
 * whoever holds that pointer frees it.
 *
 * LOCK ORDER: a stripe's lock, then load_lock, then the backend's own locks. The dispatcher's lock
 * (dlock) comes last: a due timer is queued, and a queued one dropped, under its stripe's lock
 * (fire.c, enqueue; store.c, chime__store_drop), and nothing is locked while dlock is held.
 * Runtime calls (schedule, cancel) are lock-free and may be made under any of them.
 */
#ifndef CHIME_STORE_STORE_H
#define CHIME_STORE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chime.h"
#include "store/backend.h"
#include "store/lead.h"

enum hot_state { HOT_ARMED, HOT_HELD, HOT_QUEUED, HOT_FIRING, HOT_RUNNING };

struct hot {
    struct hot *next;      /* in the stripe's chain */
    struct hot **pprev;    /* what points at it there (a bucket, or the previous entry's next), so
                              that it leaves the chain without a walk; NULL: not in the table */
    struct hot *qnext;     /* in the dispatcher's queue */
    uint64_t hash;
    struct chime__ref ref;
    uint64_t due_ns;       /* CLOCK_REALTIME */
    chime_id rid;          /* ARMED: the runtime timer calling chime__store_due (0: could not be
                              armed; the keeper retries). RUNNING: the one calling the handler (0
                              once it has begun) */
    uint64_t start_mono;   /* RUNNING: CLOCK_MONOTONIC time before which its handler does not
                              start, so that starts keep to the rate limit (fire.c, pace); 0: none */
    uint32_t attempt;      /* firings recorded (RUNNING: the number of this firing) */
    uint8_t state;
    uint8_t detached;
    uint8_t wait_prev;     /* a previous firing of this key runs: hold when due */
    uint8_t waited_for;    /* FIRING, RUNNING: a pending entry of the key was given wait_prev for
                              it (chime__store_wait_for), so its end must look for it */
    uint8_t superseded;    /* FIRING, RUNNING: a put, cancel or requeue of the key was recorded
                              since the firing was taken, so ref may no longer be its pending
                              version (the ack says so to the backend: backend.h, ack) */
    uint8_t settled;       /* RUNNING, not begun: its firing was settled (backend.h, abandon) by a
                              revoke that found its fence invalid; it can only be abandoned */
    uint16_t key_len;
    uint32_t payload_len;
    struct chime_store *s;
    unsigned char data[];  /* the key, then the payload */
};

#define HOT_STRIPES 64

struct hot_stripe {
    _Alignas(64) pthread_mutex_t lock;
    struct hot **buckets;
    size_t nbuckets;       /* a power of two */
    size_t count;          /* entries: timers loaded (chime_store_stats' `loaded`) */
    /* chime_store_stats' counts of what happened to this stripe's timers, kept here under its lock
     * so that the thread that fires and the ones that finish share no counter (one shared atomic
     * per timer and thread was a cache line crossing cores at every firing and acknowledgement). */
    uint64_t fired, acked, retried, buried;
    /* FIRING and RUNNING entries marked superseded: firings the backend's pending count (one per
     * key) no longer includes, since their key's newer put replaced them there. chime_store_stats
     * adds them back: a running firing counts as pending until its outcome is recorded. */
    uint64_t superseded;
};

/* A key that changed while a load ran (see keeper.c), in a chain of the tombs' hash table. */
struct tomb {
    struct tomb *next;
    uint64_t hash;         /* chime__store_hash of the key */
    uint16_t key_len;
    unsigned char key[];
};

struct chime_store {
    struct chime_store_config cfg; /* with every default filled in; path is our own copy */
    chime_handler *handler;
    void *ctx;
    const struct chime__backend_ops *ops;
    struct chime__backend *b;
    struct chime__sink sink;
    chime_timer *rt;
    uint64_t hash_k0, hash_k1;
    uint64_t (*wall)(void);        /* CLOCK_REALTIME, or a test's clock */
    struct hot_stripe stripes[HOT_STRIPES];

    /* loading (keeper.c) */
    pthread_mutex_t load_lock;     /* tombs, and the keeper's sleep */
    _Atomic uint64_t loaded;       /* every owned timer due before it is in the table */
    _Atomic uint64_t loading_until; /* a load to here runs (0: none) */
    struct tomb **tombs;           /* by hash: tomb_buckets chains (a power of two), or NULL */
    size_t tomb_buckets, tomb_count;
    pthread_t keeper;
    int keeper_started;
    int event_fd, clock_fd;        /* wake-ups of the keeper (stop, a failed arm); the clock's */
    _Atomic int keeper_stop, stepped;
    uint64_t keeper_rounds;        /* under load_lock: rounds the keeper completed */
    pthread_cond_t keeper_cond;    /* broadcast at the end of each round */
    _Atomic uint64_t unarmed;      /* ARMED entries with rid 0: their arming failed (out of memory,
                                      or the runtime stopping), or the runtime stopped unfired */

    /* dispatching (fire.c) */
    pthread_t dispatcher;
    int dispatcher_started;
    pthread_mutex_t dlock;         /* the queue, sealed, and a queued entry's detached mark */
    pthread_cond_t dwork, didle;
    struct hot *qhead, *qtail;
    size_t qlen;
    int dstop;
    int opened;                    /* open has handed the store out (*out): handlers may start */
    int sealed;                    /* close gave the queue up (lifecycle.c, seal) */
    void *dbuf;                    /* the dispatcher's batch arrays (fire.c, struct dispatch_buf) */
    double tokens;                 /* the rate limit's bucket */
    uint64_t tokens_at;            /* rate_clock's time when last refilled */
    uint64_t (*rate_clock)(void);  /* the bucket's: CLOCK_MONOTONIC, or a test's */
    uint64_t pace_next;            /* CLOCK_MONOTONIC: the next handler's start at the rate */
    struct chime__lead lead;       /* how long before its due time a firing is recorded (lead.h) */

    /* acknowledgements queued in a burst (acks.c) */
    struct {
        pthread_mutex_t aqlock;    /* the queue */
        struct hot *head, *tail;   /* RUNNING entries whose handler returned 0, through qnext */
        int armed;                 /* a flush is scheduled, and the queue not taken since */
        pthread_mutex_t alock;     /* held while a taken queue is recorded */
        struct hot *marker;        /* the flush timer's argument: an entry in no table */
    } acks;

    /* outcomes of handlers that returned, not yet appended or queued (outcomes.c) */
    struct {
        _Alignas(64) _Atomic uint64_t word; /* the parity, WAITING, and each parity's count */
        pthread_mutex_t order;              /* one sync's flip and wait at a time */
        pthread_mutex_t lock;               /* the wait for a count to reach 0 */
        pthread_cond_t done;
    } outcomes;

    /* Handlers dispatched and not finished: only the decrement to 0 takes dlock (fire.c,
     * handler_ended); on its own line, since the dispatcher and the finishers both change it. */
    _Alignas(64) _Atomic uint64_t running;
    _Alignas(64) _Atomic int error;             /* sticky: -EIO, -ENOSPC */
    _Atomic int closing;
};

/* store.c: the table */
uint64_t chime__store_hash(const struct chime_store *s, const void *key, size_t len);
struct hot_stripe *chime__store_stripe(struct chime_store *s, uint64_t hash);
/* With the stripe locked: the key's pending (not FIRING/RUNNING) and running entries, or NULL. */
void chime__store_find(struct hot_stripe *st, uint64_t hash, const void *key, size_t len,
                       struct hot **pending, struct hot **running);
struct hot *chime__store_entry(struct chime_store *s, uint64_t hash, const void *key, size_t key_len,
                               const void *payload, size_t payload_len);
/* Put e in its stripe's chain; take it out (O(1): through e->pprev, no walk; nothing if it is not
 * in the table). With the stripe locked. */
void chime__store_insert(struct hot_stripe *st, struct hot *e);
void chime__store_unlink(struct hot_stripe *st, struct hot *e);
/* A put, cancel or requeue of r's key was recorded while r fires or runs. Stripe locked. */
void chime__store_supersede(struct hot_stripe *st, struct hot *r);
/* e, a new pending entry of a key whose firing `running` runs (or NULL: none), is held until that
 * firing ends; the running entry notes that its end must release it. With the stripe locked. */
static inline void chime__store_wait_for(struct hot *e, struct hot *running)
{
    e->wait_prev = running != NULL;
    if (running)
        running->waited_for = 1;
}
/* Check the table (the tests'): every entry where its hash says, linked both ways, the counts
 * right, at most one pending and one running entry per key, and a pending entry held for its key's
 * running one (wait_prev) only while that one will release it (waited_for). Return: NULL, or what
 * is wrong. Locks each stripe in turn; O(entries). */
const char *chime__store_check(struct chime_store *s);
/* Test hook: chime_store_close checks the table of every store (chime__store_check) once its
 * handlers are over, and aborts with the reason if it is wrong. */
void chime__store_check_on_close(int on);
/* chime_store_stats' counts of the table (loaded, fired, acked, retried, buried) and nothing else
 * (the rest zero): no call to the backend, whose own counts may cost a query. Any thread; locks each
 * stripe in turn. Return: the superseded firings (hot_stripe), which pending adds. */
uint64_t chime__store_tally(const struct chime_store *s, struct chime_store_stats *out);
/* Take a pending entry out (cancelled, replaced): it is freed now, or by whoever holds it. */
void chime__store_drop(struct chime_store *s, struct hot_stripe *st, struct hot *e);
void chime__store_free_entry(struct hot *e);
/* Place a timer the backend handed over (a load, a requeue, an arm) unless the table holds it or a
 * newer version. With the stripe locked. */
void chime__store_install(struct chime_store *s, struct hot_stripe *st, uint64_t hash,
                          const struct chime__timer *t, int check_tombs);
/* After the backend recorded a put of e's key: keep e loaded if due within what is loaded and owned,
 * else free it (noting the key during a load). Stripe locked; consumes e. */
void chime__store_place(struct chime_store *s, struct hot_stripe *st, struct hot *e, int owned);
/* The sticky failure. */
void chime__store_fail(struct chime_store *s, int err);

/* fire.c */
void chime__store_arm(struct chime_store *s, struct hot *e);  /* stripe locked */
void chime__store_due(void *arg);                             /* the runtime's callback */
void chime__store_release_held(struct chime_store *s, struct hot *e); /* stripe locked: HELD -> QUEUED */
/* A recorded firing whose handler will not start now (the store closes before its due time, or the
 * runtime refused it): out of the table, pending on disk (a restart fires it with attempt + 1). */
void chime__store_abandon(struct chime_store *s, struct hot *e);
/* lifecycle.c: settle the firing of a RUNNING e whose handler has not begun and never will
 * (backend.h, abandon), once: e->settled records it. Stripe locked. */
void chime__store_settle_unstarted(struct chime_store *s, struct hot *e);
/* A RUNNING e whose handler waits for its due time: schedule it again from the wall clock now (it
 * stepped), or take it back if the store is closing and it is not due within the lead. Stripe
 * locked. Return: nonzero if it must be abandoned (after unlocking the stripe). */
int chime__store_reschedule_handler(struct chime_store *s, struct hot *e);
/* Record what e's handler returned (rc: as chime_handler's): outcome, unlink, free e, count it out
 * of `running`. Takes e's stripe lock. */
void chime__store_finish(struct chime_store *s, struct hot *e, int64_t rc, unsigned parity);
int chime__store_start_dispatcher(struct chime_store *s);
void chime__store_stop_dispatcher(struct chime_store *s);
int chime__store_in_handler(const struct chime_store *s);

/* acks.c: acknowledgements queued and recorded in groups during a burst */
int chime__store_acks_init(struct chime_store *s);     /* Return: 0; -ENOMEM */
void chime__store_acks_destroy(struct chime_store *s); /* after the runtime has stopped */
/* e's handler returned 0: queue its acknowledgement if a burst is on, and then end its outcome
 * (counted under parity: outcomes.c). Return: 1 if queued (the store records it later), 0 if the
 * caller must record it now (chime__store_finish), and the outcome is still counted. */
int chime__store_ack_later(struct chime_store *s, struct hot *e, unsigned parity);
/* Record every queued acknowledgement, and wait for those another thread is recording. */
void chime__store_acks_flush(struct chime_store *s);
/* Test hook: every flush fails to be scheduled, as with no memory, so that the handler's thread
 * records the queue itself. */
void chime__store_acks_refuse_flush(int on);

/* outcomes.c: chime_store_sync covers the outcome of every handler that returned before it */
void chime__store_outcomes_init(struct chime_store *s);
void chime__store_outcomes_destroy(struct chime_store *s);
/* A handler returned: count its outcome (return: the parity it is counted under). Any thread. */
unsigned chime__store_outcome_begin(struct chime_store *s);
/* It is appended, or queued: before the handler's end is counted (handler_ended). Any thread. */
void chime__store_outcome_end(struct chime_store *s, unsigned parity);
/* The parity of an outcome already ended (a queued acknowledgement: chime__store_finish). */
#define CHIME__OUTCOME_ENDED 2u
/* Wait until every outcome counted before this call has ended (chime_store_sync). */
void chime__store_outcomes_wait(struct chime_store *s);

/* keeper.c */
uint64_t chime__store_wall(void);
/* The boundary a put must use: due before it means "load it now" (and note it during a load).
 * *loading receives the running load's boundary (loading_until), 0 if none runs. */
uint64_t chime__store_limit(struct chime_store *s, uint64_t *loading);
/* Note that key (hash: chime__store_hash of it) changed while the load `loading` (as
 * chime__store_limit gave it, after the change was recorded) runs; stripe locked. Nothing if that
 * load has ended: a load begun since reads the change itself. Whether a load's key was noted. */
void chime__store_tomb(struct chime_store *s, uint64_t hash, const void *key, size_t key_len,
                       uint64_t loading);
int chime__store_tombstoned(struct chime_store *s, uint64_t hash, const void *key, size_t key_len);
int chime__store_first_load(struct chime_store *s);
/* Watch the wall clock for steps (keeper.c, THE CLOCK): before the first load, so that a step while
 * it arms what it reads is seen. Without a timerfd (an old kernel), nothing is watched. */
void chime__store_watch_clock(struct chime_store *s);
int chime__store_start_keeper(struct chime_store *s);
/* An entry could not be armed (out of memory): count it, wake the keeper to arm it (any thread). */
void chime__store_unarmed(struct chime_store *s);
void chime__store_stop_keeper(struct chime_store *s);
/* Walk the table: arm what could not be armed (UNARMED); recompute every runtime deadline from the
 * wall clock, handlers waiting for their due time included (STEP: the clock stepped); take back the
 * handlers not due within the lead (CLOSE). */
enum { CHIME__SWEEP_UNARMED, CHIME__SWEEP_STEP, CHIME__SWEEP_CLOSE };
void chime__store_sweep(struct chime_store *s, int mode);

/* Test hooks (not exported): a wall clock for stores opened afterwards (NULL: CLOCK_REALTIME; a
 * store on any other clock does not watch CLOCK_REALTIME for steps), and telling a store that its
 * clock stepped (as the kernel tells it about CLOCK_REALTIME). */
void chime__store_set_clock(uint64_t (*now)(void));
void chime__store_clock_stepped(chime_store *s);
/* Test hook: wake the keeper for a round, as a failed arm does (no step reported). */
void chime__store_wake(chime_store *s);
/* Test hook: the backend stores opened afterwards use (NULL: the one their config asks for), so that
 * a test can wrap one of the journal's operations. */
void chime__store_set_backend(const struct chime__backend_ops *ops);
/* Tests: called by chime__store_tomb before it files anything (set while no store is open). */
extern void (*chime__store_tomb_hook)(void);
/* fire.c. Tests only: called where a timer found early by the wall clock (`wall`) is armed again,
 * with its stripe locked: by a handler's runtime callback, and by the dispatcher for a queued one
 * (set while no store is open). */
extern void (*chime__store_rewait_hook)(uint64_t wall);
/* Test hook: called by open, on the opening thread, with everything started, just before it hands
 * the store out (lifecycle.c). NULL: none. Set before opening. */
extern void (*chime__store_open_hook)(struct chime_store *s);
/* Test hook: the monotonic clock of the rate limit's token bucket for stores opened afterwards
 * (NULL: CLOCK_MONOTONIC), so that a test decides when tokens come (fire.c). The dispatcher's waits
 * for a token stay on CLOCK_MONOTONIC. */
void chime__store_set_rate_clock(uint64_t (*now)(void));
/* Test hook: the next n arms of runtime timers fail, as with no memory (fire.c). */
void chime__store_refuse_arms(unsigned n);
/* Wait until the keeper has finished any load begun before the call (tests). */
void chime__store_settle(chime_store *s);

#endif /* CHIME_STORE_STORE_H */
