// test_fault_stream.c - a record stream cut at every byte offset: the reader
// returns exactly the records flushed before the cut, then a truncation error,
// never a clean end. Also the helper behind tests/sh/t_faults.sh:
//   test_fault_stream --reframe IN OUT
// rewrites IN's records into OUT with a flush after each one (as a tool that
// is killed mid-stream leaves it) and prints the byte offset of OUT after each
// record, one per line: the record boundaries to cut at.
#include "harness.h"
#include "record/record.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NREC 6

static off_t fd_size(int fd) {
    struct stat s;
    return fstat(fd, &s) == 0 ? s.st_size : -1;
}

// Write NREC records to a temp file, flushing after each; ends[i] = size after
// record i. Returns the fd (at offset 0) of the whole stream.
static int write_stream(char *path, off_t *ends, off_t *total) {
    int fd = mkstemp(path);
    skpo_writer *w;
    skpo_err e = {0};
    if (fd < 0 || skpo_writer_open_fd(dup(fd), 3, &w, &e) != SKPO_OK) return -1;
    for (int i = 0; i < NREC; i++) {
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_DOWN);
        skpo_rec_set_int(&r, "i", i);
        char text[200];
        memset(text, 'a' + i, sizeof text - 1);
        text[sizeof text - 1] = 0;
        skpo_rec_set_str(&r, F_TEXT, text);
        if (skpo_writer_put(w, &r, &e) != SKPO_OK || skpo_writer_flush(w, &e) != SKPO_OK) return -1;
        ends[i] = fd_size(fd);
        skpo_rec_free(&r);
    }
    if (skpo_writer_close(w, &e) != SKPO_OK) return -1;
    *total = fd_size(fd);
    return fd;
}

// Read the first n bytes of fd as a stream: records before the error, status.
static skpo_status read_prefix(int fd, off_t n, int *nrec, skpo_err *e) {
    char cut[] = "/tmp/skpo-cut-XXXXXX";
    int c = mkstemp(cut);
    char *buf = malloc(n ? (size_t)n : 1);
    if (c < 0 || pread(fd, buf, (size_t)n, 0) != n || write(c, buf, (size_t)n) != n) abort();
    free(buf);
    unlink(cut);
    lseek(c, 0, SEEK_SET);
    skpo_reader *rd;
    skpo_status st = skpo_reader_open_fd(c, cut, &rd, e);
    *nrec = 0;
    if (st != SKPO_OK) return st;
    skpo_rec r;
    skpo_rec_init(&r);
    while ((st = skpo_reader_next(rd, &r, e)) == SKPO_OK) ++*nrec;
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st;
}

static void stream_cut_at_any_offset_gives_flushed_records_then_error(void) {
    char path[] = "/tmp/skpo-stream-XXXXXX";
    off_t ends[NREC], total;
    int fd = write_stream(path, ends, &total);
    CHECK(fd >= 0);
    if (fd < 0) return;
    unlink(path);
    int bad = 0;
    for (off_t k = 0; k < total && bad < 5; k++) {
        int n, want = 0;
        while (want < NREC && ends[want] <= k) want++;
        skpo_err e = {0};
        skpo_status st = read_prefix(fd, k, &n, &e);
        if (st == SKPO_OK || st == SKPO_EOF || n != want || !e.msg[0]) {
            fprintf(stderr, "  cut at %lld of %lld: status %d, %d records (want %d): %s\n", (long long)k,
                    (long long)total, st, n, want, e.msg);
            bad++;
        }
    }
    CHECK(bad == 0);
    int n;
    skpo_err e = {0};
    CHECK(read_prefix(fd, total, &n, &e) == SKPO_EOF && n == NREC);
    close(fd);
}

static void truncation_error_names_the_stream_and_offset(void) {
    char path[] = "/tmp/skpo-stream-XXXXXX";
    off_t ends[NREC], total;
    int fd = write_stream(path, ends, &total);
    CHECK(fd >= 0);
    if (fd < 0) return;
    unlink(path);
    int n;
    skpo_err e = {0};
    CHECK(read_prefix(fd, ends[2], &n, &e) != SKPO_OK && n == 3);
    CHECK_MSG(strstr(e.msg, "/tmp/skpo-cut-") && strstr(e.msg, "record 4") && strstr(e.msg, "offset"), "%s", e.msg);
    close(fd);
}

// A log appended to by a writer that was killed mid-frame: the next append
// cuts the torn frame off, so the log stays readable.
static void append_after_torn_frame_keeps_the_log_readable(void) {
    char path[] = "/tmp/skpo-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    skpo_err e = {0};
    off_t whole = 0;
    for (int round = 0; round < 3; round++) {
        skpo_writer *w;
        skpo_rec r;
        skpo_rec_init(&r);
        skpo_rec_set_str(&r, F_KIND, SKPO_KIND_METRICS);
        skpo_rec_set_int(&r, "round", round);
        CHECK(skpo_writer_open_append(path, 3, &w, &e) == SKPO_OK);
        CHECK(skpo_writer_put(w, &r, &e) == SKPO_OK && skpo_writer_close(w, &e) == SKPO_OK);
        skpo_rec_free(&r);
        struct stat sb;
        CHECK(stat(path, &sb) == 0);
        if (round == 1) CHECK(truncate(path, whole + (sb.st_size - whole) / 2) == 0);  // round 1 is torn
        whole = sb.st_size;
    }
    skpo_rec *recs;
    size_t n;
    CHECK_MSG(skpo_read_all(path, &recs, &n, &e) == SKPO_OK, "%s", e.msg);
    int64_t a = -1, b = -1;
    CHECK(n == 2 && skpo_rec_int(&recs[0], "round", &a) && skpo_rec_int(&recs[1], "round", &b) && a == 0 && b == 2);
    skpo_recs_free(recs, n);
    unlink(path);
}

// --- helper mode ------------------------------------------------------------------

static int reframe(const char *in, const char *out) {
    skpo_reader *rd;
    skpo_writer *w;
    skpo_err e = {0};
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || skpo_reader_open(in, &rd, &e) || skpo_writer_open_fd(dup(fd), 3, &w, &e)) {
        fprintf(stderr, "test_fault_stream: %s\n", e.msg[0] ? e.msg : "cannot open output");
        return 1;
    }
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_status st;
    while ((st = skpo_reader_next(rd, &r, &e)) == SKPO_OK) {
        if (skpo_writer_put(w, &r, &e) || skpo_writer_flush(w, &e)) break;
        printf("%lld\n", (long long)fd_size(fd));
    }
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    if (st != SKPO_EOF || skpo_writer_close(w, &e) != SKPO_OK) {
        fprintf(stderr, "test_fault_stream: %s\n", e.msg);
        return 1;
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--reframe")) return reframe(argv[2], argv[3]);
    RUN(stream_cut_at_any_offset_gives_flushed_records_then_error);
    RUN(truncation_error_names_the_stream_and_offset);
    RUN(append_after_torn_frame_keeps_the_log_readable);
    return TEST_SUMMARY();
}
