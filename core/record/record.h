/*
 * record.h - skpo record streams: the one schema and the one I/O layer.
 *
 * Stream format
 *   A stream is a sequence of zstd frames (concatenation of streams is a valid
 *   stream). Decompressed, it is back-to-back msgpack maps with string keys, one
 *   map per record. `zstd -dc f | msgpack2json -c` works without our tools.
 *   Writers end each frame with a checksum on close and flush (ZSTD_e_flush) at
 *   least every SKPO_FLUSH_RECORDS records or SKPO_FLUSH_MS milliseconds, and on
 *   skpo_writer_flush(), so a consumer in a pipe is never starved.
 *   Every record has a string field `kind`. A tool that writes a stream first
 *   writes a `meta` record carrying `schema` = SKPO_SCHEMA_VERSION; a reader
 *   that meets a meta record of another major version fails naming the stream.
 *
 * Values
 *   Token ids are msgpack bin holding little-endian int32; per-token floats are
 *   bin holding little-endian float32. Other values keep their msgpack type.
 *   Fields and kinds a tool does not know pass through unchanged: nested maps,
 *   arrays and ext values are kept as their exact msgpack bytes (SKPO_V_RAW);
 *   scalars keep their type (float32 stays float32) and are re-encoded in the
 *   shortest form, as every msgpack library writes them.
 *
 * Schema: the table skpo_schema[] (record.c) is the single definition of field
 * names and types; docs/records.md documents it. The reader and the writer
 * validate every schema field's type and that str fields are valid UTF-8.
 */
#ifndef SKPO_RECORD_H
#define SKPO_RECORD_H

#include "base/common.h"

#include <stdbool.h>
#include <stdint.h>

#define SKPO_SCHEMA_VERSION 1
#define SKPO_FLUSH_RECORDS 64
#define SKPO_FLUSH_MS 200
#define SKPO_MAX_RECORD_BYTES ((size_t)1 << 31) // 2 GiB cap per record

// --- schema ----------------------------------------------------------------

// Field value types in the schema.
typedef enum skpo_ftype {
    SKPO_FT_STR = 1,   // msgpack str, valid UTF-8
    SKPO_FT_INT,       // msgpack int
    SKPO_FT_FLOAT,     // msgpack float (32 or 64) or int
    SKPO_FT_BOOL,      // msgpack bool
    SKPO_FT_I32S,      // msgpack bin, little-endian int32 array
    SKPO_FT_F32S,      // msgpack bin, little-endian float32 array
    SKPO_FT_ANY,       // anything (maps/arrays, e.g. `argv`, `messages`)
} skpo_ftype;

typedef struct skpo_field_def {
    const char *name;
    skpo_ftype type;
    const char *doc;
} skpo_field_def;

// NULL-terminated; defined in record.c. Lookup by name (NULL if unknown).
extern const skpo_field_def skpo_schema[];
const skpo_field_def *skpo_schema_find(const char *name);

// Record kinds (values of the `kind` field). Append only.
#define SKPO_KIND_PROMPT "prompt"
#define SKPO_KIND_UP "up"
#define SKPO_KIND_DOWN "down"
#define SKPO_KIND_FULL "full"
#define SKPO_KIND_SELF "self"    // the kept upstream candidate's own whole generation (REWARD_UP=self), not trained
#define SKPO_KIND_META "meta"
#define SKPO_KIND_METRICS "metrics"
#define SKPO_KIND_STATE "state"

// Field names (use these, not string literals, in tools).
#define F_KIND "kind"
#define F_SCHEMA "schema"
#define F_PID "pid"          // str: prompt id (unique in a dataset)
#define F_UID "uid"          // str: unique id of this record
#define F_GID "gid"          // str: group id (downstream: the upstream uid; full: pid+step)
#define F_STEP "step"        // int: training step that produced it
#define F_POLICY "policy"    // str: checkpoint that sampled it
#define F_SEED "seed"        // int: sampler seed of this sequence
#define F_PROMPT "prompt"    // i32s: ids of the conditioning input
#define F_TOKENS "tokens"    // i32s: response ids
#define F_LOGP "logp"        // f32s: behaviour log-prob per response token
#define F_REF_LOGP "ref_logp"// f32s: reference-model log-prob per response token
#define F_OLD_LOGP "old_logp"// f32s: recomputed old-policy log-probs
#define F_PRM_LOGP "prm_logp"// f32s: implicit PRM log-prob per response token (PRIME)
#define F_TEXT "text"        // str: decoded response (prompt records: rendered prompt)
#define F_FINISH "finish"    // str: "stop" | "length"
#define F_PROBLEM "problem"  // str
#define F_ANSWER "answer"    // str: gold answer
#define F_SOURCE "source"    // str: benchmark/dataset name
#define F_REWARD "reward"    // float
#define F_CORRECT "correct"  // bool
#define F_PRED "pred"        // str: extracted answer
#define F_ADV "adv"          // float: advantage
#define F_ADV_TOK "adv_tok"  // f32s: per-token advantage (PRIME); skpo-update uses it instead of adv
#define F_WEIGHT "weight"    // float: phase weight in the loss
#define F_CUT "cut"          // int: planned split position t_q (up records)
#define F_NLL "nll"          // float: mean NLL of the segment (up records)
#define F_DRAW "draw"        // int: position of the prompt in the step's draw (skpo-sample; shards merge in this order)
#define F_SEG_DIV "seg_div"  // float: D of the prompt's stored last segment under the sampling weights (skpo-sample --rescore)
#define F_TOOL "tool"        // str: meta: tool that wrote the stream
#define F_ARGV "argv"        // any: meta: its command line (array of str)
#define F_TIME "time"        // str: meta: UTC start time, ISO 8601
#define F_MODEL "model"      // str: meta: model (checkpoint) the tool used
#define F_SEG_TOKENS "seg_tokens" // i32s: state: last upstream segment of a prompt
#define F_SEG_LOGP "seg_logp"     // f32s: state: its behaviour log-probs
#define F_SEG_PROMPT "seg_prompt" // i32s: state: the prompt ids it was conditioned on
#define F_TASK "task"           // str: reward task of a prompt: math (absent), choice, code
#define F_TESTS "tests"         // str: code: LiveCodeBench input_output JSON {inputs, outputs, fn_name}
#define F_REASON "reason"       // str: choice/code: short reason for the verdict
#define F_TESTS_PASSED "tests_passed" // int: code: tests passed before the first failure
#define F_CATEGORY "category"   // str: benchmark category (MMLU-Pro), skpo-eval groups by it
#define F_DIFFICULTY "difficulty" // str: problem difficulty (LiveCodeBench), skpo-eval groups by it
#define F_REFINE "refine"       // bool: full record that is a Critique-GRPO refinement (skpo-update: shaped loss)
#define F_CRITIQUE_OF "critique_of" // str: critique/refinement records: uid of the direct response they come from
#define F_CRITIQUE "critique"   // str: refinement records: the critique text they were conditioned on
#define F_REWARD_STATUS "reward_status" // str: "timeout" | "error": the verifier gave no verdict (reward = wrong); absent: judged
#define F_RAW_TOKENS "raw_tokens"       // float: metrics (skpo-update): prompt + response tokens given to the passes
#define F_PACKED_TOKENS "packed_tokens" // float: metrics: the tokens computed after packing shared prefixes (model/pack.h)
#define F_SHARED_RATIO "shared_ratio"   // float: metrics: 1 - packed_tokens / raw_tokens
#define F_MICRO_BATCHES "micro_batches" // float: metrics (skpo-update): forward/backward passes of the mini-batch, all ranks

// --- records in memory ---------------------------------------------------------

typedef enum skpo_vtype {
    SKPO_V_NIL = 0,
    SKPO_V_BOOL,
    SKPO_V_INT,   // stored as int64 (uint64 above INT64_MAX is kept as RAW)
    SKPO_V_F32,
    SKPO_V_F64,
    SKPO_V_STR,
    SKPO_V_BIN,
    SKPO_V_RAW,   // any other msgpack value, kept packed
} skpo_vtype;

typedef struct skpo_value {
    char *key;        // NUL-terminated, owned
    skpo_vtype type;
    bool b;
    int64_t i;
    double f;
    char *data;       // STR (NUL-terminated, len excludes NUL), BIN, RAW bytes; owned,
    size_t len;       // malloc'd so int32/float32 arrays are suitably aligned
} skpo_value;

// An ordered map; field order is preserved on output.
typedef struct skpo_rec {
    skpo_value *v;
    size_t n, cap;
} skpo_rec;

void skpo_rec_init(skpo_rec *r);
void skpo_rec_clear(skpo_rec *r);   // remove all fields, keep capacity
void skpo_rec_free(skpo_rec *r);
void skpo_rec_copy(skpo_rec *dst, const skpo_rec *src); // dst must be initialised

// --- typed access (get) ----------------------------------------------------------
// Getters return NULL / false when the field is absent or has another type.

const skpo_value *skpo_rec_get(const skpo_rec *r, const char *key);
const char *skpo_rec_str(const skpo_rec *r, const char *key);             // NUL-terminated
bool skpo_rec_is_kind(const skpo_rec *r, const char *kind);
// Is r a rollout: a finished response to judge (kind down, full or self)? The
// one definition the reward stage and the record filters use.
bool skpo_rec_is_rollout(const skpo_rec *r);
bool skpo_rec_int(const skpo_rec *r, const char *key, int64_t *out);
bool skpo_rec_float(const skpo_rec *r, const char *key, double *out);      // INT, F32, F64
bool skpo_rec_bool(const skpo_rec *r, const char *key, bool *out);
const int32_t *skpo_rec_i32s(const skpo_rec *r, const char *key, size_t *n);
const float *skpo_rec_f32s(const skpo_rec *r, const char *key, size_t *n);

// --- typed access (set) ----------------------------------------------------------
// Setters replace an existing field in place (keeping its position) or append.

void skpo_rec_set_str(skpo_rec *r, const char *key, const char *s);
void skpo_rec_set_strn(skpo_rec *r, const char *key, const char *s, size_t len);
void skpo_rec_set_int(skpo_rec *r, const char *key, int64_t v);
void skpo_rec_set_float(skpo_rec *r, const char *key, double v);  // written as float64
void skpo_rec_set_bool(skpo_rec *r, const char *key, bool v);
void skpo_rec_set_nil(skpo_rec *r, const char *key);
void skpo_rec_set_i32s(skpo_rec *r, const char *key, const int32_t *a, size_t n);
void skpo_rec_set_f32s(skpo_rec *r, const char *key, const float *a, size_t n);
void skpo_rec_set_raw(skpo_rec *r, const char *key, const void *msgpack, size_t len);
void skpo_rec_set_f32(skpo_rec *r, const char *key, float v);     // written as float32
void skpo_rec_set_bin(skpo_rec *r, const char *key, const void *p, size_t len);
// Copy one value (its key and payload) into r, replacing or appending.
void skpo_rec_set_value(skpo_rec *r, const skpo_value *v);
bool skpo_rec_del(skpo_rec *r, const char *key);

// Check schema types and UTF-8 of str fields. Returns SKPO_ETYPE / SKPO_EFORMAT
// with a message naming the field.
skpo_status skpo_rec_validate(const skpo_rec *r, skpo_err *err);
// Strict UTF-8 check (no overlongs, surrogates or code points above U+10FFFF).
bool skpo_utf8_valid(const char *s, size_t n);

// What each tool needs from the records it consumes (needs.c; docs/reliability.md).
// A row applies to records of one of `kinds` (space-separated) when `cond` is
// NULL or one of the conditions the tool says hold; each of `fields` must then
// be present and not nil ("name+": also not empty; "a|b": either). `when` is
// the options under which cond holds in a plain run ("" = the defaults), for
// the generated test (tests/sh/t_needs.sh) and the docs; `note` says more.
typedef struct skpo_need {
    const char *tool, *cond, *when, *kinds, *fields, *note;
} skpo_need;
extern const skpo_need skpo_needs[];   // ends with a row of NULLs

// Check r, record `index` (from 1) of stream `name`, against the rows of
// `tool` (e.g. "skpo-score") whose condition is NULL or in `on` (NULL-ended,
// may be NULL). SKPO_ENOTFOUND with "<kind> record '<uid>' has no '<field>'
// (in '<name>' at record N)" (or "... is nil", "... is empty") on the first
// field missing.
skpo_status skpo_rec_check_needs(const skpo_rec *r, const char *tool, const char *const *on, const char *name,
                                 uint64_t index, skpo_err *err);

// --- reading -----------------------------------------------------------------------

typedef struct skpo_reader skpo_reader;

// Open a path ("-" = stdin). `name` in messages is the path or "stdin".
skpo_status skpo_reader_open(const char *path, skpo_reader **out, skpo_err *err);
skpo_status skpo_reader_open_fd(int fd, const char *name, skpo_reader **out, skpo_err *err);
// Read the next record into r (cleared first). Returns SKPO_OK, SKPO_EOF at a
// clean end, or an error whose message reads
// "<what> in 'NAME' at record N (byte offset B)" with N counted from 1 and B
// the offset in the compressed input where the bad record starts (precisely:
// where the decompress call that produced its first byte began) or where the
// damage is found (corrupt zstd data, truncation). Every record before the
// damage is returned first. Errors: empty input, a truncated frame or record,
// corrupt zstd data or trailing garbage, malformed msgpack, a value that is not
// a map, a non-string or duplicate key, a schema field of the wrong type,
// invalid UTF-8 in a str schema field, a record over SKPO_MAX_RECORD_BYTES, a
// meta record of another schema version. After an error the reader is stuck
// in that error. nil is accepted for every schema field ("not known yet").
skpo_status skpo_reader_next(skpo_reader *rd, skpo_rec *r, skpo_err *err);
uint64_t skpo_reader_count(const skpo_reader *rd);   // records returned so far
// skpo_reader_next, then skpo_rec_check_needs on the record it read.
skpo_status skpo_reader_next_needed(skpo_reader *rd, skpo_rec *r, const char *tool, const char *const *on,
                                    skpo_err *err);
const char *skpo_reader_name(const skpo_reader *rd);
void skpo_reader_close(skpo_reader *rd);

// Convenience: read every record of a file into an array (for small files).
skpo_status skpo_read_all(const char *path, skpo_rec **recs, size_t *n, skpo_err *err);
void skpo_recs_free(skpo_rec *recs, size_t n);
// Convenience: call fn on every record of a file whose kind is `kind` (NULL =
// every record), with the reader's name for messages. Stops at the first
// error, fn's or the reader's, and returns it.
typedef skpo_status (*skpo_rec_fn)(const skpo_rec *r, const char *name, void *ctx, skpo_err *err);
skpo_status skpo_read_each(const char *path, const char *kind, skpo_rec_fn fn, void *ctx, skpo_err *err);
// The same, every record first checked with skpo_rec_check_needs(tool, on).
skpo_status skpo_read_each_needed(const char *path, const char *kind, const char *tool, const char *const *on,
                                  skpo_rec_fn fn, void *ctx, skpo_err *err);

// --- writing -----------------------------------------------------------------------

typedef struct skpo_writer skpo_writer;

// Write to an fd (stdout = 1) or to a file atomically (temp + fsync + rename on
// a successful close; removed on abort). level: zstd level (0 = default 3).
skpo_status skpo_writer_open_fd(int fd, int level, skpo_writer **out, skpo_err *err);
skpo_status skpo_writer_open_file(const char *path, int level, skpo_writer **out, skpo_err *err);
// Append mode for logs (metrics files): a new zstd frame at the end, not atomic.
// A torn last frame (a writer killed mid-append) is cut off first.
skpo_status skpo_writer_open_append(const char *path, int level, skpo_writer **out, skpo_err *err);
// Write the provenance `meta` record: kind, schema, tool, argv, time, plus any
// extra fields of `extra` (may be NULL).
skpo_status skpo_writer_meta(skpo_writer *w, int argc, char **argv, const skpo_rec *extra, skpo_err *err);
// Records are validated first (skpo_rec_validate): an invalid one is not
// written and its error (naming the field) does not stop the writer.
skpo_status skpo_writer_put(skpo_writer *w, const skpo_rec *r, skpo_err *err);
// Make everything written so far readable by a consumer (ZSTD_e_flush + write).
skpo_status skpo_writer_flush(skpo_writer *w, skpo_err *err);
// End the frame (checksum), flush, commit the file (atomic mode), free.
skpo_status skpo_writer_close(skpo_writer *w, skpo_err *err);
// Free without committing: in file mode the temp file is removed.
void skpo_writer_abort(skpo_writer *w);

// Write a whole array of records to a file atomically.
skpo_status skpo_write_all(const char *path, const skpo_rec *recs, size_t n, skpo_err *err);

// --- msgpack encoding of one record (for tools that need bytes) ---------------------
// Serialise r as a msgpack map into a malloc'd buffer.
void skpo_rec_pack(const skpo_rec *r, char **buf, size_t *len);
// Parse one msgpack map; trailing bytes are an error.
skpo_status skpo_rec_unpack(const char *buf, size_t len, skpo_rec *r, skpo_err *err);

#endif
