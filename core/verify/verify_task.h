/*
 * verify_task.h - rewards beyond math: multiple choice (MMLU-Pro) and code
 * generation judged by running the program on tests (LiveCodeBench).
 *
 * choice  skpo_choice_extract finds the letter a response commits to: the last
 *         \boxed{...}, else the last "answer is X" / "Answer: X" statement (the
 *         phrase MMLU-Pro's prompt asks for: "the answer is (X)"), else a
 *         response that opens with the letter ("C. because ...", "(C)"). A
 *         statement naming several letters ("(B) or (C)", "B and C", "A/B",
 *         \boxed{B, C}) is hedged: pred lists them and it is wrong.
 * code    skpo_code_extract takes the program between the last two lines that
 *         hold ``` (LiveCodeBench's extract_code). skpo_code_judge runs each
 *         program on its tests in the sandbox (core/sandbox.h), one sandbox per
 *         program, many at once, stopping at the first failing test as
 *         LiveCodeBench does. Tests (the `tests` field) are LiveCodeBench's
 *         input_output JSON: {"inputs": [...], "outputs": [...], "fn_name": F}.
 *         Without fn_name each test is a stdin/stdout run of the program; with
 *         it, LeetCode style: `Solution().F(*args)` (or a top-level F) with one
 *         JSON argument per input line, the result compared with the expected
 *         JSON under Python's == (tuples as lists, 2 == 2.0). Both get
 *         LiveCodeBench's import prelude. stdout is compared as LiveCodeBench's
 *         grade_stdio does: strip, split into lines, strip each line, the same
 *         number of lines, each line equal as text or else element-wise as
 *         exact decimals (1.50 == 1.5, no tolerance). Expected outputs never
 *         enter the sandbox: the program cannot read them.
 */
#ifndef SKPO_VERIFY_TASK_H
#define SKPO_VERIFY_TASK_H

#include "base/common.h"
#include "verify/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

#define SKPO_CHOICE_MAX 16 // letters A..P

// --- choice ------------------------------------------------------------------------

// Writes the letters the response commits to into pred ("C", or "B,C" when
// hedged; "" when none) and returns how many (0 = no answer).
int skpo_choice_extract(const char *text, size_t len, char *pred, size_t cap);
// Correct iff exactly one letter was extracted and it is gold (a letter).
bool skpo_choice_correct(const char *text, size_t len, const char *gold, char *pred, size_t cap);

// --- code --------------------------------------------------------------------------

typedef struct skpo_code_tests {
    char *fn_name;          // NULL: stdin/stdout problem
    size_t n;
    char **in, **out;       // n inputs / expected outputs (NUL-terminated)
} skpo_code_tests;

skpo_status skpo_code_tests_parse(const char *json, size_t len, skpo_code_tests *t, skpo_err *err);
void skpo_code_tests_free(skpo_code_tests *t);

// The program between the last two lines holding ``` (malloc'd), or NULL.
char *skpo_code_extract(const char *text, size_t len);

// LiveCodeBench's stdout comparison (see above). Exposed for tests.
bool skpo_code_stdout_equal(const char *got, size_t glen, const char *want, size_t wlen);
// Python == of two JSON texts (a functional test's result and its expected value).
bool skpo_code_json_equal(const char *got, size_t glen, const char *want, size_t wlen);

enum { SKPO_JUDGED = 0, SKPO_JUDGE_TIMEOUT, SKPO_JUDGE_ERROR };

typedef struct skpo_code_item {
    const char *code;       // program text (NULL: no code block -> wrong)
    size_t code_len;
    const skpo_code_tests *tests;
    // out
    bool correct;
    int passed;             // tests passed before the first failure (all when correct)
    int status;             // SKPO_JUDGED, or no verdict: SKPO_JUDGE_TIMEOUT (the record's wall bound), SKPO_JUDGE_ERROR
    char reason[200];       // short, valid UTF-8: why it is wrong, or "passed N/N tests"
} skpo_code_item;

typedef struct skpo_code_opts {
    double timeout_s;       // per test, wall and CPU (LiveCodeBench: 6)
    double record_s;        // wall bound of one record (0: LiveCodeBench's (timeout_s + 1) per test + 5 s);
                            // a record that reaches it has no verdict (status SKPO_JUDGE_TIMEOUT)
} skpo_code_opts;

// Judge n programs (in parallel, opts of sb). Fails only when the host cannot
// start processes; every program's own failure is a verdict in its item.
skpo_status skpo_code_judge(skpo_sandbox *sb, const skpo_code_opts *o, skpo_code_item *items, size_t n, skpo_err *err);

#endif
