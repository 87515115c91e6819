/* SPDX-License-Identifier: MIT */
/*
 * floor: what a timing wheel's churn, cancel and schedule can cost at best on this machine, against
 * the tuned heap (iheap.h), for docs/perf.md ("The floor under the wheel's targets"). Not a structure
 * the harness compares and not chime: the least wheel that does these three things, so that the
 * targets of issue 8 (churn and cancel at 10^6 at most half the heap's time, schedule no slower) can
 * be set against what any wheel reaches here.
 *
 * It is as lean as a wheel gets: intrusive (the caller's timer holds its deadline, its slot's number
 * and its index there: no id to look up, no generation to check), slots are arrays of pointers,
 * cancel writes a tombstone at once and compacts a slot whose tombstones are twice its live entries
 * (chime's bound), schedule appends; advance walks tick by tick (fine for churn's one tick per 64
 * operations) and cascades as the rotations roll over. The layout is chime's default (1000 x 60 x 60
 * x 24 x 512, a millisecond tick). No far timers, no periodic ones, no due array, no re-entrant
 * callbacks: everything chime pays for and this does not only makes chime slower, so what this
 * measures is a floor.
 *
 *     floor WORKLOAD N        WORKLOAD: churn, cancel or schedule; one line per structure
 *
 * The workloads are chime-perf's (workloads.cc), on one thread, with the same xorshift draws for both
 * structures: churn cancels a random timer and schedules it again at now + 2^20 ticks, advancing a
 * tick every 64 operations; cancel cancels N pending timers in random order; schedule puts N timers
 * at random deadlines into an empty structure that held N before.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iheap.h"

#define LEVELS 5
#define NONE UINT32_MAX /* a timer in no slot */
#define RANGE (UINT64_C(1) << 20)
#define START (UINT64_C(1) << 40)

static const uint32_t nslots[LEVELS] = { 1000, 60, 60, 24, 512 };

struct ftimer {
    uint64_t deadline;
    uint32_t slot, pos; /* the wheel's slot number (all levels in one table) and the index there */
    chime_fn *fn;
    void *arg;
};

struct fslot {
    struct ftimer **v; /* NULL entries are tombstones */
    uint32_t len, cap, dead;
};

struct fwheel {
    uint64_t now;
    uint64_t base[LEVELS], limit[LEVELS], span[LEVELS], inv[LEVELS], rotation[LEVELS];
    uint32_t first[LEVELS]; /* level i's slot 0 in slots */
    struct fslot *slots;
};

static void set_base(struct fwheel *w, int i, uint64_t b)
{
    w->base[i] = b;
    w->limit[i] = i == LEVELS - 1 ? UINT64_MAX : b + w->rotation[i] - 1;
}

static struct fwheel *fwheel_new(uint64_t start)
{
    struct fwheel *w = calloc(1, sizeof *w);
    uint64_t span = 1;
    uint32_t total = 0;
    for (int i = 0; i < LEVELS; i++) {
        w->span[i] = span;
        w->inv[i] = UINT64_MAX / span;
        w->rotation[i] = span * nslots[i];
        w->first[i] = total;
        total += nslots[i];
        set_base(w, i, start - start % w->rotation[i]);
        span *= nslots[i];
    }
    w->slots = calloc(total, sizeof *w->slots);
    w->now = start;
    return w;
}

/* offset / span by a multiply and one correction, as chime's levels.h does */
static inline uint32_t slot_of(const struct fwheel *w, int i, uint64_t offset)
{
    __extension__ typedef unsigned __int128 u128; /* gcc and clang; __extension__ for -pedantic */
    uint64_t q = (uint64_t)(((u128)offset * w->inv[i]) >> 64);
    q += offset - q * w->span[i] >= w->span[i];
    return (uint32_t)q;
}

static __attribute__((noinline)) void grow(struct fslot *s)
{
    uint32_t cap = s->cap ? s->cap * 4 : 8;
    struct ftimer **v = realloc(s->v, cap * sizeof *v);
    if (!v) {
        perror("floor");
        exit(2);
    }
    s->v = v;
    s->cap = cap;
}

static inline void append(struct fwheel *w, uint32_t n, struct ftimer *t)
{
    struct fslot *s = &w->slots[n];
    if (s->len == s->cap)
        grow(s);
    s->v[s->len] = t;
    t->slot = n;
    t->pos = s->len++;
}

static inline void place(struct fwheel *w, struct ftimer *t)
{
    int i = 0;
    while (t->deadline > w->limit[i])
        i++;
    append(w, w->first[i] + slot_of(w, i, t->deadline - w->base[i]), t);
}

__attribute__((noinline)) void fwheel_schedule(struct fwheel *w, struct ftimer *t, uint64_t d)
{
    t->deadline = d;
    place(w, t);
}

static __attribute__((noinline)) void compact(struct fslot *s)
{
    uint32_t keep = 0;
    for (uint32_t j = 0; j < s->len; j++) {
        s->v[keep] = s->v[j];
        keep += s->v[j] != NULL;
    }
    for (uint32_t j = 0; j < keep; j++)
        s->v[j]->pos = j;
    s->len = keep;
    s->dead = 0;
}

__attribute__((noinline)) int fwheel_cancel(struct fwheel *w, struct ftimer *t)
{
    if (t->slot == NONE)
        return -ENOENT;
    struct fslot *s = &w->slots[t->slot];
    t->slot = NONE;
    if (t->pos + 1 == s->len) {
        s->len--;
    } else {
        s->v[t->pos] = NULL;
        if (++s->dead > 8 && s->dead > 2 * (s->len - s->dead))
            compact(s);
    }
    return 0;
}

/* Walk slot n: fire its timers (level 0) or place them again below (a cascade). */
static void walk(struct fwheel *w, uint32_t n, int fire)
{
    struct fslot all = w->slots[n];
    w->slots[n] = (struct fslot){ 0 };
    for (uint32_t j = 0; j < all.len; j++) {
        if (j + 8 < all.len && all.v[j + 8])
            __builtin_prefetch(all.v[j + 8]);
        struct ftimer *t = all.v[j];
        if (!t)
            continue;
        if (fire) {
            t->slot = NONE;
            t->fn(t->arg);
        } else {
            place(w, t);
        }
    }
    all.len = all.dead = 0;
    w->slots[n] = all; /* the array is kept for what lands there next */
}

__attribute__((noinline)) void fwheel_advance(struct fwheel *w, uint64_t now)
{
    while (w->now < now) {
        uint64_t t = ++w->now;
        for (int i = LEVELS - 1; i >= 1; i--) {
            if (t % w->span[i])
                continue; /* level i - 1 did not roll over at t */
            for (int k = 0; k < i; k++)
                set_base(w, k, t);
            if (i < LEVELS - 1 && t % w->rotation[i] == 0)
                set_base(w, i, t);
            walk(w, w->first[i] + slot_of(w, i, t - w->base[i]), 0);
        }
        walk(w, w->first[0] + (uint32_t)(t - w->base[0]), 1);
    }
}

/* ---- the driver ---- */

static uint64_t rng = 0x9e3779b97f4a7c15;
static inline uint64_t below(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)rng * n) >> 64);
}

static uint64_t fired;
static void on_fire(void *arg)
{
    (void)arg;
    fired++;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t *shuffled(size_t n)
{
    uint32_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = below(i);
        uint32_t x = p[i - 1];
        p[i - 1] = p[j];
        p[j] = x;
    }
    return p;
}

/* One workload on one structure: S is fwheel or the heap, T its timer. */
#define RUN(S, T, INIT, NEW, SCHEDULE, CANCEL, ADVANCE)                                            \
    do {                                                                                           \
        rng = 0x9e3779b97f4a7c15;                                                                  \
        S *s = NEW;                                                                                \
        T *tm = malloc(n * sizeof *tm);                                                            \
        uint64_t now = START;                                                                      \
        for (size_t i = 0; i < n; i++) {                                                           \
            tm[i] = (T)INIT;                                                                       \
            SCHEDULE(s, &tm[i], now + 1 + below(RANGE));                                           \
        }                                                                                          \
        size_t ops = n;                                                                            \
        double t0 = now_s();                                                                       \
        if (!strcmp(workload, "churn")) {                                                          \
            ops = n * 10 > 10000000 ? n * 10 : 10000000;                                           \
            t0 = now_s();                                                                          \
            for (size_t k = 0; k < ops; k++) {                                                     \
                T *p = &tm[below(n)];                                                              \
                CANCEL(s, p);                                                                      \
                SCHEDULE(s, p, now + RANGE);                                                       \
                if ((k & 63) == 63)                                                                \
                    ADVANCE(s, ++now);                                                             \
            }                                                                                      \
        } else if (!strcmp(workload, "cancel")) {                                                  \
            uint32_t *order = shuffled(n);                                                         \
            t0 = now_s();                                                                          \
            for (size_t k = 0; k < n; k++)                                                         \
                CANCEL(s, &tm[order[k]]);                                                          \
            free(order);                                                                           \
        } else {                                                                                   \
            for (size_t i = n; i-- > 0;)                                                           \
                CANCEL(s, &tm[i]);                                                                 \
            uint64_t *d = malloc(n * sizeof *d);                                                   \
            for (size_t i = 0; i < n; i++)                                                         \
                d[i] = now + 1 + below(RANGE);                                                     \
            t0 = now_s();                                                                          \
            for (size_t k = 0; k < n; k++)                                                         \
                SCHEDULE(s, &tm[k], d[k]);                                                         \
            free(d);                                                                               \
        }                                                                                          \
        printf("%-6s %-8s %8zu: %8.2f ns per operation\n", name, workload, n,                     \
               (now_s() - t0) * 1e9 / (double)ops);                                                \
        free(tm);                                                                                  \
    } while (0)

#define W_SCHEDULE(s, t, d) ((t)->fn = on_fire, fwheel_schedule(s, t, d))
#define W_CANCEL(s, t) fwheel_cancel(s, t)
#define H_SCHEDULE(s, t, d) perf_iheap_schedule(s, t, d, on_fire, NULL)
#define H_CANCEL(s, t) perf_iheap_cancel(s, t)

int main(int argc, char **argv)
{
    if (argc != 3 ||
        (strcmp(argv[1], "churn") && strcmp(argv[1], "cancel") && strcmp(argv[1], "schedule"))) {
        fprintf(stderr, "usage: floor churn|cancel|schedule N\n");
        return 2;
    }
    const char *workload = argv[1], *name;
    size_t n = strtoull(argv[2], NULL, 0);
    name = "wheel";
    RUN(struct fwheel, struct ftimer, { .slot = NONE }, fwheel_new(START), W_SCHEDULE, W_CANCEL,
        fwheel_advance);
    name = "heap";
    RUN(perf_iheap, struct perf_iheap_timer, PERF_IHEAP_TIMER_INIT,
        perf_iheap_new(START, 0, PERF_IHEAP_ARITY), H_SCHEDULE, H_CANCEL, perf_iheap_advance);
    return 0;
}
