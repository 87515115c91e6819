/* SPDX-License-Identifier: MIT */
/* The runtime's worker pool: see workers.h. */
#include "runtime/workers.h"

#include <errno.h>

#include "alloc.h"

#define TAKE_MAX 32   /* items a worker takes per wake-up */
#define RING_MIN 1024 /* the ring's size at start, and what an idle pool shrinks it back to */

/*
 * Give back the room a backlog made (submit only grows the ring): called by a worker that found the
 * pool idle, with the lock held, and returns with it held. Memory back after a burst (README; found
 * in review: 200 000 callbacks handed to a busy worker kept 8 MiB for good). The allocator's work is
 * done without the lock, which the advancing thread takes to hand callbacks out; the swap is made
 * only if the ring is still empty then (out of memory, or items came: the big ring stays).
 */
static void shrink_idle(struct chime__workers *wk)
{
    if (wk->cap <= RING_MIN)
        return;
    pthread_mutex_unlock(&wk->lock);
    struct chime__item *ring = chime__alloc(RING_MIN * sizeof(*ring)), *old = ring;
    size_t old_cap = RING_MIN;
    pthread_mutex_lock(&wk->lock);
    if (ring && !wk->count && wk->cap > RING_MIN) {
        old = wk->ring;
        old_cap = wk->cap;
        wk->ring = ring;
        wk->cap = RING_MIN;
        wk->head = 0;
    }
    pthread_mutex_unlock(&wk->lock);
    chime__free(old, old_cap * sizeof(*old)); /* the old ring, or the new one if unused */
    pthread_mutex_lock(&wk->lock);
}

static void *worker_main(void *p)
{
    struct chime__workers *wk = p;
    struct chime__item local[TAKE_MAX];
    pthread_mutex_lock(&wk->lock);
    for (;;) {
        while (!wk->count && !wk->stop)
            pthread_cond_wait(&wk->work, &wk->lock);
        if (wk->drop || !wk->count)
            break; /* stop: dropping, or nothing left */
        /* A fair share, so one worker does not take a whole storm while the others idle. */
        size_t n = (wk->count + wk->n - 1) / wk->n;
        if (n > TAKE_MAX)
            n = TAKE_MAX;
        for (size_t i = 0; i < n; i++) {
            local[i] = wk->ring[wk->head];
            wk->head = (wk->head + 1) % wk->cap;
        }
        wk->count -= n;
        wk->busy++;
        pthread_mutex_unlock(&wk->lock);
        for (size_t i = 0; i < n; i++)
            wk->run(wk->ctx, &local[i]);
        pthread_mutex_lock(&wk->lock);
        wk->busy--;
        if (!wk->count && !wk->busy) {
            shrink_idle(wk);
            pthread_mutex_unlock(&wk->lock);
            wk->idle(wk->ctx);
            pthread_mutex_lock(&wk->lock);
        }
    }
    pthread_mutex_unlock(&wk->lock);
    return NULL;
}

static void destroy(struct chime__workers *wk)
{
    chime__free(wk->ring, wk->cap * sizeof(*wk->ring));
    chime__free(wk->threads, wk->n * sizeof(*wk->threads));
    pthread_cond_destroy(&wk->work);
    pthread_mutex_destroy(&wk->lock);
}

int chime__workers_start(struct chime__workers *wk, unsigned n, chime__run_fn *run,
                         chime__idle_fn *idle, void *ctx)
{
    *wk = (struct chime__workers){ .n = n, .run = run, .idle = idle, .ctx = ctx,
                                  .cap = RING_MIN };
    if (pthread_mutex_init(&wk->lock, NULL))
        return -ENOMEM;
    if (pthread_cond_init(&wk->work, NULL)) {
        pthread_mutex_destroy(&wk->lock);
        return -ENOMEM;
    }
    wk->ring = chime__alloc(wk->cap * sizeof(*wk->ring));
    wk->threads = chime__alloc(n * sizeof(*wk->threads));
    if (!wk->ring || !wk->threads) {
        destroy(wk);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&wk->threads[i], NULL, worker_main, wk)) {
            /* Stop and join the ones that started. wk->n stays n (the workers read it, and destroy()
             * frees threads[] by it); nothing is queued, so none of them runs anything. */
            pthread_mutex_lock(&wk->lock);
            wk->stop = wk->drop = true;
            pthread_cond_broadcast(&wk->work);
            pthread_mutex_unlock(&wk->lock);
            for (unsigned j = 0; j < i; j++)
                pthread_join(wk->threads[j], NULL);
            destroy(wk);
            return -EAGAIN;
        }
    }
    return 0;
}

int chime__workers_submit(struct chime__workers *wk, const struct chime__item *items, size_t n)
{
    pthread_mutex_lock(&wk->lock);
    if (wk->count + n > wk->cap) {
        size_t cap = wk->cap;
        while (cap < wk->count + n)
            cap *= 2;
        struct chime__item *ring = chime__alloc(cap * sizeof(*ring));
        if (!ring) {
            pthread_mutex_unlock(&wk->lock);
            return -ENOMEM;
        }
        for (size_t i = 0; i < wk->count; i++)
            ring[i] = wk->ring[(wk->head + i) % wk->cap];
        chime__free(wk->ring, wk->cap * sizeof(*wk->ring));
        wk->ring = ring;
        wk->cap = cap;
        wk->head = 0;
    }
    for (size_t i = 0; i < n; i++)
        wk->ring[(wk->head + wk->count + i) % wk->cap] = items[i];
    wk->count += n;
    if (n > 1)
        pthread_cond_broadcast(&wk->work);
    else
        pthread_cond_signal(&wk->work);
    pthread_mutex_unlock(&wk->lock);
    return 0;
}

bool chime__workers_idle(struct chime__workers *wk)
{
    pthread_mutex_lock(&wk->lock);
    bool idle = !wk->count && !wk->busy;
    pthread_mutex_unlock(&wk->lock);
    return idle;
}

void chime__workers_stop(struct chime__workers *wk, bool drop, chime__run_fn *leftover)
{
    pthread_mutex_lock(&wk->lock);
    wk->stop = true;
    wk->drop = drop;
    pthread_cond_broadcast(&wk->work);
    pthread_mutex_unlock(&wk->lock);
    for (unsigned i = 0; i < wk->n; i++)
        pthread_join(wk->threads[i], NULL);
    /* Every worker has exited: what is left is ours. */
    for (size_t i = 0; i < wk->count; i++)
        if (leftover)
            leftover(wk->ctx, &wk->ring[(wk->head + i) % wk->cap]);
    destroy(wk);
}
