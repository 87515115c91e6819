/* SPDX-License-Identifier: MIT */
/*
 * The journal's key index (lib/store/index.c): random operations against a plain array, with enough
 * keys to grow every table several times and to move it from memory into its file (where it is read
 * and written a few slots at a time), and rebuilds that reach the same state whatever order records
 * come in.
 * CHIME_INDEX_KEYS (default 300000) sets the number of keys.
 */
#include "store_util.h"

#include <fcntl.h>

#include "rng.h"
#include "store/index.h"

static char *dir;

static int keys_wanted(void)
{
    const char *env = getenv("CHIME_INDEX_KEYS");
    return env ? atoi(env) : 300000;
}

static struct chime__index *open_index(int *fd)
{
    if (!dir)
        dir = tmpdir_make("index");
    *fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(*fd >= 0, "open dir");
    struct chime__index *ix;
    CHECK_EQ(chime__index_open(&ix, *fd), 0);
    return ix;
}

static void key_of(struct chime__index *ix, int i, struct chime__ikey *k)
{
    char name[16];
    int n = snprintf(name, sizeof name, "key-%d", i);
    chime__index_key(ix, name, (size_t)n, k);
}

static void random_operations_agree_with_a_plain_array(void)
{
    int fd, n = keys_wanted();
    struct chime__index *ix = open_index(&fd);
    chime__index_set_memory_max(ix, 8192); /* all but the smallest tables in files */
    CHECK_EQ(chime__index_rebuild_done(ix), 0); /* nothing to rebuild: tables go in files from now */
    uint64_t *want = calloc((size_t)n, sizeof *want); /* version, 0 = absent */
    struct rng r = { rng_seed("test_store_index") };
    uint64_t live = 0;
    for (long op = 0; op < 3L * n; op++) {
        int i = (int)rng_below(&r, (uint64_t)n);
        struct chime__ikey k;
        key_of(ix, i, &k);
        chime__index_lock(ix, &k);
        uint64_t v, due;
        int found = chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due);
        CHECK(found == (want[i] != 0) && (!found || (v == want[i] && due == want[i] * 3)),
              "op %ld key %d: found %d version %llu, want %llu", op, i, found,
              (unsigned long long)(found ? v : 0), (unsigned long long)want[i]);
        if (rng_below(&r, 3)) {
            CHECK_EQ(chime__index_set(ix, CHIME__IX_PENDING, &k, (uint64_t)op + 1, (uint64_t)(op + 1) * 3), 0);
            live += !want[i];
            want[i] = (uint64_t)op + 1;
        } else {
            CHECK_EQ(chime__index_del(ix, CHIME__IX_PENDING, &k), 0);
            live -= want[i] != 0;
            want[i] = 0;
        }
        chime__index_unlock(ix, &k);
    }
    CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), live);
    for (int i = 0; i < n; i++) {
        struct chime__ikey k;
        uint64_t v, due;
        key_of(ix, i, &k);
        CHECK_EQ(chime__index_get(ix, CHIME__IX_PENDING, &k, &v, &due), want[i] != 0);
        CHECK(!want[i] || v == want[i], "key %d after the run", i);
    }
    chime__index_free(ix);
    close(fd);
    free(want);
}

struct event {
    int key;
    int kill;
    uint64_t version;
};

static void a_rebuild_reaches_the_same_state_in_any_order(void)
{
    /* Per key: versions put in turn, each but maybe the last ended. */
    enum { KEYS = 500 };
    struct event ev[KEYS * 8];
    int n = 0;
    uint64_t version = 1, expect[KEYS];
    struct rng r = { 12345 };
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
    for (int trial = 0; trial < 4; trial++) {
        for (int i = n - 1; trial && i > 0; i--) { /* the first in order, then shuffled */
            int j = (int)rng_below(&r, (uint64_t)i + 1);
            struct event t = ev[i];
            ev[i] = ev[j];
            ev[j] = t;
        }
        int fd;
        struct chime__index *ix = open_index(&fd);
        if (trial % 2) {
            CHECK_EQ(chime__index_presize(ix, KEYS), 0);
            chime__index_set_memory_max(ix, 4096); /* rebuild_done moves them into files */
        }
        static struct chime__rebuild_op ops[KEYS * 8];
        for (int i = 0; i < n; i++) {
            key_of(ix, ev[i].key, &ops[i].k);
            ops[i].version = ev[i].version;
            ops[i].due = 7;
            ops[i].table = CHIME__IX_PENDING;
            ops[i].kill = (uint8_t)ev[i].kill;
        }
        for (int i = 0; i < n;) { /* in batches of any size */
            int b = 1 + (int)rng_below(&r, 100);
            b = b < n - i ? b : n - i;
            CHECK_EQ(chime__index_rebuild(ix, ops + i, (size_t)b), 0);
            i += b;
        }
        CHECK_EQ(chime__index_rebuild_done(ix), 0);
        uint64_t live = 0;
        for (int k = 0; k < KEYS; k++) {
            struct chime__ikey key;
            uint64_t v, due;
            key_of(ix, k, &key);
            int found = chime__index_get(ix, CHIME__IX_PENDING, &key, &v, &due);
            CHECK(found == (expect[k] != 0) && (!found || v == expect[k]),
                  "trial %d key %d: found %d (%llu), want %llu", trial, k, found,
                  (unsigned long long)(found ? v : 0), (unsigned long long)expect[k]);
            live += found;
        }
        CHECK_EQ(chime__index_count(ix, CHIME__IX_PENDING), live);
        chime__index_free(ix);
        close(fd);
    }
}

static const struct tap_test tests[] = {
    { "random_operations_agree_with_a_plain_array", random_operations_agree_with_a_plain_array },
    { "a_rebuild_reaches_the_same_state_in_any_order", a_rebuild_reaches_the_same_state_in_any_order },
};

int main(void)
{
    int rc = tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
    if (dir) {
        tmpdir_remove(dir);
        free(dir);
    }
    return rc;
}
