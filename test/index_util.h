/* SPDX-License-Identifier: MIT */
/* What the tests of the journal's key index share: an index opened alone in a test directory, the
 * keys they name by number, a whole store whose timers are all a day away, and a look at whether a
 * descriptor is one of the index's unnamed files (an O_TMPFILE: "/#123 (deleted)"). */
#ifndef CHIME_TEST_INDEX_UTIL_H
#define CHIME_TEST_INDEX_UTIL_H

#include "store_util.h"

#include <fcntl.h>
#include <stdatomic.h>

#include "rng.h"
#include "store/index.h"

/* An index in *dir (made as `name` on first use), its hash key drawn from r (so that CHIME_SEED
 * repeats its layout). */
static inline struct chime__index *index_open_in(char **dir, const char *name, int *fd,
                                                 struct rng *r)
{
    if (!*dir)
        *dir = tmpdir_make(name);
    *fd = open(*dir, O_RDONLY | O_DIRECTORY);
    CHECK(*fd >= 0, "open dir");
    struct chime__index *ix;
    CHECK_EQ(chime__index_open(&ix, *fd), 0);
    uint64_t k0 = rng_next(r);
    chime__index_set_hash_key(ix, k0, rng_next(r));
    return ix;
}

static inline void index_key_of(struct chime__index *ix, int i, struct chime__ikey *k)
{
    char name[16];
    int n = snprintf(name, sizeof name, "key-%d", i);
    chime__index_key(ix, name, (size_t)n, k);
}

static _Atomic int far_fired; /* set if a timer of open_far's store fired: none should */

static inline int64_t far_handler(void *ctx, const struct chime_fire *fire)
{
    (void)ctx;
    (void)fire;
    atomic_store(&far_fired, 1); /* every timer here is due a day ahead */
    return 0;
}

static inline chime_store *open_far(const char *path)
{
    struct chime_store_config cfg = { .path = path, .sync = CHIME_SYNC_INTERVAL };
    chime_store *s = NULL;
    int err = chime_store_open(&s, &cfg, far_handler, NULL);
    CHECK(err == 0, "open: %s", chime_strerror(err));
    return s;
}

static inline int is_index_file(int fd)
{
    return is_file(fd, "(deleted)") && is_file(fd, "/#");
}

/* Run the tests, then remove the directory index_open_in made, if any. */
static inline int index_tests_run(const struct tap_test *tests, int n, char **dir)
{
    int rc = tap_run(tests, n);
    if (*dir) {
        tmpdir_remove(*dir);
        free(*dir);
    }
    return rc;
}

#endif /* CHIME_TEST_INDEX_UTIL_H */
