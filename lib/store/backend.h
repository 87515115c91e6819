/* SPDX-License-Identifier: MIT */
/*
 * The backend interface: where a store's records live.
 *
 * chime_store is two halves. The store's logic (store.c and its neighbours) owns everything that is
 * the same wherever records live: the keys of the timers due within the horizon and their runtime
 * timers, handlers, acknowledgements, retries, dead letters as seen by the API, the rate limit and the
 * wall clock. A backend owns durability: it records every change, answers "is this key pending?",
 * keeps far timers (due beyond the horizon) out of memory, and hands timers to the logic when they come
 * within the horizon. The embedded journal (journal.c) is the default backend; a PostgreSQL backend,
 * shared by several processes, plugs in beside it through the same table of operations.
 *
 * VOCABULARY
 *   timer    one scheduling of one key: key, payload, due time (CLOCK_REALTIME ns), attempt count.
 *   version  a 64-bit number the backend gives each timer when it is put (a user's put, a retry, a
 *            requeue). Versions of one key only grow; the logic compares versions of the same key and
 *            nothing else. 0 is never a version.
 *   fence    the backend's proof that this process may fire the timer (for PostgreSQL, the epoch of
 *            the lease on the timer's shard when it was handed over, with the shard; the journal always
 *            uses 0). The logic keeps it with the timer and passes it back on fire, ack, bury and
 *            retry. For one key, fences only grow too (a shard's epochs do).
 *   ref      {version, fence}: the timer the logic is talking about. Of two refs of one key the newer
 *            is the one with the greater version, or with the same version and the greater fence
 *            (the same timer handed over again under a newer lease: a node that lost a shard and took
 *            it back must fire it again even while its stale firing still runs).
 *   attempt  firings recorded so far. A timer is put with 0; fire() records firing number attempt+1
 *            before its handler starts, so a restart that finds it unacknowledged fires it with
 *            attempt + 1.
 *   horizon  the logic loads timers in contiguous ranges of due time: load(0, L1), load(L1, L2), ...
 *            `loaded` below means the `until` of the latest load: every timer this process owns and
 *            that is due before it is in the logic's memory; none due at or after it is.
 *
 * THREADS AND ORDER
 *   Every operation may be called from any thread, concurrently with any other, except as said here;
 *   the backend synchronises itself. The logic serialises operations on one key: put, cancel, fire,
 *   ack, bury, requeue and drop for the same key never overlap, and they reach the backend in the
 *   order the logic decided them (it holds that key's lock across the call; fire is called only for
 *   timers the logic has taken out of a cancellable state; dead_read, a read ahead of a requeue, is
 *   not serialised). A backend must never call into the logic (the sink) from inside one of these
 *   calls while holding a lock that another of these calls can wait for: the sink takes the
 *   logic's key locks.
 *
 * DURABILITY (the promises the logic's contract in chime.h rests on)
 *   D1 put, cancel, dead_requeue and dead_drop record the change and return a ticket; the change is
 *      durable once wait(ticket) has returned 0 (the logic calls it with CHIME_SYNC_EACH, after
 *      releasing its lock on the key, so that one key's commit does not hold up its neighbours);
 *      in any mode, within sync_interval_ns, and by the time a later sync() returns. A change is
 *      visible to every later call as soon as it is recorded, durable or not.
 *   D2 fire: durable when it returns, in either mode (the handler starts only afterwards).
 *   D3 ack and bury: durable by the next group commit or sync(); not waited for.
 *   D4 Per-key prefix: when an operation on a key is durable, every earlier operation on that key is
 *      durable too. (The journal is one log, so a prefix of everything is durable; a backend that
 *      commits on several connections must keep one key's operations in order.)
 *   D5 Failure: once a write or sync fails, the backend reports nothing durable any more: every later
 *      call returns the error (-EIO, -ENOSPC; the journal's flusher also fails it with what it met
 *      bounding the disk: -EBADMSG, -ENOMEM, -EMFILE, -ENFILE) and sink->failed is called once.
 *      Reopening recovers what had been reported durable. A backend that can retry safely (a lost
 *      connection, not a failed fsync) retries inside and does not fail.
 *   D6 Restart: open() finds every durable pending timer and dead letter, with its attempt count.
 */
#ifndef CHIME_STORE_BACKEND_H
#define CHIME_STORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

struct chime__backend; /* one open backend; its layout is the backend's own */

struct chime__ref {
    uint64_t version; /* never 0 for a timer that exists */
    uint64_t fence;   /* opaque to the logic, but ordered for one key (see VOCABULARY) */
};

/* Whether a names the same timer as b or a newer one (two refs of the same key; see VOCABULARY). */
static inline int chime__ref_at_least(const struct chime__ref *a, const struct chime__ref *b)
{
    return a->version > b->version || (a->version == b->version && a->fence >= b->fence);
}

/* A timer (or a dead letter) as a backend hands it over. The pointers are valid during the call. */
struct chime__timer {
    const void *key;
    size_t key_len;
    const void *payload;
    size_t payload_len;
    uint64_t due_ns;    /* CLOCK_REALTIME; for a dead letter, the due time of its last firing */
    uint32_t attempt;   /* firings recorded so far */
    struct chime__ref ref;
    int fired;          /* ack, bury: t is a firing fire() recorded in this process (its outcome,
                           which settles it: see fire); 0 in what a backend hands over */
};

/* Called for each timer a read hands over. Returns 0, or nonzero to stop the read (the read then
 * returns that value). */
typedef int chime__timer_fn(void *ctx, const struct chime__timer *t);

/*
 * The logic's side, given to open(). Every function takes the logic's locks itself and may be called
 * from any backend thread, but never from inside a backend call made by the logic (see THREADS).
 */
struct chime__sink {
    void *ctx;
    /* A pending timer this process should now fire, arriving other than through this process's own
     * put or load(): a shard taken over from a dead node, a put made by another node for a shard this
     * node owns. The backend calls it for every such timer due before `loaded`. The logic arms it
     * unless it holds a newer version of the key (or a running handler of the same version). Only
     * PostgreSQL uses it; the journal never does. */
    void (*arm)(void *ctx, const struct chime__timer *t);
    /* Fences may have become invalid (a lease was lost): the logic calls fence_valid() for each timer
     * it holds and drops those not running whose fence is no longer valid. */
    void (*revoke)(void *ctx);
    /* The backend failed for good (D5), with err as D5 lists. Called once, from any thread. */
    void (*failed)(void *ctx, int err);
};

/* A put as the logic asks for it (a user's put, or a retry). */
struct chime__put {
    const void *key;
    size_t key_len;
    const void *payload;
    size_t payload_len;
    uint64_t due_ns;
    uint32_t attempt;        /* firings already made: 0 for a user's put, n for a retry after firing n */
    uint64_t if_version;     /* 0: replace whatever is pending for the key. Otherwise (a retry): only
                                if the key's pending timer is this version, else -ESTALE and nothing
                                is written */
    uint64_t if_fence;       /* with if_version: the fence of the firing that asks for the retry; a
                                backend that fences (PostgreSQL) refuses a retry whose fence is no
                                longer valid (-ESTALE), as it refuses its ack */
};

struct chime__put_result {
    struct chime__ref ref;      /* the new timer. Version 0 for a user's put (if_version 0) means the
                                   backend cannot tell its version before the put is committed
                                   (PostgreSQL): the logic then keeps no entry for it, and the backend
                                   hands it over through sink->arm once it is recorded, if this process
                                   owns it and it is due before `loaded` (counting a load that has
                                   begun) */
    struct chime__ref replaced; /* the pending timer it replaced, version 0 if none */
    int owned;                  /* 1 if this process fires the new timer, so the logic arms it when it
                                   is due before `loaded`; 0 if another node owns its key (PostgreSQL) */
};

/* One timer of a fire() batch. */
struct chime__firing {
    const void *key;
    size_t key_len;
    uint64_t due_ns;
    struct chime__ref ref;
    uint32_t attempt;        /* the number of this firing (recorded attempt + 1) */
    int status;              /* out: 0 = recorded, start the handler; -ESTALE = the timer is no longer
                                this process's to fire (cancelled or replaced by another node, or its
                                fence is stale): drop it without running the handler */
};

/* A key's dead letter as dead_read found it, ahead of its requeue. */
struct chime__dead {
    uint64_t version;        /* 0: the key had none */
    void *payload;           /* a copy (malloc'ed: the caller frees it), NULL if none */
    size_t payload_len;
};

struct chime__backend_stats {
    uint64_t pending;        /* pending timers, everywhere */
    uint64_t dead;           /* dead letters */
    uint64_t bytes;          /* bytes held on disk (0 if not known) */
};

#define CHIME__FIRE_BATCH_MAX 4096 /* the dispatcher's arrays (fire.c) */

struct chime__backend_ops {
    const char *name;
    /* Firings handed to fire() in one call at most (1 to CHIME__FIRE_BATCH_MAX; 0: the maximum).
     * One commit serves them all: the journal's is a group commit, cheap to widen; a PostgreSQL
     * statement locks every row it fires until it commits. */
    unsigned fire_batch;

    /*
     * Open the backend for cfg (cfg->path for the journal) and recover (D6). Loads nothing (the
     * logic calls load() next) and calls nothing of the sink before it returns. Refuses a second
     * opener (-EBUSY) before starting any thread. cfg and sink outlive the backend.
     * Return: 0; -EBUSY (another process holds it), -EBADMSG (damaged), -ENOMEM, -EIO, ...
     */
    int (*open)(struct chime__backend **out, const struct chime_store_config *cfg,
                const struct chime__sink *sink);

    /*
     * Hold a user's call back (put, cancel, requeue, dead-letter drop) while the backend is too far
     * behind to take more records (the journal: its flusher, compact.c, THROTTLE). The logic calls
     * it before it locks anything: a wait under a key's stripe lock held up every firing that
     * needed the stripe, and with callbacks on the advancing thread every timer (found in review).
     * NULL: never waits. Return: 0, or the sticky error (D5).
     */
    int (*admit)(struct chime__backend *b);

    /*
     * Record a put (D1). Replaces the key's pending timer if there is one (reported in
     * res->replaced), even one whose firing is recorded (its handler runs on; its ack and retry then
     * change nothing), unless if_version says otherwise.
     * Return: 0 and *ticket; -ESTALE (if_version did not match); -EIO, -ENOSPC (D5); -ENOMEM.
     */
    int (*put)(struct chime__backend *b, const struct chime__put *p, struct chime__put_result *res,
               uint64_t *ticket);

    /*
     * Record that key's pending timer is cancelled (D1). *victim receives the cancelled timer's ref.
     * `firing` is the version whose firing the logic has begun (taken for fire() and not finished),
     * or 0: if that is the pending version, it is not cancelled.
     * Return: 0 and *ticket; -ENOENT if none is pending; -EINPROGRESS if the pending version is
     *         `firing`, or its firing is recorded (fire) and it has not been acknowledged, retried or
     *         buried since: its handler is running or about to (here, or on another node), and it is
     *         not cancelled; -EIO, -ENOSPC; -ENOMEM.
     */
    int (*cancel)(struct chime__backend *b, const void *key, size_t key_len, uint64_t firing,
                  struct chime__ref *victim, uint64_t *ticket);

    /* Wait until the change that returned ticket is durable (D1); 0 is a ticket with nothing to wait
     * for. Return: 0; -EIO, -ENOSPC. */
    int (*wait)(struct chime__backend *b, uint64_t ticket);

    /*
     * Record the firings of n timers (D2), each only if it is still this process's to fire (its
     * version is pending and its fence valid); f[i].status says which. One group commit for all.
     * A firing recorded (status 0) is then settled exactly once by the logic: by its outcome (ack
     * or bury with t->fired set, or a retry: put with if_version), or by abandon if its handler
     * will not run (the PostgreSQL backend counts them: a drain waits for its shard's).
     * Return: 0 (see the statuses); -EIO, -ENOSPC (no handler may start).
     */
    int (*fire)(struct chime__backend *b, struct chime__firing *f, size_t n);

    /*
     * The handler of t->ref returned 0: remove the timer for good (D3), if it is still the key's
     * pending version (a put made while it ran has replaced it: then nothing is written, and 0) and
     * the fence is still valid (else -ESTALE: the node that owns it now fires it again). t carries
     * the key and the due time the timer was put with.
     * `current` is 1 when the logic knows the key's pending version is still t->ref: it recorded no
     * put, cancel or requeue of the key since it took t's firing. A backend that is this process's
     * alone (the journal) may then skip checking it; one shared by several processes must not.
     * Return: 0; -ESTALE; -EIO, -ENOSPC; -ENOMEM (the journal's log could not take the record:
     * nothing recorded; the logic then fails the store, since the timer stays pending on disk).
     */
    int (*ack)(struct chime__backend *b, const struct chime__timer *t, int current);

    /*
     * Send t->ref to the dead letters (D3), replacing the key's dead letter if any, under the same
     * conditions as ack (a replaced version is not buried: 0, nothing written). t carries the key,
     * payload, due time and attempt count to keep.
     * Return: 0; -ESTALE; -EIO, -ENOSPC; -ENOMEM.
     */
    int (*bury)(struct chime__backend *b, const struct chime__timer *t);

    /*
     * Hand over, through fn, every pending timer this process owns with from <= due_ns < until, each
     * once, in no particular order, with no lock held that put or cancel need (fn takes the logic's
     * locks). A timer put, replaced or cancelled while load runs may be handed over in either state;
     * the logic reconciles what changed during the load. Timers whose recorded attempt has reached the
     * logic's limit are handed over too (the logic buries them). Afterwards `loaded` is until.
     * Return: 0; what fn returned; -EIO (the store fails), -ENOMEM.
     */
    int (*load)(struct chime__backend *b, uint64_t from, uint64_t until, chime__timer_fn *fn,
                void *ctx);

    /*
     * Hand over every dead letter through fn, in the order they died (a snapshot).
     * Return: 0; what fn returned; -EIO, -ENOSPC, -ENOMEM.
     */
    int (*dead_list)(struct chime__backend *b, chime__timer_fn *fn, void *ctx);

    /*
     * Optional (NULL: dead_requeue reads the dead letter itself). Read key's dead letter for a
     * requeue, before the logic locks the key: a read that may take long (the journal's: a look
     * in each run's index, and a flush of its log into a run if the dead letter is still there)
     * then holds up no other key of the logic's stripe. *out receives its version (0: none) and a
     * copy of its payload. The key's calls are not serialised with this one, and what it returns
     * may be stale by then (the journal's may even be a dead letter that a newer run, or the log,
     * has dropped): dead_requeue checks that the key's dead letter is still this one.
     * Return: 0; -EIO, -ENOSPC; -ENOMEM; -EBADMSG (the backend is damaged).
     */
    int (*dead_read)(struct chime__backend *b, const void *key, size_t key_len,
                     struct chime__dead *out);

    /*
     * Make key's dead letter a pending timer again, due at due_ns, with its payload and attempt 0,
     * replacing the key's pending timer if any (D1, as put). fn is called once, before this returns,
     * with the new timer (its payload is the dead letter's), so that the logic can arm it; *res is
     * filled before fn is called (the logic reads res->owned there). `seen` is what dead_read
     * returned, or NULL if the backend has none: if the key's dead letter is no longer seen's,
     * nothing is written and -EAGAIN returned (the logic reads it again).
     * Return: 0 and *ticket; -ENOENT if the key has no dead letter; -EAGAIN; -EIO, -ENOSPC;
     * -ENOMEM.
     */
    int (*dead_requeue)(struct chime__backend *b, const void *key, size_t key_len, uint64_t due_ns,
                        const struct chime__dead *seen, struct chime__put_result *res,
                        chime__timer_fn *fn, void *ctx, uint64_t *ticket);

    /*
     * Delete key's dead letter for good (D1).
     * Return: 0 and *ticket; -ENOENT if it has none; -EIO, -ENOSPC, -ENOMEM.
     */
    int (*dead_drop)(struct chime__backend *b, const void *key, size_t key_len, uint64_t *ticket);

    /* Wait until everything recorded before the call is durable. Return: 0; -EIO, -ENOSPC. */
    int (*sync)(struct chime__backend *b);

    /* Optional (NULL: nothing to do). A firing fire() recorded whose handler has not begun and will
     * not run (the store closes, the fence lapsed or its shard drains, the store failed): settled
     * without an outcome, it stays pending, and a restart or the shard's next owner fires it
     * again. t is the firing: its key, t->ref (the version and fence it was recorded under) and
     * t->attempt (the attempt it recorded); t->fired is set. */
    void (*abandon)(struct chime__backend *b, const struct chime__timer *t);

    /* Whether a fence handed over earlier is still valid. NULL means always (the journal). The logic
     * asks before a handler starts, too: a handler whose fence has lapsed (the process was paused
     * past its lease) does not start (the shard's new owner fires the timer again). */
    int (*fence_valid)(struct chime__backend *b, uint64_t fence);

    /* Counters (a snapshot). */
    void (*stats)(struct chime__backend *b, struct chime__backend_stats *out);

    /*
     * Close has begun: a read that waits for something outside the process to come back (a lost
     * server) gives up rather than hold close; a load then ends as if the store stopped, a
     * dead-letter listing returns -ESHUTDOWN. Writes still wait: what was reported durable must be.
     * NULL: nothing waits so (the journal). The logic calls it once, before it stops its threads.
     */
    void (*closing)(struct chime__backend *b);

    /*
     * Make everything durable and free the backend. The logic calls it once, after its own threads
     * have stopped calling. Return: 0, or the error that made the backend fail (it is freed anyway).
     */
    int (*close)(struct chime__backend *b);
};

/* The embedded journal (journal.c). */
extern const struct chime__backend_ops chime__journal_ops;

/* PostgreSQL (pg/backend.c; without libpq, pg/none.c, whose open returns -ENOTSUP). */
extern const struct chime__backend_ops chime__pg_ops;

/* The backend cfg asks for (backend.c): PostgreSQL when cfg->postgres is set, else the journal. */
const struct chime__backend_ops *chime__backend_for(const struct chime_store_config *cfg);

#endif /* CHIME_STORE_BACKEND_H */
