/* SPDX-License-Identifier: MIT */
/*
 * The levels' self-check (levels.h): a deliberately plain walk of everything, for the tests, kept
 * apart from the code it checks (levels.c).
 */
#include "wheel/levels.h"

#include "bits.h"

#define CHECK(cond, msg) \
    do {                 \
        if (!(cond))     \
            return msg;  \
    } while (0)

/* The queued removals (I7), located: the array and index each names. */
struct queued {
    uint32_t n;
    const struct chime__slot *arr[CHIME__PENDING];
    uint32_t at[CHIME__PENDING];
    uint32_t found; /* entries the walk found named by one */
};

static void locate_queued(const struct chime__levels *L, struct queued *q)
{
    q->n = L->npending < CHIME__PENDING ? L->npending : CHIME__PENDING;
    q->found = 0;
    for (uint32_t k = 0; k < q->n; k++) {
        q->arr[k] = chime__levels_queued(L, k);
        q->at[k] = L->pending_pos[k] & CHIME__POS_INDEX;
    }
}

/* Is entry j of a named by a queued removal? */
static bool queued_at(const struct queued *q, const struct chime__slot *a, uint32_t j)
{
    for (uint32_t k = 0; k < q->n; k++)
        if (q->arr[k] == a && q->at[k] == j)
            return true;
    return false;
}

/* Is entry j of a live: neither a tombstone nor queued for removal? */
static bool live_entry(const struct queued *q, const struct chime__slot *a, uint32_t j)
{
    return a->v[j] != CHIME__DEAD && !queued_at(q, a, j);
}

/* Walk one array: tombstones counted, every live entry names a node that says it is here, every
 * entry a queued removal names found (and not a tombstone). */
static const char *check_array(const struct chime__levels *L, struct queued *q, const struct chime__slot *a,
                               uint32_t pos_bits, uint32_t nodes_limit, size_t *live)
{
    uint32_t dead = 0;
    CHECK(a->len <= a->cap && (a->cap == 0) == (a->v == NULL), "array length or capacity wrong");
    for (uint32_t j = 0; j < a->len; j++) {
        uint32_t idx = a->v[j];
        if (idx == CHIME__DEAD) {
            dead++;
            continue;
        }
        CHECK(idx < nodes_limit, "entry names no node");
        if (queued_at(q, a, j)) {
            q->found++;
            continue;
        }
        CHECK((*chime__node_pos(L, idx) & ~CHIME__POS_OWNER) == (pos_bits | j),
              "node's pos does not name its entry");
        (*live)++;
    }
    CHECK(dead == a->dead, "tombstone count wrong");
    return NULL;
}

const char *chime__levels_check(const struct chime__levels *L, uint32_t nodes_limit)
{
    size_t live = 0;
    const char *err;
    bool mid_advance = L->advancing || L->partial;
    if (!mid_advance)
        CHECK(L->firing == CHIME__FIRING_NONE, "an array is being fired outside advance");
    CHECK(L->npending < CHIME__PENDING, "removal queue full: it should have been applied");
    CHECK(L->npending == 0 || L->firing == CHIME__FIRING_NONE, "removals queued while firing (I7)");
    struct queued q;
    locate_queued(L, &q);
    for (uint32_t k = 0; k < q.n; k++)
        for (uint32_t m = 0; m < k; m++)
            CHECK(q.arr[k] != q.arr[m] || q.at[k] != q.at[m], "two queued removals of one entry");

    const struct chime__slot *due = &L->due;
    if ((err = check_array(L, &q, due, CHIME__POS_DUE, nodes_limit, &live)))
        return err;
    if (L->firing != CHIME__FIRING_DUE) {
        CHECK(due->len == 0 || chime__slot_live(due) || L->firing == CHIME__FIRING_DUE,
          "due array holds only tombstones");
        CHECK(!chime__slot_wants_compaction(due), "due array not compacted");
    } else {
        CHECK(L->due_end <= due->len, "due_end beyond the due array");
        uint32_t tail = due->len - L->due_end, dead = 0;
        for (uint32_t j = L->due_end; j < due->len; j++)
            dead += due->v[j] == CHIME__DEAD;
        CHECK(dead == L->due_tail_dead, "due_tail_dead miscounts the due array's tail");
        CHECK(tail == 0 || dead < tail, "the due array's tail holds only tombstones");
        CHECK(dead <= CHIME__SLOT_MIN_DEAD || dead <= 2 * (tail - dead),
              "the due array's tail not compacted");
    }
    for (uint32_t j = 0; j < due->len; j++) {
        if (!live_entry(&q, due, j))
            continue;
        uint64_t d = *chime__node_deadline(L, due->v[j]);
        CHECK(d <= L->now, "due timer not due");
        CHECK(d >= L->due_min, "due_min above a due deadline");
    }
    /* Slots are visited through the bitmaps, so the walk costs O(bitmap words + entries) and can run
     * after every step of a randomised test. A slot holding timers whose bit is clear is still
     * caught: its timers are missing from the live count (chime__levels_check_slots finds the rest). */
    for (unsigned i = 0; i < L->nlevels; i++) {
        const struct chime__level *lv = &L->lv[i];
        CHECK(L->now - lv->base <= lv->last, "now outside its level's rotation");
        CHECK(lv->last == UINT64_MAX || lv->base % (lv->last + 1) == 0, "base not a rotation start");
        CHECK(L->limit[i] == (lv->base > UINT64_MAX - lv->last ? UINT64_MAX : lv->base + lv->last),
              "limit out of step with base");
        for (uint32_t word = 0; word < (lv->nslots + 63) / 64; word++) {
            CHECK((lv->words[word] != 0) == (lv->summary >> word & 1), "summary bit mismatch");
            for (uint64_t bits = lv->words[word]; bits; bits &= bits - 1) {
                uint32_t s = word * 64 + chime__ctz64(bits); /* bits != 0 */
                CHECK(s < lv->nslots, "bit set beyond the last slot");
                const struct chime__slot *sl = &lv->slots[s];
                if ((err = check_array(L, &q, sl, 0, nodes_limit, &live)))
                    return err;
                CHECK(chime__slot_live(sl) > 0, "slot bit set on a slot with no timer");
                CHECK(!chime__slot_wants_compaction(sl), "slot holds more tombstones than allowed");
                for (uint32_t j = 0; j < sl->len; j++) {
                    if (!live_entry(&q, sl, j))
                        continue;
                    uint64_t d = *chime__node_deadline(L, sl->v[j]);
                    CHECK(d > L->now || (mid_advance && d == L->now && i == 0), "timer in the wheel is due");
                    CHECK(d - lv->base <= lv->last, "timer outside its level's rotation");
                    CHECK(i == 0 || d - L->lv[i - 1].base > L->lv[i - 1].last, "timer fits a lower level");
                    CHECK((d - lv->base) / lv->span == s, "timer in the wrong slot");
                }
            }
        }
        CHECK((lv->summary != 0) == (L->occupied >> i & 1), "occupied bit mismatch");
    }
    CHECK((L->occupied >> L->nlevels) == 0, "occupied bit above the levels");
    if (L->firing == CHIME__FIRING_SLOT) { /* out of the bitmap while it fires (I6) */
        const struct chime__slot *sl = &L->lv[0].slots[L->firing_slot];
        CHECK(!(L->lv[0].words[L->firing_slot >> 6] >> (L->firing_slot & 63) & 1), "firing slot marked");
        if ((err = check_array(L, &q, sl, 0, nodes_limit, &live)))
            return err;
        for (uint32_t j = 0; j < sl->len; j++)
            CHECK(sl->v[j] == CHIME__DEAD || *chime__node_deadline(L, sl->v[j]) == L->now,
                  "a timer in the slot being fired is not due at now");
    }
    if (L->firing != CHIME__FIRING_NONE) {
        const struct chime__slot *a = L->firing == CHIME__FIRING_DUE ? due : &L->lv[0].slots[L->firing_slot];
        uint32_t end = L->firing == CHIME__FIRING_DUE ? L->due_end : a->len, left = 0;
        CHECK(L->cursor <= end && end <= a->len, "cursor beyond the array being fired");
        for (uint32_t j = 0; j < L->cursor; j++)
            CHECK(a->v[j] == CHIME__DEAD, "a live entry behind the cursor");
        for (uint32_t j = L->cursor; j < end; j++)
            left += a->v[j] != CHIME__DEAD;
        CHECK(left == L->firing_left, "firing_left wrong");
    } else {
        CHECK(L->firing_left == 0, "firing_left set outside firing");
    }
    CHECK(q.found == q.n, "a queued removal names no entry of a marked array");
    CHECK(live == L->live, "live count wrong");
    return NULL;
}

const char *chime__levels_check_slots(const struct chime__levels *L)
{
    for (unsigned i = 0; i < L->nlevels; i++) {
        const struct chime__level *lv = &L->lv[i];
        for (uint32_t s = 0; s < lv->nslots; s++) {
            bool bit = lv->words[s >> 6] >> (s & 63) & 1;
            bool firing = L->firing == CHIME__FIRING_SLOT && i == 0 && s == L->firing_slot;
            CHECK(bit || firing || lv->slots[s].len == 0, "an unmarked slot holds entries");
        }
    }
    return NULL;
}
