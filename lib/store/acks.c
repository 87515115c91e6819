/* SPDX-License-Identifier: MIT */
/*
 * Acknowledgements in groups (store.h, "acks.c").
 *
 * WHY. Recording a handler's 0 (fire.c, chime__store_finish) costs a few cache misses once many
 * timers are loaded: the key's bytes, which the backend hashes; the entry's neighbours in its
 * stripe's chain, which the unlink writes; the backend's index. Recorded one handler at a time,
 * each waits for the one before: at 10^6 timers due at once, about half of the time of the thread
 * that runs the handlers. In a group, the lines of every entry are fetched first and the entries
 * recorded after, so that their misses overlap (docs/perf.md, "Acknowledgements in groups").
 *
 * WHEN. Only in a burst: while more than ACK_QUEUE_ABOVE firings are outstanding (`running`), an
 * acknowledgement joins the queue; otherwise the handler's thread records it at once, as a lone
 * timer gains nothing from waiting. The first entry since the queue was last taken schedules the
 * flush, a runtime timer due at once: it runs after the callbacks the runtime is firing now, and
 * records the whole queue, ACK_GROUP entries at a time. Retries and dead letters are never
 * queued (a retry's delay counts from the handler's return, which chime__store_finish reads).
 *
 * WHAT STAYS TRUE. A queued entry is RUNNING until recorded, as if its handler had not returned: a
 * cancel of its key gets -EINPROGRESS, a newer put of the key waits for it, and `running` counts
 * it (chime_store_stats: "its outcome being written"). chime_store_sync first waits until every
 * outcome counted before it is appended or queued (outcomes.c: an entry's is ended here, under
 * aqlock, once it is in the queue), then records the queue before it syncs; `alock`, held by
 * whoever records a taken queue, makes it also wait for a group that another thread took before
 * the call, so every acknowledgement whose handler returned before sync is written before sync's
 * commit. Close waits until `running` is 0, which the flush brings
 * about (the runtime runs until then). When the flush cannot be scheduled (no memory; a test hook
 * makes it so), the handler's thread records the queue itself. The flush's argument is `marker`,
 * an entry in no table, so that the runtime's on_unfired at close (lifecycle.c) passes it by.
 *
 * Locks: aqlock (the queue, held for a few instructions) is taken under nothing else, and only
 * outcomes.c's `lock` is taken under it (an outcome's end, while a sync waits); alock comes before
 * the stripe locks that recording takes.
 */
#include <errno.h>
#include <stdlib.h>

#include "store/lock.h"
#include "store/store.h"

#define ACK_QUEUE_ABOVE 64 /* firings outstanding beyond which acknowledgements are queued */
#define ACK_GROUP 32       /* entries whose lines are fetched before any of them is recorded */

static _Atomic int refuse_flush; /* chime__store_acks_refuse_flush */

void chime__store_acks_refuse_flush(int on)
{
    atomic_store_explicit(&refuse_flush, on, memory_order_relaxed); /* a test's switch */
}

int chime__store_acks_init(struct chime_store *s)
{
    s->acks.marker = calloc(1, sizeof *s->acks.marker);
    if (!s->acks.marker)
        return -ENOMEM;
    s->acks.marker->s = s;
    chime__short_lock_init(&s->acks.aqlock);
    pthread_mutex_init(&s->acks.alock, NULL);
    return 0;
}

void chime__store_acks_destroy(struct chime_store *s)
{
    if (!s->acks.marker)
        return; /* never initialised */
    free(s->acks.marker);
    pthread_mutex_destroy(&s->acks.aqlock);
    pthread_mutex_destroy(&s->acks.alock);
}

/* Take the whole queue (NULL if empty): an entry queued after this schedules a flush of its own. */
static struct hot *take(struct chime_store *s)
{
    pthread_mutex_lock(&s->acks.aqlock);
    struct hot *list = s->acks.head;
    s->acks.head = s->acks.tail = NULL;
    s->acks.armed = 0;
    pthread_mutex_unlock(&s->acks.aqlock);
    return list;
}

/* Record the acknowledgements of a taken list, a group at a time: fetch every entry's lines, then
 * record them. The neighbours in the stripe's chain, which the unlink writes, are read under the
 * stripe's lock (a put or cancel of another key may be unlinking one of them). */
static void record(struct chime_store *s, struct hot *list)
{
    while (list) {
        struct hot *group[ACK_GROUP];
        int n = 0;
        for (; list && n < ACK_GROUP; list = list->qnext) {
            group[n++] = list;
            __builtin_prefetch(list->data); /* the key, which the backend hashes */
        }
        for (int i = 0; i < n; i++) {
            struct hot *e = group[i];
            struct hot_stripe *st = chime__store_stripe(s, e->hash);
            pthread_mutex_lock(&st->lock);
            if (e->next)
                __builtin_prefetch(e->next, 1);
            if (e->pprev)
                __builtin_prefetch(e->pprev, 1);
            pthread_mutex_unlock(&st->lock);
        }
        for (int i = 0; i < n; i++)
            /* frees it: qnext was read above */
            chime__store_finish(s, group[i], 0, CHIME__OUTCOME_ENDED);
    }
}

void chime__store_acks_flush(struct chime_store *s)
{
    pthread_mutex_lock(&s->acks.alock);
    record(s, take(s));
    pthread_mutex_unlock(&s->acks.alock);
}

/* The flush timer's callback, on the runtime. (A sync may have taken the queue first: then it
 * finds what was queued since, or nothing.) */
static void flush(void *arg)
{
    chime__store_acks_flush(((struct hot *)arg)->s);
}

int chime__store_ack_later(struct chime_store *s, struct hot *e, unsigned parity)
{
    /* relaxed: a hint; either answer is correct, the queue only costs a round trip when idle */
    if (atomic_load_explicit(&s->running, memory_order_relaxed) <= ACK_QUEUE_ABOVE)
        return 0;
    e->qnext = NULL;
    pthread_mutex_lock(&s->acks.aqlock);
    if (s->acks.tail)
        s->acks.tail->qnext = e;
    else
        s->acks.head = e;
    s->acks.tail = e;
    int arm = !s->acks.armed;
    s->acks.armed = 1;
    /* Queued: a sync records it from here on. Ended under aqlock, before a flush can take and
     * record e, and let close go (outcomes.c). */
    chime__store_outcome_end(s, parity);
    pthread_mutex_unlock(&s->acks.aqlock);
    /* relaxed: a test's switch, set before the store opens */
    if (arm && (atomic_load_explicit(&refuse_flush, memory_order_relaxed) ||
                chime_timer_schedule_at(s->rt, 0, flush, s->acks.marker, NULL) != 0))
        chime__store_acks_flush(s); /* no memory for the timer: record the queue here */
    return 1;
}
