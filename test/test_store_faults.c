/* SPDX-License-Identifier: MIT */
/*
 * Faults, injected at the store's one I/O point (lib/store/io.h): a write or an fdatasync of the log
 * failing with -EIO, the disk filling up (-ENOSPC when a segment is preallocated), a write or sync of
 * a run failing in the flusher (-EIO, -ENOSPC), and the process ending at every file-system step of
 * flushes, merges and recovery (segment creation, run writes, syncs, renames, unlinks), checked
 * against an oracle of what was acknowledged.
 * CHIME_FAULT_POINTS (default 300) sets how many crash points are tried; CHIME_SEED the seed.
 */
#include "store_util.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

#include "rng.h"
#include "store/backend.h"
#include "store/format.h"
#include "store/io.h"

static char *dir;
static struct recorder rec;

static int is_wal(int fd)
{
    return is_file(fd, "/wal-");
}

/* ---- failing one kind of operation on the log's segments (or on runs) ---- */

struct failing {
    _Atomic int armed;
    enum chime__io_op op;
    int err;
    _Atomic int hits;
    const char *file; /* the files it fails on (is_file); NULL: the log's segments */
};
static struct failing failing;

static int fail_wal_op(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    struct failing *f = ctx;
    (void)name;
    if (!atomic_load(&f->armed) || op != f->op || fd < 0 || !is_file(fd, f->file ? f->file : "/wal-"))
        return 0;
    atomic_fetch_add(&f->hits, 1);
    return f->err;
}

static void fresh(void)
{
    store_test_fresh(&dir, "faults", &rec);
}

static chime_store *open_store(void)
{
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    int err = chime_store_open(&s, &cfg, recorder_handler, &rec);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return s;
}

static int put_key(chime_store *s, int i, uint64_t due)
{
    char key[16];
    snprintf(key, sizeof key, "key%d", i);
    return chime_store_put(s, key, strlen(key), "payload", 7, due);
}

/* key0..key9, put and acknowledged before a fault, are pending after the reopen: cancel each. */
static void cancel_the_ten_acknowledged(chime_store *s)
{
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof key, "key%d", i);
        CHECK(chime_store_cancel(s, key, strlen(key)) == 0, "acknowledged put of %s lost", key);
    }
}

static enum chime__io_op failing_op; /* io_error_in's */

/* A timer due at now + window, then the fault: if the failing put returned within the window, the
 * failed store must not start its handler, and the next open fires it as a first attempt. */
static bool io_error_in(uint64_t window)
{
    fresh();
    failing = (struct failing){ .op = failing_op, .err = -EIO };
    chime__io_set_fault(fail_wal_op, &failing);
    chime_store *s = open_store();
    uint64_t far = wall_ns() + 3600 * SEC;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(put_key(s, i, far), 0);
    uint64_t due = wall_ns() + window;
    CHECK_EQ(put_key(s, 100, due), 0); /* due soon: it must not fire now */
    atomic_store(&failing.armed, 1);
    CHECK_EQ(put_key(s, 10, far), -EIO);
    if (!in_time(due)) {
        atomic_store(&failing.armed, 0);
        chime_store_close(s); /* -EIO, or 0 if key100 fired before the fault */
        chime__io_set_fault(NULL, NULL);
        return false;
    }
    atomic_store(&failing.armed, 0); /* the disk is fine again: the store must stay failed */
    CHECK_EQ(put_key(s, 11, far), -EIO);
    CHECK_EQ(chime_store_cancel(s, "key1", 4), -EIO);
    CHECK_EQ(chime_store_sync(s), -EIO);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.error, -EIO);
    while (wall_ns() < due + window)
        sleep_ms(10); /* key100 is due: a failed store starts no handler (nothing to wait on) */
    CHECK_EQ(recorder_count(&rec), 0);
    CHECK_EQ(chime_store_close(s), -EIO);
    CHECK(atomic_load(&failing.hits) >= 1, "the fault was never hit");
    chime__io_set_fault(NULL, NULL);

    s = open_store();
    recorder_wait(&rec, 1); /* key100 fires now (it is overdue), as its first attempt */
    CHECK(strcmp(rec.f[0].key, "key100") == 0, "fired %s", rec.f[0].key);
    CHECK_EQ(rec.f[0].attempt, 1);
    cancel_the_ten_acknowledged(s); /* all there (the failed cancel did not happen) */
    CHECK_EQ(chime_store_close(s), 0);
    return true;
}

/* An I/O error: the call that met it and every later one fail; nothing more is fired; a reopen finds
 * everything acknowledged before. */
static void io_error_fails_for_good_and_loses_nothing_acknowledged(enum chime__io_op op)
{
    failing_op = op;
    in_window(io_error_in);
}

static void a_failed_log_write_is_eio_for_good(void)
{
    io_error_fails_for_good_and_loses_nothing_acknowledged(CHIME_IO_WRITE);
}

static void a_failed_log_fdatasync_is_eio_for_good(void)
{
    io_error_fails_for_good_and_loses_nothing_acknowledged(CHIME_IO_SYNC);
}

static void a_full_disk_is_enospc_for_good_and_loses_nothing_acknowledged(void)
{
    fresh();
    failing = (struct failing){ .op = CHIME_IO_ALLOCATE, .err = -ENOSPC };
    chime__io_set_fault(fail_wal_op, &failing);
    chime_store *s = open_store();
    atomic_store(&failing.armed, 1); /* no new segment can be preallocated from now on */
    static char big[60000];
    memset(big, 'b', sizeof big);
    uint64_t far = wall_ns() + 3600 * SEC;
    int acked = 0, err = 0;
    for (int i = 0; i < 100 && !err; i++) { /* 6 MB: the first segment (1 MiB) fills up */
        char key[16];
        snprintf(key, sizeof key, "big%d", i);
        err = chime_store_put(s, key, strlen(key), big, sizeof big, far);
        acked += err == 0;
    }
    CHECK_EQ(err, -ENOSPC);
    CHECK(acked > 0, "nothing fitted in the first segment");
    CHECK_EQ(put_key(s, 1, far), -ENOSPC);
    CHECK_EQ(chime_store_close(s), -ENOSPC);
    chime__io_set_fault(NULL, NULL);
    s = open_store();
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK(st.pending >= (uint64_t)acked, "%d acknowledged, %llu pending", acked,
          (unsigned long long)st.pending);
    CHECK_EQ(chime_store_close(s), 0);
}

/* ---- the process ending at every step of the journal's own file work ---- */

#define KEYS 16

struct crash_at {
    _Atomic long left; /* steps before the end; < 0: never */
};
static struct crash_at crash_at;

/* Every file-system operation but the log's own appends and commits is a step: segment creation,
 * run writes and syncs, renames, unlinks, directory syncs, reads at recovery. */
static int crash_hook(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    struct crash_at *c = ctx;
    (void)name;
    if ((op == CHIME_IO_WRITE || op == CHIME_IO_SYNC) && fd >= 0 && is_wal(fd))
        return 0;
    if (atomic_fetch_sub(&c->left, 1) == 0)
        crash_now(); /* as kill -9: nothing is flushed, no destructor runs */
    return 0;
}

struct oplog { /* the child's log: BEGIN then DONE, 24 bytes */
    uint8_t phase, op;
    uint16_t key;
    int32_t rc;
    uint64_t due;
    uint64_t pad;
};

static int log_fd;

static size_t payload_for(int key, uint64_t due, unsigned char *out)
{
    size_t n = 4000 + (size_t)((due ^ (uint64_t)key * 7919) % 12000);
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)(due >> (i % 8 * 8)) ^ (unsigned char)(i * 31 + (size_t)key);
    return n;
}

static int64_t never(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    (void)f;
    _exit(43); /* everything is due in a day */
}

static int no_dead(void *ctx, const struct chime_fire *d)
{
    (void)ctx;
    (void)d;
    return 0;
}

static void crash_child(long step, uint64_t seed)
{
    atomic_store(&crash_at.left, step);
    chime__io_set_fault(crash_hook, &crash_at);
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    if (chime_store_open(&s, &cfg, never, NULL) != 0)
        _exit(44);
    struct rng r = { seed };
    static unsigned char payload[16000];
    uint64_t base = wall_ns() + 86400 * SEC;
    for (int i = 0; i < 240; i++) {
        struct oplog l = { .phase = 1, .key = (uint16_t)rng_below(&r, KEYS) };
        char key[16];
        snprintf(key, sizeof key, "c%u", l.key);
        if (rng_below(&r, 4)) {
            l.op = 1;
            l.due = base + rng_below(&r, 1000) * SEC;
            size_t n = payload_for(l.key, l.due, payload);
            ssize_t w = write(log_fd, &l, sizeof l);
            l.rc = chime_store_put(s, key, strlen(key), payload, n, l.due);
            l.phase = 2;
            w = write(log_fd, &l, sizeof l);
            (void)w;
        } else {
            l.op = 2;
            ssize_t w = write(log_fd, &l, sizeof l);
            l.rc = chime_store_cancel(s, key, strlen(key));
            l.phase = 2;
            w = write(log_fd, &l, sizeof l);
            (void)w;
        }
        if (l.rc && l.rc != -ENOENT)
            _exit(45);
        if (i % 30 == 29) /* a listing flushes the log: a flush, and maybe a merge, runs now */
            chime_store_dead_list(s, no_dead, NULL);
    }
    chime_store_close(s);
    struct oplog done = { .phase = 3, .due = (uint64_t)(step - atomic_load(&crash_at.left)) };
    ssize_t w = write(log_fd, &done, sizeof done); /* how many steps a whole run took */
    (void)w;
    _exit(0);
}

struct model {
    int pending;
    uint64_t due;
};

static int load_one(void *ctx, const struct chime__timer *t)
{
    struct model *found = ctx;
    char key[16] = { 0 };
    unsigned k;
    memcpy(key, t->key, t->key_len < 15 ? t->key_len : 15);
    CHECK(sscanf(key, "c%u", &k) == 1 && k < KEYS, "key %s", key);
    static unsigned char want[16000];
    size_t n = payload_for((int)k, t->due_ns, want);
    CHECK(n == t->payload_len && !memcmp(want, t->payload, n), "payload of %s", key);
    CHECK(!found[k].pending, "%s handed over twice", key);
    found[k] = (struct model){ 1, t->due_ns };
    return 0;
}

static void the_process_ending_at_any_step_of_a_flush_or_merge_loses_nothing(void)
{
    fresh();
    tmpdir_remove(dir);
    free(dir);
    dir = tmpdir_make_fast("crash-points"); /* hundreds of runs: see tmpdir_make_fast */
    const char *env = getenv("CHIME_FAULT_POINTS");
    long points = env ? atol(env) : 300;
    struct rng r = { rng_seed("test_store_faults") };
    struct model model[KEYS] = { { 0, 0 } };
    long step = 0, completed = 0, whole = 0;
    for (long p = -1; p < points; p++) {
        /* First a run that never ends, to learn how many steps a whole run takes; then the first
         * steps one by one (recovery, the first flushes), then the rest of a whole run.
         * Without the first run, `whole` was learned only from a crash point beyond a whole run:
         * with CHIME_FAULT_POINTS=60 (the valgrind and TSan stages) none was, and every point fell
         * in the first 60 steps, before the first flush or merge. */
        if (p < 0)
            step = LONG_MAX;
        else if (p < points / 2 || whole <= points / 2)
            step = p;
        else { /* the rest of a whole run in equal strata, one point at random in each */
            long lo = points / 2, span = whole - lo, n = points - lo, i = p - lo;
            step = lo + i * span / n + (long)rng_below(&r, (uint64_t)((span + n - 1) / n));
            step = step < whole ? step : whole - 1;
        }
        int fds[2];
        CHECK(pipe(fds) == 0, "pipe");
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            log_fd = fds[1];
            crash_child(step, rng_next(&r));
        }
        close(fds[1]);
        unsigned char *buf = NULL;
        size_t len = 0, cap = 0;
        int ended = reap_child(pid, fds[0], &buf, &len, &cap);
        close(fds[0]);
        CHECK(ended >= 0, "the child failed at step %ld", step);
        completed += !ended;
        struct oplog inflight = { 0 };
        for (size_t i = 0; i + sizeof(struct oplog) <= len; i += sizeof(struct oplog)) {
            struct oplog l;
            memcpy(&l, buf + i, sizeof l);
            if (l.phase == 3) {
                whole = (long)l.due;
                continue;
            }
            if (l.phase == 1) {
                inflight = l;
                continue;
            }
            inflight.phase = 0;
            CHECK(l.op != 2 || l.rc != -ENOENT || !model[l.key].pending,
                  "cancel of c%u said -ENOENT, but it was pending", l.key);
            if (l.op == 1)
                model[l.key] = (struct model){ 1, l.due };
            else
                model[l.key].pending = 0;
        }
        free(buf);

        /* What the journal holds now must be what was acknowledged, give or take the one call in
         * flight when the process ended. */
        struct chime_store_config cfg = { .path = dir };
        struct chime__backend *b;
        static const struct chime__sink none = { NULL, NULL, NULL, NULL };
        int err = chime__journal_ops.open(&b, &cfg, &none);
        CHECK(err == 0, "reopen after an end at step %ld: %s", step, chime_strerror(err));
        struct model found[KEYS] = { { 0, 0 } };
        CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, load_one, found), 0);
        CHECK_EQ(chime__journal_ops.close(b), 0);
        for (unsigned k = 0; k < KEYS; k++) {
            int as_acked = found[k].pending == model[k].pending &&
                           (!found[k].pending || found[k].due == model[k].due);
            int as_inflight = inflight.phase == 1 && inflight.key == k &&
                              (inflight.op == 1 ? found[k].pending && found[k].due == inflight.due
                                                : !found[k].pending);
            CHECK(as_acked || as_inflight, "step %ld: c%u is %s at %llu, acknowledged %s at %llu",
                  step, k, found[k].pending ? "pending" : "absent",
                  (unsigned long long)found[k].due, model[k].pending ? "pending" : "absent",
                  (unsigned long long)model[k].due);
            model[k] = found[k];
        }
    }
    printf("# %ld crash points, %ld runs completed without reaching theirs (a whole run: %ld steps)\n",
           points, completed, whole);
    CHECK(whole > 0, "no run completed: how many steps a whole run takes is unknown");
}

/* A write or sync of a run failing in the flusher with err (the log's own writes succeed): the store
 * fails for good as for the log's errors, and a reopen finds every acknowledged put in the segments
 * the failed flush left. */
static void run_error_fails_for_good_and_loses_nothing_acknowledged(enum chime__io_op op, int err)
{
    fresh();
    failing = (struct failing){ .op = op, .err = err, .file = "/run-" };
    chime__io_set_fault(fail_wal_op, &failing);
    chime_store *s = open_store();
    uint64_t far = wall_ns() + 3600 * SEC;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(put_key(s, i, far), 0);
    atomic_store(&failing.armed, 1);
    /* a listing flushes the log into a run first: that flush meets the fault */
    CHECK_EQ(chime_store_dead_list(s, no_dead, NULL), err);
    atomic_store(&failing.armed, 0);
    CHECK(atomic_load(&failing.hits) >= 1, "the fault was never hit");
    CHECK_EQ(put_key(s, 10, far), err);
    CHECK_EQ(chime_store_cancel(s, "key1", 4), err);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.error, err);
    CHECK_EQ(chime_store_close(s), err);
    chime__io_set_fault(NULL, NULL);

    s = open_store();
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 10);
    cancel_the_ten_acknowledged(s);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_failed_run_write_in_the_flusher_is_eio_for_good(void)
{
    run_error_fails_for_good_and_loses_nothing_acknowledged(CHIME_IO_WRITE, -EIO);
}

static void a_failed_run_fsync_in_the_flusher_is_eio_for_good(void)
{
    run_error_fails_for_good_and_loses_nothing_acknowledged(CHIME_IO_SYNC, -EIO);
}

static void a_full_disk_while_flushing_is_enospc_for_good(void)
{
    run_error_fails_for_good_and_loses_nothing_acknowledged(CHIME_IO_WRITE, -ENOSPC);
}

/* Creating a segment is slow (every open of one takes 20 ms): the writer, finding none prepared,
 * creates the next one itself while the flusher, done with a flush, prepares one too. They must not
 * both create the same segment (one would fail with -EEXIST, and a writer that fails fails the store). */
static int slow_segment_open(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op == CHIME_IO_OPEN && name && !strncmp(name, "wal-", 4))
        sleep_ms(20); /* injected slowness, not synchronisation */
    return 0;
}

static void the_writer_and_the_flusher_never_create_the_same_segment(void)
{
    fresh();
    chime__io_set_fault(slow_segment_open, NULL);
    struct chime_store_config cfg = { .path = dir, .sync = CHIME_SYNC_INTERVAL };
    chime_store *s;
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), 0);
    static char big[60000];
    memset(big, 'b', sizeof big);
    uint64_t far = wall_ns() + 3600 * SEC;
    for (int i = 0; i < 400; i++) { /* 24 MB: two dozen 1 MiB segments, each sealed and flushed */
        char key[16];
        snprintf(key, sizeof key, "big%d", i);
        int err = chime_store_put(s, key, strlen(key), big, sizeof big, far);
        CHECK(err == 0, "put %d: %s (%d)", i, chime_strerror(err), err);
    }
    CHECK_EQ(chime_store_sync(s), 0);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.error, 0);
    CHECK_EQ(st.pending, 400);
    CHECK_EQ(chime_store_close(s), 0);
    chime__io_set_fault(NULL, NULL);
}

/* A lost write in a sealed segment, found by the flusher: as it opens wal-1 to flush it, 8 bytes at
 * the start of its sixth record read back as zeros. The flush must refuse (-EBADMSG, the store fails
 * for good), not write a run of the five records before the zeros and delete the segment; and a
 * reopen, with wal-2 written to after wal-1, must refuse as well. */
#define LOST_PAYLOAD 60000
static _Atomic int lose_armed;

static int lose_a_write_in_wal_1(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op != CHIME_IO_OPEN || !name || strcmp(name, "wal-0000000000000001.log") ||
        !atomic_exchange(&lose_armed, 0))
        return 0;
    char *path;
    CHECK(asprintf(&path, "%s/%s", dir, name) >= 0, "asprintf");
    int w = open(path, O_WRONLY);
    CHECK(w >= 0, "open %s", path);
    uint64_t off = CHIME__FILE_HEADER + 5 * chime__rec_len(6, LOST_PAYLOAD); /* keys lost00.. */
    CHECK(pwrite(w, (const unsigned char[8]){ 0 }, 8, (off_t)off) == 8, "zeros");
    close(w);
    free(path);
    return 0;
}

static void a_lost_write_in_a_segment_being_flushed_is_ebadmsg_for_good(void)
{
    fresh();
    chime__io_set_fault(lose_a_write_in_wal_1, NULL);
    chime_store *s = open_store(); /* wal-1 is created (opened by name) before the hook is armed */
    atomic_store(&lose_armed, 1);
    static char big[LOST_PAYLOAD];
    memset(big, 'b', sizeof big);
    uint64_t far = wall_ns() + 3600 * SEC;
    for (int i = 0; i < 24; i++) { /* 1.4 MB: wal-1 (1 MiB) fills up, the rest goes to wal-2 */
        char key[16];
        snprintf(key, sizeof key, "lost%02d", i);
        int err = chime_store_put(s, key, strlen(key), big, sizeof big, far);
        /* once wal-1 is sealed the flusher may meet the zeros, and the store fail, at any time */
        CHECK(err == 0 || err == -EBADMSG, "put %d: %s", i, chime_strerror(err));
    }
    /* a listing flushes every sealed segment first: wal-1's flush meets the zeros, if the flusher
     * has not already */
    CHECK_EQ(chime_store_dead_list(s, no_dead, NULL), -EBADMSG);
    CHECK(!atomic_load(&lose_armed), "wal-1 was never opened to be flushed");
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.error, -EBADMSG);
    CHECK_EQ(chime_store_close(s), -EBADMSG);
    chime__io_set_fault(NULL, NULL);
    struct chime_store_config cfg = { .path = dir };
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), -EBADMSG);
}

/* The journal's directory entry itself must reach the disk before anything in it is acknowledged:
 * open syncs the directory that holds it (found in review: a new directory was never synced into its
 * parent). A failure of that sync fails the open. */
static _Atomic int parent_syncs;

static int fail_parent_sync(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op != CHIME_IO_SYNC || !name || strcmp(name, dir) != 0)
        return 0;
    atomic_fetch_add(&parent_syncs, 1);
    return -EIO;
}

static void open_syncs_the_directory_holding_the_journal_and_fails_if_it_cannot(void)
{
    fresh();
    atomic_store(&parent_syncs, 0);
    chime__io_set_fault(fail_parent_sync, NULL);
    struct chime_store_config cfg = { .path = dir };
    chime_store *s = NULL;
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), -EIO);
    CHECK_EQ(atomic_load(&parent_syncs), 1);
    chime__io_set_fault(NULL, NULL);
    s = open_store();
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_failed_log_write_is_eio_for_good", a_failed_log_write_is_eio_for_good },
    { "a_failed_log_fdatasync_is_eio_for_good", a_failed_log_fdatasync_is_eio_for_good },
    { "a_full_disk_is_enospc_for_good_and_loses_nothing_acknowledged",
      a_full_disk_is_enospc_for_good_and_loses_nothing_acknowledged },
    { "the_process_ending_at_any_step_of_a_flush_or_merge_loses_nothing",
      the_process_ending_at_any_step_of_a_flush_or_merge_loses_nothing },
    { "a_failed_run_write_in_the_flusher_is_eio_for_good",
      a_failed_run_write_in_the_flusher_is_eio_for_good },
    { "a_failed_run_fsync_in_the_flusher_is_eio_for_good",
      a_failed_run_fsync_in_the_flusher_is_eio_for_good },
    { "a_full_disk_while_flushing_is_enospc_for_good", a_full_disk_while_flushing_is_enospc_for_good },
    { "the_writer_and_the_flusher_never_create_the_same_segment",
      the_writer_and_the_flusher_never_create_the_same_segment },
    { "a_lost_write_in_a_segment_being_flushed_is_ebadmsg_for_good",
      a_lost_write_in_a_segment_being_flushed_is_ebadmsg_for_good },
    { "open_syncs_the_directory_holding_the_journal_and_fails_if_it_cannot",
      open_syncs_the_directory_holding_the_journal_and_fails_if_it_cannot },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
