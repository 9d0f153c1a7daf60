/*
 * common.h - status codes, exit codes, checked allocation, errors, strict number
 * parsing, atomic files and small OS helpers shared by every skpo module and tool.
 *
 * Conventions (see docs/hacking.md):
 *   - core functions return enum skpo_status and describe failures in a skpo_err
 *     the caller passes in; only tools (and *_or_die helpers) exit.
 *   - messages start lowercase, name the subject, no final period.
 *   - allocation goes through skpo_xmalloc & co., which die with the byte count.
 * This module deliberately holds no global mutable state; the program name for
 * messages comes from glibc's program_invocation_short_name.
 */
#ifndef SKPO_COMMON_H
#define SKPO_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "skpo stores int32/float32 arrays little-endian and reads them in place"
#endif

// --- status and exit codes -------------------------------------------------

typedef enum skpo_status {
    SKPO_OK = 0,
    SKPO_EOF = 1,       // clean end of input (not an error)
    SKPO_EIO = 2,       // read/write/syscall failure
    SKPO_EFORMAT = 3,   // malformed input (stream, json, checkpoint, ...)
    SKPO_ETYPE = 4,     // a field of the wrong type
    SKPO_ERANGE = 5,    // value out of range / shape mismatch
    SKPO_ENOMEM = 6,
    SKPO_ENOTFOUND = 7, // missing file/field/key
    SKPO_ENUMERIC = 8,  // NaN / Inf where a finite number is required
    SKPO_EUNSUPPORTED = 9,
    SKPO_EDEVICE = 10,  // GPU / backend failure
} skpo_status;

const char *skpo_status_str(skpo_status s);

// Process exit codes used by every tool (jq style: one enum, documented).
enum skpo_exit {
    SKPO_EXIT_OK = 0,
    SKPO_EXIT_FAIL = 1,   // bad input data or a runtime failure
    SKPO_EXIT_USAGE = 2,  // bad flags / arguments
};

// --- error messages ----------------------------------------------------------

// An error description filled by core functions. Zero-initialise before use.
typedef struct skpo_err {
    char msg[1024];
} skpo_err;

// Set err->msg with printf formatting; returns `st` so callers can write
// `return skpo_err_set(err, SKPO_EFORMAT, "bad magic in '%s'", path);`.
// err may be NULL.
skpo_status skpo_err_set(skpo_err *err, skpo_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Print "prog: msg" to stderr and exit(code). Only for tools.
void skpo_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void skpo_die_code(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
// Print "prog: warning: msg" to stderr.
void skpo_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Name used in messages ("skpo-cat").
const char *skpo_progname(void);

// --- assertions (always on) ---------------------------------------------------

void skpo_assert_fail(const char *file, int line, const char *expr) __attribute__((noreturn));
#define SKPO_ASSERT(x) do { if (!(x)) skpo_assert_fail(__FILE__, __LINE__, #x); } while (0)

// --- checked allocation -------------------------------------------------------

void *skpo_xmalloc(size_t n);
void *skpo_xcalloc(size_t n, size_t size);
void *skpo_xrealloc(void *p, size_t n);
char *skpo_xstrdup(const char *s);
char *skpo_xstrndup(const char *s, size_t n);
// Grow *buf (capacity *cap elements of `elem` bytes) to hold at least `need`.
void skpo_xgrow(void **buf, size_t *cap, size_t need, size_t elem);

// --- strict number parsing (no atoi: reject junk and out-of-range) ------------

// Whole string must be a number within [min, max]. Returns 0 on success.
int skpo_parse_long(const char *s, long min, long max, long *out);
int skpo_parse_double(const char *s, double min, double max, double *out);

// --- files --------------------------------------------------------------------

// Atomic file replacement: write to "<path>.tmp.<pid>", then commit = fflush,
// fsync, fclose, rename over path, fsync the directory. Abort unlinks the temp.
typedef struct skpo_afile {
    char *path;
    char *tmp;
    FILE *f;
} skpo_afile;

skpo_status skpo_afile_open(skpo_afile *af, const char *path, skpo_err *err);
skpo_status skpo_afile_commit(skpo_afile *af, skpo_err *err);
void skpo_afile_abort(skpo_afile *af);

// Whole-file read (NUL-terminated for convenience; *len excludes the NUL).
skpo_status skpo_read_file(const char *path, char **data, size_t *len, skpo_err *err);
// Atomic whole-file write.
skpo_status skpo_write_file_atomic(const char *path, const void *data, size_t len, skpo_err *err);
skpo_status skpo_mkdir_p(const char *path, skpo_err *err);
skpo_status skpo_fsync_dir(const char *path, skpo_err *err);
int skpo_path_exists(const char *path);
// rm -rf (used on temp directories only).
skpo_status skpo_rm_rf(const char *path, skpo_err *err);
// Replace directory `dst` by `src` (both on one filesystem): src is fsynced by the
// caller; an existing dst is swapped with src in one step (RENAME_EXCHANGE; else
// moved to dst.old.<pid> first), src renamed to dst, the old folder removed.
skpo_status skpo_dir_replace(const char *src, const char *dst, skpo_err *err);
// Copy a file (used for tokenizer files next to checkpoints).
skpo_status skpo_copy_file(const char *src, const char *dst, skpo_err *err);
// Join dir and name into a new malloc'd string.
char *skpo_path_join(const char *dir, const char *name);

// --- time and progress --------------------------------------------------------

double skpo_now(void); // monotonic seconds
double skpo_cpu_seconds(void); // CPU time of the whole process (all threads): load-independent

// A progress line on stderr, only when stderr is a terminal; at most ~5 per second.
typedef struct skpo_progress {
    int enabled;
    double last, start;
} skpo_progress;
void skpo_progress_init(skpo_progress *p);
void skpo_progress_update(skpo_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void skpo_progress_done(skpo_progress *p);

// --- stdout discipline ----------------------------------------------------------

// fflush + ferror + fclose on stdout; dies with a message on failure. Call at the
// end of every tool that writes to stdout (OpenBSD cat.c style).
void skpo_close_stdout_or_die(void);

#endif
