/* SPDX-License-Identifier: MIT */
/*
 * The journal's format (lib/store/format.c, checksum.c, hash.c): the checksum and hash against their
 * reference values, records and headers through encode and decode, the reader's view of cut and
 * flipped bytes, file names, and a run's order.
 */
#include "store_util.h"

#include "rng.h"
#include "store/checksum.h"
#include "store/format.h"
#include "store/hash.h"

/* A bit at a time, straight from the polynomial: the reference the fast paths must match. */
static uint32_t crc_reference(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static void crc32c_matches_the_check_value_and_a_bitwise_reference(void)
{
    CHECK_EQ(chime__crc32c(0, "123456789", 9), 0xe3069283u);
    unsigned char buf[300];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 1 + n / 8)
            CHECK_EQ(chime__crc32c(0, buf + off, n), crc_reference(buf + off, n));
    /* continuing a CRC over two pieces is the CRC of the whole */
    CHECK_EQ(chime__crc32c(chime__crc32c(0, buf, 100), buf + 100, 200), chime__crc32c(0, buf, 300));
}

static void siphash128_matches_the_reference_vectors(void)
{
    /* Key 00..0f, messages 00..(n-1): the first vectors of the authors' 128-bit test set. */
    static const unsigned char want[2][16] = {
        { 0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93 },
        { 0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45 },
    };
    unsigned char msg[2] = { 0, 1 };
    for (int n = 0; n < 2; n++) {
        struct chime__hash h = chime__siphash128(UINT64_C(0x0706050403020100),
                                                 UINT64_C(0x0f0e0d0c0b0a0908), msg, (size_t)n);
        for (int i = 0; i < 8; i++) {
            CHECK_EQ((h.lo >> (8 * i)) & 0xff, want[n][i]);
            CHECK_EQ((h.hi >> (8 * i)) & 0xff, want[n][8 + i]);
        }
    }
}

static struct chime__rec random_rec(struct rng *r, unsigned char *key, unsigned char *payload)
{
    static const uint8_t types[] = { CHIME__PUT, CHIME__KILL, CHIME__FIRE, CHIME__DEAD };
    struct chime__rec rec = { .type = types[rng_below(r, 4)] };
    rec.key_len = (uint16_t)(1 + rng_below(r, CHIME_STORE_KEY_MAX));
    for (int i = 0; i < rec.key_len; i++)
        key[i] = (unsigned char)rng_next(r);
    rec.key = key;
    if (rec.type == CHIME__PUT || rec.type == CHIME__DEAD) {
        rec.payload_len = (uint32_t)(1 + rng_below(r, rng_below(r, 2) ? 100 : CHIME_STORE_PAYLOAD_MAX));
        for (uint32_t i = 0; i < rec.payload_len; i++)
            payload[i] = (unsigned char)rng_next(r);
        rec.payload = payload;
        rec.kill_version = rng_below(r, 2) ? rng_next(r) : 0;
        rec.kill_due = rng_next(r);
        rec.kill_dead = rng_below(r, 2) ? rng_next(r) : 0;
    }
    if (rec.type == CHIME__KILL)
        rec.flags = (uint8_t)rng_below(r, 2);
    rec.version = 1 + rng_below(r, UINT64_MAX - 1);
    rec.due = rng_next(r);
    rec.attempt = (uint32_t)rng_next(r);
    return rec;
}

static void records_survive_encode_and_decode_and_every_flip_is_caught(void)
{
    struct rng r = { rng_seed("test_store_format") };
    static unsigned char key[CHIME_STORE_KEY_MAX], payload[CHIME_STORE_PAYLOAD_MAX];
    static unsigned char buf[CHIME__REC_MAX + 8];
    for (int round = 0; round < 200; round++) {
        struct chime__rec in = random_rec(&r, key, payload), out;
        uint32_t len = chime__rec_len(in.key_len, in.payload_len), got = 0;
        chime__rec_encode(buf, &in);
        CHECK_EQ(chime__rec_decode(buf, len, &out, &got), CHIME__REC_WHOLE);
        CHECK_EQ(got, len);
        CHECK(out.type == in.type && out.flags == in.flags && out.key_len == in.key_len &&
                  out.payload_len == in.payload_len && out.version == in.version &&
                  out.due == in.due && out.attempt == in.attempt &&
                  out.kill_version == in.kill_version && out.kill_due == in.kill_due &&
                  out.kill_dead == in.kill_dead && !memcmp(out.key, key, in.key_len) &&
                  (!in.payload_len || !memcmp(out.payload, payload, in.payload_len)),
              "round %d: a field changed", round);
        CHECK_EQ(chime__rec_decode(buf, len - 1, &out, &got), CHIME__REC_SHORT);
        if (len > 400)
            continue; /* flips: the small records, every byte */
        for (uint32_t i = 0; i < len; i++) {
            buf[i] ^= (unsigned char)(1 + rng_below(&r, 255));
            enum chime__decoded d = chime__rec_decode(buf, len, &out, &got);
            CHECK(d == CHIME__REC_BAD || d == CHIME__REC_SHORT, "a flip at %u went unseen (%d)", i, d);
            chime__rec_encode(buf, &in);
        }
    }
    memset(buf, 0, 64);
    CHECK_EQ(chime__rec_decode(buf, 64, NULL, NULL), CHIME__REC_END); /* zeros: never written */
    CHECK_EQ(chime__rec_decode(buf, 7, NULL, NULL), CHIME__REC_END);
}

static void headers_and_names_round_trip(void)
{
    unsigned char h[CHIME__FILE_HEADER];
    struct chime__file_header in = { 1, 5, 9, 123456, 42, 0, 4096 }, out;
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), 0);
    CHECK(out.run == 1 && out.lo == 5 && out.hi == 9 && out.next_version == 123456 &&
              out.size == 4096 && out.salt == 0, "a run's header and its size");
    h[20] ^= 1;
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    in.size = 56; /* a run is at least its header, and whole records of 8-byte multiples */
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    in.size = 4100;
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    in.size = CHIME__FILE_HEADER; /* an empty run: everything its segments held cancelled out */
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), 0);
    in = (struct chime__file_header){ 0, 7, 8, 1, 0, 99, 4096 }; /* a segment covers one number */
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    in = (struct chime__file_header){ 0, 7, 7, 1, 0, 99, 4100 };
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), 0);
    CHECK(out.run == 0 && out.lo == 7 && out.salt == 99 && out.size == 4100,
          "a segment's header, its salt and the size it was created at");
    in.size = CHIME__FILE_HEADER - 8; /* a segment too is at least its header */
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    in.size = 4100;
    in.salt = 0; /* a segment's salt is never 0 (its MARKs carry it) */
    chime__header_encode(h, &in);
    CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);

    char name[CHIME__NAME_MAX];
    uint64_t lo, hi;
    chime__wal_name(name, 0xabc);
    CHECK(strcmp(name, "wal-0000000000000abc.log") == 0, "%s", name);
    CHECK_EQ(chime__parse_name(name, &lo, &hi), 1);
    CHECK(lo == 0xabc && hi == 0xabc, "segment number");
    chime__run_name(name, 3, 0xffffffffffffffffu);
    CHECK_EQ(chime__parse_name(name, &lo, &hi), 2);
    CHECK(lo == 3 && hi == UINT64_MAX, "run range");
    CHECK_EQ(chime__parse_name("run-0000000000000003-000000000000000G.run", &lo, &hi), 0);
    CHECK_EQ(chime__parse_name("wal-0000000000000003.log.tmp", &lo, &hi), 0);
    CHECK_EQ(chime__parse_name("LOCK", &lo, &hi), 0);
}

/* A whole header, but of an earlier format: version 1 (before MARKs: no salt), version 2 (a run's
 * size not in its header), version 4 (a segment's size not in its header): refused as another
 * version, not taken for a header a crash cut. */
static void a_header_of_an_earlier_format_version_is_eproto(void)
{
    unsigned char h[CHIME__FILE_HEADER];
    struct chime__file_header in = { 0, 3, 3, 1, 0, 0, 0 }, out;
    for (int run = 0; run < 6; run++) {
        in.run = run & 1;
        chime__header_encode(h, &in);
        memset(h + 8, 0, 4);
        h[8] = (unsigned char)(run < 2 ? 1 : run < 4 ? 2 : 4); /* versions 1, 2 and 4 */
        memset(h + 48, 0, 12); /* no salt in version 1, no run size before 3, no segment's before 5 */
        uint32_t crc = chime__crc_mask(chime__crc32c(0, h, 60));
        for (int i = 0; i < 4; i++)
            h[60 + i] = (unsigned char)(crc >> (8 * i));
        CHECK_EQ(chime__header_decode(h, &out), -EPROTO);
        h[20] ^= 1; /* and not whole: damage, as before */
        CHECK_EQ(chime__header_decode(h, &out), -EBADMSG);
    }
}

static void a_mark_round_trips_and_is_valid_only_where_its_segment_can_hold_it(void)
{
    unsigned char buf[CHIME__MARK_LEN];
    struct chime__file_header seg = { 0, 12, 12, 1, 0, 0x5a17, 0 }, run = { 1, 12, 12, 1, 0, 0, 64 };
    chime__mark_encode(buf, &(struct chime__batch_mark){ .start = 256, .segment = 12,
                                                         .salt = 0x5a17, .prev_end = 0x1238 });
    struct chime__rec r;
    struct chime__batch_mark m;
    uint32_t len = 0;
    CHECK_EQ(chime__rec_decode(buf, sizeof buf, &r, &len), CHIME__REC_WHOLE);
    CHECK_EQ(len, CHIME__MARK_LEN);
    CHECK_EQ(r.type, CHIME__MARK);
    CHECK(chime__mark_valid(&r, &seg, 256, &m), "a MARK right after its batch's start");
    CHECK(m.start == 256 && m.segment == 12 && m.salt == 0x5a17 && m.prev_end == 0x1238,
          "its fields");
    CHECK(chime__mark_valid(&r, &seg, 4096, NULL), "a MARK after its batch's records");
    CHECK(!chime__mark_valid(&r, &seg, 248, NULL), "a MARK before the start it names");
    CHECK(!chime__mark_valid(&r, &run, 4096, NULL), "a MARK in a run");
    seg.salt++;
    CHECK(!chime__mark_valid(&r, &seg, 4096, NULL), "a MARK with another segment's salt");
    seg.salt--;
    seg.lo = seg.hi = 13;
    CHECK(!chime__mark_valid(&r, &seg, 4096, NULL), "a MARK naming another segment");
    for (size_t i = 0; i < sizeof buf; i++) { /* every flip of every byte is caught */
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1u << bit);
            enum chime__decoded d = chime__rec_decode(buf, sizeof buf, &r, &len);
            CHECK(d == CHIME__REC_BAD || d == CHIME__REC_SHORT || d == CHIME__REC_END,
                  "a flip of bit %d at %zu went unseen (%d)", bit, i, d);
            buf[i] ^= (unsigned char)(1u << bit);
        }
    }
    /* A MARK's fields are checked as a record's are: a start of 0 is not whole. */
    chime__mark_encode(buf, &(struct chime__batch_mark){ .start = 0, .segment = 12, .salt = 1 });
    CHECK_EQ(chime__rec_decode(buf, sizeof buf, &r, &len), CHIME__REC_BAD);
}

static void a_run_sorts_pending_by_due_then_dead_letters_by_version(void)
{
    struct chime__rec put = { .type = CHIME__PUT, .version = 5, .due = 100 };
    struct chime__rec fire = { .type = CHIME__FIRE, .version = 5, .due = 100 };
    struct chime__rec kill = { .type = CHIME__KILL, .version = 5, .due = 100 };
    struct chime__rec later = { .type = CHIME__PUT, .version = 2, .due = 101 };
    struct chime__rec dead = { .type = CHIME__DEAD, .version = 1, .due = 5 };
    struct chime__rec undead = { .type = CHIME__KILL, .flags = CHIME__KILL_DEAD, .version = 1 };
    struct chime__rec dead2 = { .type = CHIME__DEAD, .version = 3, .due = 1 };
    const struct chime__rec *order[] = { &put, &fire, &kill, &later, &dead, &undead, &dead2 };
    for (int i = 0; i < 7; i++)
        for (int k = 0; k < 7; k++) {
            int c = chime__rec_cmp(order[i], order[k]);
            CHECK(i < k ? c < 0 : i > k ? c > 0 : c == 0, "order of %d and %d", i, k);
        }
    /* A segment's PUT that replaces a timer and requeues a dead letter is three run records. */
    struct chime__rec wal = { .type = CHIME__PUT, .key_len = 1, .key = "k", .payload_len = 1,
                              .payload = "p", .version = 9, .due = 50, .kill_version = 4,
                              .kill_due = 40, .kill_dead = 2 };
    struct chime__rec flat[3];
    CHECK_EQ(chime__rec_flatten(&wal, flat), 3);
    CHECK(flat[0].type == CHIME__PUT && flat[0].kill_version == 0 && flat[0].version == 9, "put");
    CHECK(flat[1].type == CHIME__KILL && flat[1].version == 4 && flat[1].due == 40, "its kill");
    CHECK(flat[2].type == CHIME__KILL && flat[2].flags == CHIME__KILL_DEAD && flat[2].version == 2,
          "the dead letter it takes");
}

static const struct tap_test tests[] = {
    { "crc32c_matches_the_check_value_and_a_bitwise_reference",
      crc32c_matches_the_check_value_and_a_bitwise_reference },
    { "siphash128_matches_the_reference_vectors", siphash128_matches_the_reference_vectors },
    { "records_survive_encode_and_decode_and_every_flip_is_caught",
      records_survive_encode_and_decode_and_every_flip_is_caught },
    { "headers_and_names_round_trip", headers_and_names_round_trip },
    { "a_header_of_an_earlier_format_version_is_eproto",
      a_header_of_an_earlier_format_version_is_eproto },
    { "a_mark_round_trips_and_is_valid_only_where_its_segment_can_hold_it",
      a_mark_round_trips_and_is_valid_only_where_its_segment_can_hold_it },
    { "a_run_sorts_pending_by_due_then_dead_letters_by_version",
      a_run_sorts_pending_by_due_then_dead_letters_by_version },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
