/*
 * verify_dapo.c - verl's math_dapo.compute_score, ported for paper
 * reproduction (docs/algorithm.md section 5). Default (non-strict) mode only:
 *
 *   1. keep the last 300 characters (code points) of the response;
 *   2. findall (?i)Answer\s*:\s*([^\n]+), take the last match, else "[INVALID]";
 *   3. normalize_final_answer on prediction and gold (split on "=", literal
 *      substitutions and removals in order, the regex rewrites, "$" removal,
 *      comma removal for digit strings, strip);
 *   4. correct iff the two strings are equal.
 *
 * Python semantics matter and are reproduced: strings are sequences of code
 * points (invalid UTF-8 bytes decode to U+FFFD each), "." does not match a
 * newline, \s and str.strip() use Unicode whitespace, str.isdigit() accepts
 * every Unicode digit, and (?i) lets U+017F match "s". The fixture test
 * (tests/unit/test_verify_dapo.c) checks this file against a Python port.
 */
#include "verify/verify_impl.h"
#include "base/common.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct ustr { uint32_t *v; size_t n, cap; } ustr;

static void us_push(ustr *s, uint32_t c) {
    if (s->n + 1 > s->cap) skpo_xgrow((void **)&s->v, &s->cap, s->n + 1, sizeof(uint32_t));
    s->v[s->n++] = c;
}

static void us_decode(ustr *s, const char *b, size_t len) {
    const unsigned char *u = (const unsigned char *)b;
    for (size_t i = 0; i < len;) {
        unsigned c = u[i];
        size_t k = 0; uint32_t v = 0, min = 0;
        if (c < 0x80) { us_push(s, c); i++; continue; }
        if (c >= 0xC2 && c < 0xE0) { k = 2; v = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c < 0xF0) { k = 3; v = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c < 0xF5) { k = 4; v = c & 0x07; min = 0x10000; }
        bool ok = k > 0 && i + k <= len;
        for (size_t j = 1; ok && j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) ok = false;
            else v = (v << 6) | (u[i + j] & 0x3F);
        }
        if (ok && (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))) ok = false;
        if (!ok) { us_push(s, 0xFFFD); i++; continue; }
        us_push(s, v);
        i += k;
    }
}

static size_t us_encode(const ustr *s, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < s->n; i++) {
        utf8proc_uint8_t b[4];
        size_t k = (size_t)utf8proc_encode_char((utf8proc_int32_t)s->v[i], b); // v holds code points < 0x110000
        if (o + k + 1 > cap) break;
        memcpy(out + o, b, k);
        o += k;
    }
    out[o] = 0;
    return o;
}

static bool at(const ustr *s, size_t i, const char *lit) {
    size_t k = strlen(lit);
    if (i + k > s->n) return false;
    for (size_t j = 0; j < k; j++) if (s->v[i + j] != (unsigned char)lit[j]) return false;
    return true;
}

// str.replace(before, after): non-overlapping, left to right.
static void us_replace(ustr *s, const char *before, const char *after) {
    size_t k = strlen(before), ka = strlen(after);
    ustr o = {0};
    for (size_t i = 0; i < s->n;) {
        if (at(s, i, before)) {
            for (size_t j = 0; j < ka; j++) us_push(&o, (unsigned char)after[j]);
            i += k;
        } else us_push(&o, s->v[i++]);
    }
    free(s->v);
    *s = o;
}

static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Code point ranges where Python's str.isdigit() is true (generated from CPython 3.11).
static const uint32_t DIGITS[][2] = {
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xBE6, 0xBEF},
    {0xC66, 0xC6F}, {0xCE6, 0xCEF}, {0xD66, 0xD6F}, {0xDE6, 0xDEF}, {0xE50, 0xE59}, {0xED0, 0xED9},
    {0xF20, 0xF29}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x1371}, {0x17E0, 0x17E9}, {0x1810,
    0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50,
    0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070}, {0x2074,
    0x2079}, {0x2080, 0x2089}, {0x2460, 0x2468}, {0x2474, 0x247C}, {0x2488, 0x2490}, {0x24EA,
    0x24EA}, {0x24F5, 0x24FD}, {0x24FF, 0x24FF}, {0x2776, 0x277E}, {0x2780, 0x2788}, {0x278A,
    0x2792}, {0xA620, 0xA629}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9}, {0xA9F0,
    0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x104A0, 0x104A9}, {0x10A40,
    0x10A43}, {0x10D30, 0x10D39}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x11066, 0x1106F},
    {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x112F0, 0x112F9}, {0x11450,
    0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x11739},
    {0x118E0, 0x118E9}, {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59}, {0x11DA0,
    0x11DA9}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E950, 0x1E959}, {0x1F100, 0x1F10A}, {0x1FBF0,
    0x1FBF9}
};

static bool py_digit(uint32_t c) {
    for (size_t i = 0; i < sizeof DIGITS / sizeof DIGITS[0]; i++)
        if (c >= DIGITS[i][0] && c <= DIGITS[i][1]) return true;
    return false;
}

// --- normalize_final_answer -----------------------------------------------------------

static const char *const SUBS[][2] = {
    {"an ", ""}, {"a ", ""}, {".$", "$"}, {"\\$", ""}, {"\\ ", ""}, {" ", ""}, {"mbox", "text"},
    {",\\text{and}", ","}, {"\\text{and}", ","}, {"\\text{m}", "\\text{}"},
};
static const char *const REMOVED[] = {
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
    ",\\!", "{,}", "\"", "\\dots",
};

// re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\3$"): per line with two '$', keep "$between$".
static void sub_dollars(ustr *s) {
    ustr o = {0};
    for (size_t i = 0; i < s->n;) {
        size_t e = i;
        while (e < s->n && s->v[e] != '\n') e++;
        size_t d1 = i, d2;
        while (d1 < e && s->v[d1] != '$') d1++;
        d2 = d1 < e ? d1 + 1 : e;
        while (d2 < e && s->v[d2] != '$') d2++;
        if (d1 < e && d2 < e) {
            us_push(&o, '$');
            for (size_t k = d1 + 1; k < d2; k++) us_push(&o, s->v[k]);
            us_push(&o, '$');
        } else for (size_t k = i; k < e; k++) us_push(&o, s->v[k]);
        if (e < s->n) us_push(&o, '\n');
        i = e + 1;
    }
    free(s->v);
    *s = o;
}

// re.sub(r"(\\cmd\{)(.*?)(\})", "\2") or, greedy, (.*) for \boxed.
static void sub_unwrap(ustr *s, const char *open, bool greedy) {
    size_t k = strlen(open);
    ustr o = {0};
    for (size_t i = 0; i < s->n;) {
        if (at(s, i, open)) {
            size_t close = 0, j = i + k;
            bool found = false;
            for (; j < s->n && s->v[j] != '\n'; j++)
                if (s->v[j] == '}') { close = j; found = true; if (!greedy) break; }
            if (found) {
                for (size_t m = i + k; m < close; m++) us_push(&o, s->v[m]);
                i = close + 1;
                continue;
            }
        }
        us_push(&o, s->v[i++]);
    }
    free(s->v);
    *s = o;
}

// re.sub(r"(frac)([^{])(.)", "frac{\2}{\3}") and re.sub(r"(sqrt)([^{])", "sqrt{\2}").
static void sub_short(ustr *s, const char *name, int nargs) {
    ustr o = {0};
    for (size_t i = 0; i < s->n;) {
        if (at(s, i, name) && i + 4 + (size_t)nargs <= s->n && s->v[i + 4] != '{' &&
            (nargs == 1 || s->v[i + 5] != '\n')) {
            for (int j = 0; j < 4; j++) us_push(&o, (unsigned char)name[j]);
            for (int a = 0; a < nargs; a++) { us_push(&o, '{'); us_push(&o, s->v[i + 4 + a]); us_push(&o, '}'); }
            i += 4 + (size_t)nargs;
            continue;
        }
        us_push(&o, s->v[i++]);
    }
    free(s->v);
    *s = o;
}

static void normalize(ustr *s) {
    size_t eq = s->n;
    for (size_t i = 0; i < s->n; i++) if (s->v[i] == '=') eq = i;
    if (eq < s->n) {
        if (s->n - eq - 1 > 0) memmove(s->v, s->v + eq + 1, (s->n - eq - 1) * sizeof(uint32_t));
        s->n -= eq + 1;
    }
    for (size_t i = 0; i < sizeof SUBS / sizeof SUBS[0]; i++) us_replace(s, SUBS[i][0], SUBS[i][1]);
    for (size_t i = 0; i < sizeof REMOVED / sizeof REMOVED[0]; i++) us_replace(s, REMOVED[i], "");
    sub_dollars(s);
    sub_unwrap(s, "\\text{", false);
    sub_unwrap(s, "\\textbf{", false);
    sub_unwrap(s, "\\overline{", false);
    sub_unwrap(s, "\\boxed{", true);
    sub_short(s, "frac", 2);
    sub_short(s, "sqrt", 1);
    us_replace(s, "$", "");
    bool digits = true;
    size_t nd = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i] == ',') continue;
        nd++;
        if (!py_digit(s->v[i])) digits = false;
    }
    if (digits && nd > 0) us_replace(s, ",", "");
    size_t a = 0, b = s->n;
    while (a < b && py_space(s->v[a])) a++;
    while (b > a && py_space(s->v[b - 1])) b--;
    if (b > a) memmove(s->v, s->v + a, (b - a) * sizeof(uint32_t));
    s->n = b - a;
}

void skpo_verify_dapo_normalize(const char *str, size_t len, char *out, size_t cap) {
    ustr s = {0};
    us_decode(&s, str, len);
    normalize(&s);
    us_encode(&s, out, cap);
    free(s.v);
}

// --- answer extraction -------------------------------------------------------------------

static bool ci_answer(const ustr *s, size_t i) {
    static const char w[] = "answer";
    if (i + 6 > s->n) return false;
    for (int k = 0; k < 6; k++) {
        uint32_t c = s->v[i + k];
        if (c < 128 && c >= 'A' && c <= 'Z') c += 32;
        if (c == 0x17F && w[k] == 's') continue;
        if (c != (unsigned char)w[k]) return false;
    }
    return true;
}

// One match of (?i)Answer\s*:\s*([^\n]+) at i: sets the group range and the end.
static bool match_at(const ustr *s, size_t i, size_t *gs, size_t *ge) {
    if (!ci_answer(s, i)) return false;
    size_t j = i + 6;
    while (j < s->n && py_space(s->v[j])) j++;
    if (j >= s->n || s->v[j] != ':') return false;
    size_t c = ++j;
    while (j < s->n && py_space(s->v[j])) j++;
    // backtrack \s* until [^\n]+ can match at least one character
    while (j > c && (j >= s->n || s->v[j] == '\n')) j--;
    if (j >= s->n || s->v[j] == '\n') return false;
    size_t e = j;
    while (e < s->n && s->v[e] != '\n') e++;
    *gs = j; *ge = e;
    return true;
}

void skpo_verify_dapo(const char *resp, size_t rlen, const char *gold, size_t glen, skpo_verify_result *res) {
    ustr s = {0}, g = {0}, p = {0};
    us_decode(&s, resp, rlen);
    size_t st = s.n > 300 ? s.n - 300 : 0;
    size_t gs = 0, ge = 0;
    bool found = false;
    for (size_t i = st; i < s.n;) {
        size_t a, b;
        if (match_at(&s, i, &a, &b)) { gs = a; ge = b; found = true; i = b; }
        else i++;
    }
    if (found) for (size_t i = gs; i < ge; i++) us_push(&p, s.v[i]);
    else for (const char *q = "[INVALID]"; *q; q++) us_push(&p, (unsigned char)*q);
    normalize(&p);
    us_decode(&g, gold, glen);
    normalize(&g);
    res->found = found;
    // DAPO compares the normalised strings with ==, so an empty gold would reward
    // any answer that normalises to nothing ("x="): a row without an answer
    // rewards nothing here. A gold that only normalises to nothing ("\\ldots")
    // keeps DAPO's verdict, as the reference port's fixtures pin.
    res->correct = glen > 0 && p.n == g.n && (p.n == 0 || !memcmp(p.v, g.v, p.n * sizeof(uint32_t)));
    us_encode(&p, res->pred, sizeof res->pred);
    free(s.v); free(g.v); free(p.v);
}
