/*
 * verify_cases.c - loader for verifier case files (JSON lines of flat objects:
 * "id", "gold", "response", "expect", "kind", other keys ignored). A tiny JSON
 * reader of its own, not jansson: the case files hold lone UTF-16 surrogate
 * escapes on purpose, which strict JSON libraries reject; here they decode to
 * their 3-byte (invalid UTF-8) form so the verifier sees hostile bytes.
 */
#include "verify/verify.h"
#include "base/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct jbuf { char *s; size_t n, cap; } jbuf;

static void jput(jbuf *b, const void *p, size_t k) {
    if (b->n + k + 1 > b->cap) skpo_xgrow((void **)&b->s, &b->cap, b->n + k + 1, 1);
    memcpy(b->s + b->n, p, k);
    b->n += k;
    b->s[b->n] = 0;
}

// utf8proc_encode_char writes a surrogate (U+D800..U+DFFF) as its three
// bytes, which put_cp's callers rely on; c is at most U+10FFFF here.
static void put_cp(jbuf *b, uint32_t c) {
    utf8proc_uint8_t o[4];
    jput(b, o, (size_t)utf8proc_encode_char((utf8proc_int32_t)c, o));
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

// Parse a JSON string at *p (at the opening quote) into b. Returns 0 or -1.
static int jstring(const char **p, const char *end, jbuf *b) {
    const char *s = *p + 1;
    b->n = 0;
    jput(b, "", 0);
    while (s < end && *s != '"') {
        if (*s != '\\') { jput(b, s, 1); s++; continue; }
        if (s + 1 >= end) return -1;
        char e = s[1];
        s += 2;
        switch (e) {
        case '"': jput(b, "\"", 1); break;
        case '\\': jput(b, "\\", 1); break;
        case '/': jput(b, "/", 1); break;
        case 'b': jput(b, "\b", 1); break;
        case 'f': jput(b, "\f", 1); break;
        case 'n': jput(b, "\n", 1); break;
        case 'r': jput(b, "\r", 1); break;
        case 't': jput(b, "\t", 1); break;
        case 'u': {
            uint32_t v, w;
            if (end - s < 4 || hex4(s, &v)) return -1;
            s += 4;
            if (v >= 0xD800 && v < 0xDC00 && end - s >= 6 && s[0] == '\\' && s[1] == 'u' && !hex4(s + 2, &w) &&
                w >= 0xDC00 && w < 0xE000) {
                v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                s += 6;
            }
            put_cp(b, v); // a lone surrogate becomes invalid UTF-8, on purpose
            break;
        }
        default: return -1;
        }
    }
    if (s >= end) return -1;
    *p = s + 1;
    return 0;
}

static void skip_ws(const char **p, const char *end) {
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r')) (*p)++;
}

static int parse_line(const char *p, const char *end, skpo_verify_case *c) {
    jbuf key = {0}, val = {0};
    int rc = -1;
    skip_ws(&p, end);
    if (p >= end || *p++ != '{') goto out;
    for (;;) {
        skip_ws(&p, end);
        if (p < end && *p == '}') { rc = 0; break; }
        if (p >= end || *p != '"' || jstring(&p, end, &key)) goto out;
        skip_ws(&p, end);
        if (p >= end || *p++ != ':') goto out;
        skip_ws(&p, end);
        if (p < end && *p == '"') {
            if (jstring(&p, end, &val)) goto out;
            char *copy = skpo_xmalloc(val.n + 1);
            memcpy(copy, val.s, val.n + 1);
            char **dst = !strcmp(key.s, "id") ? &c->id : !strcmp(key.s, "gold") ? &c->gold :
                         !strcmp(key.s, "response") ? &c->response : !strcmp(key.s, "kind") ? &c->kind :
                         !strcmp(key.s, "pred") ? &c->pred : NULL;
            if (dst) { free(*dst); *dst = copy; } else free(copy);
            if (!strcmp(key.s, "gold")) c->glen = val.n;
            if (!strcmp(key.s, "response")) c->rlen = val.n;
        } else if (end - p >= 4 && !memcmp(p, "true", 4)) { p += 4; if (!strcmp(key.s, "expect")) c->expect = true; }
        else if (end - p >= 5 && !memcmp(p, "false", 5)) { p += 5; if (!strcmp(key.s, "expect")) c->expect = false; }
        else { // numbers and null: skip the token
            while (p < end && *p != ',' && *p != '}') p++;
        }
        skip_ws(&p, end);
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { rc = 0; break; }
        goto out;
    }
out:
    free(key.s);
    free(val.s);
    if (rc == 0 && (!c->id || !c->gold || !c->response)) rc = -1;
    if (rc == 0 && !c->kind) c->kind = skpo_xstrdup("");
    return rc;
}

int skpo_verify_cases_load(const char *path, skpo_verify_case **cases, size_t *n, char *err, size_t errlen) {
    char *data;
    size_t len;
    skpo_err e = {0};
    *cases = NULL;
    *n = 0;
    if (skpo_read_file(path, &data, &len, &e) != SKPO_OK) { snprintf(err, errlen, "%s", e.msg); return -1; }
    size_t cap = 0, line = 0;
    for (const char *p = data, *end = data + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        if (le > p) {
            skpo_xgrow((void **)cases, &cap, *n + 1, sizeof **cases);
            skpo_verify_case *c = &(*cases)[*n];
            memset(c, 0, sizeof *c);
            if (parse_line(p, le, c)) {
                snprintf(err, errlen, "bad case at '%s' line %zu", path, line);
                (*n)++;
                skpo_verify_cases_free(*cases, *n);
                *cases = NULL; *n = 0;
                free(data);
                return -1;
            }
            (*n)++;
        }
        p = le + 1;
    }
    free(data);
    return 0;
}

void skpo_verify_cases_free(skpo_verify_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(cases[i].id); free(cases[i].gold); free(cases[i].pred); free(cases[i].response); free(cases[i].kind);
    }
    free(cases);
}
