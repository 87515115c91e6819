/* SPDX-License-Identifier: MIT */
/*
 * What a backend's thread drops while the store closes. Close stops the runtime and gives the
 * dispatcher's queue up before it closes the backend, whose threads (PostgreSQL's loader, its
 * lease keeper) may call the sink until then: a revoke or an arm that replaces a key drops
 * entries then. Found by CI's valgrind in test_pg_lease: such a drop marked an ARMED entry
 * `detached` for a runtime callback that would never come (cancel said -ESHUTDOWN), and a QUEUED
 * one for a queue already walked; both were lost. The backend here is the journal with a fence
 * that close makes invalid, revoking from inside ops->close, where those threads' last calls land.
 * The QUEUED entries' loss shows under ASan and valgrind, which run this program in CI; the
 * ARMED ones' cause shows everywhere (an entry the stopped runtime did not fire still has a rid).
 * A plain TAP program (tap.h).
 */
#include "store_api.h" /* first: store_util.h asks for _GNU_SOURCE */

#include <sched.h>

#include "store/backend.h"
#include "store/journal.h"
#include "store/store.h"

static struct chime__backend_ops sealing_ops;
static const struct chime__sink *the_sink;
static _Atomic int fences_lapsed;
static size_t armed_seen, queued_seen, armed_with_rid, left_after_revoke;

static int sealing_open(struct chime__backend **out, const struct chime_store_config *cfg,
                        const struct chime__sink *sink)
{
    the_sink = sink;
    return chime__journal_ops.open(out, cfg, sink);
}

/* A fresh store on the journal, with these operations in place of its own. */
static chime_store *open_sealing(struct chime_store_config *cfg,
                                 int (*fence_valid)(struct chime__backend *, uint64_t),
                                 void (*closing)(struct chime__backend *),
                                 int (*close)(struct chime__backend *))
{
    fresh();
    sealing_ops = chime__journal_ops;
    sealing_ops.open = sealing_open;
    sealing_ops.fence_valid = fence_valid;
    if (closing)
        sealing_ops.closing = closing;
    sealing_ops.close = close;
    return open_store_on(&sealing_ops, cfg);
}

static int sealing_fence_valid(struct chime__backend *b, uint64_t fence)
{
    (void)b;
    (void)fence;
    return !atomic_load(&fences_lapsed);
}

/* Entries in the table, by state; with_rid: the ARMED ones that still have a runtime timer. */
static void count_entries(struct chime_store *s, size_t *armed, size_t *queued, size_t *with_rid)
{
    for (int i = 0; i < HOT_STRIPES; i++) {
        struct hot_stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        for (size_t b = 0; b < st->nbuckets; b++)
            for (struct hot *e = st->buckets[b]; e; e = e->next) {
                *armed += e->state == HOT_ARMED;
                *queued += e->state == HOT_QUEUED;
                *with_rid += e->state == HOT_ARMED && e->rid != 0;
            }
        pthread_mutex_unlock(&st->lock);
    }
}

/* The runtime and the dispatcher have stopped: every lease lapses now. */
static int sealing_close(struct chime__backend *b)
{
    struct chime_store *s = the_sink->ctx;
    count_entries(s, &armed_seen, &queued_seen, &armed_with_rid);
    atomic_store(&fences_lapsed, 1);
    the_sink->revoke(the_sink->ctx);
    size_t armed = 0, queued = 0, with_rid = 0;
    count_entries(s, &armed, &queued, &with_rid);
    left_after_revoke = armed + queued;
    return chime__journal_ops.close(b);
}

#define DUE_NOW 20 /* at 1 handler a second, most wait in the queue for the test's whole run */

static void what_a_backend_drops_during_close_is_freed(void)
{
    atomic_store(&fences_lapsed, 0);
    struct chime_store_config cfg = { .max_fires_per_s = 1 };
    chime_store *s = open_sealing(&cfg, sealing_fence_valid, NULL, sealing_close);
    uint64_t now = wall_ns();
    char key[16];
    for (int i = 0; i < DUE_NOW; i++) {
        snprintf(key, sizeof key, "now%d", i);
        CHECK_EQ(put(s, key, "x", now), 0);
    }
    for (int i = 0; i < 3; i++) { /* within the horizon (an hour), not due during the test */
        snprintf(key, sizeof key, "later%d", i);
        CHECK_EQ(put(s, key, "x", now + 600 * SEC), 0);
    }
    recorder_wait(&rec, 1);
    size_t armed, queued, with_rid;
    do { /* until every timer due now has left ARMED (found in CI under TSan: 5 had not yet) */
        sched_yield();
        armed = queued = with_rid = 0;
        count_entries(s, &armed, &queued, &with_rid);
    } while (armed != 3 || queued == 0); /* the queued wait for the rate limit's tokens */
    CHECK_EQ(chime_store_close(s), 0);
    printf("# at close: %zu armed (%zu with a runtime timer), %zu queued; %zu not running left "
           "after the revoke\n", armed_seen, armed_with_rid, queued_seen, left_after_revoke);
    CHECK_EQ(armed_seen, 3);
    CHECK(queued_seen >= 1, "no entry was queued when the backend closed");
    CHECK_EQ(armed_with_rid, 0); /* the stopped runtime will call nothing back: no rid to wait on */
    CHECK_EQ(left_after_revoke, 0);
}


/* A backend thread revoking over and over while close runs (from ops->closing to ops->close): its
 * drops race the runtime's stop (unfired), the seal and the sweep. Everything dropped must be freed
 * once (ASan, valgrind) and nothing raced (TSan). */
static _Atomic int storm_on, storm_stop;
static _Atomic unsigned long storm_calls, storm_passes;
static pthread_t storm_thread;

static int storm_fence_valid(struct chime__backend *b, uint64_t fence)
{
    (void)b;
    (void)fence;
    return !atomic_load(&storm_on) || atomic_fetch_add(&storm_calls, 1) % 997 != 0;
}

static void *storm_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&storm_stop)) {
        the_sink->revoke(the_sink->ctx);
        atomic_fetch_add(&storm_passes, 1);
    }
    return NULL;
}

static void storm_closing(struct chime__backend *b)
{
    (void)b;
    atomic_store(&storm_on, 1);
    atomic_store(&storm_stop, 0);
    pthread_create(&storm_thread, NULL, storm_main, NULL);
}

static int storm_close(struct chime__backend *b)
{
    atomic_store(&storm_stop, 1);
    pthread_join(storm_thread, NULL);
    struct chime_store *s = the_sink->ctx;
    size_t armed = 0, queued = 0, with_rid = 0;
    count_entries(s, &armed, &queued, &with_rid);
    printf("# %lu revoke passes during close; %zu armed left (%zu with a rid)\n",
           (unsigned long)atomic_load(&storm_passes), armed, with_rid);
    return chime__journal_ops.close(b);
}

static void revokes_during_the_whole_close_free_each_entry_once(void)
{
    atomic_store(&storm_on, 0);
    struct chime_store_config cfg = { .sync = CHIME_SYNC_INTERVAL };
    chime_store *s = open_sealing(&cfg, storm_fence_valid, storm_closing, storm_close);
    uint64_t now = wall_ns();
    char key[16];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        CHECK_EQ(put(s, key, "x", now + 600 * SEC + (uint64_t)i), 0);
    }
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "what_a_backend_drops_during_close_is_freed", what_a_backend_drops_during_close_is_freed },
    { "revokes_during_the_whole_close_free_each_entry_once",
      revokes_during_the_whole_close_free_each_entry_once },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
