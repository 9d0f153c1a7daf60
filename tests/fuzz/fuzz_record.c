// fuzz_record.c - the record reader on arbitrary bytes: both the zstd stream
// path (through a memfd) and the plain msgpack map decoder. Any input must
// give records or a clean error, never a crash, leak or hang.
#define _GNU_SOURCE
#include "record/record.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    skpo_err e = {0};
    skpo_rec r;
    skpo_rec_init(&r);
    if (skpo_rec_unpack((const char *)data, size, &r, &e) == SKPO_OK) {
        char *buf;
        size_t len;
        skpo_rec_pack(&r, &buf, &len);  // whatever decodes must re-encode
        free(buf);
    }
    int fd = memfd_create("fuzz", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0) {
            skpo_reader *rd;
            if (skpo_reader_open_fd(fd, "fuzz", &rd, &e) == SKPO_OK) {
                for (int i = 0; i < 1000 && skpo_reader_next(rd, &r, &e) == SKPO_OK; i++) {}
                skpo_reader_close(rd);
            }
        }
        close(fd);
    }
    skpo_rec_free(&r);
    return 0;
}
