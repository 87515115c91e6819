/* SPDX-License-Identifier: MIT */
/*
 * Rebuilding the key index at open (index.h, index.c "REBUILDING"): records applied in any order, a
 * key keeping its greatest version, live or ended; presized tables, or a spill to disk and one table
 * at a time when the tables would not fit in SPILL_OVER bytes; and the end of the rebuild, which
 * drops what ended and moves large tables into their files.
 */
#include <errno.h>
#include <stdatomic.h>

#include "store/index.h"
#include "store/index_impl.h"
#include "store/spill.h"

/* The spill's bucket of a stripe's table. */
static unsigned bucket_of(unsigned stripe, unsigned table)
{
    return stripe * 2 + table;
}

/* The slots a table needs for n entries: at most three quarters full, the most reserve() lets it be. */
static uint64_t cap_for(uint64_t n)
{
    uint64_t cap = MIN_SLOTS;
    while (n * 4 > cap * 3)
        cap *= 2;
    return cap;
}

/* Grow tb now to hold n entries without growing again (a table grows as it is filled otherwise,
 * rehashing everything it holds each time it doubles). */
static int presize_for(struct chime__index *ix, table_t *tb, uint64_t n)
{
    return tb->cap < cap_for(n) ? chime__index_resize(ix, tb, cap_for(n), 1) : 0;
}

int chime__index_presize(struct chime__index *ix, uint64_t n)
{
    uint64_t per = n / STRIPES + 1;
    /* The tables grow as they are built: spill them instead of holding them all. */
    if (cap_for(per) * sizeof(slot_t) * STRIPES > ix->spill_over)
        return ix->spill ? 0
                         : chime__spill_open(&ix->spill, ix->dir, STRIPES * 2, sizeof(slot_t),
                                             ix->spill_block);
    for (int i = 0; i < STRIPES; i++) {
        int err = presize_for(ix, &ix->stripes[i].t[CHIME__IX_PENDING], per);
        if (err)
            return err;
    }
    return 0;
}

/* One rebuild step: a put (kill 0) or an ending (kill 1) of `version` for k. The table is in
 * memory (building). */
static int rebuild_one(struct chime__index *ix, const struct chime__rebuild_op *op)
{
    table_t *tb = &ix->stripes[op->k.stripe].t[op->table];
    int err = chime__index_reserve_table(ix, tb);
    if (err)
        return err;
    uint64_t pos;
    slot_t cur;
    chime__itable_find(tb, &op->k.h, &pos, &cur); /* in memory: no error */
    slot_t *s = &tb->slots[pos];
    uint64_t known = s->version & ~ENDED;
    if (s->version && (op->kill ? known > op->version : known >= op->version))
        return 0; /* a greater version is known (or, for a put, this one): nothing changes */
    int was_live = s->version && !(s->version & ENDED), was_ended = (s->version & ENDED) != 0;
    if (s->version == 0)
        tb->used++;
    if (op->kill) {
        /* The put may come later in the reading order: remember that this version has ended. */
        *s = (slot_t){ op->k.h.lo, op->k.h.hi, op->version | ENDED, 0 };
        tb->ended += !was_ended;
        if (was_live)
            atomic_fetch_sub_explicit(&ix->live[op->table], 1, memory_order_relaxed);
    } else {
        *s = (slot_t){ op->k.h.lo, op->k.h.hi, op->version, op->due };
        tb->ended -= was_ended;
        if (!was_live)
            atomic_fetch_add_explicit(&ix->live[op->table], 1, memory_order_relaxed);
    }
    return 0;
}

/* Apply ops to the tables (in memory: building). */
static int apply(struct chime__index *ix, const struct chime__rebuild_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* a hint only: a table that grows meanwhile moves its slots */
        const table_t *tb = &ix->stripes[ops[i].k.stripe].t[ops[i].table];
        if (tb->slots)
            __builtin_prefetch(&tb->slots[ops[i].k.h.lo & (tb->cap - 1)], 1);
    }
    for (size_t i = 0; i < n; i++) {
        int err = rebuild_one(ix, &ops[i]);
        if (err)
            return err;
    }
    return 0;
}

int chime__index_rebuild(struct chime__index *ix, const struct chime__rebuild_op *ops, size_t n)
{
    if (!ix->spill)
        return apply(ix, ops, n);
    for (size_t i = 0; i < n; i++) { /* a record of the spill is the slot the op would write */
        slot_t rec = { ops[i].k.h.lo, ops[i].k.h.hi, ops[i].version | (ops[i].kill ? ENDED : 0),
                       ops[i].due };
        int err = chime__spill_add(ix->spill, bucket_of(ops[i].k.stripe, ops[i].table), &rec);
        if (err)
            return err;
    }
    return 0;
}

struct unspill {
    struct chime__index *ix;
    unsigned stripe, table;
};

/* chime__spill_fn: apply spilled records to their table, a batch at a time (apply fetches ahead). */
static int unspill_some(void *ctx, const void *recs, size_t n)
{
    const struct unspill *u = ctx;
    const slot_t *rec = recs;
    struct chime__rebuild_op ops[64];
    for (size_t i = 0; i < n;) {
        size_t m = n - i < 64 ? n - i : 64;
        for (size_t k = 0; k < m; k++, i++)
            ops[k] = (struct chime__rebuild_op){
                .k = { { rec[i].lo, rec[i].hi }, u->stripe },
                .version = rec[i].version & ~ENDED,
                .due = rec[i].due,
                .table = (uint8_t)u->table,
                .kill = (rec[i].version & ENDED) != 0,
            };
        int err = apply(u->ix, ops, m);
        if (err)
            return err;
    }
    return 0;
}

/* The end of a table's rebuild: drop what ended, or move it into its file if it belongs there. */
static int finish(struct chime__index *ix, table_t *tb)
{
    uint64_t cap = MIN_SLOTS;
    while ((tb->used - tb->ended + 1) * 2 > cap)
        cap *= 2;
    /* Drop what ended, size the table for what is left; or size down a table presized for many
     * more keys than it holds (presize counts a key per 144 bytes of journal: payloads and garbage
     * not merged away yet make that far more than there are), which would otherwise stay that size,
     * in a file, for good. At most an eighth full: a table sized by presize for what it holds is
     * 3/8 to 3/4 full. */
    if (tb->ended > tb->used / 4 || (tb->cap && cap * 4 <= tb->cap))
        return chime__index_resize(ix, tb, cap, 0);
    if (tb->slots && chime__index_in_file(ix, tb->cap))
        return chime__itable_to_file(tb, ix->dir, ix->batch);
    return 0;
}

int chime__index_rebuild_done(struct chime__index *ix)
{
    int err = 0;
    for (unsigned i = 0; !err && i < STRIPES; i++)
        for (unsigned t = 0; !err && t < 2; t++) {
            if (ix->spill) { /* fill this table alone from its bucket, then finish it */
                struct unspill u = { ix, i, t };
                ix->building = 1;
                /* Sized for half its bucket's records: a replaced key has three (its put, the
                 * put that replaced it and that one's kill of it), a key put once one. Sized for
                 * them all, the table would be twice too large for the usual journal, in memory
                 * and in its file; too small, it grows once more, as it did before every time. */
                err = presize_for(ix, &ix->stripes[i].t[t],
                                  chime__spill_count(ix->spill, bucket_of(i, t)) / 2);
                if (!err)
                    err = chime__spill_read(ix->spill, bucket_of(i, t), unspill_some, &u);
            }
            ix->building = 0;
            if (!err)
                err = finish(ix, &ix->stripes[i].t[t]);
        }
    ix->building = 0;
    chime__spill_free(ix->spill);
    ix->spill = NULL;
    return err;
}
