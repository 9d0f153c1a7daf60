/*
 * optim_dev.h - private to optim.c / optim_dev.c: the device half of the
 * optimizer (see optim.h, "Device path").
 */
#ifndef SKPO_OPTIM_DEV_H
#define SKPO_OPTIM_DEV_H

#include "train/optim.h"

void optim_dev_free(struct skpo_optim_dev *d);
// Reduce, clip and step on the device (o->dev set); o->t advances on success.
skpo_status optim_dev_step(skpo_optim *o, double lr, double *grad_norm, skpo_err *err);

// Device halves of skpo_optim_copy_range / _offload / _reload / _offloaded.
skpo_status optim_dev_copy_range(const skpo_optim *o, size_t a, size_t b, float *m, float *v, skpo_err *err);
skpo_status optim_dev_offload(skpo_optim *o, skpo_err *err);
skpo_status optim_dev_reload(skpo_optim *o, const skpo_dev_params *d, skpo_err *err);
int optim_dev_offloaded(const skpo_optim *o);

#endif
