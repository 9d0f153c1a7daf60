/*
 * optim.c - see optim.h. Element-wise loops are OpenMP-parallel (each element
 * is independent, so results do not depend on the thread count); reductions
 * run in a fixed sequential order in double.
 */
#include "train/optim.h"
#include "train/optim_dev.h"
#include "base/bf16.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void skpo_adamw_cfg_default(skpo_adamw_cfg *c) {
    *c = (skpo_adamw_cfg){
        .lr = 1e-6, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
        .decay_matrices_only = 0, .warmup_steps = 10, .max_grad_norm = 1.0,
    };
}

skpo_status skpo_adamw_cfg_check(const skpo_adamw_cfg *c, skpo_err *err) {
    if (!(c->lr >= 0 && isfinite(c->lr))) return skpo_err_set(err, SKPO_ERANGE, "learning rate %g", c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return skpo_err_set(err, SKPO_ERANGE, "betas %g, %g must be in [0, 1)", c->beta1, c->beta2);
    if (!(c->eps > 0 && isfinite(c->eps))) return skpo_err_set(err, SKPO_ERANGE, "eps %g must be positive", c->eps);
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
        return skpo_err_set(err, SKPO_ERANGE, "weight decay %g", c->weight_decay);
    if (c->warmup_steps < 0) return skpo_err_set(err, SKPO_ERANGE, "warmup steps %d", c->warmup_steps);
    if (!(c->max_grad_norm >= 0 && isfinite(c->max_grad_norm)))
        return skpo_err_set(err, SKPO_ERANGE, "max grad norm %g", c->max_grad_norm);
    return SKPO_OK;
}

double skpo_optim_lr(const skpo_adamw_cfg *c, int64_t step) {
    if (c->warmup_steps <= 0 || step >= c->warmup_steps) return c->lr;
    if (step < 1) step = 1;
    return c->lr * (double)step / (double)c->warmup_steps;
}

// --- lifetime ---------------------------------------------------------------------

skpo_optim *skpo_optim_new(const skpo_adamw_cfg *c, const skpo_param *params, int n) {
    skpo_optim *o = skpo_xcalloc(1, sizeof *o);
    o->cfg = *c;
    o->n = n;
    o->names = skpo_xcalloc((size_t)n, sizeof *o->names);
    o->numel = skpo_xcalloc((size_t)n, sizeof *o->numel);
    o->m = skpo_xcalloc((size_t)n, sizeof *o->m);
    o->v = skpo_xcalloc((size_t)n, sizeof *o->v);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += params[i].numel;
    // One block each (a device optimizer's offload copies ranges of the flat
    // space into them); calloc'd, so pages never written cost no memory.
    o->mflat = skpo_xcalloc(total + 1, sizeof(float));
    o->vflat = skpo_xcalloc(total + 1, sizeof(float));
    size_t off = 0;
    for (int i = 0; i < n; off += params[i].numel, i++) {
        o->names[i] = skpo_xstrdup(params[i].name);
        o->numel[i] = params[i].numel;
        o->m[i] = o->mflat + off;
        o->v[i] = o->vflat + off;
    }
    return o;
}

void skpo_optim_free(skpo_optim *o) {
    if (!o) return;
    optim_dev_free(o->dev);
    for (int i = 0; i < o->n; i++) free(o->names[i]);
    free(o->mflat);
    free(o->vflat);
    free(o->names);
    free(o->numel);
    free(o->m);
    free(o->v);
    free(o);
}

// --- ranges, offload ---------------------------------------------------------------

void skpo_optim_zero_range(size_t total, int r, int n, size_t *a, size_t *b) {
    size_t q = total / (size_t)n / 4 * 4;
    *a = (size_t)r * q;
    *b = r == n - 1 ? total : *a + q;
}

skpo_status skpo_optim_copy_range(const skpo_optim *o, size_t a, size_t b, float **m, float **v, skpo_err *err) {
    SKPO_ASSERT(a <= b);
    *m = skpo_xmalloc((b - a) * 4 + 4);
    *v = skpo_xmalloc((b - a) * 4 + 4);
    skpo_status st = SKPO_OK;
    if (o->dev) {
        st = optim_dev_copy_range(o, a, b, *m, *v, err);
    } else {
        size_t off = 0;
        for (int i = 0; i < o->n; off += o->numel[i], i++) {
            size_t x = off > a ? off : a, y = off + o->numel[i] < b ? off + o->numel[i] : b;
            if (x >= y) continue;
            memcpy(*m + (x - a), o->m[i] + (x - off), (y - x) * 4);
            memcpy(*v + (x - a), o->v[i] + (x - off), (y - x) * 4);
        }
        if (b > off) st = skpo_err_set(err, SKPO_ERANGE, "optimizer range ends at %zu, past its %zu parameters", b, off);
    }
    if (st) {
        free(*m), free(*v);
        *m = *v = NULL;
    }
    return st;
}

skpo_status skpo_optim_offload(skpo_optim *o, skpo_err *err) { return o->dev ? optim_dev_offload(o, err) : SKPO_OK; }

skpo_status skpo_optim_reload(skpo_optim *o, const skpo_dev_params *d, skpo_err *err) {
    return o->dev ? optim_dev_reload(o, d, err) : SKPO_OK;
}

int skpo_optim_offloaded(const skpo_optim *o) { return o->dev && optim_dev_offloaded(o); }

// --- update -------------------------------------------------------------------------

// Sum of squares of one tensor: fixed chunks summed in parallel, then the
// chunk sums in order, so the bits do not depend on the thread count.
#define NORM_CHUNK ((size_t)1 << 15)

static double sumsq(const float *g, size_t n) {
    size_t nc = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double *part = skpo_xcalloc(nc ? nc : 1, sizeof *part);
#pragma omp parallel for schedule(static)
    for (long long c = 0; c < (long long)nc; c++) {
        size_t lo = (size_t)c * NORM_CHUNK, hi = lo + NORM_CHUNK < n ? lo + NORM_CHUNK : n;
        double s = 0;
        for (size_t k = lo; k < hi; k++) s += (double)g[k] * (double)g[k];
        part[c] = s;
    }
    double s = 0;
    for (size_t c = 0; c < nc; c++) s += part[c];
    free(part);
    return s;
}

double skpo_optim_grad_norm(const skpo_param *params, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) {
        SKPO_ASSERT(params[i].grad != NULL);
        ss += sumsq(params[i].grad, params[i].numel);
    }
    return sqrt(ss);
}

// One element: *x decayed and stepped, *m and *v from their old values m0, v0.
// Both loops below call it, so the first update's bits are the general
// rule's with m0 = v0 = 0.
static inline __attribute__((always_inline)) void adamw_elem(float *x, float *m, float *v, float g, float m0,
                                                             float v0, float b1, float b2, float eps, float keep,
                                                             float bc2s, float step) {
    float mk = m0 + (1.0f - b1) * (g - m0), vk = v0 * b2 + (1.0f - b2) * g * g;
    *m = mk, *v = vk;
    *x = *x * keep - step * (mk / (sqrtf(vk) / bc2s + eps));
}

static void adamw_tensor(const skpo_optim *o, skpo_param *p, float *m, float *v, float lr, float coef,
                         int decay) {
    const skpo_adamw_cfg *c = &o->cfg;
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float keep = decay ? (float)(1.0 - (double)lr * c->weight_decay) : 1.0f;
    const float bc1 = (float)(1.0 - pow(c->beta1, (double)o->t));
    const float bc2s = (float)sqrt(1.0 - pow(c->beta2, (double)o->t));
    const float step = lr / bc1;
    float *x = p->data;
    const float *gr = p->grad;
    const long long n = (long long)p->numel;
    // The first update writes the moments without reading them (they are
    // zero): calloc'd pages read first map the shared zero page, and the
    // write after it then copies the page and flushes every core's TLB; on a
    // 125M model that was 40% of the update's wall time.
    if (o->t == 1) {
#pragma omp parallel for schedule(static)
        for (long long k = 0; k < n; k++)
            adamw_elem(&x[k], &m[k], &v[k], gr[k] * coef, 0.0f, 0.0f, b1, b2, eps, keep, bc2s, step);
        return;
    }
#pragma omp parallel for schedule(static)
    for (long long k = 0; k < n; k++)
        adamw_elem(&x[k], &m[k], &v[k], gr[k] * coef, m[k], v[k], b1, b2, eps, keep, bc2s, step);
}

skpo_status skpo_optim_step(skpo_optim *o, skpo_param *params, int n, double lr, double *grad_norm,
                            skpo_err *err) {
    SKPO_ASSERT(n == o->n);
    if (o->dev) return optim_dev_step(o, lr, grad_norm, err);
    for (int i = 0; i < n; i++) SKPO_ASSERT(params[i].numel == o->numel[i] && params[i].grad);
    double norm = skpo_optim_grad_norm(params, n);
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(norm)) return skpo_err_set(err, SKPO_ENUMERIC, "gradient norm is %g", norm);
    float coef = 1.0f;
    if (o->cfg.max_grad_norm > 0) {
        // torch computes the coefficient in float32 from the float32 norm.
        float c = (float)o->cfg.max_grad_norm / ((float)norm + 1e-6f);
        if (c < 1.0f) coef = c;
    }
    o->t++;
    for (int i = 0; i < n; i++) {
        int decay = o->cfg.weight_decay != 0 && (!o->cfg.decay_matrices_only || params[i].ndim >= 2);
        adamw_tensor(o, &params[i], o->m[i], o->v[i], (float)lr, coef, decay);
    }
    return SKPO_OK;
}

// --- state file: a minimal float32 safetensors writer/reader ---------------------------

typedef struct st_item {
    char *name;
    const float *data;
    size_t numel;
} st_item;

static skpo_status st_write(const char *path, const st_item *it, int n, json_t *meta, skpo_err *err) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", meta);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *t = json_object();
        json_object_set_new(t, "dtype", json_string("F32"));
        json_object_set_new(t, "shape", json_pack("[I]", (json_int_t)it[i].numel));
        json_object_set_new(t, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + it[i].numel * 4)));
        json_object_set_new(h, it[i].name, t);
        off += it[i].numel * 4;
    }
    char *js = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    skpo_afile af;
    skpo_status st = skpo_afile_open(&af, path, err);
    if (st) {
        free(js);
        return st;
    }
    uint64_t hlen = hl + pad;
    int ok = fwrite(&hlen, 8, 1, af.f) == 1 && fwrite(js, 1, hl, af.f) == hl;
    for (size_t k = 0; ok && k < pad; k++) ok = fputc(' ', af.f) != EOF;
    for (int i = 0; ok && i < n; i++) ok = fwrite(it[i].data, 4, it[i].numel, af.f) == it[i].numel;
    free(js);
    if (!ok) {
        st = skpo_err_set(err, SKPO_EIO, "cannot write '%s': %s", path, strerror(errno));
        skpo_afile_abort(&af);
        return st;
    }
    return skpo_afile_commit(&af, err);
}

static char *prefixed(const char *pre, const char *name) {
    size_t a = strlen(pre), b = strlen(name);
    char *s = skpo_xmalloc(a + b + 1);
    memcpy(s, pre, a);
    memcpy(s + a, name, b + 1);
    return s;
}

skpo_status skpo_optim_save(const skpo_optim *o, const skpo_param *params, int save_master, const char *path,
                            skpo_err *err) {
    int per = save_master ? 3 : 2, k = 0;
    st_item *it = skpo_xcalloc((size_t)o->n * per + 1, sizeof *it);
    for (int i = 0; i < o->n; i++) {
        it[k++] = (st_item){prefixed("exp_avg.", o->names[i]), o->m[i], o->numel[i]};
        it[k++] = (st_item){prefixed("exp_avg_sq.", o->names[i]), o->v[i], o->numel[i]};
        if (save_master) it[k++] = (st_item){prefixed("master.", o->names[i]), params[i].data, params[i].numel};
    }
    char t[32];
    snprintf(t, sizeof t, "%" PRId64, o->t);
    json_t *meta = json_pack("{ssss}", "format", SKPO_OPTIM_FORMAT, "t", t);
    skpo_status st = st_write(path, it, k, meta, err);
    for (int i = 0; i < k; i++) free(it[i].name);
    free(it);
    return st;
}

// Round to the checkpoint dtype and back (round to nearest even, as saving does).
static float round_to(float x, skpo_dtype dt) {
    if (dt == SKPO_DT_F16) return (float)(_Float16)x;
    if (dt != SKPO_DT_BF16 || isnan(x)) return x;
    return skpo_bf16_round(x);
}

typedef struct st_file {
    FILE *f;
    json_t *h;
    uint64_t base;   // byte offset of the data section
} st_file;

// Read tensor `name` (F32, numel elements) into dst. SKPO_ENOTFOUND if absent.
static skpo_status st_read(st_file *sf, const char *path, const char *name, float *dst, size_t numel, skpo_err *err) {
    json_t *t = json_object_get(sf->h, name);
    if (!t) return skpo_err_set(err, SKPO_ENOTFOUND, "'%s' has no tensor '%s'", path, name);
    json_t *off = json_object_get(t, "data_offsets");
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    if (!dt || strcmp(dt, "F32") || !json_is_array(off) || json_array_size(off) != 2)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s' is not an F32 tensor", path, name);
    json_int_t a = json_integer_value(json_array_get(off, 0)), b = json_integer_value(json_array_get(off, 1));
    if (a < 0 || b - a != (json_int_t)(numel * 4))
        return skpo_err_set(err, SKPO_ERANGE, "'%s': tensor '%s' holds %lld bytes, the model needs %zu", path, name,
                            (long long)(b - a), numel * 4);
    if (fseeko(sf->f, (off_t)(sf->base + (uint64_t)a), SEEK_SET) != 0 || fread(dst, 4, numel, sf->f) != numel)
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': tensor '%s' is truncated", path, name);
    return SKPO_OK;
}

static skpo_status st_open(st_file *sf, const char *path, skpo_err *err) {
    memset(sf, 0, sizeof *sf);
    sf->f = fopen(path, "rb");
    if (!sf->f) return skpo_err_set(err, errno == ENOENT ? SKPO_ENOTFOUND : SKPO_EIO, "cannot open '%s': %s", path, strerror(errno));
    uint64_t hl;
    if (fread(&hl, 8, 1, sf->f) != 1 || hl == 0 || hl > ((uint64_t)1 << 30)) {
        fclose(sf->f);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a safetensors file (bad header length)", path);
    }
    char *js = skpo_xmalloc(hl + 1);
    size_t got = fread(js, 1, hl, sf->f);
    js[got] = 0;
    json_error_t je;
    sf->h = got == hl ? json_loadb(js, hl, 0, &je) : NULL;
    free(js);
    if (!json_is_object(sf->h)) {
        json_decref(sf->h);
        fclose(sf->f);
        return skpo_err_set(err, SKPO_EFORMAT, "'%s': safetensors header is not a JSON object", path);
    }
    sf->base = 8 + hl;
    return SKPO_OK;
}

static void st_close(st_file *sf) {
    json_decref(sf->h);
    if (sf->f) fclose(sf->f);
}

static skpo_status load_masters(st_file *sf, const char *path, skpo_param *params, int n, skpo_dtype dtype,
                                int *used, skpo_err *err) {
    *used = 0;
    char *first = n ? prefixed("master.", params[0].name) : NULL;
    int present = first && json_object_get(sf->h, first);
    free(first);
    if (!present) return SKPO_OK;
    float **mw = skpo_xcalloc((size_t)n, sizeof *mw);
    skpo_status st = SKPO_OK;
    int same = 1;
    for (int i = 0; i < n && !st; i++) {
        mw[i] = skpo_xmalloc(params[i].numel ? params[i].numel * 4 : 4);
        char *nm = prefixed("master.", params[i].name);
        st = st_read(sf, path, nm, mw[i], params[i].numel, err);
        free(nm);
        for (size_t k = 0; !st && same && k < params[i].numel; k++) {
            float r = round_to(mw[i][k], dtype);
            same = memcmp(&r, &params[i].data[k], 4) == 0;
        }
    }
    if (!st && same) {
        for (int i = 0; i < n; i++) memcpy(params[i].data, mw[i], params[i].numel * 4);
        *used = 1;
    }
    for (int i = 0; i < n; i++) free(mw[i]);
    free(mw);
    return st;
}

skpo_status skpo_optim_load(skpo_optim *o, skpo_param *params, skpo_dtype dtype, const char *path, int *used_master,
                            skpo_err *err) {
    SKPO_ASSERT(o->n >= 0);
    *used_master = 0;
    st_file sf;
    skpo_status st = st_open(&sf, path, err);
    if (st) return st;
    json_t *meta = json_object_get(sf.h, "__metadata__");
    const char *fmt = json_string_value(json_object_get(meta, "format"));
    const char *ts = json_string_value(json_object_get(meta, "t"));
    long t = -1;
    if (!fmt || strcmp(fmt, SKPO_OPTIM_FORMAT)) {
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a %s optimizer state (format '%s')", path, SKPO_OPTIM_FORMAT,
                          fmt ? fmt : "none");
    } else if (!ts || skpo_parse_long(ts, 0, LONG_MAX, &t) != 0) {
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s': optimizer update count '%s' is not a number", path, ts ? ts : "none");
    }
    for (int i = 0; !st && i < o->n; i++) {
        char *a = prefixed("exp_avg.", o->names[i]), *b = prefixed("exp_avg_sq.", o->names[i]);
        st = st_read(&sf, path, a, o->m[i], o->numel[i], err);
        if (!st) st = st_read(&sf, path, b, o->v[i], o->numel[i], err);
        free(a);
        free(b);
    }
    if (!st) st = load_masters(&sf, path, params, o->n, dtype, used_master, err);
    if (!st) o->t = t;
    st_close(&sf);
    return st;
}
