/*
 * tracker.h - the per-prompt state of a run: SPO's temporal value baseline
 * V(q), its discounted count N(q), the tracked response length L(q) with its
 * own count NL(q), and the last upstream segment of q (tokens, the log-probs
 * stored for it, the prompt ids needed to rescore it) from which the
 * KL-adaptive forgetting factor rho is computed. docs/algorithm.md sections 3 (step 9),
 * 4.2, 4.3, Q1, Q6.
 *
 * Math (V lives in reward space [-1, 1]):
 *   rho  = clamp(2^(-D / tau), rho_min, rho_max)      (D = 0 on a first visit)
 *   eta  = 1 / (rho N + 1);  V += eta (R - V);  N = rho N + 1
 *   etaL = 1 / (rho NL + 1); L += etaL (ell - L); NL = rho NL + 1
 *   weight(q) = sqrt(p (1 - p)) + eps,  p = (V + 1) / 2  (prioritized sampling)
 * Unseen prompts read V = 0, N = 0, L = len_init, weight = 0.5 + eps.
 *
 * On disk: a state folder DIR holding DIR/state-NNNNNN.msgpack.zst (NNNNNN =
 * the step whose input this is) and DIR/CURRENT, a one-line text file naming
 * the latest complete state file. Both are written atomically (temp, fsync,
 * rename), CURRENT last, so a crash leaves the previous state in force. Saving
 * step n+1 keeps the file of step n and deletes older ones (last two kept), so a
 * failed step re-run from the same CURRENT reads the same input.
 * The file is a record stream (skpo-cat prints it): one `meta` record with
 * `tool`="skpo-tracker", `tracker_version`, `step`, `rho_min`, `rho_max`,
 * `tau`, `eps`, `len_init`; then one `state` record per prompt with
 * pid, V, N, L, NL, visits, last_step, and when known seg_tokens (i32s),
 * seg_logp (f32s), seg_prompt (i32s).
 * An empty or missing folder (no CURRENT) loads as an empty tracker at step 0.
 *
 * Not here: computing D (that needs the model; see tools/advantage) and the
 * advantage formulas (advantage.h).
 */
#ifndef SKPO_TRACKER_H
#define SKPO_TRACKER_H

#include "base/common.h"

#include <stddef.h>
#include <stdint.h>

#define SKPO_TRACKER_VERSION 1

typedef struct skpo_tracker skpo_tracker;

// Hyperparameters stored in the state file (defaults: docs/algorithm.md section 2).
typedef struct skpo_tracker_params {
    double rho_min;  // 0.875
    double rho_max;  // 0.96
    double tau;      // 8.0 (SKPO's printed half-life; SPO's code uses 0.06)
    double eps;      // 0.05, prioritized-sampling floor
    double len_init; // 1024 tokens
} skpo_tracker_params;

void skpo_tracker_params_default(skpo_tracker_params *p);

// --- open / save / free ----------------------------------------------------------

// New empty tracker at step 0 with the given params (NULL = defaults).
skpo_tracker *skpo_tracker_new(const skpo_tracker_params *p);
// Load the state named by DIR/CURRENT; empty tracker (defaults, step 0) if DIR
// or CURRENT does not exist. A malformed or version-mismatched file is an error
// naming it.
skpo_status skpo_tracker_load(const char *state_dir, skpo_tracker **out, skpo_err *err);
// Load the state that is the input of `step` (DIR/state-<step>...), to re-run a
// step. A folder with no CURRENT yields an empty tracker at that step; a
// folder whose files no longer include that step is an error.
skpo_status skpo_tracker_load_step(const char *state_dir, int64_t step, skpo_tracker **out, skpo_err *err);
// Write DIR/state-<step>.msgpack.zst then DIR/CURRENT atomically (DIR created
// if needed); remove state files older than the previous one.
skpo_status skpo_tracker_save(skpo_tracker *t, const char *state_dir, skpo_err *err);
void skpo_tracker_free(skpo_tracker *t);

// --- read ------------------------------------------------------------------------

const skpo_tracker_params *skpo_tracker_get_params(const skpo_tracker *t);
int64_t skpo_tracker_step(const skpo_tracker *t);
size_t skpo_tracker_size(const skpo_tracker *t);          // prompts with state
int skpo_tracker_seen(const skpo_tracker *t, const char *pid);
double skpo_tracker_len(const skpo_tracker *t, const char *pid);    // L_q; len_init unseen
double skpo_tracker_value(const skpo_tracker *t, const char *pid);  // V(q) in [-1,1]; 0 unseen
double skpo_tracker_count(const skpo_tracker *t, const char *pid);  // N(q); 0 unseen
int64_t skpo_tracker_visits(const skpo_tracker *t, const char *pid); // observations so far; 0 unseen
double skpo_tracker_weight(const skpo_tracker *t, const char *pid); // sqrt(p(1-p)) + eps
// The prioritized-sampling weight of a value V: sqrt(p (1 - p)) + eps with
// p = (V + 1) / 2 clamped to [0, 1] (V leaves [-1, 1] under shaped rewards,
// e.g. DAPO's overlong penalty). The one definition the tracker and skpo-sample use.
double skpo_prio_weight(double v, double eps);

// The stored last segment of pid (NULL/0 when unseen or none stored). Pointers
// stay valid until the next update of pid or free.
typedef struct skpo_tracker_seg {
    const int32_t *tokens; size_t ntokens;   // (ntokens)
    const float *logp;                       // (ntokens) log-probs stored for tokens
    const int32_t *prompt; size_t nprompt;   // (nprompt) conditioning ids
} skpo_tracker_seg;
int skpo_tracker_last_seg(const skpo_tracker *t, const char *pid, skpo_tracker_seg *seg);

// --- update ----------------------------------------------------------------------

// rho for divergence D (>= 0): clamp(2^(-D/tau), rho_min, rho_max). *clipped
// (nullable) is set to 1 when the clamp changed the value.
double skpo_tracker_rho(const skpo_tracker *t, double D, int *clipped);

// One observation of pid: reward R (finite, [-1,1] expected), mean length ell
// (finite, >= 0; pass NAN to leave L unchanged) with forgetting factor rho.
// seg (nullable) replaces the stored last segment (arrays are copied).
skpo_status skpo_tracker_update(skpo_tracker *t, const char *pid, double R, double ell, double rho,
                                const skpo_tracker_seg *seg, skpo_err *err);
void skpo_tracker_set_step(skpo_tracker *t, int64_t step);
// Replace the hyperparameters (they are saved with the state).
void skpo_tracker_set_params(skpo_tracker *t, const skpo_tracker_params *p);

#endif
