/* SPDX-License-Identifier: MIT */
/*
 * Runs and their merging (lib/store/run.c, merge.c): the collapsing rules on every kind of group,
 * and runs written, reopened, read by due-time range through their sparse index, and merged.
 */
#include "store_util.h"

#include <fcntl.h>

#include "rng.h"
#include "store/merge.h"
#include "store/run.h"

struct out {
    struct chime__rec r[64];
    int n;
};

static int keep(void *ctx, const struct chime__rec *r)
{
    struct out *o = ctx;
    o->r[o->n++] = *r;
    return 0;
}

static struct chime__rec rec(uint8_t type, uint64_t version, uint64_t due, uint32_t attempt)
{
    struct chime__rec r = { .type = type, .version = version, .due = due, .attempt = attempt,
                            .key_len = 1, .key = "k" };
    if (type == CHIME__PUT || type == CHIME__DEAD) {
        r.payload_len = 1;
        r.payload = "p";
    }
    return r;
}

/* Collapse a sorted array in a mode; return what survived. */
static struct out collapse(struct chime__rec *recs, size_t n, enum chime__collapse_mode mode,
                           int drop_orphans)
{
    struct out o = { .n = 0 };
    struct chime__array_source a;
    struct chime__source *s = &a.base;
    struct chime__collapse c;
    struct chime__rec *order[16];
    for (size_t i = 0; i < n; i++)
        order[i] = &recs[i];
    chime__rec_sort(order, n);
    chime__array_source_init(&a, order, n);
    chime__collapse_init(&c, mode, drop_orphans, keep, &o);
    CHECK_EQ(chime__merge(&s, 1, &c), 0);
    chime__collapse_free(&c);
    return o;
}

static void a_version_whose_put_and_kill_meet_leaves_nothing_and_fires_fold_in(void)
{
    struct chime__rec g[] = {
        rec(CHIME__PUT, 1, 10, 0), rec(CHIME__FIRE, 1, 10, 1), rec(CHIME__KILL, 1, 10, 0), /* gone */
        rec(CHIME__PUT, 2, 10, 0), rec(CHIME__FIRE, 2, 10, 1), rec(CHIME__FIRE, 2, 10, 2), /* attempt 2 */
        rec(CHIME__KILL, 3, 11, 0),                          /* an orphan KILL (its PUT is older) */
        rec(CHIME__FIRE, 4, 12, 3),                          /* an orphan FIRE */
        rec(CHIME__FIRE, 5, 13, 1), rec(CHIME__KILL, 5, 13, 0), /* orphan FIRE of an ended version */
        rec(CHIME__DEAD, 6, 0, 4),                           /* a dead letter */
        rec(CHIME__DEAD, 7, 0, 1),
    };
    g[11].flags = 0;
    struct chime__rec undead = rec(CHIME__KILL, 7, 0, 0);
    undead.flags = CHIME__KILL_DEAD;
    struct chime__rec all[13];
    memcpy(all, g, sizeof g);
    all[12] = undead;

    struct chime__rec work[13];
    memcpy(work, all, sizeof all);
    struct out o = collapse(work, 13, CHIME__KEEP_RUN, 0);
    CHECK_EQ(o.n, 5); /* PUT 2 (attempt 2), KILL 3, FIRE 4, KILL 5, DEAD 6 */
    CHECK(o.r[0].type == CHIME__PUT && o.r[0].version == 2 && o.r[0].attempt == 2, "put 2");
    CHECK(o.r[1].type == CHIME__KILL && o.r[1].version == 3, "orphan kill kept");
    CHECK(o.r[2].type == CHIME__FIRE && o.r[2].version == 4 && o.r[2].attempt == 3, "orphan fire");
    CHECK(o.r[3].type == CHIME__KILL && o.r[3].version == 5, "the kill, not the fire, of 5");
    CHECK(o.r[4].type == CHIME__DEAD && o.r[4].version == 6, "dead letter 6; 7 was dropped");

    memcpy(work, all, sizeof all);
    o = collapse(work, 13, CHIME__KEEP_RUN, 1); /* the oldest run: orphans have nothing to end */
    CHECK_EQ(o.n, 2);
    CHECK(o.r[0].version == 2 && o.r[1].version == 6, "only the live ones");

    memcpy(work, all, sizeof all);
    o = collapse(work, 13, CHIME__KEEP_LIVE, 0);
    CHECK_EQ(o.n, 2);
    CHECK(o.r[0].type == CHIME__PUT && o.r[0].attempt == 2 && o.r[1].type == CHIME__DEAD, "live");
}

static void runs_read_back_by_due_range_and_merge_into_one(void)
{
    char *dir = tmpdir_make("merge");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "dir");
    struct rng r = { rng_seed("test_store_merge") };
    enum { RUNS = 3, PER = 20000 };
    struct chime__run *runs[RUNS];
    static struct chime__rec recs[PER];
    static char keys[RUNS][PER][12];
    uint64_t version = 1;
    for (int i = 0; i < RUNS; i++) {
        for (int k = 0; k < PER; k++) {
            snprintf(keys[i][k], sizeof keys[i][k], "%d-%d", i, k);
            recs[k] = (struct chime__rec){ .type = CHIME__PUT, .key = keys[i][k],
                                           .key_len = (uint16_t)strlen(keys[i][k]),
                                           .payload = "payload", .payload_len = 7,
                                           .version = version++, .due = rng_below(&r, 1000000) };
        }
        static struct chime__rec *order[PER];
        for (int k = 0; k < PER; k++)
            order[k] = &recs[k];
        chime__rec_sort(order, PER);
        struct chime__run_writer w;
        CHECK_EQ(chime__run_begin(&w, fd, (uint64_t)i + 1, (uint64_t)i + 1, version), 0);
        for (int k = 0; k < PER; k++)
            CHECK_EQ(chime__run_add(&w, order[k]), 0);
        CHECK_EQ(chime__run_commit(&w, &runs[i]), 0);
        CHECK(runs[i]->nmarks > 10, "a run of %d records has a sparse index", PER);
    }
    /* Reopened from disk, a run reads the same; a range read returns exactly that range. */
    char name[CHIME__NAME_MAX];
    chime__run_name(name, 2, 2);
    struct chime__run *again;
    uint64_t bad;
    CHECK_EQ(chime__run_open(fd, name, &again, &bad, NULL, NULL), 0);
    CHECK_EQ(again->records, PER);
    CHECK_EQ(again->nmarks, runs[1]->nmarks);
    for (int t = 0; t < 20; t++) {
        uint64_t from = rng_below(&r, 1000000), until = from + rng_below(&r, 100000);
        struct chime__run_source src;
        CHECK_EQ(chime__run_source_pending(&src, again, from, until), 0);
        struct chime__rec got;
        size_t n = 0;
        uint64_t last = 0;
        while (src.base.next(&src.base, &got) == 1) {
            CHECK(got.due >= from && got.due < until && got.due >= last, "out of range or order");
            last = got.due;
            n++;
        }
        chime__run_source_free(&src);
        size_t want = 0;
        struct chime__run_source all;
        CHECK_EQ(chime__run_source_all(&all, again), 0);
        while (all.base.next(&all.base, &got) == 1)
            want += got.due >= from && got.due < until;
        chime__run_source_free(&all);
        CHECK_EQ(n, want);
    }
    chime__run_unref(again);
    /* Merged, the three are one run in order holding every record. */
    struct chime__run_source srcs[RUNS];
    struct chime__source *ptrs[RUNS];
    for (int i = 0; i < RUNS; i++) {
        CHECK_EQ(chime__run_source_all(&srcs[i], runs[i]), 0);
        ptrs[i] = &srcs[i].base;
    }
    struct chime__run_writer w;
    struct chime__run *merged;
    CHECK_EQ(chime__run_begin(&w, fd, 1, RUNS, version), 0);
    struct chime__collapse c;
    chime__collapse_init(&c, CHIME__KEEP_RUN, 1, chime__run_emit, &w);
    CHECK_EQ(chime__merge(ptrs, RUNS, &c), 0);
    chime__collapse_free(&c);
    CHECK_EQ(chime__run_commit(&w, &merged), 0);
    CHECK_EQ(merged->records, (uint64_t)RUNS * PER);
    for (int i = 0; i < RUNS; i++) {
        chime__run_source_free(&srcs[i]);
        chime__run_unref(runs[i]);
    }
    chime__run_unref(merged);
    close(fd);
    tmpdir_remove(dir);
    free(dir);
}

/* chime__run_find_dead's callback: keep the payload of what it found. */
static int found_dead(void *ctx, const struct chime__rec *r)
{
    char *out = ctx;
    snprintf(out, 64, "%.*s", (int)r->payload_len, (const char *)r->payload);
    return 1;
}

/* Look version v up in run r: 1 found (payload in out), 0 not. */
static int find(struct chime__run *r, uint64_t v, char out[64])
{
    out[0] = '\0';
    int got = chime__run_find_dead(r, v, found_dead, out);
    CHECK(got == 0 || got == 1, "version %llu: %d", (unsigned long long)v, got);
    return got;
}

/* A dead letter is read by its version through the run's index of dead letters (a requeue's read,
 * journal_reads.c), in the run as written and reopened: a DEAD found with its payload, around
 * every index entry and between them; nothing for a version the run holds no DEAD of (one it
 * holds only a KILL of, one between, one past the end); pending timers of the same versions are
 * not dead letters. */
static void a_dead_letter_is_found_by_its_version(void)
{
    char *dir = tmpdir_make("finddead");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "dir");
    enum { N = 20000 };
    static struct chime__rec recs[2 * N + 8];
    static char payloads[N][40];
    size_t n = 0;
    for (uint64_t v = 1; v <= 2 * N; v++) {
        if (v % 2 == 0) { /* a dead letter, with a payload naming it */
            snprintf(payloads[v / 2 - 1], sizeof payloads[0], "dead letter %llu",
                     (unsigned long long)v);
            recs[n] = rec(CHIME__DEAD, v, 0, 1);
            recs[n].payload = payloads[v / 2 - 1];
            recs[n++].payload_len = (uint32_t)strlen(payloads[v / 2 - 1]);
        } else if (v % 6 == 3) { /* the KILL of an older run's dead letter */
            recs[n] = rec(CHIME__KILL, v, 0, 0);
            recs[n++].flags = CHIME__KILL_DEAD;
        } else if (v % 6 == 1) { /* a pending timer */
            recs[n++] = rec(CHIME__PUT, v, 1000 + v, 0);
        }
    }
    static struct chime__rec *order[2 * N + 8];
    for (size_t i = 0; i < n; i++)
        order[i] = &recs[i];
    chime__rec_sort(order, n);
    struct chime__run_writer w;
    struct chime__run *written, *again;
    CHECK_EQ(chime__run_begin(&w, fd, 1, 1, 2 * N + 1), 0);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(chime__run_add(&w, order[i]), 0);
    CHECK_EQ(chime__run_commit(&w, &written), 0);
    char name[CHIME__NAME_MAX];
    chime__run_name(name, 1, 1);
    uint64_t bad;
    CHECK_EQ(chime__run_open(fd, name, &again, &bad, NULL, NULL), 0);
    CHECK(written->ndmarks > 4, "the dead letters have %zu index entries", written->ndmarks);
    CHECK_EQ(again->ndmarks, written->ndmarks);
    for (size_t m = 0; m < written->ndmarks; m++)
        CHECK(again->dmarks[m].due == written->dmarks[m].due &&
                  again->dmarks[m].off == written->dmarks[m].off,
              "index entry %zu: reopened (%llu at %llu), written (%llu at %llu)", m,
              (unsigned long long)again->dmarks[m].due, (unsigned long long)again->dmarks[m].off,
              (unsigned long long)written->dmarks[m].due,
              (unsigned long long)written->dmarks[m].off);
    struct chime__run *both[] = { written, again };
    char got[64], want[64];
    for (int k = 0; k < 2; k++) {
        for (uint64_t v = 0; v <= 2 * N + 2; v++) {
            /* Each version from 2 below to 2 above an index entry's, and every 97th: each lookup
             * reads up to 64 KiB, and all of them took 145 s under ThreadSanitizer. */
            int near = 0;
            for (size_t m = 0; m < written->ndmarks && !near; m++)
                near = v + 2 >= written->dmarks[m].due && v <= written->dmarks[m].due + 2;
            if (!near && v % 97 && v < 2 * N)
                continue;
            int is_dead = v && v <= 2 * N && v % 2 == 0;
            CHECK(find(both[k], v, got) == is_dead, "run %d, version %llu: found %d, want %d", k,
                  (unsigned long long)v, !is_dead, is_dead);
            snprintf(want, sizeof want, "dead letter %llu", (unsigned long long)v);
            CHECK(!is_dead || !strcmp(got, want), "version %llu: payload %s", (unsigned long long)v,
                  got);
        }
    }
    /* Zeros over a whole stretch between two index entries, written after the open checked the
     * run (the disk's damage): a version of that stretch is -EBADMSG, as open calls zeros inside
     * a run, not "no such dead letter" (the reader stops at zeros that run up to its end). */
    uint64_t from = written->dmarks[1].off, to = written->dmarks[2].off;
    static char zeros[1 << 20];
    CHECK(to - from <= sizeof zeros, "a stretch of %llu bytes", (unsigned long long)(to - from));
    int rfd = openat(fd, name, O_WRONLY);
    CHECK(rfd >= 0 && pwrite(rfd, zeros, to - from, (off_t)from) == (ssize_t)(to - from),
          "zeroing the run");
    close(rfd);
    uint64_t v = written->dmarks[1].due;
    for (int k = 0; k < 2; k++) {
        int got_z = chime__run_find_dead(both[k], v, found_dead, got);
        CHECK(got_z == -EBADMSG, "run %d, version %llu in zeros: %d", k, (unsigned long long)v,
              got_z);
    }
    chime__run_unref(written);
    chime__run_unref(again);
    close(fd);
    tmpdir_remove(dir);
    free(dir);
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(struct chime__rec *const *)a;
    uintptr_t y = (uintptr_t)*(struct chime__rec *const *)b;
    return (x > y) - (x < y);
}

/* One draw of n records: the kinds a flush sorts (PUT, FIRE, KILL, DEAD, a dead letter's KILL),
 * dues from a few values (ties) or from all of them, versions near each other or not. */
static void draw(struct rng *r, struct chime__rec *recs, size_t n, int round)
{
    static const uint8_t kinds[] = { CHIME__PUT, CHIME__FIRE, CHIME__KILL, CHIME__DEAD,
                                     CHIME__KILL };
    uint64_t base = rng_next(r) >> (round % 3 ? 8 : 40);
    for (size_t i = 0; i < n; i++) {
        int kind = (int)rng_below(r, 5);
        uint64_t due = round % 2 ? base + rng_below(r, 4) * 1000 : rng_next(r);
        if (round % 5 == 4 && rng_below(r, 4) == 0)
            due = UINT64_MAX; /* a timer kept but never loaded */
        recs[i] = rec(kinds[kind], base % 100000 + rng_below(r, round % 3 ? 64 : 1u << 30), due,
                      (uint32_t)rng_below(r, 4));
        if (kind == 4)
            recs[i].flags = CHIME__KILL_DEAD; /* section 1, as DEAD */
    }
}

/* chime__rec_sort (a radix sort on (due, version, kind) since 2026-11-29) puts records in the order
 * chime__rec_cmp defines, as the qsort before it did, and loses or repeats none: random draws with
 * ties of due and version, dead letters (the second section), dues of UINT64_MAX, and a version of
 * 2^62 (the packing's limit: qsort then). */
static void the_sort_puts_records_in_run_order(void)
{
    struct rng r = { rng_seed("test_store_merge (sort)") };
    enum { N = 5000 };
    struct chime__rec *recs = calloc(N, sizeof *recs);
    struct chime__rec **order = calloc(N, sizeof *order), **seen = calloc(N, sizeof *seen);
    CHECK(recs && order && seen, "no memory");
    for (int round = 0; round < 40; round++) {
        size_t n = round == 0 ? 2 : 1 + rng_below(&r, N);
        draw(&r, recs, n, round);
        if (round == 39)
            recs[rng_below(&r, n)].version = UINT64_C(1) << 62;
        for (size_t i = 0; i < n; i++)
            order[i] = &recs[n - 1 - i];
        chime__rec_sort(order, n);
        for (size_t i = 1; i < n; i++)
            CHECK(chime__rec_cmp(order[i - 1], order[i]) <= 0,
                  "round %d: record %zu (section %d due %llu version %llu type %d) sorts after %zu",
                  round, i - 1, chime__rec_section(order[i - 1]),
                  (unsigned long long)order[i - 1]->due,
                  (unsigned long long)order[i - 1]->version, order[i - 1]->type, i);
        for (size_t i = 0; i < n; i++)
            seen[i] = order[i];
        qsort(seen, n, sizeof *seen, by_address);
        for (size_t i = 0; i < n; i++)
            CHECK(seen[i] == &recs[i], "round %d: record %zu lost or repeated by the sort", round,
                  i);
    }
    free(recs);
    free(order);
    free(seen);
}

static const struct tap_test tests[] = {
    { "a_version_whose_put_and_kill_meet_leaves_nothing_and_fires_fold_in",
      a_version_whose_put_and_kill_meet_leaves_nothing_and_fires_fold_in },
    { "runs_read_back_by_due_range_and_merge_into_one", runs_read_back_by_due_range_and_merge_into_one },
    { "the_sort_puts_records_in_run_order", the_sort_puts_records_in_run_order },
    { "a_dead_letter_is_found_by_its_version", a_dead_letter_is_found_by_its_version },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
