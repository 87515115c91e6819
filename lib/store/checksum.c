/* SPDX-License-Identifier: MIT */
/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82f63b78, initial and final value all ones): the
 * checksum of every journal record. x86-64 CPUs since 2008 compute it with one instruction per 8
 * bytes (SSE4.2 `crc32`); elsewhere a 256-entry table does it a byte at a time. Checked against the
 * standard check value (CRC-32C of "123456789" = 0xe3069283) in test_store_format.c.
 */
#include "store/checksum.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
        table[i] = c;
    }
}

static uint32_t crc_table(uint32_t crc, const unsigned char *p, size_t n)
{
    pthread_once(&table_once, table_init);
    while (n--)
        crc = (crc >> 8) ^ table[(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p,
                                                             size_t n)
{
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8); /* records are 8-byte aligned, but the key and payload need not be */
        c = __builtin_ia32_crc32di(c, word);
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

static int have_sse42(void)
{
    /* relaxed: threads that race to fill it in compute the same answer, and nothing else is
     * published with it; atomic so that the race is not undefined behaviour. */
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}
#endif

uint32_t chime__crc32c(uint32_t crc, const void *data, size_t n)
{
    crc = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_sse42())
        return ~crc_sse42(crc, data, n);
#endif
    return ~crc_table(crc, data, n);
}
