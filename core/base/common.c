/*
 * common.c - see common.h. Small, boring helpers; no global mutable state.
 */
#define _GNU_SOURCE
#include "base/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *skpo_status_str(skpo_status s) {
    switch (s) {
    case SKPO_OK: return "ok";
    case SKPO_EOF: return "end of input";
    case SKPO_EIO: return "i/o error";
    case SKPO_EFORMAT: return "malformed input";
    case SKPO_ETYPE: return "wrong type";
    case SKPO_ERANGE: return "out of range";
    case SKPO_ENOMEM: return "out of memory";
    case SKPO_ENOTFOUND: return "not found";
    case SKPO_ENUMERIC: return "non-finite number";
    case SKPO_EUNSUPPORTED: return "unsupported";
    case SKPO_EDEVICE: return "device error";
    }
    return "unknown status";
}

const char *skpo_progname(void) {
    extern char *program_invocation_short_name;
    return program_invocation_short_name ? program_invocation_short_name : "skpo";
}

skpo_status skpo_err_set(skpo_err *err, skpo_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

static void vmsg(const char *prefix, const char *fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s: %s", skpo_progname(), prefix);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void skpo_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    exit(SKPO_EXIT_FAIL);
}

void skpo_die_code(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    exit(code);
}

void skpo_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void skpo_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "%s: internal error: assertion '%s' failed (%s:%d)\n", skpo_progname(), expr,
            file, line);
    abort();
}

// --- allocation -------------------------------------------------------------

static void oom(size_t n) {
    fprintf(stderr, "%s: out of memory allocating %zu bytes\n", skpo_progname(), n);
    exit(SKPO_EXIT_FAIL);
}

void *skpo_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *skpo_xcalloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) oom(SIZE_MAX);
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *skpo_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *skpo_xstrdup(const char *s) { return skpo_xstrndup(s, strlen(s)); }

char *skpo_xstrndup(const char *s, size_t n) {
    char *d = skpo_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

void skpo_xgrow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) oom(SIZE_MAX);
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem) oom(SIZE_MAX);
    *buf = skpo_xrealloc(*buf, c * elem);
    *cap = c;
}

// --- numbers ------------------------------------------------------------------

int skpo_parse_long(const char *s, long min, long max, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int skpo_parse_double(const char *s, double min, double max, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

// --- files --------------------------------------------------------------------

static char *dir_of(const char *path) {
    const char *sl = strrchr(path, '/');
    if (!sl) return skpo_xstrdup(".");
    if (sl == path) return skpo_xstrdup("/");
    return skpo_xstrndup(path, (size_t)(sl - path));
}

char *skpo_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = skpo_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

skpo_status skpo_fsync_dir(const char *path, skpo_err *err) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return skpo_err_set(err, SKPO_EIO, "cannot open directory '%s': %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc && e != EINVAL) return skpo_err_set(err, SKPO_EIO, "cannot fsync '%s': %s", path, strerror(e));
    return SKPO_OK;
}

skpo_status skpo_afile_open(skpo_afile *af, const char *path, skpo_err *err) {
    memset(af, 0, sizeof *af);
    af->path = skpo_xstrdup(path);
    size_t n = strlen(path) + 32;
    af->tmp = skpo_xmalloc(n);
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        skpo_status st = skpo_err_set(err, SKPO_EIO, "cannot create '%s': %s", af->tmp, strerror(errno));
        free(af->path);
        free(af->tmp);
        memset(af, 0, sizeof *af);
        return st;
    }
    return SKPO_OK;
}

skpo_status skpo_afile_commit(skpo_afile *af, skpo_err *err) {
    skpo_status st = SKPO_OK;
    int bad = fflush(af->f) != 0 || ferror(af->f);
    int e = errno;
    if (!bad && fsync(fileno(af->f)) != 0) { bad = 1; e = errno; }
    if (fclose(af->f) != 0 && !bad) { bad = 1; e = errno; }
    af->f = NULL;
    if (bad) {
        st = skpo_err_set(err, SKPO_EIO, "cannot write '%s': %s", af->path, strerror(e));
        unlink(af->tmp);
    } else if (rename(af->tmp, af->path) != 0) {
        st = skpo_err_set(err, SKPO_EIO, "cannot rename '%s' to '%s': %s", af->tmp, af->path, strerror(errno));
        unlink(af->tmp);
    } else {
        char *d = dir_of(af->path);
        st = skpo_fsync_dir(d, err);
        free(d);
    }
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
    return st;
}

void skpo_afile_abort(skpo_afile *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}

skpo_status skpo_read_file(const char *path, char **data, size_t *len, skpo_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return skpo_err_set(err, errno == ENOENT ? SKPO_ENOTFOUND : SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = skpo_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) skpo_xgrow((void **)&buf, &cap, n + (1 << 16), 1);
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return skpo_err_set(err, SKPO_EIO, "cannot read '%s'", path);
    }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return SKPO_OK;
}

skpo_status skpo_write_file_atomic(const char *path, const void *data, size_t len, skpo_err *err) {
    skpo_afile af;
    skpo_status st = skpo_afile_open(&af, path, err);
    if (st) return st;
    if (len && fwrite(data, 1, len, af.f) != len) {
        int e = errno;
        skpo_afile_abort(&af);
        return skpo_err_set(err, SKPO_EIO, "cannot write '%s': %s", path, strerror(e));
    }
    return skpo_afile_commit(&af, err);
}

skpo_status skpo_mkdir_p(const char *path, skpo_err *err) {
    char *p = skpo_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            skpo_status st = skpo_err_set(err, SKPO_EIO, "cannot create directory '%s': %s", p, strerror(errno));
            free(p);
            return st;
        }
        *s = '/';
    }
    skpo_status st = SKPO_OK;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        st = skpo_err_set(err, SKPO_EIO, "cannot create directory '%s': %s", p, strerror(errno));
    free(p);
    return st;
}

int skpo_path_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

skpo_status skpo_rm_rf(const char *path, skpo_err *err) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? SKPO_OK : skpo_err_set(err, SKPO_EIO, "cannot stat '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return skpo_err_set(err, SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
        struct dirent *de;
        skpo_status st = SKPO_OK;
        while (!st && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char *c = skpo_path_join(path, de->d_name);
            st = skpo_rm_rf(c, err);
            free(c);
        }
        closedir(d);
        if (st) return st;
        if (rmdir(path) != 0) return skpo_err_set(err, SKPO_EIO, "cannot remove '%s': %s", path, strerror(errno));
        return SKPO_OK;
    }
    if (unlink(path) != 0) return skpo_err_set(err, SKPO_EIO, "cannot remove '%s': %s", path, strerror(errno));
    return SKPO_OK;
}

skpo_status skpo_dir_replace(const char *src, const char *dst, skpo_err *err) {
    char old[4096];
    snprintf(old, sizeof old, "%s.old.%ld", dst, (long)getpid());
    int had = skpo_path_exists(dst);
    // Swap both names in one step where the file system can (Linux
    // RENAME_EXCHANGE): a crash then leaves the old or the new folder at dst,
    // never neither; the old one is left at src and removed. Two renames below
    // otherwise (dst is missing between them: found by tests/sh/t_faults.sh).
    if (had && renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
        char *d = dir_of(dst);
        skpo_status st = skpo_fsync_dir(d, err);
        free(d);
        return st ? st : skpo_rm_rf(src, err);
    }
    if (had && errno != EINVAL && errno != ENOSYS)
        return skpo_err_set(err, SKPO_EIO, "cannot swap '%s' and '%s': %s", src, dst, strerror(errno));
    if (had && rename(dst, old) != 0)
        return skpo_err_set(err, SKPO_EIO, "cannot move '%s' aside: %s", dst, strerror(errno));
    if (rename(src, dst) != 0) {
        skpo_status st = skpo_err_set(err, SKPO_EIO, "cannot rename '%s' to '%s': %s", src, dst, strerror(errno));
        if (had) rename(old, dst);
        return st;
    }
    char *d = dir_of(dst);
    skpo_status st = skpo_fsync_dir(d, err);
    free(d);
    if (st) return st;
    if (had) return skpo_rm_rf(old, err);
    return SKPO_OK;
}

skpo_status skpo_copy_file(const char *src, const char *dst, skpo_err *err) {
    char *data;
    size_t len;
    skpo_status st = skpo_read_file(src, &data, &len, err);
    if (st) return st;
    st = skpo_write_file_atomic(dst, data, len, err);
    free(data);
    return st;
}

// --- time and progress ----------------------------------------------------------

double skpo_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double skpo_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void skpo_progress_init(skpo_progress *p) {
    p->enabled = isatty(2);
    p->start = skpo_now();
    p->last = 0;
}

void skpo_progress_update(skpo_progress *p, const char *fmt, ...) {
    if (!p->enabled) return;
    double t = skpo_now();
    if (t - p->last < 0.2) return;
    p->last = t;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\r\033[K%s: ", skpo_progname());
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " [%.0fs]", t - p->start);
    va_end(ap);
    fflush(stderr);
}

void skpo_progress_done(skpo_progress *p) {
    if (p->enabled && p->last > 0) fprintf(stderr, "\r\033[K");
}

void skpo_close_stdout_or_die(void) {
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) { bad = 1; e = errno; }
    if (bad) {
        fprintf(stderr, "%s: cannot write standard output: %s\n", skpo_progname(), strerror(e));
        exit(SKPO_EXIT_FAIL);
    }
}
