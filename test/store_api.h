/* SPDX-License-Identifier: MIT */
/*
 * What the durable store's API tests share (test_store.c, test_store_life.c): a fresh directory and
 * recorder per test, opening a store on it, put/cancel with string keys, and a handler that waits
 * at a gate so that a test can act while it runs.
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

/* open_store on the backend operations ops (a test's wrappers around a backend's), which only
 * this open uses. */
static inline chime_store *open_store_on(const struct chime__backend_ops *ops,
                                         struct chime_store_config *cfg)
{
    chime__store_set_backend(ops);
    chime_store *s = open_store(cfg);
    chime__store_set_backend(NULL);
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

/* A handler that blocks on a gate, so that a test can act while it runs. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int entered, open, concurrent, max_concurrent;
    int64_t outcome; /* what the handler returns once the gate opens (gate_reset: 0) */
};
static struct gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0 };

static inline int64_t gated(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    (void)f;
    pthread_mutex_lock(&gate.lock);
    gate.entered++;
    if (++gate.concurrent > gate.max_concurrent)
        gate.max_concurrent = gate.concurrent;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.open)
        pthread_cond_wait(&gate.cond, &gate.lock);
    gate.concurrent--;
    int64_t outcome = gate.outcome;
    pthread_mutex_unlock(&gate.lock);
    return outcome;
}

static inline void gate_reset(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.entered = gate.open = gate.concurrent = gate.max_concurrent = 0;
    gate.outcome = 0;
    pthread_mutex_unlock(&gate.lock);
}

static inline void gate_wait_entered(int n)
{
    pthread_mutex_lock(&gate.lock);
    while (gate.entered < n)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static inline void gate_open(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = 1;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

#endif /* CHIME_TEST_STORE_API_H */
