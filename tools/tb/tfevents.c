/*
 * tfevents.c - see tfevents.h. Protobuf encoding of the four fields we need and
 * the TFRecord framing; nothing here reads event files back (tests do).
 */
#include "tfevents.h"
#include "base/common.h"

#include <stdlib.h>
#include <string.h>

uint32_t tfev_crc32c(const void *data, size_t n) {
    // Bitwise reflected CRC with polynomial 0x82f63b78: event files are small,
    // clarity beats a table here.
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return crc ^ 0xffffffffu;
}

uint32_t tfev_masked_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void tfev_buf_free(tfev_buf *b) {
    free(b->p);
    *b = (tfev_buf){0};
}

static void put(tfev_buf *b, const void *src, size_t n) {
    skpo_xgrow((void **)&b->p, &b->cap, b->n + n, 1);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(tfev_buf *b, uint64_t v) {
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    put(b, tmp, n);
}

static void put_le(tfev_buf *b, uint64_t v, int bytes) {
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * i));
    put(b, tmp, (size_t)bytes);
}

// field key = (number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32)
static void put_key(tfev_buf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_bytes_field(tfev_buf *b, int field, const void *p, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put(b, p, n);
}

static void put_double_field(tfev_buf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

void tfev_encode_version(tfev_buf *b, double wall_time) {
    b->n = 0;
    put_double_field(b, 1, wall_time);
    put_bytes_field(b, 3, "brain.Event:2", 13);
}

void tfev_encode_scalar(tfev_buf *b, double wall_time, int64_t step, const char *tag, float value) {
    tfev_buf value_msg = {0}, summary = {0};
    put_bytes_field(&value_msg, 1, tag, strlen(tag));
    uint32_t u;
    memcpy(&u, &value, sizeof u);
    put_key(&value_msg, 2, 5);
    put_le(&value_msg, u, 4);
    put_bytes_field(&summary, 1, value_msg.p, value_msg.n);
    b->n = 0;
    put_double_field(b, 1, wall_time);
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step); // int64 varint: negatives take 10 bytes, as protobuf does
    put_bytes_field(b, 5, summary.p, summary.n);
    tfev_buf_free(&value_msg);
    tfev_buf_free(&summary);
}

int tfev_write_record(FILE *f, const void *data, size_t n) {
    unsigned char head[12];
    uint64_t len = n;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t hc = tfev_masked_crc(tfev_crc32c(head, 8));
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i));
    uint32_t dc = tfev_masked_crc(tfev_crc32c(data, n));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(dc >> (8 * i));
    if (fwrite(head, 1, 12, f) != 12) return -1;
    if (n && fwrite(data, 1, n, f) != n) return -1;
    if (fwrite(tail, 1, 4, f) != 4) return -1;
    return 0;
}
