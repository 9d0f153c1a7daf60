/*
 * verify.h - math answer verification: the reward signal of RLVR.
 *
 * Given a model response and a gold answer, decide whether the response's final
 * answer equals the gold. Three verifiers:
 *
 *   math   extraction (last \boxed{}/\fbox{} with hedging detection, the last
 *          "Answer:" line / "answer is" phrase / "####" line, then optionally the
 *          last math segment or number), LaTeX normalisation, and a mathematical
 *          comparison: exact rationals of any size (GMP) for numbers, 256-bit
 *          real evaluation (MPFR) for irrational values, rational functions
 *          compared exactly (FLINT fmpq_mpoly), other symbolic expressions at
 *          deterministic random points, tuples and
 *          intervals (order and brackets matter), sets and answer lists (order
 *          does not), equations, inequalities, matrices, text and choice letters.
 *          The conventions are those of tests/fixtures/verify/cases.jsonl (see
 *          docs/reward.md): a decimal approximation of an exact value is wrong,
 *          a rounded decimal gold accepts the exact value it rounds from.
 *   boxed  the same comparison, but only a \boxed{}/\fbox{} answer counts.
 *   dapo   verl's math_dapo.compute_score reproduced byte for byte: last 300
 *          chars, last "Answer:" match, normalize_final_answer, exact string
 *          equality (docs/algorithm.md section 5).
 *
 * Work is bounded: inputs are scanned linearly, an extracted answer is capped at
 * SKPO_VERIFY_ANSWER_MAX bytes, expression trees at a fixed node count and
 * depth, exact and high-precision arithmetic at fixed sizes; anything over a
 * cap is "no answer" or "not equal" (false), never a crash or a hang. On top,
 * a wall-clock bound per call (timeout_s, default 2 s): the comparison checks
 * it before every sub-comparison and parse (each of those is bounded by the
 * caps), and when it has passed the call stops with timed_out set, which the
 * reward stage counts (reward_status "timeout") instead of a silent wrong
 * verdict. tests/unit/test_verify_bound.c fuzzes pathological expressions.
 * Invalid UTF-8, NUL bytes and unknown characters are treated as garbage text.
 * The module holds no global state and is safe to call from many threads.
 */
#ifndef SKPO_VERIFY_H
#define SKPO_VERIFY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/cli.h"
#include "base/common.h"

#define SKPO_VERIFY_PRED_MAX 2048    // bytes of `pred` kept (NUL included)
#define SKPO_VERIFY_ANSWER_MAX 4096  // longest extracted answer parsed

typedef enum skpo_verifier {
    SKPO_VERIFIER_MATH = 0,
    SKPO_VERIFIER_BOXED,
    SKPO_VERIFIER_DAPO,
} skpo_verifier;

typedef struct skpo_verify_opts {
    skpo_verifier mode;
    // math mode: when neither a box nor an answer phrase is found, use the
    // whole response if it is a bare answer, else the last math segment or
    // number, whichever comes last (default on).
    bool fallback;
    // math and boxed: wall-clock bound of one call in seconds (0 = none;
    // default SKPO_VERIFY_TIMEOUT). Past it the call returns timed_out.
    double timeout_s;
} skpo_verify_opts;

#define SKPO_VERIFY_TIMEOUT 2.0

typedef struct skpo_verify_result {
    bool correct;
    bool found;                      // an answer was extracted
    bool timed_out;                  // stopped at timeout_s: correct is false, but no verdict
    char pred[SKPO_VERIFY_PRED_MAX]; // the extracted answer (ASCII, truncated),
                                     // "" if none; dapo: "[INVALID]" if none
} skpo_verify_result;

// --- verify ------------------------------------------------------------------

void skpo_verify_opts_default(skpo_verify_opts *o);
// Parse "math" | "boxed" | "dapo"; returns false on an unknown name.
bool skpo_verifier_parse(const char *name, skpo_verifier *out);

// Judge one response against one gold answer. Lengths are explicit: both
// buffers may hold NUL bytes and invalid UTF-8. An empty gold never matches.
void skpo_verify(const skpo_verify_opts *o, const char *response, size_t rlen,
                 const char *gold, size_t glen, skpo_verify_result *res);

// Compare two bare answers (no extraction): is `pred` equal to `gold`? Bounded
// by SKPO_VERIFY_TIMEOUT: past it, "not equal".
bool skpo_verify_equal(const char *gold, size_t glen, const char *pred, size_t plen);

// --- dapo (verl math_dapo) ----------------------------------------------------

// normalize_final_answer of verl's math_dapo into out (NUL-terminated,
// truncated to cap). Exposed for the fixture test.
void skpo_verify_dapo_normalize(const char *s, size_t len, char *out, size_t cap);

// --- reward stage (skpo-reward) --------------------------------------------------

typedef struct skpo_rec skpo_rec;

// Which judge a rollout gets: auto = its `task` field (choice, code; absent or
// anything else: math, the verifier above).
typedef enum skpo_task { SKPO_TASK_AUTO = 0, SKPO_TASK_MATH, SKPO_TASK_CHOICE, SKPO_TASK_CODE } skpo_task;
// The tasks' names, indexed by skpo_task (base/cli.h table; one row per task in
// verify_reward.c): "auto" "math" "choice" "code" (skpo-reward --task).
extern const skpo_enum skpo_reward_tasks;

typedef struct skpo_reward_opts {
    skpo_verify_opts verify;
    skpo_task task;
    double code_timeout;   // code: seconds per test (LiveCodeBench: 6)
    double code_record;    // code: wall seconds per record (0: (code_timeout + 1) per test + 5 s)
    bool zero_one;         // rewards 1/0 instead of +1/-1
    long overlong_max;     // DAPO soft overlong penalty on len(tokens): L_max (0 = off)
    long overlong_cache;   //   and L_cache (docs/algorithm.md 4.7)
    bool keep_truncated;   // finish == "length": keep the verdict (default: wrong, docs/algorithm.md Q3)
} skpo_reward_opts;

void skpo_reward_opts_default(skpo_reward_opts *o);
// DAPO's R_len(y) for a response of len tokens (0 when off).
double skpo_reward_overlong(const skpo_reward_opts *o, long len);
// If r is a finished rollout (kind down/full), verify its `text` against its
// `answer` and set `pred` (omitted when no answer was found), `correct` and
// `reward`; other records are left alone. Sets *changed. A rollout without
// `text` or `answer` (or without `tokens` under the overlong penalty) is an
// error naming its uid.
// Code rollouts need the sandbox: skpo_reward_record leaves them alone (with
// *changed false) and skpo_reward_code judges a batch of records in parallel,
// setting `pred` (the program), `correct`, `reward`, `reason` and
// `tests_passed` on each code rollout among them. A code rollout without
// `tests` (or with malformed tests) is an error naming its uid.
skpo_status skpo_reward_record(const skpo_reward_opts *o, skpo_rec *r, bool *changed, skpo_err *err);
// The task r is judged under (SKPO_TASK_MATH for records that are not rollouts).
skpo_task skpo_reward_task(const skpo_reward_opts *o, const skpo_rec *r);
struct skpo_sandbox;
skpo_status skpo_reward_code(const skpo_reward_opts *o, struct skpo_sandbox *sb, skpo_rec *recs, size_t n, skpo_err *err);

// --- verifier case files (tests/fixtures/verify/cases.jsonl) -------------------

// One line of a case file: {"id", "gold", "response", "expect", "kind", ...}.
// Strings are decoded from JSON; a lone UTF-16 surrogate escape is kept as its
// 3-byte (invalid UTF-8) encoding so hostile cases stay hostile.
typedef struct skpo_verify_case {
    char *id, *gold, *response, *kind;
    char *pred;        // "pred" (expected extracted answer, dapo fixtures), NULL if absent
    size_t glen, rlen;
    bool expect;
} skpo_verify_case;

// Load every case of a JSON-lines file. Returns 0 on success; on failure
// writes a message naming the file and line into err (size errlen).
int skpo_verify_cases_load(const char *path, skpo_verify_case **cases, size_t *n, char *err, size_t errlen);
void skpo_verify_cases_free(skpo_verify_case *cases, size_t n);

#endif
