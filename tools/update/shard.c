/*
 * shard.c - a durable checkpoint's optimizer state written by every rank in
 * parallel (the update server on CPU ranks, whose AdamW state is replicated):
 * the parameters are dealt out to the N ranks (largest first to the least
 * loaded, ties by index: every rank and every reader computes the same deal),
 * rank r writes `optim-<r>-of-<N>.safetensors` (an ordinary skpo-adamw-1 file
 * holding just its parameters' moments and masters), and rank 0 writes
 * `optim.index.json` {"format": "skpo-adamw-shards-1", "shards": N, "t": T}
 * after all of them and notes "optimizer_shards": N in trainer_state.json. A
 * reader with any number of ranks loads every shard (upd_load: each rank reads
 * all of them, since every CPU rank holds the whole state).
 * The device optimizer (ZeRO-1) still gathers to rank 0's single file.
 */
#define _GNU_SOURCE
#include "tool.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_FORMAT "skpo-adamw-shards-1"

int upd_have_optim_shards(const char *dir) {
    char *p = skpo_path_join(dir, UPD_SHARD_INDEX);
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

skpo_status upd_save_optim_shards(skpo_comm *c, const char *dir, skpo_model *m, const skpo_optim *o, skpo_err *err) {
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    SKPO_ASSERT(np == o->n && !o->dev);
    int *owner = deal(p, np, c->size);
    view v;
    view_make(o, p, np, owner, c->rank, &v);
    char *path = shard_path(dir, c->rank, c->size);
    skpo_status st = skpo_optim_save(&v.o, v.p, skpo_model_src_dtype(m) != SKPO_DT_F32, path, err);
    free(path);
    view_free(&v);
    free(owner);
    st = skpo_comm_agree(c, st, err);
    if (st || c->rank != 0) return st;
    char *ip = skpo_path_join(dir, UPD_SHARD_INDEX), *tp = skpo_path_join(dir, SKPO_TRAINER_FILE);
    json_t *j = json_pack("{sssisI}", "format", SHARD_FORMAT, "shards", c->size, "t", (json_int_t)o->t);
    st = write_json(ip, j, err);
    json_decref(j);
    json_error_t je;
    json_t *ts = st ? NULL : json_load_file(tp, 0, &je);
    if (!st && !ts) st = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s", tp, je.text);
    if (!st) {
        json_object_del(ts, "optimizer_state");
        json_object_set_new(ts, "optimizer_shards", json_integer(c->size));
        st = write_json(tp, ts, err);
    }
    json_decref(ts);
    free(ip);
    free(tp);
    return st;
}

skpo_status upd_load_optim_shards(const char *dir, skpo_optim *o, skpo_param *p, int np, skpo_dtype dtype,
                                  int *used_master, skpo_err *err) {
    char *ip = skpo_path_join(dir, UPD_SHARD_INDEX);
    json_error_t je;
    json_t *j = json_load_file(ip, 0, &je);
    skpo_status st = SKPO_OK;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *ns = json_object_get(j, "shards");
    if (!j) st = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s", ip, je.text);
    else if (!fmt || strcmp(fmt, SHARD_FORMAT) || !json_is_integer(ns) || json_integer_value(ns) < 1 ||
             json_integer_value(ns) > 1 << 20)
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a %s index", ip, SHARD_FORMAT);
    int n = st ? 0 : (int)json_integer_value(ns);
    json_decref(j);
    free(ip);
    int *owner = st ? NULL : deal(p, np, n);
    *used_master = 1;
    for (int r = 0; !st && r < n; r++) {
        view v;
        view_make(o, p, np, owner, r, &v);
        char *path = shard_path(dir, r, n);
        int used = 0;
        st = skpo_optim_load(&v.o, v.p, dtype, path, &used, err);
        if (!st && r > 0 && v.o.t != o->t)
            st = skpo_err_set(err, SKPO_EFORMAT, "'%s' says %lld optimizer updates, shard 0 %lld", path,
                              (long long)v.o.t, (long long)o->t);
        if (!st) o->t = v.o.t;
        *used_master = *used_master && (used || v.o.n == 0);
        free(path);
        view_free(&v);
    }
    free(owner);
    return st;
}
