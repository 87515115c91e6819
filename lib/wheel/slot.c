/* SPDX-License-Identifier: MIT */
/* A wheel slot's growable array: see slot.h. */
#include "wheel/slot.h"

#include <errno.h>

#include "alloc.h"

int chime__slot_grow(struct chime__slot *s)
{
    /* x4 (slot.h says why). Lengths stay below 3 * CHIME__MAX_NODES + 8 < 2^30, so cap <= 2^31. */
    uint32_t cap = s->cap ? s->cap * 4 : CHIME__SLOT_MIN;
    uint32_t *v = chime__realloc_sized(s->v, (size_t)s->cap * sizeof(*v), (size_t)cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    s->v = v;
    s->cap = cap;
    return 0;
}

void chime__slot_release(struct chime__slot *s)
{
    chime__free(s->v, (size_t)s->cap * sizeof(*s->v));
    *s = (struct chime__slot){ NULL, 0, 0, 0 };
}
