/* SPDX-License-Identifier: MIT */
/*
 * The journal's key index (lib/store/index.c): random operations against a plain array, with enough
 * keys to grow every table several times and to move it from memory into its file (where it is read
 * and written a few slots at a time), and rebuilds that reach the same state whatever order records
 * come in; lookups the tags of a file table settle without a read, those they do not ("maybe"), and
 * I/O errors of a table's file (made by io.h's fault hook); and whole stores whose index lives in
 * files (chime__index_set_defaults): puts, replacements and cancels from several threads, with the
 * flusher writing the index's batches out meanwhile, exact before and after a reopen (whose rebuild
 * spills its records to disk and builds one table at a time, index.c "REBUILDING").
 * CHIME_INDEX_KEYS (default 300000) sets the number of keys.
 */
#include "index_util.h"

#include <pthread.h>

#include "store/io.h"

static char *dir;

static int keys_wanted(void)
{
    const char *env = getenv("CHIME_INDEX_KEYS");
    return env ? atoi(env) : 300000;
}

static struct chime__index *open_index(int *fd, struct rng *r)
{
    return index_open_in(&dir, "index", fd, r);
}

/* Random sets and deletes of n keys, each checked by a lookup against a plain array, with `batch`
 * pending writes per file table; with `drain`, the flusher's chime__index_flush now and then. From
 * op n to 4n nearly every draw deletes (a set in 100), so that tables shrink (index.c, SHRINKING),
 * and then grow again. */
static void random_operations(const char *name, uint32_t batch, int drain)
{
    int fd, n = keys_wanted();
    struct rng r = { rng_seed(name) };
    struct chime__index *ix = open_index(&fd, &r);
    chime__index_set_memory_max(ix, 8192); /* all but the smallest tables in files */
    chime__index_set_write_batch(ix, batch);
    CHECK_EQ(chime__index_rebuild_done(ix), 0); /* nothing to rebuild: tables go in files from now */
    uint64_t *want = calloc((size_t)n, sizeof *want); /* version, 0 = absent */
    uint64_t live = 0;
    for (long op = 0; op < 5L * n; op++) {
        int i = (int)rng_below(&r, (uint64_t)n);
        struct chime__ikey k;
        index_key_of(ix, i, &k);
        chime__index_lock(ix, &k);
        uint64_t v, due;
        int found = chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due);
        CHECK(found == (want[i] != 0) && (!found || (v == want[i] && due == want[i] * 3)),
              "op %ld key %d: found %d version %llu, want %llu", op, i, found,
              (unsigned long long)(found ? v : 0), (unsigned long long)want[i]);
        if (rng_below(&r, 300) < (op >= n && op < 4L * n ? 3u : 200u)) {
            CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, (uint64_t)op + 1, (uint64_t)(op + 1) * 3), 0);
            live += !want[i];
            want[i] = (uint64_t)op + 1;
        } else if (rng_below(&r, 2)) {
            CHECK_EQ(chime__index_del(ix, CHIME__IX_PENDING, &k), 0);
            live -= want[i] != 0;
            want[i] = 0;
        } else { /* the journal's way: find (or, knowing it, find_live), then delete that */
            struct chime__islot at;
            if (want[i] && rng_below(&r, 2))
                CHECK_EQ(chime__index_find_live(ix, CHIME__IX_PENDING, &k, want[i], want[i] * 3, &at), 0);
            else
                CHECK_EQ(chime__index_find(ix, CHIME__IX_PENDING, &k, &at), 0);
            CHECK_EQ(at.found, want[i] != 0);
            CHECK(!at.found || (at.version == want[i] && at.due == want[i] * 3), "op %ld key %d: at", op, i);
            chime__index_del_at(ix, CHIME__IX_PENDING, &k, &at);
            live -= want[i] != 0;
            want[i] = 0;
        }
        chime__index_unlock(ix, &k);
        if (drain && rng_below(&r, 1000) == 0)
            CHECK_EQ(chime__index_flush(ix, (int)rng_below(&r, 2)), 0);
    }
    CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), live);
    for (int i = 0; i < n; i++) {
        struct chime__ikey k;
        uint64_t v, due;
        index_key_of(ix, i, &k);
        CHECK_EQ(chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due), want[i] != 0);
        CHECK(!want[i] || v == want[i], "key %d after the run", i);
    }
    chime__index_free(ix);
    close(fd);
    free(want);
}

static void random_operations_agree_with_a_plain_array(void)
{
    random_operations("test_store_index", 0, 1);
}

static void random_operations_agree_with_a_plain_array_when_every_write_goes_to_the_file(void)
{
    random_operations("test_store_index (batch 1)", 1, 0);
}

/* An index of `keys` keys 0.. (version i + 1) in file tables holding up to `batch` pending writes. */
static struct chime__index *filled_index(int *fd, struct rng *r, int keys, uint32_t batch)
{
    struct chime__index *ix = open_index(fd, r);
    chime__index_set_memory_max(ix, 4096);
    chime__index_set_write_batch(ix, batch);
    CHECK_EQ(chime__index_rebuild_done(ix), 0);
    for (int i = 0; i < keys; i++) {
        struct chime__ikey k;
        index_key_of(ix, i, &k);
        chime__index_lock(ix, &k);
        CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, (uint64_t)i + 1, 5), 0);
        chime__index_unlock(ix, &k);
    }
    return ix;
}

/* The lookup of key i: 1 and its version, 0, or an error. */
static int get(struct chime__index *ix, int i, uint64_t *v)
{
    struct chime__ikey k;
    uint64_t due;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    int got = chime__index_get(ix, CHIME__IX_PENDING, &k, v, &due);
    chime__index_unlock(ix, &k);
    return got;
}

static int maybe(struct chime__index *ix, int i)
{
    struct chime__ikey k;
    index_key_of(ix, i, &k);
    chime__index_lock(ix, &k);
    int m = chime__index_maybe(ix, CHIME__IX_PENDING, &k);
    chime__index_unlock(ix, &k);
    return m;
}

static _Atomic long index_reads;

static int count_reads(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    (void)fd;
    if (op == CHIME_IO_READ)
        atomic_fetch_add(&index_reads, 1);
    return 0;
}

/* A deletion in a file table ends the entry in place (index.c, DELETION), and a table that fills
 * rehashes without its ended entries: rounds that delete every key and put as many new ones keep the
 * index at the size its live keys need, however many rounds; and a key known to be live is found
 * from the tags, without a read, unless another key of its probe run shares its tag. */
static void ended_entries_of_a_file_table_go_when_it_fills_so_churn_does_not_grow_it(void)
{
    int fd, n = keys_wanted() / 10;
    struct rng r = { rng_seed("test_store_index (churn)") };
    struct chime__index *ix = open_index(&fd, &r);
    chime__index_set_memory_max(ix, 4096);
    CHECK_EQ(chime__index_rebuild_done(ix), 0);
    uint64_t first = 0, most = 0;
    long ends = 0;
    atomic_store(&index_reads, 0);
    chime__io_set_fault(count_reads, NULL);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < n; i++) { /* keys of this round: round * n + i, version i + 1 */
            struct chime__ikey k;
            index_key_of(ix, round * n + i, &k);
            chime__index_lock(ix, &k);
            CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, (uint64_t)i + 1, 5), 0);
            chime__index_unlock(ix, &k);
        }
        uint64_t bytes = chime__index_bytes(ix);
        first = first ? first : bytes;
        most = bytes > most ? bytes : most;
        for (int i = 0; i < n; i++) {
            struct chime__ikey k;
            struct chime__islot at;
            index_key_of(ix, round * n + i, &k);
            chime__index_lock(ix, &k);
            CHECK_EQ(chime__index_find_live(ix, CHIME__IX_PENDING, &k, (uint64_t)i + 1, 5, &at), 0);
            CHECK(at.found && at.version == (uint64_t)i + 1, "round %d key %d", round, i);
            chime__index_del_at(ix, CHIME__IX_PENDING, &k, &at);
            chime__index_unlock(ix, &k);
            ends++;
        }
        CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), 0);
    }
    /* The first round's tables hold n keys; a table whose ended entries were kept would double
     * with every round or two (20 rounds: 20 n entries). */
    CHECK(most <= 2 * first, "index grew from %llu to %llu bytes over 20 rounds of %d keys",
          (unsigned long long)first, (unsigned long long)most, n);
    chime__io_set_fault(NULL, NULL);
    long reads = atomic_load(&index_reads); /* a probe run sharing a tag: about 1 to 3 % of keys */
    CHECK(reads * 10 < ends, "find_live read the file %ld times for %ld keys", reads, ends);
    for (int i = 0; i < 20 * n; i += 997) { /* every key of every round is gone */
        uint64_t v;
        CHECK_EQ(get(ix, i, &v), 0);
    }
    chime__index_free(ix);
    close(fd);
}

static void a_new_key_the_tags_rule_out_is_not_read_and_a_maybe_is_read_and_settled(void)
{
    enum { KEYS = 20000 };
    int fd;
    struct rng r = { rng_seed("test_store_index (tags)") };
    struct chime__index *ix = filled_index(&fd, &r, KEYS, 0);
    CHECK_EQ(chime__index_flush(ix, 1), 0); /* everything in the files: a read is a pread */
    int no = -1, yes = -1; /* absent keys whose tags say no, and maybe */
    for (int i = KEYS; i < 40 * KEYS && (no < 0 || yes < 0); i++) {
        if (maybe(ix, i))
            yes = yes < 0 ? i : yes;
        else
            no = no < 0 ? i : no;
    }
    CHECK(no >= 0 && yes >= 0, "no absent key with each answer (%d, %d)", no, yes);
    static struct io_fault reads = { 0, CHIME_IO_READ, 0 };
    chime__io_set_fault(io_fault_fail, &reads);
    atomic_store(&reads.armed, 1); /* every pread fails from here */
    uint64_t v;
    CHECK_EQ(get(ix, no, &v), 0);   /* settled by the tags: no read, no error */
    CHECK_EQ(atomic_load(&reads.hits), 0);
    CHECK_EQ(get(ix, yes, &v), -EIO); /* a maybe reads the slot whose tag matched */
    CHECK(atomic_load(&reads.hits) >= 1, "the maybe made no read");
    CHECK_EQ(get(ix, 7, &v), -EIO);   /* a present key is read too */
    atomic_store(&reads.armed, 0);
    chime__io_set_fault(NULL, NULL);
    CHECK_EQ(get(ix, yes, &v), 0);  /* the read settles it: another key holds that tag */
    struct chime__ikey k;
    index_key_of(ix, yes, &k);
    chime__index_lock(ix, &k);
    CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, 999999, 5), 0);
    chime__index_unlock(ix, &k);
    CHECK_EQ(get(ix, yes, &v), 1);
    CHECK_EQ(v, 999999);
    for (int i = 0; i < KEYS; i++) { /* and nothing else moved */
        CHECK_EQ(get(ix, i, &v), 1);
        CHECK_EQ(v, (uint64_t)i + 1);
    }
    chime__index_free(ix);
    close(fd);
}

static void a_failed_write_of_a_batch_keeps_it_pending_and_the_index_exact(void)
{
    enum { KEYS = 5000, BATCH = 16 };
    int fd;
    struct rng r = { rng_seed("test_store_index (write error)") };
    struct chime__index *ix = filled_index(&fd, &r, KEYS, BATCH);
    static struct io_fault writes = { 0, CHIME_IO_WRITE, 0 };
    chime__io_set_fault(io_fault_fail, &writes);
    atomic_store(&writes.armed, 1);
    int failed = 0, i = KEYS;
    for (; i < KEYS + 64 * BATCH && !failed; i++) { /* until some table's batch is full */
        struct chime__ikey k;
        index_key_of(ix, i, &k);
        chime__index_lock(ix, &k);
        int err = chime__index_set(ix, CHIME__IX_PENDING, &k, (uint64_t)i + 1, 5);
        chime__index_unlock(ix, &k);
        CHECK(err == 0 || err == -EIO, "set: %d", err);
        failed = err == -EIO;
    }
    CHECK(failed, "no write failed");
    int last = i - 1; /* its set failed: not applied */
    uint64_t v;
    CHECK_EQ(get(ix, last, &v), 0);
    for (int x = 0; x < last; x++) { /* what was pending still reads right, the failure's key too */
        CHECK_EQ(get(ix, x, &v), 1);
        CHECK_EQ(v, (uint64_t)x + 1);
    }
    CHECK_EQ(chime__index_flush(ix, 1), -EIO);
    atomic_store(&writes.armed, 0); /* the disk is back: the batch goes out, and all still agree */
    chime__io_set_fault(NULL, NULL);
    CHECK_EQ(chime__index_flush(ix, 1), 0);
    for (int x = 0; x < last; x++) {
        CHECK_EQ(get(ix, x, &v), 1);
        CHECK_EQ(v, (uint64_t)x + 1);
    }
    CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), (uint64_t)last);
    chime__index_free(ix);
    close(fd);
}

struct event {
    int key;
    int kill;
    uint64_t version;
};

/* Trials 0-3 build the tables in memory (1 and 3 then move them into files), 4 and 5 spill the
 * records to disk and build one table at a time from them. Every event goes to both tables. */
static void a_rebuild_reaches_the_same_state_in_any_order(void)
{
    /* Per key: versions put in turn, each but maybe the last ended. */
    enum { KEYS = 500 };
    struct event ev[KEYS * 8];
    int n = 0;
    uint64_t version = 1, expect[KEYS];
    struct rng r = { rng_seed("test_store_index (rebuild)") };
    for (int k = 0; k < KEYS; k++) {
        int puts = 1 + (int)rng_below(&r, 3);
        for (int p = 0; p < puts; p++) {
            ev[n++] = (struct event){ k, 0, version };
            if (p < puts - 1 || rng_below(&r, 2))
                ev[n++] = (struct event){ k, 1, version };
            version++;
        }
        expect[k] = ev[n - 1].kill ? 0 : ev[n - 1].version;
    }
    for (int trial = 0; trial < 6; trial++) {
        for (int i = n - 1; trial && i > 0; i--) { /* the first in order, then shuffled */
            int j = (int)rng_below(&r, (uint64_t)i + 1);
            struct event t = ev[i];
            ev[i] = ev[j];
            ev[j] = t;
        }
        int fd;
        struct chime__index *ix = open_index(&fd, &r);
        if (trial >= 4)
            chime__index_set_spill_over(ix, 0); /* spill whatever the size */
        if (trial % 2 || trial >= 4)
            CHECK_EQ(chime__index_presize(ix, KEYS), 0);
        if (trial % 2)
            chime__index_set_memory_max(ix, 4096); /* rebuild_done moves them into files */
        static struct chime__rebuild_op ops[KEYS * 8 * 2];
        for (int i = 0; i < 2 * n; i++) { /* the events, shuffled, for each table in turn */
            index_key_of(ix, ev[i % n].key, &ops[i].k);
            ops[i].version = ev[i % n].version;
            ops[i].due = i < n ? 7 : 0;
            ops[i].table = i < n ? CHIME__IX_PENDING : CHIME__IX_DEAD;
            ops[i].kill = (uint8_t)ev[i % n].kill;
        }
        for (int i = 0; i < 2 * n;) { /* in batches of any size */
            int b = 1 + (int)rng_below(&r, 100);
            b = b < 2 * n - i ? b : 2 * n - i;
            CHECK_EQ(chime__index_rebuild(ix, ops + i, (size_t)b), 0);
            i += b;
        }
        CHECK_EQ(chime__index_rebuild_done(ix), 0);
        for (int t = CHIME__IX_PENDING; t <= CHIME__IX_DEAD; t++) {
            uint64_t live = 0;
            for (int k = 0; k < KEYS; k++) {
                struct chime__ikey key;
                uint64_t v, due;
                index_key_of(ix, k, &key);
                int found = chime__index_get(ix, (enum chime__index_table)t, &key, &v, &due);
                CHECK(found == (expect[k] != 0) && (!found || (v == expect[k] && due == (t ? 0 : 7))),
                      "trial %d table %d key %d: found %d (%llu), want %llu", trial, t, k, found,
                      (unsigned long long)(found ? v : 0), (unsigned long long)expect[k]);
                live += found;
            }
            CHECK_EQ(chime__index_count(ix, (enum chime__index_table)t), live);
        }
        chime__index_free(ix);
        close(fd);
    }
}

/* A spilled rebuild whose spill cannot write, or cannot read back, fails with the error. */
static void a_spilled_rebuild_reports_its_spills_io_errors(void)
{
    enum { KEYS = 200 };
    struct rng r = { rng_seed("test_store_index (spill error)") };
    for (int which = 0; which < 2; which++) {
        static struct io_fault f;
        f = (struct io_fault){ 0, which ? CHIME_IO_READ : CHIME_IO_WRITE, 0 };
        int fd;
        struct chime__index *ix = open_index(&fd, &r);
        chime__index_set_spill_over(ix, 0);
        CHECK_EQ(chime__index_presize(ix, KEYS), 0);
        chime__io_set_fault(io_fault_fail, &f);
        atomic_store(&f.armed, 1);
        int err = 0;
        for (int i = 0; i < KEYS && !err; i++) {
            struct chime__rebuild_op op = { .version = (uint64_t)i + 1, .due = 3 };
            index_key_of(ix, i, &op.k);
            err = chime__index_rebuild(ix, &op, 1);
        }
        CHECK_EQ(err, which ? 0 : -EIO); /* blocks are written while records come in */
        if (!err)
            err = chime__index_rebuild_done(ix); /* ... and read back here */
        CHECK_EQ(err, -EIO);
        CHECK(atomic_load(&f.hits) > 0, "the fault was never met");
        chime__io_set_fault(NULL, NULL);
        chime__index_free(ix);
        close(fd);
    }
}

/* ---- whole stores, their index in files ---- */

enum { STORE_THREADS = 4, STORE_KEYS = 4000 /* per thread */ };

struct worker {
    chime_store *s;
    int t;
    uint64_t due;
    int failed; /* the first call that did not return what it should, or 0 */
};

/* Thread t owns keys "k<t>-<i>": puts each, replaces the even ones, cancels every third (twice: 0,
 * then -ENOENT). What is left: i % 3 != 0. */
static void *store_worker(void *arg)
{
    struct worker *w = arg;
    char key[32];
    for (int pass = 0; pass < 3 && !w->failed; pass++)
        for (int i = 0; i < STORE_KEYS && !w->failed; i++) {
            int n = snprintf(key, sizeof key, "k%d-%d", w->t, i);
            int err = 0, want = 0;
            if (pass == 0)
                err = chime_store_put(w->s, key, (size_t)n, "p", 1, w->due + (uint64_t)i);
            else if (pass == 1 && i % 2 == 0)
                err = chime_store_put(w->s, key, (size_t)n, "q", 1, w->due + 7 * (uint64_t)i);
            else if (pass == 2 && i % 3 == 0) {
                err = chime_store_cancel(w->s, key, (size_t)n);
                if (!err) {
                    err = chime_store_cancel(w->s, key, (size_t)n);
                    want = -ENOENT;
                }
            }
            if (err != want)
                w->failed = 1 + pass * STORE_KEYS + i;
        }
    return NULL;
}

static void a_store_whose_index_is_in_files_stays_exact_across_threads_and_a_reopen(void)
{
    char *path = tmpdir_make("index-store");
    chime__index_set_defaults(1024, 8, 1); /* every table in a file, small batches; rebuilds spill */
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC; /* a day ahead: on disk only, in the index */
    struct worker w[STORE_THREADS];
    pthread_t th[STORE_THREADS];
    for (int t = 0; t < STORE_THREADS; t++) {
        w[t] = (struct worker){ s, t, due, 0 };
        CHECK_EQ(pthread_create(&th[t], NULL, store_worker, &w[t]), 0);
    }
    for (int t = 0; t < STORE_THREADS; t++) {
        CHECK_EQ(pthread_join(th[t], NULL), 0);
        CHECK(!w[t].failed, "thread %d: call %d", t, w[t].failed - 1);
    }
    uint64_t left = (uint64_t)STORE_THREADS * (STORE_KEYS - (STORE_KEYS + 2) / 3);
    struct chime_store_stats st;
    for (int round = 0; round < 2; round++) { /* before and after a reopen (a rebuild) */
        chime_store_stats(s, &st);
        CHECK_EQ(st.pending, left);
        CHECK_EQ(st.loaded, 0);
        char key[32];
        for (int t = 0; t < STORE_THREADS; t++)
            for (int i = round; i < STORE_KEYS; i += 2) { /* half the keys per round */
                int n = snprintf(key, sizeof key, "k%d-%d", t, i);
                CHECK_EQ(chime_store_cancel(s, key, (size_t)n), i % 3 ? 0 : -ENOENT);
                left -= i % 3 != 0;
            }
        CHECK_EQ(chime_store_close(s), 0);
        s = open_far(path);
    }
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK(!atomic_load(&far_fired), "a timer a day ahead fired");
    chime__index_set_defaults(0, 0, 0);
    tmpdir_remove(path);
    free(path);
}

/* Fail reads of the index's unnamed files (a link "... (deleted)" in /proc/self/fd) when armed. */
static int fail_index_reads(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)name;
    if (op != CHIME_IO_READ || fd < 0 || !atomic_load((_Atomic int *)ctx))
        return 0;
    return is_index_file(fd) ? -EIO : 0;
}

static void an_index_read_error_fails_the_store_with_eio_for_good(void)
{
    char *path = tmpdir_make("index-eio");
    chime__index_set_defaults(1024, 1, 0); /* every table in a file, each write soon in it */
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC;
    char key[32];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(key, sizeof key, "e%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, "p", 1, due), 0);
    }
    static _Atomic int armed;
    chime__io_set_fault(fail_index_reads, (void *)&armed);
    atomic_store(&armed, 1);
    /* A replacement must read the key's slot to name the version it replaces. */
    CHECK_EQ(chime_store_put(s, "e5", 2, "q", 1, due), -EIO);
    atomic_store(&armed, 0); /* the disk is fine again: the store stays failed */
    CHECK_EQ(chime_store_put(s, "new", 3, "q", 1, due), -EIO);
    CHECK_EQ(chime_store_cancel(s, "e6", 2), -EIO);
    chime_store_close(s);
    chime__io_set_fault(NULL, NULL);
    s = open_far(path); /* the journal is whole: the index is rebuilt from it */
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 2000);
    CHECK_EQ(chime_store_cancel(s, "e5", 2), 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__index_set_defaults(0, 0, 0);
    tmpdir_remove(path);
    free(path);
}

static const struct tap_test tests[] = {
    { "random_operations_agree_with_a_plain_array", random_operations_agree_with_a_plain_array },
    { "random_operations_agree_with_a_plain_array_when_every_write_goes_to_the_file",
      random_operations_agree_with_a_plain_array_when_every_write_goes_to_the_file },
    { "a_new_key_the_tags_rule_out_is_not_read_and_a_maybe_is_read_and_settled",
      a_new_key_the_tags_rule_out_is_not_read_and_a_maybe_is_read_and_settled },
    { "ended_entries_of_a_file_table_go_when_it_fills_so_churn_does_not_grow_it",
      ended_entries_of_a_file_table_go_when_it_fills_so_churn_does_not_grow_it },
    { "a_failed_write_of_a_batch_keeps_it_pending_and_the_index_exact",
      a_failed_write_of_a_batch_keeps_it_pending_and_the_index_exact },
    { "a_rebuild_reaches_the_same_state_in_any_order", a_rebuild_reaches_the_same_state_in_any_order },
    { "a_spilled_rebuild_reports_its_spills_io_errors", a_spilled_rebuild_reports_its_spills_io_errors },
    { "a_store_whose_index_is_in_files_stays_exact_across_threads_and_a_reopen",
      a_store_whose_index_is_in_files_stays_exact_across_threads_and_a_reopen },
    { "an_index_read_error_fails_the_store_with_eio_for_good",
      an_index_read_error_fails_the_store_with_eio_for_good },
};

int main(void)
{
    return index_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir);
}
