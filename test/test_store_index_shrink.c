/* SPDX-License-Identifier: MIT */
/*
 * A table of the key index that deletions leave at most a 16th live shrinks (lib/store/index.c,
 * SHRINKING): the deletions ask for it through the flush hint, and the journal's flusher rehashes
 * the table, under its stripe's lock, into the least table that holds what is left. Before, a
 * table never shrank until a reopen: after a burst of 10^7 timers had fired, the index held its
 * tags (16 MiB) and its files (512 MiB) for as long as the store ran. A shrink that finds no
 * descriptor or space for its new file leaves the table and fails nothing, and is not tried again
 * until half the table's live entries have gone.
 */
#include "index_util.h"

#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

static char *dir;

/* The index's unnamed files this process holds open. */
static int index_files(void)
{
    return fds_where(is_index_file);
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

/* The fault for a_shrink_that_finds_no_descriptor_or_space_leaves_the_table_and_fails_nothing:
 * index files that cannot be made (-EMFILE) or written (-ENOSPC), counted. */
static _Atomic int no_file_fault; /* 0: none; else the errno made */
static _Atomic int no_file_hits;

static int no_file(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    int err = atomic_load(&no_file_fault);
    if ((err == EMFILE && op == CHIME_IO_OPEN && name && !strcmp(name, ".")) ||
        (err == ENOSPC && op == CHIME_IO_WRITE)) {
        atomic_fetch_add(&no_file_hits, 1);
        return -err;
    }
    return 0;
}

/* Delete every other key of those left (i % kept == 0 for i < keys): kept doubles. */
static void halve(struct chime__index *ix, int keys, int *kept)
{
    for (int i = 0; i < keys; i += *kept)
        if (i % (2 * *kept))
            del(ix, i);
    *kept *= 2;
}

/*
 * A shrink is never owed: a table whose smaller file cannot be made (no descriptor left) or written
 * (the disk full) stays as it was, and the flush reports nothing, so the journal goes on (it failed
 * for good, with nothing lost: chime__index_flush returned -EMFILE). And a table that could not
 * shrink is not tried again until half its live entries have gone: each try reads the whole table
 * under its stripe's lock, and with descriptors exhausted every change asked again (80 to 100 tries
 * a round of 2 500 puts, found in review). 160 000 keys in file tables (a memory limit of 4 KiB),
 * all but every 16th deleted: about 312 live a table, which shrinks into 1024 slots, still a file;
 * then halved (a table is tried again if its share of the half has gone), each shrink still into
 * a file. Every key left stays. Once the fault is gone and few enough keys are left, every table
 * shrinks back into memory.
 */
static void a_shrink_that_finds_no_descriptor_or_space_leaves_the_table_and_fails_nothing(void)
{
    enum { KEYS = 160000 };
    int fd, kept = 16;
    struct rng r = { rng_seed("test_store_index_shrink (no file)") };
    struct chime__index *ix = index_open_in(&dir, "index-shrink", &fd, &r);
    chime__index_set_memory_max(ix, 4096);
    CHECK_EQ(chime__index_rebuild_done(ix), 0);
    for (int i = 0; i < KEYS; i++)
        set(ix, i, (uint64_t)i + 1);
    /* The batches written (no shrink is due yet): a deletion writes nothing, so the only file
     * written below is a shrink's. */
    CHECK_EQ(chime__index_flush(ix, 1), 0);
    for (int i = 0; i < KEYS; i++)
        if (i % kept)
            del(ix, i);
    chime__io_set_fault(no_file, NULL);
    static const int faults[] = { EMFILE, ENOSPC };
    for (int f = 0; f < 2; f++) {
        const char *what = faults[f] == EMFILE ? "descriptor" : "space";
        atomic_store(&no_file_fault, faults[f]);
        atomic_store(&no_file_hits, 0);
        int err = chime__index_flush(ix, 0);
        diag("no %s, %d keys: the flush returned %d after %d faults", what, KEYS / kept, err,
             atomic_load(&no_file_hits));
        CHECK(atomic_load(&no_file_hits) > 0, "no shrink tried to make a file");
        CHECK(err == 0, "a shrink that found no %s failed the flush: %d", what, err);
        CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), (uint64_t)(KEYS / kept));
        for (int i = 0; i < KEYS; i++)
            expect(ix, i, i % kept ? 0 : (uint64_t)i + 1);
        atomic_store(&no_file_hits, 0);
        CHECK_EQ(chime__index_flush(ix, 0), 0);
        diag("no %s: the next flush tried %d shrinks", what, atomic_load(&no_file_hits));
        CHECK_EQ(atomic_load(&no_file_hits), 0);
        halve(ix, KEYS, &kept);
    }
    atomic_store(&no_file_fault, 0);
    chime__io_set_fault(NULL, NULL);
    halve(ix, KEYS, &kept); /* about 20 keys a table: its last failure's live count halved twice */
    halve(ix, KEYS, &kept);
    uint64_t before = chime__index_bytes(ix);
    CHECK_EQ(chime__index_flush(ix, 0), 0);
    diag("no fault, %d keys: %llu bytes of tables, then %llu, %d files", KEYS / kept,
         (unsigned long long)before, (unsigned long long)chime__index_bytes(ix), index_files());
    CHECK(chime__index_bytes(ix) * 16 <= before, "the tables did not shrink once they could");
    CHECK_EQ(index_files(), 0);
    for (int i = 0; i < KEYS; i++)
        expect(ix, i, i % kept ? 0 : (uint64_t)i + 1);
    chime__index_free(ix);
    close(fd);
}

/* A store in a new directory (*path) whose index keeps every table over 4 KiB in a file, with
 * `keys` timers "s0".. due at *due, a day ahead. */
static chime_store *store_of(const char *name, int keys, char **path, uint64_t *due)
{
    *path = tmpdir_make(name);
    chime__index_set_defaults(4096, 0, 0);
    chime_store *s = open_far(*path);
    *due = wall_ns() + 24 * 3600 * SEC;
    char key[32];
    for (int i = 0; i < keys; i++) {
        int n = snprintf(key, sizeof key, "s%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, "p", 1, *due), 0);
    }
    return s;
}

/* Poll every millisecond until done() holds, for 60 s at most: the flusher may be busy turning the
 * log into runs first. Return: the seconds waited. */
static double poll_until(int (*done)(void))
{
    uint64_t waited = 0;
    while (!done() && waited < 60 * SEC) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
        waited += 1000000;
    }
    return (double)waited / 1e9;
}

static int no_index_file(void)
{
    return index_files() == 0;
}

static int a_shrink_met_the_fault(void)
{
    return atomic_load(&no_file_hits) > 0;
}

/*
 * The same through a store: a cancel's deletion asks the journal's flusher, which shrinks the
 * tables with no other call. 10 000 keys in file tables (a memory limit of 4 KiB: 128 slots), all
 * cancelled: the index's files close.
 */
static void a_store_whose_keys_are_all_cancelled_closes_its_index_files(void)
{
    enum { KEYS = 10000 };
    char *path, key[32];
    uint64_t due;
    chime_store *s = store_of("index-shrink-store", KEYS, &path, &due);
    int files = index_files();
    diag("%d keys: %d index files", KEYS, files);
    CHECK(files >= 32, "only %d of the tables are in files", files);
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "s%d", i);
        CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
    }
    double waited = poll_until(no_index_file);
    diag("all cancelled: %d index files after %.3f s", index_files(), waited);
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

/*
 * The same through a store, whose journal failed for good on it: every call after the flusher's
 * shrink returned -EMFILE (a cancel: "got -24"), and so did close. 40 000 keys in file tables, all
 * but every 16th cancelled with index files that cannot be made; once a shrink has tried (polled),
 * the store goes on and closes with no error.
 */
static void a_store_goes_on_when_a_shrink_finds_no_descriptor(void)
{
    enum { KEYS = 40000, KEEP = 16 };
    char *path, key[32];
    uint64_t due;
    chime_store *s = store_of("index-shrink-nofd", KEYS, &path, &due);
    atomic_store(&no_file_hits, 0);
    atomic_store(&no_file_fault, EMFILE); /* index files only: the log's have names */
    chime__io_set_fault(no_file, NULL);
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "s%d", i);
        if (i % KEEP)
            CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
    }
    double waited = poll_until(a_shrink_met_the_fault);
    diag("%d shrinks found no descriptor (the first after %.3f s)", atomic_load(&no_file_hits),
         waited);
    CHECK(atomic_load(&no_file_hits) > 0, "no shrink tried to make a file in 60 s");
    for (int i = 0; i < KEYS; i += KEEP) { /* the keys left: replaced, then cancelled */
        int n = snprintf(key, sizeof key, "s%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, "q", 1, due + 1), 0);
        CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0);
    }
    CHECK_EQ(chime_store_close(s), 0); /* the flusher joined: an error it met is the journal's */
    chime__io_set_fault(NULL, NULL);
    atomic_store(&no_file_fault, 0);
    CHECK(!atomic_load(&far_fired), "a timer a day ahead fired");
    chime__index_set_defaults(0, 0, 0);
    tmpdir_remove(path);
    free(path);
}

static const struct tap_test tests[] = {
    { "a_table_that_deletions_empty_shrinks_at_the_next_flush_and_keeps_its_keys",
      a_table_that_deletions_empty_shrinks_at_the_next_flush_and_keeps_its_keys },
    { "a_shrink_that_finds_no_descriptor_or_space_leaves_the_table_and_fails_nothing",
      a_shrink_that_finds_no_descriptor_or_space_leaves_the_table_and_fails_nothing },
    { "a_store_goes_on_when_a_shrink_finds_no_descriptor",
      a_store_goes_on_when_a_shrink_finds_no_descriptor },
    { "a_store_whose_keys_are_all_cancelled_closes_its_index_files",
      a_store_whose_keys_are_all_cancelled_closes_its_index_files },
};

int main(void)
{
    return index_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir);
}
