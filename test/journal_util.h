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

#endif /* CHIME_TEST_JOURNAL_UTIL_H */
