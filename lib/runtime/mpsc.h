/* SPDX-License-Identifier: MIT */
/*
 * An intrusive multi-producer, single-consumer queue linked by 32-bit node index (Dmitry Vyukov's
 * non-intrusive-stub design, as in ponyc's messageq.c and liburcu's wfcqueue): producers push with
 * one atomic exchange and one store, never a loop or a lock; the one consumer pops with loads and
 * plain stores.
 *
 * The queue knows its nodes as indices into an array the owner gives (base, stride) whose nodes keep
 * an _Atomic uint32_t link at offset link_at; the runtime's nodes are its timer records (records.h).
 * The array must never move while the queue is in use: producers compute addresses from base.
 * CHIME__MPSC_STUB names the queue's own stub node, CHIME__MPSC_NIL no node.
 *
 * The queue is a singly linked list from `tail` (oldest, the consumer's end) to `head` (newest, the
 * producers' end), always holding at least the stub. push swaps itself in as head and then links
 * the old head to itself; between those two steps the list is briefly cut, and pop reports "nothing
 * yet" (chime__mpsc_pop returns NIL while chime__mpsc_empty is false) rather than wait for the link.
 *
 * Concurrency contract:
 *   - chime__mpsc_push: any thread, any number at once. Wait-free.
 *   - chime__mpsc_pop, chime__mpsc_empty: the consumer thread only (one at a time).
 *   - A node is in the queue at most once: pushing a node that is queued and not yet popped corrupts
 *     the list (the runtime guards this with the Q bit of each record's state word, state.h). A
 *     popped node may be pushed again at once, by anyone, the consumer included.
 *   - Pushes from one thread are popped in their order; there is no order between threads.
 */
#ifndef CHIME_RUNTIME_MPSC_H
#define CHIME_RUNTIME_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHIME__MPSC_NIL UINT32_MAX
#define CHIME__MPSC_STUB (UINT32_MAX - 1) /* never a node index: nodes are fewer than 2^28 */

struct chime__mpsc {
    /* The producers' end, with what they need to find a node's link (read-only after init).
     * Alone on its cache line: producers bounce it between themselves, and the consumer reads it
     * only when the queue looks empty. */
    _Alignas(64) _Atomic uint32_t head;
    size_t stride, link_at;
    char *base;
    /* The consumer's end and the stub, on the consumer's own line, with its own copy of where the
     * nodes are: were the consumer to read the producers' copy at every pop, that line would be
     * shared whenever a producer's exchange came, and every push would wait for it to come back. */
    _Alignas(64) uint32_t tail;
    _Atomic uint32_t stub_link;
    size_t c_stride, c_link_at;
    char *c_base;
};
_Static_assert(offsetof(struct chime__mpsc, tail) / 64 != offsetof(struct chime__mpsc, head) / 64 &&
               offsetof(struct chime__mpsc, c_base) / 64 == offsetof(struct chime__mpsc, tail) / 64,
               "the consumer's fields share no line with the producers' exchange");

/* Make an empty queue over nodes at base + i * stride, each with its link at offset link_at. */
static inline void chime__mpsc_init(struct chime__mpsc *q, void *base, size_t stride, size_t link_at)
{
    q->base = q->c_base = base;
    q->stride = q->c_stride = stride;
    q->link_at = q->c_link_at = link_at;
    atomic_init(&q->stub_link, CHIME__MPSC_NIL);
    atomic_init(&q->head, CHIME__MPSC_STUB);
    q->tail = CHIME__MPSC_STUB;
}

static inline _Atomic uint32_t *chime__mpsc_link(struct chime__mpsc *q, uint32_t n)
{
    if (n == CHIME__MPSC_STUB)
        return &q->stub_link;
    return (_Atomic uint32_t *)(q->base + (size_t)n * q->stride + q->link_at);
}

/* The same, from the consumer's copy. */
static inline _Atomic uint32_t *chime__mpsc_clink(struct chime__mpsc *q, uint32_t n)
{
    if (n == CHIME__MPSC_STUB)
        return &q->stub_link;
    return (_Atomic uint32_t *)(q->c_base + (size_t)n * q->c_stride + q->c_link_at);
}

/* A push is these two halves; between them the list is cut (see the top). Apart for the tests,
 * which stop a push half-way; everyone else calls chime__mpsc_push. */
static inline uint32_t chime__mpsc_push_begin(struct chime__mpsc *q, uint32_t n)
{
    /* relaxed: n is not reachable by anyone until the exchange below publishes it. */
    atomic_store_explicit(chime__mpsc_link(q, n), CHIME__MPSC_NIL, memory_order_relaxed);
    /*
     * seq_cst, not just acq_rel: the runtime's sleep protocol is a store-load handshake (Dekker). The
     * producer pushes, then loads the advancing thread's sleep_until; the advancing thread stores
     * sleep_until, then checks chime__mpsc_empty. Both sides seq_cst means at least one of them sees
     * the other, so a push is never left unseen by a thread going to sleep (wake.h). On x86 the
     * exchange is a locked instruction, a full barrier either way. The acquire half orders this push
     * after the previous producer's push of prev, whose link push_end writes.
     */
    return atomic_exchange_explicit(&q->head, n, memory_order_seq_cst);
}

static inline void chime__mpsc_push_end(struct chime__mpsc *q, uint32_t prev, uint32_t n)
{
    /* release: pairs with the acquire loads of links in chime__mpsc_pop, so the consumer that follows
     * this link sees what the caller wrote before the push. */
    atomic_store_explicit(chime__mpsc_link(q, prev), n, memory_order_release);
}

/*
 * Append node n. Everything the caller wrote before this call (to n or elsewhere) is visible to the
 * consumer once it pops n.
 */
static inline void chime__mpsc_push(struct chime__mpsc *q, uint32_t n)
{
    chime__mpsc_push_end(q, chime__mpsc_push_begin(q, n), n);
}

/*
 * Take the oldest node whose link is complete, or CHIME__MPSC_NIL if there is none yet (the queue is
 * empty, or a producer is between its exchange and its link: chime__mpsc_empty tells the two apart).
 */
static inline uint32_t chime__mpsc_pop(struct chime__mpsc *q)
{
    uint32_t tail = q->tail;
    /* acquire: pairs with the release store of the link in chime__mpsc_push. */
    uint32_t next = atomic_load_explicit(chime__mpsc_clink(q, tail), memory_order_acquire);
    if (tail == CHIME__MPSC_STUB) {
        if (next == CHIME__MPSC_NIL)
            return CHIME__MPSC_NIL;
        q->tail = next; /* step over the stub */
        tail = next;
        next = atomic_load_explicit(chime__mpsc_clink(q, tail), memory_order_acquire); /* as above */
    }
    if (next != CHIME__MPSC_NIL) {
        q->tail = next;
        return tail;
    }
    /* tail is the last linked node. If it is also head, re-insert the stub behind it so tail can be
     * handed out; if not, a push is half-done and tail must wait for its link. */
    /* acquire: pairs with the exchange in chime__mpsc_push (the pusher wrote its node first). */
    if (atomic_load_explicit(&q->head, memory_order_acquire) != tail)
        return CHIME__MPSC_NIL;
    chime__mpsc_push(q, CHIME__MPSC_STUB);
    next = atomic_load_explicit(chime__mpsc_clink(q, tail), memory_order_acquire); /* as above */
    if (next != CHIME__MPSC_NIL) {
        q->tail = next;
        return tail;
    }
    return CHIME__MPSC_NIL; /* another producer slipped in before the stub; its link comes soon */
}

/*
 * The node whose link the next chime__mpsc_pop reads, or CHIME__MPSC_STUB: a consumer that
 * prefetches it overlaps that read, a dependent miss per pop when nodes are many, with the work on
 * the node just popped. Consumer only.
 */
static inline uint32_t chime__mpsc_peek(const struct chime__mpsc *q)
{
    return q->tail;
}

/*
 * The node pushed last (CHIME__MPSC_STUB: none since the consumer put the stub back, which it
 * does behind the last node it pops, or behind one a producer pushed at that moment: then nodes
 * may still be queued). Consumer only. seq_cst: a handshake's load, as in chime__mpsc_empty.
 */
static inline uint32_t chime__mpsc_newest(struct chime__mpsc *q)
{
    return atomic_load_explicit(&q->head, memory_order_seq_cst);
}

/*
 * True if nothing is queued: no node to pop and no push in progress. seq_cst: the other half of the
 * sleep handshake described in chime__mpsc_push.
 */
static inline bool chime__mpsc_empty(struct chime__mpsc *q)
{
    return q->tail == CHIME__MPSC_STUB &&
           atomic_load_explicit(&q->head, memory_order_seq_cst) == CHIME__MPSC_STUB;
}

#endif /* CHIME_RUNTIME_MPSC_H */
