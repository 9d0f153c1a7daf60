/*
 * weights_share.c - the handle file through which a sampler on a GPU lends its
 * device weights to the next tool on that GPU (model.h). Text, one key per
 * line, written atomically, so a reader sees a whole file or none; checked
 * line by line on read because a stale or foreign file must fail with a reason,
 * never be mapped.
 */
#include "model/model.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
