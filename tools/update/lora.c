/*
 * lora.c (tools/update) - skpo-update's LoRA runs: load the frozen base and
 * the adapter, continue or start its optimizer, and --merge-adapter. The
 * adapter math is core/lora.c; the checkpoint layout core/checkpoint.h.
 */
#define _GNU_SOURCE
#include "tool.h"


#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int upd_lora_wanted(const upd_args *a) {
    return a->lora_rank > 0 || a->adapter || skpo_lora_is_adapter_dir(a->model);
}

// The flags given must agree with an adapter being continued.
static skpo_status check_flags(const upd_args *a, const char *dir, const skpo_lora_cfg *have, skpo_err *err) {
    char b1[128], b2[128];
    if (a->lora_rank && a->lora_rank != have->rank)
        return skpo_err_set(err, SKPO_ERANGE, "--lora-rank %ld, but '%s' holds a rank-%d adapter", a->lora_rank, dir, have->rank);
    if (!isnan(a->lora_alpha) && a->lora_alpha != have->alpha)
        return skpo_err_set(err, SKPO_ERANGE, "--lora-alpha %g, but '%s' has lora_alpha %g", a->lora_alpha, dir, have->alpha);
    if (a->lora_targets) {
        unsigned t;
        skpo_status s = skpo_lora_targets_parse(a->lora_targets, &t, err);
        if (s) return s;
        if (t != have->targets)
            return skpo_err_set(err, SKPO_ERANGE, "--lora-targets %s, but '%s' adapts %s", skpo_lora_targets_str(t, b1, sizeof b1),
                                dir, skpo_lora_targets_str(have->targets, b2, sizeof b2));
    }
    return SKPO_OK;
}

static skpo_status new_cfg(const upd_args *a, skpo_lora_cfg *c, skpo_err *err) {
    skpo_lora_cfg_default(c);
    c->rank = (int)a->lora_rank;
    if (!isnan(a->lora_alpha)) c->alpha = a->lora_alpha;
    c->dropout = a->lora_dropout;
    c->seed = (uint64_t)a->lora_seed;
    skpo_status s = a->lora_targets ? skpo_lora_targets_parse(a->lora_targets, &c->targets, err) : SKPO_OK;
    return s ? s : skpo_lora_cfg_check(c, err);
}

static skpo_status load_all(upd_args *a, skpo_model **m, skpo_optim **o, int64_t *step, skpo_err *err) {
    int own = skpo_lora_is_adapter_dir(a->model);
    if (own && a->adapter)
        return skpo_err_set(err, SKPO_ERANGE, "--adapter '%s': --model '%s' is itself an adapter folder", a->adapter, a->model);
    const char *adir = a->adapter ? a->adapter : own ? a->model : NULL;
    char *base = NULL;
    skpo_status s = own ? skpo_lora_base_of(a->model, &base, err) : SKPO_OK;
    if (s) return s;
    if (!base) base = skpo_xstrdup(a->model);
    a->lora_base = realpath(base, NULL);
    if (!a->lora_base) a->lora_base = skpo_xstrdup(base);
    skpo_model_opts mo = {a->dev, 0, (int)a->threads};   // frozen: no base gradients, no base optimizer state
    s = skpo_model_load(base, &mo, m, err);
    free(base);
    if (s) return s;
    const skpo_config *mc = skpo_model_config(*m);
    if (adir) {
        s = skpo_lora_load(adir, mc, 1, &a->lora, err);
        if (!s) s = check_flags(a, adir, skpo_lora_get_cfg(a->lora), err);
    } else {
        skpo_lora_cfg c;
        s = new_cfg(a, &c, err);
        if (!s) s = skpo_lora_new(mc, &c, 1, &a->lora, err);
    }
    if (!s) s = skpo_lora_attach(*m, a->lora, err);
    if (s) return s;
    // Optimizer and step: from the adapter's folder (a skpo LoRA checkpoint),
    // else fresh; the step continues from the folder the run starts from.
    const char *sdir = adir ? adir : a->model;
    skpo_trainer_state ts;
    int have_ts = 0;
    if ((s = skpo_checkpoint_read_state(sdir, &ts, &have_ts, err))) return s;
    skpo_param *p;
    int np = skpo_lora_params(a->lora, &p);
    *o = skpo_optim_new(&a->a, p, np);
    int have = adir && skpo_checkpoint_has_optim(adir);
    if (a->resume && !have)
        return skpo_err_set(err, SKPO_ENOTFOUND, "--resume: '%s' holds no adapter %s", adir ? adir : a->model, SKPO_OPTIM_FILE);
    if (have && !a->fresh_optimizer) {
        char *path = skpo_path_join(adir, SKPO_OPTIM_FILE);
        int used;
        s = skpo_optim_load(*o, p, SKPO_DT_F32, path, &used, err);
        free(path);
        if (!s && have_ts && ts.optimizer_updates != (*o)->t)
            s = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s says %" PRId64 " optimizer updates, %s has %" PRId64, adir,
                             SKPO_TRAINER_FILE, ts.optimizer_updates, SKPO_OPTIM_FILE, (*o)->t);
    }
    *step = a->step ? a->step : (have_ts ? ts.step + 1 : 1);
    return s;
}

void upd_lora_load(skpo_comm *c, upd_args *a, skpo_model **m, skpo_optim **o, int64_t *step) {
    skpo_err e = {0};
    *m = NULL;
    *o = NULL;
    if (a->zero > 0) upd_check(c, skpo_err_set(&e, SKPO_EUNSUPPORTED, "LoRA runs take no --zero (the adapter's AdamW is on the host)"), &e);
    upd_check(c, load_all(a, m, o, step, &e), &e);
    skpo_model_set_recompute(*m, a->recompute);
}

void upd_lora_merge_and_exit(upd_args *a) {
    skpo_err e = {0};
    skpo_model_opts mo = {SKPO_DEV_CPU, 0, (int)a->threads};
    skpo_model *m;
    if (!a->adapter && !skpo_lora_is_adapter_dir(a->model))
        skpo_die("--merge-adapter: '%s' is not an adapter folder (no %s) and no --adapter given", a->model, SKPO_LORA_CONFIG_FILE);
    if (skpo_lora_model_load(a->model, a->adapter, &mo, 1, &m, NULL, &e) ||
        skpo_checkpoint_save(a->out, a->model, m, skpo_model_src_dtype(m), NULL, NULL, 0, &e))
        skpo_die("%s", e.msg);
    skpo_model_free(m);
    exit(SKPO_EXIT_OK);
}
