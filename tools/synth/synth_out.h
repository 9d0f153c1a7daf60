/*
 * synth_out.h - record output of skpo-synth (--tokenizer): prompt records, or
 * with --sft `full` records carrying the worked solution as response tokens.
 */
#ifndef SKPO_SYNTH_OUT_H
#define SKPO_SYNTH_OUT_H

#include "record/record.h"
#include "synth.h"
#include "tokenizer/tokenizer.h"

typedef struct synth_out {
    skpo_tok *tok;
    skpo_writer *w;
    const char *tmpl;
    int sft;
    long seed;
    double skip;            // --skip: share of SFT records with a skip-connected prompt [s, q]
    uint64_t skip_rng;
    int32_t eos;
} synth_out;

// Load the tokenizer, open stdout as a record stream and write the meta record. Dies on error.
void synth_out_open(synth_out *o, const char *tokdir, const char *tmpl, int sft, long seed, int argc, char **argv);
void synth_out_put(synth_out *o, const char *id, const synth_problem *p, const char *solution);
void synth_out_close(synth_out *o);

#endif
