/*
 * gen_model.c - the engine's model adapter (kept apart from generate.c so
 * programs that drive the engine with another step function, like the unit
 * tests, do not link the model).
 */
#include "gen/generate.h"
#include "model/model.h"

skpo_status skpo_gen_model_step(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                                const int *off, float *logits, skpo_err *err) {
    return skpo_model_step(ctx, kv, seq, nseq, toks, off, logits, err);
}
