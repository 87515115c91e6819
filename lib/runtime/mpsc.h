/*
 * An intrusive multi-producer, single-consumer queue (Dmitry Vyukov's non-intrusive-stub design, as
 * in ponyc's messageq.c and liburcu's wfcqueue): producers push with one atomic exchange and one
 * store, never a loop or a lock; the one consumer pops with loads and plain stores.
 *
 * The queue is a singly linked list from `tail` (oldest, the consumer's end) to `head` (newest, the
 * producers' end), always holding at least the stub node. push swaps itself in as head and then links
 * the old head to itself; between those two steps the list is briefly cut, and pop reports "nothing
 * yet" (chime__mpsc_pop returns NULL while chime__mpsc_empty is false) rather than wait for the link.
 *
 * Concurrency contract:
 *   - chime__mpsc_push: any thread, any number at once. Lock-free: wait-free, in fact.
 *   - chime__mpsc_pop, chime__mpsc_empty: the consumer thread only (one at a time).
 *   - A node is in the queue at most once: pushing a node that is queued and not yet popped corrupts
 *     the list. (The runtime guards this with a "queued" bit in each timer's state word.) A popped node
 *     may be pushed again at once.
 *   - Pushes from one thread are popped in their order; there is no order between threads.
 */
#ifndef CHIME_MPSC_H
#define CHIME_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct chime__mpsc_node {
    _Atomic(struct chime__mpsc_node *) next;
};

struct chime__mpsc {
    /* The producers' end. Alone on its cache line: producers bounce it between themselves, and the
     * consumer reads it only when the queue looks empty. */
    _Alignas(64) _Atomic(struct chime__mpsc_node *) head;
    /* The consumer's end and the stub, on the consumer's own line. */
    _Alignas(64) struct chime__mpsc_node *tail;
    struct chime__mpsc_node stub;
};

static inline void chime__mpsc_init(struct chime__mpsc *q)
{
    atomic_init(&q->stub.next, NULL);
    atomic_init(&q->head, &q->stub);
    q->tail = &q->stub;
}

/*
 * Append n. Everything the caller wrote to n (and to what n leads to) before this call is visible to
 * the consumer once it pops n.
 */
static inline void chime__mpsc_push(struct chime__mpsc *q, struct chime__mpsc_node *n)
{
    /* relaxed: n is not reachable by anyone until the exchange below publishes it. */
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    /*
     * seq_cst, not just acq_rel: the runtime's sleep protocol is a store-load handshake (Dekker). The
     * producer pushes, then loads the advancing thread's sleep_until; the advancing thread stores
     * sleep_until, then checks chime__mpsc_empty. Both sides seq_cst means at least one of them sees
     * the other, so a push is never left unseen by a thread going to sleep. (On x86 the exchange is a
     * locked instruction, a full barrier either way.) The acquire half orders this push after the
     * previous producer's push of prev, whose next we write below.
     */
    struct chime__mpsc_node *prev = atomic_exchange_explicit(&q->head, n, memory_order_seq_cst);
    /* release: pairs with the acquire loads of ->next in chime__mpsc_pop, so the consumer that follows
     * this link sees n's contents. */
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

/*
 * Take the oldest node whose link is complete, or NULL if there is none yet (the queue is empty, or a
 * producer is between its exchange and its link: chime__mpsc_empty tells the two apart).
 */
static inline struct chime__mpsc_node *chime__mpsc_pop(struct chime__mpsc *q)
{
    struct chime__mpsc_node *tail = q->tail;
    /* acquire: pairs with the release store of ->next in chime__mpsc_push. */
    struct chime__mpsc_node *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next)
            return NULL;
        q->tail = next; /* step over the stub */
        tail = next;
        next = atomic_load_explicit(&tail->next, memory_order_acquire); /* as above */
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    /* tail is the last linked node. If it is also head, re-insert the stub behind it so tail can be
     * handed out; if not, a push is half-done and tail must wait for its link. */
    /* acquire: pairs with the exchange in chime__mpsc_push (that node's fields are written first). */
    if (atomic_load_explicit(&q->head, memory_order_acquire) != tail)
        return NULL;
    chime__mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire); /* as above */
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL; /* another producer slipped in before the stub; its link comes soon */
}

/*
 * True if nothing is queued: no node to pop and no push in progress. seq_cst: the other half of the
 * sleep handshake described in chime__mpsc_push.
 */
static inline bool chime__mpsc_empty(struct chime__mpsc *q)
{
    struct chime__mpsc_node *tail = q->tail;
    return tail == &q->stub && atomic_load_explicit(&q->head, memory_order_seq_cst) == &q->stub;
}

#endif /* CHIME_MPSC_H */
