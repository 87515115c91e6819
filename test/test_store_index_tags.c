/* SPDX-License-Identifier: MIT */
/*
 * The key index's own bookkeeping (lib/store/index_table.c, T1 and T2; index.c, DELETION), checked
 * slot by slot after random operations on both tables: every slot read as T1 says (the file or the
 * batch, a tag of 255 read as ended), its tag what T2 says, every live entry found where it is by
 * its own key (so its tag is its key's and no earlier slot holds it), and each table's `used` and
 * `ended`, and the index's live counts, what its slots hold. The operations are the journal's:
 * inserts, overwrites, deletions (which end a file table's entry by its tag), absent keys taking
 * ended slots, rehashes and growth, batches written out, and a rebuild whose ended entries move
 * into files. The other tests see the index only through lookups; a count that is wrong there
 * shows only as a table that rehashes too early or too late.
 * CHIME_INDEX_TAG_KEYS (default 4000) sets the number of keys. Not test_store_index's
 * CHIME_INDEX_KEYS, which CI sets for the sanitizer stages: this test is single-threaded, and that
 * count (30 000 under valgrind, 100 000 under TSan) made it CI's longest (118 s and 204 s).
 */
#include "index_util.h"

#include "store/index_impl.h"

static char *dir;
static long file_tables, ended_slots; /* seen by check_tables: the test reaches what it tests */

static int keys_wanted(void)
{
    const char *env = getenv("CHIME_INDEX_TAG_KEYS");
    return env ? atoi(env) : 4000;
}

/* Every slot of every table against T1, T2 and the counts. */
static void check_tables(struct chime__index *ix, const char *when)
{
    uint64_t live[2] = { 0, 0 };
    static slot_t buf[1024];
    for (int st = 0; st < STRIPES; st++)
        for (int t = 0; t < 2; t++) {
            table_t *tb = &ix->stripes[st].t[t];
            uint64_t used = 0, ended = 0;
            file_tables += tb->tags != NULL;
            for (uint64_t i = 0; i < tb->cap; i += 1024) {
                uint64_t m = tb->cap - i < 1024 ? tb->cap - i : 1024;
                CHECK_EQ(chime__itable_read(tb, i, m, buf), 0);
                for (uint64_t x = 0; x < m; x++) {
                    const slot_t *s = &buf[x];
                    uint64_t pos = i + x;
                    int tag = tb->tags ? tb->tags[pos] : -1;
                    if (s->version == 0) {
                        CHECK(tag <= 0, "%s: stripe %d table %d slot %llu: empty, tag %d", when,
                              st, t, (unsigned long long)pos, tag);
                        continue;
                    }
                    used++;
                    CHECK(s->lo || s->hi, "%s: stripe %d table %d slot %llu: no key", when, st, t,
                          (unsigned long long)pos);
                    if (s->version & ENDED) {
                        ended++;
                        ended_slots += tb->tags != NULL;
                        CHECK(tag == -1 || tag == 255, "%s: stripe %d table %d slot %llu: ended, "
                              "tag %d", when, st, t, (unsigned long long)pos, tag);
                        continue;
                    }
                    live[t]++;
                    CHECK(tag != 0 && tag != 255, "%s: stripe %d table %d slot %llu: live, tag %d",
                          when, st, t, (unsigned long long)pos, tag);
                    uint64_t at;
                    slot_t got;
                    CHECK_EQ(chime__itable_find(tb, &(struct chime__hash){ s->lo, s->hi }, &at,
                                                &got), 0);
                    CHECK(at == pos && got.version == s->version && got.due == s->due,
                          "%s: stripe %d table %d: the entry at slot %llu is found at %llu", when,
                          st, t, (unsigned long long)pos, (unsigned long long)at);
                }
            }
            CHECK(used == tb->used && ended == tb->ended,
                  "%s: stripe %d table %d (%s, %llu slots): used %llu ended %llu, counted %llu "
                  "and %llu", when, st, t, tb->tags ? "file" : "memory",
                  (unsigned long long)tb->cap, (unsigned long long)used,
                  (unsigned long long)ended, (unsigned long long)tb->used,
                  (unsigned long long)tb->ended);
        }
    for (int t = 0; t < 2; t++)
        CHECK(live[t] == chime__index_count(ix, (enum chime__index_table)t),
              "%s: table %d holds %llu live entries, counted %llu", when, t,
              (unsigned long long)live[t],
              (unsigned long long)chime__index_count(ix, (enum chime__index_table)t));
}

/* The checks saw file tables, and ended entries in them. */
static void check_reached(const char *what)
{
    printf("# %s: %ld file tables checked, %ld ended slots in them\n", what, file_tables,
           ended_slots);
    CHECK(file_tables > 0 && ended_slots > 0, "%s: no file table or no ended slot", what);
    file_tables = ended_slots = 0;
}

/* One random operation of the journal's on key i of table t, checked against want[t][i]. */
static void random_op(struct chime__index *ix, struct rng *r, uint64_t *want[2], int i,
                      uint64_t *next)
{
    enum chime__index_table t = (enum chime__index_table)rng_below(r, 2);
    uint64_t *w = &want[t][i];
    struct chime__ikey k;
    struct chime__islot at;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    switch (rng_below(r, 5)) {
    case 0: /* chime__index_set */
        CHECK_EQ(chime__index_set(ix, t, &k, *next, *next * 3), 0);
        *w = (*next)++;
        break;
    case 1: /* a put: reserve, find, write */
        CHECK_EQ(chime__index_reserve(ix, t, &k), 0);
        CHECK_EQ(chime__index_find(ix, t, &k, &at), 0);
        CHECK(at.found == (*w != 0) && (!at.found || at.version == *w), "key %d: put", i);
        CHECK_EQ(chime__index_write(ix, t, &k, &at, *next, *next * 3), 0);
        *w = (*next)++;
        break;
    case 2: /* a cancel: find (or find_live, when the key is known live), then del_at */
        if (*w && rng_below(r, 2))
            CHECK_EQ(chime__index_find_live(ix, t, &k, *w, *w * 3, &at), 0);
        else
            CHECK_EQ(chime__index_find(ix, t, &k, &at), 0);
        CHECK(at.found == (*w != 0) && (!at.found || (at.version == *w && at.due == *w * 3)),
              "key %d: cancel", i);
        chime__index_del_at(ix, t, &k, &at);
        *w = 0;
        break;
    case 3:
        CHECK_EQ(chime__index_del(ix, t, &k), 0);
        *w = 0;
        break;
    default: {
        uint64_t v = 0, due = 0;
        int found = chime__index_get(ix, t, &k, &v, &due);
        CHECK(found == (*w != 0) && (!found || (v == *w && due == *w * 3)),
              "key %d table %d: found %d version %llu, want %llu", i, (int)t, found,
              (unsigned long long)v, (unsigned long long)*w);
    }
    }
    chime__index_unlock(ix, &k);
}

/* ops random operations on n keys, the tables checked every `every` of them and at the end. */
static void churn(struct chime__index *ix, struct rng *r, uint64_t *want[2], int n, long ops,
                  long every, uint64_t *next, const char *what)
{
    char when[64];
    for (long op = 0; op < ops; op++) {
        random_op(ix, r, want, (int)rng_below(r, (uint64_t)n), next);
        if (rng_below(r, 300) == 0)
            CHECK_EQ(chime__index_flush(ix, (int)rng_below(r, 2)), 0);
        if ((op + 1) % every == 0 || op + 1 == ops) {
            snprintf(when, sizeof when, "%s, op %ld", what, op);
            check_tables(ix, when);
        }
    }
}

static void random_operations_on_both_tables_keep_t1_t2_and_the_counts(void)
{
    int n = keys_wanted();
    struct rng r = { rng_seed("test_store_index_tags (churn)") };
    for (uint32_t batch = 0; batch <= 4; batch += 4) { /* batches sized by the table, or of 4 */
        int fd;
        struct chime__index *ix = index_open_in(&dir, "index-tags", &fd, &r);
        chime__index_set_memory_max(ix, 1024); /* every table in a file */
        chime__index_set_write_batch(ix, batch);
        CHECK_EQ(chime__index_rebuild_done(ix), 0);
        uint64_t *want[2] = { calloc((size_t)n, sizeof(uint64_t)),
                              calloc((size_t)n, sizeof(uint64_t)) }, next = 1;
        churn(ix, &r, want, n, 30L * n, n, &next, batch ? "batch 4" : "batch sized");
        check_reached(batch ? "batch 4" : "batch sized");
        chime__index_free(ix);
        close(fd);
        free(want[0]);
        free(want[1]);
    }
}

/* A rebuild whose records end some keys, then churn on the tables it leaves. Trials 0-3: few
 * ended, kept (tags of 255 once in files), 2 and 3 spilled and built one table at a time; 4: half
 * ended, dropped; 5: presized for far more keys than it holds, sized down. */
static void a_rebuild_then_churn_keeps_t1_t2_and_the_counts(void)
{
    int n = keys_wanted();
    struct rng r = { rng_seed("test_store_index_tags (rebuild)") };
    for (int trial = 0; trial < 6; trial++) {
        int fd;
        struct chime__index *ix = index_open_in(&dir, "index-tags", &fd, &r);
        chime__index_set_memory_max(ix, 1024);
        chime__index_set_write_batch(ix, trial % 2 ? 4 : 0);
        if (trial == 2 || trial == 3)
            chime__index_set_spill_over(ix, 0); /* spilled, one table at a time */
        CHECK_EQ(chime__index_presize(ix, (uint64_t)n * (trial == 5 ? 50 : 1)), 0);
        uint64_t *want[2] = { calloc((size_t)n, sizeof(uint64_t)),
                              calloc((size_t)n, sizeof(uint64_t)) }, next = 1;
        for (int i = 0; i < n; i++)
            for (int t = 0; t < 2; t++) {
                /* A put, and for one key in eight (few enough for rebuild_done to keep the ended
                 * entries) or in two its kill. */
                struct chime__rebuild_op op[2] = {
                    { .version = next, .due = next * 3, .table = (uint8_t)t },
                    { .version = next, .table = (uint8_t)t, .kill = 1 },
                };
                index_key_of(ix, i, &op[0].k);
                op[1].k = op[0].k;
                int kill = rng_below(&r, trial == 4 ? 2 : 8) == 0;
                CHECK_EQ(chime__index_rebuild(ix, op, kill ? 2 : 1), 0);
                want[t][i] = kill ? 0 : next;
                next++;
            }
        CHECK_EQ(chime__index_rebuild_done(ix), 0);
        check_tables(ix, "after the rebuild");
        churn(ix, &r, want, n, 10L * n, n / 2, &next, "after a rebuild");
        check_reached("a rebuild");
        chime__index_free(ix);
        close(fd);
        free(want[0]);
        free(want[1]);
    }
}

static const struct tap_test tests[] = {
    { "random_operations_on_both_tables_keep_t1_t2_and_the_counts",
      random_operations_on_both_tables_keep_t1_t2_and_the_counts },
    { "a_rebuild_then_churn_keeps_t1_t2_and_the_counts",
      a_rebuild_then_churn_keeps_t1_t2_and_the_counts },
};

int main(void)
{
    return index_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir);
}
