/* SPDX-License-Identifier: MIT */
/*
 * The key index after a rebuild (lib/store/index_rebuild.c): its tables sized for the keys it
 * holds, whatever presize was told, so that a store of few keys keeps its index in memory after a
 * reopen (found in review: replay presizes for a key per 144 bytes of journal, and a journal of
 * large payloads left every table 1 MiB and in a file for good); and exact after keys replaced many
 * times, records in any order, spilled or not, then churn. test_store_index.c tests the index's
 * operations.
 */
#include "index_util.h"

#include "store/io.h"

#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

static char *dir;

static struct chime__index *open_index(int *fd, struct rng *r)
{
    return index_open_in(&dir, "index-rebuild", fd, r);
}

static _Atomic long unnamed_reads;

static int count_unnamed_reads(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    if (op == CHIME_IO_READ && fd >= 0 && is_index_file(fd))
        atomic_fetch_add(&unnamed_reads, 1);
    return 0;
}

/*
 * Replay presizes the index for chime__io_dir_bytes(dir) / 144 keys (replay.c). A journal whose
 * bytes are mostly payload (or garbage its runs have not merged away yet) holds far fewer keys than
 * that. 2000 keys need 32 tables in memory of 128 to 256 slots; sized for 600 000 (an 86 MB
 * journal) every pending table was 1 MiB and went into a file, and rebuild_done never sized it back
 * down.
 */
static void a_rebuild_presized_for_more_keys_than_it_holds_keeps_small_tables_in_memory(void)
{
    enum { KEYS = 2000 };
    int fd;
    struct rng r = { rng_seed("test_store_index_rebuild (presize)") };
    struct chime__index *ix = open_index(&fd, &r);
    CHECK_EQ(chime__index_presize(ix, 600000), 0);
    for (int i = 0; i < KEYS; i++) {
        struct chime__rebuild_op op = { .version = (uint64_t)i + 1, .due = 5 };
        index_key_of(ix, i, &op.k);
        CHECK_EQ(chime__index_rebuild(ix, &op, 1), 0);
    }
    CHECK_EQ(chime__index_rebuild_done(ix), 0);
    uint64_t bytes = chime__index_bytes(ix);
    diag("index bytes after the rebuild: %llu for %d keys", (unsigned long long)bytes, KEYS);
    atomic_store(&unnamed_reads, 0);
    chime__io_set_fault(count_unnamed_reads, NULL);
    for (int i = 0; i < KEYS; i++) {
        struct chime__ikey k;
        uint64_t v, due;
        index_key_of(ix, i, &k);
        chime__index_lock(ix, &k);
        CHECK_EQ(chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due), 1);
        chime__index_unlock(ix, &k);
    }
    chime__io_set_fault(NULL, NULL);
    long reads = atomic_load(&unnamed_reads);
    diag("preads of the index's files for %d lookups: %ld", KEYS, reads);
    /* What the same keys take when put one by one after an empty rebuild: 32 tables of <= 256
     * slots. */
    CHECK(bytes <= (uint64_t)32 * 256 * 32, "2000 keys hold %llu bytes of tables",
          (unsigned long long)bytes);
    CHECK(reads == 0, "2000 keys' lookups read the index's files %ld times", reads);
    chime__index_free(ix);
    close(fd);
}

/* The same through a whole store: 1000 timers of 64 KiB payloads, a day ahead. A cancel makes no
 * read of an index file before the reopen; after it, it does. */
static void a_reopened_store_of_few_large_timers_keeps_its_index_in_memory(void)
{
    enum { KEYS = 1000, PAYLOAD = 65536 };
    char *path = tmpdir_make_fast("index-rebuild-store");
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC;
    char *payload = calloc(1, PAYLOAD), key[32];
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "big%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, payload, PAYLOAD, due), 0);
    }
    long reads[2];
    for (int round = 0; round < 2; round++) {
        atomic_store(&unnamed_reads, 0);
        chime__io_set_fault(count_unnamed_reads, NULL);
        for (int i = round; i < 200; i += 2) {
            int n = snprintf(key, sizeof key, "big%d", i);
            CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
        }
        chime__io_set_fault(NULL, NULL);
        reads[round] = atomic_load(&unnamed_reads);
        CHECK_EQ(chime_store_close(s), 0);
        s = open_far(path);
    }
    diag("index file reads by 100 cancels: %ld before a reopen, %ld after", reads[0], reads[1]);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK(reads[1] == 0, "after a reopen, 100 cancels read the index's files %ld times", reads[1]);
    free(payload);
    tmpdir_remove(path);
    free(path);
}

/* Keys replaced many times, records shuffled, spilled or not, tables in files; then churn on the
 * rebuilt index (ended entries of the rebuild, rehashes, batches) checked against an array. */
static void a_rebuild_of_keys_replaced_many_times_then_churn_stays_exact(void)
{
    enum { KEYS = 3000 };
    struct rng r = { rng_seed("test_store_index_rebuild (replaced)") };
    struct chime__rebuild_op *ops = NULL;
    size_t n = 0, cap = 0;
    uint64_t version = 1, want[KEYS];
    int dummy_fd;
    struct chime__index *names = open_index(&dummy_fd, &r);
    chime__index_set_hash_key(names, 1, 2);
    for (int k = 0; k < KEYS; k++) {
        int puts = 1 + (int)rng_below(&r, k % 10 == 0 ? 60 : 3);
        int last_killed = (int)rng_below(&r, 3) == 0;
        for (int p = 0; p < puts; p++) {
            for (int x = 0; x < 2; x++) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 4096;
                    ops = realloc(ops, cap * sizeof *ops);
                }
                int kill = x == 1;
                if (kill && p == puts - 1 && !last_killed)
                    continue;
                ops[n] = (struct chime__rebuild_op){ .version = version,
                                                     .due = version * 3,
                                                     .table = CHIME__IX_PENDING,
                                                     .kill = (uint8_t)kill };
                index_key_of(names, k, &ops[n].k);
                n++;
            }
            version++;
        }
        want[k] = last_killed ? 0 : version - 1;
    }
    for (int trial = 0; trial < 4; trial++) {
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)rng_below(&r, (uint64_t)i + 1);
            struct chime__rebuild_op t = ops[i];
            ops[i] = ops[j];
            ops[j] = t;
        }
        int fd;
        struct chime__index *ix = open_index(&fd, &r);
        chime__index_set_hash_key(ix, 1, 2); /* the names computed by `names` */
        chime__index_set_memory_max(ix, 1024);
        chime__index_set_write_batch(ix, trial % 2 ? 3 : 0);
        if (trial >= 2)
            chime__index_set_spill_over(ix, 0);
        CHECK_EQ(chime__index_presize(ix, trial == 1 ? 100000 : KEYS), 0);
        for (size_t i = 0; i < n;) {
            size_t b = 1 + (size_t)rng_below(&r, 64);
            b = b < n - i ? b : n - i;
            CHECK_EQ(chime__index_rebuild(ix, ops + i, b), 0);
            i += b;
        }
        CHECK_EQ(chime__index_rebuild_done(ix), 0);
        uint64_t cur[KEYS], live = 0, next = version + 1;
        memcpy(cur, want, sizeof cur);
        for (int k = 0; k < KEYS; k++)
            live += cur[k] != 0;
        CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), live);
        for (long op = 0; op < 20L * KEYS; op++) {
            int k = (int)rng_below(&r, KEYS);
            struct chime__ikey key;
            index_key_of(names, k, &key);
            chime__index_lock(ix, &key);
            struct chime__islot at;
            CHECK_EQ(chime__index_find(ix, CHIME__IX_PENDING, &key, &at), 0);
            CHECK(at.found == (cur[k] != 0) &&
                      (!at.found || (at.version == cur[k] && at.due == cur[k] * 3)),
                  "trial %d op %ld key %d: found %d version %llu want %llu", trial, op, k, at.found,
                  (unsigned long long)at.version, (unsigned long long)cur[k]);
            if (rng_below(&r, 2)) {
                CHECK_EQ(chime__index_reserve(ix, CHIME__IX_PENDING, &key), 0);
                CHECK_EQ(chime__index_find(ix, CHIME__IX_PENDING, &key, &at), 0);
                CHECK_EQ(chime__index_write(ix, CHIME__IX_PENDING, &key, &at, next, next * 3), 0);
                live += !cur[k];
                cur[k] = next++;
            } else if (cur[k]) {
                if (rng_below(&r, 2))
                    CHECK_EQ(chime__index_find_live(ix, CHIME__IX_PENDING, &key, cur[k],
                                                    cur[k] * 3, &at), 0);
                chime__index_del_at(ix, CHIME__IX_PENDING, &key, &at);
                live--;
                cur[k] = 0;
            }
            chime__index_unlock(ix, &key);
            if (rng_below(&r, 500) == 0)
                CHECK_EQ(chime__index_flush(ix, (int)rng_below(&r, 2)), 0);
        }
        CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), live);
        chime__index_free(ix);
        close(fd);
    }
    chime__index_free(names);
    close(dummy_fd);
    free(ops);
}

static const struct tap_test tests[] = {
    { "a_rebuild_presized_for_more_keys_than_it_holds_keeps_small_tables_in_memory",
      a_rebuild_presized_for_more_keys_than_it_holds_keeps_small_tables_in_memory },
    { "a_reopened_store_of_few_large_timers_keeps_its_index_in_memory",
      a_reopened_store_of_few_large_timers_keeps_its_index_in_memory },
    { "a_rebuild_of_keys_replaced_many_times_then_churn_stays_exact",
      a_rebuild_of_keys_replaced_many_times_then_churn_stays_exact },
};

int main(void)
{
    return index_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir);
}
