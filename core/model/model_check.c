/*
 * model_check.c - the argument checks every backend runs first (model_impl.h):
 * a step's sequences, offsets and token ids, the KV reservation of a step, and
 * a scoring / training batch. One copy, so the CPU and CUDA backends reject
 * the same inputs with the same messages.
 */
#include "model/model_impl.h"

#include <math.h>

skpo_status model_step_check(const skpo_model *m, const int *seq, int nseq, const int32_t *toks, const int *off,
                              skpo_err *err) {
    if (nseq <= 0 || off[0] != 0) return skpo_err_set(err, SKPO_ERANGE, "step: no sequences or off[0] != 0");
    for (int i = 0; i < nseq; i++) {
        if (off[i + 1] <= off[i]) return skpo_err_set(err, SKPO_ERANGE, "step: sequence %d has no new tokens", seq[i]);
        for (int j = 0; j < i; j++)
            if (seq[j] == seq[i]) return skpo_err_set(err, SKPO_ERANGE, "step: sequence %d given twice", seq[i]);
    }
    for (int r = 0; r < off[nseq]; r++)
        if (toks[r] < 0 || toks[r] >= m->c.vocab_size)
            return skpo_err_set(err, SKPO_ERANGE, "step: token id %d outside the vocabulary (%d)", toks[r], m->c.vocab_size);
    return SKPO_OK;
}

// Reserve positions for every sequence, all or nothing (old[i] = previous length).
skpo_status model_step_reserve(const skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int *off, int *old,
                               skpo_err *err) {
    int i;
    skpo_status s = SKPO_OK;
    for (i = 0; i < nseq; i++) {
        int n = off[i + 1] - off[i];
        old[i] = skpo_kv_seq_len(kv, seq[i]);
        if (old[i] + n > m->c.max_position_embeddings) {
            s = skpo_err_set(err, SKPO_ERANGE, "sequence %d would reach position %d, past max_position_embeddings %d",
                             seq[i], old[i] + n, m->c.max_position_embeddings);
            break;
        }
        if (skpo_kv_seq_append(kv, seq[i], n) < 0) {
            s = skpo_err_set(err, SKPO_ERANGE, "kv cache full (%zu blocks in use)", skpo_kv_blocks_used(kv));
            break;
        }
    }
    if (s)
        while (--i >= 0) skpo_kv_seq_truncate(kv, seq[i], old[i]);
    return s;
}

skpo_status model_check_seqs(const skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, skpo_err *err) {
    if (!(temperature > 0) || !isfinite(temperature))
        return skpo_err_set(err, SKPO_ERANGE, "temperature %g must be positive", (double)temperature);
    for (int i = 0; i < nseq; i++) {
        const skpo_seq *s = &seqs[i];
        if (s->start < 1 || s->start > s->n)
            return skpo_err_set(err, SKPO_ERANGE, "sequence %d: start %d outside [1, %d]", i, s->start, s->n);
        if (s->n > m->c.max_position_embeddings)
            return skpo_err_set(err, SKPO_ERANGE, "sequence %d: %d tokens exceed max_position_embeddings %d", i, s->n,
                                m->c.max_position_embeddings);
        for (int t = 0; t < s->n; t++)
            if (s->ids[t] < 0 || s->ids[t] >= m->c.vocab_size)
                return skpo_err_set(err, SKPO_ERANGE, "sequence %d: token id %d outside the vocabulary (%d)", i,
                                    s->ids[t], m->c.vocab_size);
    }
    return SKPO_OK;
}
