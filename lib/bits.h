/* SPDX-License-Identifier: MIT */
/*
 * The bit operations chime relies on, in one place. ctz is undefined for 0 (the builtins are), so
 * every call site says why its argument cannot be zero. Tested by test/test_bits.c.
 */
#ifndef CHIME_BITS_H
#define CHIME_BITS_H

#include <stdint.h>

_Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "ctz64 assumes a 64-bit long long");

/* Index of the lowest set bit of x. x must not be 0. */
static inline unsigned chime__ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }

/* Index of the lowest set bit of x. x must not be 0. */
static inline unsigned chime__ctz32(uint32_t x) { return (unsigned)__builtin_ctz(x); }

/*
 * Division by a divisor fixed in advance, without a division instruction (a 64-bit div costs 20 to 40
 * cycles). inv = chime__div_inv(d) once, for d != 0; then chime__div(x, d, inv) = x / d for every x.
 * Why: with m = floor((2^64 - 1) / d), q = floor(x * m / 2^64) is the quotient or one less, since
 * x * m / 2^64 > x / d - 1 for every x < 2^64; one compare corrects it, without a branch.
 */
static inline uint64_t chime__div_inv(uint64_t d) { return UINT64_MAX / d; }

static inline uint64_t chime__div(uint64_t x, uint64_t d, uint64_t inv)
{
    __extension__ typedef unsigned __int128 u128; /* gcc and clang; __extension__ for -pedantic */
    uint64_t q = (uint64_t)(((u128)x * inv) >> 64);
    q += x - q * d >= d;
    return q;
}

/* x / d rounded up, as chime__div. */
static inline uint64_t chime__div_up(uint64_t x, uint64_t d, uint64_t inv)
{
    uint64_t q = chime__div(x, d, inv);
    return q + (x - q * d != 0);
}

#endif /* CHIME_BITS_H */
