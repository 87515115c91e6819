/* SPDX-License-Identifier: MIT */
/*
 * The threaded runtime's life: create, stop, free, stats and now (include/chime.h), and the hooks the
 * tests use (runtime.h). The runtime's parts and who owns what: timer.h.
 */
#include "runtime/runtime.h"

#include <errno.h>

#include "alloc.h"
#include "runtime/timer.h"
#include "wheel/wheel.h"

int chime__timer_relative_test;

#define DEFAULT_TICK_NS UINT64_C(1000000)

/* cfg's tick (the default for 0) and the wheel's config it asks for. Return: 0; -EINVAL. */
static int config_of(const struct chime_timer_config *cfg, uint64_t *tick_ns,
                     struct chime_wheel_config *wc)
{
    struct chime_timer_config c = cfg ? *cfg : (struct chime_timer_config){ 0 };
    *tick_ns = c.tick_ns ? c.tick_ns : DEFAULT_TICK_NS;
    if (c.workers > CHIME_MAX_WORKERS || *tick_ns > CHIME_MAX_TICK_NS)
        return -EINVAL;
    *wc = (struct chime_wheel_config){ .levels = c.levels };
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        wc->slots[i] = c.slots[i];
    return chime__wheel_config(wc);
}

int chime__timer_config_check(const struct chime_timer_config *cfg)
{
    uint64_t tick_ns;
    struct chime_wheel_config wc;
    return config_of(cfg, &tick_ns, &wc);
}

int chime__timer_new_clocked(chime_timer **out, const struct chime_timer_config *cfg,
                             chime__clock_fn *clock, void *clock_arg)
{
    if (!out)
        return -EINVAL;
    struct chime_timer_config c = cfg ? *cfg : (struct chime_timer_config){ 0 };
    uint64_t tick_ns;
    struct chime_wheel_config wc;
    if (config_of(&c, &tick_ns, &wc) != 0)
        return -EINVAL;
    if (!clock)
        chime__clock_calibrate();

    chime_timer *t = chime__alloc_aligned(sizeof(*t), 64); /* zeroed: counters, flags */
    if (!t)
        return -ENOMEM;
    t->tick_ns = tick_ns;
    t->tick_inv = chime__div_inv(tick_ns);
    t->max_pending = c.max_pending;
    t->clock = clock ? clock : chime__clock_monotonic;
    t->clock_arg = clock_arg;
    t->real_clock = !clock;
    /* Without a TSC to trust, a clock read costs a schedule most of its time (producer.c). */
    t->relative = chime__timer_relative_test ? (uint8_t)chime__timer_relative_test
                                             : !clock && !chime__clock_tsc();
    chime__sleeper_init(&t->sleeper);
    atomic_init(&t->mode, CHIME__MODE_RUNNING);
    atomic_init(&t->sync_req, 0);
    atomic_init(&t->sync_done, 0);
    atomic_init(&t->idle_seq, 0);
    atomic_init(&t->limited, 0);
    atomic_init(&t->mem_records, 0);

    int err = chime__records_init(&t->recs);
    if (err)
        goto fail_records;
    chime__mpsc_init(&t->queue, chime__records_at(&t->recs, 0), sizeof(struct chime__rec),
                     CHIME__REC_LINK_AT);
    wc.start = chime__div(chime__timer_now(t), t->tick_ns, t->tick_inv);
    if (chime__levels_init(&t->L, &wc, chime__timer_fire, t) != 0) {
        err = -ENOMEM;
        goto fail_levels;
    }
    chime__records_attach(&t->recs, &t->L);
    if (pthread_mutex_init(&t->stop_lock, NULL)) {
        err = -ENOMEM;
        goto fail_lock;
    }
    if (c.workers) {
        err = chime__workers_start(&t->workers, c.workers, chime__timer_run_item,
                                   chime__timer_workers_idle, t);
        if (err)
            goto fail_workers;
        t->use_workers = true;
    }
    if (pthread_create(&t->thread, NULL, chime__timer_main, t)) {
        err = -ECHILD;
        goto fail_thread;
    }
    *out = t;
    return 0;

fail_thread:
    if (t->use_workers)
        chime__workers_stop(&t->workers, true, NULL);
fail_workers:
    pthread_mutex_destroy(&t->stop_lock);
fail_lock:
    chime__levels_destroy(&t->L);
fail_levels:
    chime__records_destroy(&t->recs);
fail_records:
    chime__free_aligned(t, sizeof(*t), 64);
    return err == -EAGAIN ? -ECHILD : err; /* workers_start: a thread could not start */
}

int chime_timer_new(chime_timer **out, const struct chime_timer_config *cfg)
{
    return chime__timer_new_clocked(out, cfg, NULL, NULL);
}

int chime_timer_stop(chime_timer *t, enum chime_stop how, chime_fn *on_unfired)
{
    if (!t || (how != CHIME_STOP_DRAIN && how != CHIME_STOP_NOW))
        return -EINVAL;
    if (chime__timer_owner == t)
        return -EDEADLK;
    if (pthread_mutex_trylock(&t->stop_lock))
        return -ESHUTDOWN; /* another stop is under way */
    /* relaxed: mode changes under stop_lock, which we hold. */
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != CHIME__MODE_RUNNING) {
        pthread_mutex_unlock(&t->stop_lock);
        return -ESHUTDOWN;
    }
    t->on_unfired = on_unfired;
    /* seq_cst: publishes on_unfired (release, read after the acquire load of mode in the thread's
     * loop) and is the waker's store in the sleep handshake before wake_before's load. */
    atomic_store_explicit(&t->mode, (int)how, memory_order_seq_cst);
    chime__timer_wake_before(t, 0);
    pthread_join(t->thread, NULL);
    /* release: pairs with the acquire loads of mode in cancel and reschedule. */
    atomic_store_explicit(&t->mode, CHIME__MODE_STOPPED, memory_order_release);
    pthread_mutex_unlock(&t->stop_lock);
    return 0;
}

void chime_timer_free(chime_timer *t)
{
    if (!t)
        return;
    /* relaxed: no other call runs (the contract), so no race on mode. */
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != CHIME__MODE_STOPPED)
        chime_timer_stop(t, CHIME_STOP_NOW, NULL);
    chime__levels_destroy(&t->L);
    chime__records_destroy(&t->recs);
    chime__free(t->batch, t->batch_cap * sizeof(*t->batch));
    pthread_mutex_destroy(&t->stop_lock);
    chime__free_aligned(t, sizeof(*t), 64);
}

void chime_timer_stats(const chime_timer *t, struct chime_stats *out)
{
    if (!t || !out)
        return;
    chime__stats_read(&((chime_timer *)t)->stats, out); /* atomics cannot be loaded through const */
}

uint64_t chime_timer_now(const chime_timer *t)
{
    return t ? chime__timer_now(t) : 0;
}

void chime__timer_sync(chime_timer *t)
{
    /* seq_cst: the waker's store in the sleep handshake (wake.h). */
    uint32_t target = atomic_fetch_add_explicit(&t->sync_req, 1, memory_order_seq_cst) + 1;
    chime__timer_wake_before(t, 0);
    for (;;) {
        /* acquire: pairs with the release store in publish_sync. */
        uint32_t done = atomic_load_explicit(&t->sync_done, memory_order_acquire);
        if ((int32_t)(done - target) >= 0)
            return;
        chime__futex_wait(&t->sync_done, done, UINT64_MAX);
    }
}

void chime__timer_poke(chime_timer *t)
{
    chime__timer_wake_before(t, 0);
}

size_t chime__timer_memory(const chime_timer *t)
{
    /* relaxed: a figure, exact after a sync (whose acquire orders it). */
    return atomic_load_explicit(&((chime_timer *)t)->mem_records, memory_order_relaxed);
}

const char *chime__timer_check(chime_timer *t)
{
    const char *err = chime__records_check(&t->recs);
    return err ? err : chime__levels_check(&t->L, chime__records_mapped(&t->recs));
}
