/*
 * safetensors.c - mmap reader and atomic writer for safetensors (safetensors.h).
 */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER ((uint64_t)100 << 20)

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct skpo_st {
    st_file *files;
    int nfiles;
    skpo_st_tensor *t;
    int n, cap;
};

// --- conversions -------------------------------------------------------------------

float skpo_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { // subnormal: normalise
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) u = sign | 0x7f800000u | man << 13;
    else u = sign | (exp + 127 - 15) << 23 | man << 13;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

const char *skpo_st_dtype_name(skpo_st_dtype d) {
    return d == SKPO_ST_F32 ? "F32" : d == SKPO_ST_BF16 ? "BF16" : "F16";
}

static int dtype_size(skpo_st_dtype d) { return d == SKPO_ST_F32 ? 4 : 2; }

// --- reading --------------------------------------------------------------------------

void skpo_st_close(skpo_st *st) {
    if (!st) return;
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].map) munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    for (int i = 0; i < st->n; i++) free(st->t[i].name);
    free(st->files);
    free(st->t);
    free(st);
}

static skpo_status parse_entry(skpo_st *st, int fi, const char *name, json_t *e, const uint8_t *buf, size_t buflen,
                               skpo_err *err) {
    const char *path = st->files[fi].path;
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': malformed header entry", path, name);
    skpo_st_tensor t = {0};
    const char *d = json_string_value(dt);
    if (!strcmp(d, "F32")) t.dtype = SKPO_ST_F32;
    else if (!strcmp(d, "BF16")) t.dtype = SKPO_ST_BF16;
    else if (!strcmp(d, "F16")) t.dtype = SKPO_ST_F16;
    else return skpo_err_set(err, SKPO_EUNSUPPORTED, "'%s': tensor '%s': dtype %s is not supported", path, name, d);
    if (json_array_size(sh) > SKPO_ST_MAX_DIMS)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': too many dimensions", path, name);
    t.ndim = (int)json_array_size(sh);
    t.numel = 1;
    for (int i = 0; i < t.ndim; i++) {
        json_t *v = json_array_get(sh, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((json_int_t)1 << 40))
            return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': bad shape", path, name);
        t.shape[i] = json_integer_value(v);
        t.numel *= (size_t)t.shape[i];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': bad data_offsets", path, name);
    size_t begin = (size_t)json_integer_value(b), end = (size_t)json_integer_value(en);
    if (end > buflen)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': data ends at byte %zu but the file holds %zu (truncated?)",
                            path, name, end, buflen);
    if (end - begin != t.numel * (size_t)dtype_size(t.dtype))
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': %zu data bytes for %zu elements of %s", path, name,
                            end - begin, t.numel, d);
    t.data = buf + begin;
    t.nbytes = end - begin;
    t.file = fi;
    t.name = skpo_xstrdup(name);
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 64;
        st->t = skpo_xrealloc(st->t, (size_t)st->cap * sizeof *st->t);
    }
    st->t[st->n++] = t;
    return SKPO_OK;
}

typedef struct span { const uint8_t *b; size_t n; const char *name; } span;

static int by_start(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

// Two tensors of one file whose data ranges overlap would alias: writing one
// (or reading them as independent weights) is wrong, so such a file is refused.
static skpo_status check_overlap(const skpo_st *st, int fi, const char *path, skpo_err *err) {
    span *v = skpo_xmalloc((size_t)(st->n ? st->n : 1) * sizeof *v);
    size_t k = 0;
    for (int i = 0; i < st->n; i++)
        if (st->t[i].file == fi && st->t[i].nbytes) v[k++] = (span){st->t[i].data, st->t[i].nbytes, st->t[i].name};
    qsort(v, k, sizeof *v, by_start);
    skpo_status s = SKPO_OK;
    for (size_t i = 1; i < k && !s; i++)
        if (v[i].b < v[i - 1].b + v[i - 1].n)
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': tensors '%s' and '%s' have overlapping data ranges", path,
                             v[i - 1].name, v[i].name);
    free(v);
    return s;
}

// mmap path and add its tensors to st.
static skpo_status add_file(skpo_st *st, const char *path, skpo_err *err) {
    st->files = skpo_xrealloc(st->files, (size_t)(st->nfiles + 1) * sizeof *st->files);
    int fi = st->nfiles++;
    st_file *f = &st->files[fi];
    f->path = skpo_xstrdup(path);
    f->map = NULL;
    f->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return skpo_err_set(err, errno == ENOENT ? SKPO_ENOTFOUND : SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return skpo_err_set(err, SKPO_EIO, "cannot stat '%s': %s", path, strerror(errno));
    }
    if (sb.st_size < 8) {
        close(fd);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': too short for a safetensors header (%lld bytes)", path, (long long)sb.st_size);
    }
    f->size = (size_t)sb.st_size;
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return skpo_err_set(err, SKPO_EIO, "cannot mmap '%s': %s", path, strerror(errno));
    f->map = m;
    uint64_t hl;
    memcpy(&hl, m, 8);
    if (hl > MAX_HEADER || hl > f->size - 8)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': header length %llu exceeds the file (truncated or not safetensors)",
                            path, (unsigned long long)hl);
    json_error_t je;
    json_t *h = json_loadb((const char *)m + 8, (size_t)hl, 0, &je);
    if (!json_is_object(h)) {
        json_decref(h);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': header is not a json object: %s", path, je.text);
    }
    const uint8_t *buf = (const uint8_t *)m + 8 + hl;
    size_t buflen = f->size - 8 - (size_t)hl;
    const char *name;
    json_t *e;
    skpo_status s = SKPO_OK;
    json_object_foreach(h, name, e) {
        if (!strcmp(name, "__metadata__")) continue;
        if (!json_is_object(e)) {
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s': entry is not an object", path, name);
            break;
        }
        if ((s = parse_entry(st, fi, name, e, buf, buflen, err))) break;
    }
    json_decref(h);
    if (!s) s = check_overlap(st, fi, path, err);
    return s;
}

skpo_status skpo_st_open_file(const char *path, skpo_st **out, skpo_err *err) {
    skpo_st *st = skpo_xcalloc(1, sizeof *st);
    skpo_status s = add_file(st, path, err);
    if (s) {
        skpo_st_close(st);
        return s;
    }
    *out = st;
    return SKPO_OK;
}

static skpo_status open_index(skpo_st *st, const char *dir, const char *ipath, skpo_err *err) {
    char *data;
    size_t len;
    skpo_status s = skpo_read_file(ipath, &data, &len, err);
    if (s) return s;
    json_error_t je;
    json_t *j = json_loadb(data, len, 0, &je);
    free(data);
    json_t *wm = json_object_get(j, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(j);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': no weight_map object", ipath);
    }
    // Open each distinct shard once, in order of first mention.
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': bad shard file name for '%s'", ipath, name);
            break;
        }
        char *p = skpo_path_join(dir, json_string_value(v));
        int seen = 0;
        for (int i = 0; i < st->nfiles && !seen; i++) seen = !strcmp(st->files[i].path, p);
        if (!seen) s = add_file(st, p, err);
        free(p);
        if (s) break;
    }
    // Every tensor named in the index must be in the shard the index names
    // (not merely somewhere: a wrong entry would hide a stale or duplicate shard).
    if (!s) json_object_foreach(wm, name, v) {
            const skpo_st_tensor *t = skpo_st_find(st, name);
            char *p = skpo_path_join(dir, json_string_value(v));
            int ok = t && !strcmp(st->files[t->file].path, p);
            free(p);
            if (!ok) {
                s = skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s' is not in its shard '%s'", ipath, name,
                                 json_string_value(v));
                break;
            }
        }
    json_decref(j);
    return s;
}

skpo_status skpo_st_open_dir(const char *dir, skpo_st **out, skpo_err *err) {
    char *single = skpo_path_join(dir, "model.safetensors");
    char *index = skpo_path_join(dir, "model.safetensors.index.json");
    skpo_st *st = skpo_xcalloc(1, sizeof *st);
    skpo_status s;
    if (skpo_path_exists(single)) s = add_file(st, single, err);
    else if (skpo_path_exists(index)) s = open_index(st, dir, index, err);
    else s = skpo_err_set(err, SKPO_ENOTFOUND, "'%s': no model.safetensors or model.safetensors.index.json", dir);
    free(single);
    free(index);
    if (s) {
        skpo_st_close(st);
        return s;
    }
    *out = st;
    return SKPO_OK;
}

int skpo_st_count(const skpo_st *st) { return st->n; }
const skpo_st_tensor *skpo_st_get(const skpo_st *st, int i) { return &st->t[i]; }
const char *skpo_st_file_name(const skpo_st *st, int file) { return st->files[file].path; }

const skpo_st_tensor *skpo_st_find(const skpo_st *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

skpo_status skpo_st_read_f32(const skpo_st *st, const char *name, float *dst, int ndim, const int64_t *shape,
                             skpo_err *err) {
    const skpo_st_tensor *t = skpo_st_find(st, name);
    if (!t) return skpo_err_set(err, SKPO_ENOTFOUND, "checkpoint has no tensor '%s'", name);
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[128] = "", got[128] = "";
        for (int i = 0; i < ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        for (int i = 0; i < t->ndim; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
        return skpo_err_set(err, SKPO_ERANGE, "'%s': tensor '%s' has shape (%s), config wants (%s)",
                            st->files[t->file].path, name, got, want);
    }
    const uint8_t *p = t->data;
    if (t->dtype == SKPO_ST_F32) memcpy(dst, p, t->numel * 4);
    else {
        int bf = t->dtype == SKPO_ST_BF16;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bf ? skpo_bf16_to_f32(h) : skpo_f16_to_f32(h);
        }
    }
    return SKPO_OK;
}

// --- writing ------------------------------------------------------------------------------

static size_t wt_numel(const skpo_st_wtensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

static char *header_json(const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, size_t *hlen) {
    json_t *h = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(h, "__metadata__", meta);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *sh = json_array(), *o = json_array();
        json_object_set_new(e, "dtype", json_string(skpo_st_dtype_name(dtype)));
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(sh, json_integer(t[i].shape[d]));
        json_object_set_new(e, "shape", sh);
        size_t nb = wt_numel(&t[i]) * (size_t)dtype_size(dtype);
        json_array_append_new(o, json_integer((json_int_t)off));
        json_array_append_new(o, json_integer((json_int_t)(off + nb)));
        json_object_set_new(e, "data_offsets", o);
        json_object_set_new(h, t[i].name, e);
        off += nb;
    }
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    SKPO_ASSERT(s);
    size_t len = strlen(s), padded = (len + 7) & ~(size_t)7; // data starts 8-aligned
    s = skpo_xrealloc(s, padded + 1);
    memset(s + len, ' ', padded - len);
    s[padded] = 0;
    *hlen = padded;
    return s;
}

skpo_status skpo_st_write_file(const char *path, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, skpo_err *err) {
    size_t hlen;
    char *h = header_json(t, n, dtype, &hlen);
    skpo_afile af;
    skpo_status s = skpo_afile_open(&af, path, err);
    if (s) {
        free(h);
        return s;
    }
    uint64_t hl = hlen;
    int ok = fwrite(&hl, 8, 1, af.f) == 1 && fwrite(h, 1, hlen, af.f) == hlen;
    free(h);
    enum { CH = 1 << 16 };
    uint16_t *buf = dtype == SKPO_ST_BF16 ? skpo_xmalloc(CH * 2) : NULL;
    for (int i = 0; ok && i < n; i++) {
        size_t ne = wt_numel(&t[i]);
        if (dtype == SKPO_ST_F32) {
            ok = fwrite(t[i].data, 4, ne, af.f) == ne;
            continue;
        }
        for (size_t j = 0; ok && j < ne; j += CH) {
            size_t m = ne - j < CH ? ne - j : CH;
            for (size_t k = 0; k < m; k++) buf[k] = skpo_f32_to_bf16(t[i].data[j + k]);
            ok = fwrite(buf, 2, m, af.f) == m;
        }
    }
    free(buf);
    if (!ok) {
        int e = errno;
        skpo_afile_abort(&af);
        return skpo_err_set(err, SKPO_EIO, "cannot write '%s': %s", path, strerror(e));
    }
    return skpo_afile_commit(&af, err);
}

static void shard_name(char *fn, size_t cap, int k, int nshards) {
    snprintf(fn, cap, "model-%05d-of-%05d.safetensors", k + 1, nshards);
}

skpo_status skpo_st_write_index(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, const int *shard_of,
                                int nshards, skpo_err *err) {
    json_t *j = json_object(), *meta = json_object(), *wm = json_object();
    size_t total = 0;
    for (int i = 0; i < n; i++) total += wt_numel(&t[i]) * (size_t)dtype_size(dtype);
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(j, "metadata", meta);
    for (int i = 0; i < n; i++) {
        char fn[64];
        shard_name(fn, sizeof fn, shard_of[i], nshards);
        json_object_set_new(wm, t[i].name, json_string(fn));
    }
    json_object_set_new(j, "weight_map", wm);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    char *p = skpo_path_join(dir, "model.safetensors.index.json");
    skpo_status st = skpo_write_file_atomic(p, s, strlen(s), err);
    free(p);
    free(s);
    return st;
}

skpo_status skpo_st_write_shard(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype, const int *shard_of,
                                int k, int nshards, skpo_err *err) {
    if (dtype == SKPO_ST_F16) return skpo_err_set(err, SKPO_EUNSUPPORTED, "writing F16 checkpoints is not supported");
    skpo_st_wtensor *mine = skpo_xcalloc((size_t)n + 1, sizeof *mine);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (shard_of[i] == k) mine[m++] = t[i];
    skpo_status s = SKPO_OK;
    if (m > 0) {
        char fn[64];
        shard_name(fn, sizeof fn, k, nshards);
        char *p = skpo_path_join(dir, fn);
        s = skpo_st_write_file(p, mine, m, dtype, err);
        free(p);
    }
    free(mine);
    return s;
}

static void remove_if_exists(const char *dir, const char *name) {
    char *p = skpo_path_join(dir, name);
    unlink(p);
    free(p);
}

skpo_status skpo_st_write_dir(const char *dir, const skpo_st_wtensor *t, int n, skpo_st_dtype dtype,
                              size_t shard_bytes, skpo_err *err) {
    if (dtype == SKPO_ST_F16) return skpo_err_set(err, SKPO_EUNSUPPORTED, "writing F16 checkpoints is not supported");
    if (!shard_bytes) shard_bytes = (size_t)4 << 30;
    int *shard_of = skpo_xmalloc((size_t)(n ? n : 1) * sizeof(int));
    int nshards = 1;
    size_t cur = 0;
    for (int i = 0; i < n; i++) {
        size_t nb = wt_numel(&t[i]) * (size_t)dtype_size(dtype);
        if (cur > 0 && cur + nb > shard_bytes) {
            nshards++;
            cur = 0;
        }
        shard_of[i] = nshards - 1;
        cur += nb;
    }
    skpo_status s = SKPO_OK;
    if (nshards == 1) {
        char *p = skpo_path_join(dir, "model.safetensors");
        s = skpo_st_write_file(p, t, n, dtype, err);
        free(p);
        if (!s) remove_if_exists(dir, "model.safetensors.index.json");
    } else {
        for (int k = 0; k < nshards && !s; k++) s = skpo_st_write_shard(dir, t, n, dtype, shard_of, k, nshards, err);
        if (!s) s = skpo_st_write_index(dir, t, n, dtype, shard_of, nshards, err);
        if (!s) remove_if_exists(dir, "model.safetensors");
    }
    free(shard_of);
    return s;
}
