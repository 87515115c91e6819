/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: arbitrary bytes drive one wheel through a sequence of schedule, periodic
 * schedule, cancel, reschedule, forged-id, next, advance and bounded advance (the threaded
 * runtime's: at most a few callbacks per call, the rest of a tick left for the next call)
 * operations, checked against the
 * reference model (test/reference.h) and the wheel's self-check after every step. Any disagreement
 * aborts with a message, which libFuzzer reports with the input that caused it.
 *
 * The first bytes choose a layout (a preset, or levels and slot counts of the input's own), a start
 * time, and whether memory runs out: in that mode the N-th allocation from some point fails (and,
 * with callbacks acting, what the input says of theirs), a call must return -ENOMEM if and only if
 * an allocation failed in it, having changed nothing, and an advance may stop early, which the
 * reference takes as a bounded advance that stopped there; firings stay checked one by one, and
 * once memory is back everything is advanced to the end of time. In one input in four, callbacks
 * act on the wheel during the advance (schedule, cancel, reschedule: the re-entrant mode below),
 * and the reference applies the same actions at the same point of its own firing sequence.
 *
 * Build and run: see .ci/run (clang, -Dfuzz=enabled); `fuzz_wheel -max_total_time=60 CORPUS`.
 * test/fuzz/corpus/ holds inputs that once failed; CI starts from them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc.h"
#include "chime.h"
#include "reference.h"
#include "wheel/wheel.h"

#define MAX_LIVE 512 /* the reference is O(n) per operation: keep it quick */
#define MAX_STEPS 2048
#define MAX_TAGS (4 * MAX_STEPS) /* timers made in all, callbacks' included */

#define EXPECT(cond, ...)                                  \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "fuzz_wheel: " __VA_ARGS__);   \
            fputc('\n', stderr);                           \
            abort();                                       \
        }                                                  \
    } while (0)

/* ---- reading the input ---- */

struct input {
    const uint8_t *p, *end;
};

static uint64_t take(struct input *in, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes && in->p < in->end; i++)
        v = v << 8 | *in->p++;
    return v;
}

/* A distance from now: mostly small, sometimes a level's rotation away, sometimes enormous. */
static uint64_t distance(struct input *in)
{
    uint8_t kind = (uint8_t)take(in, 1);
    switch (kind >> 6) {
    case 0: return kind & 63;                   /* a few ticks */
    case 1: return take(in, 2);                 /* up to a minute of ms */
    case 2: return take(in, 4);                 /* up to 50 days of ms */
    default: return take(in, 8) >> (kind & 63); /* anywhere up to 2^64 */
    }
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ---- what the callbacks record ---- */

static chime_wheel *wheel;
static struct ref_fired *got;
static size_t ngot, got_cap;
static uint64_t ntags;                     /* tags handed out: 1 to ntags */
static uint64_t deadline_of[MAX_TAGS + 1]; /* by tag: a firing before it is early */
static void act(uint64_t tag);

/* ---- re-entrant mode: callbacks that act on the wheel ----
 *
 * A timer marked `acting` reads, each time it fires, up to four actions from the input and
 * applies them to the wheel from inside its callback: schedule a one-shot or periodic timer (which
 * may act in turn), cancel or reschedule a timer by tag (one made recently, any one, or itself),
 * advance (which must do nothing from a callback), or look at pending() and next(). Each action
 * and what the wheel answered is logged; the reference's hook (replay) applies the same action at
 * the same firing of its own sequence, computing deadlines from its own now, and checks the
 * answers. The mode is chosen by the mode byte.
 *
 * A cancel or reschedule is often aimed at a timer the reference says is due in this advance and
 * not fired yet (due_pick): the firing loop holds those in the array it walks, which is where a
 * cancel must stop a firing and a reschedule must move it.
 *
 * With memory failures (oom), a callback's schedule or reschedule may be made to fail (a byte of
 * input), besides the run's one failure, which may fall anywhere: in a callback's call, in a
 * cascade or a re-arm. Whether a call's allocation failed is known (the countdown ran out during
 * it): the call must then return -ENOMEM, else not, and the reference applies nothing for it. An
 * advance that stops early is taken as a bounded one that stopped after as many firings, so the
 * firings and the pending count stay exactly checked. */
enum { ACT_NONE, ACT_SCHEDULE, ACT_SCHEDULE2, ACT_EVERY, ACT_CANCEL, ACT_RESCHEDULE, ACT_SELF,
       ACT_CALL };

struct cb_act {
    size_t firing;        /* index in got[] of the firing whose callback acted */
    unsigned kind, dmode; /* ACT_SELF is logged as ACT_CANCEL or ACT_RESCHEDULE */
    uint64_t raw, period; /* the deadline's input (cb_deadline), the new timer's period */
    uint64_t tag;         /* the new timer's, or the target's */
    chime_id id;          /* the new timer's id, or the target's */
    uint64_t d;           /* the deadline the wheel was given */
    int rc;               /* what the wheel returned (ACT_CALL: next()) */
    bool failed;          /* an allocation failed during the call */
    uint64_t pending, next; /* ACT_CALL: what the wheel said */
};

static bool reentrant, oom;
static struct input *cb_in; /* where callbacks read their actions */
static uint64_t serial, adv_to;            /* advances begun; the running one's target */
static uint64_t fired_in[MAX_TAGS + 1];    /* by tag: the advance it last fired in */
static uint64_t due_tag[MAX_TAGS], ndue;   /* due in the running advance, by the reference */
static bool acting[MAX_TAGS + 1];
static chime_id id_of[MAX_TAGS + 1];
static struct cb_act *acts;
static size_t nacts, acts_cap, replayed, replayed_acts;

/* A deadline relative to now (now: chime_wheel_now() inside the callback, or the reference's). */
static uint64_t cb_deadline(uint64_t now, unsigned dmode, uint64_t raw)
{
    switch (dmode) {
    case 0: return sat_add(now, raw);                       /* later, or now if raw is 0 */
    case 1: return now - (raw % 256 < now ? raw % 256 : now); /* at or before now */
    case 2: return now;                                     /* the tick being fired */
    default: return raw;                                    /* absolute: often in the past */
    }
}

static uint64_t cb_raw(unsigned dmode)
{
    return dmode == 1 ? take(cb_in, 1) : dmode == 2 ? 0 : distance(cb_in);
}

/* An advance to `to` begins: note what the reference will fire in it (every timer keyed by then:
 * what the last call's callbacks made due included). Callbacks add what they make due later. */
static void begin_advance(const struct ref *r, uint64_t to)
{
    serial++;
    adv_to = to;
    for (ndue = 0; ndue < r->n && r->v[ndue].key <= to; ndue++)
        due_tag[ndue] = r->v[ndue].tag;
}

static void note_due(uint64_t tag)
{
    fired_in[tag] = 0; /* a periodic timer that fired may be made due again */
    if (ndue < MAX_TAGS)
        due_tag[ndue++] = tag;
}

/* A timer due in this advance and not fired in it yet, from u: the next one to fire, or any; 0 if
 * there is none (or it was cancelled since: the wheel must answer -ENOENT). */
static uint64_t due_pick(uint64_t u)
{
    uint64_t left = 0, k;
    for (size_t i = 0; i < ndue; i++)
        left += fired_in[due_tag[i]] != serial;
    if (!left)
        return 0;
    k = u & 0x100 ? 0 : u % left;
    for (size_t i = 0;; i++)
        if (fired_in[due_tag[i]] != serial && k-- == 0)
            return due_tag[i];
}

static long countdown(void)
{
    return atomic_load(&chime__alloc_fail_countdown);
}

/* With oom, maybe make the k-th allocation of the call a callback is about to make fail: mostly
 * the first (most calls make one allocation at most, a slot's first array), else up to the fourth;
 * the run's countdown is put back after it (end_call_mem). Return: the countdown the call starts
 * with. */
static long arm(long *saved)
{
    *saved = countdown();
    uint8_t f = oom ? (uint8_t)take(cb_in, 1) : 0;
    if (f & 0x80)
        chime__alloc_fail_after(f & 0x60 ? 0 : f & 3);
    return countdown();
}

/* Whether an allocation failed since the countdown read `before`: it ran out. */
static bool failed_since(long before)
{
    return before >= 0 && countdown() < 0;
}

/* The call is over: whether an allocation failed in it; the run's countdown back if arm() set
 * another (when it set the same value, the call counted down the run's: the same thing). */
static bool end_call_mem(long before, long saved)
{
    bool failed = failed_since(before);
    if (before != saved)
        chime__alloc_fail_after(saved);
    return failed;
}

static void log_act(const struct cb_act *a)
{
    if (nacts == acts_cap) {
        acts_cap = acts_cap ? 2 * acts_cap : 64;
        acts = realloc(acts, acts_cap * sizeof(*acts));
        EXPECT(acts, "out of memory");
    }
    acts[nacts++] = *a;
}

static void record(void *arg)
{
    uintptr_t tag = (uintptr_t)arg;
    EXPECT(chime_wheel_now(wheel) >= deadline_of[tag], "timer %zu fired at %" PRIu64 ", before %"
           PRIu64, (size_t)tag, chime_wheel_now(wheel), deadline_of[tag]);
    if (ngot == got_cap) {
        got_cap = got_cap ? 2 * got_cap : 256;
        got = realloc(got, got_cap * sizeof(*got));
        EXPECT(got, "out of memory");
    }
    got[ngot++] = (struct ref_fired){ .tag = tag, .now = chime_wheel_now(wheel) };
    fired_in[tag] = serial;
    if (reentrant && acting[tag])
        act(tag);
}

static void act(uint64_t self)
{
    for (int k = 0; k < 4; k++) {
        uint8_t b = (uint8_t)take(cb_in, 1);
        uint64_t now = chime_wheel_now(wheel), u;
        long saved, before;
        struct cb_act a = { .firing = ngot - 1, .kind = b & 7, .dmode = (b >> 3) & 3 };
        switch (a.kind) {
        case ACT_NONE:
            return;
        case ACT_SCHEDULE: case ACT_SCHEDULE2: case ACT_EVERY:
            if (ntags == MAX_TAGS || chime_wheel_pending(wheel) >= MAX_LIVE)
                return;
            a.kind = a.kind == ACT_EVERY ? ACT_EVERY : ACT_SCHEDULE;
            a.raw = cb_raw(a.dmode);
            a.d = cb_deadline(now, a.dmode, a.raw);
            a.period = a.kind == ACT_EVERY ? 1 + distance(cb_in) % (UINT64_C(1) << 40) : 0;
            a.tag = ++ntags;
            deadline_of[a.tag] = a.d;
            acting[a.tag] = b & 0x40;
            before = arm(&saved);
            a.rc = a.period ? chime_wheel_schedule_every(wheel, a.d, a.period, record,
                                                         (void *)(uintptr_t)a.tag, &a.id)
                            : chime_wheel_schedule(wheel, a.d, record, (void *)(uintptr_t)a.tag,
                                                   &a.id);
            a.failed = end_call_mem(before, saved);
            EXPECT(a.rc == (a.failed ? -ENOMEM : 0) && (a.rc || a.id), "callback of %" PRIu64
                   ": schedule returned %d (an allocation %s)", self, a.rc,
                   a.failed ? "failed" : "did not fail");
            id_of[a.tag] = a.id;
            if (a.rc == 0 && a.d > now && a.d <= adv_to)
                note_due(a.tag);
            break;
        case ACT_CANCEL: case ACT_RESCHEDULE: case ACT_SELF:
            if (a.kind == ACT_SELF) {
                a.tag = self;
                a.kind = b & 0x40 ? ACT_RESCHEDULE : ACT_CANCEL;
            } else { /* mostly one of the latest timers, else often one due in this advance */
                uint64_t t = take(cb_in, 1);
                if (t < 0x80)
                    a.tag = ntags - t % ntags;
                else if (u = take(cb_in, 2), !(t & 0x60) || !(a.tag = due_pick(u)))
                    a.tag = 1 + u % ntags;
            }
            a.id = id_of[a.tag];
            if (a.kind == ACT_CANCEL) {
                a.rc = chime_wheel_cancel(wheel, a.id);
            } else {
                a.raw = cb_raw(a.dmode);
                a.d = cb_deadline(now, a.dmode, a.raw);
                before = arm(&saved);
                a.rc = chime_wheel_reschedule(wheel, a.id, a.d);
                a.failed = end_call_mem(before, saved);
                EXPECT(a.rc != -ENOMEM || a.failed, "callback of %" PRIu64 ": reschedule returned"
                       " -ENOMEM, no allocation failed", self);
                if (a.rc == 0)
                    deadline_of[a.tag] = a.d;
                if (a.rc == 0 && a.d > now && a.d <= adv_to)
                    note_due(a.tag);
            }
            break;
        default: /* ACT_CALL: an advance does nothing from a callback; pending() and next() */
            if (b & 0x40) {
                uint64_t to = sat_add(now, distance(cb_in));
                size_t n = ngot, ran = chime_wheel_advance(wheel, to);
                EXPECT(ran == 0 && ngot == n && chime_wheel_now(wheel) == now,
                       "callback of %" PRIu64 ": advance to %" PRIu64 " ran %zu", self, to, ran);
                break;
            }
            a.pending = chime_wheel_pending(wheel);
            a.rc = chime_wheel_next(wheel, &a.next);
            break;
        }
        if (a.kind != ACT_CALL || !(b & 0x40))
            log_act(&a);
        if (!(b & 0x80))
            return;
    }
}

/* The reference's hook: the wheel's callbacks have run (the wheel advances first); check that this
 * firing is the wheel's next one and apply what its callback did, from the reference's own now. */
static void replay(struct ref *r, const struct ref_timer *t, void *arg)
{
    (void)arg;
    size_t k = replayed++;
    uint64_t first;
    EXPECT(k < ngot && got[k].tag == t->tag && got[k].now == r->now, "firing %zu: reference fires"
           " timer %" PRIu64 " at %" PRIu64 ", the wheel %" PRIu64 " at %" PRIu64, k, t->tag,
           r->now, k < ngot ? got[k].tag : 0, k < ngot ? got[k].now : 0);
    for (; replayed_acts < nacts && acts[replayed_acts].firing == k; replayed_acts++) {
        const struct cb_act *a = &acts[replayed_acts];
        uint64_t d = cb_deadline(r->now, a->dmode, a->raw);
        long i = a->kind == ACT_SCHEDULE || a->kind == ACT_EVERY ? -1 : ref_find(r, a->id);
        switch (a->kind) {
        case ACT_SCHEDULE: case ACT_EVERY: /* a failed one (-ENOMEM, checked) did nothing */
            EXPECT(a->d == d && (a->rc || ref_find(r, a->id) < 0), "firing %zu: schedule at %"
                   PRIu64 " (reference %" PRIu64 ") or id reused while live", k, a->d, d);
            if (a->rc == 0)
                ref_schedule(r, d, a->period, a->id, a->tag);
            break;
        case ACT_CANCEL: case ACT_RESCHEDULE: /* -ENOMEM iff an allocation failed in it */
            EXPECT(a->rc == (i < 0 ? -ENOENT : a->failed ? -ENOMEM : 0), "firing %zu: %s of timer %"
                   PRIu64 " returned %d, reference %s%s", k, a->kind == ACT_CANCEL ? "cancel" :
                   "reschedule", a->tag, a->rc, i >= 0 ? "pending" : "not pending",
                   a->failed ? ", an allocation failed" : "");
            if (i >= 0 && a->kind == ACT_CANCEL)
                ref_remove(r, (size_t)i);
            else if (i >= 0 && a->rc == 0)
                ref_reschedule(r, (size_t)i, d);
            break;
        default:
            EXPECT(a->pending == r->n, "firing %zu: pending %" PRIu64 " in a callback, reference "
                   "%zu", k, a->pending, r->n);
            /* a value <= now says "advance now" (chime.h): from a callback, with timers left to
             * fire at now, the wheel says now even when a timer made due earlier in this call
             * has an earlier key */
            first = r->n && r->v[0].key > r->now ? r->v[0].key : r->now;
            EXPECT(r->n ? a->rc == 0 && a->next <= first : a->rc == -ENOENT, "firing %zu: next in"
                   " a callback %d %" PRIu64 ", reference's earliest %" PRIu64 " (now %" PRIu64 ")",
                   k, a->rc, a->next, r->n ? r->v[0].key : 0, r->now);
            break;
        }
    }
}

static const struct chime_wheel_config presets[] = {
    { CHIME_LAYOUT_MILLISECONDS },
    { CHIME_LAYOUT_SECONDS },
    { .levels = 1, .slots = { 2 } },
    { .levels = 3, .slots = { 2, 2, 2 } },
    { .levels = 4, .slots = { 3, 5, 7, 2 } },
    { .levels = 2, .slots = { 64, 64 } },
    { .levels = 1, .slots = { 3600 } },
    { .levels = 8, .slots = { 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096 } },
};

static void layout(struct input *in, struct chime_wheel_config *c)
{
    uint8_t b = (uint8_t)take(in, 1);
    if (b < 0xc0) {
        *c = presets[b % (sizeof(presets) / sizeof(presets[0]))];
    } else { /* the input's own: 1 to 8 levels of 2 to 4096 slots */
        *c = (struct chime_wheel_config){ .levels = 1 + b % CHIME_MAX_LEVELS };
        for (unsigned i = 0; i < c->levels; i++)
            c->slots[i] = 2 + (uint32_t)(take(in, 2) % (CHIME_MAX_SLOTS - 1));
    }
    c->start = take(in, 1) & 1 ? take(in, 8) >> (take(in, 1) & 63) : 0;
}

/* The n firings of the wheel's advance, got[before..], are the reference's nwant. */
static void same_firings(size_t step, size_t before, size_t n, const struct ref_fired *want,
                         size_t nwant)
{
    EXPECT(n == ngot - before && n == nwant, "step %zu: advance fired %zu (ran %zu), reference %zu",
           step, n, ngot - before, nwant);
    for (size_t k = 0; k < n; k++)
        EXPECT(got[before + k].tag == want[k].tag && got[before + k].now == want[k].now, "step %zu:"
               " firing %zu is timer %" PRIu64 " at %" PRIu64 ", reference %" PRIu64 " at %"
               PRIu64, step, k, got[before + k].tag, got[before + k].now, want[k].tag, want[k].now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = { data, data + size };
    struct chime_wheel_config cfg;
    layout(&in, &cfg);
    uint8_t mode = (uint8_t)take(&in, 1);
    oom = (mode & 7) == 7; /* one input in eight runs out of memory */
    long fail_at = oom ? (long)take(&in, 2) % 512 : -1;
    reentrant = (mode & 0x18) == 0x18; /* one in four */
    cb_in = &in;

    EXPECT(chime_wheel_new(&wheel, &cfg) == 0, "chime_wheel_new failed");
    struct ref ref;
    ref_init(&ref, cfg.start);
    if (reentrant)
        ref.on_fire = replay;
    struct ref_fired *want = NULL;
    size_t want_cap = 0, ndead = 0, dead_cap = 0;
    uint64_t *dead = NULL;
    ngot = ntags = nacts = replayed = replayed_acts = ndue = 0;
    chime__alloc_fail_after(fail_at);

    for (size_t step = 0; step < MAX_STEPS && in.p < in.end; step++) {
        uint64_t now = ref.now;
        uint8_t op = (uint8_t)take(&in, 1);
        if (op < 80 && ref.n < MAX_LIVE && ntags < MAX_TAGS) { /* schedule, one in five periodic */
            uint64_t back = op % 16 == 0 ? take(&in, 1) : 0; /* in the past: due at once */
            uint64_t d = back ? (back > now ? 0 : now - back) : sat_add(now, distance(&in));
            uint64_t period = op % 5 == 0 ? 1 + distance(&in) % (UINT64_C(1) << 40) : 0;
            chime_id id = 0;
            uint64_t tag = ++ntags;
            long before = countdown();
            int rc = period ? chime_wheel_schedule_every(wheel, d, period, record, (void *)(uintptr_t)tag, &id)
                            : chime_wheel_schedule(wheel, d, record, (void *)(uintptr_t)tag, &id);
            EXPECT(rc == (failed_since(before) ? -ENOMEM : 0), "step %zu: schedule returned %d",
                   step, rc);
            deadline_of[tag] = d;
            acting[tag] = reentrant && op & 32;
            id_of[tag] = id;
            if (rc == 0) {
                EXPECT(id != 0 && ref_find(&ref, id) < 0, "step %zu: id 0 or reused while live", step);
                ref_schedule(&ref, d, period, id, tag);
            }
        } else if (op < 130 && ref.n) { /* cancel or reschedule a live timer */
            size_t i = take(&in, 2) % ref.n;
            uint64_t h = ref.v[i].handle;
            if (op < 110) {
                EXPECT(chime_wheel_cancel(wheel, h) == 0, "step %zu: cancel of a live id", step);
                ref_remove(&ref, i);
                if (ndead == dead_cap) { /* the same array ref_advance adds fired ids to */
                    dead_cap = dead_cap ? 2 * dead_cap : 64;
                    dead = realloc(dead, dead_cap * sizeof(*dead));
                    EXPECT(dead, "out of memory");
                }
                dead[ndead++] = h;
            } else {
                uint64_t d = sat_add(now, distance(&in));
                long before = countdown();
                int rc = chime_wheel_reschedule(wheel, h, d);
                EXPECT(rc == (failed_since(before) ? -ENOMEM : 0), "step %zu: reschedule returned "
                       "%d", step, rc);
                if (rc == 0) {
                    deadline_of[ref.v[i].tag] = d;
                    ref_reschedule(&ref, i, d);
                }
            }
        } else if (op < 145 && !oom) { /* a dead or forged id */
            uint64_t h = ndead && op & 1 ? dead[take(&in, 2) % ndead] : take(&in, 8);
            if (ref_find(&ref, h) < 0) {
                int rc = op & 2 ? chime_wheel_cancel(wheel, h) : chime_wheel_reschedule(wheel, h, now);
                EXPECT(rc == -ENOENT, "step %zu: dead id %" PRIx64 " gave %d", step, h, rc);
            }
        } else if (op < 160) { /* next: never later than the earliest timer */
            uint64_t when = 0;
            int rc = chime_wheel_next(wheel, &when);
            if (!ref.n)
                EXPECT(rc == -ENOENT, "step %zu: next found a timer in an empty wheel", step);
            else
                EXPECT(rc == 0 && when <= ref.v[0].key, "step %zu: next %d %" PRIu64 " after %" PRIu64,
                       step, rc, when, ref.v[0].key);
        } else if (op < 185 && !oom) { /* a bounded advance, as the threaded runtime makes */
            uint64_t target = sat_add(now, distance(&in));
            size_t limit = (size_t)take(&in, 1) % 8, before = ngot;
            bool done = false;
            if (reentrant)
                begin_advance(&ref, target);
            size_t n = chime__wheel_advance_some(wheel, target, limit, &done);
            size_t nwant = ref_advance_some(&ref, target, limit, &want, &want_cap, &dead, &ndead,
                                            &dead_cap);
            EXPECT(n <= limit, "step %zu: advance_some fired %zu, limit %zu", step, n, limit);
            same_firings(step, before, n, want, nwant);
            uint64_t at = chime_wheel_now(wheel);
            size_t first = 0; /* what callbacks made due waits for the next call */
            while (first < ref.n && ref.v[first].next_call)
                first++;
            if (done) { /* everything due by target has fired */
                EXPECT(at == target && (first == ref.n || ref.v[first].key > target), "step %zu: "
                       "done at %" PRIu64 " short of %" PRIu64 " or with timers due", step, at,
                       target);
            } else { /* stopped at the limit, at the last firing's tick (where it began if none) */
                EXPECT(n == limit && at == (n ? want[n - 1].now : now), "step %zu: paused at %"
                       PRIu64 " after %zu firings", step, at, n);
            }
            ref_stop_at(&ref, at); /* later schedules are placed against the wheel's time */
        } else { /* advance, by a little or a lot, or backwards */
            uint64_t target = op < 250 ? sat_add(now, distance(&in)) : now - (now > 0);
            size_t before = ngot, nwant;
            bool done = true;
            if (reentrant)
                begin_advance(&ref, target);
            size_t n = oom ? chime__wheel_advance_some(wheel, target, SIZE_MAX, &done)
                           : chime_wheel_advance(wheel, target);
            /* Out of memory, an advance may stop early (a cascade or a re-arm failed), with its
             * time where it stopped, and the rest of a tick cut short fires first in the next
             * call: a bounded advance that stopped after its n firings. The reference fires as
             * many, re-arms periodic timers after target as the wheel does, and takes its time,
             * against which later schedules are placed. */
            nwant = ref_advance_some(&ref, target, done ? SIZE_MAX : n, &want, &want_cap, &dead,
                                     &ndead, &dead_cap);
            if (!done && target >= now)
                ref_stop_at(&ref, chime_wheel_now(wheel));
            same_firings(step, before, n, want, nwant);
        }
        EXPECT(!reentrant || (replayed == ngot && replayed_acts == nacts), "step %zu: the wheel"
               " fired %zu and its callbacks acted %zu times, the reference %zu and %zu", step,
               ngot, nacts, replayed, replayed_acts);
        EXPECT(chime_wheel_pending(wheel) == ref.n, "step %zu: pending %zu, reference %zu", step,
                   chime_wheel_pending(wheel), ref.n);
        const char *err = chime__wheel_check(wheel);
        EXPECT(!err, "step %zu: self-check: %s", step, err);
    }

    chime__alloc_fail_after(-1);
    if (oom) { /* memory is back: what is left fires, all of it (nothing was lost) */
        size_t before = ngot, n;
        if (reentrant)
            begin_advance(&ref, UINT64_MAX);
        n = chime_wheel_advance(wheel, UINT64_MAX);
        size_t nwant = ref_advance(&ref, UINT64_MAX, &want, &want_cap, &dead, &ndead, &dead_cap);
        same_firings(SIZE_MAX, before, n, want, nwant);
        EXPECT(chime_wheel_pending(wheel) == ref.n, "out of memory: %zu timers left, reference %zu",
               chime_wheel_pending(wheel), ref.n);
    }
    const char *err = chime__wheel_check_pool(wheel);
    EXPECT(!err, "pool check: %s", err);
    chime_wheel_free(wheel, NULL);
    ref_destroy(&ref);
    free(want);
    free(dead);
    return 0;
}
