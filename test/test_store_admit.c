/* SPDX-License-Identifier: MIT */
/*
 * A put held back by the journal's throttle (lib/store/compact.c, THROTTLE: the flusher is behind)
 * holds no lock of the store's: timers keep firing meanwhile. The store locks a key's stripe for a
 * call on it, and so does every firing of a key in that stripe; the throttle's wait once ran under
 * that lock, and with callbacks on the advancing thread (no workers, the default) every timer
 * stopped until the flusher caught up (found in review). The logic now asks the backend first
 * (backend.h, admit), before it locks anything.
 *
 * The fault hook holds the flusher at its first flush; a thread puts 4 KB records until one is
 * held back. Before that, one timer was put in each of the store's stripes, due a second later by
 * the fake clock, which stands still: so whichever key the held put has, one of them shares its
 * stripe. The clock then steps past their due time, and every one must fire while the put is
 * still held. A hang here is the failure (the watchdog names it); the test waits on conditions.
 */
#include "journal_util.h"
#include "store_api.h"

#define PAYLOAD 4000

static int hold_flusher(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    flusher_gate(op, name);
    return 0;
}

static chime_store *store;
static _Atomic int putter_done;

static void *putter(void *arg)
{
    (void)arg;
    static char payload[PAYLOAD];
    memset(payload, 'p', sizeof payload);
    uint64_t far = fake_wall() + 3600 * SEC;
    for (int i = 0; i < 16000; i++) { /* 64 MB: far beyond what the throttle lets through */
        char key[16];
        snprintf(key, sizeof key, "b%d", i);
        CHECK_EQ(chime_store_put(store, key, strlen(key), payload, sizeof payload, far), 0);
    }
    atomic_store(&putter_done, 1);
    return NULL;
}

static void timers_fire_while_a_put_waits_for_the_flusher(void)
{
    fresh();
    uint64_t now = wall_ns();
    fake_freeze(NULL, now);
    chime__io_set_fault(hold_flusher, NULL);
    struct chime_store_config cfg = { .sync = CHIME_SYNC_INTERVAL };
    store = open_store(&cfg);
    /* One timer per stripe, due in a second. */
    bool covered[HOT_STRIPES] = { false };
    int timers = 0;
    for (int i = 0; timers < HOT_STRIPES; i++) {
        char key[16];
        int n = snprintf(key, sizeof key, "x%d", i);
        unsigned stripe = (unsigned)(chime__store_stripe(store, chime__store_hash(store, key,
                                                                                  (size_t)n)) -
                                     store->stripes);
        if (covered[stripe])
            continue;
        covered[stripe] = true;
        timers++;
        CHECK_EQ(put(store, key, "t", now + SEC), 0);
    }
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, putter, NULL), 0);
    flusher_gate_wait_throttled(store->b, &putter_done);
    fake_freeze(store, now + 2 * SEC); /* every timer is due */
    recorder_wait(&rec, (size_t)timers);
    CHECK(journal_throttled(store->b) > 0,
          "the put was let through before the timers fired: nothing shown");
    flusher_gate_release();
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(chime_store_close(store), 0);
    chime__io_set_fault(NULL, NULL);
    fake_freeze(NULL, 0);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "timers_fire_while_a_put_waits_for_the_flusher",
          timers_fire_while_a_put_waits_for_the_flusher },
    };
    chime__store_set_clock(fake_wall);
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, fake_wall);
}
