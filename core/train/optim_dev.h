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

#endif
