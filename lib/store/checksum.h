/* SPDX-License-Identifier: MIT */
/* CRC-32C (Castagnoli), the journal's per-record checksum (format.md), and its mask. */
#ifndef CHIME_STORE_CHECKSUM_H
#define CHIME_STORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes, continuing from crc (0 to start). Uses the SSE4.2 instruction where the CPU
 * has it, a table elsewhere. Any thread. */
uint32_t chime__crc32c(uint32_t crc, const void *data, size_t n);

/* What a file stores: the CRC rotated left by 9 bits, xor a constant (format.md). */
static inline uint32_t chime__crc_mask(uint32_t crc)
{
    return ((crc << 9) | (crc >> 23)) ^ 0x5bd1e995u;
}

#endif /* CHIME_STORE_CHECKSUM_H */
