/*
 * model_cuda_devops.c - the CUDA backend's device primitives for the device
 * optimizer (model.h skpo_dev_ops; train/optim_dev.c): thin forwards to
 * cuda.h / cuda_train.h, so the optimizer's flat-buffer logic names no device.
 */
#include "model/model_impl.h"

#include <stddef.h>

#ifdef SKPO_HAVE_CUDA  // a CPU-only build has no CUDA backend (backends.c does not list one)

#include "cuda/cuda.h"
#include "cuda/cuda_infer.h"
#include "cuda/cuda_train.h"

// skpo_dev_seg is cuda_train.h's skpo_adamw_seg, field for field.
_Static_assert(sizeof(skpo_dev_seg) == sizeof(skpo_adamw_seg) && offsetof(skpo_dev_seg, mo) == offsetof(skpo_adamw_seg, mo) &&
                   offsetof(skpo_dev_seg, wd) == offsetof(skpo_adamw_seg, wd),
               "skpo_dev_seg and skpo_adamw_seg differ");

static skpo_status dmalloc(void *c, void **p, size_t n, const char *what, skpo_err *e) { return skpo_cuda_malloc(c, p, n, what, e); }
static skpo_status h2d(void *c, void *d, const void *s, size_t n, skpo_err *e) { return skpo_cuda_h2d(c, d, s, n, e); }
static skpo_status d2h(void *c, void *d, const void *s, size_t n, skpo_err *e) { return skpo_cuda_d2h(c, d, s, n, e); }
static skpo_status d2d(void *c, void *d, const void *s, size_t n, skpo_err *e) { return skpo_cuda_d2d(c, d, s, n, e); }
static skpo_status dsync(void *c, skpo_err *e) { return skpo_cuda_sync(c, e); }
static skpo_status to_bf16(void *c, uint16_t *d, const float *s, size_t n, skpo_err *e) { return skpo_cuda_f32_to_bf16(c, d, s, n, e); }
static skpo_status sumsq(void *c, double *out, const float *g, size_t n, skpo_err *e) { return skpo_cuda_sumsq_f64(c, out, g, n, e); }
static skpo_status plan_new(void *c, const skpo_dev_seg *segs, int nseg, void **plan, skpo_err *e) {
    skpo_cuda_adamw_plan *p = NULL;
    skpo_status st = skpo_cuda_adamw_plan_new(c, (const skpo_adamw_seg *)segs, nseg, &p, e);
    *plan = p;
    return st;
}
static void plan_free(void *p) { skpo_cuda_adamw_plan_free(p); }
static skpo_status adamw(void *c, const void *plan, float *w, uint16_t *wb, float *m, float *v, const float *g, float lr,
                         float b1, float b2, float eps, int step, float gscale, skpo_err *e) {
    return skpo_cuda_adamw_multi(c, plan, w, wb, m, v, g, lr, b1, b2, eps, step, gscale, e);
}

const skpo_dev_ops model_cuda_dev_ops = {
    .malloc = dmalloc,
    .free = skpo_cuda_dfree,
    .h2d = h2d,
    .d2h = d2h,
    .d2d = d2d,
    .sync = dsync,
    .host_alloc = skpo_cuda_host_alloc,
    .host_free = skpo_cuda_host_free,
    .host_register = skpo_cuda_host_register,
    .host_unregister = skpo_cuda_host_unregister,
    .to_bf16 = to_bf16,
    .sumsq_f64 = sumsq,
    .adamw_plan_new = plan_new,
    .adamw_plan_free = plan_free,
    .adamw_multi = adamw,
};

#endif /* SKPO_HAVE_CUDA */
