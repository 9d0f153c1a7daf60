/*
 * verify.c - the verify module's entry points (see verify.h): sanitize,
 * extract, then compare through a choice-letter check, the canonical-string
 * shortcut and the parsed comparison (verify_cmp.c).
 */
#include "verify/verify_impl.h"
#include "base/common.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void skpo_verify_opts_default(skpo_verify_opts *o) {
    o->mode = SKPO_VERIFIER_MATH;
    o->fallback = true;
    o->timeout_s = SKPO_VERIFY_TIMEOUT;
}

bool skpo_verifier_parse(const char *name, skpo_verifier *out) {
    if (!strcmp(name, "math")) *out = SKPO_VERIFIER_MATH;
    else if (!strcmp(name, "boxed")) *out = SKPO_VERIFIER_BOXED;
    else if (!strcmp(name, "dapo")) *out = SKPO_VERIFIER_DAPO;
    else return false;
    return true;
}

static bool parsed_equal(vctx *c, const char *g, size_t gl, const char *p, size_t pl) {
    if (vctx_expired(c)) return false;
    vctx_init(c);
    int gr = vparse(c, g, gl);
    int pr = gr > 0 ? vparse(c, p, pl) : -1;
    return gr > 0 && pr > 0 && vcmp_answers(c, gr, pr);
}

// gold and pred are clean ASCII answers.
static bool answers_equal(vctx *c, const char *g, const char *p) {
    size_t gl = strlen(g), pl = strlen(p);
    if (gl == 0 || pl == 0) return false;
    char gc = vtext_choice(g, gl, true);
    if (gc) {
        char pc = vtext_choice(p, pl, false);
        if (pc) return pc == gc;
    }
    char *a = skpo_xmalloc(gl + 16), *b = skpo_xmalloc(pl + 16);
    vtext_canon(g, gl, a, gl + 16);
    vtext_canon(p, pl, b, pl + 16);
    bool same = a[0] && !strcmp(a, b);
    free(a);
    free(b);
    if (same) return true;
    if (parsed_equal(c, g, gl, p, pl)) return true;
    // second readings of the prediction, tried only after the first fails:
    // "x = 1 \quad x = 3" / "1 and 3" as the list "1, 3"; "2,5" (a comma that
    // is not a thousands separator) as the decimal 2.5
    char *alt = skpo_xmalloc(pl + 1);
    size_t al = 0;
    int depth = 0;
    bool changed = false;
    for (size_t i = 0; i < pl;) {
        if (p[i] == '{') depth++;
        if (p[i] == '}') depth--;
        static const char *const seps[] = {"\\qquad", "\\quad", "\\text{ and }", "\\text{and}", " and ", NULL};
        size_t k = 0;
        for (int s = 0; depth == 0 && seps[s]; s++)
            if (!strncmp(p + i, seps[s], strlen(seps[s]))) { k = strlen(seps[s]); break; }
        if (k) { alt[al++] = ','; i += k; changed = true; continue; }
        alt[al++] = p[i++];
    }
    alt[al] = 0;
    size_t s0 = p[0] == '-' ? 1 : 0, nd1 = 0, nd2 = 0, commas = 0;
    for (size_t i = s0; i < pl; i++) {
        if (p[i] == ',') commas++;
        else if (p[i] >= '0' && p[i] <= '9') { if (commas) nd2++; else nd1++; }
        else { commas = 9; break; }
    }
    if (!changed && commas == 1 && nd1 > 0 && nd2 > 0 && nd2 != 3 && !strchr(g, ',')) {
        memcpy(alt, p, pl + 1);
        *strchr(alt, ',') = '.';
        changed = true;
    }
    bool eq = changed && parsed_equal(c, g, gl, alt, al);
    // "S_1 : S_2 = 1 : 7": a label made of names (digits only in subscripts), then the value; only
    // against a bare gold value (a labelled gold, x = 1, was compared label and all above: y = 1 is wrong)
    if (!eq && !memchr(g, '=', gl)) {
        const char *e = NULL;
        int d = 0;
        for (size_t i = 0; i < pl; i++) {
            if (p[i] == '{') d++;
            else if (p[i] == '}') d--;
            else if (p[i] == '=' && d == 0) e = p + i;
        }
        bool label = e != NULL && e > p, letter = false;
        for (const char *q = p; label && q < e; q++) {
            if (isalpha((unsigned char)*q)) letter = true;
            if (strchr("+-*/^=<>", *q)) label = false;
            if (isdigit((unsigned char)*q) && !(q > p && (q[-1] == '_' || isdigit((unsigned char)q[-1]) ||
                                                         (q > p + 1 && q[-1] == '{' && q[-2] == '_'))))
                label = false;
            if (*q == '\\' && (!strncmp(q, "\\frac", 5) || !strncmp(q, "\\cdot", 5) || !strncmp(q, "\\times", 6) ||
                                !strncmp(q, "\\sqrt", 5)))
                label = false;
        }
        if (label && letter && e[1]) eq = parsed_equal(c, g, gl, e + 1, strlen(e + 1));
    }
    free(alt);
    return eq;
}

static void set_pred(skpo_verify_result *res, const char *p) {
    size_t l = strlen(p);
    if (l >= sizeof res->pred) l = sizeof res->pred - 1;
    memcpy(res->pred, p, l);
    res->pred[l] = 0;
}

void skpo_verify(const skpo_verify_opts *o, const char *response, size_t rlen,
                 const char *gold, size_t glen, skpo_verify_result *res) {
    res->correct = res->found = res->timed_out = false;
    res->pred[0] = 0;
    if (o->mode == SKPO_VERIFIER_DAPO) { skpo_verify_dapo(response, rlen, gold, glen, res); return; }
    size_t tn, gn;
    char *t = vtext_sanitize(response, rlen, &tn);
    char *gs = vtext_sanitize(gold, glen, &gn);
    char *g = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX);
    char *p = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX);
    vgold_clean(gs, gn, g, SKPO_VERIFY_ANSWER_MAX);
    vctx *c = skpo_xmalloc(sizeof *c); // one parse arena per call, reused
    c->deadline = o->timeout_s > 0 ? skpo_now() + o->timeout_s : 0;
    c->expired = false;
    res->found = vextract(c, t, tn, o, p, SKPO_VERIFY_ANSWER_MAX);
    if (res->found) {
        set_pred(res, p);
        res->correct = answers_equal(c, g, p);
    }
    if (vctx_expired(c)) res->timed_out = true, res->correct = false; // no verdict, not a silent "wrong"
    free(t); free(gs); free(g); free(p); free(c);
}

bool skpo_verify_equal(const char *gold, size_t glen, const char *pred, size_t plen) {
    size_t gn, pn;
    char *gs = vtext_sanitize(gold, glen, &gn), *ps = vtext_sanitize(pred, plen, &pn);
    char *g = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX), *p = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX);
    vgold_clean(gs, gn, g, SKPO_VERIFY_ANSWER_MAX);
    vgold_clean(ps, pn, p, SKPO_VERIFY_ANSWER_MAX);
    vctx *c = skpo_xmalloc(sizeof *c);
    c->deadline = skpo_now() + SKPO_VERIFY_TIMEOUT; // maj@k votes compare every pair: bounded too
    c->expired = false;
    bool eq = answers_equal(c, g, p);
    free(gs); free(ps); free(g); free(p); free(c);
    return eq;
}
