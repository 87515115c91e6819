/* SPDX-License-Identifier: MIT */
/* SipHash-2-4 with a 128-bit result: how the store names a key in its in-memory table and in the
 * journal's key index. */
#ifndef CHIME_STORE_HASH_H
#define CHIME_STORE_HASH_H

#include <stddef.h>
#include <stdint.h>

struct chime__hash {
    uint64_t lo, hi;
};

/* SipHash-2-4-128 of n bytes under the 128-bit key (k0, k1). Any thread. */
struct chime__hash chime__siphash128(uint64_t k0, uint64_t k1, const void *data, size_t n);

#endif /* CHIME_STORE_HASH_H */
