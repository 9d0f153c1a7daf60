/*
 * skpo-update - one policy update: records in, next checkpoint out.
 * See `skpo-update --help`, docs/update.md and docs/algorithm.md sections 3 (step 8),
 * 4.5 and 4.6. The math lives in core/train/update.c, loss.c, optim.c; this file
 * wires the steps together (run.c has the helpers, args.c the options).
 */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    upd_args a;
    upd_parse_args(&a, argc, argv);
    if (a.serve) {
        return upd_serve(&a);
    }
    upd_bind_device(&a);
    if (a.merge_adapter) upd_lora_merge_and_exit(&a);   // LoRA: no records, no training
    double t0 = skpo_now();
    skpo_err e = {0};
    skpo_comm *c = NULL;
    struct skpo_cuda *ccu = NULL;   // the communicator's own device context (shared-file NCCL bootstrap)
    upd_comm_open(&a, &c, &ccu);
    skpo_rec *recs;
    size_t n;
    upd_read_records(c, a.input, &a.u, &recs, &n);
    skpo_model *m;
    skpo_optim *o;
    if (upd_lora_wanted(&a)) upd_lora_load(c, &a, &m, &o, &a.u.step);   // LoRA: frozen base + adapter
    else upd_load(c, &a, &m, &o, &a.u.step);
    skpo_comm *nc = NULL;   // NCCL, for device gradients over several GPUs
    if (!a.lora) upd_to_device(c, &a, m, o, &nc);   // LoRA: the adapter's AdamW stays on the host
    skpo_batch *b = NULL;
    upd_check(c, skpo_batch_new(recs, n, &a.u, c->rank, c->size, &b, &e), &e);
    int nmb = skpo_batch_minibatches(b) * a.u.epochs;
    // A step that trains nothing must not pass for a trained step.
    if (skpo_batch_tokens(b) == 0 && !a.allow_empty) {
        skpo_err ee = {0};
        skpo_err_set(&ee, SKPO_EFORMAT, "no trainable records (kinds up, down, full with tokens) in %s: nothing to train "
                     "(--allow-empty writes the weights unchanged)", strcmp(a.input, "-") ? a.input : "stdin");
        upd_check(c, SKPO_EFORMAT, &ee);
    }
    if (skpo_batch_tokens(b) == 0 && c->rank == 0)
        skpo_warn("no trainable records: --allow-empty: %s", nmb ? "the optimizer steps on zero gradients"
                                                               : "writing the weights unchanged");
    skpo_update_metrics *met = skpo_xcalloc((size_t)nmb + 1, sizeof *met);
    skpo_model_set_pack(m, !a.no_pack);   // docs/model.md "Packed layout"
    skpo_policy pol = a.lora ? skpo_policy_of_lora(m, a.lora) : skpo_policy_of_model(m);
    double tc = skpo_now(), cc = skpo_cpu_seconds();
    upd_check(c, skpo_update_step(&pol, o, nc ? nc : c, b, &a.u, met, &e), &e);
    if (c->rank == 0) skpo_timing_report(skpo_now() - tc, cc);
    upd_check(c, skpo_optim_from_device(o, &e), &e);   // moments to rank 0's host for the save
    // Only rank 0 writes; the others wait to hear whether it worked.
    skpo_trainer_state ts = {a.u.step, o->t};
    skpo_status st = SKPO_OK;
    if (c->rank == 0 && a.lora)   // LoRA: the adapter only, the base by reference
        st = skpo_checkpoint_save_adapter(a.out, a.model, a.lora_base, a.lora, o, &ts, skpo_optim_lr(&a.a, a.u.step), &e);
    else if (c->rank == 0)
        st = skpo_checkpoint_save(a.out, a.model, m, skpo_model_src_dtype(m), a.weights_only ? NULL : o, &ts, skpo_optim_lr(&a.a, a.u.step), &e);
    upd_check(c, st, &e);
    upd_report(c, &a, argc, argv, met, nmb, b, skpo_now() - t0);
    free(met);
    skpo_batch_free(b);
    skpo_optim_free(o);
    skpo_comm_free(nc);   // before the model: it shares the model's device context
    skpo_model_free(m);
    skpo_lora_free(a.lora);
    free(a.lora_base);
    skpo_recs_free(recs, n);
    upd_comm_close(c, ccu);
    return SKPO_EXIT_OK;
}
