/* The timer-node pool: see pool.h. */
#include "pool.h"

#include <errno.h>

#include "alloc.h"

void chime__pool_init(struct chime__pool *p)
{
    *p = (struct chime__pool){ .free_head = CHIME__NIL };
}

/* Add one chunk and thread its nodes onto the free list in index order. */
int chime__pool_grow(struct chime__pool *p)
{
    if (p->nchunks == (CHIME__MAX_NODES >> CHIME__CHUNK_SHIFT))
        return -ENOMEM; /* the next chunk would reach index CHIME__NIL */
    if (p->nchunks == p->chunks_cap) {
        uint32_t cap = p->chunks_cap ? p->chunks_cap * 2 : 16;
        struct chime__node **chunks = chime__realloc(p->chunks, cap * sizeof(*chunks));
        if (!chunks)
            return -ENOMEM;
        p->chunks = chunks;
        p->chunks_cap = cap;
    }
    struct chime__node *chunk = chime__alloc(CHIME__CHUNK_NODES * sizeof(*chunk));
    if (!chunk)
        return -ENOMEM;
    uint32_t first = p->nchunks << CHIME__CHUNK_SHIFT;
    for (uint32_t i = 0; i < CHIME__CHUNK_NODES; i++) {
        chunk[i] = (struct chime__node){
            .next = i + 1 < CHIME__CHUNK_NODES ? first + i + 1 : p->free_head,
            .gen = 1,
            .where = CHIME__WHERE_FREE,
        };
    }
    p->chunks[p->nchunks++] = chunk;
    p->free_head = first;
    return 0;
}

void chime__pool_destroy(struct chime__pool *p)
{
    for (uint32_t c = 0; c < p->nchunks; c++)
        chime__free(p->chunks[c], CHIME__CHUNK_NODES * sizeof(struct chime__node));
    chime__free(p->chunks, p->chunks_cap * sizeof(*p->chunks));
    chime__pool_init(p);
}
