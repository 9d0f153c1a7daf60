/*
 * verify_text.c - byte-level text handling for the verifier: UTF-8 to an ASCII
 * LaTeX-ish string (unicode math symbols mapped, garbage neutralised), the
 * canonical string used for the string-equality shortcut, and choice letters.
 * Deliberately not a parser: everything here is one linear pass.
 */
#include "verify/verify_impl.h"
#include "base/common.h"

#include <ctype.h>
#include <string.h>

// --- UTF-8 -> ASCII ---------------------------------------------------------------

typedef struct umap { uint32_t cp; const char *s; } umap;

// Sorted by code point (binary search). "" means: drop the character.
static const umap MAP[] = {
    {0x00A0, " "}, {0x00AD, ""}, {0x00B0, "^\\circ "}, {0x00B1, "\\pm "}, {0x00B2, "^2"},
    {0x00B3, "^3"}, {0x00B7, "\\cdot "}, {0x00B9, "^1"}, {0x00BC, "\\frac{1}{4}"},
    {0x00BD, "\\frac{1}{2}"}, {0x00BE, "\\frac{3}{4}"}, {0x00D7, "\\times "}, {0x00F7, "\\div "},
    {0x0391, "A"}, {0x0392, "B"}, {0x0393, "\\Gamma "}, {0x0394, "\\Delta "}, {0x0398, "\\Theta "},
    {0x039B, "\\Lambda "}, {0x03A0, "\\Pi "}, {0x03A3, "\\Sigma "}, {0x03A6, "\\Phi "}, {0x03A9, "\\Omega "},
    {0x03B1, "\\alpha "}, {0x03B2, "\\beta "}, {0x03B3, "\\gamma "}, {0x03B4, "\\delta "},
    {0x03B5, "\\epsilon "}, {0x03B6, "\\zeta "}, {0x03B7, "\\eta "}, {0x03B8, "\\theta "},
    {0x03B9, "\\iota "}, {0x03BA, "\\kappa "}, {0x03BB, "\\lambda "}, {0x03BC, "\\mu "},
    {0x03BD, "\\nu "}, {0x03BE, "\\xi "}, {0x03C0, "\\pi "}, {0x03C1, "\\rho "}, {0x03C3, "\\sigma "},
    {0x03C4, "\\tau "}, {0x03C5, "\\upsilon "}, {0x03C6, "\\phi "}, {0x03C7, "\\chi "},
    {0x03C8, "\\psi "}, {0x03C9, "\\omega "},
    {0x200B, ""}, {0x200C, ""}, {0x200D, ""}, {0x200E, ""}, {0x200F, ""},
    {0x2010, "-"}, {0x2011, "-"}, {0x2012, "-"}, {0x2013, "-"}, {0x2014, "-"},
    {0x2026, "\\ldots "}, {0x202A, ""}, {0x202B, ""}, {0x202C, ""}, {0x202D, ""}, {0x202E, ""},
    {0x2032, "'"}, {0x2060, ""}, {0x2061, ""}, {0x2062, ""}, {0x2063, ""}, {0x2064, ""},
    {0x2066, ""}, {0x2067, ""}, {0x2068, ""}, {0x2069, ""},
    {0x2102, "\\mathbb{C}"}, {0x2115, "\\mathbb{N}"}, {0x211A, "\\mathbb{Q}"}, {0x211D, "\\mathbb{R}"},
    {0x2124, "\\mathbb{Z}"},
    {0x2153, "\\frac{1}{3}"}, {0x2154, "\\frac{2}{3}"}, {0x2155, "\\frac{1}{5}"}, {0x2156, "\\frac{2}{5}"},
    {0x2157, "\\frac{3}{5}"}, {0x2158, "\\frac{4}{5}"}, {0x2159, "\\frac{1}{6}"}, {0x215A, "\\frac{5}{6}"},
    {0x215B, "\\frac{1}{8}"}, {0x215C, "\\frac{3}{8}"}, {0x215D, "\\frac{5}{8}"}, {0x215E, "\\frac{7}{8}"},
    {0x2205, "\\emptyset "}, {0x2208, "\\in "}, {0x2212, "-"}, {0x2213, "\\mp "}, {0x2215, "/"},
    {0x2217, "*"}, {0x221A, "\\sqrt "}, {0x221E, "\\infty "}, {0x2223, "|"}, {0x2227, " and "},
    {0x2228, " or "}, {0x2229, "\\cap "}, {0x222A, "\\cup "}, {0x2236, ":"}, {0x2248, "\\approx "},
    {0x2260, "\\ne "}, {0x2264, "\\le "}, {0x2265, "\\ge "}, {0x22C5, "\\cdot "},
    {0x2300, "\\varnothing "}, {0x2E31, "\\cdot "}, {0xFE62, "+"}, {0xFE63, "-"}, {0xFEFF, ""},
    {0xFF05, "%"}, {0xFF08, "("}, {0xFF09, ")"}, {0xFF0B, "+"}, {0xFF0C, ","}, {0xFF0D, "-"},
    {0xFF0E, "."}, {0xFF0F, "/"}, {0xFF1A, ":"}, {0xFF1D, "="},
};

static const char *map_cp(uint32_t cp, char tmp[4]) {
    if (cp >= 0xFF10 && cp <= 0xFF19) { tmp[0] = (char)('0' + cp - 0xFF10); tmp[1] = 0; return tmp; }
    if (cp >= 0xFF21 && cp <= 0xFF3A) { tmp[0] = (char)('A' + cp - 0xFF21); tmp[1] = 0; return tmp; }
    if (cp >= 0xFF41 && cp <= 0xFF5A) { tmp[0] = (char)('a' + cp - 0xFF41); tmp[1] = 0; return tmp; }
    static const uint32_t zeros[] = {0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6};
    for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++)
        if (cp >= zeros[i] && cp <= zeros[i] + 9) { tmp[0] = (char)('0' + cp - zeros[i]); tmp[1] = 0; return tmp; }
    if ((cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F || cp == 0x3000) return " ";
    size_t lo = 0, hi = sizeof MAP / sizeof MAP[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (MAP[mid].cp == cp) return MAP[mid].s;
        if (MAP[mid].cp < cp) lo = mid + 1; else hi = mid;
    }
    return " ";
}

// Decode one UTF-8 sequence at s (n bytes left). Returns its length, 0 if invalid.
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t len; uint32_t v, min;
    if (c < 0xC2) return 0;
    if (c < 0xE0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c < 0xF0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c < 0xF5) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

char *vtext_sanitize(const char *s, size_t len, size_t *outlen) {
    size_t cap = len + 64, o = 0;
    char *out = skpo_xmalloc(cap);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (u[i] >= 0x20 && u[i] < 0x7F) { // fast path: printable ASCII is copied as is
            if (o + 2 > cap) skpo_xgrow((void **)&out, &cap, o + 2 + cap / 2, 1);
            out[o++] = (char)u[i++];
            continue;
        }
        const char *rep;
        char tmp[4], one[2];
        if (u[i] < 0x80) {
            one[0] = (u[i] == 0 || (u[i] < 0x20 && u[i] != '\n' && u[i] != '\t') || u[i] == 0x7F) ? ' ' : (char)u[i];
            if (u[i] == '\r' || u[i] == '\t') one[0] = ' ';
            if (u[i] == '\n') one[0] = '\n';
            one[1] = 0;
            rep = one;
            i++;
        } else {
            uint32_t cp = 0;
            size_t k = utf8_dec(u + i, len - i, &cp);
            if (k == 0) { rep = " "; i++; }
            else { rep = map_cp(cp, tmp); i += k; }
        }
        size_t rl = strlen(rep);
        if (o + rl + 1 > cap) skpo_xgrow((void **)&out, &cap, o + rl + 1 + cap / 2, 1);
        memcpy(out + o, rep, rl);
        o += rl;
    }
    out[o] = 0;
    *outlen = o;
    return out;
}

// --- canonical string -----------------------------------------------------------------

static bool has_prefix(const char *s, size_t n, const char *p) {
    size_t k = strlen(p);
    return n >= k && !memcmp(s, p, k);
}

static const char *const TEXTCMDS[] = {
    "\\text", "\\textbf", "\\textit", "\\textrm", "\\textnormal", "\\mathrm", "\\mathbf",
    "\\mathit", "\\mbox", "\\hbox", "\\textsf", "\\mathsf", "\\operatorname", "\\boxed", NULL,
};
static const char *const SKIPS[] = {
    "\\left", "\\right", "\\displaystyle", "\\textstyle", "\\!", "\\,", "\\;", "\\:", "\\ ",
    "\\quad", "\\qquad", NULL,
};

// Length of a text command (with its '{') at s, or 0.
static size_t textcmd_at(const char *s, size_t n) {
    for (int k = 0; TEXTCMDS[k]; k++) {
        size_t l = strlen(TEXTCMDS[k]);
        if (n > l && !memcmp(s, TEXTCMDS[k], l) && s[l] == '{') return l + 1;
    }
    return 0;
}

void vtext_canon(const char *s, size_t len, char *out, size_t cap) {
    SKPO_ASSERT(cap > 0);
    size_t o = 0;
    // closing braces to drop, as a stack of brace depths (bounded)
    int drop[64], nd = 0, depth = 0;
    for (size_t i = 0; i < len && o + 6 < cap;) {
        size_t k;
        if ((k = textcmd_at(s + i, len - i))) {
            if (nd < 64) drop[nd++] = depth;
            else out[o++] = '{';
            depth++;
            i += k;
            continue;
        }
        bool skipped = false;
        for (int j = 0; SKIPS[j]; j++)
            if (has_prefix(s + i, len - i, SKIPS[j]) &&
                !(SKIPS[j][1] != ' ' && isalpha((unsigned char)SKIPS[j][1]) &&
                  i + strlen(SKIPS[j]) < len && isalpha((unsigned char)s[i + strlen(SKIPS[j])]))) {
                i += strlen(SKIPS[j]);
                skipped = true;
                break;
            }
        if (skipped) continue;
        if (has_prefix(s + i, len - i, "\\dfrac") || has_prefix(s + i, len - i, "\\tfrac")) {
            memcpy(out + o, "\\frac", 5); o += 5; i += 6; continue;
        }
        char c = s[i];
        if (c == '{') { depth++; out[o++] = c; i++; continue; }
        if (c == '}') {
            depth--;
            if (nd > 0 && drop[nd - 1] == depth) nd--;
            else out[o++] = c;
            i++;
            continue;
        }
        if (isspace((unsigned char)c) || c == '$' || c == '~') { i++; continue; }
        out[o++] = c;
        i++;
    }
    while (o > 0 && out[o - 1] == '.') o--;
    out[o] = 0;
    // strip braces that wrap the whole string
    for (;;) {
        if (o < 2 || out[0] != '{' || out[o - 1] != '}') break;
        int d = 0; bool whole = true;
        for (size_t i = 0; i < o; i++) {
            if (out[i] == '{') d++;
            else if (out[i] == '}' && --d == 0 && i != o - 1) { whole = false; break; }
        }
        if (!whole) break;
        o -= 2;
        for (size_t i = 0; i < o; i++) out[i] = out[i + 1];
        out[o] = 0;
    }
    bool alpha = o > 1; // one letter keeps its case: x and X are different names
    for (size_t i = 0; i < o; i++)
        if (!isalpha((unsigned char)out[i]) && out[i] != '-' && out[i] != '\'') alpha = false;
    if (alpha)
        for (size_t i = 0; i < o; i++) out[i] = (char)tolower((unsigned char)out[i]);
}

// --- choice letters -----------------------------------------------------------------------

// Skip what carries no meaning around a choice letter: spaces, braces, $, text
// commands (\text{, \textbf{, ...), "\ " and "\," spacing.
static size_t skip_layout(const char *s, size_t i, size_t len) {
    while (i < len) {
        size_t k = textcmd_at(s + i, len - i);
        if (k) { i += k; continue; }
        if (s[i] == '{' || s[i] == '}' || s[i] == '$' || s[i] == ' ') { i++; continue; }
        if (s[i] == '\\' && i + 1 < len && strchr(",;:! ", s[i + 1])) { i += 2; continue; }
        break;
    }
    return i;
}

// A letter followed by its explanation: "C since 12 > 10", "A. 7", "C: x = 3",
// "B) 42", "B - the only even one", "D. The lines are parallel", "C, as shown".
// The letter must end its word, and a separator (. : , ) or a spaced dash) or a
// word of two letters or more must follow; an equation ("A = 5"), a name ("CD")
// or a second lone letter anywhere after it (a hedge, "B or C") is not a choice.
static char choice_explained(const char *s, size_t len) {
    size_t i = skip_layout(s, 0, len);
    if (i >= len || s[i] < 'A' || s[i] > 'E') return 0;
    char letter = s[i++];
    size_t j = i;
    while (j < len && (s[j] == '}' || s[j] == ' ')) j++;
    if (i < len && isalnum((unsigned char)s[i])) return 0;
    bool sep = false;
    if (j < len && strchr(".:,)", s[j])) sep = true, j++;
    else if (j + 1 < len && s[j] == '-' && j > i && s[j + 1] == ' ') sep = true, j++;
    j = skip_layout(s, j, len);
    if (!sep) { // no punctuation: a word must follow, "C since ..."
        size_t w = j;
        while (w < len && isalpha((unsigned char)s[w])) w++;
        if (w - j < 2 || j == i) return 0;
    }
    if (j >= len) return 0;
    if (s[j] == '=' || s[j] == '<' || s[j] == '>' || s[j] == '^' || s[j] == '_') return 0;
    for (size_t k = j; k < len; k++) { // another lone capital A-E: a hedge or a comparison of options
        if (s[k] < 'A' || s[k] > 'E') continue;
        bool before = k == 0 || !isalnum((unsigned char)s[k - 1]) ;
        bool after = k + 1 == len || !isalnum((unsigned char)s[k + 1]);
        if (before && after && !(k > 0 && s[k - 1] == '\\')) return 0;
    }
    return letter;
}

char vtext_choice(const char *s, size_t len, bool strict) {
    char buf[64];
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < sizeof buf;) {
        size_t k = textcmd_at(s + i, len - i);
        if (k) { i += k; continue; }
        char c = s[i];
        if (c == '{' || c == '}' || c == '$' || isspace((unsigned char)c)) { i++; continue; }
        if (c == '\\' && i + 1 < len && strchr(",;:! ", s[i + 1])) { i += 2; continue; }
        if (c == '\\' && (has_prefix(s + i, len - i, "\\left") || has_prefix(s + i, len - i, "\\right"))) {
            i += s[i + 1] == 'l' ? 5 : 6;
            continue;
        }
        buf[o++] = c;
        i++;
    }
    buf[o] = 0;
    while (o > 0 && buf[o - 1] == '.') buf[--o] = 0;
    if (o == 1 && buf[0] >= 'A' && buf[0] <= 'E') return buf[0];
    if (o == 3 && buf[0] == '(' && buf[2] == ')' && buf[1] >= 'A' && buf[1] <= 'E') return buf[1];
    if (strict) return 0;
    if (o >= 3 && buf[0] == '(' && buf[2] == ')' && buf[1] >= 'A' && buf[1] <= 'E') {
        for (size_t j = 3; j + 2 < o; j++) // "(A) or (B)": two letters are a hedge
            if (buf[j] == '(' && buf[j + 2] == ')' && buf[j + 1] >= 'A' && buf[j + 1] <= 'E') return 0;
        return buf[1];
    }
    if (o == 2 && buf[1] == ')' && buf[0] >= 'A' && buf[0] <= 'E') return buf[0];
    return choice_explained(s, len);
}
