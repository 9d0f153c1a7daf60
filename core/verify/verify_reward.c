/*
 * verify_reward.c - the reward of one rollout record: verdict of the chosen
 * verifier (math, multiple choice, or code run in the sandbox), the truncation
 * rule (a response cut at the length limit is wrong unless asked otherwise,
 * docs/algorithm.md Q3) and DAPO's soft overlong penalty (docs/algorithm.md 4.7) added to the
 * +1/-1 (or 1/0) correctness reward.
 */
#include "verify/verify.h"
#include "record/record.h"
#include "verify/verify_task.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void skpo_reward_opts_default(skpo_reward_opts *o) {
    memset(o, 0, sizeof *o);
    skpo_verify_opts_default(&o->verify);
    o->code_timeout = 6;
}

double skpo_reward_overlong(const skpo_reward_opts *o, long len) {
    if (o->overlong_max <= 0) return 0;
    long lmax = o->overlong_max, lc = o->overlong_cache;
    if (len <= lmax - lc) return 0;
    if (len <= lmax) return (double)((lmax - lc) - len) / (double)lc;
    return -1;
}

// --- the tasks ------------------------------------------------------------------------
//
// One row per skpo_task: its name (skpo-reward --task, a record's `task`) and
// the judge of one rollout (NULL: auto, which picks a row by the record, and
// code, judged in batches in the sandbox by skpo_reward_code). A new task is a
// row here, its judge, and an enum value in verify.h.

typedef void (*judge_fn)(const skpo_reward_opts *o, skpo_rec *r, const skpo_value *text, double shaping);
static void judge_math(const skpo_reward_opts *o, skpo_rec *r, const skpo_value *text, double shaping);
static void judge_choice(const skpo_reward_opts *o, skpo_rec *r, const skpo_value *text, double shaping);

static const struct task_row {
    const char *name;
    judge_fn judge;
} tasks[] = {
    [SKPO_TASK_AUTO] = {"auto", NULL},
    [SKPO_TASK_MATH] = {"math", judge_math},
    [SKPO_TASK_CHOICE] = {"choice", judge_choice},
    [SKPO_TASK_CODE] = {"code", NULL},
};
enum { NTASKS = sizeof tasks / sizeof *tasks };

static const char *task_name(int t) { return t >= 0 && t < NTASKS ? tasks[t].name : NULL; }
// The names a record's `task` may hold: every task but auto.
static const char *record_task_name(int t) { return t == SKPO_TASK_AUTO ? NULL : task_name(t); }
const skpo_enum skpo_reward_tasks = {NTASKS, task_name};
static const skpo_enum record_tasks = {NTASKS, record_task_name};

// A `self` record (the kept candidate's own whole generation, REWARD_UP=self)
// answers the same problem as the down records: judged by the same task.
skpo_task skpo_reward_task(const skpo_reward_opts *o, const skpo_rec *r) {
    if (!skpo_rec_is_rollout(r)) return SKPO_TASK_MATH;
    if (o->task != SKPO_TASK_AUTO) return o->task;
    int t = skpo_enum_parse(&record_tasks, skpo_rec_str(r, F_TASK));
    return t > SKPO_TASK_AUTO ? (skpo_task)t : SKPO_TASK_MATH;
}

// Checks shared by every task; the overlong shaping term.
static skpo_status prologue(const skpo_reward_opts *o, const skpo_rec *r, bool need_answer, const skpo_value **text,
                            double *shaping, skpo_err *err) {
    const char *uid = skpo_rec_str(r, F_UID);
    const skpo_value *answer = skpo_rec_get(r, F_ANSWER);
    if (!uid) uid = "?";
    *text = skpo_rec_get(r, F_TEXT);
    if (!*text || (*text)->type != SKPO_V_STR)
        return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no 'text' to verify", uid);
    if (need_answer && (!answer || answer->type != SKPO_V_STR))
        return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no gold 'answer'", uid);
    // a blank gold would score every response wrong, silently
    bool blank = true;
    for (size_t i = 0; need_answer && i < answer->len && blank; i++) blank = isspace((unsigned char)answer->data[i]);
    if (need_answer && blank) return skpo_err_set(err, SKPO_EFORMAT, "rollout '%s': the gold 'answer' is blank", uid);
    // values the judge does not know would be read as the default (math, stopped): say so instead
    const char *task = skpo_rec_str(r, F_TASK), *fin = skpo_rec_str(r, F_FINISH);
    if (o->task == SKPO_TASK_AUTO && task && skpo_enum_parse(&record_tasks, task) < 0) {
        char names[128];
        return skpo_err_set(err, SKPO_EFORMAT, "rollout '%s': task '%.40s' is not %s", uid, task,
                            skpo_enum_list(&record_tasks, ", ", " or ", names, sizeof names));
    }
    if (fin && strcmp(fin, "stop") && strcmp(fin, "length"))
        return skpo_err_set(err, SKPO_EFORMAT, "rollout '%s': finish '%.40s' is not stop or length", uid, fin);
    *shaping = 0;
    if (o->overlong_max > 0) {
        size_t nt;
        if (!skpo_rec_i32s(r, F_TOKENS, &nt))
            return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no 'tokens' for the overlong penalty", uid);
        *shaping = skpo_reward_overlong(o, (long)nt);
    }
    return SKPO_OK;
}

// status: SKPO_JUDGED, or why there is no verdict (then correct is false and
// the record says so in reward_status, for skpo-advantage and skpo-eval to count).
static void set_verdict(const skpo_reward_opts *o, skpo_rec *r, bool correct, double shaping, int status) {
    const char *finish = skpo_rec_str(r, F_FINISH);
    if (status == SKPO_JUDGE_TIMEOUT) skpo_rec_set_str(r, F_REWARD_STATUS, "timeout");
    else if (status == SKPO_JUDGE_ERROR) skpo_rec_set_str(r, F_REWARD_STATUS, "error");
    else skpo_rec_del(r, F_REWARD_STATUS);
    if (!o->keep_truncated && finish && !strcmp(finish, "length")) {
        if (correct && skpo_rec_get(r, F_REASON)) skpo_rec_set_str(r, F_REASON, "cut at the length limit");
        correct = false;
    }
    skpo_rec_set_bool(r, F_CORRECT, correct);
    double base = correct ? 1.0 : (o->zero_one ? 0.0 : -1.0);
    skpo_rec_set_float(r, F_REWARD, base + shaping);
}

static void judge_choice(const skpo_reward_opts *o, skpo_rec *r, const skpo_value *text, double shaping) {
    const skpo_value *answer = skpo_rec_get(r, F_ANSWER);
    char pred[2 * SKPO_CHOICE_MAX + 1];
    bool ok = skpo_choice_correct(text->data, text->len, answer->data, pred, sizeof pred);
    if (pred[0]) skpo_rec_set_str(r, F_PRED, pred);
    else skpo_rec_del(r, F_PRED);
    skpo_rec_set_str(r, F_REASON, ok ? "chose the gold letter" : !pred[0] ? "no answer letter found"
                                  : strchr(pred, ',') ? "hedged: several letters" : "chose another letter");
    set_verdict(o, r, ok, shaping, SKPO_JUDGED);
}

static void judge_math(const skpo_reward_opts *o, skpo_rec *r, const skpo_value *text, double shaping) {
    const skpo_value *answer = skpo_rec_get(r, F_ANSWER);
    skpo_verify_result res;
    skpo_verify(&o->verify, text->data, text->len, answer->data, answer->len, &res);
    if (res.found || o->verify.mode == SKPO_VERIFIER_DAPO) skpo_rec_set_str(r, F_PRED, res.pred);
    else skpo_rec_del(r, F_PRED);
    if (res.timed_out) {
        char why[96];
        snprintf(why, sizeof why, "verifier timed out after %g s (--math-timeout)", o->verify.timeout_s);
        skpo_rec_set_str(r, F_REASON, why);
    }
    set_verdict(o, r, res.correct, shaping, res.timed_out ? SKPO_JUDGE_TIMEOUT : SKPO_JUDGED);
}

skpo_status skpo_reward_record(const skpo_reward_opts *o, skpo_rec *r, bool *changed, skpo_err *err) {
    *changed = false;
    if (!skpo_rec_is_rollout(r)) return SKPO_OK;
    judge_fn judge = tasks[skpo_reward_task(o, r)].judge;
    if (!judge) return SKPO_OK;   // code: skpo_reward_code
    const skpo_value *text;
    double shaping;
    skpo_status st = prologue(o, r, true, &text, &shaping, err);
    if (st != SKPO_OK) return st;
    judge(o, r, text, shaping);
    *changed = true;
    return SKPO_OK;
}

skpo_status skpo_reward_code(const skpo_reward_opts *o, struct skpo_sandbox *sb, skpo_rec *recs, size_t n, skpo_err *err) {
    skpo_code_item *items = skpo_xcalloc(n ? n : 1, sizeof *items);
    skpo_code_tests *tests = skpo_xcalloc(n ? n : 1, sizeof *tests);
    size_t *idx = skpo_xcalloc(n ? n : 1, sizeof *idx), m = 0;
    double *shaping = skpo_xcalloc(n ? n : 1, sizeof *shaping);
    char **codes = skpo_xcalloc(n ? n : 1, sizeof *codes);
    skpo_status st = SKPO_OK;
    for (size_t i = 0; i < n && st == SKPO_OK; i++) {
        skpo_rec *r = &recs[i];
        if (skpo_reward_task(o, r) != SKPO_TASK_CODE) continue;
        const skpo_value *text;
        if ((st = prologue(o, r, false, &text, &shaping[m], err)) != SKPO_OK) break;
        const char *uid = skpo_rec_str(r, F_UID) ? skpo_rec_str(r, F_UID) : "?";
        const skpo_value *tv = skpo_rec_get(r, F_TESTS);
        if (!tv || tv->type != SKPO_V_STR) {
            st = skpo_err_set(err, SKPO_ENOTFOUND, "code rollout '%s' has no 'tests' (prepare LiveCodeBench rows with skpo-prep)", uid);
            break;
        }
        skpo_err e = {{0}};
        if (skpo_code_tests_parse(tv->data, tv->len, &tests[m], &e) != SKPO_OK) {
            st = skpo_err_set(err, SKPO_EFORMAT, "code rollout '%s': %s", uid, e.msg);
            break;
        }
        codes[m] = skpo_code_extract(text->data, text->len);
        items[m] = (skpo_code_item){.code = codes[m], .code_len = codes[m] ? strlen(codes[m]) : 0, .tests = &tests[m]};
        idx[m++] = i;
    }
    skpo_code_opts co = {.timeout_s = o->code_timeout > 0 ? o->code_timeout : 6, .record_s = o->code_record};
    if (st == SKPO_OK && m) st = skpo_code_judge(sb, &co, items, m, err);
    for (size_t k = 0; k < m; k++) {
        if (st == SKPO_OK) {
            skpo_rec *r = &recs[idx[k]];
            if (codes[k] && skpo_utf8_valid(codes[k], strlen(codes[k]))) skpo_rec_set_str(r, F_PRED, codes[k]);
            else skpo_rec_del(r, F_PRED);
            skpo_rec_set_str(r, F_REASON, items[k].reason);
            skpo_rec_set_int(r, F_TESTS_PASSED, items[k].passed);
            set_verdict(o, r, items[k].correct, shaping[k], items[k].status);
        }
        skpo_code_tests_free(&tests[k]);
        free(codes[k]);
    }
    // tests parsed for a record that failed the checks above
    if (st != SKPO_OK && m < n) skpo_code_tests_free(&tests[m]);
    free(items), free(tests), free(idx), free(shaping), free(codes);
    return st;
}
