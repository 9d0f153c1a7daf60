/*
 * recjson.h - records <-> JSON text (one object per record), the format of
 * `skpo-cat` and `skpo-cat --pack`. Documented in docs/records.md.
 *
 * Record -> JSON
 *   str -> string; int -> number; float -> number that always has a '.' or an
 *   exponent (so it comes back as a float), shortest text that reads back to
 *   the same float32/float64; non-finite floats -> the strings "NaN",
 *   "Infinity", "-Infinity"; bool, nil -> true, false, null. Schema int32 /
 *   float32 bins (tokens, logp, ...) -> JSON arrays; any other bin ->
 *   {"$bin":"<base64>"}; a str that is not valid UTF-8 (only possible in a
 *   field outside the schema) -> {"$str":"<base64>"}. Nested maps and arrays
 *   -> JSON objects and arrays (non-string map keys are written as their JSON
 *   text; ext values as {"$ext":[type,"<base64>"]}).
 * JSON -> record
 *   Schema fields get their schema type: numbers for float fields become
 *   float64, arrays for int32/float32 fields become bins ("NaN", "Infinity",
 *   "-Infinity" are accepted where a float is expected). Other fields: integers
 *   stay ints, reals become float64, {"$bin"}/{"$str"}/{"$ext"} are decoded,
 *   objects and arrays become nested msgpack. A JSON round trip therefore keeps
 *   every value, but a float32 outside the schema comes back as float64.
 */
#ifndef SKPO_RECJSON_H
#define SKPO_RECJSON_H

#include "record/record.h"

// A growable text buffer (not NUL-terminated until skpo_jbuf_cstr).
typedef struct skpo_jbuf {
    char *p;
    size_t n, cap;
} skpo_jbuf;

void skpo_jbuf_put(skpo_jbuf *b, const void *s, size_t n);
const char *skpo_jbuf_cstr(skpo_jbuf *b);
void skpo_jbuf_free(skpo_jbuf *b);

// Append the JSON object for r (no newline). fields: only these keys, in this
// order (absent ones skipped); NULL = every field in record order.
void skpo_rec_to_json(const skpo_rec *r, const char *const *fields, size_t nfields, skpo_jbuf *out);
// Append one value as JSON, with the schema's reading of `key` (for bins).
void skpo_value_to_json(const skpo_value *v, skpo_jbuf *out);
// Append a float the way records print them ("NaN" etc. as JSON strings).
void skpo_json_float(double f, bool is_f32, skpo_jbuf *out);
// Append a JSON string literal for s[0..n) (which must be valid UTF-8).
void skpo_json_str(const char *s, size_t n, skpo_jbuf *out);

// Parse one JSON object (len bytes, need not be NUL-terminated) into r
// (cleared first) and validate it against the schema. Errors name the field.
skpo_status skpo_rec_from_json(const char *text, size_t len, skpo_rec *r, skpo_err *err);

#endif
