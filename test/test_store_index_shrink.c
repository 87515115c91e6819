/* SPDX-License-Identifier: MIT */
/*
 * A table of the key index that deletions leave at most a 16th live shrinks (lib/store/index.c,
 * SHRINKING): the deletions ask for it through the flush hint, and the journal's flusher rehashes
 * the table, under its stripe's lock, into the least table that holds what is left. Before, a
 * table never shrank until a reopen: after a burst of 10^7 timers had fired, the index held its
 * tags (16 MiB) and its files (512 MiB) for as long as the store ran.
 */
#include "index_util.h"

#include <dirent.h>

#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

static char *dir;

/* The index's unnamed files this process holds open. */
static int index_files(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            n += is_index_file(atoi(e->d_name));
    closedir(d);
    return n;
}

static void set(struct chime__index *ix, int i, uint64_t version)
{
    struct chime__ikey k;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, version, version * 3), 0);
    chime__index_unlock(ix, &k);
}

static void del(struct chime__index *ix, int i)
{
    struct chime__ikey k;
    struct chime__islot at;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    CHECK_EQ(chime__index_find(ix, CHIME__IX_PENDING, &k, &at), 0);
    CHECK(at.found, "key %d is not there to delete", i);
    chime__index_del_at(ix, CHIME__IX_PENDING, &k, &at);
    chime__index_unlock(ix, &k);
}

/* Key i holds `version`, or is absent (0). */
static void expect(struct chime__index *ix, int i, uint64_t version)
{
    struct chime__ikey k;
    uint64_t v = 0, due = 0;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    int got = chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due);
    chime__index_unlock(ix, &k);
    CHECK(got == (version != 0) && (!got || (v == version && due == version * 3)),
          "key %d: got %d, version %llu due %llu; want version %llu", i, got,
          (unsigned long long)v, (unsigned long long)due, (unsigned long long)version);
}

/*
 * 40 000 keys in file tables (a memory limit of 4 KiB: 128 slots), then all but every 100th
 * deleted: the deletions ask for a flush, and the flush shrinks every table back into memory,
 * closing its file, with every key left still there at its version. Then the tables grow again
 * under new keys, and keep them.
 */
static void a_table_that_deletions_empty_shrinks_at_the_next_flush_and_keeps_its_keys(void)
{
    enum { KEYS = 40000 };
    int fd;
    struct rng r = { rng_seed("test_store_index_shrink (unit)") };
    struct chime__index *ix = index_open_in(&dir, "index-shrink", &fd, &r);
    chime__index_set_memory_max(ix, 4096);
    CHECK_EQ(chime__index_rebuild_done(ix), 0);
    for (int i = 0; i < KEYS; i++)
        set(ix, i, (uint64_t)i + 1);
    CHECK_EQ(chime__index_flush(ix, 1), 0); /* every write in the files: no shrink is due yet */
    uint64_t full = chime__index_bytes(ix);
    int files = index_files();
    diag("%d keys: %llu bytes of tables, %d files", KEYS, (unsigned long long)full, files);
    CHECK(files >= 32, "only %d of the tables are in files", files);
    for (int i = 0; i < KEYS; i++)
        if (i % 100)
            del(ix, i);
    CHECK(chime__index_flush_wanted(ix), "the deletions asked for no flush");
    CHECK_EQ(chime__index_flush(ix, 0), 0);
    uint64_t shrunk = chime__index_bytes(ix);
    diag("%d keys left: %llu bytes of tables, %d files", KEYS / 100, (unsigned long long)shrunk,
         index_files());
    CHECK(shrunk * 16 <= full, "the tables went from %llu to %llu bytes",
          (unsigned long long)full, (unsigned long long)shrunk);
    CHECK_EQ(index_files(), 0);
    CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), KEYS / 100);
    for (int i = 0; i < KEYS; i++)
        expect(ix, i, i % 100 ? 0 : (uint64_t)i + 1);
    for (int i = KEYS; i < 2 * KEYS; i++) /* new keys: the tables grow again, into files */
        set(ix, i, (uint64_t)i + 1);
    CHECK(index_files() >= 32, "the tables did not grow back into files");
    for (int i = 0; i < 2 * KEYS; i++)
        expect(ix, i, i < KEYS && i % 100 ? 0 : (uint64_t)i + 1);
    chime__index_free(ix);
    close(fd);
}

/*
 * The same through a store: a cancel's deletion asks the journal's flusher, which shrinks the
 * tables with no other call. 10 000 keys in file tables (a memory limit of 4 KiB: 128 slots), all
 * cancelled: the index's files close. Polled, not slept on: the flusher may be busy
 * turning the log into runs first.
 */
static void a_store_whose_keys_are_all_cancelled_closes_its_index_files(void)
{
    enum { KEYS = 10000 };
    char *path = tmpdir_make("index-shrink-store");
    chime__index_set_defaults(4096, 0, 0);
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC;
    char key[32];
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "s%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, "p", 1, due), 0);
    }
    int files = index_files();
    diag("%d keys: %d index files", KEYS, files);
    CHECK(files >= 32, "only %d of the tables are in files", files);
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "s%d", i);
        CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
    }
    uint64_t waited = 0;
    while (index_files() > 0 && waited < 60 * SEC) { /* a poll on the condition */
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
        waited += 1000000;
    }
    diag("all cancelled: %d index files after %.3f s", index_files(), (double)waited / 1e9);
    CHECK_EQ(index_files(), 0);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(st.error, 0);
    int n = snprintf(key, sizeof key, "s%d", 7); /* the store goes on */
    CHECK_EQ(chime_store_put(s, key, (size_t)n, "p", 1, due), 0);
    CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK(!atomic_load(&far_fired), "a timer a day ahead fired");
    chime__index_set_defaults(0, 0, 0);
    tmpdir_remove(path);
    free(path);
}

static const struct tap_test tests[] = {
    { "a_table_that_deletions_empty_shrinks_at_the_next_flush_and_keeps_its_keys",
      a_table_that_deletions_empty_shrinks_at_the_next_flush_and_keeps_its_keys },
    { "a_store_whose_keys_are_all_cancelled_closes_its_index_files",
      a_store_whose_keys_are_all_cancelled_closes_its_index_files },
};

int main(void)
{
    return index_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir);
}
