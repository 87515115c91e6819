/* SPDX-License-Identifier: MIT */
/*
 * A randomised check of the store's promises under concurrency (review): callers put and cancel
 * their own keys, handlers acknowledge, retry or give up at random, the clock steps, the loads of
 * a short horizon run meanwhile, and the store is closed and opened again in the middle. Each put
 * carries a generation in its payload, so that every firing names the put it came from. Checked:
 * never early; never two handlers of one key at once; a put acknowledged never fires again; a put a
 * cancel returned 0 for never starts afterwards; the last put of a key not cancelled fires; the
 * attempts of one put only grow, within max_attempts. Prints its seed (CHIME_SEED repeats it);
 * CHIME_MODEL_MS sets how long the callers run (3000 ms by default). Written by a review of the
 * store's firing path, which found nothing with it in about 80 runs across the plain, ASan and
 * TSan builds; kept as a net for what comes next.
 */
#include "store_api.h"

#include "rng.h"

#define NKEYS 256
#define CALLERS 2
#define MAXF 400000
#define MAX_ATTEMPTS 4

struct fev {
    int key;
    unsigned gen;
    uint32_t attempt;
    uint64_t start, end; /* seq */
    int64_t rc;
    uint64_t early; /* ns before its due time it started (0: not early) */
};

static pthread_mutex_t mlock = PTHREAD_MUTEX_INITIALIZER;
static struct fev *fires;
static size_t nfires;
static _Atomic uint64_t seq;
static _Atomic int inside[NKEYS], overlap, stop_callers;
static uint64_t seed;

/* Per key (owned by one caller thread): the puts and cancels, in its order. */
struct kstate {
    unsigned last_gen;       /* last put that returned 0 (0: none) */
    int cancelled_last;      /* a cancel returned 0 after it */
    unsigned cancelled[1024]; /* gens a cancel returned 0 for, with the seq it returned at */
    uint64_t cancelled_at[1024];
    size_t ncancelled;
};
static struct kstate ks[NKEYS];
static _Atomic unsigned next_gen[NKEYS];

static pthread_rwlock_t life = PTHREAD_RWLOCK_INITIALIZER; /* callers read; close/reopen writes */
static chime_store *_Atomic cur;

/*
 * Early, judged where the clock did not step meanwhile. The stepper moves the clock back while
 * handlers start: a handler the store let start at its due time, whose own read of the clock comes
 * after a step back, reads a time before it (seen in a TSan stress run, with a 200 ms step). So the
 * store's clock is read through model_wall, which keeps, per thread, what the store last saw and
 * the step count then (`steps` is odd while a step is under way): the handler judges by its own
 * read if no step came in between, and by what the store saw (the time the store decided on) if
 * one did.
 */
static _Atomic uint64_t steps;
static _Thread_local uint64_t store_saw, store_saw_steps;

static uint64_t model_wall(void)
{
    store_saw_steps = atomic_load(&steps);
    store_saw = fake_wall();
    return store_saw;
}

static uint64_t started_early(uint64_t due)
{
    uint64_t now = fake_wall();
    if (store_saw_steps % 2 != 0 || atomic_load(&steps) != store_saw_steps)
        now = store_saw; /* a step since the store looked: the time it decided on counts */
    return now < due ? due - now : 0;
}

static uint64_t mix(uint64_t x)
{
    struct rng r = { x };
    return rng_next(&r);
}

static int64_t model_handler(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    char key[16] = { 0 }, pay[16] = { 0 };
    memcpy(key, f->key, f->key_len < 15 ? f->key_len : 15);
    memcpy(pay, f->payload, f->payload_len < 15 ? f->payload_len : 15);
    int k = atoi(key + 1);
    unsigned gen = (unsigned)strtoul(pay + 1, NULL, 10);
    struct fev e = { k, gen, f->attempt, 0, 0, 0, started_early(f->due_ns) };
    if (atomic_exchange(&inside[k], 1))
        atomic_store(&overlap, 1);
    e.start = atomic_fetch_add(&seq, 1) + 1;
    uint64_t h = mix(seed ^ ((uint64_t)k << 40) ^ ((uint64_t)gen << 8) ^ f->attempt);
    unsigned pick = (unsigned)(h % 100);
    int64_t rc = pick < 60 ? 0 : pick < 88 ? (int64_t)(1 + (h >> 8) % 30) * (int64_t)MS
                                           : CHIME_STORE_DEAD;
    if ((h >> 20) % 2 == 0)
        sleep_ms((unsigned)((h >> 24) % 3));
    e.rc = rc;
    e.end = atomic_fetch_add(&seq, 1) + 1;
    atomic_store(&inside[k], 0);
    pthread_mutex_lock(&mlock);
    if (nfires < MAXF)
        fires[nfires++] = e;
    pthread_mutex_unlock(&mlock);
    return rc;
}

static void *caller(void *arg)
{
    int first = (int)(intptr_t)arg;
    struct rng r = { seed ^ (uint64_t)(first + 1) * 7919 };
    while (!atomic_load(&stop_callers)) {
        int k = first + (int)rng_below(&r, NKEYS / CALLERS);
        char key[16];
        snprintf(key, sizeof key, "k%d", k);
        pthread_rwlock_rdlock(&life);
        chime_store *s = atomic_load(&cur);
        if (rng_below(&r, 100) < 65) {
            unsigned g = atomic_fetch_add(&next_gen[k], 1) + 1;
            char pay[16];
            snprintf(pay, sizeof pay, "g%u", g);
            int64_t off = (int64_t)rng_below(&r, 1600) - 100;
            uint64_t due = fake_wall() + (uint64_t)(off * (int64_t)MS);
            if (rng_below(&r, 2)) /* on a shared due time: bursts, acknowledged in groups */
                due = (fake_wall() / (500 * MS) + 1 + rng_below(&r, 3)) * (500 * MS);
            int rc = put(s, key, pay, due);
            CHECK_EQ(rc, 0);
            ks[k].last_gen = g;
            ks[k].cancelled_last = 0;
        } else {
            int rc = cancel(s, key);
            uint64_t at = atomic_fetch_add(&seq, 1) + 1;
            CHECK(rc == 0 || rc == -ENOENT || rc == -EINPROGRESS, "cancel: %d", rc);
            if (rc == 0 && ks[k].last_gen) {
                CHECK(ks[k].ncancelled < 1024, "too many cancels");
                ks[k].cancelled[ks[k].ncancelled] = ks[k].last_gen;
                ks[k].cancelled_at[ks[k].ncancelled++] = at;
                ks[k].cancelled_last = 1;
            }
        }
        if (rng_below(&r, 50) == 0)
            CHECK_EQ(chime_store_sync(s), 0);
        pthread_rwlock_unlock(&life);
        if (rng_below(&r, 4) == 0)
            sleep_ms((unsigned)rng_below(&r, 3));
    }
    return NULL;
}

static chime_store *model_open(void)
{
    struct chime_store_config cfg = { .path = dir, .sync = CHIME_SYNC_INTERVAL,
                                      .horizon_ns = SEC, .max_attempts = MAX_ATTEMPTS };
    cfg.runtime.workers = (seed >> 3) % 2 ? 2 : 0; /* 0: handlers queue up behind each other */
    if (seed % 3 == 0)
        cfg.max_fires_per_s = 2000;
    chime_store *s = NULL;
    int err = chime_store_open(&s, &cfg, model_handler, NULL);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return s;
}

static void wait_quiet(chime_store *s)
{
    uint64_t until = mono_ns() + 60 * SEC;
    for (;;) {
        struct chime_store_stats st;
        chime_store_stats(s, &st);
        if (st.pending == 0 && st.running == 0)
            return;
        CHECK(mono_ns() < until, "not quiet: pending %llu running %llu",
              (unsigned long long)st.pending, (unsigned long long)st.running);
        sleep_ms(5);
    }
}

static void check_model(size_t upto)
{
    CHECK(!atomic_load(&overlap), "two handlers of one key ran at once");
    for (size_t i = 0; i < upto; i++) {
        struct fev *f = &fires[i];
        CHECK(!f->early, "k%d g%u started %.3f ms before its due time", f->key, f->gen,
              (double)f->early / 1e6);
        CHECK(f->attempt >= 1 && f->attempt <= MAX_ATTEMPTS, "k%d g%u attempt %u", f->key, f->gen,
              f->attempt);
        for (size_t j = 0; j < upto; j++) {
            struct fev *p = &fires[j];
            if (j == i || p->key != f->key || p->gen != f->gen || p->start > f->start)
                continue;
            CHECK(p->attempt < f->attempt, "k%d g%u: attempt %u started after attempt %u", f->key,
                  f->gen, f->attempt, p->attempt);
            CHECK(p->rc > 0 || p->end > f->start,
                  "k%d g%u: attempt %u started after attempt %u returned %lld", f->key, f->gen,
                  f->attempt, p->attempt, (long long)p->rc);
        }
        struct kstate *k = &ks[f->key];
        for (size_t c = 0; c < k->ncancelled; c++)
            CHECK(k->cancelled[c] != f->gen || f->start < k->cancelled_at[c],
                  "k%d g%u started after a cancel returned 0 for it", f->key, f->gen);
    }
    for (int k = 0; k < NKEYS; k++) {
        if (!ks[k].last_gen || ks[k].cancelled_last)
            continue;
        int fired = 0;
        for (size_t i = 0; i < upto && !fired; i++)
            fired = fires[i].key == k && fires[i].gen == ks[k].last_gen;
        CHECK(fired, "k%d: its last put, g%u, never fired", k, ks[k].last_gen);
    }
}

static void *stepper(void *arg)
{
    (void)arg;
    struct rng r = { seed ^ 0x5151 };
    while (!atomic_load(&stop_callers)) {
        sleep_ms(50 + (unsigned)rng_below(&r, 150));
        pthread_rwlock_rdlock(&life);
        int64_t d = (int64_t)rng_below(&r, 400) - 200; /* ms: either way */
        atomic_fetch_add(&steps, 1); /* odd: a step under way (started_early) */
        fake_step(atomic_load(&cur), d * (int64_t)MS);
        atomic_fetch_add(&steps, 1);
        pthread_rwlock_unlock(&life);
    }
    return NULL;
}

static void promises_hold_under_random_concurrent_use(void)
{
    fresh();
    seed = rng_seed("store_model");
    fires = calloc(MAXF, sizeof *fires);
    chime__store_set_clock(model_wall);
    atomic_store(&cur, model_open());
    pthread_t th[CALLERS], st;
    for (int t = 0; t < CALLERS; t++)
        pthread_create(&th[t], NULL, caller, (void *)(intptr_t)(t * NKEYS / CALLERS));
    int steps = seed % 2 == 0;
    if (steps)
        pthread_create(&st, NULL, stepper, NULL);
    const char *env = getenv("CHIME_MODEL_MS");
    unsigned ms = env ? (unsigned)atoi(env) : 3000;
    for (int round = 0; round < 3; round++) {
        sleep_ms(ms / 3);
        pthread_rwlock_wrlock(&life);
        CHECK_EQ(chime_store_close(atomic_load(&cur)), 0);
        atomic_store(&cur, model_open());
        pthread_rwlock_unlock(&life);
    }
    atomic_store(&stop_callers, 1);
    for (int t = 0; t < CALLERS; t++)
        pthread_join(th[t], NULL);
    if (steps)
        pthread_join(st, NULL);
    chime_store *s = atomic_load(&cur);
    wait_quiet(s);
    CHECK_EQ(chime_store_close(s), 0);
    pthread_mutex_lock(&mlock);
    size_t n = nfires;
    pthread_mutex_unlock(&mlock);
    CHECK(n < MAXF, "too many firings to keep");
    s = model_open(); /* nothing is pending (open has loaded): nothing may fire again */
    struct chime_store_stats stats;
    chime_store_stats(s, &stats);
    CHECK_EQ(stats.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__store_set_clock(NULL);
    pthread_mutex_lock(&mlock);
    CHECK(nfires == n, "%zu firings after a reopen with nothing pending", nfires - n);
    pthread_mutex_unlock(&mlock);
    printf("# %zu firings\n", n);
    check_model(n);
    free(fires);
}

static const struct tap_test tests[] = {
    { "promises_hold_under_random_concurrent_use", promises_hold_under_random_concurrent_use },
};

int main(void)
{
    return store_tests_run(tests, 1, &dir, &rec, NULL);
}
