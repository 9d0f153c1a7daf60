/*
 * verify_choice.c - multiple-choice answers (MMLU-Pro): which option letter a
 * response commits to (verify_task.h). Linear scans, no allocation.
 */
#define _GNU_SOURCE
#include "verify/verify_task.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct letters { char l[SKPO_CHOICE_MAX]; int n; } letters;

static void add_letter(letters *s, char c) {
    for (int i = 0; i < s->n; i++)
        if (s->l[i] == c) return;
    if (s->n < SKPO_CHOICE_MAX) s->l[s->n++] = c;
}

static bool word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

// Skip blanks and decoration (markdown bold, $, closing braces/brackets, LaTeX
// \text{ ... } wrappers).
static size_t skip_deco(const char *t, size_t i, size_t end) {
    for (;;) {
        while (i < end && (isspace((unsigned char)t[i]) || t[i] == '*' || t[i] == '$' || t[i] == '}' || t[i] == '{' ||
                           t[i] == '_' || t[i] == '`' || t[i] == '[' || t[i] == ']'))
            i++;
        static const char *const wraps[] = {"\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\boxed", NULL};
        bool more = false;
        for (int w = 0; wraps[w] && !more; w++) {
            size_t n = strlen(wraps[w]);
            if (i + n <= end && !memcmp(t + i, wraps[w], n) && !(i + n < end && isalpha((unsigned char)t[i + n])))
                i += n, more = true;
        }
        if (!more) return i;
    }
}

// A letter token at i: "(C)" or "C" not inside a word. Returns its end or 0.
static size_t letter_at(const char *t, size_t i, size_t end, char *out) {
    size_t j = i;
    bool paren = j < end && t[j] == '(';
    if (paren) j++;
    if (j >= end || t[j] < 'A' || t[j] >= 'A' + SKPO_CHOICE_MAX) return 0;
    if (j > 0 && !paren && word_char(t[j - 1])) return 0;
    *out = t[j++];
    if (paren) {
        if (j >= end || t[j] != ')') return 0;
        return j + 1;
    }
    if (j < end && (word_char(t[j]) || t[j] == '\'')) return 0; // "An", "I'm"
    return j;
}

static bool word_at(const char *t, size_t i, size_t end, const char *w) {
    size_t n = strlen(w);
    return i + n <= end && !strncasecmp(t + i, w, n) && !(i + n < end && word_char(t[i + n]));
}

// Letters of a statement starting at i: a token, then while a connector (",",
// "/", "&", "+", "or", "and") and another token follow, that one too. Stops
// at anything else (an explanation). Leading "option"/"choice"/"letter"/
// "either" words are skipped.
static int parse_letters(const char *t, size_t i, size_t end, letters *s) {
    s->n = 0;
    for (;;) {
        i = skip_deco(t, i, end);
        static const char *const lead[] = {"option", "options", "choice", "choices", "letter", "either", "both", NULL};
        bool skipped = false;
        for (int w = 0; lead[w] && !skipped; w++)
            if (word_at(t, i, end, lead[w])) i += strlen(lead[w]), skipped = true;
        if (!skipped) break;
    }
    char c;
    size_t e = letter_at(t, i, end, &c);
    if (!e) return 0;
    add_letter(s, c);
    i = e;
    for (;;) {
        size_t j = skip_deco(t, i, end);
        bool conn = false;
        while (j < end) {
            if (t[j] == ',' || t[j] == '/' || t[j] == '&' || t[j] == '+' || t[j] == ';') j++, conn = true;
            else if (word_at(t, j, end, "or")) j += 2, conn = true;
            else if (word_at(t, j, end, "and")) j += 3, conn = true;
            else break;
            j = skip_deco(t, j, end);
            static const char *const soft[] = {"option", "possibly", "perhaps", "maybe", "also", "even", NULL};
            for (int w = 0; soft[w]; w++)
                if (word_at(t, j, end, soft[w])) j = skip_deco(t, j + strlen(soft[w]), end), w = -1;
        }
        if (!conn || !(e = letter_at(t, j, end, &c))) break;
        add_letter(s, c);
        i = e;
    }
    return s->n;
}

// Start and content end of the last \boxed{...} / \fbox{...} (balanced braces).
static bool last_boxed(const char *t, size_t len, size_t *at, size_t *cs, size_t *ce) {
    bool found = false;
    for (size_t i = 0; i + 5 < len; i++) {
        size_t n = 0;
        if (!memcmp(t + i, "\\boxed", 6)) n = 6;
        else if (!memcmp(t + i, "\\fbox", 5)) n = 5;
        if (!n) continue;
        size_t j = i + n;
        while (j < len && t[j] == ' ') j++;
        if (j >= len || t[j] != '{') continue;
        int depth = 0;
        for (size_t k = j; k < len; k++) {
            if (t[k] == '{') depth++;
            else if (t[k] == '}' && --depth == 0) {
                *at = i, *cs = j + 1, *ce = k, found = true;
                break;
            }
        }
    }
    return found;
}

int skpo_choice_extract(const char *text, size_t len, char *pred, size_t cap) {
    letters best = {0}, cur;
    long best_at = -1;
    size_t at, cs, ce;
    if (last_boxed(text, len, &at, &cs, &ce) && parse_letters(text, cs, ce, &cur)) best = cur, best_at = (long)at;
    // the last "answer is X" / "answer: X" statement that names a letter
    for (size_t i = len; i-- > 0;) {
        if ((long)i <= best_at) break;
        if (!word_at(text, i, len, "answer") || (i > 0 && word_char(text[i - 1]))) continue;
        size_t j = skip_deco(text, i + 6, len);
        while (j < len && (text[j] == ':' || text[j] == '=' || text[j] == '-')) j = skip_deco(text, j + 1, len);
        static const char *const verbs[] = {"is", "would be", "should be", "will be", "must be", "=", NULL};
        for (int v = 0; verbs[v]; v++)
            if (word_at(text, j, len, verbs[v]) || (verbs[v][0] == '=' && j < len && text[j] == '=')) {
                j = skip_deco(text, j + strlen(verbs[v]), len);
                break;
            }
        while (j < len && text[j] == ':') j = skip_deco(text, j + 1, len);
        if (parse_letters(text, j, len, &cur)) { best = cur, best_at = (long)i; break; }
    }
    // a response that opens with its letter: "C. because ...", "(C)", "C"
    if (best_at < 0) {
        size_t i = skip_deco(text, 0, len);
        char c;
        size_t e = letter_at(text, i, len, &c);
        if (e && (text[i] == '(' || e == len || text[e] == '.' || text[e] == ')' || text[e] == ':')) {
            if (parse_letters(text, i, len, &cur)) best = cur, best_at = 0;
        }
    }
    size_t k = 0;
    for (int i = 0; i < best.n && k + 2 < cap; i++) {
        if (i) pred[k++] = ',';
        pred[k++] = best.l[i];
    }
    if (cap) pred[k < cap ? k : cap - 1] = 0;
    return best.n;
}

bool skpo_choice_correct(const char *text, size_t len, const char *gold, char *pred, size_t cap) {
    int n = skpo_choice_extract(text, len, pred, cap);
    while (*gold == ' ' || *gold == '(') gold++;
    return n == 1 && gold[0] == pred[0] && (gold[1] == 0 || gold[1] == ')' || gold[1] == ' ');
}
