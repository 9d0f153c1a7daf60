/*
 * shard.c - see shard.h: a checkpoint written by every rank of the update
 * server in parallel (checkpoint.h, "written by N ranks"):
 *   weights    the parameters are dealt out to the N ranks (largest first to
 *              the least loaded, ties by index: every rank computes the same
 *              deal); rank r writes its tensors as the Hugging Face shard
 *              model-<r+1>-of-<N>.safetensors, rank 0 the index, so HF
 *              loaders and skpo_model_load read the folder as it is.
 *   optimizer  (durable steps) rank r writes the flat range
 *              skpo_optim_zero_range(r, N) of the state, exactly the slice a
 *              ZeRO-1 device optimizer holds on that rank (a CPU rank holds
 *              everything and copies that slice): optim-<r>-of-<N>.safetensors,
 *              an ordinary skpo-adamw-1 file whose tensors are the parameters
 *              in the range, a parameter cut by the range's ends named
 *              "<name>[i:j]" (its elements i..j-1); rank 0 then writes
 *              optim.index.json {"format": "skpo-adamw-shards-2", "shards":
 *              N, "t": T, "numel": P}. No rank gathers another's state.
 * A reader with any number of ranks loads every shard into the host state
 * (skpo-update's upd_load; to_device then keeps each rank's slice). The per-parameter deal
 * of the state of earlier builds (skpo-adamw-shards-1) is still read.
 */
#define _GNU_SOURCE
#include "train/shard.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_FORMAT "skpo-adamw-shards-2"
#define SHARD_FORMAT_DEAL "skpo-adamw-shards-1"   // per-parameter deal (read only)

int skpo_shard_have_optim(const char *dir) {
    char *p = skpo_path_join(dir, SKPO_SHARD_INDEX);
    int ok = skpo_path_exists(p);
    free(p);
    return ok;
}

typedef struct ord {
    size_t numel;
    int i;
} ord;

static int by_size_desc(const void *a, const void *b) {
    const ord *x = a, *y = b;
    if (x->numel != y->numel) return x->numel < y->numel ? 1 : -1;
    return x->i - y->i;
}

// owner[i] for each of the np parameters among n ranks.
static int *deal(const skpo_param *p, int np, int n) {
    ord *o = skpo_xcalloc((size_t)np + 1, sizeof *o);
    double *load = skpo_xcalloc((size_t)n, sizeof *load);
    int *owner = skpo_xcalloc((size_t)np + 1, sizeof *owner);
    for (int i = 0; i < np; i++) o[i] = (ord){p[i].numel, i};
    qsort(o, (size_t)np, sizeof *o, by_size_desc);
    for (int k = 0; k < np; k++) {
        int r = 0;
        for (int q = 1; q < n; q++)
            if (load[q] < load[r]) r = q;
        owner[o[k].i] = r;
        load[r] += (double)o[k].numel;
    }
    free(o);
    free(load);
    return owner;
}

// The optimizer and parameters restricted to rank r's deal (pointers into o and p).
typedef struct view {
    skpo_optim o;
    skpo_param *p;
} view;

static void view_make(const skpo_optim *o, const skpo_param *p, int np, const int *owner, int r, view *v) {
    memset(v, 0, sizeof *v);
    v->o.cfg = o->cfg;
    v->o.t = o->t;
    size_t cap = (size_t)np + 1;
    v->o.names = skpo_xcalloc(cap, sizeof *v->o.names);
    v->o.numel = skpo_xcalloc(cap, sizeof *v->o.numel);
    v->o.m = skpo_xcalloc(cap, sizeof *v->o.m);
    v->o.v = skpo_xcalloc(cap, sizeof *v->o.v);
    v->p = skpo_xcalloc(cap, sizeof *v->p);
    for (int i = 0; i < np; i++) {
        if (owner[i] != r) continue;
        int k = v->o.n++;
        v->o.names[k] = o->names[i];
        v->o.numel[k] = o->numel[i];
        v->o.m[k] = o->m[i];
        v->o.v[k] = o->v[i];
        v->p[k] = p[i];
    }
}

static void view_free(view *v) {
    free(v->o.names);
    free(v->o.numel);
    free(v->o.m);
    free(v->o.v);
    free(v->p);
}

static char *shard_path(const char *dir, int r, int n) {
    char name[64];
    snprintf(name, sizeof name, "optim-%05d-of-%05d.safetensors", r, n);
    return skpo_path_join(dir, name);
}

static skpo_status write_json(const char *path, json_t *j, skpo_err *err) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s) return skpo_err_set(err, SKPO_ENOMEM, "cannot format '%s'", path);
    size_t n = strlen(s);
    s = skpo_xrealloc(s, n + 2);
    s[n] = '\n';
    skpo_status st = skpo_write_file_atomic(path, s, n + 1, err);
    free(s);
    return st;
}

// --- flat ranges ------------------------------------------------------------------

// o and p restricted to flat [a, b): pieces of the parameters, their moments
// at hm / hv + (x - a) when given (a writer's copied range), else inside o's
// own arrays (a reader's). Cut parameters get names of their own (owned[k]).
typedef struct rview {
    view w;
    char *owned;
} rview;

static void view_range(const skpo_optim *o, const skpo_param *p, int np, size_t a, size_t b, float *hm, float *hv,
                       rview *v) {
    memset(v, 0, sizeof *v);
    v->w.o.cfg = o->cfg;
    v->w.o.t = o->t;
    size_t cap = (size_t)np + 1;
    v->w.o.names = skpo_xcalloc(cap, sizeof *v->w.o.names);
    v->w.o.numel = skpo_xcalloc(cap, sizeof *v->w.o.numel);
    v->w.o.m = skpo_xcalloc(cap, sizeof *v->w.o.m);
    v->w.o.v = skpo_xcalloc(cap, sizeof *v->w.o.v);
    v->w.p = skpo_xcalloc(cap, sizeof *v->w.p);
    v->owned = skpo_xcalloc(cap, 1);
    size_t off = 0;
    for (int i = 0; i < np; off += p[i].numel, i++) {
        size_t x = off > a ? off : a, y = off + p[i].numel < b ? off + p[i].numel : b;
        if (x >= y) continue;
        int k = v->w.o.n++;
        char *name = o->names[i];
        if (y - x != p[i].numel) {
            size_t len = strlen(name) + 48;
            name = skpo_xmalloc(len);
            snprintf(name, len, "%s[%zu:%zu]", o->names[i], x - off, y - off);
            v->owned[k] = 1;
        }
        v->w.o.names[k] = name;
        v->w.o.numel[k] = y - x;
        v->w.o.m[k] = hm ? hm + (x - a) : o->m[i] + (x - off);
        v->w.o.v[k] = hv ? hv + (x - a) : o->v[i] + (x - off);
        v->w.p[k] = p[i];
        v->w.p[k].name = name;
        v->w.p[k].data = p[i].data + (x - off);
        v->w.p[k].numel = y - x;
    }
}

static void rview_free(rview *v) {
    for (int k = 0; k < v->w.o.n; k++)
        if (v->owned[k]) free(v->w.o.names[k]);
    free(v->owned);
    view_free(&v->w);
}

static size_t flat_total(const skpo_param *p, int np) {
    size_t t = 0;
    for (int i = 0; i < np; i++) t += p[i].numel;
    return t;
}

// This rank's shard of the optimizer state into dir.
static skpo_status save_optim_range(skpo_comm *c, const char *dir, skpo_model *m, const skpo_optim *o, skpo_err *err) {
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    SKPO_ASSERT(np == o->n);
    size_t a, b;
    skpo_optim_zero_range(flat_total(p, np), c->rank, c->size, &a, &b);
    int masters = skpo_model_src_dtype(m) != SKPO_DT_F32;
    float *hm, *hv;
    skpo_status st = skpo_optim_copy_range(o, a, b, &hm, &hv, err);
    if (st) return st;
    if (masters) st = skpo_model_sync_host_range(m, a, b, err);   // the range's fp32 masters (device: d2h)
    rview v;
    view_range(o, p, np, a, b, hm, hv, &v);
    char *path = shard_path(dir, c->rank, c->size);
    if (!st) st = skpo_optim_save(&v.w.o, v.w.p, masters, path, err);
    free(path);
    rview_free(&v);
    free(hm);
    free(hv);
    return st;
}

static skpo_status write_optim_index(const char *dir, const skpo_optim *o, int n, size_t total, skpo_err *err) {
    char *ip = skpo_path_join(dir, SKPO_SHARD_INDEX);
    json_t *j = json_pack("{sssisIsI}", "format", SHARD_FORMAT, "shards", n, "t", (json_int_t)o->t, "numel",
                          (json_int_t)total);
    skpo_status st = write_json(ip, j, err);
    json_decref(j);
    free(ip);
    return st;
}

skpo_status skpo_shard_save(skpo_comm *c, const char *out, const char *src_dir, skpo_model *m, const skpo_optim *o,
                            int durable, const skpo_trainer_state *ts, double lr, skpo_err *err) {
    char *tmp = NULL;
    size_t len = 0;
    skpo_status st = c->rank == 0 ? skpo_checkpoint_parts_begin(out, &tmp, err) : SKPO_OK;
    if ((st = skpo_comm_agree(c, st, err))) return st;
    if (c->rank == 0) len = strlen(tmp) + 1;
    if ((st = skpo_comm_bcast_bytes(c, &tmp, &len, 0, err))) {
        free(tmp);
        return st;
    }
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    int *owner = deal(p, np, c->size);
    skpo_dtype dt = skpo_model_src_dtype(m);
    st = skpo_checkpoint_save_part(tmp, m, dt, owner, c->rank, c->size, err);
    if (!st && durable) st = save_optim_range(c, tmp, m, o, err);
    st = skpo_comm_agree(c, st, err);
    if (c->rank == 0) {
        if (!st && durable) st = write_optim_index(tmp, o, c->size, flat_total(p, np), err);
        st = skpo_checkpoint_parts_commit(st, out, tmp, src_dir, m, dt, owner, c->size, ts, durable ? c->size : 0, lr,
                                          err);
    }
    free(owner);
    free(tmp);
    return skpo_comm_agree(c, st, err);
}

// Shard r's view of o: the flat range (shards-2) or the deal (shards-1).
static void shard_view(const int *owner, const skpo_optim *o, const skpo_param *p, int np, int r, int n, rview *v) {
    if (owner) {
        memset(v, 0, sizeof *v);
        view_make(o, p, np, owner, r, &v->w);
        v->owned = skpo_xcalloc((size_t)np + 1, 1);
        return;
    }
    size_t a, b;
    skpo_optim_zero_range(flat_total(p, np), r, n, &a, &b);
    view_range(o, p, np, a, b, NULL, NULL, v);
}

skpo_status skpo_shard_load_optim(const char *dir, skpo_optim *o, skpo_param *p, int np, skpo_dtype dtype,
                                  int *used_master, skpo_err *err) {
    char *ip = skpo_path_join(dir, SKPO_SHARD_INDEX);
    json_error_t je;
    json_t *j = json_load_file(ip, 0, &je);
    skpo_status st = SKPO_OK;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *ns = json_object_get(j, "shards"), *nt = json_object_get(j, "numel");
    int ranged = fmt && !strcmp(fmt, SHARD_FORMAT);
    if (!j) st = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s", ip, je.text);
    else if (!fmt || (!ranged && strcmp(fmt, SHARD_FORMAT_DEAL)) || !json_is_integer(ns) || json_integer_value(ns) < 1 ||
             json_integer_value(ns) > 1 << 20)
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a %s index", ip, SHARD_FORMAT);
    else if (ranged && (!json_is_integer(nt) || (size_t)json_integer_value(nt) != flat_total(p, np)))
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s' holds the state of %lld parameters, the model has %zu", ip,
                          json_is_integer(nt) ? (long long)json_integer_value(nt) : -1LL, flat_total(p, np));
    int n = st ? 0 : (int)json_integer_value(ns);
    json_decref(j);
    free(ip);
    int *owner = st || ranged ? NULL : deal(p, np, n);
    *used_master = 1;
    for (int r = 0; !st && r < n; r++) {
        rview v;
        shard_view(owner, o, p, np, r, n, &v);
        char *path = shard_path(dir, r, n);
        int used = 0;
        st = skpo_optim_load(&v.w.o, v.w.p, dtype, path, &used, err);
        if (!st && r > 0 && v.w.o.t != o->t)
            st = skpo_err_set(err, SKPO_EFORMAT, "'%s' says %lld optimizer updates, shard 0 %lld", path,
                              (long long)v.w.o.t, (long long)o->t);
        if (!st) o->t = v.w.o.t;
        *used_master = *used_master && (used || v.w.o.n == 0);
        free(path);
        rview_free(&v);
    }
    free(owner);
    return st;
}
