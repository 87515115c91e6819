/* SPDX-License-Identifier: MIT */
/*
 * The runtime's MPSC queue (lib/runtime/mpsc.h) on its own: the stub's re-insertion, a push stopped
 * half-way, a node pushed again by the consumer, and per-producer FIFO order with several producers
 * at once (with the consumer popping concurrently: TSan runs this). A plain TAP program (tap.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/mpsc.h"
#include "tap.h"

/* A node as the runtime's records are: the link is not the first field. */
struct node {
    uint64_t payload;
    uint32_t pad;
    _Atomic uint32_t link;
};

#define NODES 4096
static struct node nodes[NODES];
static struct chime__mpsc q;

static void init(void)
{
    chime__mpsc_init(&q, nodes, sizeof(struct node), offsetof(struct node, link));
}

static void an_empty_queue_pops_nothing_and_says_so(void)
{
    init();
    CHECK(chime__mpsc_empty(&q), "a new queue is not empty");
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    CHECK(chime__mpsc_empty(&q), "a pop from an empty queue left it non-empty");
}

static void one_node_comes_out_through_the_stub_reinserted_behind_it(void)
{
    init();
    chime__mpsc_push(&q, 7);
    CHECK(!chime__mpsc_empty(&q), "a queue holding a node says empty");
    /* tail is the stub, then 7, which is also head: pop must put the stub back behind 7 to hand it out. */
    CHECK_EQ(chime__mpsc_pop(&q), 7);
    CHECK(chime__mpsc_empty(&q), "the stub was not re-inserted: the queue is not empty after its only node");
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    /* Again, many times: each round goes through the stub. */
    for (uint32_t i = 0; i < 100; i++) {
        chime__mpsc_push(&q, i);
        CHECK_EQ(chime__mpsc_pop(&q), i);
        CHECK(chime__mpsc_empty(&q), "round %u: not empty", i);
    }
    /* Then two at once: 1 is handed out without the stub, 2 through it. */
    chime__mpsc_push(&q, 1);
    chime__mpsc_push(&q, 2);
    CHECK_EQ(chime__mpsc_pop(&q), 1);
    CHECK_EQ(chime__mpsc_pop(&q), 2);
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    CHECK(chime__mpsc_empty(&q), "not empty after both");
}

static void a_push_stopped_half_way_hides_the_nodes_from_its_predecessor_on(void)
{
    init();
    chime__mpsc_push(&q, 6);
    chime__mpsc_push(&q, 1);
    uint32_t prev = chime__mpsc_push_begin(&q, 2); /* a producer preempted between its two steps */
    CHECK_EQ(prev, 1);
    chime__mpsc_push(&q, 3);                       /* a later push completes */
    CHECK_EQ(chime__mpsc_pop(&q), 6);
    /* 1's link is not written yet: 1 cannot be handed out (nothing says what follows it, and it is
     * not head), nor anything after it; and yet the queue is not empty. */
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    CHECK(!chime__mpsc_empty(&q), "a half-done push looks like an empty queue: the sleeper would miss it");
    chime__mpsc_push_end(&q, prev, 2);
    CHECK_EQ(chime__mpsc_pop(&q), 1);
    CHECK_EQ(chime__mpsc_pop(&q), 2);
    CHECK_EQ(chime__mpsc_pop(&q), 3);
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    CHECK(chime__mpsc_empty(&q), "not empty at the end");
}

static void a_push_stopped_half_way_on_the_last_node_blocks_the_stub(void)
{
    init();
    chime__mpsc_push(&q, 1);
    CHECK_EQ(chime__mpsc_pop(&q), 1); /* the stub is behind nothing now: tail stub, head stub */
    chime__mpsc_push(&q, 4);
    uint32_t prev = chime__mpsc_push_begin(&q, 5); /* head is 5, 4's link is not written */
    CHECK_EQ(prev, 4);
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL); /* 4 is not head, so no stub goes behind it */
    chime__mpsc_push_end(&q, prev, 5);
    CHECK_EQ(chime__mpsc_pop(&q), 4);
    CHECK_EQ(chime__mpsc_pop(&q), 5);
    CHECK(chime__mpsc_empty(&q), "not empty at the end");
}

static void a_popped_node_may_be_pushed_again_at_once(void)
{
    init();
    chime__mpsc_push(&q, 9);
    chime__mpsc_push(&q, 10);
    uint32_t n = chime__mpsc_pop(&q);
    CHECK_EQ(n, 9);
    chime__mpsc_push(&q, n); /* what the runtime does with a record a reschedule is still writing */
    CHECK_EQ(chime__mpsc_pop(&q), 10);
    CHECK_EQ(chime__mpsc_pop(&q), 9);
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
}

#define PRODUCERS 3
#define ROUNDS 20000
static _Atomic uint32_t returned[PRODUCERS]; /* each producer owns NODES / PRODUCERS nodes */

static void *producer(void *arg)
{
    uint32_t p = (uint32_t)(uintptr_t)arg, per = NODES / PRODUCERS, next = 0, seq = 0;
    /* Each push is one of this producer's nodes, carrying (producer, seq); a node is pushed again
     * only once the consumer has popped it (the queue's contract), which it reports in `returned`. */
    while (seq < ROUNDS) {
        uint32_t free_nodes = per - (seq - atomic_load_explicit(&returned[p], memory_order_acquire));
        if (!free_nodes)
            continue;
        uint32_t n = p * per + next;
        next = (next + 1) % per;
        nodes[n].payload = (uint64_t)p << 32 | seq++;
        chime__mpsc_push(&q, n);
    }
    return NULL;
}

static void pushes_from_each_producer_are_popped_in_their_order(void)
{
    init();
    pthread_t th[PRODUCERS];
    for (uint32_t p = 0; p < PRODUCERS; p++) {
        atomic_store(&returned[p], 0);
        CHECK_EQ(pthread_create(&th[p], NULL, producer, (void *)(uintptr_t)p), 0);
    }
    uint32_t want[PRODUCERS] = { 0 }, total = 0, half_done = 0;
    while (total < PRODUCERS * ROUNDS) {
        uint32_t n = chime__mpsc_pop(&q);
        if (n == CHIME__MPSC_NIL) {
            half_done += !chime__mpsc_empty(&q);
            continue;
        }
        CHECK(n < NODES, "popped %u, no node", n);
        uint64_t payload = nodes[n].payload; /* written before the push: the pop's acquire shows it */
        uint32_t p = (uint32_t)(payload >> 32), seq = (uint32_t)payload;
        CHECK(p == n / (NODES / PRODUCERS), "node %u carries producer %u", n, p);
        CHECK(seq == want[p], "producer %u: popped %u, expected %u (out of order, lost or twice)", p,
              seq, want[p]);
        want[p]++;
        total++;
        atomic_fetch_add_explicit(&returned[p], 1, memory_order_release);
    }
    for (uint32_t p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    CHECK_EQ(chime__mpsc_pop(&q), CHIME__MPSC_NIL);
    CHECK(chime__mpsc_empty(&q), "not empty after every push was popped");
    printf("# %u pops, %u times a push was seen half-done\n", total, half_done);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "an empty queue pops nothing and says so", an_empty_queue_pops_nothing_and_says_so },
        { "one node comes out through the stub re-inserted behind it", one_node_comes_out_through_the_stub_reinserted_behind_it },
        { "a push stopped half-way hides the nodes from its predecessor on", a_push_stopped_half_way_hides_the_nodes_from_its_predecessor_on },
        { "a push stopped half-way on the last node blocks the stub", a_push_stopped_half_way_on_the_last_node_blocks_the_stub },
        { "a popped node may be pushed again at once", a_popped_node_may_be_pushed_again_at_once },
        { "pushes from each producer are popped in their order", pushes_from_each_producer_are_popped_in_their_order },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
