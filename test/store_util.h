/* SPDX-License-Identifier: MIT */
/*
 * What the durable store's tests share: temporary journal directories, clocks, a recorder of handler
 * calls that tests wait on, an injectable wall clock (lib/store/store.h's test hook), and a fault
 * hook for io.h.
 */
#ifndef CHIME_TEST_STORE_UTIL_H
#define CHIME_TEST_STORE_UTIL_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chime.h"
#include "store/index.h"
#include "store/io.h"
#include "store/store.h"
#include "tap.h"

#define MS UINT64_C(1000000)
#define SEC UINT64_C(1000000000)

static inline uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- a shell command's output (the operator tool's tests) ---- */

/* Run the shell command made of fmt; its output (up to cap - 1 bytes) into out, NUL-terminated.
 * Return: its wait status. */
static inline int run_line(char *out, size_t cap, const char *fmt, ...)
{
    char *line;
    va_list ap;
    va_start(ap, fmt);
    CHECK(vasprintf(&line, fmt, ap) >= 0, "vasprintf");
    va_end(ap);
    FILE *p = popen(line, "r");
    CHECK(p != NULL, "popen %s", line);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int status = pclose(p);
    free(line);
    return status;
}

/* ---- temporary directories ---- */

/* A fresh empty directory under $TMPDIR (or /tmp); the caller frees the string. */
static inline char *tmpdir_make(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path;
    if (asprintf(&path, "%s/chime-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0)
        return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

/* A fresh directory on tmpfs (/dev/shm) where there is one, else as tmpdir_make: for tests that
 * open a journal hundreds of times and test what the store does with bytes and file steps, not the
 * disk's sync latency (a sync costs nothing on tmpfs). */
static inline char *tmpdir_make_fast(const char *tag)
{
    char *path;
    if (access("/dev/shm", W_OK) == 0 && asprintf(&path, "/dev/shm/chime-%s-XXXXXX", tag) >= 0) {
        if (mkdtemp(path))
            return path;
        free(path);
    }
    return tmpdir_make(tag);
}

/* fd's path (from /proc) in path[n]. Return: whether there is one. */
static inline bool fd_path(int fd, char *path, size_t n)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, n - 1);
    if (len <= 0)
        return false;
    path[len] = 0;
    return true;
}

/* Whether fd's path contains `part`: "/wal-" for the log's segments, "/run-" for runs. */
static inline int is_file(int fd, const char *part)
{
    char path[512];
    return fd_path(fd, path, sizeof path) && strstr(path, part) != NULL;
}

/* How many of this process's descriptors is(fd) accepts. */
static inline int fds_where(int (*is)(int fd))
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            n += is(atoi(e->d_name)) != 0;
    closedir(d);
    return n;
}

/* Remove a directory and the files in it (journals have no subdirectories). */
static inline void tmpdir_remove(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *f;
            if (asprintf(&f, "%s/%s", path, e->d_name) >= 0) {
                unlink(f);
                free(f);
            }
        }
        closedir(d);
    }
    rmdir(path);
}

/* Copy file src to dst (created or truncated). */
static inline void file_copy(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char buf[1 << 16];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
}

/* Copy every file of directory `from` into the empty or absent directory `to`. */
static inline void tmpdir_copy(const char *from, const char *to)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *src, *dst;
        if (asprintf(&src, "%s/%s", from, e->d_name) < 0)
            continue;
        if (asprintf(&dst, "%s/%s", to, e->d_name) < 0) {
            free(src);
            continue;
        }
        file_copy(src, dst);
        free(src);
        free(dst);
    }
    closedir(d);
}

/* ---- an injectable wall clock: the real one plus an offset the test moves ---- */

static _Atomic int64_t fake_offset;

static _Atomic uint64_t fake_frozen; /* nonzero: the fake clock stands still there */

static inline uint64_t fake_wall(void)
{
    uint64_t frozen = atomic_load_explicit(&fake_frozen, memory_order_relaxed);
    return frozen ? frozen : wall_ns() + (uint64_t)atomic_load_explicit(&fake_offset, memory_order_relaxed);
}

/* Set the fake clock to `at` and keep it there (at != 0), or let it run again from the real clock
 * plus the offset (at == 0); tell the store, as the kernel would for a set of CLOCK_REALTIME. */
static inline void fake_freeze(chime_store *s, uint64_t at)
{
    atomic_store_explicit(&fake_frozen, at, memory_order_relaxed);
    if (s)
        chime__store_clock_stepped(s);
}

/* Step the fake clock by delta ns and tell the store, as the kernel would for CLOCK_REALTIME. */
static inline void fake_step(chime_store *s, int64_t delta)
{
    atomic_fetch_add_explicit(&fake_offset, delta, memory_order_relaxed);
    if (s)
        chime__store_clock_stepped(s);
}

/* ---- recording handler calls ---- */

struct firing {
    char key[64];
    char payload[64];
    uint64_t due, at_wall; /* at_wall: the store's clock when the handler began */
    uint64_t fence;        /* chime_fire.fence (0 with the journal) */
    uint32_t attempt;
};

struct recorder {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct firing *f;
    size_t n, cap;
    uint64_t (*clock)(void);
    /* What the handler returns: a function of the firing, or 0 (acknowledge). */
    int64_t (*reply)(struct recorder *r, const struct chime_fire *fire);
    void *user;
    _Atomic int early; /* a handler ran before its due time by the store's clock */
};

static inline void recorder_init(struct recorder *r, uint64_t (*clock)(void))
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->clock = clock ? clock : wall_ns;
}

static inline void recorder_free(struct recorder *r)
{
    free(r->f);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
}

static inline int64_t recorder_handler(void *ctx, const struct chime_fire *fire)
{
    struct recorder *r = ctx;
    struct firing f;
    memset(&f, 0, sizeof f);
    f.at_wall = r->clock();
    if (f.at_wall < fire->due_ns)
        atomic_store(&r->early, 1);
    memcpy(f.key, fire->key, fire->key_len < 63 ? fire->key_len : 63);
    memcpy(f.payload, fire->payload, fire->payload_len < 63 ? fire->payload_len : 63);
    f.due = fire->due_ns;
    f.attempt = fire->attempt;
    f.fence = fire->fence;
    int64_t rc = r->reply ? r->reply(r, fire) : 0;
    pthread_mutex_lock(&r->lock);
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->f = realloc(r->f, r->cap * sizeof *r->f);
    }
    r->f[r->n++] = f;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Wait until at least n handler calls were recorded. */
static inline void recorder_wait(struct recorder *r, size_t n)
{
    pthread_mutex_lock(&r->lock);
    while (r->n < n)
        pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

static inline size_t recorder_count(struct recorder *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->n;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* How many recorded calls were for key, with payload (NULL: any). */
static inline size_t recorder_count_with(struct recorder *r, const char *key, const char *payload)
{
    size_t c = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        c += strcmp(r->f[i].key, key) == 0 && (!payload || strcmp(r->f[i].payload, payload) == 0);
    pthread_mutex_unlock(&r->lock);
    return c;
}

/* How many recorded calls were for key. */
static inline size_t recorder_count_key(struct recorder *r, const char *key)
{
    return recorder_count_with(r, key, NULL);
}

/* The last recorded call for key (copied), or 0 if none. */
static inline int recorder_last(struct recorder *r, const char *key, struct firing *out)
{
    int found = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->f[i].key, key) == 0) {
            *out = r->f[i];
            found = 1;
        }
    pthread_mutex_unlock(&r->lock);
    return found;
}

/* Wait until key has at least n recorded calls; the last of them into *out (if out). */
static inline void recorder_wait_key(struct recorder *r, const char *key, size_t n, struct firing *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->lock);
    for (;;) {
        size_t c = 0;
        for (size_t i = 0; i < r->n; i++)
            if (strcmp(r->f[i].key, key) == 0) {
                c++;
                if (out)
                    *out = r->f[i];
            }
        if (c >= n)
            break;
        pthread_cond_wait(&r->cond, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
}

/* Wait until the store has no handler running and nothing pending (all fired and acknowledged).
 * Not exact with PostgreSQL: pending is the database's count of every node's keys, refreshed at
 * most every 500 ms, and the first call returns 0 (chime_store_stats), so this may return early;
 * pg_wait_idle (pg_test.h) counts in the database. Both are for a database whose every timer
 * ends; to wait for this node's handlers, store_wait_handlers (test_pg_dead hung so). */
static inline void store_wait_idle(chime_store *s)
{
    for (;;) {
        struct chime_store_stats st;
        chime_store_stats(s, &st);
        if (st.pending == 0 && st.running == 0)
            return;
        sleep_ms(2); /* a poll: the store offers no idle notification */
    }
}

/* Wait until no handler runs or waits to record its outcome (every firing so far has left the table). */
static inline void store_wait_handlers(chime_store *s)
{
    for (;;) {
        struct chime_store_stats st;
        chime_store_stats(s, &st);
        if (st.running == 0)
            return;
        sleep_ms(2); /* a poll, as in store_wait_idle */
    }
}

/*
 * Windows. Some checks hold only if a few calls return before a due time: a replace before the due
 * time it replaces, a cancel before its timer is due. Such a test is a scenario that takes the
 * window (how far ahead it puts that due time), runs from a fresh state, and returns whether its
 * calls returned within it; it makes its window-dependent checks only when they did. A run too slow
 * for the window (valgrind, a loaded machine) says so and runs again with a window four times
 * longer, up to WINDOW_TRIES times: the checks are the same every time, and a store whose calls
 * never return in time (one that hangs) still fails.
 */
#define WINDOW_FIRST (300 * MS)
#define WINDOW_TRIES 5 /* 0.3, 1.2, 4.8, 19.2 and 76.8 s */

static inline void in_window(bool (*scenario)(uint64_t window_ns))
{
    uint64_t w = WINDOW_FIRST;
    for (int i = 0; i < WINDOW_TRIES; i++, w *= 4) {
        if (scenario(w))
            return;
        printf("# the calls took longer than the window of %llu ms: again with a longer one\n",
               (unsigned long long)(w / MS));
        fflush(stdout);
    }
    CHECK(false, "the calls never returned within a window, the last %llu ms long",
          (unsigned long long)(w / 4 / MS));
}

/* Whether the calls made so far returned while a timer due at `due` could still be cancelled or
 * replaced: before its firing can have been recorded, the longest lead ahead of its due time
 * (include/chime_store.h, lib/store/lead.h). */
static inline bool in_time(uint64_t due)
{
    return wall_ns() + CHIME__LEAD_MAX_NS < due;
}

/*
 * Crashes: a child ends itself as kill -9 would end it by stopping (SIGSTOP) for its parent to kill
 * it (SIGKILL). A process that sends itself SIGKILL under valgrind gets an orderly exit with a leak
 * report of whatever its stack held; an outside SIGKILL ends it on the spot, as a crash does.
 */
static inline void crash_now(void)
{
    raise(SIGSTOP);
    for (;;)
        pause(); /* until the parent's SIGKILL */
}

/* Fork a child that writes to the parent through a pipe. Return: the child's pid in the parent,
 * with *fd the pipe's read end; 0 in the child, with *fd its write end. stdout is flushed first, so
 * that the child does not print the parent's buffered lines again. */
static inline pid_t fork_piped(int *fd)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    close(fds[pid == 0 ? 0 : 1]);
    *fd = fds[pid == 0 ? 1 : 0];
    return pid;
}

/* The parent's side: read the child's log (fd, nonblocking reads into *buf, grown as needed) until
 * the child has ended, killing it if it stopped. Return: 1 if it ended by SIGKILL, 0 if it exited 0,
 * -1 otherwise. */
static inline int reap_child(pid_t pid, int fd, unsigned char **buf, size_t *len, size_t *cap)
{
    int status = 0, ended = 0;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 10) > 0) {
            if (*len + 4096 > *cap)
                *buf = realloc(*buf, *cap = *cap * 2 + 8192);
            ssize_t got = read(fd, *buf + *len, 4096);
            if (got > 0) {
                *len += (size_t)got;
                continue;
            }
            if (got == 0 && ended)
                break; /* drained, and no writer left */
            if (got == 0)
                sleep_ms(1); /* end of file while the child lives: it does not write to us */
        }
        if (!ended) {
            pid_t w = waitpid(pid, &status, WNOHANG | WUNTRACED);
            if (w == pid && WIFSTOPPED(status)) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
            }
            ended = w == pid;
        }
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        return 1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Start a test afresh: a new empty journal directory in *dir (the previous one removed), and a new
 * recorder on the fake clock (which is the real one unless the test moves it). */
static inline void store_test_fresh(char **dir, const char *tag, struct recorder *rec)
{
    if (*dir) {
        tmpdir_remove(*dir);
        free(*dir);
    }
    *dir = tmpdir_make(tag);
    CHECK(*dir != NULL, "mkdtemp failed");
    recorder_free(rec);
    recorder_init(rec, fake_wall);
    atomic_store(&fake_offset, 0);
    atomic_store(&fake_frozen, 0);
}

/* main() of a test file whose tests share one journal directory and one recorder: run them, then
 * remove the directory. */
/* chime_store_dead_list's callback that counts the dead letters into a size_t at ctx. */
static inline int store_count_dead(void *ctx, const struct chime_fire *dead)
{
    (void)dead;
    ++*(size_t *)ctx;
    return 0;
}

/* Open a store in dir with cfg (its path set here) on the fake clock (fake_wall), its handler the
 * recorder; a failure fails the test. */
static inline chime_store *store_open_on_fake_clock(char *dir, struct recorder *rec,
                                                   struct chime_store_config *cfg)
{
    cfg->path = dir;
    chime__store_set_clock(fake_wall);
    chime_store *s = NULL;
    int err = chime_store_open(&s, cfg, recorder_handler, rec);
    chime__store_set_clock(NULL);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return s;
}

static inline int store_tests_run(const struct tap_test *tests, int n, char **dir,
                                  struct recorder *rec, uint64_t (*clock)(void))
{
    recorder_init(rec, clock);
    chime__index_verify_live(1); /* an acknowledgement's promise that its timer is current, checked */
    chime__store_check_on_close(1); /* the table of loaded timers, checked at every close */
    int rc = tap_run(tests, n);
    if (*dir) {
        tmpdir_remove(*dir);
        free(*dir);
    }
    recorder_free(rec);
    return rc;
}

/* io.h's fault hook: fail the armed kind of operation with -EIO, counting its attempts (armed or
 * not) from when the hook is set. */
struct io_fault {
    _Atomic int armed;
    enum chime__io_op op;
    _Atomic long hits;
};

static inline int io_fault_fail(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    struct io_fault *f = ctx;
    (void)name;
    (void)fd;
    if (op != f->op)
        return 0;
    atomic_fetch_add(&f->hits, 1);
    return atomic_load(&f->armed) ? -EIO : 0;
}

#endif /* CHIME_TEST_STORE_UTIL_H */
