/* SPDX-License-Identifier: MIT */
/* The journal backend opened directly (lib/store/journal.c), for the tests of its files and its
 * flusher: with CHIME_SYNC_INTERVAL and an interval of an hour, so that each backend sync is
 * exactly one group commit of what was appended since the last. */
#ifndef CHIME_TEST_JOURNAL_UTIL_H
#define CHIME_TEST_JOURNAL_UTIL_H

#include "store_util.h"

#include "store/backend.h"
#include "store/journal.h"

static inline struct chime__backend *journal_open_hourly(const char *dir)
{
    static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };
    static struct chime_store_config cfg; /* the backend may keep a pointer to it */
    cfg = (struct chime_store_config){ .path = dir, .sync = CHIME_SYNC_INTERVAL,
                                       .sync_interval_ns = 3600 * SEC };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return b;
}

/* ---- the flusher held at its first run, and a put held back by the throttle behind it ---- */

/* The gate a fault hook holds the flusher at: when it opens its first run's .tmp file. */
static pthread_mutex_t flusher_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_gate_cond = PTHREAD_COND_INITIALIZER;
static int flusher_gate_open, flusher_gate_held;

/* For a fault hook (io.h): if op opens a run's .tmp file (the flusher writing a run), wait there
 * until flusher_gate_release. */
static inline void flusher_gate(enum chime__io_op op, const char *name)
{
    if (op != CHIME_IO_OPEN || !name || !strstr(name, ".tmp"))
        return;
    pthread_mutex_lock(&flusher_gate_lock);
    flusher_gate_held = 1;
    while (!flusher_gate_open)
        pthread_cond_wait(&flusher_gate_cond, &flusher_gate_lock);
    pthread_mutex_unlock(&flusher_gate_lock);
}

static inline void flusher_gate_release(void)
{
    pthread_mutex_lock(&flusher_gate_lock);
    flusher_gate_open = 1;
    pthread_cond_broadcast(&flusher_gate_cond);
    pthread_mutex_unlock(&flusher_gate_lock);
}

/* Callers of journal b held back by its throttle now (compact.c, THROTTLE). */
static inline uint64_t journal_throttled(struct chime__backend *b)
{
    pthread_mutex_lock(&b->lock);
    uint64_t n = b->throttled;
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* Wait until the flusher is held at the gate and a put into b is held back behind it (a poll: the
 * putters, the log's writer and the flusher run on their own). *putters_done: set once the puts
 * are over, when none was held back: a failure. */
static inline void flusher_gate_wait_throttled(struct chime__backend *b, _Atomic int *putters_done)
{
    for (;;) {
        pthread_mutex_lock(&flusher_gate_lock);
        int held = flusher_gate_held;
        pthread_mutex_unlock(&flusher_gate_lock);
        if (held && journal_throttled(b))
            return;
        CHECK(!atomic_load(putters_done), "every put went through: none was held back");
        sleep_ms(1);
    }
}

#endif /* CHIME_TEST_JOURNAL_UTIL_H */
