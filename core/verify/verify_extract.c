/*
 * verify_extract.c - finding the final answer in a (sanitized) response.
 *
 * Order of evidence, latest position wins: the last \boxed{}/\fbox{} (a run
 * of boxes joined only by connectors like ", ", "and", "or", "\quad" is read
 * as one list answer, so "\boxed{7} or \boxed{8}" is a hedge that matches no
 * single gold), the last "answer:" / "answer is" / "answer =" / "####" phrase.
 * Without either (math mode with fallback): the whole response if it parses as
 * a bare answer, else the last $...$/\(...\)/\[...\] segment or the last
 * number, whichever ends later. Every scan is linear in the input; extracted
 * answers longer than SKPO_VERIFY_ANSWER_MAX count as no answer.
 */
#define _GNU_SOURCE
#include "verify/verify_impl.h"
#include "base/common.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct box { size_t start, end, cs, ce; } box;

#define RING 64

// --- answer cleanup -------------------------------------------------------------------

static void trim(const char *t, size_t *a, size_t *b) {
    while (*a < *b && isspace((unsigned char)t[*a])) (*a)++;
    while (*b > *a && (isspace((unsigned char)t[*b - 1]) || t[*b - 1] == '.' || t[*b - 1] == ',')) (*b)--;
}

// Remove brace layers that wrap the whole of t[a, b): one linear pass.
static void strip_braces(const char *t, size_t *a, size_t *b) {
    for (;;) {
        trim(t, a, b);
        size_t L = 0, R = 0, n = *b - *a;
        while (L < n && t[*a + L] == '{') L++;
        while (R < n && t[*b - 1 - R] == '}') R++;
        size_t k = L < R ? L : R;
        if (k == 0 || L == n) return;
        long d = 0, mind = (long)k;
        for (size_t i = 0; i < n; i++) {
            char c = t[*a + i];
            if (c == '\\' && i + 1 < n) { i++; continue; }
            if (c == '{') d++;
            else if (c == '}') d--;
            if (i + 1 >= L && i + R < n && d < mind) mind = d;
        }
        if (mind <= 0 || d != 0) return;
        *a += (size_t)mind;
        *b -= (size_t)mind;
    }
}

static size_t match_brace(const char *t, size_t i, size_t n); // i at '{'; returns index of '}' or n

static bool box_at(const char *t, size_t i, size_t n, size_t *name_len) {
    if (i + 6 <= n && !memcmp(t + i, "\\boxed", 6) && (i + 6 == n || !isalpha((unsigned char)t[i + 6]))) { *name_len = 6; return true; }
    if (i + 5 <= n && !memcmp(t + i, "\\fbox", 5) && (i + 5 == n || !isalpha((unsigned char)t[i + 5]))) { *name_len = 5; return true; }
    return false;
}

// Clean one answer candidate into out; false if none or over the caps.
static bool clean_answer(const char *t, size_t a, size_t b, char *out, size_t cap) {
    for (int iter = 0; iter < 64; iter++) {
        strip_braces(t, &a, &b);
        size_t nl;
        if (b > a && box_at(t, a, b, &nl)) { // \boxed{\boxed{5}}: unwrap a box spanning everything
            size_t j = a + nl;
            while (j < b && t[j] == ' ') j++;
            if (j < b && t[j] == '{') {
                size_t e = match_brace(t, j, b);
                if (e == b - 1) { a = j + 1; b = e; continue; }
            }
        }
        break;
    }
    while (b > a && t[b - 1] == '$') b--;
    while (b > a && t[a] == '$') a++;
    trim(t, &a, &b);
    if (b > a && b - a < SKPO_VERIFY_ANSWER_MAX) { // unbalanced: "{{{5}}" drops the unmatched outer braces
        long d = 0;
        for (size_t i = a; i < b; i++) {
            if (t[i] == '\\' && i + 1 < b) { i++; continue; }
            d += t[i] == '{' ? 1 : t[i] == '}' ? -1 : 0;
        }
        while (d > 0 && b > a && t[a] == '{') { a++; d--; }
        while (d < 0 && b > a && t[b - 1] == '}') { b--; d++; }
        if (d == 0) strip_braces(t, &a, &b);
    }
    if (b <= a || b - a >= SKPO_VERIFY_ANSWER_MAX || b - a + 1 > cap) return false;
    for (size_t i = a; i < b; i++) { size_t nl; if (t[i] == '\\' && box_at(t, i, b, &nl)) return false; }
    memcpy(out, t + a, b - a);
    out[b - a] = 0;
    return true;
}

// --- boxes -----------------------------------------------------------------------------

static size_t match_brace(const char *t, size_t i, size_t n) {
    long d = 0;
    for (; i < n; i++) {
        if (t[i] == '\\' && i + 1 < n) { i++; continue; }
        if (t[i] == '{') d++;
        else if (t[i] == '}' && --d == 0) return i;
    }
    return n;
}

// All top-level boxes; the last RING are kept in order in ring[], count in *nb.
static int find_boxes(const char *t, size_t n, box *ring) {
    int nb = 0;
    for (size_t i = 0; i < n;) {
        const char *p = memchr(t + i, '\\', n - i);
        if (!p) break;
        i = (size_t)(p - t);
        size_t nl;
        if (!box_at(t, i, n, &nl)) { i++; continue; }
        box b = {i, n, 0, 0};
        size_t j = i + nl;
        while (j < n && t[j] == ' ') j++;
        if (j < n && t[j] == '{') {
            size_t e = match_brace(t, j, n);
            b.cs = j + 1;
            b.ce = e;
            b.end = e < n ? e + 1 : n;
        } else {
            b.cs = j;
            while (j < n && !isspace((unsigned char)t[j]) && t[j] != '$' && t[j] != '\\') j++;
            b.ce = b.end = j;
        }
        if (nb >= RING) memmove(ring, ring + 1, sizeof(box) * (RING - 1));
        ring[nb >= RING ? RING - 1 : nb] = b;
        if (nb < RING) nb++;
        i = b.end > i ? b.end : i + 1;
    }
    return nb;
}

// Text between two boxes that keeps them one answer: short, no sentence punctuation.
static bool connector(const char *t, size_t a, size_t b) {
    if (b < a || b - a > 80) return false;
    int words = 0;
    bool inw = false;
    for (size_t i = a; i < b; i++) {
        char c = t[i];
        if (c == '.' || c == ';' || c == ':' || c == '?' || c == '!' || c == '=') return false;
        bool sp = isspace((unsigned char)c) || c == '$' || c == ',';
        if (!sp && !inw) words++;
        inw = !sp;
    }
    return words <= 8;
}

// The name written just before a box, "h = \\boxed{4}": sets [*ls, *le) to "h".
// A plain name only (letters, a subscript, a command such as \\alpha), so
// "2a = \\boxed{..}" or "f(x) = \\boxed{..}" have none.
static bool box_label(const char *t, size_t start, size_t *ls, size_t *le) {
    size_t i = start;
    while (i > 0 && (t[i - 1] == ' ' || t[i - 1] == '{')) i--;
    if (i == 0 || t[i - 1] != '=') return false;
    size_t e = --i;
    while (e > 0 && t[e - 1] == ' ') e--;
    size_t s = e;
    while (s > 0 && e - s < 24 && (isalnum((unsigned char)t[s - 1]) || strchr("_{}\\", t[s - 1]))) s--;
    if (s == e || !(isalpha((unsigned char)t[s]) || t[s] == '\\')) return false;
    if (s > 0 && !strchr(" $(\n", t[s - 1])) return false;
    *ls = s;
    *le = e;
    return true;
}

// Does the text between two boxes say "or" (a choice between them)?
static bool says_or(const char *t, size_t a, size_t b) {
    for (size_t i = a; i + 2 <= b; i++)
        if (!strncasecmp(t + i, "or", 2) && (i == a || !isalpha((unsigned char)t[i - 1])) &&
            (i + 2 == b || !isalpha((unsigned char)t[i + 2])))
            return true;
    return false;
}

// The name an answer labels itself with ("y = 3" -> "y"): [0, *n) of s, or 0.
static size_t own_label(const char *s, size_t *n) {
    const char *e = strchr(s, '=');
    if (!e || e == s || strchr(e + 1, '=')) return 0;
    size_t k = (size_t)(e - s);
    while (k > 0 && s[k - 1] == ' ') k--;
    for (size_t i = 0; i < k; i++)
        if (!(isalnum((unsigned char)s[i]) || strchr("_{}\\", s[i]))) return 0;
    *n = k;
    return k;
}

static bool boxes_answer(const char *t, box *ring, int nb, char *out, size_t cap) {
    // a box's name ("a = \\boxed{5}") starts its stretch of text
    size_t ls[RING], le[RING];
    bool lab[RING];
    for (int i = 0; i < nb; i++) lab[i] = box_label(t, ring[i].start, &ls[i], &le[i]);
    int first = nb - 1;
    while (first > 0 && connector(t, ring[first - 1].end, lab[first] ? ls[first] : ring[first].start)) first--;
    size_t o = 0;
    char *one = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX);
    char *prev = skpo_xmalloc(SKPO_VERIFY_ANSWER_MAX);
    char names[RING][32];
    int nnames = 0;
    bool all_same = true, ok = true, either = false;
    prev[0] = 0;
    for (int i = first; i < nb && ok; i++) {
        if (!clean_answer(t, ring[i].cs, ring[i].ce, one, SKPO_VERIFY_ANSWER_MAX)) { ok = false; break; }
        size_t l = strlen(one), nl = 0;
        // several boxes, each after its name: "a = \\boxed{5} and b = \\boxed{12}" is "a = 5, b = 12"
        if (nb - first > 1 && lab[i] && !strchr(one, '=') && l + (le[i] - ls[i]) + 4 < SKPO_VERIFY_ANSWER_MAX) {
            size_t k = le[i] - ls[i];
            memmove(one + k + 3, one, l + 1);
            memcpy(one, t + ls[i], k);
            memcpy(one + k, " = ", 3);
            l += k + 3;
        }
        if (i > first) either |= says_or(t, ring[i - 1].end, lab[i] ? ls[i] : ring[i].start);
        if (own_label(one, &nl) && nl < sizeof names[0] && nnames < RING) {
            bool seen = false;
            for (int k = 0; k < nnames; k++) seen |= strlen(names[k]) == nl && !memcmp(names[k], one, nl);
            if (!seen) { memcpy(names[nnames], one, nl); names[nnames++][nl] = 0; }
        }
        if (i > first && strcmp(one, prev)) all_same = false;
        if (i == first || strcmp(one, prev)) {
            if (o + l + 3 > cap) { ok = false; break; }
            if (o) { memcpy(out + o, ", ", 2); o += 2; }
            memcpy(out + o, one, l);
            o += l;
        }
        memcpy(prev, one, l + 1);
    }
    // "x = 2 or y = 3" names two unknowns and commits to neither: a hedge, no answer
    // ("x = 2 or x = -3" lists the roots of one unknown, and stays a list)
    if (either && nnames > 1) ok = false;
    if (ok && all_same) { size_t l = strlen(prev); memcpy(out, prev, l + 1); o = l; }
    out[o] = 0;
    free(one);
    free(prev);
    return ok && o > 0;
}

// --- phrases --------------------------------------------------------------------------------

// A choice letter at t[i]: "(C)", "C." or "C," or "C" ending the text, "\\textbf{(C)}",
// after spaces, '*' and '$'. Sets *end past it.
static bool choice_at(const char *t, size_t i, size_t n, size_t *end) {
    while (i < n && (t[i] == ' ' || t[i] == '*' || t[i] == '$')) i++;
    bool cmd = false;
    if (i + 8 <= n && !memcmp(t + i, "\\textbf{", 8)) { i += 8; cmd = true; }
    else if (i + 6 <= n && !memcmp(t + i, "\\text{", 6)) { i += 6; cmd = true; }
    bool par = i < n && t[i] == '(';
    if (par) i++;
    if (i >= n || t[i] < 'A' || t[i] > 'E') return false;
    i++;
    if (par) { if (i >= n || t[i] != ')') return false; i++; }
    else if (i < n && !strchr(".,;:)} \n$*", t[i])) return false;
    else if (i + 1 < n && t[i] == ' ' && isalpha((unsigned char)t[i + 1]) && !par) {
        // "C because ...", "C since": a letter then an explanation; "A total of" is a word
        if (strncmp(t + i + 1, "because", 7) && strncmp(t + i + 1, "since", 5) && strncmp(t + i + 1, "as ", 3)) return false;
    }
    if (cmd && (i >= n || (t[i] != '}' && t[i] != ' '))) return false; // \text{A,B,E} is a list
    { // "A, C" or "A and C": several letters are a list, not one choice
        size_t k = i;
        while (k < n && (t[k] == ',' || t[k] == ' ')) k++;
        if (k > i && k < n && t[k] >= 'A' && t[k] <= 'E' && (k + 1 == n || !isalpha((unsigned char)t[k + 1]))) return false;
    }
    while (i < n && t[i] == '}') i++;
    if (end) *end = i;
    return true;
}

// Last "answer:" / "answer is" / "answer =" / "answer would be" / "####".
// Returns the phrase position and sets *content to where the answer begins.
static bool find_phrase(const char *t, size_t n, size_t *pos, size_t *content) {
    bool found = false;
    for (size_t i = n; i-- > 0;) {
        if (t[i] == '#' && i + 4 <= n && !memcmp(t + i, "####", 4)) {
            size_t s = i;
            while (s > 0 && t[s - 1] == '#') s--;
            if (!found || s > *pos) { *pos = s; *content = i + 4; found = true; }
            break;
        }
    }
    for (size_t i = n >= 6 ? n - 6 + 1 : 0; i-- > 0;) {
        if (found && i < *pos) break;
        size_t wl = 0;
        int lc = tolower((unsigned char)t[i]);
        if (lc == 'a' && !strncasecmp(t + i, "answer", 6)) wl = 6;
        else if (lc == 'o' && i + 6 <= n && !strncasecmp(t + i, "option", 6)) wl = 6;
        else if (lc == 'c' && i + 6 <= n && !strncasecmp(t + i, "choice", 6)) wl = 6;
        if (!wl) continue;
        if (i > 0 && isalpha((unsigned char)t[i - 1])) continue;
        size_t j = i + wl;
        if (j < n && (t[j] == 's' || t[j] == 'S')) j++;
        while (j < n && (t[j] == ' ' || t[j] == '*')) j++;
        size_t c = 0;
        if (j < n && (t[j] == ':' || t[j] == '=')) c = j + 1;
        else if (j + 2 <= n && !strncasecmp(t + j, "is", 2) && (j + 2 == n || !isalpha((unsigned char)t[j + 2]))) c = j + 2;
        else if (j + 8 <= n && !strncasecmp(t + j, "would be", 8)) c = j + 8;
        else if (j + 9 <= n && !strncasecmp(t + j, "should be", 9)) c = j + 9;
        if (!c) continue;
        while (c < n && (t[c] == '*' || t[c] == ':')) c++;
        if (lc != 'a' && !choice_at(t, c, n, NULL)) continue; // "option is" only before a letter
        if (!found || i > *pos) { *pos = i; *content = c; found = true; }
        break;
    }
    return found;
}

// Math segments: the first complete $..$ / \(..\) in [a, b). Returns true and sets range.
static bool first_math(const char *t, size_t a, size_t b, size_t *ms, size_t *me) {
    for (size_t i = a; i < b; i++) {
        if (t[i] == '\\' && i + 1 < b && (t[i + 1] == '(' || t[i + 1] == '[')) {
            const char *close = t[i + 1] == '(' ? "\\)" : "\\]";
            for (size_t j = i + 2; j + 1 < b; j++)
                if (!memcmp(t + j, close, 2)) { *ms = i + 2; *me = j; return true; }
            return false;
        }
        if (t[i] == '\\') { i++; continue; }
        if (t[i] == '$') {
            size_t s = i + 1;
            while (s < b && t[s] == '$') s++;
            for (size_t j = s; j < b; j++) {
                if (t[j] == '\\') { j++; continue; }
                if (t[j] == '$') { *ms = s; *me = j; return true; }
            }
            return false;
        }
    }
    return false;
}

static bool in_math_at(const char *t, size_t a, size_t i) {
    int dollars = 0;
    for (size_t k = a; k < i; k++) {
        if (t[k] == '\\') { k++; continue; }
        if (t[k] == '$') dollars++;
    }
    return dollars % 2 == 1;
}

// The answer inside a phrase's sentence ("The final answer is $72$. I hope...").
static bool sentence_answer(const char *t, size_t a, size_t n, bool lone_number, char *out, size_t cap) {
    while (a < n && (t[a] == ' ' || t[a] == '\t')) a++;
    size_t b = a;
    size_t lim = n - a > 2000 ? a + 2000 : n;
    while (b < lim) { // to the end of the line, unless inside math
        if (t[b] == '\n' && !in_math_at(t, a, b) && b > a) break;
        if (t[b] == '\n' && b == a) a++;
        b++;
    }
    const char *stops[] = {"I hope", "<|", NULL};
    for (int k = 0; stops[k]; k++) {
        const char *p = memmem(t + a, b - a, stops[k], strlen(stops[k]));
        if (p) b = (size_t)(p - t);
    }
    for (size_t i = a; i < b; i++) { // sentence end
        if (t[i] == '.' && (i + 1 == b || t[i + 1] == ' ' || t[i + 1] == '\n') &&
            !(i > a && isdigit((unsigned char)t[i - 1]) && i + 1 < b && isdigit((unsigned char)t[i + 1])) &&
            !in_math_at(t, a, i)) { b = i; break; }
    }
    size_t ce;
    if (choice_at(t, a, b, &ce)) { // "(C) because ...": the letter; "(B) or (C)" is a hedge
        size_t k = ce;
        while (k < b && (t[k] == ' ' || t[k] == ',')) k++;
        if (k + 2 < b && !strncasecmp(t + k, "or", 2) && !isalpha((unsigned char)t[k + 2])) return false;
        return clean_answer(t, a, ce, out, cap);
    }
    for (size_t i = b; i-- > a + 1;) { // "... is X": keep X
        if (i + 3 < b && t[i] == ' ' && !strncasecmp(t + i + 1, "is ", 3) && !in_math_at(t, a, i)) { a = i + 4; break; }
    }
    size_t ms, me;
    if (first_math(t, a, b, &ms, &me)) {
        size_t ms2, me2; // "either $a$ or $b$": a hedge
        if (me + 1 < b && first_math(t, me + 1, b, &ms2, &me2)) {
            for (size_t k = me + 1; k + 2 < ms2; k++)
                if ((k == me + 1 || !isalpha((unsigned char)t[k - 1])) && !strncasecmp(t + k, "or", 2) &&
                    !isalpha((unsigned char)t[k + 2]))
                    return false;
        }
        return clean_answer(t, ms, me, out, cap);
    }
    trim(t, &a, &b);
    if (a >= b) return false;
    char c0 = t[a];
    if (isdigit((unsigned char)c0) || c0 == '-' || c0 == '(' || c0 == '[' || c0 == '\\' || c0 == '{' || c0 == '.') {
        for (size_t i = a; i + 3 < b; i++) // "18 dollars, not 81" -> "18 dollars"
            if (t[i] == ',' && t[i + 1] == ' ' && isalpha((unsigned char)t[i + 2]) && isalpha((unsigned char)t[i + 3])) { b = i; break; }
        return clean_answer(t, a, b, out, cap);
    }
    int words = 0, nums = 0;
    size_t na = 0, nbnd = 0;
    for (size_t i = a; i < b; i++) {
        if (!isspace((unsigned char)t[i]) && (i == a || isspace((unsigned char)t[i - 1]))) words++;
        if (isdigit((unsigned char)t[i]) && (i == a || !isdigit((unsigned char)t[i - 1]))) {
            if (i > a && (t[i - 1] == '.' || t[i - 1] == ',')) continue;
            nums++;
            na = i;
            nbnd = i;
            while (nbnd < b && (isdigit((unsigned char)t[nbnd]) || ((t[nbnd] == '.' || t[nbnd] == ',') && nbnd + 1 < b && isdigit((unsigned char)t[nbnd + 1])))) nbnd++;
            if (nbnd < b && t[nbnd] == '%') nbnd++;
        }
    }
    if (words <= 3) return clean_answer(t, a, b, out, cap);
    if (nums == 1 && lone_number) return clean_answer(t, na, nbnd, out, cap);
    return false;
}

// --- fallbacks ----------------------------------------------------------------------------------

static bool last_math(const char *t, size_t n, size_t *ms, size_t *me) {
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        size_t s, e;
        if (t[i] == '\\' && i + 1 < n && (t[i + 1] == '(' || t[i + 1] == '[')) {
            if (!first_math(t, i, n, &s, &e)) return found;
        } else if (t[i] == '\\') { i++; continue; }
        else if (t[i] == '$') {
            if (!first_math(t, i, n, &s, &e)) return found;
        } else continue;
        *ms = s; *me = e; found = true;
        i = e + 1;
        while (i < n && (t[i] == '$' || t[i] == ')' || t[i] == ']')) i++;
        i--;
    }
    return found;
}

static bool last_number(const char *t, size_t n, size_t *ns, size_t *ne) {
    size_t i = n;
    while (i > 0 && !isdigit((unsigned char)t[i - 1])) i--;
    if (i == 0) return false;
    size_t e = i, s = i;
    while (s > 0 && (isdigit((unsigned char)t[s - 1]) ||
                     ((t[s - 1] == ',' || t[s - 1] == '.') && s >= 2 && isdigit((unsigned char)t[s - 2]))))
        s--;
    if (s > 0 && t[s - 1] == '-') s--;
    // a unit's power ("16 cm^2.", "125 cm^{3}" from cm³) is not the number: the value before the unit is
    size_t k = s > 0 && t[s - 1] == '^' ? s - 1 : s > 1 && t[s - 1] == '{' && t[s - 2] == '^' ? s - 2 : 0;
    if (k && !(s == e) && e - s <= 2) {
        size_t u = k;
        while (u > 0 && k - u < 12 && isalpha((unsigned char)t[u - 1])) u--;
        size_t v = u;
        while (v > 0 && t[v - 1] == ' ') v--;
        if (u < k && v < u && v > 0 && isdigit((unsigned char)t[v - 1])) {
            size_t w = v;
            while (w > 0 && (isdigit((unsigned char)t[w - 1]) || (t[w - 1] == '.' && w >= 2 && isdigit((unsigned char)t[w - 2])))) w--;
            if (w == 0 || strchr(" \t\n([{$=:~", t[w - 1])) {
                s = w;
                if (t[k + 1] == '{' && e < n && t[e] == '}') e++;
            }
        }
    }
    // never a digit out of noise: the number stands alone ("user12", "x7f9", "ERR_3_" are not answers)
    if (s > 0 && !strchr(" \t\n([{$=:~+-", t[s - 1])) return false;
    if (e < n && t[e] == '%') e++;
    else if (e + 1 < n && t[e] == '\\' && t[e + 1] == '%') e += 2;
    if (e < n && !strchr(" \t\n.,;:!?)]}$\\", t[e])) return false;
    // and in the last sentence: "= 115. Then we multiply" is unfinished work, not an answer
    for (size_t k = e; k < n; k++) {
        bool stop = t[k] == '\n' || ((t[k] == '.' || t[k] == '!' || t[k] == '?') && (k + 1 == n || isspace((unsigned char)t[k + 1])));
        if (!stop) continue;
        // a further sentence must be finished ("I hope it is correct."), not cut off ("Then we multiply")
        size_t z = n;
        while (z > k + 1 && isspace((unsigned char)t[z - 1])) z--;
        bool more = false;
        for (size_t j = k + 1; j < z; j++) if (isalpha((unsigned char)t[j])) more = true;
        if (more && (z - k > 300 || !strchr(".!?)", t[z - 1]))) return false;
        break;
    }
    *ns = s; *ne = e;
    return true;
}

// "(-infinity, 0)", "[2, infinity)" in prose: the last number is an end of an
// interval written with words; widen it to the interval. Only infinity words
// (and signs) may stand inside, so "(see 3, page 4)" stays the number.
static void widen_interval(const char *t, size_t n, size_t *ns, size_t *ne) {
    static const char *const ok[] = {"infinity", "inf", "infty", "negative", "minus", "positive", "plus", NULL};
    size_t a = *ns, b = *ne, i = a, j = b;
    int commas = 0;
    while (i > 0 && a - i < 48 && (isalnum((unsigned char)t[i - 1]) || strchr(" .,+-\\", t[i - 1]))) commas += t[--i] == ',';
    while (j < n && j - b < 48 && (isalnum((unsigned char)t[j]) || strchr(" .,+-\\", t[j]))) commas += t[j++] == ',';
    if (i == 0 || j >= n || commas != 1 || !strchr("([", t[i - 1]) || !strchr(")]", t[j])) return;
    for (size_t k = i; k < j;) {
        if (!isalpha((unsigned char)t[k])) { k++; continue; }
        size_t w = k;
        while (w < j && isalpha((unsigned char)t[w])) w++;
        bool known = false;
        for (int q = 0; ok[q] && !known; q++) known = strlen(ok[q]) == w - k && !strncasecmp(ok[q], t + k, w - k);
        if (!known) return;
        k = w;
    }
    *ns = i - 1;
    *ne = j + 1;
}

// A phrase with no box anywhere counts only if little follows its line: an
// "answer is (C)" in the middle of unfinished reasoning is not a final answer.
static bool near_end(const char *t, size_t a, size_t n) {
    const char *nl = memchr(t + a, '\n', n - a);
    size_t rest = 0;
    for (size_t i = nl ? (size_t)(nl - t) : n; i < n; i++) if (!isspace((unsigned char)t[i])) rest++;
    return rest < 100;
}

// The part of a response that can hold its final answer: before the first
// chat-template token (the model went on to write another turn), and after the
// last </think> (answers inside the thinking are tentative). An unclosed
// <think> has no final answer. Returns false if nothing is left.
static bool answer_region(const char *t, size_t *a, size_t *n) {
    static const char *const ends[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", NULL};
    for (int k = 0; ends[k]; k++) {
        const char *p = memmem(t + *a, *n - *a, ends[k], strlen(ends[k]));
        if (p) *n = (size_t)(p - t);
    }
    const char *close = NULL;
    for (const char *p = t + *a; (p = memmem(p, *n - (size_t)(p - t), "</think>", 8)); p += 8) close = p;
    if (close) { *a = (size_t)(close - t) + 8; return true; }
    return !memmem(t + *a, *n - *a, "<think>", 7);
}

bool vextract(vctx *c, const char *t, size_t n, const skpo_verify_opts *o, char *out, size_t cap) {
    size_t a = 0;
    if (!answer_region(t, &a, &n)) return false;
    t += a;
    n -= a;
    box ring[RING];
    int nb = find_boxes(t, n, ring);
    size_t ppos = 0, pcont = 0;
    bool phrase = o->mode == SKPO_VERIFIER_MATH && find_phrase(t, n, &ppos, &pcont);
    if (phrase && nb == 0 && !near_end(t, pcont, n)) phrase = false;
    if (phrase && (nb == 0 || ppos > ring[nb - 1].start)) {
        // with boxes present, a sentence's lone number ("consistent with 3 checks") is not an answer
        if (sentence_answer(t, pcont, n, nb == 0, out, cap)) {
            bool words_only = true;
            for (const char *q = out; *q; q++)
                if (isdigit((unsigned char)*q) || *q == '\\' || *q == '$') words_only = false;
            if (!(words_only && nb > 0)) return true; // "the answer is correct" after a box
        } else if (nb == 0) return false;
        else {
            // a phrase after the last box with nothing usable: truncated or chatter
            size_t a = pcont, b = n;
            trim(t, &a, &b);
            if (a >= b) return false;
        }
    }
    if (nb > 0) return boxes_answer(t, ring, nb, out, cap);
    if (o->mode != SKPO_VERIFIER_MATH || !o->fallback) return false;
    if (n <= 400) { // the whole response is a bare answer?
        char *tmp = skpo_xmalloc(n + 1);
        bool ok = clean_answer(t, 0, n, tmp, n + 1);
        if (ok) {
            vctx_init(c);
            int r = vparse(c, tmp, strlen(tmp));
            ok = r > 0 && !vhas_kind(c, r, VN_TEXT, 0);
        }
        if (ok && strlen(tmp) < cap) { memcpy(out, tmp, strlen(tmp) + 1); free(tmp); return true; }
        free(tmp);
    }
    size_t ms = 0, me = 0, ns = 0, ne = 0;
    bool m = last_math(t, n, &ms, &me), d = last_number(t, n, &ns, &ne);
    if (m && (!d || me >= ne || (ns >= ms && ne <= me))) return clean_answer(t, ms, me, out, cap);
    if (!d) return false;
    widen_interval(t, n, &ns, &ne);
    if (!clean_answer(t, ns, ne, out, cap)) return false;
    // "2,74" in running text: a decimal comma (a thousands comma takes 3 digits)
    char *cm = strchr(out, ',');
    if (cm && !strchr(cm + 1, ',') && !strchr(out, '.') && strlen(cm + 1) >= 1 && strlen(cm + 1) <= 2 &&
        isdigit((unsigned char)cm[1]))
        *cm = '.';
    return true;
}

void vgold_clean(const char *t, size_t n, char *out, size_t cap) {
    box ring[RING];
    int nb = find_boxes(t, n, ring);
    out[0] = 0;
    if (nb > 0 && clean_answer(t, ring[nb - 1].cs, ring[nb - 1].ce, out, cap)) return;
    if (!clean_answer(t, 0, n, out, cap)) out[0] = 0;
}
