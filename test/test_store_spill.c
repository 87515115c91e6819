/* SPDX-License-Identifier: MIT */
/*
 * The spill (lib/store/spill.c): records come back per bucket, in the order they were added, whole,
 * however they fell into blocks; and the failures of its file (made by io.h's fault hook) are
 * reported, lose nothing that was reported added, and leak nothing (ASan and valgrind run this).
 * CHIME_SEED repeats a run.
 */
#include "store_util.h"

#include <fcntl.h>
#include <stdatomic.h>

#include "rng.h"
#include "store/spill.h"

enum { BUCKETS = 5, PER_BLOCK = 4 };

struct rec {
    uint32_t bucket, seq; /* seq: the n-th record added to its bucket */
    uint64_t check;       /* a function of both, so that a record read back whole can be told */
};

static uint64_t check_of(uint32_t bucket, uint32_t seq)
{
    return ((uint64_t)bucket << 32 | seq) * UINT64_C(0x9e3779b97f4a7c15);
}

static struct rec rec_of(uint32_t bucket, uint32_t seq)
{
    return (struct rec){ bucket, seq, check_of(bucket, seq) };
}

/* Reads a bucket back, checking each record against the next one expected. */
struct reading {
    uint32_t bucket, next;
    int bad;      /* the first record that was not the one expected, + 1 */
    int stop_at;  /* > 0: return -ECANCELED once this many records were seen */
    size_t calls; /* how many times fn was called */
};

static int take(void *ctx, const void *recs, size_t n)
{
    struct reading *rd = ctx;
    const struct rec *r = recs;
    rd->calls++;
    CHECK(n > 0 && n <= PER_BLOCK, "a call with %zu records", n);
    for (size_t i = 0; i < n; i++) {
        if (!rd->bad && (r[i].bucket != rd->bucket || r[i].seq != rd->next ||
                         r[i].check != check_of(rd->bucket, rd->next)))
            rd->bad = (int)rd->next + 1;
        rd->next++;
        if (rd->stop_at && (int)rd->next == rd->stop_at)
            return -ECANCELED;
    }
    return 0;
}

static char *dir;
static int dirfd_;

static struct chime__spill *open_spill(void)
{
    struct chime__spill *s;
    CHECK_EQ(chime__spill_open(&s, dirfd_, BUCKETS, sizeof(struct rec), PER_BLOCK), 0);
    return s;
}

static void records_come_back_per_bucket_in_the_order_they_were_added(void)
{
    struct rng r = { rng_seed("test_store_spill") };
    for (int round = 0; round < 20; round++) {
        struct chime__spill *s = open_spill();
        uint32_t added[BUCKETS] = { 0 };
        /* Counts around block boundaries: none, less than a block, exactly k blocks, and more. */
        int total = (int)rng_below(&r, 6 * BUCKETS * PER_BLOCK);
        for (int i = 0; i < total; i++) {
            uint32_t b = (uint32_t)rng_below(&r, BUCKETS);
            struct rec x = rec_of(b, added[b]++);
            CHECK_EQ(chime__spill_add(s, b, &x), 0);
        }
        for (uint32_t b = 0; b < BUCKETS; b++)
            CHECK_EQ(chime__spill_count(s, b), added[b]);
        for (uint32_t k = 0; k < BUCKETS; k++) { /* in an order of their own */
            uint32_t b = (k * 3 + (uint32_t)round) % BUCKETS;
            struct reading rd = { .bucket = b };
            CHECK_EQ(chime__spill_read(s, b, take, &rd), 0);
            CHECK(!rd.bad, "round %d bucket %u: record %d came back wrong", round, b, rd.bad - 1);
            CHECK_EQ(rd.next, added[b]);
            CHECK_EQ(rd.calls, (added[b] + PER_BLOCK - 1) / PER_BLOCK); /* a block at a time */
            CHECK_EQ(chime__spill_count(s, b), 0);
        }
        chime__spill_free(s);
    }
}

/* Adds records to bucket 1 until one fails, with the fault armed. Return: how many were added. */
static uint32_t add_until_failure(struct chime__spill *s, uint32_t from)
{
    uint32_t seq = from;
    for (;;) {
        struct rec x = rec_of(1, seq);
        int err = chime__spill_add(s, 1, &x);
        if (err) {
            CHECK_EQ(err, -EIO);
            return seq - from;
        }
        seq++;
        CHECK(seq - from <= 2 * PER_BLOCK, "no block written after %u records", seq - from);
    }
}

static void a_failed_block_write_adds_nothing_and_the_next_try_goes_on(void)
{
    for (int op = 0; op < 2; op++) { /* the file's creation, then a block's write */
        struct io_fault f = { 1, op ? CHIME_IO_WRITE : CHIME_IO_OPEN, 0 };
        struct chime__spill *s = open_spill();
        uint32_t n = 0;
        if (op) { /* a first block written, so that the file exists */
            atomic_store(&f.armed, 0);
            for (; n < PER_BLOCK + 1; n++) {
                struct rec x = rec_of(1, n);
                CHECK_EQ(chime__spill_add(s, 1, &x), 0);
            }
            atomic_store(&f.armed, 1);
        }
        chime__io_set_fault(io_fault_fail, &f);
        n += add_until_failure(s, n);
        CHECK(atomic_load(&f.hits) == 1, "op %d: the fault was met %ld times", op, atomic_load(&f.hits));
        CHECK_EQ(chime__spill_count(s, 1), n); /* the failed record was not added */
        atomic_store(&f.armed, 0);
        for (uint32_t i = 0; i < 3; i++, n++) { /* it can be added again, and more after it */
            struct rec x = rec_of(1, n);
            CHECK_EQ(chime__spill_add(s, 1, &x), 0);
        }
        chime__io_set_fault(NULL, NULL);
        struct reading rd = { .bucket = 1 };
        CHECK_EQ(chime__spill_read(s, 1, take, &rd), 0);
        CHECK(!rd.bad, "op %d: record %d came back wrong", op, rd.bad - 1);
        CHECK_EQ(rd.next, n);
        chime__spill_free(s);
    }
}

static void a_failed_read_or_a_callers_error_stops_the_read_and_empties_the_bucket(void)
{
    for (int how = 0; how < 2; how++) { /* a read error, then the callback's own */
        struct chime__spill *s = open_spill();
        for (uint32_t i = 0; i < 3 * PER_BLOCK + 1; i++) {
            struct rec x = rec_of(2, i);
            CHECK_EQ(chime__spill_add(s, 2, &x), 0);
        }
        struct io_fault f = { how == 0, CHIME_IO_READ, 0 };
        chime__io_set_fault(io_fault_fail, &f);
        struct reading rd = { .bucket = 2, .stop_at = how ? PER_BLOCK + 2 : 0 };
        CHECK_EQ(chime__spill_read(s, 2, take, &rd), how ? -ECANCELED : -EIO);
        chime__io_set_fault(NULL, NULL);
        CHECK_EQ(rd.next, how ? (uint32_t)PER_BLOCK + 2 : 0);
        CHECK_EQ(chime__spill_count(s, 2), 0);
        chime__spill_free(s);
    }
}

static void bad_sizes_are_refused(void)
{
    struct chime__spill *s = NULL;
    CHECK_EQ(chime__spill_open(&s, dirfd_, 0, 8, 4), -EINVAL);
    CHECK_EQ(chime__spill_open(&s, dirfd_, 1, 0, 4), -EINVAL);
    CHECK_EQ(chime__spill_open(&s, dirfd_, 1, 8, 0), -EINVAL);
    CHECK(s == NULL, "a refused open set its result");
    chime__spill_free(NULL);
}

static const struct tap_test tests[] = {
    { "records_come_back_per_bucket_in_the_order_they_were_added",
      records_come_back_per_bucket_in_the_order_they_were_added },
    { "a_failed_block_write_adds_nothing_and_the_next_try_goes_on",
      a_failed_block_write_adds_nothing_and_the_next_try_goes_on },
    { "a_failed_read_or_a_callers_error_stops_the_read_and_empties_the_bucket",
      a_failed_read_or_a_callers_error_stops_the_read_and_empties_the_bucket },
    { "bad_sizes_are_refused", bad_sizes_are_refused },
};

int main(void)
{
    dir = tmpdir_make("spill");
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dirfd_ >= 0, "open %s", dir);
    int rc = tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
    close(dirfd_);
    tmpdir_remove(dir);
    free(dir);
    return rc;
}
