/*
 * tfevents.h - TensorBoard event files, written by hand (no protobuf library).
 *
 * File layout (TFRecord framing, one record per Event):
 *   uint64 LE  length of data
 *   uint32 LE  masked CRC32C of the 8 length bytes
 *   bytes      data: a serialized tensorflow.Event protobuf
 *   uint32 LE  masked CRC32C of data
 * masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
 *
 * The Event fields we write (tensorflow/core/util/event.proto):
 *   1 wall_time double (fixed64)   2 step int64 (varint)
 *   3 file_version string          5 summary Summary (length-delimited)
 * Summary: 1 value repeated Value.  Value: 1 tag string, 2 simple_value float (fixed32).
 * The first record of a file is an Event with file_version "brain.Event:2".
 * Only scalars: that is what per-step training metrics are.
 */
#ifndef SKPO_TFEVENTS_H
#define SKPO_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// CRC-32C (Castagnoli, reflected, init and final xor 0xffffffff).
uint32_t tfev_crc32c(const void *data, size_t n);
uint32_t tfev_masked_crc(uint32_t crc);

// A growable byte buffer for one serialized Event.
typedef struct tfev_buf {
    unsigned char *p;
    size_t n, cap;
} tfev_buf;

void tfev_buf_free(tfev_buf *b);
// Event with file_version only (the file header event).
void tfev_encode_version(tfev_buf *b, double wall_time);
// Event with one scalar: Summary{Value{tag, simple_value}}.
void tfev_encode_scalar(tfev_buf *b, double wall_time, int64_t step, const char *tag, float value);
// Frame data as one TFRecord and write it; returns 0 on success, -1 on a write error.
int tfev_write_record(FILE *f, const void *data, size_t n);

#endif
