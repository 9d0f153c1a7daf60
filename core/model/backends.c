/*
 * backends.c - the model backends this build has, and the --device names.
 * The one place that names a backend: model.c asks model_backend_get for the
 * device a model was loaded for and calls only through the table it returns.
 * A build without nvcc has no CUDA backend to list (model_cuda*.c compile to
 * nothing), so the table holds the CPU backend alone.
 */
#include "model/model_impl.h"

#include <stdlib.h>
#include <string.h>

#define NO_CUDA "this build has no CUDA (rebuild with nvcc on the PATH)"

// Preferred first: with no --device, the first backend with a visible device is used.
static const model_backend *const backends[] = {
#ifdef SKPO_HAVE_CUDA
    &model_backend_cuda,
#endif
    &model_backend_cpu,
};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

// Every device kind a build may have, whether or not this one does.
static const char *const device_names[] = {[SKPO_DEV_CPU] = "cpu", [SKPO_DEV_CUDA] = "cuda"};
enum { N_DEVICES = sizeof device_names / sizeof *device_names };
static const char *device_name(int d) { return d >= 0 && d < N_DEVICES ? device_names[d] : NULL; }
const skpo_enum skpo_devices = {N_DEVICES, device_name};

static const model_backend *find(skpo_device d) {
    for (int i = 0; i < N_BACKENDS; i++)
        if (backends[i]->device == d) return backends[i];
    return NULL;
}

skpo_status model_backend_get(skpo_device d, const model_backend **out, skpo_err *err) {
    if ((*out = find(d))) return SKPO_OK;
    if (d == SKPO_DEV_CUDA) return skpo_err_set(err, SKPO_EUNSUPPORTED, NO_CUDA);
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "unknown device %d", (int)d);
}

skpo_status skpo_device_parse(const char *name, skpo_device *out, skpo_err *err) {
    if (!name) name = getenv("SKPO_DEVICE");
    if (!name || !*name) {
        for (int i = 0; i < N_BACKENDS; i++)
            if (backends[i]->visible() > 0) {
                *out = backends[i]->device;
                return SKPO_OK;
            }
        *out = SKPO_DEV_CPU;
        return SKPO_OK;
    }
    int d = skpo_enum_parse(&skpo_devices, name);
    if (d < 0) {
        char names[64];
        return skpo_err_set(err, SKPO_ERANGE, "device '%s': expected %s", name,
                            skpo_enum_list(&skpo_devices, ", ", " or ", names, sizeof names));
    }
    const model_backend *be = find((skpo_device)d);
    if (!be) return skpo_err_set(err, SKPO_EUNSUPPORTED, "device %s: " NO_CUDA, name);
    if (be->visible() <= 0)
        return skpo_err_set(err, SKPO_EDEVICE,
                            "device %s: no CUDA device visible (check the driver and CUDA_VISIBLE_DEVICES, or use --device cpu)",
                            name);
    *out = be->device;
    return SKPO_OK;
}
