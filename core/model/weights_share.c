/*
 * weights_share.c - the handle file through which a sampler on a GPU lends its
 * device weights to the next tool on that GPU (model.h). Text, one key per
 * line, written atomically, so a reader sees a whole file or none; checked
 * line by line on read because a stale or foreign file must fail with a reason,
 * never be mapped. Also the loan's end: the importer's mark file next to the
 * handle, and the exporter's wait for it.
 */
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char MAGIC[] = "skpo-weights-ipc 1";

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_weights_file(const char *n) {
    size_t l = strlen(n);
    return !strcmp(n, "config.json") || (l > 12 && !strcmp(n + l - 12, ".safetensors")) ||
           (l > 11 && !strcmp(n + l - 11, ".index.json"));
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

skpo_status skpo_weights_identity(const char *dir, char out[48], skpo_err *err) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return skpo_err_set(err, SKPO_ENOTFOUND, "weights identity: cannot resolve '%s'", dir);
    DIR *d = opendir(real);
    if (!d) return skpo_err_set(err, SKPO_EIO, "weights identity: cannot read folder '%s'", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_weights_file(e->d_name)) continue;
        if (n == cap) names = skpo_xrealloc(names, (cap = cap ? 2 * cap : 8) * sizeof *names);
        names[n++] = skpo_xstrdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    uint64_t h = fnv(14695981039346656037ull, real, strlen(real) + 1);
    skpo_status s = SKPO_OK;
    for (size_t i = 0; i < n; i++) {
        char *p = skpo_path_join(real, names[i]);
        struct stat st;
        if (stat(p, &st)) {
            if (!s) s = skpo_err_set(err, SKPO_EIO, "weights identity: cannot stat '%s'", p);
        } else {
            int64_t f[4] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec, (int64_t)st.st_ino};
            h = fnv(fnv(h, names[i], strlen(names[i]) + 1), f, sizeof f);
        }
        free(p);
        free(names[i]);
    }
    free(names);
    if (s) return s;
    if (n == 0) return skpo_err_set(err, SKPO_ENOTFOUND, "weights identity: no config.json or safetensors in '%s'", dir);
    snprintf(out, 48, "%016llx-%zu", (unsigned long long)h, n);
    return SKPO_OK;
}

skpo_status skpo_weights_handle_write(const char *path, const skpo_weights_handle *h, skpo_err *err) {
    char buf[1024], hex[129];
    int len;
    if (h->none[0]) {
        len = snprintf(buf, sizeof buf, "%s\nnone %s\n", MAGIC, h->none);
    } else {
        for (int i = 0; i < 64; i++) snprintf(hex + 2 * i, 3, "%02x", h->ipc[i]);
        len = snprintf(buf, sizeof buf, "%s\npid %ld\ndevice %s\nnumel %zu\nweights %s\nhandle %s\n", MAGIC, h->pid,
                       h->device, h->numel, h->weights, hex);
    }
    if (len < 0 || (size_t)len >= sizeof buf) return skpo_err_set(err, SKPO_ERANGE, "weights handle '%s': too long", path);
    return skpo_write_file_atomic(path, buf, (size_t)len, err);
}

static int unhex(const char *s, unsigned char *out, int n) {
    for (int i = 0; i < n; i++) {
        unsigned v;
        if (!s[2 * i] || !s[2 * i + 1] || sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (unsigned char)v;
    }
    return s[2 * n] ? -1 : 0;
}

skpo_status skpo_weights_handle_read(const char *path, skpo_weights_handle *h, skpo_err *err) {
    memset(h, 0, sizeof *h);
    char *data;
    size_t len;
    skpo_status s = skpo_read_file(path, &data, &len, err);
    if (s) return s;
    enum { PID = 1, DEV = 2, NUMEL = 4, WEIGHTS = 8, HANDLE = 16, ALL = 31 };
    int have = 0, line = 0;
    char *save = NULL;
    for (char *l = strtok_r(data, "\n", &save); l && !s; l = strtok_r(NULL, "\n", &save)) {
        line++;
        char *v = strchr(l, ' ');
        if (line == 1) {
            if (strcmp(l, MAGIC)) s = skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a weights handle file (line 1 is not '%s')", path, MAGIC);
            continue;
        }
        if (!v) { s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: no value", path, line); break; }
        *v++ = 0;
        char *end = NULL;
        if (!strcmp(l, "none")) {
            snprintf(h->none, sizeof h->none, "%s", *v ? v : "no reason given");
            have = ALL;
        } else if (!strcmp(l, "pid")) {
            h->pid = strtol(v, &end, 10);
            if (*end || h->pid <= 0) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: bad pid '%s'", path, line, v);
            have |= PID;
        } else if (!strcmp(l, "device")) {
            if (strlen(v) >= sizeof h->device) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: device too long", path, line);
            else snprintf(h->device, sizeof h->device, "%s", v);
            have |= DEV;
        } else if (!strcmp(l, "numel")) {
            unsigned long long x = strtoull(v, &end, 10);
            if (*end || x == 0) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: bad numel '%s'", path, line, v);
            h->numel = (size_t)x;
            have |= NUMEL;
        } else if (!strcmp(l, "weights")) {
            if (strlen(v) >= sizeof h->weights) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: identity too long", path, line);
            else snprintf(h->weights, sizeof h->weights, "%s", v);
            have |= WEIGHTS;
        } else if (!strcmp(l, "handle")) {
            if (unhex(v, h->ipc, 64)) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: the handle is not 128 hex digits", path, line);
            have |= HANDLE;
        } else {
            s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' line %d: unknown key '%s'", path, line, l);
        }
    }
    free(data);
    if (!s && line == 0) s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s' is empty", path);
    if (!s && have != ALL)
        s = skpo_err_set(err, SKPO_EFORMAT, "weights handle '%s': missing %s", path,
                         !(have & PID) ? "pid" : !(have & DEV) ? "device" : !(have & NUMEL) ? "numel" : !(have & WEIGHTS) ? "weights" : "handle");
    return s;
}

// --- the loan's end ---------------------------------------------------------------------------
//
// The exporter cannot learn from its output pipe when the importer is done:
// the importer reads that pipe until EOF, so the exporter must close it first,
// and others (the shell running the pipeline) may hold it too. So the
// importer says it in PATH.in, one line "<state> <pid> <start>": taken (it
// mapped the weights), declined (it will not), done (it unmapped them). <start>
// is the importer's start time from /proc (0 if unknown): a pid reused by
// another process is not taken for the importer.

char *skpo_weights_mark_path(const char *path) {
    size_t n = strlen(path);
    char *p = skpo_xmalloc(n + 4);
    memcpy(p, path, n);
    memcpy(p + n, ".in", 4);
    return p;
}

// State (field 3) and start time in clock ticks (field 22) of /proc/PID/stat; 0 when unreadable.
static int proc_stat(long pid, char *state, unsigned long long *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');   // the command name may hold spaces and parentheses
    if (!p || sscanf(p + 1, " %c", state) != 1) return 0;
    for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
    return p && sscanf(p, " %llu", start) == 1;
}

skpo_status skpo_weights_mark(const char *path, skpo_loan_mark k, skpo_err *err) {
    static const char *const names[] = {"taken", "declined", "done"};
    char buf[96], st;
    unsigned long long start = 0;
    long pid = (long)getpid();
    if (!proc_stat(pid, &st, &start)) start = 0;
    int len = snprintf(buf, sizeof buf, "%s %ld %llu\n", names[k], pid, start);
    char *mk = skpo_weights_mark_path(path);
    skpo_status s = skpo_write_file_atomic(mk, buf, (size_t)len, err);
    free(mk);
    return s;
}

// 1 with the mark's fields, 0 when there is none (yet) or it does not parse.
static int read_mark(const char *mk, char kind[16], long *pid, unsigned long long *start) {
    char buf[128];
    FILE *f = fopen(mk, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return sscanf(buf, "%15s %ld %llu", kind, pid, start) == 3;
}

// A zombie has released its device memory already; a pid with another start time is someone else.
static int importer_alive(long pid, unsigned long long start) {
    if (pid <= 0 || (kill((pid_t)pid, 0) && errno == ESRCH)) return 0;
    char st;
    unsigned long long s;
    if (!proc_stat(pid, &st, &s)) return 1;   // no /proc: kill's answer
    return st != 'Z' && st != 'X' && (!start || s == start);
}

skpo_loan_end skpo_weights_lend_end(const char *path, int fd, double untaken_s) {
    // EOF for the reader now: fd stays open (on /dev/null), so a later close of it still works.
    if (fd == STDOUT_FILENO) fflush(stdout);
    int nul = open("/dev/null", O_WRONLY);
    if (nul < 0 || dup2(nul, fd) < 0) close(fd);
    if (nul >= 0) close(nul);
    char *mk = skpo_weights_mark_path(path);
    double t0 = skpo_now();
    int removed = 0;
    skpo_loan_end how;
    for (;;) {
        char kind[16];
        long pid = 0;
        unsigned long long start = 0;
        int got = read_mark(mk, kind, &pid, &start);
        if (got && strcmp(kind, "taken")) { how = SKPO_LOAN_DONE; break; }
        if (got && !importer_alive(pid, start)) { how = SKPO_LOAN_GONE; break; }
        if (!got && skpo_now() - t0 > untaken_s) {
            // Remove the handle first, then look once more: an importer that
            // read it just before may have mapped the weights meanwhile.
            if (!removed) { unlink(path); removed = 1; continue; }
            how = SKPO_LOAN_UNTAKEN;
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    unlink(path);
    unlink(mk);
    free(mk);
    return how;
}
