/* SPDX-License-Identifier: MIT */
/*
 * The keeper thread: the wall clock, and loading timers as they come within the horizon.
 *
 * LOADING. `loaded` (L) is the due time below which every timer this process fires is in the table.
 * The keeper keeps L between now + horizon and now + horizon + G (G = horizon / 8): when now +
 * horizon reaches L it asks the backend for the timers due in [L, L') and installs them. Puts decide
 * against the same boundary (chime__store_limit): due before it, loaded at once; after it, left to a
 * later load.
 *
 * A load takes time, and puts and cancels go on meanwhile. The protocol that keeps them exact:
 *   1. the keeper publishes loading_until = L' (seq_cst), then the backend reads (the journal first
 *      seals its log, so the read covers every record appended before that point);
 *   2. a put or cancel records its change in the backend first, then reads loading_until: if the
 *      load has begun, the change may be missing from the read, so the put counts L' as its boundary
 *      (due before L': loaded by the put itself), and every change notes the key as a tomb (a put
 *      loaded by itself too: it may fire, be acknowledged and leave the table before the load
 *      installs the older version it read, which would then fire again; found in review), under
 *      that load only: one begun since reads the change itself, and a tomb would hide it from it
 *      (found in review); if the load has not begun, the change is in the read;
 *   3. installing a timer the read returned (under the key's stripe lock) skips keys with a tomb and
 *      keys the table holds at that version or newer;
 *   4. the keeper publishes L = L', clears loading_until (release: a put that reads 0 then sees L')
 *      and drops the tombs.
 * The mutex on the log (the append and the seal both take it) orders each append before or after the
 * seal; an append after it happens-after the store of loading_until, so its put reads the new value.
 *
 * THE CLOCK. A timerfd on CLOCK_REALTIME with TFD_TIMER_CANCEL_ON_SET wakes the keeper whenever the
 * wall clock is set (stepped). It then re-arms every armed timer, and every handler waiting for
 * its due time, from the new wall time (a step forward makes what became due fire now; a step back
 * would only cost an early callback, which waits again itself) and loads what the step brought
 * within the horizon. The timerfd is made before open's first load, which arms what it reads from
 * the wall time of then: a step during that load is seen by the keeper's first wait (found in
 * review: made when the keeper started, after the first load, it missed such a step, and the
 * timers that load armed fired late or early by the step). Tests, whose clock is not the kernel's,
 * report steps with chime__store_clock_stepped, and their stores watch no timerfd.
 */
#define _GNU_SOURCE /* timerfd: a Linux interface beyond C11 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "store/deadline.h"
#include "store/store.h"

#define NS_PER_S UINT64_C(1000000000)

uint64_t chime__store_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t chime__store_limit(struct chime_store *s, uint64_t *loading)
{
    /* acquire: pairs with the keeper's release stores in end_load (see LOADING, 2 and 4) */
    uint64_t until = atomic_load_explicit(&s->loading_until, memory_order_seq_cst);
    uint64_t loaded = atomic_load_explicit(&s->loaded, memory_order_acquire);
    *loading = until;
    return until > loaded ? until : loaded;
}

/* Room for one more tomb: the table doubles once it holds as many tombs as chains, so a lookup
 * walks about one (a list walked for every timer a load installs cost O(tombs) each); as the hot
 * table's grow() in store.c, a failed doubling only leaves longer chains. load_lock held.
 * Return: 0; -ENOMEM if there is no table at all. */
static int tomb_room(struct chime_store *s)
{
    if (s->tomb_count < s->tomb_buckets)
        return 0;
    size_t n = s->tomb_buckets ? s->tomb_buckets * 2 : 64;
    struct tomb **b = calloc(n, sizeof *b);
    if (!b)
        return s->tomb_buckets ? 0 : -ENOMEM;
    for (size_t i = 0; i < s->tomb_buckets; i++)
        for (struct tomb *t = s->tombs[i], *next; t; t = next) {
            next = t->next;
            t->next = b[t->hash & (n - 1)];
            b[t->hash & (n - 1)] = t;
        }
    free(s->tombs);
    s->tombs = b;
    s->tomb_buckets = n;
    return 0;
}

void (*chime__store_tomb_hook)(void);

void chime__store_tomb(struct chime_store *s, uint64_t hash, const void *key, size_t key_len,
                       uint64_t seen)
{
    if (chime__store_tomb_hook)
        chime__store_tomb_hook();
    struct tomb *t = malloc(sizeof *t + key_len);
    pthread_mutex_lock(&s->load_lock);
    /* The load the caller saw, still running? One that began since then read the change itself
     * (step 1 comes after it): a tomb filed under it would hide the key's new version from it
     * (found in review: a put between two loads was not loaded until a restart). relaxed: under
     * load_lock, which load() holds to publish and to clear loading_until. */
    int loading = atomic_load_explicit(&s->loading_until, memory_order_relaxed) == seen && seen;
    if (!loading || !t || tomb_room(s) != 0) {
        pthread_mutex_unlock(&s->load_lock); /* no load runs any more: no tomb needed */
        free(t);
        if (loading)
            chime__store_fail(s, -ENOMEM); /* cannot keep the load exact: stop firing */
        return;
    }
    t->hash = hash;
    t->key_len = (uint16_t)key_len;
    memcpy(t->key, key, key_len);
    t->next = s->tombs[hash & (s->tomb_buckets - 1)];
    s->tombs[hash & (s->tomb_buckets - 1)] = t;
    s->tomb_count++;
    pthread_mutex_unlock(&s->load_lock);
}

int chime__store_tombstoned(struct chime_store *s, uint64_t hash, const void *key, size_t key_len)
{
    pthread_mutex_lock(&s->load_lock);
    int found = 0;
    for (struct tomb *t = s->tomb_buckets ? s->tombs[hash & (s->tomb_buckets - 1)] : NULL;
         t && !found; t = t->next)
        found = t->hash == hash && t->key_len == key_len && memcmp(t->key, key, key_len) == 0;
    pthread_mutex_unlock(&s->load_lock);
    return found;
}

static int install_loaded(void *ctx, const struct chime__timer *t)
{
    struct chime_store *s = ctx;
    uint64_t hash = chime__store_hash(s, t->key, t->key_len);
    struct hot_stripe *st = chime__store_stripe(s, hash);
    pthread_mutex_lock(&st->lock);
    chime__store_install(s, st, hash, t, 1);
    pthread_mutex_unlock(&st->lock);
    return 0;
}

/* Load the timers due in [from, until) (see LOADING). */
static int load(struct chime_store *s, uint64_t from, uint64_t until)
{
    pthread_mutex_lock(&s->load_lock);
    atomic_store_explicit(&s->loading_until, until, memory_order_seq_cst); /* step 1 */
    pthread_mutex_unlock(&s->load_lock);
    int err = s->ops->load(s->b, from, until, install_loaded, s);
    pthread_mutex_lock(&s->load_lock); /* step 4 */
    atomic_store_explicit(&s->loaded, until, memory_order_release);
    atomic_store_explicit(&s->loading_until, 0, memory_order_release);
    struct tomb **tombs = s->tombs;
    size_t buckets = s->tomb_buckets;
    s->tombs = NULL;
    s->tomb_buckets = s->tomb_count = 0;
    pthread_mutex_unlock(&s->load_lock);
    for (size_t i = 0; i < buckets; i++)
        for (struct tomb *t = tombs[i], *next; t; t = next) {
            next = t->next;
            free(t);
        }
    free(tombs);
    if (err)
        chime__store_fail(s, err);
    return err;
}

static uint64_t granule(const struct chime_store *s)
{
    return s->cfg.horizon_ns / 8;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

/* The next boundary: now + horizon + a granule, rounded down to a whole granule: so above now +
 * horizon, and at most a granule beyond it (rounded up, as it was, it reached two granules beyond
 * after every load, and a put due that far was held in memory: found in review). Saturated, it
 * stays UINT64_MAX (everything loaded). */
static uint64_t target(const struct chime_store *s, uint64_t now)
{
    uint64_t g = granule(s), t = add_sat(add_sat(now, s->cfg.horizon_ns), g);
    return t == UINT64_MAX ? t : t - t % g;
}

int chime__store_first_load(struct chime_store *s)
{
    return load(s, 0, target(s, s->wall()));
}

void chime__store_sweep(struct chime_store *s, int mode)
{
    for (int i = 0; i < HOT_STRIPES; i++) {
        struct hot_stripe *st = &s->stripes[i];
        struct hot *gone = NULL; /* handlers taken back, chained by qnext (a RUNNING one is queued
                                    nowhere), abandoned once the stripe is unlocked */
        pthread_mutex_lock(&st->lock);
        for (size_t b = 0; b < st->nbuckets; b++)
            for (struct hot *e = st->buckets[b]; e; e = e->next) {
                if (e->state == HOT_RUNNING) {
                    if (mode != CHIME__SWEEP_UNARMED && chime__store_reschedule_handler(s, e)) {
                        e->qnext = gone;
                        gone = e;
                    }
                    continue;
                }
                if (mode == CHIME__SWEEP_CLOSE || e->state != HOT_ARMED ||
                    (mode == CHIME__SWEEP_UNARMED && e->rid))
                    continue;
                if (e->rid == 0) {
                    atomic_fetch_sub_explicit(&s->unarmed, 1, memory_order_relaxed);
                    chime__store_arm(s, e);
                } else if (chime_timer_cancel(s->rt, e->rid) == 0) {
                    chime__store_arm(s, e); /* not fired yet: arm it from the new wall time */
                } /* else its callback has begun: it checks the wall clock itself */
            }
        pthread_mutex_unlock(&st->lock);
        while (gone) {
            struct hot *next = gone->qnext;
            chime__store_abandon(s, gone);
            gone = next;
        }
    }
}

static void watch_clock(struct chime_store *s)
{
    struct itimerspec far = { { 0, 0 }, { 0, 0 } };
    clock_gettime(CLOCK_REALTIME, &far.it_value);
    far.it_value.tv_sec += 100 * 365 * 24 * 3600L; /* never fires: it is there to be cancelled */
    if (timerfd_settime(s->clock_fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &far, NULL) != 0) {
        close(s->clock_fd); /* no step detection (an old kernel): loads still follow the clock */
        s->clock_fd = -1;
    }
}

static _Thread_local int on_keeper; /* this thread is a keeper: it never pokes itself */

static void *keeper_main(void *arg)
{
    struct chime_store *s = arg;
    on_keeper = 1;
    for (;;) {
        if (atomic_load_explicit(&s->keeper_stop, memory_order_acquire)) /* pairs with stop_keeper */
            break;
        if (atomic_exchange_explicit(&s->stepped, 0, memory_order_acq_rel))
            chime__store_sweep(s, CHIME__SWEEP_STEP);
        uint64_t now = s->wall(), loaded = atomic_load_explicit(&s->loaded, memory_order_relaxed);
        if (add_sat(now, s->cfg.horizon_ns) >= loaded && loaded != UINT64_MAX)
            load(s, loaded, target(s, now));
        if (atomic_load_explicit(&s->unarmed, memory_order_relaxed))
            chime__store_sweep(s, CHIME__SWEEP_UNARMED);

        pthread_mutex_lock(&s->load_lock);
        s->keeper_rounds++;
        pthread_cond_broadcast(&s->keeper_cond);
        pthread_mutex_unlock(&s->load_lock);

        /* Sleep until the next load is due (or a second, if something waits to be armed). With
         * everything loaded (a horizon past 2554 saturates `loaded`), none is ever due: until
         * woken (found in review: loaded - horizon had passed, and it woke every millisecond). */
        now = s->wall();
        loaded = atomic_load_explicit(&s->loaded, memory_order_relaxed);
        uint64_t next = loaded == UINT64_MAX        ? UINT64_MAX
                        : loaded > s->cfg.horizon_ns ? loaded - s->cfg.horizon_ns
                                                     : 0;
        uint64_t wait = next > now ? next - now : 0;
        if (atomic_load_explicit(&s->unarmed, memory_order_relaxed) && wait > NS_PER_S)
            wait = NS_PER_S;
        uint64_t ms = wait / 1000000 + 1;
        struct pollfd fds[2] = { { s->event_fd, POLLIN, 0 }, { s->clock_fd, POLLIN, 0 } };
        int n = poll(fds, s->clock_fd >= 0 ? 2 : 1, ms > INT_MAX ? INT_MAX : (int)ms);
        if (n > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(s->event_fd, &v, sizeof v);
            (void)r;
        }
        if (n > 0 && s->clock_fd >= 0 && (fds[1].revents & POLLIN)) {
            uint64_t v;
            if (read(s->clock_fd, &v, sizeof v) < 0 && errno == ECANCELED) { /* the clock was set */
                atomic_store_explicit(&s->stepped, 1, memory_order_relaxed);
                watch_clock(s);
            }
        }
    }
    return NULL;
}

static void poke(struct chime_store *s)
{
    uint64_t one = 1;
    ssize_t r = write(s->event_fd, &one, sizeof one);
    (void)r; /* the counter cannot overflow in practice; a lost poke is followed by another */
}

/*
 * An entry could not be armed. The keeper's round arms what is unarmed, and while anything is, it
 * comes round at least once a second; but a keeper asleep until its next load (up to horizon / 8
 * away) learnt nothing of a failure on another thread, and the timer waited that long (found in
 * review). So the first failure after none wakes it. Later ones while the count is up wait for the
 * keeper's round a second away at most: a retry for each failure would sweep the table back to back
 * while memory is short. The keeper's own failures (in its sweep) never wake it, or it would spin.
 */
void chime__store_unarmed(struct chime_store *s)
{
    /* relaxed: the keeper reads the count after the poke's eventfd read, or in its next round */
    if (atomic_fetch_add_explicit(&s->unarmed, 1, memory_order_relaxed) == 0 && !on_keeper)
        poke(s);
}

void chime__store_watch_clock(struct chime_store *s)
{
    s->clock_fd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK);
    if (s->clock_fd >= 0)
        watch_clock(s);
}

int chime__store_start_keeper(struct chime_store *s)
{
    if (pthread_create(&s->keeper, NULL, keeper_main, s) != 0)
        return -ECHILD;
    s->keeper_started = 1;
    return 0;
}

void chime__store_stop_keeper(struct chime_store *s)
{
    if (s->keeper_started) {
        atomic_store_explicit(&s->keeper_stop, 1, memory_order_release);
        poke(s);
        pthread_join(s->keeper, NULL);
        s->keeper_started = 0;
    }
    if (s->clock_fd >= 0)
        close(s->clock_fd);
    s->clock_fd = -1; /* the event fd lives as long as the store: any thread may poke it */
}

void chime__store_clock_stepped(chime_store *s)
{
    atomic_store_explicit(&s->stepped, 1, memory_order_relaxed);
    poke(s);
}

void chime__store_wake(chime_store *s)
{
    poke(s);
}

void chime__store_settle(chime_store *s)
{
    pthread_mutex_lock(&s->load_lock);
    uint64_t want = s->keeper_rounds + 2; /* one round that began after this call, whole */
    while (s->keeper_rounds < want) {
        poke(s);
        struct timespec ts = chime__deadline_after(CLOCK_REALTIME, 10000000); /* 10 ms */
        pthread_cond_timedwait(&s->keeper_cond, &s->load_lock, &ts);
    }
    pthread_mutex_unlock(&s->load_lock);
}
