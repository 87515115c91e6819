/* SPDX-License-Identifier: MIT */
/*
 * The runtime's worker pool: threads that run callbacks the advancing thread hands them, so that a
 * slow callback holds up only its worker, not the clock.
 *
 * A plain mutex-and-condition-variable queue of items. The advancing thread takes the lock once per
 * batch of fired timers (not per timer); workers take several items per wake-up. No producer of
 * timers ever touches this lock.
 *
 * Concurrency contract: chime__workers_submit, chime__workers_idle and chime__workers_stop are called
 * by the advancing thread only; the workers call back the function given to chime__workers_start.
 */
#ifndef CHIME_RUNTIME_WORKERS_H
#define CHIME_RUNTIME_WORKERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"

/* One callback to run: a one-shot timer's (idx UINT32_MAX: its record is given back already) or a
 * periodic timer's run (idx its record: the runner ends the run on it afterwards). */
struct chime__item {
    chime_fn *fn;
    void *arg;
    uint32_t idx;
    uint64_t deadline_ns; /* for lateness */
};

typedef void chime__run_fn(void *ctx, const struct chime__item *item);
/* Called by a worker when it finds the queue empty and every worker idle. */
typedef void chime__idle_fn(void *ctx);

struct chime__workers {
    pthread_mutex_t lock;
    pthread_cond_t work;       /* signalled when items arrive or on stop */
    struct chime__item *ring;  /* circular: count items from head */
    size_t cap, head, count;
    unsigned busy;             /* workers running items */
    bool stop;                 /* exit once the queue is empty... */
    bool drop;                 /* ...or at once, leaving the queue as it is */
    unsigned n;
    pthread_t *threads;
    chime__run_fn *run;
    chime__idle_fn *idle;
    void *ctx;
};

/* Start n (> 0) workers. Return: 0, -ENOMEM, or -EAGAIN (a thread could not be started). */
int chime__workers_start(struct chime__workers *wk, unsigned n, chime__run_fn *run,
                         chime__idle_fn *idle, void *ctx);
/* Queue n items. Return: 0, or -ENOMEM (nothing was queued). */
int chime__workers_submit(struct chime__workers *wk, const struct chime__item *items, size_t n);
/* True if nothing is queued and no worker is running an item. */
bool chime__workers_idle(struct chime__workers *wk);
/*
 * Stop and join the workers: after running everything queued, or (drop) after the items running now,
 * calling leftover(ctx, item) for each item never run. Then free the pool.
 */
void chime__workers_stop(struct chime__workers *wk, bool drop, chime__run_fn *leftover);

#endif /* CHIME_RUNTIME_WORKERS_H */
