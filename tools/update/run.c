/*
 * run.c - skpo-update's steps around the core calls: agreeing on failure
 * across ranks, reading and broadcasting records, loading the model and the
 * optimizer, metrics and the summary line.
 */
#include "tool.h"

#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void upd_check(skpo_comm *c, skpo_status st, const skpo_err *err) {
    skpo_err e = {0};
    if (st && err) e = *err;
    if (skpo_comm_agree(c, st, &e) == SKPO_OK) return;
    if (c->rank == 0 || c->broken) {   // broken: no agreement, each rank says its own
        fflush(stdout);
        if (c->rank == 0) fprintf(stderr, "%s: %s\n", skpo_progname(), e.msg);
        else fprintf(stderr, "%s: rank %d: %s\n", skpo_progname(), c->rank, e.msg);
    }
    skpo_comm_free(c);
    exit(SKPO_EXIT_FAIL);
}

// --- records --------------------------------------------------------------------

// The conditions of skpo_needs[] (record.h) that hold for a trained record r
// under u: the same choices sample_from_rec (core/train/update.c) makes.
static void needs_on(const skpo_update_opts *u, const skpo_rec *r, int phase, const char **on) {
    int k = 0;
    bool refine = false;
    skpo_rec_bool(r, F_REFINE, &refine);
    if (!u->sft) {
        on[k++] = u->loss.phase[phase].kind == SKPO_LOSS_PRM_CE ? "prm" : "adv";
        if (!refine && (u->old_logp == SKPO_OLD_ROLLOUT || u->mismatch.mode != SKPO_MISMATCH_OFF)) on[k++] = "logp";
        if (u->loss.kl_coef != 0) on[k++] = "kl";
        if (u->old_logp == SKPO_OLD_FIELD) on[k++] = "old";
    }
    on[k] = NULL;
}

// *named: the error names the stream itself (a record's needs).
static skpo_status read_trained(const char *path, const skpo_update_opts *u, skpo_rec **recs, size_t *n, int *named,
                                skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    size_t cap = 0;
    skpo_rec r;
    skpo_rec_init(&r);
    while ((st = skpo_reader_next(rd, &r, err)) == SKPO_OK) {
        int ph = skpo_phase_of_kind(skpo_rec_str(&r, F_KIND));
        if (ph < 0) continue;
        const char *on[6];
        needs_on(u, &r, ph, on);
        if ((st = skpo_rec_check_needs(&r, "skpo-update", on, skpo_reader_name(rd), skpo_reader_count(rd), err))) {
            *named = 1;
            break;
        }
        skpo_xgrow((void **)recs, &cap, *n + 1, sizeof **recs);
        skpo_rec_init(&(*recs)[*n]);
        skpo_rec_copy(&(*recs)[(*n)++], &r);
    }
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st == SKPO_EOF ? SKPO_OK : st;
}

// Records as one buffer: for each, u64 length + msgpack bytes.
static void pack_all(const skpo_rec *recs, size_t n, char **buf, size_t *len) {
    size_t cap = 0;
    *buf = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        char *b;
        size_t bl;
        skpo_rec_pack(&recs[i], &b, &bl);
        skpo_xgrow((void **)buf, &cap, *len + 8 + bl, 1);
        uint64_t l = bl;
        memcpy(*buf + *len, &l, 8);
        memcpy(*buf + *len + 8, b, bl);
        *len += 8 + bl;
        free(b);
    }
}

static skpo_status unpack_all(const char *buf, size_t len, skpo_rec **recs, size_t *n, skpo_err *err) {
    size_t cap = 0, off = 0;
    while (off + 8 <= len) {
        uint64_t l;
        memcpy(&l, buf + off, 8);
        if (l > len - off - 8) return skpo_err_set(err, SKPO_EFORMAT, "broadcast records are truncated");
        skpo_xgrow((void **)recs, &cap, *n + 1, sizeof **recs);
        skpo_rec_init(&(*recs)[*n]);
        skpo_status st = skpo_rec_unpack(buf + off + 8, (size_t)l, &(*recs)[(*n)++], err);
        if (st) return st;
        off += 8 + (size_t)l;
    }
    return off == len ? SKPO_OK : skpo_err_set(err, SKPO_EFORMAT, "broadcast records have trailing bytes");
}

void upd_read_records(skpo_comm *c, const char *path, const skpo_update_opts *u, skpo_rec **recs, size_t *n) {
    skpo_err e = {0};
    *recs = NULL;
    *n = 0;
    int named = 0;
    skpo_status st = c->rank == 0 ? read_trained(path, u, recs, n, &named, &e) : SKPO_OK;
    if (st && !named) {
        skpo_err e2 = e;
        skpo_err_set(&e, st, "%s: %s", strcmp(path, "-") ? path : "stdin", e2.msg);
    }
    upd_check(c, st, &e);
    if (c->size == 1) return;
    char *buf = NULL;
    size_t len = 0;
    if (c->rank == 0) pack_all(*recs, *n, &buf, &len);
    st = skpo_comm_bcast_bytes(c, &buf, &len, 0, &e);
    if (!st && c->rank != 0) st = unpack_all(buf, len, recs, n, &e);
    free(buf);
    upd_check(c, st, &e);
}

// --- model and optimizer --------------------------------------------------------

static skpo_status load_optim(const upd_args *a, skpo_model *m, const skpo_trainer_state *ts, int have_ts,
                              skpo_optim **o, skpo_err *err) {
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    *o = skpo_optim_new(&a->a, p, np);
    int shards = !skpo_checkpoint_has_optim(a->model) && skpo_shard_have_optim(a->model);
    int have = skpo_checkpoint_has_optim(a->model) || shards;
    if (!have && !a->fresh_optimizer && have_ts && ts->optimizer_updates > 0 && skpo_checkpoint_weights_only(a->model))
        return skpo_err_set(err, SKPO_ENOTFOUND,
                            "'%s' is a weights-only checkpoint (step %" PRId64 ": its optimizer state stayed in the "
                            "update server): continue from a durable checkpoint, or pass --fresh-optimizer",
                            a->model, ts->step);
    if (a->resume && !have)
        return skpo_err_set(err, SKPO_ENOTFOUND, "--resume: '%s' holds no %s", a->model, SKPO_OPTIM_FILE);
    if (!have || a->fresh_optimizer) return SKPO_OK;
    int used;
    skpo_status st;
    if (shards) {
        st = skpo_shard_load_optim(a->model, *o, p, np, skpo_model_src_dtype(m), &used, err);
    } else {
        char *path = skpo_path_join(a->model, SKPO_OPTIM_FILE);
        st = skpo_optim_load(*o, p, skpo_model_src_dtype(m), path, &used, err);
        free(path);
    }
    if (!st && have_ts && ts->optimizer_updates != (*o)->t)
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s': %s says %" PRId64 " optimizer updates, %s has %" PRId64,
                          a->model, SKPO_TRAINER_FILE, ts->optimizer_updates, SKPO_OPTIM_FILE, (*o)->t);
    return st;
}

void upd_bind_device(upd_args *a) {
    const char *name = skpo_enum_name(&skpo_devices, a->device);
    skpo_comm_bind_gpu(name ? name : getenv("SKPO_DEVICE"));
    skpo_err e = {0};
    if (skpo_device_parse(name, &a->dev, &e)) skpo_die("%s", e.msg);
    if (a->dev != SKPO_DEV_CUDA && (a->recompute || a->zero > 0))
        skpo_die("--recompute and --zero 1 need --device cuda");
}

void upd_comm_open(const upd_args *a, skpo_comm **c, struct skpo_cuda **cu) {
    skpo_err e = {0};
    if (skpo_comm_open(a->comm, a->dev == SKPO_DEV_CUDA, c, cu, &e)) skpo_die("%s", e.msg);
}

void upd_comm_close(skpo_comm *c, struct skpo_cuda *cu) { skpo_comm_close(c, cu); }

void upd_to_device(skpo_comm *c, const upd_args *a, skpo_model *m, skpo_optim *o, skpo_comm **nc) {
    *nc = NULL;
    if (a->dev != SKPO_DEV_CUDA) return;
    skpo_err e = {0};
    skpo_dev_params d;
    upd_check(c, skpo_model_dev_params(m, &d, &e), &e);
    // Already NCCL (shared-file bootstrap): it carries the gradients too.
    int need = c->size > 1 && strcmp(c->ops->name, "nccl");
    skpo_status st = need ? skpo_comm_init_nccl(d.cu, nc, &e) : SKPO_OK;
    upd_check(c, st, &e);
    int zero = a->zero < 0 ? c->size > 1 : (int)a->zero;
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    // The host may hold newer weights than the device: a loaded state's masters.
    st = skpo_model_sync_device(m, &e);
    if (!st) st = skpo_optim_to_device(o, p, np, &d, *nc ? *nc : c, zero, &e);
    upd_check(c, st, &e);
}

void upd_load(skpo_comm *c, upd_args *a, skpo_model **m, skpo_optim **o, int64_t *step) {
    skpo_err e = {0};
    skpo_model_opts mo = {a->dev, 1, (int)a->threads};
    skpo_trainer_state ts;
    int have_ts = 0;
    *m = NULL;
    *o = NULL;
    skpo_status st = skpo_model_load(a->model, &mo, m, &e);
    if (!st && skpo_model_src_dtype(*m) == SKPO_DT_F16)
        st = skpo_err_set(&e, SKPO_EUNSUPPORTED, "'%s' is float16: saving float16 is not supported (convert to bfloat16)",
                          a->model);
    if (!st) st = skpo_checkpoint_read_state(a->model, &ts, &have_ts, &e);
    if (!st) st = load_optim(a, *m, &ts, have_ts, o, &e);
    if (!st) skpo_model_set_recompute(*m, a->recompute);
    upd_check(c, st, &e);
    *step = a->step ? a->step : (have_ts ? ts.step + 1 : 1);
}

// --- metrics and summary ------------------------------------------------------------

static skpo_status write_metrics(const upd_args *a, int argc, char **argv, const skpo_update_metrics *met, int nmb,
                                 int64_t step, skpo_err *err) {
    skpo_writer *w;
    skpo_status st = skpo_writer_open_append(a->metrics, 0, &w, err);
    if (st) return st;
    st = skpo_writer_meta(w, argc, argv, NULL, err);
    skpo_rec r;
    skpo_rec_init(&r);
    for (int k = 0; k < nmb && !st; k++) {
        skpo_update_metrics_rec(&met[k], step, &r);
        st = skpo_writer_put(w, &r, err);
    }
    skpo_rec_free(&r);
    if (st) {
        skpo_writer_abort(w);
        return st;
    }
    return skpo_writer_close(w, err);
}

// ", mismatch k3 K |dlogp| mean M max X, truncated T masked F" over the first
// epoch's mini-batches (later epochs repeat the same tokens); "" when not measured.
static void mismatch_summary(const skpo_update_metrics *met, int nmb, char *out, size_t cap) {
    skpo_mismatch_stats ms = {0};
    for (int k = 0; k < nmb; k++) skpo_mismatch_stats_add(&ms, &met[k].mismatch);
    out[0] = 0;
    if (ms.tokens <= 0) return;
    snprintf(out, cap, ", mismatch k3 %.3g |dlogp| mean %.3g max %.3g, truncated %.4f masked %.4f", ms.k3 / ms.tokens,
             ms.abs_dlogp / ms.tokens, ms.max_abs_dlogp, ms.truncated / ms.tokens, ms.masked / ms.tokens);
}

void upd_report(skpo_comm *c, const upd_args *a, int argc, char **argv, const skpo_update_metrics *met, int nmb,
                const skpo_batch *b, double seconds) {
    skpo_err e = {0};
    skpo_status st = SKPO_OK;
    if (c->rank == 0 && a->metrics) st = write_metrics(a, argc, argv, met, nmb, a->u.step, &e);
    if (st) {
        skpo_err e2 = e;
        skpo_err_set(&e, st, "metrics '%s': %s", a->metrics, e2.msg);
    }
    upd_check(c, st, &e);
    if (c->rank != 0) return;
    double tokens = 0, loss = 0, gmax = 0, ph[SKPO_NPHASE] = {0}, low = 0, high = 0;
    for (int k = 0; k < nmb; k++) {
        tokens += met[k].tokens;
        loss += met[k].loss / nmb;
        gmax = fmax(gmax, met[k].grad_norm);
        for (int p = 0; p < SKPO_NPHASE; p++) {
            ph[p] += met[k].phase[p].loss / nmb;
            low += met[k].phase[p].clip_low;
            high += met[k].phase[p].clip_high;
        }
    }
    double nt = tokens > 0 ? tokens : 1;
    char mm[160];
    mismatch_summary(met, nmb / (a->u.epochs > 0 ? (int)a->u.epochs : 1), mm, sizeof mm);
    fprintf(stderr,
            "%s: step %" PRId64 ": %d update%s over %d prompts, %zu records, %.0f tokens in %.1f s (%.0f tok/s, %d rank%s); "
            "loss %.5g (up %.4g, down %.4g, full %.4g), grad norm max %.4g, lr %.3g, clip low %.4f high %.4f%s -> %s\n",
            skpo_progname(), a->u.step, nmb, nmb == 1 ? "" : "s", skpo_batch_prompts(b), skpo_batch_records(b), tokens, seconds,
            seconds > 0 ? tokens / seconds : 0, c->size, c->size == 1 ? "" : "s", loss, ph[0], ph[1], ph[2], gmax,
            nmb ? met[0].lr : skpo_optim_lr(&a->a, a->u.step), low / nt, high / nt, mm, a->out);
}
