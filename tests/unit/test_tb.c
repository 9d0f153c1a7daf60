// test_tb.c - skpo-tb's TensorBoard event encoding: CRC32C, the masked CRC
// framing and the Event protobuf bytes, against bytes written by tensorboard's
// own Python RecordWriter (event_pb2, tensorboard 2.21) for the same events.
#include "harness.h"
#include "../../tools/tb/tfevents.c"

#include <string.h>

static void hex(const char *h, unsigned char *out, size_t *n) {
    *n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[(*n)++] = (unsigned char)v;
    }
}

static int write_to_buffer(const void *data, size_t n, unsigned char *out, size_t *outn) {
    FILE *f = fmemopen(out, 256, "wb");
    if (!f) return -1;
    int rc = tfev_write_record(f, data, n);
    *outn = (size_t)ftell(f);
    fclose(f);
    return rc;
}

static void crc32c_matches_the_castagnoli_check_value(void) {
    CHECK(tfev_crc32c("123456789", 9) == 0xe3069283u);
    CHECK(tfev_crc32c("", 0) == 0);
}

static void scalar_event_bytes_match_tensorboard(void) {
    unsigned char want[256];
    size_t wn;
    hex("0900001040fc54d94110072a140a120a0b7265776172642f6d65616e150000c0be", want, &wn);
    tfev_buf b = {0};
    tfev_encode_scalar(&b, 1700000000.25, 7, "reward/mean", -0.375f);
    CHECK(b.n == wn && !memcmp(b.p, want, wn));
    tfev_buf_free(&b);
}

static void framed_records_match_tensorboard_record_writer(void) {
    unsigned char want[256], got[256];
    size_t wn, gn;
    tfev_buf b = {0};
    tfev_encode_scalar(&b, 1700000000.25, 7, "reward/mean", -0.375f);
    hex("2100000000000000017becf60900001040fc54d94110072a140a120a0b7265776172642f6d65616e150000c0bebf6c3595", want, &wn);
    CHECK(write_to_buffer(b.p, b.n, got, &gn) == 0);
    CHECK(gn == wn && !memcmp(got, want, wn));
    tfev_encode_version(&b, 1700000000.25);
    hex("1800000000000000a37f4b220900001040fc54d9411a0d627261696e2e4576656e743a32338d2fe9", want, &wn);
    CHECK(write_to_buffer(b.p, b.n, got, &gn) == 0);
    CHECK(gn == wn && !memcmp(got, want, wn));
    tfev_buf_free(&b);
}

static void corrupting_one_byte_changes_the_data_crc(void) {
    unsigned char a[] = "loss", c[] = "loss";
    c[2] ^= 1;
    CHECK(tfev_masked_crc(tfev_crc32c(a, 4)) != tfev_masked_crc(tfev_crc32c(c, 4)));
}

int main(void) {
    RUN(crc32c_matches_the_castagnoli_check_value);
    RUN(scalar_event_bytes_match_tensorboard);
    RUN(framed_records_match_tensorboard_record_writer);
    RUN(corrupting_one_byte_changes_the_data_crc);
    return TEST_SUMMARY();
}
