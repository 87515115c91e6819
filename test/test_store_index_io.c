/* SPDX-License-Identifier: MIT */
/*
 * Nothing the key index does after a record is in the log may fail (lib/store/journal.c): every
 * read, growth and batch write of an operation comes before its append, so an error means the
 * change was not made, and a reopen agrees. Found in review: a cancel whose table's batch of
 * pending writes was full wrote the batch out after its KILL was appended, and when that write
 * failed it returned -EIO for a cancel the reopen found done. The put path was already built so.
 * Since deletions end entries by their tags, a cancel writes nothing into the index at all. And a
 * table that cannot grow for want of memory fails that call alone, not the store.
 */
#include "index_util.h"

#include <pthread.h>

#include "store/io.h"

#define diag(...) (printf("# "), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

/* Fail writes to the index's files made by the test's own thread (the flusher's go through), and
 * count them. */
static pthread_t main_thread;
static _Atomic int fail_armed, my_index_writes;

static int fail_my_index_writes(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    if (op != CHIME_IO_WRITE || fd < 0 || !atomic_load(&fail_armed) ||
        !pthread_equal(pthread_self(), main_thread) || !is_index_file(fd))
        return 0;
    atomic_fetch_add(&my_index_writes, 1);
    return -EIO;
}

/*
 * Every table in a file with a batch of one pending write. A cancel after other keys' replacements
 * filled their batches writes nothing into the index: its deletion ends the entry by its tag
 * (lib/store/index.c, DELETION). Before, it wrote the ended entry into the batch, so a full batch
 * had to be written out first; done after the KILL was appended (a review's find), a failed write
 * returned -EIO for a cancel the reopen found done. Then, with the same faults, new keys are put
 * until one's table must write its batch out: that put fails, and the reopen does not have it,
 * which shows the faults were live.
 */
static void a_cancel_writes_nothing_into_the_index_and_a_put_that_fails_is_not_done(void)
{
    char *path = tmpdir_make_fast("index-io-cancel");
    chime__index_set_defaults(1024, 1, 0); /* every table in a file, a batch of one write */
    main_thread = pthread_self();
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC;
    char key[32];
    enum { KEYS = 2000 };
    for (int i = 0; i < KEYS; i++) {
        int n = snprintf(key, sizeof key, "c%d", i);
        CHECK_EQ(chime_store_put(s, key, (size_t)n, "p", 1, due), 0);
    }
    chime__io_set_fault(fail_my_index_writes, NULL);
    /* Replace 64 keys (their tables' batches of one now hold those writes), then cancel another. */
    int cancels = 0;
    for (int a = 0; a + 65 <= KEYS; a += 65, cancels++) {
        for (int b = a + 1; b < a + 65; b++) {
            int n = snprintf(key, sizeof key, "c%d", b);
            CHECK_EQ(chime_store_put(s, key, (size_t)n, "q", 1, due + 1), 0);
        }
        atomic_store(&fail_armed, 1);
        int n = snprintf(key, sizeof key, "c%d", a);
        int err = chime_store_cancel(s, key, (size_t)n);
        atomic_store(&fail_armed, 0);
        CHECK(err == 0, "the cancel of c%d returned %s", a, chime_strerror(err));
    }
    diag("%d cancels made %d writes to the index", cancels, atomic_load(&my_index_writes));
    CHECK_EQ(atomic_load(&my_index_writes), 0);
    atomic_store(&fail_armed, 1);
    int failed = -1, n = 0;
    for (int i = 0; i < KEYS && failed < 0; i++) {
        n = snprintf(key, sizeof key, "n%d", i);
        int err = chime_store_put(s, key, (size_t)n, "p", 1, due);
        if (err == -EIO)
            failed = i;
        else
            CHECK(err == 0, "the put of %s returned %s", key, chime_strerror(err));
    }
    atomic_store(&fail_armed, 0);
    chime__io_set_fault(NULL, NULL);
    CHECK(failed >= 0, "no put had to write its batch out");
    diag("the put of n%d returned -EIO", failed);
    chime_store_close(s);
    chime__index_set_defaults(0, 0, 0);
    s = open_far(path);
    for (int a = 0; a + 65 <= KEYS; a += 65) {
        n = snprintf(key, sizeof key, "c%d", a);
        CHECK_EQ(chime_store_cancel(s, key, (size_t)n), -ENOENT); /* cancelled before */
    }
    n = snprintf(key, sizeof key, "n%d", failed);
    int err = chime_store_cancel(s, key, (size_t)n);
    diag("after the reopen, cancelling n%d returns %d", failed, err);
    CHECK(err == -ENOENT, "a put that returned -EIO was done after the reopen (%d)", err);
    if (failed > 0) /* the put before it returned 0: it was done */
        CHECK_EQ(chime_store_cancel(s, "n0", 2), 0);
    CHECK_EQ(chime_store_close(s), 0);
    tmpdir_remove(path);
    free(path);
}

/* Refuse the next unnamed file the test's own thread asks for (a table moving into its file) with
 * the error in fail_next, once. */
static _Atomic int fail_next;

static int refuse_my_next_table_file(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op != CHIME_IO_OPEN || !name || strcmp(name, ".") || /* chime__io_tmpfile's name */
        !pthread_equal(pthread_self(), main_thread))
        return 0;
    return atomic_exchange(&fail_next, 0);
}

/*
 * A put whose key's table must grow, and cannot for want of memory, changes nothing (the table is
 * as it was and nothing was appended): it returns -ENOMEM and the store goes on, as it does when
 * the put's own entry cannot be allocated (chime_store.h: -ENOMEM is sticky only where a recorded
 * timer would be dropped unfired). Found in review: the journal failed for good on any index error,
 * so every later call returned -ENOMEM and no handler started until a reopen.
 */
static void a_put_whose_index_cannot_grow_fails_alone_and_the_store_goes_on(void)
{
    char *path = tmpdir_make_fast("index-io-grow");
    chime__index_set_defaults(1024, 0, 0); /* every table in a file: growing one makes a file */
    main_thread = pthread_self();
    chime_store *s = open_far(path);
    uint64_t due = wall_ns() + 24 * 3600 * SEC;
    chime__io_set_fault(refuse_my_next_table_file, NULL);
    atomic_store(&fail_next, -ENOMEM);
    /* New keys until one's table is full (3/4 of its 128 slots): its growth meets the fault. */
    char key[32];
    int n = 0, err = 0, i;
    for (i = 0; i < 32 * 128 && atomic_load(&fail_next); i++) {
        n = snprintf(key, sizeof key, "g%d", i);
        err = chime_store_put(s, key, (size_t)n, "p", 1, due);
        CHECK(err == 0 || !atomic_load(&fail_next), "put %d: %s", i, chime_strerror(err));
    }
    chime__io_set_fault(NULL, NULL);
    CHECK_EQ(atomic_load(&fail_next), 0); /* a table grew and met the fault */
    diag("the put of %s, whose table could not grow, returned %d", key, err);
    CHECK_EQ(err, -ENOMEM);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    err = chime_store_put(s, key, (size_t)n, "p", 1, due);
    diag("the store's error is then %d, and the same put again returns %d", st.error, err);
    CHECK(st.error == 0, "the store failed for good (%s)", chime_strerror(st.error));
    CHECK_EQ(err, 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__index_set_defaults(0, 0, 0);
    s = open_far(path);
    CHECK_EQ(chime_store_cancel(s, key, (size_t)n), 0); /* the second put is there */
    CHECK_EQ(chime_store_cancel(s, "g0", 2), 0);      /* and the first key's */
    CHECK_EQ(chime_store_close(s), 0);
    tmpdir_remove(path);
    free(path);
}

static const struct tap_test tests[] = {
    { "a_cancel_writes_nothing_into_the_index_and_a_put_that_fails_is_not_done",
      a_cancel_writes_nothing_into_the_index_and_a_put_that_fails_is_not_done },
    { "a_put_whose_index_cannot_grow_fails_alone_and_the_store_goes_on",
      a_put_whose_index_cannot_grow_fails_alone_and_the_store_goes_on },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
