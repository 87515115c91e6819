/* SPDX-License-Identifier: MIT */
/* The journal's records and file headers (format.md): encoding, decoding and a run's order. */
#include "store/format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store/checksum.h"

static const char magic_wal[8] = { 'c', 'h', 'i', 'm', 'e', 'W', 'A', 'L' };
static const char magic_run[8] = { 'c', 'h', 'i', 'm', 'e', 'R', 'U', 'N' };
static const char magic_head[8] = { 'c', 'h', 'i', 'm', 'e', 'H', 'E', 'D' };

/* Little-endian stores and loads at any alignment. */
static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

void chime__rec_encode(void *dst, const struct chime__rec *r)
{
    unsigned char *p = dst;
    uint32_t len = chime__rec_len(r->key_len, r->payload_len);
    p[8] = r->type;
    p[9] = r->flags;
    put16(p + 10, r->key_len);
    put32(p + 12, r->payload_len);
    put64(p + 16, r->version);
    put64(p + 24, r->due);
    put32(p + 32, r->attempt);
    put32(p + 36, 0);
    put64(p + 40, r->kill_version);
    put64(p + 48, r->kill_due);
    put64(p + 56, r->kill_dead);
    memcpy(p + CHIME__REC_HEADER, r->key, r->key_len);
    if (r->payload_len)
        memcpy(p + CHIME__REC_HEADER + r->key_len, r->payload, r->payload_len);
    size_t used = CHIME__REC_HEADER + r->key_len + r->payload_len;
    memset(p + used, 0, len - used);
    put32(p + 4, len);
    put32(p, chime__crc_mask(chime__crc32c(0, p + 4, len - 4)));
}

/* A MARK's layout (format.md): start at 16, segment at 24, salt at 40, every other byte after the
 * type zero. */
void chime__mark_encode(void *dst, const struct chime__batch_mark *m)
{
    unsigned char *p = dst;
    memset(p, 0, CHIME__MARK_LEN);
    put32(p + 4, CHIME__MARK_LEN);
    p[8] = CHIME__MARK;
    put64(p + 16, m->start);
    put64(p + 24, m->segment);
    put64(p + 40, m->salt);
    put64(p + 48, m->prev_end);
    put32(p, chime__crc_mask(chime__crc32c(0, p + 4, CHIME__MARK_LEN - 4)));
}

static int mark_fields_ok(const unsigned char *p, uint32_t len)
{
    if (len != CHIME__MARK_LEN || p[9] || get16(p + 10) || get32(p + 12) || get32(p + 32) ||
        get32(p + 36) || get64(p + 56))
        return 0;
    return get64(p + 16) != 0 && get64(p + 40) != 0; /* a start and a salt are never 0 */
}

int chime__mark_valid(const struct chime__rec *r, const struct chime__file_header *h, uint64_t at,
                      struct chime__batch_mark *m)
{
    if (r->type != CHIME__MARK || h->run)
        return 0;
    /* chime__rec_decode left a MARK's fields where its layout puts them: see there. */
    uint64_t start = r->version, segment = r->due, salt = r->kill_version, prev_end = r->kill_due;
    if (segment != h->lo || salt != h->salt || start % 8 || start < CHIME__FILE_HEADER || start > at)
        return 0;
    if (m)
        *m = (struct chime__batch_mark){ start, segment, salt, prev_end };
    return 1;
}

/* The fields' consistency (format.md, "whole"), once the checksum matched. */
static int fields_ok(const unsigned char *p, uint32_t len)
{
    uint8_t type = p[8], flags = p[9];
    uint16_t key_len = get16(p + 10);
    uint32_t payload_len = get32(p + 12);
    if (type == CHIME__MARK)
        return mark_fields_ok(p, len);
    if (type < CHIME__PUT || type > CHIME__DEAD || key_len == 0 || key_len > CHIME_STORE_KEY_MAX)
        return 0;
    int carries = type == CHIME__PUT || type == CHIME__DEAD;
    if (carries ? payload_len == 0 || payload_len > CHIME_STORE_PAYLOAD_MAX : payload_len != 0)
        return 0;
    if (flags & ~(type == CHIME__KILL ? CHIME__KILL_DEAD : 0))
        return 0;
    if (get64(p + 16) == 0 || get32(p + 36) != 0 || chime__rec_len(key_len, payload_len) != len)
        return 0;
    if (!carries && (get64(p + 40) | get64(p + 48) | get64(p + 56)))
        return 0;
    for (uint32_t i = CHIME__REC_HEADER + key_len + payload_len; i < len; i++)
        if (p[i])
            return 0;
    return 1;
}

enum chime__decoded chime__rec_decode(const void *buf, size_t avail, struct chime__rec *out,
                                      uint32_t *len)
{
    const unsigned char *p = buf;
    if (avail < 8 || (get32(p) == 0 && get32(p + 4) == 0))
        return CHIME__REC_END;
    uint32_t n = get32(p + 4);
    if (n < CHIME__REC_HEADER || n % 8 || n > chime__rec_len(CHIME_STORE_KEY_MAX, CHIME_STORE_PAYLOAD_MAX))
        return CHIME__REC_BAD;
    *len = n;
    if (avail < n)
        return CHIME__REC_SHORT;
    if (chime__crc_mask(chime__crc32c(0, p + 4, n - 4)) != get32(p) || !fields_ok(p, n))
        return CHIME__REC_BAD;
    out->type = p[8];
    out->flags = p[9];
    out->key_len = get16(p + 10);
    out->payload_len = get32(p + 12);
    out->version = get64(p + 16);
    out->due = get64(p + 24);
    out->attempt = get32(p + 32);
    out->kill_version = get64(p + 40);
    out->kill_due = get64(p + 48);
    out->kill_dead = get64(p + 56);
    /* A MARK's start, segment, salt and prev_end land in version, due, kill_version and kill_due
     * (chime__mark_valid). */
    out->key = out->key_len ? p + CHIME__REC_HEADER : NULL;
    out->payload = out->payload_len ? p + CHIME__REC_HEADER + out->key_len : NULL;
    out->raw = p;
    return CHIME__REC_WHOLE;
}

void chime__header_encode(void *dst, const struct chime__file_header *h)
{
    unsigned char *p = dst;
    memset(p, 0, CHIME__FILE_HEADER);
    memcpy(p, h->run ? magic_run : magic_wal, 8);
    put32(p + 8, CHIME__FORMAT_VERSION);
    put64(p + 16, h->lo);
    put64(p + 24, h->hi);
    put64(p + 32, h->next_version);
    put64(p + 40, h->created);
    put64(p + 48, h->run ? h->size : h->salt); /* one field, by kind (format.md) */
    if (!h->run)
        put32(p + 56, (uint32_t)h->size);
    put32(p + 60, chime__crc_mask(chime__crc32c(0, p, 60)));
}

int chime__header_decode(const void *src, struct chime__file_header *h)
{
    const unsigned char *p = src;
    if (chime__crc_mask(chime__crc32c(0, p, 60)) != get32(p + 60))
        return -EBADMSG;
    if (memcmp(p, magic_wal, 8) == 0)
        h->run = 0;
    else if (memcmp(p, magic_run, 8) == 0)
        h->run = 1;
    else
        return -EBADMSG;
    if (get32(p + 8) != CHIME__FORMAT_VERSION) /* whole, and ours, but not this format */
        return -EPROTO;
    if (get32(p + 12) != 0 || (h->run && get32(p + 56) != 0))
        return -EBADMSG;
    h->lo = get64(p + 16);
    h->hi = get64(p + 24);
    h->next_version = get64(p + 32);
    h->created = get64(p + 40);
    h->salt = h->run ? 0 : get64(p + 48);
    h->size = h->run ? get64(p + 48) : get32(p + 56);
    if (h->lo > h->hi || (!h->run && (h->lo != h->hi || h->salt == 0)) ||
        h->size < CHIME__FILE_HEADER || (h->run && h->size % 8))
        return -EBADMSG;
    return 0;
}

void chime__head_slot_encode(void *dst, uint64_t seq, uint64_t n)
{
    unsigned char *p = dst;
    memcpy(p, magic_head, 8);
    put32(p + 8, CHIME__FORMAT_VERSION);
    put32(p + 12, 0);
    put64(p + 16, seq);
    put64(p + 24, n);
    put32(p + 32, chime__crc_mask(chime__crc32c(0, p, 32)));
    put32(p + 36, 0);
}

int chime__head_slot_decode(const void *src, uint64_t *seq, uint64_t *n)
{
    const unsigned char *p = src;
    if (chime__crc_mask(chime__crc32c(0, p, 32)) != get32(p + 32) || memcmp(p, magic_head, 8))
        return -EBADMSG;
    if (get32(p + 8) != CHIME__FORMAT_VERSION)
        return -EPROTO;
    if (get32(p + 12) != 0 || get32(p + 36) != 0)
        return -EBADMSG;
    *seq = get64(p + 16);
    *n = get64(p + 24);
    return 0;
}

int chime__rec_cmp(const struct chime__rec *a, const struct chime__rec *b)
{
    int sa = chime__rec_section(a), sb = chime__rec_section(b);
    if (sa != sb)
        return sa - sb;
    uint64_t da = sa ? 0 : a->due, db = sb ? 0 : b->due;
    if (da != db)
        return da < db ? -1 : 1;
    if (a->version != b->version)
        return a->version < b->version ? -1 : 1;
    return chime__rec_rank(a) - chime__rec_rank(b);
}

int chime__rec_flatten(const struct chime__rec *r, struct chime__rec out[3])
{
    int n = 0;
    out[n] = *r;
    out[n].kill_version = out[n].kill_due = out[n].kill_dead = 0;
    if (r->kill_version || r->kill_due || r->kill_dead)
        out[n].raw = NULL; /* its encoding changes: the kill fields go */
    n++;
    if (r->kill_version) {
        out[n] = (struct chime__rec){ .type = CHIME__KILL, .key_len = r->key_len, .key = r->key,
                                      .version = r->kill_version, .due = r->kill_due };
        n++;
    }
    if (r->kill_dead) {
        out[n] = (struct chime__rec){ .type = CHIME__KILL, .flags = CHIME__KILL_DEAD,
                                      .key_len = r->key_len, .key = r->key,
                                      .version = r->kill_dead };
        n++;
    }
    return n;
}

void chime__wal_name(char out[CHIME__NAME_MAX], uint64_t segment)
{
    snprintf(out, CHIME__NAME_MAX, "wal-%016" PRIx64 ".log", segment);
}

void chime__run_name(char out[CHIME__NAME_MAX], uint64_t lo, uint64_t hi)
{
    snprintf(out, CHIME__NAME_MAX, "run-%016" PRIx64 "-%016" PRIx64 ".run", lo, hi);
}

/* 16 lowercase hex digits at p. Return: 1 and *v, or 0. */
static int hex16(const char *p, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = p[i];
        if (c >= '0' && c <= '9')
            x = x << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x = x << 4 | (uint64_t)(c - 'a' + 10);
        else
            return 0;
    }
    *v = x;
    return 1;
}

int chime__parse_name(const char *name, uint64_t *lo, uint64_t *hi)
{
    size_t n = strlen(name);
    if (n == 24 && !memcmp(name, "wal-", 4) && !strcmp(name + 20, ".log") && hex16(name + 4, lo)) {
        *hi = *lo;
        return 1;
    }
    if (n == 41 && !memcmp(name, "run-", 4) && name[20] == '-' && !strcmp(name + 37, ".run") &&
        hex16(name + 4, lo) && hex16(name + 21, hi))
        return 2;
    return 0;
}
