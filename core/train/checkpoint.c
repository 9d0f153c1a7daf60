/*
 * checkpoint.c - see checkpoint.h. (The trainer's view of a model,
 * skpo_policy_of_model, is in model/policy.c with the adapter's.)
 */
#define _GNU_SOURCE
#include "train/checkpoint.h"
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// --- trainer state -------------------------------------------------------------------

int skpo_checkpoint_has_optim(const char *dir) {
    char *p = skpo_path_join(dir, SKPO_OPTIM_FILE);
    int ok = skpo_path_exists(p);
    free(p);
    return ok;
}

skpo_status skpo_checkpoint_read_state(const char *dir, skpo_trainer_state *st, int *present, skpo_err *err) {
    memset(st, 0, sizeof *st);
    *present = 0;
    char *p = skpo_path_join(dir, SKPO_TRAINER_FILE);
    if (!skpo_path_exists(p)) {
        free(p);
        return SKPO_OK;
    }
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    skpo_status s = SKPO_OK;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *step = json_object_get(j, "step"), *upd = json_object_get(j, "optimizer_updates");
    if (!j) s = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s (line %d)", p, je.text, je.line);
    else if (!fmt || strcmp(fmt, SKPO_TRAINER_FORMAT))
        s = skpo_err_set(err, SKPO_EFORMAT, "'%s' is not a %s file", p, SKPO_TRAINER_FORMAT);
    else if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_integer(upd) ||
             json_integer_value(upd) < 0)
        s = skpo_err_set(err, SKPO_EFORMAT, "'%s': 'step' and 'optimizer_updates' must be integers >= 0", p);
    if (!s) {
        st->step = json_integer_value(step);
        st->optimizer_updates = json_integer_value(upd);
        *present = 1;
    }
    json_decref(j);
    free(p);
    return s;
}

int skpo_checkpoint_weights_only(const char *dir) {
    char *p = skpo_path_join(dir, SKPO_TRAINER_FILE);
    json_error_t je;
    json_t *j = skpo_path_exists(p) ? json_load_file(p, 0, &je) : NULL;
    int w = j && json_is_false(json_object_get(j, "optimizer_state"));
    json_decref(j);
    free(p);
    return w;
}

// --- save ----------------------------------------------------------------------------

// Files of an HF folder that belong to the tokenizer / generation side. An
// allow-list on purpose: stale weights in other formats (*.bin) must not ride along.
static int is_side_file(const char *name) {
    static const char *exact[] = {"special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json",
                                  "generation_config.json", "chat_template.jinja", "chat_template.json", NULL};
    for (int i = 0; exact[i]; i++)
        if (!strcmp(name, exact[i])) return 1;
    return !strncmp(name, "tokenizer", 9);
}

static skpo_status copy_side_files(const char *src, const char *dst, skpo_err *err) {
    DIR *d = opendir(src);
    if (!d) return skpo_err_set(err, SKPO_EIO, "cannot list '%s': %s", src, strerror(errno));
    skpo_status s = SKPO_OK;
    struct dirent *e;
    while (!s && (e = readdir(d))) {
        if (!is_side_file(e->d_name)) continue;
        char *a = skpo_path_join(src, e->d_name), *b = skpo_path_join(dst, e->d_name);
        struct stat sb;
        if (stat(a, &sb) == 0 && S_ISREG(sb.st_mode)) s = skpo_copy_file(a, b, err);
        free(a);
        free(b);
    }
    closedir(d);
    return s;
}

static const char *dtype_name(skpo_dtype d) {
    return d == SKPO_DT_BF16 ? "bfloat16" : d == SKPO_DT_F16 ? "float16" : "float32";
}

// shards > 0: the optimizer state is in that many per-rank files (optim.index.json).
static skpo_status write_state(const char *dir, const skpo_trainer_state *st, skpo_dtype dtype, double lr,
                               const char *parent, int weights_only, int shards, skpo_err *err) {
    json_t *j = json_pack("{sssIsIsssf}", "format", SKPO_TRAINER_FORMAT, "step", (json_int_t)st->step,
                          "optimizer_updates", (json_int_t)st->optimizer_updates, "dtype", dtype_name(dtype), "lr", lr);
    if (weights_only) json_object_set_new(j, "optimizer_state", json_false());
    if (shards > 0) json_object_set_new(j, "optimizer_shards", json_integer(shards));
    if (parent) json_object_set_new(j, "parent", json_string(parent));
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    char *p = skpo_path_join(dir, SKPO_TRAINER_FILE);
    size_t n = strlen(s);
    s = skpo_xrealloc(s, n + 2);
    s[n] = '\n';
    skpo_status r = skpo_write_file_atomic(p, s, n + 1, err);
    free(s);
    free(p);
    return r;
}

// "<out>.tmp.<pid>", emptied and created; *base = out without trailing slashes.
static skpo_status tmp_begin(const char *out, char **base, char **tmp, skpo_err *err) {
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    *base = skpo_xstrndup(out, len);
    *tmp = skpo_xmalloc(len + 32);
    snprintf(*tmp, len + 32, "%s.tmp.%ld", *base, (long)getpid());
    skpo_status s = SKPO_OK;
    if (skpo_path_exists(*tmp)) s = skpo_rm_rf(*tmp, err);
    if (!s) s = skpo_mkdir_p(*tmp, err);   // parents too: --out ckpt/7 may be the first in ckpt/
    if (!s) s = skpo_dir_mark_begin(*tmp, err);
    return s;
}

// Mark complete (every file is written and fsynced by now), sync and swap tmp
// in for base (s == OK), else remove tmp; frees both.
static skpo_status tmp_finish(skpo_status s, char *base, char *tmp, skpo_err *err) {
    if (!s) s = skpo_dir_mark_complete(tmp, err);
    if (!s) s = skpo_fsync_dir(tmp, err);
    if (!s) s = skpo_dir_replace(tmp, base, err);
    if (s) {
        skpo_err ignore = {0};
        skpo_rm_rf(tmp, &ignore);
    }
    free(tmp);
    free(base);
    return s;
}

skpo_status skpo_checkpoint_save(const char *out, const char *src_dir, skpo_model *m, skpo_dtype dtype,
                                 const skpo_optim *o, const skpo_trainer_state *st, double lr, skpo_err *err) {
    char *base, *tmp;
    skpo_status s = tmp_begin(out, &base, &tmp, err);
    if (!s) s = skpo_model_sync_host(m, err);   // device weights -> host (a CPU model: nothing)
    if (!s) s = skpo_model_save(m, tmp, dtype, 0, err);
    if (!s && src_dir) s = copy_side_files(src_dir, tmp, err);
    if (!s && o) {
        skpo_param *p;
        int np = skpo_model_params(m, &p);
        SKPO_ASSERT(np == o->n);
        char *op = skpo_path_join(tmp, SKPO_OPTIM_FILE);
        s = skpo_optim_save(o, p, dtype != SKPO_DT_F32, op, err);
        free(op);
    }
    if (!s && st) s = write_state(tmp, st, dtype, lr, src_dir, !o, 0, err);
    return tmp_finish(s, base, tmp, err);
}

// --- a checkpoint written by several ranks -------------------------------------------

skpo_status skpo_checkpoint_parts_begin(const char *out, char **tmp, skpo_err *err) {
    char *base;
    skpo_status s = tmp_begin(out, &base, tmp, err);
    free(base);
    if (s) {
        free(*tmp);
        *tmp = NULL;
    }
    return s;
}

skpo_status skpo_checkpoint_save_part(const char *tmp, skpo_model *m, skpo_dtype dtype, const int *owner, int part,
                                      int nparts, skpo_err *err) {
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    skpo_status s = SKPO_OK;
    size_t off = 0;
    // Only this part's tensors leave the device (the flat layout is the params' order).
    for (int i = 0; i < np && !s; off += p[i].numel, i++)
        if (owner[i] == part) s = skpo_model_sync_host_range(m, off, off + p[i].numel, err);
    if (!s) s = skpo_model_save_part(m, tmp, dtype, owner, part, nparts, err);
    return s;
}

skpo_status skpo_checkpoint_parts_commit(skpo_status s, const char *out, const char *tmp, const char *src_dir,
                                         skpo_model *m, skpo_dtype dtype, const int *owner, int nparts,
                                         const skpo_trainer_state *st, int optimizer_shards, double lr, skpo_err *err) {
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    char *base = skpo_xstrndup(out, len), *t = skpo_xstrdup(tmp);
    if (!s) s = skpo_model_save_index(m, t, dtype, owner, nparts, err);
    if (!s && src_dir) s = copy_side_files(src_dir, t, err);
    if (!s && st) s = write_state(t, st, dtype, lr, src_dir, optimizer_shards == 0, optimizer_shards, err);
    return tmp_finish(s, base, t, err);
}

skpo_status skpo_checkpoint_save_adapter(const char *out, const char *src_dir, const char *base_model, skpo_lora *lo,
                                         const skpo_optim *o, const skpo_trainer_state *st, double lr, skpo_err *err) {
    char *base, *tmp;
    skpo_status s = tmp_begin(out, &base, &tmp, err);
    if (!s) s = skpo_lora_save(lo, tmp, base_model, err);
    if (!s && src_dir) s = copy_side_files(src_dir, tmp, err);
    if (!s) {
        skpo_param *p;
        int np = skpo_lora_params(lo, &p);
        SKPO_ASSERT(np == o->n);
        char *op = skpo_path_join(tmp, SKPO_OPTIM_FILE);
        s = skpo_optim_save(o, p, 0, op, err);   // adapters are float32: no master copy
        free(op);
    }
    if (!s) s = write_state(tmp, st, SKPO_DT_F32, lr, src_dir, 0, 0, err);
    return tmp_finish(s, base, tmp, err);
}
