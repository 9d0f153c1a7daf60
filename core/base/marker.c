/*
 * marker.c - the completion marker of a checkpoint folder (common.h).
 *
 * Why a marker when folders are already swapped in atomically: the swap
 * guards one writer on one local file system. A folder can still be half
 * there: copied or synced to another machine and cut short, restored from a
 * backup taken mid-save, on a file system without RENAME_EXCHANGE, or left as
 * "<out>.tmp.<pid>" by a killed save and moved into place by hand. The marker
 * is the first file a save writes ("complete": false) and the last one, after
 * every other file is written and fsynced ("complete": true, with each file's
 * size); a loader refuses a folder whose marker is not complete, or whose
 * files are missing or of another size, and names the folder.
 */
#include "base/common.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

skpo_status skpo_dir_mark_begin(const char *dir, skpo_err *err) {
    static const char pending[] = "{\"format\": \"" SKPO_MARKER_FORMAT "\", \"complete\": false}\n";
    char *p = skpo_path_join(dir, SKPO_MARKER_FILE);
    skpo_status s = skpo_write_file_atomic(p, pending, sizeof pending - 1, err);
    free(p);
    return s;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

skpo_status skpo_dir_mark_complete(const char *dir, skpo_err *err) {
    DIR *d = opendir(dir);
    if (!d) return skpo_err_set(err, SKPO_EIO, "cannot list '%s': %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        // the marker itself and temp files of an atomic write in progress are not the checkpoint
        if (e->d_name[0] == '.' || !strcmp(e->d_name, SKPO_MARKER_FILE) || strstr(e->d_name, ".tmp.")) continue;
        skpo_xgrow((void **)&names, &cap, n + 1, sizeof *names);
        names[n++] = skpo_xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    json_t *files = json_object();
    skpo_status s = SKPO_OK;
    for (size_t i = 0; i < n; i++) {
        char *p = skpo_path_join(dir, names[i]);
        struct stat sb;
        if (stat(p, &sb) != 0) s = s ? s : skpo_err_set(err, SKPO_EIO, "cannot stat '%s': %s", p, strerror(errno));
        else if (S_ISREG(sb.st_mode)) json_object_set_new(files, names[i], json_integer((json_int_t)sb.st_size));
        free(p);
        free(names[i]);
    }
    free(names);
    if (!s) {
        json_t *j = json_pack("{sssbso}", "format", SKPO_MARKER_FORMAT, "complete", 1, "files", files);
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(j);
        size_t len = strlen(txt);
        txt = skpo_xrealloc(txt, len + 2);
        txt[len] = '\n';
        char *p = skpo_path_join(dir, SKPO_MARKER_FILE);
        s = skpo_write_file_atomic(p, txt, len + 1, err);
        free(p);
        free(txt);
    } else {
        json_decref(files);
    }
    return s;
}

// Files only skpo's trainer writes: a folder holding one is a training
// checkpoint, so it must carry a complete marker.
static const char *const trainer_files[] = {"trainer_state.json", "optim.safetensors", "optim.index.json", NULL};

skpo_status skpo_dir_check_complete(const char *dir, skpo_err *err) {
    char *p = skpo_path_join(dir, SKPO_MARKER_FILE);
    skpo_status s = SKPO_OK;
    if (!skpo_path_exists(p)) {
        for (int i = 0; trainer_files[i] && !s; i++) {
            char *f = skpo_path_join(dir, trainer_files[i]);
            if (skpo_path_exists(f))
                s = skpo_err_set(err, SKPO_EFORMAT,
                                 "checkpoint '%s' has no completion marker %s: its save did not finish (or an skpo "
                                 "older than the marker wrote it); not loading it",
                                 dir, SKPO_MARKER_FILE);
            free(f);
        }
        free(p);
        return s; // no trainer files: a plain Hugging Face folder
    }
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *files = json_object_get(j, "files");
    if (!j || !fmt || strcmp(fmt, SKPO_MARKER_FORMAT))
        s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s': '%s' is not a %s marker%s%s", dir, SKPO_MARKER_FILE,
                         SKPO_MARKER_FORMAT, j ? "" : ": ", j ? "" : je.text);
    else if (!json_is_true(json_object_get(j, "complete")))
        s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s' is incomplete: its save did not finish (%s says complete: "
                         "false); not loading it", dir, SKPO_MARKER_FILE);
    else if (!json_is_object(files) || json_object_size(files) == 0)
        s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s': %s lists no files", dir, SKPO_MARKER_FILE);
    const char *name;
    json_t *v;
    if (!s) json_object_foreach(files, name, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || strchr(name, '/') || !*name) {
            s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s': %s has a bad entry '%.100s'", dir, SKPO_MARKER_FILE, name);
            break;
        }
        char *f = skpo_path_join(dir, name);
        struct stat sb;
        if (stat(f, &sb) != 0 || !S_ISREG(sb.st_mode))
            s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s' is not whole: '%s' is missing (%s lists it)", dir, name,
                             SKPO_MARKER_FILE);
        else if ((long long)sb.st_size != (long long)json_integer_value(v))
            s = skpo_err_set(err, SKPO_EFORMAT, "checkpoint '%s' is not whole: '%s' has %lld bytes, its save wrote %lld",
                             dir, name, (long long)sb.st_size, (long long)json_integer_value(v));
        free(f);
        if (s) break;
    }
    json_decref(j);
    free(p);
    return s;
}
