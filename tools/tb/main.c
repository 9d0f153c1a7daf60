/*
 * skpo-tb - metrics records -> a TensorBoard event file.
 * Every numeric field of every `metrics` record becomes a scalar at that
 * record's `step`; the whole file is rewritten atomically on each run, so
 * re-running after more training steps refreshes the view without duplicates.
 */
#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "tfevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char synopsis[] = "[--logdir DIR] [--group FIELD] [FILE...]";
static const char about[] =
    "Read metrics records (from skpo-update, skpo-eval, ...; FILE or stdin) and write\n"
    "DIR/events.out.tfevents.0.skpo for `tensorboard --logdir DIR`. Each int/float field\n"
    "of a `metrics` record is a scalar tagged with its name (prefixed by the value of the\n"
    "string field --group, default `source`, when present) at the record's `step`\n"
    "(its position when it has none). Other records are ignored.";

// Fields that describe the record rather than measure something.
static int is_axis(const char *k) {
    return !strcmp(k, F_STEP) || !strcmp(k, F_SCHEMA) || !strcmp(k, F_SEED) || !strcmp(k, "time") ||
           !strcmp(k, "wall_time");
}

// Write one scalar event per numeric field of r; returns the number written.
static long put_scalars(FILE *f, const skpo_rec *r, int64_t step, double wall, const char *group, tfev_buf *b) {
    const char *prefix = group ? skpo_rec_str(r, group) : NULL;
    long n = 0;
    for (size_t i = 0; i < r->n; i++) {
        const skpo_value *v = &r->v[i];
        double x;
        if (is_axis(v->key) || (v->type != SKPO_V_INT && v->type != SKPO_V_F32 && v->type != SKPO_V_F64)) continue;
        if (!skpo_rec_float(r, v->key, &x)) continue;
        char tag[512];
        snprintf(tag, sizeof tag, "%s%s%s", prefix ? prefix : "", prefix ? "/" : "", v->key);
        tfev_encode_scalar(b, wall, step, tag, (float)x);
        if (tfev_write_record(f, b->p, b->n)) skpo_die("cannot write event file: %s", strerror(errno));
        n++;
    }
    return n;
}

// Convert one input; on a read error the message is in *err and -1 is returned.
static long convert(const char *path, FILE *f, const char *group, int64_t *next_step, tfev_buf *b, skpo_err *err) {
    skpo_reader *rd;
    if (skpo_reader_open(path, &rd, err) != SKPO_OK) return -1;
    skpo_rec r;
    skpo_rec_init(&r);
    long n = 0;
    skpo_status st;
    while ((st = skpo_reader_next(rd, &r, err)) == SKPO_OK) {
        if (!skpo_rec_is_kind(&r, SKPO_KIND_METRICS)) continue;
        int64_t step = *next_step;
        skpo_rec_int(&r, F_STEP, &step);
        *next_step = step + 1;
        double wall = (double)time(NULL);
        if (!skpo_rec_float(&r, "time", &wall)) skpo_rec_float(&r, "wall_time", &wall);
        n += put_scalars(f, &r, step, wall, group, b);
    }
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st == SKPO_EOF ? n : -1;
}

int main(int argc, char **argv) {
    const char *logdir = ".", *group = "source";
    const skpo_opt opts[] = {
        SKPO_OPT_STR("logdir", 'o', &logdir, "DIR", "where the event file goes (default .)"),
        SKPO_OPT_STR("group", 0, &group, "FIELD", "string field prefixed to tags (default source; '' for none)"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    skpo_err err = {0};
    if (skpo_mkdir_p(logdir, &err) != SKPO_OK) skpo_die("%s", err.msg);
    char *path = skpo_path_join(logdir, "events.out.tfevents.0.skpo");
    skpo_afile af;
    if (skpo_afile_open(&af, path, &err) != SKPO_OK) skpo_die("%s", err.msg);
    tfev_buf b = {0};
    tfev_encode_version(&b, (double)time(NULL));
    if (tfev_write_record(af.f, b.p, b.n)) skpo_die("cannot write '%s': %s", path, strerror(errno));
    int64_t next_step = 0;
    long n = 0;
    for (int i = 0; i < (npos ? npos : 1); i++) {
        long k = convert(npos ? pos[i] : "-", af.f, *group ? group : NULL, &next_step, &b, &err);
        if (k < 0) {
            skpo_afile_abort(&af); // no half-written event file left behind
            skpo_die("%s", err.msg);
        }
        n += k;
    }
    if (skpo_afile_commit(&af, &err) != SKPO_OK) skpo_die("%s", err.msg);
    fprintf(stderr, "skpo-tb: %ld scalars -> %s\n", n, path);
    tfev_buf_free(&b);
    free(path);
    free(pos);
    return SKPO_EXIT_OK;
}
