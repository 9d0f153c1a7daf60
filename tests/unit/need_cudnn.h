// need_cudnn.h - for CUDA tests that run the model with SKPO_ATTN=cudnn:
// NEED_CUDNN() sets it and skips visibly (saying why) where cuDNN attention
// cannot run; DONE_CUDNN() unsets it. Include after harness.h and cuda_dnn.h.
#ifndef SKPO_TEST_NEED_CUDNN_H
#define SKPO_TEST_NEED_CUDNN_H

static int cudnn_missing(char *why, size_t n) {
    skpo_cuda *cu = NULL;
    skpo_err e = {0};
    int bad = skpo_cuda_init(0, &cu, &e) || skpo_cudnn_check(cu, &e);
    snprintf(why, n, "skipped: %s", e.msg);
    skpo_cuda_free_ctx(cu);
    return bad;
}
#define NEED_CUDNN() do { char why_[1100]; setenv("SKPO_ATTN", "cudnn", 1); \
    if (cudnn_missing(why_, sizeof why_)) { unsetenv("SKPO_ATTN"); SKIP(why_); } } while (0)
#define DONE_CUDNN() unsetenv("SKPO_ATTN")

#endif
