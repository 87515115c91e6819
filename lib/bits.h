/*
 * The bit operations chime relies on, in one place. Both are undefined for 0 (the builtins are), so
 * every call site says why its argument cannot be zero.
 */
#ifndef CHIME_BITS_H
#define CHIME_BITS_H

#include <stdint.h>

_Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "ctz64 assumes a 64-bit long long");

/* Index of the lowest set bit of x. x must not be 0. */
static inline unsigned chime__ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }

/* Index of the lowest set bit of x. x must not be 0. */
static inline unsigned chime__ctz32(uint32_t x) { return (unsigned)__builtin_ctz(x); }

#endif /* CHIME_BITS_H */
