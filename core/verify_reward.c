/*
 * verify_reward.c - the reward of one rollout record: verdict of the chosen
 * verifier, the truncation rule (a response cut at the length limit is wrong
 * unless asked otherwise, SKPO.md Q3) and DAPO's soft overlong penalty
 * (SKPO.md 4.7) added to the +1/-1 (or 1/0) correctness reward.
 */
#include "verify.h"
#include "record.h"

#include <string.h>

void skpo_reward_opts_default(skpo_reward_opts *o) {
    memset(o, 0, sizeof *o);
    skpo_verify_opts_default(&o->verify);
}

double skpo_reward_overlong(const skpo_reward_opts *o, long len) {
    if (o->overlong_max <= 0) return 0;
    long lmax = o->overlong_max, lc = o->overlong_cache;
    if (len <= lmax - lc) return 0;
    if (len <= lmax) return (double)((lmax - lc) - len) / (double)lc;
    return -1;
}

skpo_status skpo_reward_record(const skpo_reward_opts *o, skpo_rec *r, bool *changed, skpo_err *err) {
    *changed = false;
    if (!skpo_rec_is_kind(r, SKPO_KIND_DOWN) && !skpo_rec_is_kind(r, SKPO_KIND_FULL) && !skpo_rec_is_kind(r, SKPO_KIND_SELF))
        return SKPO_OK;
    const char *uid = skpo_rec_str(r, F_UID);
    const skpo_value *text = skpo_rec_get(r, F_TEXT), *answer = skpo_rec_get(r, F_ANSWER);
    if (!uid) uid = "?";
    if (!text || text->type != SKPO_V_STR)
        return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no 'text' to verify", uid);
    if (!answer || answer->type != SKPO_V_STR)
        return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no gold 'answer'", uid);
    double shaping = 0;
    if (o->overlong_max > 0) {
        size_t nt;
        if (!skpo_rec_i32s(r, F_TOKENS, &nt))
            return skpo_err_set(err, SKPO_ENOTFOUND, "rollout '%s' has no 'tokens' for the overlong penalty", uid);
        shaping = skpo_reward_overlong(o, (long)nt);
    }
    skpo_verify_result res;
    skpo_verify(&o->verify, text->data, text->len, answer->data, answer->len, &res);
    bool correct = res.correct;
    const char *finish = skpo_rec_str(r, F_FINISH);
    if (!o->keep_truncated && finish && !strcmp(finish, "length")) correct = false;
    if (res.found || o->verify.mode == SKPO_VERIFIER_DAPO) skpo_rec_set_str(r, F_PRED, res.pred);
    else skpo_rec_del(r, F_PRED);
    skpo_rec_set_bool(r, F_CORRECT, correct);
    double base = correct ? 1.0 : (o->zero_one ? 0.0 : -1.0);
    skpo_rec_set_float(r, F_REWARD, base + shaping);
    *changed = true;
    return SKPO_OK;
}
