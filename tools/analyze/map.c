/*
 * map.c - an open-addressing string map (FNV-1a, linear probing, load <= 1/2)
 * for grouping records by id without relying on input order.
 */
#include "analyze.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

size_t strmap_get(const strmap *m, const char *key) {
    if (!m->cap) return (size_t)-1;
    for (size_t i = fnv1a(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return (size_t)-1;
        if (!strcmp(m->keys[i], key)) return m->vals[i];
    }
}

static void insert(char **keys, size_t *vals, size_t cap, char *key, size_t val) {
    size_t i = fnv1a(key) & (cap - 1);
    while (keys[i]) i = (i + 1) & (cap - 1);
    keys[i] = key;
    vals[i] = val;
}

void strmap_put(strmap *m, const char *key, size_t val) {
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        char **keys = skpo_xcalloc(cap, sizeof *keys);
        size_t *vals = skpo_xcalloc(cap, sizeof *vals);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) insert(keys, vals, cap, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    for (size_t i = fnv1a(key) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], key)) { m->vals[i] = val; return; }
    insert(m->keys, m->vals, m->cap, skpo_xstrdup(key), val);
    m->n++;
}

void strmap_free(strmap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
