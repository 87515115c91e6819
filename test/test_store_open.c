/* SPDX-License-Identifier: MIT */
/*
 * chime_store_open when memory runs out on the opening thread: every allocation it makes there
 * fails in turn, and each time open must return an error, leave *out untouched, and leave no thread
 * or file descriptor behind; once no allocation fails, it opens. The program is linked with
 * -Wl,--wrap=calloc,--wrap=malloc (test/meson.build), so that the library's calls reach the
 * wrappers below, which fail the n-th allocation of the thread that armed them (the threads that
 * open starts are left alone: what they allocate depends on timing). A plain TAP program (tap.h).
 */
#include "store_api.h"

#include <dirent.h>

void *__real_calloc(size_t n, size_t size);
void *__real_malloc(size_t size);

static _Thread_local long countdown = -1; /* allocations left before one fails; -1: none fails */

static int fail_now(void)
{
    return countdown >= 0 && countdown-- == 0;
}

void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_malloc(size_t size);
void *__wrap_malloc(size_t size)
{
    return fail_now() ? NULL : __real_malloc(size);
}

/* Open with the n-th allocation on this thread failing. Return: what open returned. */
static int open_failing(long n, chime_store **s)
{
    struct chime_store_config cfg = { .path = dir };
    countdown = n;
    *s = NULL;
    int err = chime_store_open(s, &cfg, recorder_handler, &rec);
    countdown = -1;
    return err;
}

/* Entries in a directory of /proc/self: the threads (task) or file descriptors (fd) open now. */
static int count_in(const char *path)
{
    DIR *d = opendir(path);
    CHECK(d != NULL, "opendir %s", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Found in review: a stripe whose first buckets could not be allocated kept nbuckets = 16 with no
 * buckets, and open's failure path walked them (a NULL dereference). */
static void open_fails_cleanly_at_every_allocation_of_its_thread(void)
{
    fresh();
    chime_store *s = open_store(NULL);
    CHECK_EQ(put(s, "soon", "x", wall_ns() + 600 * SEC), 0);  /* loaded by open */
    CHECK_EQ(put(s, "far", "x", wall_ns() + 7200 * SEC), 0); /* beyond the horizon */
    CHECK_EQ(chime_store_close(s), 0);
    int threads = count_in("/proc/self/task"), fds = count_in("/proc/self/fd");
    long n = 0;
    for (int err; (err = open_failing(n, &s)) != 0; n++) {
        CHECK(err < 0, "open with allocation %ld failing returned %d", n, err);
        CHECK(s == NULL, "open with allocation %ld failing set *out", n);
        CHECK_EQ(count_in("/proc/self/task"), threads);
        CHECK_EQ(count_in("/proc/self/fd"), fds);
        CHECK(n < 100000, "open never succeeded");
    }
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 2);
    CHECK_EQ(chime_store_close(s), st.error); /* its sticky error, if any */
    printf("# open made %ld allocations on its thread\n", n);
}

static const struct tap_test tests[] = {
    { "open_fails_cleanly_at_every_allocation_of_its_thread",
      open_fails_cleanly_at_every_allocation_of_its_thread },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
