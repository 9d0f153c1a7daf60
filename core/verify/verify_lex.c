/*
 * verify_lex.c - tokenizer for answer strings (ASCII LaTeX after
 * vtext_sanitize). Produces a flat token array for the recursive-descent
 * parser in verify_parse.c. It resolves what is easier seen in raw text than
 * in tokens: thousands separators (1{,}000, 1,\!000, 1 000), decimals,
 * scientific notation, repeating decimals (0.\overline{3}, 0.999\ldots),
 * \text{} groups (math inside is lexed, words become units, separators or
 * text), single-character \frac/\sqrt arguments (\frac34), and degree marks.
 * Anything it does not know becomes T_BAD, which makes the parse fail.
 */
#include "verify/verify_impl.h"
#include "base/common.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct word { const char *w; int tok; int op; const char *unit; } word;

// Words outside and inside \text{}: functions, separators, units, numbers.
static const word WORDS[] = {
    {"sin", T_FUNC, VF_SIN, 0}, {"cos", T_FUNC, VF_COS, 0}, {"tan", T_FUNC, VF_TAN, 0},
    {"sec", T_FUNC, VF_SEC, 0}, {"csc", T_FUNC, VF_CSC, 0}, {"cot", T_FUNC, VF_COT, 0},
    {"arcsin", T_FUNC, VF_ASIN, 0}, {"arccos", T_FUNC, VF_ACOS, 0}, {"arctan", T_FUNC, VF_ATAN, 0},
    {"sinh", T_FUNC, VF_SINH, 0}, {"cosh", T_FUNC, VF_COSH, 0}, {"tanh", T_FUNC, VF_TANH, 0},
    {"ln", T_FUNC, VF_LN, 0}, {"log", T_FUNC, VF_LOG, 0}, {"exp", T_FUNC, VF_EXP, 0},
    {"sqrt", T_SQRT, 0, 0},
    {"and", T_SEP, 0, 0}, {"or", T_SEP, 0, 0},
    {"pct", T_PERCENT, 0, 0}, {"percent", T_PERCENT, 0, 0},
    // a unit, so "60 degrees" is 60 (as 60^\circ is) but never 60\%
    {"degree", T_UNIT, 0, "deg"}, {"degrees", T_UNIT, 0, "deg"}, {"deg", T_UNIT, 0, "deg"},
    {"cm", T_UNIT, 0, "cm"}, {"centimeter", T_UNIT, 0, "cm"}, {"centimeters", T_UNIT, 0, "cm"},
    {"meter", T_UNIT, 0, "m"}, {"meters", T_UNIT, 0, "m"}, {"metres", T_UNIT, 0, "m"},
    {"km", T_UNIT, 0, "km"}, {"kilometers", T_UNIT, 0, "km"}, {"mm", T_UNIT, 0, "mm"},
    {"inch", T_UNIT, 0, "in"}, {"inches", T_UNIT, 0, "in"}, {"ft", T_UNIT, 0, "ft"},
    {"feet", T_UNIT, 0, "ft"}, {"foot", T_UNIT, 0, "ft"}, {"yard", T_UNIT, 0, "yd"},
    {"yards", T_UNIT, 0, "yd"}, {"mile", T_UNIT, 0, "mi"}, {"miles", T_UNIT, 0, "mi"},
    {"mph", T_UNIT, 0, "mi/h"}, {"hour", T_UNIT, 0, "h"}, {"hours", T_UNIT, 0, "h"},
    {"hr", T_UNIT, 0, "h"}, {"hrs", T_UNIT, 0, "h"}, {"minute", T_UNIT, 0, "min"},
    {"minutes", T_UNIT, 0, "min"}, {"min", T_UNIT, 0, "min"}, {"mins", T_UNIT, 0, "min"},
    {"second", T_UNIT, 0, "s"}, {"seconds", T_UNIT, 0, "s"}, {"secs", T_UNIT, 0, "s"},
    {"day", T_UNIT, 0, "d"}, {"days", T_UNIT, 0, "d"}, {"week", T_UNIT, 0, "wk"},
    {"weeks", T_UNIT, 0, "wk"}, {"month", T_UNIT, 0, "mo"}, {"months", T_UNIT, 0, "mo"},
    {"year", T_UNIT, 0, "yr"}, {"years", T_UNIT, 0, "yr"}, {"dollar", T_UNIT, 0, "usd"},
    {"dollars", T_UNIT, 0, "usd"}, {"cent", T_UNIT, 0, "cent"}, {"cents", T_UNIT, 0, "cent"},
    {"yuan", T_UNIT, 0, "yuan"}, {"euro", T_UNIT, 0, "eur"}, {"euros", T_UNIT, 0, "eur"},
    {"ml", T_UNIT, 0, "ml"}, {"liter", T_UNIT, 0, "l"}, {"liters", T_UNIT, 0, "l"},
    {"litres", T_UNIT, 0, "l"}, {"gram", T_UNIT, 0, "g"}, {"grams", T_UNIT, 0, "g"},
    {"kg", T_UNIT, 0, "kg"}, {"kilograms", T_UNIT, 0, "kg"}, {"pound", T_UNIT, 0, "lb"},
    {"pounds", T_UNIT, 0, "lb"}, {"lb", T_UNIT, 0, "lb"}, {"lbs", T_UNIT, 0, "lb"},
    {"ounce", T_UNIT, 0, "oz"}, {"ounces", T_UNIT, 0, "oz"}, {"oz", T_UNIT, 0, "oz"},
    {"sq", T_UNIT, 0, "sq"}, {"square", T_UNIT, 0, "sq"}, {"cubic", T_UNIT, 0, "cu"},
    {"infinity", T_CONST, VC_INF, NULL}, {"inf", T_CONST, VC_INF, NULL},
    // interval ends in words: "negative infinity", "minus infinity", "positive infinity"
    {"negative", T_OP, '-', NULL}, {"minus", T_OP, '-', NULL}, {"plus", T_OP, '+', NULL}, {"positive", T_SKIP, 0, NULL},
    {"unit", T_UNIT, 0, ""}, {"units", T_UNIT, 0, ""}, {"per", T_UNIT, 0, "/"},
    {"radian", T_UNIT, 0, "rad"}, {"radians", T_UNIT, 0, "rad"},
    {"ways", T_UNIT, 0, ""}, {"people", T_UNIT, 0, ""}, {"students", T_UNIT, 0, ""},
    {"points", T_UNIT, 0, ""},
    {"zero", T_NUM, 0, 0}, {"one", T_NUM, 1, 0}, {"two", T_NUM, 2, 0}, {"three", T_NUM, 3, 0},
    {"four", T_NUM, 4, 0}, {"five", T_NUM, 5, 0}, {"six", T_NUM, 6, 0}, {"seven", T_NUM, 7, 0},
    {"eight", T_NUM, 8, 0}, {"nine", T_NUM, 9, 0}, {"ten", T_NUM, 10, 0}, {"eleven", T_NUM, 11, 0},
    {"twelve", T_NUM, 12, 0}, {"thirteen", T_NUM, 13, 0}, {"fourteen", T_NUM, 14, 0},
    {"fifteen", T_NUM, 15, 0}, {"sixteen", T_NUM, 16, 0}, {"seventeen", T_NUM, 17, 0},
    {"eighteen", T_NUM, 18, 0}, {"nineteen", T_NUM, 19, 0}, {"twenty", T_NUM, 20, 0},
    {"thirty", T_NUM, 30, 0}, {"forty", T_NUM, 40, 0}, {"fifty", T_NUM, 50, 0},
    {"sixty", T_NUM, 60, 0}, {"seventy", T_NUM, 70, 0}, {"eighty", T_NUM, 80, 0},
    {"ninety", T_NUM, 90, 0}, {"hundred", T_NUM, 100, 0},
    {NULL, 0, 0, 0},
};

typedef struct cmd { const char *name; int tok; int op; } cmd;

static const cmd CMDS[] = {
    {"sum", T_BIGOP, 'S'}, {"prod", T_BIGOP, 'P'}, {"left", T_SKIP, 0}, {"right", T_SKIP, 0}, {"big", T_SKIP, 0}, {"Big", T_SKIP, 0},
    {"bigg", T_SKIP, 0}, {"Bigg", T_SKIP, 0}, {"bigl", T_SKIP, 0}, {"bigr", T_SKIP, 0},
    {"Bigl", T_SKIP, 0}, {"Bigr", T_SKIP, 0}, {"biggl", T_SKIP, 0}, {"biggr", T_SKIP, 0},
    {"displaystyle", T_SKIP, 0}, {"textstyle", T_SKIP, 0}, {"scriptstyle", T_SKIP, 0},
    {"quad", T_SKIP, 0}, {"qquad", T_SKIP, 0}, {"limits", T_SKIP, 0}, {"circ", T_SKIP, 0},
    {"degree", T_SKIP, 0}, {"enspace", T_SKIP, 0}, {"thinspace", T_SKIP, 0}, {"boxed", T_SKIP, 0},
    {"fbox", T_SKIP, 0}, {"overline", T_SKIP, 0}, {"angle", T_SKIP, 0}, {"measuredangle", T_SKIP, 0}, {"mathbf", T_SKIP, 0}, {"bf", T_SKIP, 0},
    {"frac", T_FRAC, 0}, {"dfrac", T_FRAC, 0}, {"tfrac", T_FRAC, 0}, {"cfrac", T_FRAC, 0},
    {"over", T_OP, '/'}, {"sqrt", T_SQRT, 0}, {"binom", T_BINOM, 0}, {"dbinom", T_BINOM, 0},
    {"tbinom", T_BINOM, 0}, {"cdot", T_OP, '*'}, {"times", T_OP, '*'}, {"ast", T_OP, '*'},
    {"div", T_OP, '/'}, {"pm", T_PM, 0}, {"mp", T_PM, 1},
    {"le", T_REL, VR_LE}, {"leq", T_REL, VR_LE}, {"leqslant", T_REL, VR_LE},
    {"ge", T_REL, VR_GE}, {"geq", T_REL, VR_GE}, {"geqslant", T_REL, VR_GE},
    {"lt", T_REL, VR_LT}, {"gt", T_REL, VR_GT}, {"ne", T_REL, VR_NE}, {"neq", T_REL, VR_NE},
    {"in", T_REL, VR_IN}, {"approx", T_REL, VR_APPROX}, {"colon", T_OP, ':'},
    {"setminus", T_SETMINUS, 0}, {"backslash", T_SETMINUS, 0}, {"cup", T_CUP, 0}, {"infty", T_CONST, VC_INF}, {"infinity", T_CONST, VC_INF}, {"infin", T_CONST, VC_INF},
    {"pi", T_CONST, VC_PI}, {"emptyset", T_CONST, VC_EMPTY}, {"varnothing", T_CONST, VC_EMPTY},
    {"sin", T_FUNC, VF_SIN}, {"cos", T_FUNC, VF_COS}, {"tan", T_FUNC, VF_TAN},
    {"sec", T_FUNC, VF_SEC}, {"csc", T_FUNC, VF_CSC}, {"cot", T_FUNC, VF_COT},
    {"arcsin", T_FUNC, VF_ASIN}, {"arccos", T_FUNC, VF_ACOS}, {"arctan", T_FUNC, VF_ATAN},
    {"sinh", T_FUNC, VF_SINH}, {"cosh", T_FUNC, VF_COSH}, {"tanh", T_FUNC, VF_TANH},
    {"ln", T_FUNC, VF_LN}, {"log", T_FUNC, VF_LOG}, {"exp", T_FUNC, VF_EXP},
    {"lfloor", T_OP, 'F'}, {"rfloor", T_OP, 'f'}, {"lceil", T_OP, 'C'}, {"rceil", T_OP, 'c'},
    {"lvert", T_OP, '|'}, {"rvert", T_OP, '|'}, {"vert", T_OP, '|'}, {"mid", T_OP, '|'},
    {"lbrace", T_SETOPEN, 0}, {"rbrace", T_SETCLOSE, 0}, {"{", T_SETOPEN, 0}, {"}", T_SETCLOSE, 0},
    {"%", T_PERCENT, 0}, {"$", T_SKIP, 0}, {",", T_SKIP, 0}, {";", T_SKIP, 0}, {":", T_SKIP, 0},
    {"!", T_SKIP, 0}, {" ", T_SKIP, 0}, {">", T_SKIP, 0}, {"(", T_SKIP, 0}, {")", T_SKIP, 0},
    {"[", T_SKIP, 0}, {"]", T_SKIP, 0}, {"|", T_OP, '|'}, {"\\", T_ROWSEP, 0},
    {NULL, 0, 0},
};

static const char *const GREEK[] = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau",
    "upsilon", "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta",
    "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega", NULL,
};
static const char *const TEXTCMD[] = {
    "text", "textbf", "textit", "textrm", "textnormal", "mathrm", "mathit", "mbox", "hbox",
    "textsf", "mathsf", "operatorname", "textup", "mathtt", "texttt", NULL,
};
static const char *const MATRIX_ENVS[] = {
    "pmatrix", "bmatrix", "Bmatrix", "matrix", "smallmatrix", "array", NULL,
};

// --- lexer state ---------------------------------------------------------------

typedef struct frame { const char *s; size_t i, n; bool text; } frame;

typedef struct lexer {
    frame fr[6];
    int nf;
    vtok *toks;
    int nt, cap;
    bool bad;
    int envs;               // open \\begin{..} environments
    int depth;              // open ( [ \{ seen: commas there separate items
    size_t single_digit[8]; // positions (in the base frame) of single-digit args
    int nsd;
} lexer;

static bool in_list(const char *const *l, const char *s, size_t n) {
    for (int i = 0; l[i]; i++)
        if (strlen(l[i]) == n && !memcmp(l[i], s, n)) return true;
    return false;
}

static vtok *emit(lexer *L, int type) {
    if (L->nt >= L->cap) { L->bad = true; return NULL; }
    vtok *t = &L->toks[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = type;
    return t;
}

static const word *find_word(const char *s, size_t n) {
    char low[24];
    if (n >= sizeof low) return NULL;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)s[i]);
    for (int i = 0; WORDS[i].w; i++)
        if (strlen(WORDS[i].w) == n && !memcmp(WORDS[i].w, low, n)) {
            // case matters for one-letter-ish math names: only lowercase words
            if (WORDS[i].tok == T_FUNC && memcmp(WORDS[i].w, s, n)) return NULL;
            return &WORDS[i];
        }
    return NULL;
}

// Position after a brace group starting at s[i] == '{' (raw match), or n.
static size_t skip_group(const char *s, size_t i, size_t n) {
    int d = 0;
    for (; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) { i++; continue; }
        if (s[i] == '{') d++;
        else if (s[i] == '}' && --d == 0) return i + 1;
    }
    return n;
}

// \frac34, \sqrt2: TeX takes one character per argument. Record the digit
// positions so the number lexer stops after one digit there.
static void mark_args(lexer *L, const char *s, size_t i, size_t n, int nargs) {
    for (int a = 0; a < nargs && i < n; a++) {
        while (i < n && s[i] == ' ') i++;
        if (i >= n) return;
        if (s[i] == '{') { i = skip_group(s, i, n); continue; }
        if (s[i] == '[' && nargs == 1) return;
        if (isdigit((unsigned char)s[i])) {
            if (L->nf == 1 && L->nsd < 8) L->single_digit[L->nsd++] = i;
            i++;
            continue;
        }
        if (s[i] == '\\') {
            i++;
            while (i < n && isalpha((unsigned char)s[i])) i++;
            continue;
        }
        i++;
    }
}

static bool is_single_digit(const lexer *L, size_t i) {
    if (L->nf != 1) return false;
    for (int k = 0; k < L->nsd; k++) if (L->single_digit[k] == i) return true;
    return false;
}


// --- numbers --------------------------------------------------------------------------

void vlex_set_int(vtok *t, long v) {
    t->type = T_NUM;
    t->q.n = v; t->q.d = 1;
    t->d = (double)v;
    t->flags = NF_EXACT | NF_INTLIT;
    snprintf(t->txt, sizeof t->txt, "%ld", v);
}

// Thousands separator at s[j]: returns the index after it, or 0.
static size_t thousands_sep(const lexer *L, const char *s, size_t j, size_t n) {
    if (j + 2 < n && s[j] == ',' && s[j + 1] == '\\' && s[j + 2] == '!') {
        j += 3;
        while (j < n && s[j] == ' ') j++;
        return j;
    }
    if (j + 2 < n && s[j] == '{' && s[j + 1] == ',' && s[j + 2] == '}') return j + 3;
    if (j < n && s[j] == ',' && L->depth == 0) return j + 1;
    if (j + 1 < n && s[j] == '\\' && (s[j + 1] == ',' || s[j + 1] == ' ' || s[j + 1] == '!')) return j + 2;
    if (j < n && s[j] == ' ') return j + 1;
    return 0;
}

static bool three_digits(const char *s, size_t j, size_t n) {
    return j + 3 <= n && isdigit((unsigned char)s[j]) && isdigit((unsigned char)s[j + 1]) &&
           isdigit((unsigned char)s[j + 2]) && (j + 3 == n || !isdigit((unsigned char)s[j + 3]));
}

// Exact value of digits (as integer) / 10^scale; false on overflow.
static bool digits_rat(const char *dg, int nd, int scale, vrat *out) {
    i128 m = 0;
    for (int k = 0; k < nd; k++) {
        if (m > ((i128)1 << 120) / 10) return false;
        m = m * 10 + (dg[k] - '0');
    }
    vrat p;
    if (!vrat_pow((vrat){10, 1}, scale, &p)) return false;
    return vrat_div((vrat){m, 1}, p, out);
}

// After the fraction digits: \overline{R} or a trailing \ldots with a period.
// Sets *rep to the repeating block length (0 if none) and consumes the marker.
static int repeat_block(const char *s, size_t *pi, size_t n, char *fd, int *nfd) {
    size_t i = *pi, j = i;
    while (j < n && s[j] == ' ') j++;
    if (j + 9 < n && !memcmp(s + j, "\\overline", 9)) {
        size_t k = j + 9;
        while (k < n && s[k] == ' ') k++;
        bool br = k < n && s[k] == '{';
        if (br) k++;
        int r = 0;
        while (k < n && isdigit((unsigned char)s[k]) && *nfd < 60) { fd[(*nfd)++] = s[k++]; r++; if (!br) break; }
        if (br) { if (k < n && s[k] == '}') k++; else return 0; }
        if (r == 0) return 0;
        *pi = k;
        return r;
    }
    size_t mk = 0;
    if (j + 6 <= n && !memcmp(s + j, "\\ldots", 6)) mk = 6;
    else if (j + 5 <= n && !memcmp(s + j, "\\dots", 5)) mk = 5;
    else if (j + 6 <= n && !memcmp(s + j, "\\cdots", 6)) mk = 6;
    else if (j + 3 <= n && !memcmp(s + j, "...", 3)) mk = 3;
    if (!mk) return 0;
    for (int p = 1; 2 * p <= *nfd; p++) {
        bool ok = true;
        for (int k = *nfd - p; k < *nfd; k++) if (fd[k] != fd[k - p]) { ok = false; break; }
        if (!ok) continue;
        *pi = j + mk;
        while (*pi < n && s[*pi] == '.') (*pi)++;
        // strip all but one copy of the block from the digits
        int keep = *nfd - p;
        while (keep - p >= 0 && !memcmp(fd + keep - p, fd + keep, (size_t)p)) keep -= p;
        memmove(fd + keep, fd + *nfd - p, (size_t)p);
        *nfd = keep + p;
        return p;
    }
    return 0;
}

// The exact value of a number token (t->q, NF_EXACT) when it fits 128-bit
// rationals, else only its double: I.B(R) = IB/10^|B| + R/((10^|R|-1) 10^|B|).
static void number_value(vtok *t, const char *id, int ni, const char *fd, int nfd, int rep, bool sci, long ex, bool ok) {
    char all[130];
    memcpy(all, id, (size_t)ni);
    memcpy(all + ni, fd, (size_t)nfd);
    vrat q;
    if (ok && rep) {
        vrat a, b, den;
        ok = digits_rat(all, ni + nfd - rep, nfd - rep, &a) && digits_rat(all + ni + nfd - rep, rep, 0, &b) &&
             vrat_pow((vrat){10, 1}, rep, &den) && vrat_add(den, (vrat){-1, 1}, &den) &&
             vrat_div(b, den, &b) && vrat_pow((vrat){10, 1}, nfd - rep, &den) &&
             vrat_div(b, den, &b) && vrat_add(a, b, &q);
    } else if (ok) {
        ok = digits_rat(all, ni + nfd, nfd, &q);
        if (ok && sci) {
            vrat p;
            ok = ex > -60 && ex < 60 && vrat_pow((vrat){10, 1}, ex, &p) && vrat_mul(q, p, &q);
        }
    }
    if (ok) { t->q = q; t->flags |= NF_EXACT; t->d = vrat_to_double(q); }
    else {
        char buf[160];
        snprintf(buf, sizeof buf, "%.*s.%.*se%ld", ni, id, nfd, fd, ex);
        t->d = strtod(buf, NULL);
    }
}

static void lex_number(lexer *L, frame *f) {
    const char *s = f->s;
    size_t n = f->n, i = f->i;
    char id[64], fd[64];
    int ni = 0, nfd = 0, rep = 0;
    long ex = 0;
    bool point = false, sci = false, ok = true;
    if (is_single_digit(L, i)) id[ni++] = s[i++];
    else {
        while (i < n && isdigit((unsigned char)s[i])) { if (ni < 60) id[ni++] = s[i]; else ok = false; i++; }
        if (ni > 0 && ni <= 3) {
            for (;;) {
                size_t j = thousands_sep(L, s, i, n);
                if (!j || !three_digits(s, j, n)) break;
                if (ni + 3 >= 60) { ok = false; break; }
                memcpy(id + ni, s + j, 3);
                ni += 3;
                i = j + 3;
            }
        }
        if (i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
            point = true;
            i++;
            while (i < n && isdigit((unsigned char)s[i])) { if (nfd < 60) fd[nfd++] = s[i]; else ok = false; i++; }
            rep = repeat_block(s, &i, n, fd, &nfd);
        } else if (i < n && s[i] == '.' && ni > 0) {
            size_t j = i + 1; // "0.\overline{3}"
            int r = repeat_block(s, &j, n, fd, &nfd);
            if (r && j > i + 1 && s[i + 1] != ' ') { point = true; rep = r; i = j; }
        }
        if (i + 1 < n && (s[i] == 'e' || s[i] == 'E')) {
            size_t j = i + 1;
            bool neg = false;
            if (j < n && (s[j] == '+' || s[j] == '-')) { neg = s[j] == '-'; j++; }
            if (j < n && isdigit((unsigned char)s[j])) {
                size_t k = j;
                long e = 0;
                while (k < n && isdigit((unsigned char)s[k])) { if (e < 100000) e = e * 10 + (s[k] - '0'); k++; }
                if (k >= n || !isalpha((unsigned char)s[k])) { sci = true; ex = neg ? -e : e; i = k; }
            }
        }
    }
    size_t st = f->i;
    f->i = i;
    vtok *t = emit(L, T_NUM);
    if (!t) return;
    t->src = s + st;
    t->srclen = (int)(i - st);
    int nid = ni;
    if (ni >= (int)sizeof t->txt) nid = (int)sizeof t->txt - 1;
    memcpy(t->txt, id, (size_t)nid);
    t->txt[nid] = 0;
    t->ndec = (int16_t)(rep ? 0 : nfd);
    int sig = 0; bool lead = true;
    for (int k = 0; k < ni + nfd; k++) {
        char c = k < ni ? id[k] : fd[k - ni];
        if (lead && c == '0') continue;
        lead = false;
        sig++;
    }
    t->sig = (int16_t)sig;
    number_value(t, id, ni, fd, nfd, rep, sci, ex, ok);
    if (rep) t->flags |= NF_REPEAT;
    else if (point) t->flags |= NF_DECIMAL;
    if (!point && !sci && !rep) t->flags |= NF_INTLIT;
    if (sci && !point) t->flags |= NF_DECIMAL;
}

// --- words and commands ------------------------------------------------------------

static void lex_word(lexer *L, frame *f, size_t st, size_t en) {
    const char *s = f->s + st;
    size_t n = en - st;
    const word *w = find_word(s, n);
    if (w && w->tok == T_UNIT && !strcmp(w->unit, "cent") && L->nt > 0 && L->toks[L->nt - 1].type == T_UNIT &&
        !strcmp(L->toks[L->nt - 1].txt, "/")) { // "per cent" is a percent, not a unit per cent
        L->toks[L->nt - 1].type = T_PERCENT;
        L->toks[L->nt - 1].txt[0] = 0;
        return;
    }
    if (w && !(n == 1)) {
        if (w->tok == T_SKIP) return;
        vtok *t = emit(L, w->tok);
        if (!t) return;
        t->op = w->op;
        if (w->tok == T_NUM) { vlex_set_int(t, w->op); }
        if (w->tok == T_UNIT) snprintf(t->txt, sizeof t->txt, "%s", w->unit);
        return;
    }
    if (f->text || n > 3) {
        // a run of words becomes one text token
        if (L->nt > 0 && L->toks[L->nt - 1].type == T_TEXT && L->toks[L->nt - 1].joinable) {
            vtok *t = &L->toks[L->nt - 1];
            size_t k = strlen(t->txt);
            if (k + 1 + n < sizeof t->txt) {
                t->txt[k] = ' ';
                for (size_t i = 0; i < n; i++) t->txt[k + 1 + i] = (char)tolower((unsigned char)s[i]);
                t->txt[k + 1 + n] = 0;
            } else L->bad = true;
            return;
        }
        vtok *t = emit(L, T_TEXT);
        if (!t) return;
        if (n >= sizeof t->txt) { L->bad = true; return; }
        for (size_t i = 0; i < n; i++) t->txt[i] = (char)tolower((unsigned char)s[i]);
        t->txt[n] = 0;
        t->joinable = f->text;
        return;
    }
    for (size_t i = 0; i < n; i++) { // short run: a product of one-letter names
        vtok *t;
        if (s[i] == 'e' || s[i] == 'i') { t = emit(L, T_CONST); if (t) t->op = s[i] == 'e' ? VC_E : VC_I; }
        else { t = emit(L, T_VAR); if (t) { t->txt[0] = s[i]; t->txt[1] = 0; } }
    }
}

// Unit symbols that only count inside \text{}/\mathrm{} after a value (one
// letter alone would be a variable): "m/s", "kg m^2", "km/h".
static const char *const UNIT_SYMS[] = {"m", "s", "g", "h", "kg", "cm", "mm", "km", "min", "N", "J", "W", "Pa", "L",
                                        "mL", "ml", "in", "ft", "yd", "mi", "lb", "oz", "K", "Hz", "mol", "rad",
                                        "kW", "kWh", "V", "cal", "kcal", "hr", "sec", "mg", "dm", NULL};

// Is s[a, b) a unit expression ("m/s", "m/s^2", "kg m^2", "meters per second")?
// Writes its canonical form (no spaces, atoms joined by / or *, powers ^N) into out.
static bool unit_expr(const char *s, size_t a, size_t b, char *out, size_t cap) {
    size_t o = 0;
    int atoms = 0;
    char join = 0, pending = 0; // pending: "square"/"cubic" before an atom, its power
    for (size_t i = a; i < b;) {
        if (s[i] == ' ' || s[i] == '~') { i++; continue; }
        if (s[i] == '/' || s[i] == '*') { if (!atoms || join) return false; join = s[i++]; continue; }
        if (!strncmp(s + i, "\\cdot", 5)) { if (!atoms || join) return false; join = '*'; i += 5; continue; }
        if (s[i] == '^') { // a power of the last atom: ^2, ^{3}
            if (!atoms || join) return false;
            size_t j = i + 1;
            bool br = j < b && s[j] == '{';
            if (br) j++;
            size_t d = j;
            while (j < b && isdigit((unsigned char)s[j])) j++;
            if (j == d || j - d > 2 || (br && (j >= b || s[j] != '}'))) return false;
            if (o + 2 + (j - d) >= cap) return false;
            out[o++] = '^';
            memcpy(out + o, s + d, j - d);
            o += j - d;
            i = j + br;
            continue;
        }
        if (!isalpha((unsigned char)s[i])) return false;
        size_t j = i;
        while (j < b && isalpha((unsigned char)s[j])) j++;
        const char *u = NULL;
        for (int k = 0; UNIT_SYMS[k] && !u; k++)
            if (strlen(UNIT_SYMS[k]) == j - i && !memcmp(UNIT_SYMS[k], s + i, j - i)) u = UNIT_SYMS[k];
        const word *w = u ? NULL : find_word(s + i, j - i);
        if (!u && w && w->tok == T_UNIT && w->unit && !strcmp(w->unit, "/")) { // "per"
            if (!atoms || join) return false;
            join = '/';
            i = j;
            continue;
        }
        if (!u && w && w->tok == T_UNIT && w->unit && (!strcmp(w->unit, "sq") || !strcmp(w->unit, "cu"))) {
            if (pending) return false;
            pending = w->unit[0] == 's' ? '2' : '3';
            i = j;
            continue;
        }
        if (!u && w && w->tok == T_UNIT && w->unit && *w->unit) u = w->unit;
        if (!u) return false;
        if (atoms && !join) join = '*'; // "kg m": a product
        size_t ul = strlen(u);
        if (o + ul + 2 >= cap) return false;
        if (join) out[o++] = join;
        memcpy(out + o, u, ul);
        o += ul;
        if (pending) { out[o++] = '^'; out[o++] = pending; pending = 0; }
        atoms++;
        join = 0;
        i = j;
    }
    out[o] = 0;
    return atoms > 0 && !join && !pending;
}

// A \text{...} group: math inside is lexed as math, words as words.
static void lex_textgroup(lexer *L, frame *f) {
    size_t st = f->i, en = skip_group(f->s, f->i, f->n);
    size_t cs = st + 1, ce = en > cs && f->s[en - 1] == '}' ? en - 1 : en;
    f->i = en;
    if (L->nf >= 6) { L->bad = true; return; }
    bool text = false;
    for (size_t i = cs; i < ce;) {
        if (isalpha((unsigned char)f->s[i])) {
            size_t j = i;
            while (j < ce && isalpha((unsigned char)f->s[j])) j++;
            if (j - i >= 2 && !find_word(f->s + i, j - i)) text = true;
            i = j;
        } else i++;
    }
    size_t a = cs, b = ce;
    while (a < b && f->s[a] == ' ') a++;
    while (b > a && f->s[b - 1] == ' ') b--;
    if (b == a + 1 && strchr("mgsh", f->s[a]) && L->nt > 0 && L->toks[L->nt - 1].type == T_NUM) {
        vtok *t = emit(L, T_UNIT); // 5\,\text{m}: a one-letter unit after a number
        if (t) { t->txt[0] = f->s[a]; t->txt[1] = 0; }
        return;
    }
    // a unit made of symbols after a value, 9.8\ \text{m/s}^2, or the next part of
    // one, \mathrm{m}/\mathrm{s}^{2}: one unit token (its power is added by the parser)
    char u[48];
    const vtok *p1 = L->nt > 0 ? &L->toks[L->nt - 1] : NULL, *p2 = L->nt > 1 ? &L->toks[L->nt - 2] : NULL;
    if (p1 && unit_expr(f->s, a, b, u, sizeof u)) {
        if (p1->type == T_OP && p1->op == '/' && p2 && p2->type == T_UNIT && strlen(p2->txt) + strlen(u) + 2 < sizeof p2->txt) {
            vtok *t = &L->toks[L->nt - 2];
            strcat(t->txt, "/");
            strcat(t->txt, u);
            L->nt--; // the '/' is part of the unit
            return;
        }
        if (p1->type == T_NUM || p1->type == T_CONST || p1->type == T_UNIT) {
            vtok *t = emit(L, T_UNIT);
            if (t) snprintf(t->txt, sizeof t->txt, "%s", u);
            return;
        }
    }
    frame nf = {f->s, cs, ce, text};
    L->fr[L->nf++] = nf;
}

static void lex_command(lexer *L, frame *f) {
    const char *s = f->s;
    size_t i = f->i + 1, n = f->n;
    // "\\frac" (an escaped backslash copied from a string literal) outside a matrix
    if (i + 1 < n && s[i] == '\\' && isalpha((unsigned char)s[i + 1]) && L->envs == 0) i++;
    if (i >= n) { f->i = i; return; }
    size_t st = i;
    if (isalpha((unsigned char)s[i])) while (i < n && isalpha((unsigned char)s[i])) i++;
    else i++;
    size_t len = i - st;
    f->i = i;
    const char *name = s + st;
    if (in_list(TEXTCMD, name, len)) {
        while (f->i < n && s[f->i] == ' ') f->i++;
        if (f->i < n && s[f->i] == '{') lex_textgroup(L, f);
        return;
    }
    if (len == 6 && !memcmp(name, "mathbb", 6)) {
        size_t j = f->i;
        while (j < n && s[j] == ' ') j++;
        if (j + 2 < n && s[j] == '{' && s[j + 1] == 'R' && s[j + 2] == '}') { f->i = j + 3; emit(L, T_REALS); }
        else L->bad = true;
        return;
    }
    if ((len == 5 && !memcmp(name, "begin", 5)) || (len == 3 && !memcmp(name, "end", 3))) {
        size_t j = f->i;
        while (j < n && s[j] == ' ') j++;
        if (j >= n || s[j] != '{') { L->bad = true; return; }
        size_t e = skip_group(s, j, n);
        if (e > n || e < j + 2 || !in_list(MATRIX_ENVS, s + j + 1, e - j - 2)) { L->bad = true; return; }
        f->i = e;
        if (name[0] == 'b') {
            L->envs++;
            emit(L, T_BEGIN);
            if (e - j - 2 == 5 && !memcmp(s + j + 1, "array", 5)) { // column spec
                while (f->i < n && s[f->i] == ' ') f->i++;
                if (f->i < n && s[f->i] == '{') f->i = skip_group(s, f->i, n);
            }
        } else { L->envs--; emit(L, T_ENDENV); }
        return;
    }
    if (in_list(GREEK, name, len)) {
        vtok *t = emit(L, T_VAR);
        if (t && len + 1 < sizeof t->txt) { t->txt[0] = '\\'; memcpy(t->txt + 1, name, len); t->txt[len + 1] = 0; }
        return;
    }
    if ((len == 5 && !memcmp(name, "ldots", 5)) || (len == 4 && !memcmp(name, "dots", 4)) ||
        (len == 5 && !memcmp(name, "cdots", 5))) { emit(L, T_DOTS); return; }
    for (int k = 0; CMDS[k].name; k++) {
        if (strlen(CMDS[k].name) != len || memcmp(CMDS[k].name, name, len)) continue;
        if (CMDS[k].tok == T_SKIP) return;
        vtok *t = emit(L, CMDS[k].tok);
        if (t) t->op = CMDS[k].op;
        if (CMDS[k].tok == T_SETOPEN) L->depth++;
        if (CMDS[k].tok == T_SETCLOSE) L->depth--;
        if (CMDS[k].tok == T_FRAC || CMDS[k].tok == T_BINOM) mark_args(L, s, f->i, n, 2);
        if (CMDS[k].tok == T_SQRT) mark_args(L, s, f->i, n, 1);
        return;
    }
    // A_{\max}, x_\min: a word command in a subscript is part of a name
    bool sub = (st >= 2 && s[st - 2] == '_') || (st >= 3 && s[st - 2] == '{' && s[st - 3] == '_');
    if (sub && len < 20) {
        vtok *t = emit(L, T_VAR);
        if (t) { t->txt[0] = '\\'; memcpy(t->txt + 1, name, len); t->txt[len + 1] = 0; }
        return;
    }
    L->bad = true;
}

// '^' followed by \circ or {\circ}: a degree mark, dropped. Returns true if skipped.
static bool skip_degree(frame *f) {
    const char *s = f->s;
    size_t j = f->i + 1, n = f->n;
    while (j < n && s[j] == ' ') j++;
    if (j + 5 <= n && !memcmp(s + j, "\\circ", 5)) { f->i = j + 5; return true; }
    if (j + 7 <= n && !memcmp(s + j, "{\\circ}", 7)) { f->i = j + 7; return true; }
    if (j + 8 <= n && !memcmp(s + j, "{ \\circ}", 8)) { f->i = j + 8; return true; }
    return false;
}

static void lex_symbol(lexer *L, frame *f) {
    const char *s = f->s;
    char c = s[f->i];
    char d = f->i + 1 < f->n ? s[f->i + 1] : 0;
    f->i++;
    vtok *t;
    switch (c) {
    case '<': t = emit(L, T_REL); if (t) t->op = d == '=' ? VR_LE : VR_LT; if (d == '=') f->i++; return;
    case '>': t = emit(L, T_REL); if (t) t->op = d == '=' ? VR_GE : VR_GT; if (d == '=') f->i++; return;
    case '=': t = emit(L, T_REL); if (t) t->op = VR_EQ; return;
    case '!':
        if (d == '=') { f->i++; t = emit(L, T_REL); if (t) t->op = VR_NE; return; }
        t = emit(L, T_OP); if (t) t->op = '!'; return;
    case '%': emit(L, T_PERCENT); return;
    case '$': case '~': case '\'': case '"': return;
    case '.':
        if (d == '.' ) { while (f->i < f->n && s[f->i] == '.') f->i++; emit(L, T_DOTS); }
        return;
    case '^':
        f->i--;
        if (skip_degree(f)) return;
        f->i++;
        t = emit(L, T_OP); if (t) t->op = '^'; return;
    case '(': case '[': L->depth++; t = emit(L, T_OP); if (t) t->op = c; return;
    case ')': case ']': L->depth--; t = emit(L, T_OP); if (t) t->op = c; return;
    case '+': case '-': case '*': case '/': case '_':
    case '{': case '}': case ',': case ';': case '|': case '&': case ':':
        t = emit(L, T_OP); if (t) t->op = c; return;
    default:
        L->bad = true;
    }
}

int vlex(const char *s, size_t n, vtok *toks, int cap) {
    lexer L;
    memset(&L, 0, sizeof L);
    L.toks = toks;
    L.cap = cap;
    L.fr[0] = (frame){s, 0, n, false};
    L.nf = 1;
    while (L.nf > 0 && !L.bad) {
        frame *f = &L.fr[L.nf - 1];
        if (f->i >= f->n) { L.nf--; if (L.nf > 0 && L.nt > 0) L.toks[L.nt - 1].joinable = false; continue; }
        char c = f->s[f->i];
        if (isspace((unsigned char)c)) { f->i++; continue; }
        if (isdigit((unsigned char)c) || (c == '.' && f->i + 1 < f->n && isdigit((unsigned char)f->s[f->i + 1]))) {
            lex_number(&L, f);
            continue;
        }
        if (isalpha((unsigned char)c)) {
            size_t j = f->i;
            while (j < f->n && isalpha((unsigned char)f->s[j])) j++;
            lex_word(&L, f, f->i, j);
            f->i = j;
            continue;
        }
        if (c == '\\') { lex_command(&L, f); continue; }
        lex_symbol(&L, f);
    }
    if (L.bad) return -1;
    vtok *e = emit(&L, T_END);
    if (!e) return -1;
    return L.nt;
}
