/* The timer-node pool: see pool.h. */
#include "wheel/pool.h"

#include <errno.h>

#include "alloc.h"

#define CHUNK_BYTES (CHIME__CHUNK_NODES * sizeof(struct chime__node))

#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC
#include <pthread.h>
#include <stdio.h>
#include <sys/types.h> /* ssize_t, the type of jemalloc's decay settings */

/*
 * Node chunks come from an arena of chime's own whose decay times are 0, so a chunk that trim gives
 * back is returned to the system at once. In jemalloc's default arenas a freed extent stays resident
 * for dirty_decay_ms (10 s by default) and is purged only when the allocator is next used, so an idle
 * process would keep its high-water mark, which is what "memory follows load" rules out. If the arena
 * cannot be made, chunks use the default arena.
 */
static int chunk_flags;
static pthread_once_t chunk_arena_once = PTHREAD_ONCE_INIT;

static void make_chunk_arena(void)
{
    unsigned arena;
    size_t size = sizeof(arena);
    if (mallctl("arenas.create", &arena, &size, NULL, 0))
        return;
    ssize_t zero = 0;
    char name[64];
    snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", arena);
    mallctl(name, NULL, NULL, &zero, sizeof(zero));
    snprintf(name, sizeof(name), "arena.%u.muzzy_decay_ms", arena);
    mallctl(name, NULL, NULL, &zero, sizeof(zero));
    chunk_flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
}

static void *alloc_chunk(void)
{
    pthread_once(&chunk_arena_once, make_chunk_arena);
    return mallocx(CHUNK_BYTES, chunk_flags);
}

static void free_chunk(void *chunk)
{
    if (chunk)
        sdallocx(chunk, CHUNK_BYTES, chunk_flags); /* chunk_flags is set: alloc_chunk ran first */
}
#else
/* The C library's malloc: glibc may keep a freed chunk in its heap (its mmap threshold adapts), so
 * with -Dallocator=system trimmed memory is given back to malloc, not always to the system. */
static void *alloc_chunk(void)
{
    return chime__alloc(CHUNK_BYTES);
}
static void free_chunk(void *chunk)
{
    chime__free(chunk, CHUNK_BYTES);
}
#endif

void chime__pool_init(struct chime__pool *p)
{
    *p = (struct chime__pool){ .free_head = CHIME__NIL };
}

/* Make room for one more chunk table entry. Return: 0, or -ENOMEM. */
static int reserve_entry(struct chime__pool *p)
{
    if (p->nchunks < p->chunks_cap)
        return 0;
    uint32_t cap = p->chunks_cap ? p->chunks_cap * 2 : 16;
    struct chime__node **chunks = chime__realloc(p->chunks, cap * sizeof(*chunks));
    if (!chunks)
        return -ENOMEM;
    p->chunks = chunks;
    uint32_t *floors = chime__realloc(p->gen_floor, cap * sizeof(*floors));
    if (!floors)
        return -ENOMEM; /* chunks[] is merely larger than it need be; cap is unchanged */
    p->gen_floor = floors;
    p->chunks_cap = cap;
    return 0;
}

/* Add one chunk, in the first hole or at the end, and thread its nodes onto the free list in index
 * order. */
int chime__pool_grow(struct chime__pool *p)
{
    uint32_t c = 0;
    if (p->live_chunks < p->nchunks) {
        while (p->chunks[c])
            c++; /* a hole exists: live_chunks < nchunks */
    } else {
        if (p->nchunks == (CHIME__MAX_NODES >> CHIME__CHUNK_SHIFT))
            return -ENOMEM; /* the next chunk would reach index CHIME__NIL */
        int err = reserve_entry(p);
        if (err)
            return err;
        c = p->nchunks;
        p->gen_floor[c] = 1;
    }
    struct chime__node *chunk = alloc_chunk();
    if (!chunk)
        return -ENOMEM;
    uint32_t first = c << CHIME__CHUNK_SHIFT;
    for (uint32_t i = 0; i < CHIME__CHUNK_NODES; i++) {
        chunk[i] = (struct chime__node){
            .next = i + 1 < CHIME__CHUNK_NODES ? first + i + 1 : p->free_head,
            .gen = p->gen_floor[c],
            .where = CHIME__WHERE_FREE,
        };
    }
    p->chunks[c] = chunk;
    if (c == p->nchunks)
        p->nchunks++;
    p->live_chunks++;
    p->free_head = first;
    return 0;
}

size_t chime__pool_trim(struct chime__pool *p, size_t keep)
{
    size_t spare = chime__pool_capacity(p) - p->used;
    if (spare < keep + CHIME__CHUNK_NODES)
        return 0; /* not even one whole chunk above what is to be kept */
    uint32_t *free_in = chime__alloc_zeroed(p->nchunks * sizeof(*free_in));
    if (!free_in)
        return 0; /* trimming is an optimisation: without memory for it, keep everything */
    for (uint32_t idx = p->free_head; idx != CHIME__NIL; idx = chime__pool_at(p, idx)->next)
        free_in[idx >> CHIME__CHUNK_SHIFT]++;

    /* Highest chunks first: growth refills the lowest hole, so the table stays dense at the bottom.
     * free_in[c] becomes RELEASE for each chunk chosen. */
    const uint32_t RELEASE = UINT32_MAX;
    size_t released = 0;
    for (uint32_t c = p->nchunks; c-- > 0 && spare >= keep + CHIME__CHUNK_NODES;) {
        if (p->chunks[c] && free_in[c] == CHIME__CHUNK_NODES) {
            free_in[c] = RELEASE;
            spare -= CHIME__CHUNK_NODES;
            released++;
        }
    }
    if (released) {
        /* Unthread the chosen chunks' nodes from the free list, keeping its order... */
        uint32_t head = CHIME__NIL, *link = &head;
        for (uint32_t idx = p->free_head; idx != CHIME__NIL; idx = chime__pool_at(p, idx)->next) {
            if (free_in[idx >> CHIME__CHUNK_SHIFT] != RELEASE) {
                *link = idx;
                link = &chime__pool_at(p, idx)->next;
            }
        }
        *link = CHIME__NIL;
        p->free_head = head;
        /* ...then free them, remembering where their generations got to. */
        for (uint32_t c = 0; c < p->nchunks; c++) {
            if (free_in[c] != RELEASE)
                continue;
            uint32_t top = 0;
            for (uint32_t i = 0; i < CHIME__CHUNK_NODES; i++)
                if (p->chunks[c][i].gen > top)
                    top = p->chunks[c][i].gen;
            p->gen_floor[c] = top + 1 ? top + 1 : 1; /* wraps only after 2^32 reuses, as pool.h says */
            free_chunk(p->chunks[c]);
            p->chunks[c] = NULL; /* a hole; nchunks stays, so gen_floor[c] is kept for the refill */
            p->live_chunks--;
        }
    }
    chime__free(free_in, p->nchunks * sizeof(*free_in));
    return released;
}

void chime__pool_destroy(struct chime__pool *p)
{
    for (uint32_t c = 0; c < p->nchunks; c++)
        free_chunk(p->chunks[c]);
    chime__free(p->chunks, p->chunks_cap * sizeof(*p->chunks));
    chime__free(p->gen_floor, p->chunks_cap * sizeof(*p->gen_floor));
    chime__pool_init(p);
}
