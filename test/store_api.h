/* SPDX-License-Identifier: MIT */
/*
 * What the durable store's API tests share (test_store.c, test_store_life.c): a fresh directory and
 * recorder per test, opening a store on it, and put/cancel with string keys.
 */
#ifndef CHIME_TEST_STORE_API_H
#define CHIME_TEST_STORE_API_H

#include "store_util.h"

static char *dir;
static struct recorder rec;

static inline void fresh(void)
{
    store_test_fresh(&dir, "store", &rec);
}

static inline chime_store *open_store(struct chime_store_config *cfg)
{
    struct chime_store_config c = { .path = dir };
    if (!cfg)
        cfg = &c;
    cfg->path = dir;
    chime_store *s = NULL;
    int err = chime_store_open(&s, cfg, recorder_handler, &rec);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return s;
}

static inline int put(chime_store *s, const char *key, const char *payload, uint64_t due)
{
    return chime_store_put(s, key, strlen(key), payload, strlen(payload), due);
}

static inline int cancel(chime_store *s, const char *key)
{
    return chime_store_cancel(s, key, strlen(key));
}

#endif /* CHIME_TEST_STORE_API_H */
