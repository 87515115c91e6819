/* SPDX-License-Identifier: MIT */
/*
 * SipHash-2-4 with a 128-bit output (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012;
 * the 128-bit variant from the authors' reference description): a keyed hash whose outputs an
 * attacker who does not know the key cannot steer. The journal's key index names a key by these
 * 128 bits, under a key drawn at random at every open (the index is rebuilt at every open), so
 * neither chance (two keys among 10^9 share a name with probability below 2^-68) nor crafted
 * order numbers can make two keys one. Checked against the reference test vectors in
 * test_store_format.c.
 */
#include "store/hash.h"

#include <string.h>

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct sip {
    uint64_t v0, v1, v2, v3;
};

static inline void round_(struct sip *s)
{
    s->v0 += s->v1;
    s->v1 = rotl(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = rotl(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = rotl(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = rotl(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = rotl(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = rotl(s->v2, 32);
}

static inline void absorb(struct sip *s, uint64_t m)
{
    s->v3 ^= m;
    round_(s); /* c = 2 compression rounds */
    round_(s);
    s->v0 ^= m;
}

/* Eight bytes as a little-endian number: one load where the CPU is little-endian (gcc 12 compiles
 * the byte loop as eight loads, shifts and ors). */
static inline uint64_t load_le64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
#else
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--)
        w = (w << 8) | p[i];
    return w;
#endif
}

struct chime__hash chime__siphash128(uint64_t k0, uint64_t k1, const void *data, size_t n)
{
    const unsigned char *p = data;
    struct sip s = {
        k0 ^ UINT64_C(0x736f6d6570736575),
        k1 ^ UINT64_C(0x646f72616e646f6d) ^ 0xee, /* the 128-bit variant's tweak */
        k0 ^ UINT64_C(0x6c7967656e657261),
        k1 ^ UINT64_C(0x7465646279746573),
    };
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8)
        absorb(&s, load_le64(p + i));
    unsigned char last[8] = { 0 };
    memcpy(last, p + whole, n - whole);
    last[7] = (unsigned char)n; /* the length modulo 256 in the last byte */
    absorb(&s, load_le64(last));

    s.v2 ^= 0xee;
    for (int i = 0; i < 4; i++) /* d = 4 finalization rounds */
        round_(&s);
    struct chime__hash h;
    h.lo = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
    s.v1 ^= 0xdd;
    for (int i = 0; i < 4; i++)
        round_(&s);
    h.hi = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
    return h;
}
