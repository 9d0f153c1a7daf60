/*
 * recstream.c - record streams: reader and writer (see record.h).
 *
 * Reading: compressed bytes are read from the fd in chunks and decompressed
 * with ZSTD_decompressStream into one growing buffer; skpo_mp_check finds
 * where each record ends (and rejects counts the bytes cannot back) and
 * skpo_rec_decode copies it into a skpo_rec. msgpack-c's unpacker is not used
 * on input: it sizes allocations from declared counts (a 5-byte header can ask
 * for gigabytes), builds a 24-byte object per nested element, and re-encodes
 * nested values instead of keeping their bytes. Damage is reported only after
 * every record decoded before it has been returned.
 * Writing: records are packed into a reused buffer and fed to
 * ZSTD_compressStream2; frames carry a checksum.
 */
#define _GNU_SOURCE
#include "record/record.h"
#include "record/mpcheck.h"
#include "record/record_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

// --- reading -----------------------------------------------------------------------

#define READ_CHUNK ((size_t)1 << 17)
#define OUT_CHUNK ((size_t)1 << 18)

// Where decompressed bytes came from: output up to out_end was produced by a
// decompress call that started at compressed offset in_start.
typedef struct ckpt {
    uint64_t out_end, in_start;
} ckpt;

struct skpo_reader {
    int fd;
    bool own_fd, eof, any_input, out_full;
    char *name;
    ZSTD_DCtx *dctx;
    char *in;
    ZSTD_inBuffer zin;
    uint64_t in_base;  // compressed bytes read before `in`
    size_t last_ret;   // last ZSTD_decompressStream result: 0 = at a frame end
    char *buf;         // decompressed bytes: [off, used) not yet returned
    size_t off, used, cap;
    uint64_t fed;      // decompressed bytes produced so far
    ckpt *ck;
    size_t ck_head, ck_n, ck_cap;
    uint64_t count;
    size_t recheck_at; // walk a pending record again once this many bytes are buffered
    skpo_status sticky;
    skpo_err sticky_err;
};

static void ck_push(skpo_reader *rd, uint64_t out_end, uint64_t in_start) {
    if (rd->ck_head > 0 && rd->ck_head * 2 >= rd->ck_n) {
        memmove(rd->ck, rd->ck + rd->ck_head, (rd->ck_n - rd->ck_head) * sizeof *rd->ck);
        rd->ck_n -= rd->ck_head;
        rd->ck_head = 0;
    }
    skpo_xgrow((void **)&rd->ck, &rd->ck_cap, rd->ck_n + 1, sizeof *rd->ck);
    rd->ck[rd->ck_n++] = (ckpt){out_end, in_start};
}

// Compressed offset at which the decompressed byte `d` was produced. Entries
// for output before `d` are dropped: records are consumed in order.
static uint64_t ck_map(skpo_reader *rd, uint64_t d) {
    while (rd->ck_head < rd->ck_n && rd->ck[rd->ck_head].out_end <= d) rd->ck_head++;
    if (rd->ck_head < rd->ck_n) return rd->ck[rd->ck_head].in_start;
    return rd->in_base + rd->zin.size;
}

// Start (decompressed offset) of the record not yet returned.
static uint64_t cur_start(const skpo_reader *rd) {
    return rd->fed - (rd->used - rd->off);
}

static skpo_status fail(skpo_reader *rd, skpo_status st, uint64_t off, skpo_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static skpo_status fail(skpo_reader *rd, skpo_status st, uint64_t off, skpo_err *err, const char *fmt, ...) {
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    rd->sticky = st;
    // name the stream, unless the message already does
    char quoted[300];
    snprintf(quoted, sizeof quoted, "'%s'", rd->name);
    bool named = strstr(what, quoted) != NULL;
    skpo_err_set(&rd->sticky_err, st, "%s%s%s at record %llu (byte offset %llu)", what, named ? "" : " in ",
                 named ? "" : quoted, (unsigned long long)rd->count + 1, (unsigned long long)off);
    if (err) *err = rd->sticky_err;
    return st;
}

skpo_status skpo_reader_open_fd(int fd, const char *name, skpo_reader **out, skpo_err *err) {
    skpo_reader *rd = skpo_xcalloc(1, sizeof *rd);
    rd->fd = fd;
    rd->name = skpo_xstrdup(name);
    rd->dctx = ZSTD_createDCtx();
    rd->in = skpo_xmalloc(READ_CHUNK);
    if (!rd->dctx) {
        free(rd->in);
        free(rd->name);
        free(rd);
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate a reader for '%s'", name);
    }
    rd->zin.src = rd->in;
    *out = rd;
    return SKPO_OK;
}

skpo_status skpo_reader_open(const char *path, skpo_reader **out, skpo_err *err) {
    if (!strcmp(path, "-")) return skpo_reader_open_fd(0, "stdin", out, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skpo_err_set(err, errno == ENOENT ? SKPO_ENOTFOUND : SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
    skpo_status st = skpo_reader_open_fd(fd, path, out, err);
    if (st) close(fd);
    else (*out)->own_fd = true;
    return st;
}

// Room for OUT_CHUNK more decompressed bytes: drop what was returned, then grow.
static void reserve(skpo_reader *rd) {
    if (rd->cap - rd->used >= OUT_CHUNK) return;
    if (rd->off) {
        memmove(rd->buf, rd->buf + rd->off, rd->used - rd->off);
        rd->used -= rd->off;
        rd->off = 0;
    }
    skpo_xgrow((void **)&rd->buf, &rd->cap, rd->used + OUT_CHUNK, 1);
}

// Decompress more bytes into the buffer. SKPO_EOF when the input is
// exhausted and the decompressor holds nothing more.
static skpo_status fill(skpo_reader *rd, skpo_err *err) {
    for (;;) {
        if (rd->zin.pos == rd->zin.size && !rd->out_full) {
            if (rd->eof) return SKPO_EOF;
            ssize_t k;
            do k = read(rd->fd, rd->in, READ_CHUNK);
            while (k < 0 && errno == EINTR);
            if (k < 0)
                return fail(rd, SKPO_EIO, rd->in_base + rd->zin.size, err, "cannot read '%s': %s", rd->name, strerror(errno));
            rd->in_base += rd->zin.size;
            rd->zin.size = (size_t)k;
            rd->zin.pos = 0;
            if (k == 0) {
                rd->eof = true;
                return SKPO_EOF;
            }
            rd->any_input = true;
        }
        if (rd->used - rd->off > SKPO_MAX_RECORD_BYTES)
            return fail(rd, SKPO_ERANGE, ck_map(rd, cur_start(rd)), err, "record larger than %zu bytes", SKPO_MAX_RECORD_BYTES);
        reserve(rd);
        ZSTD_outBuffer zout = {rd->buf + rd->used, rd->cap - rd->used, 0};
        uint64_t in_start = rd->in_base + rd->zin.pos;
        size_t ret = ZSTD_decompressStream(rd->dctx, &zout, &rd->zin);
        if (ZSTD_isError(ret))
            return fail(rd, SKPO_EFORMAT, in_start, err, "corrupt zstd data (%s)", ZSTD_getErrorName(ret));
        rd->last_ret = ret;
        rd->out_full = zout.pos == zout.size;
        if (zout.pos) {
            rd->used += zout.pos;
            rd->fed += zout.pos;
            ck_push(rd, rd->fed, in_start);
            return SKPO_OK;
        }
    }
}

// Clean end of input or one of the truncation errors.
static skpo_status at_eof(skpo_reader *rd, skpo_err *err) {
    uint64_t end = rd->in_base;
    if (!rd->any_input) return fail(rd, SKPO_EFORMAT, 0, err, "empty input (no zstd frame)");
    if (rd->last_ret != 0) return fail(rd, SKPO_EFORMAT, end, err, "truncated zstd frame");
    if (rd->used > rd->off)
        return fail(rd, SKPO_EFORMAT, ck_map(rd, cur_start(rd)), err, "truncated record (%zu bytes of an incomplete msgpack value at the end)",
                    rd->used - rd->off);
    return SKPO_EOF;
}

static skpo_status check_meta(skpo_reader *rd, const skpo_rec *r, uint64_t off, skpo_err *err) {
    int64_t v;
    if (!skpo_rec_is_kind(r, SKPO_KIND_META) || !skpo_rec_int(r, F_SCHEMA, &v) || v == SKPO_SCHEMA_VERSION) return SKPO_OK;
    return fail(rd, SKPO_EUNSUPPORTED, off, err,
                "stream '%s' has record schema %lld but this skpo reads schema %d (regenerate the stream with this "
                "skpo's tools, or read it with the skpo build that wrote it)",
                rd->name, (long long)v, SKPO_SCHEMA_VERSION);
}

// Is more input ready without blocking (decompressor output pending, input
// buffered, or the fd readable now)?
static bool more_ready(skpo_reader *rd) {
    if (rd->eof) return false;
    if (rd->zin.pos < rd->zin.size || rd->out_full) return true;
    struct pollfd pf = {rd->fd, POLLIN, 0};
    return poll(&pf, 1, 0) == 1;
}

// Find the next complete record in the buffer (*size its bytes).
// skpo_mp_check walks it before msgpack-c sees it, so msgpack-c never sizes
// an allocation from a declared count the bytes cannot back. A record that
// spans many reads is walked again only once its buffered prefix has doubled
// or no more input is ready: linear overall, and no added latency in a pipe.
static skpo_status frame(skpo_reader *rd, bool final, size_t *size, skpo_err *err) {
    size_t pending = rd->used - rd->off;
    if (!pending) return SKPO_EOF;
    if (!final && pending < rd->recheck_at && more_ready(rd)) return SKPO_EOF;
    skpo_err e;
    skpo_status st = skpo_mp_check(rd->buf + rd->off, pending, 0, size, &e);
    if (st == SKPO_EOF) {
        rd->recheck_at = 2 * pending;
        return SKPO_EOF;
    }
    if (st) return fail(rd, SKPO_EFORMAT, ck_map(rd, cur_start(rd)), err, "malformed msgpack (%s)", e.msg);
    rd->recheck_at = 0;
    return SKPO_OK;
}

// Decode the complete record of `size` bytes at the front of the buffer.
static skpo_status decode(skpo_reader *rd, skpo_rec *r, size_t size, skpo_err *err) {
    uint64_t off = ck_map(rd, cur_start(rd));
    skpo_err e;
    skpo_status st = skpo_rec_decode(rd->buf + rd->off, size, r, &e);
    rd->off += size;
    if (!st) st = check_meta(rd, r, off, err);
    else fail(rd, st, off, err, "%s", e.msg);
    if (st) {
        skpo_rec_clear(r);
        return st;
    }
    rd->count++;
    return SKPO_OK;
}

skpo_status skpo_reader_next(skpo_reader *rd, skpo_rec *r, skpo_err *err) {
    if (rd->sticky) {
        if (err) *err = rd->sticky_err;
        skpo_rec_clear(r);
        return rd->sticky;
    }
    for (;;) {
        size_t size = 0;
        skpo_status st = frame(rd, false, &size, err);
        if (st == SKPO_OK) return decode(rd, r, size, err);
        if (st == SKPO_EOF) st = fill(rd, err);
        if (st == SKPO_EOF) {
            st = frame(rd, true, &size, err);
            if (st == SKPO_OK) return decode(rd, r, size, err);
            if (st == SKPO_EOF) st = at_eof(rd, err);
        }
        if (st) {
            skpo_rec_clear(r);
            return st;
        }
    }
}

uint64_t skpo_reader_count(const skpo_reader *rd) { return rd->count; }
const char *skpo_reader_name(const skpo_reader *rd) { return rd->name; }

void skpo_reader_close(skpo_reader *rd) {
    if (!rd) return;
    if (rd->own_fd) close(rd->fd);
    free(rd->buf);
    ZSTD_freeDCtx(rd->dctx);
    free(rd->in);
    free(rd->ck);
    free(rd->name);
    free(rd);
}

skpo_status skpo_read_all(const char *path, skpo_rec **recs, size_t *n, skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    skpo_rec *a = NULL;
    size_t cnt = 0, cap = 0;
    for (;;) {
        skpo_xgrow((void **)&a, &cap, cnt + 1, sizeof *a);
        skpo_rec_init(&a[cnt]);
        st = skpo_reader_next(rd, &a[cnt], err);
        if (st) break;
        cnt++;
    }
    skpo_rec_free(&a[cnt]);
    skpo_reader_close(rd);
    if (st != SKPO_EOF) {
        skpo_recs_free(a, cnt);
        return st;
    }
    *recs = a;
    *n = cnt;
    return SKPO_OK;
}

skpo_status skpo_read_each(const char *path, const char *kind, skpo_rec_fn fn, void *ctx, skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    skpo_rec r;
    skpo_rec_init(&r);
    while ((st = skpo_reader_next(rd, &r, err)) == SKPO_OK)
        if ((!kind || skpo_rec_is_kind(&r, kind)) && (st = fn(&r, skpo_reader_name(rd), ctx, err))) break;
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st == SKPO_EOF ? SKPO_OK : st;
}

void skpo_recs_free(skpo_rec *recs, size_t n) {
    for (size_t i = 0; i < n; i++) skpo_rec_free(&recs[i]);
    free(recs);
}

// --- writing -----------------------------------------------------------------------

struct skpo_writer {
    int fd;
    enum { W_FD, W_ATOMIC, W_APPEND } mode;
    skpo_afile af;
    char *name;
    ZSTD_CCtx *cctx;
    char *out;
    size_t out_cap;
    skpo_pbuf pk;
    uint64_t since_flush, count;
    double last_flush;
    skpo_status sticky;
    skpo_err sticky_err;
};

static skpo_status wfail(skpo_writer *w, skpo_status st, skpo_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static skpo_status wfail(skpo_writer *w, skpo_status st, skpo_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->sticky_err.msg, sizeof w->sticky_err.msg, fmt, ap);
    va_end(ap);
    w->sticky = st;
    if (err) *err = w->sticky_err;
    return st;
}

static skpo_status write_all_fd(skpo_writer *w, const char *p, size_t n, skpo_err *err) {
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return wfail(w, SKPO_EIO, err, "cannot write '%s': %s", w->name, k < 0 ? strerror(errno) : "short write");
        p += k;
        n -= (size_t)k;
    }
    return SKPO_OK;
}

// Feed input to the compressor with `op`, writing out everything produced.
// For flush/end, loop until zstd reports nothing pending.
static skpo_status compress(skpo_writer *w, const void *src, size_t len, ZSTD_EndDirective op, skpo_err *err) {
    ZSTD_inBuffer in = {src, len, 0};
    for (;;) {
        ZSTD_outBuffer out = {w->out, w->out_cap, 0};
        size_t rem = ZSTD_compressStream2(w->cctx, &out, &in, op);
        if (ZSTD_isError(rem)) return wfail(w, SKPO_EIO, err, "zstd compression failed for '%s': %s", w->name, ZSTD_getErrorName(rem));
        if (out.pos) {
            skpo_status st = write_all_fd(w, w->out, out.pos, err);
            if (st) return st;
        }
        bool done = op == ZSTD_e_continue ? in.pos == in.size : rem == 0;
        if (done) return SKPO_OK;
    }
}

static skpo_status writer_new(int fd, int level, const char *name, skpo_writer **out, skpo_err *err) {
    skpo_writer *w = skpo_xcalloc(1, sizeof *w);
    w->fd = fd;
    w->name = skpo_xstrdup(name);
    w->cctx = ZSTD_createCCtx();
    if (!w->cctx) {
        free(w->name);
        free(w);
        return skpo_err_set(err, SKPO_ENOMEM, "cannot allocate a zstd compressor for '%s'", name);
    }
    size_t r1 = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level ? level : 3);
    size_t r2 = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    if (ZSTD_isError(r1) || ZSTD_isError(r2)) {
        ZSTD_freeCCtx(w->cctx);
        free(w->name);
        free(w);
        return skpo_err_set(err, SKPO_ERANGE, "bad zstd level %d for '%s'", level, name);
    }
    w->out_cap = ZSTD_CStreamOutSize();
    w->out = skpo_xmalloc(w->out_cap);
    w->last_flush = skpo_now();
    *out = w;
    return SKPO_OK;
}

skpo_status skpo_writer_open_fd(int fd, int level, skpo_writer **out, skpo_err *err) {
    char name[32];
    snprintf(name, sizeof name, fd == 1 ? "stdout" : "fd %d", fd);
    return writer_new(fd, level, name, out, err);
}

skpo_status skpo_writer_open_file(const char *path, int level, skpo_writer **out, skpo_err *err) {
    skpo_afile af;
    skpo_status st = skpo_afile_open(&af, path, err);
    if (st) return st;
    st = writer_new(fileno(af.f), level, path, out, err);
    if (st) {
        skpo_afile_abort(&af);
        return st;
    }
    (*out)->mode = W_ATOMIC;
    (*out)->af = af;
    return SKPO_OK;
}

// A writer killed mid-append leaves a torn last frame; anything appended after
// it would be unreadable. Cut the file back to the end of its last whole zstd
// frame (structure only: block headers and sizes) before appending.
static skpo_status cut_torn_tail(int fd, const char *path, skpo_err *err) {
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return SKPO_OK;
    size_t size = (size_t)sb.st_size, off = 0;
    char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return skpo_err_set(err, SKPO_EIO, "cannot map '%s': %s", path, strerror(errno));
    while (off < size) {
        size_t k = ZSTD_findFrameCompressedSize(p + off, size - off);
        if (ZSTD_isError(k)) break;
        off += k;
    }
    munmap(p, size);
    if (off < size && ftruncate(fd, (off_t)off) != 0)
        return skpo_err_set(err, SKPO_EIO, "cannot cut the torn end of '%s': %s", path, strerror(errno));
    return SKPO_OK;
}

skpo_status skpo_writer_open_append(const char *path, int level, skpo_writer **out, skpo_err *err) {
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return skpo_err_set(err, SKPO_EIO, "cannot open '%s' for appending: %s", path, strerror(errno));
    if (cut_torn_tail(fd, path, err) != SKPO_OK) {
        close(fd);
        return SKPO_EIO;
    }
    skpo_status st = writer_new(fd, level, path, out, err);
    if (st) {
        close(fd);
        return st;
    }
    (*out)->mode = W_APPEND;
    return SKPO_OK;
}

skpo_status skpo_writer_put(skpo_writer *w, const skpo_rec *r, skpo_err *err) {
    if (w->sticky) {
        if (err) *err = w->sticky_err;
        return w->sticky;
    }
    // Catch a bad field where it is made, not in the next stage; the stream
    // stays usable (nothing was written), so this error is not sticky.
    skpo_err ve;
    skpo_status vst = skpo_rec_validate(r, &ve);
    if (vst)
        return skpo_err_set(err, vst, "record %llu written to '%s' is invalid: %s", (unsigned long long)w->count + 1,
                            w->name, ve.msg);
    w->count++;
    w->pk.n = 0;
    skpo_rec_pack_into(&w->pk, r);
    if (w->pk.n > SKPO_MAX_RECORD_BYTES)
        return wfail(w, SKPO_ERANGE, err, "record of %zu bytes exceeds the %zu-byte limit writing '%s'", w->pk.n, SKPO_MAX_RECORD_BYTES, w->name);
    skpo_status st = compress(w, w->pk.p, w->pk.n, ZSTD_e_continue, err);
    if (st) return st;
    if (w->pk.cap > ((size_t)64 << 20)) { // do not hold on to the buffer of a huge record
        free(w->pk.p);
        w->pk = (skpo_pbuf){0};
    }
    w->since_flush++;
    if (w->since_flush >= SKPO_FLUSH_RECORDS || (skpo_now() - w->last_flush) * 1000.0 >= SKPO_FLUSH_MS)
        return skpo_writer_flush(w, err);
    return SKPO_OK;
}

skpo_status skpo_writer_flush(skpo_writer *w, skpo_err *err) {
    if (w->sticky) {
        if (err) *err = w->sticky_err;
        return w->sticky;
    }
    w->since_flush = 0;
    w->last_flush = skpo_now();
    return compress(w, NULL, 0, ZSTD_e_flush, err);
}

static void writer_free(skpo_writer *w) {
    ZSTD_freeCCtx(w->cctx);
    free(w->out);
    free(w->pk.p);
    free(w->name);
    free(w);
}

void skpo_writer_abort(skpo_writer *w) {
    if (!w) return;
    if (w->mode == W_ATOMIC) skpo_afile_abort(&w->af);
    if (w->mode == W_APPEND) close(w->fd);
    writer_free(w);
}

skpo_status skpo_writer_close(skpo_writer *w, skpo_err *err) {
    skpo_status st = w->sticky;
    if (st) {
        if (err) *err = w->sticky_err;
    } else {
        st = compress(w, NULL, 0, ZSTD_e_end, err);
    }
    if (st) {
        skpo_writer_abort(w);
        return st;
    }
    if (w->mode == W_ATOMIC) {
        st = skpo_afile_commit(&w->af, err);
    } else if (w->mode == W_APPEND) {
        if (fsync(w->fd) != 0 && errno != EINVAL) st = skpo_err_set(err, SKPO_EIO, "cannot fsync '%s': %s", w->name, strerror(errno));
        if (close(w->fd) != 0 && !st) st = skpo_err_set(err, SKPO_EIO, "cannot close '%s': %s", w->name, strerror(errno));
    }
    writer_free(w);
    return st;
}

// argv as a packed msgpack array of str.
static void pack_argv(skpo_pbuf *b, int argc, char **argv) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, skpo_pbuf_write);
    msgpack_pack_array(&pk, argc > 0 ? (size_t)argc : 0);
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(argv[i]);
        msgpack_pack_str(&pk, l);
        msgpack_pack_str_body(&pk, argv[i], l);
    }
}

skpo_status skpo_writer_meta(skpo_writer *w, int argc, char **argv, const skpo_rec *extra, skpo_err *err) {
    skpo_rec m;
    skpo_rec_init(&m);
    skpo_rec_set_str(&m, F_KIND, SKPO_KIND_META);
    skpo_rec_set_int(&m, F_SCHEMA, SKPO_SCHEMA_VERSION);
    skpo_rec_set_str(&m, F_TOOL, skpo_progname());
    skpo_pbuf b = {0};
    pack_argv(&b, argc, argv);
    skpo_rec_set_raw(&m, F_ARGV, b.p, b.n);
    free(b.p);
    char ts[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    skpo_rec_set_str(&m, F_TIME, ts);
    if (extra) {
        for (size_t i = 0; i < extra->n; i++) skpo_rec_set_value(&m, &extra->v[i]);
    }
    skpo_status st = skpo_rec_validate(&m, err);
    if (!st) st = skpo_writer_put(w, &m, err);
    skpo_rec_free(&m);
    return st;
}

skpo_status skpo_write_all(const char *path, const skpo_rec *recs, size_t n, skpo_err *err) {
    skpo_writer *w;
    skpo_status st = skpo_writer_open_file(path, 0, &w, err);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) st = skpo_writer_put(w, &recs[i], err);
    if (st) {
        skpo_writer_abort(w);
        return st;
    }
    return skpo_writer_close(w, err);
}
