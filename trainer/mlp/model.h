/* The MLP: depth hidden ReLU layers of `width` units between `input` features and `output` linear
 * outputs, trained on the mean squared error (1/2 |y - target|^2 per sample).
 *
 * Parameters live in one array of doubles, layer after layer: W_l as [fan_in][fan_out] (row-major)
 * then b_l [fan_out]. A micro-batch's gradient is computed by one fixed sequence of IEEE-754
 * operations (no libm beyond sqrt in the initialisation), so it is bitwise the same whichever rank
 * computes it. docs/tide-mlp.md gives the FLOP count. */
#ifndef TIDE_MLP_MODEL_H
#define TIDE_MLP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "mlp_config.h"

typedef struct tide_mlp_work tide_mlp_work_t;

/* Number of parameters (weights and biases). */
uint64_t tide_mlp_param_count(const tide_mlp_config_t *c);

/* Model FLOPs of one sample's training step, counting each GEMM exactly: 2*fan_in*fan_out for the
 * forward product of every layer, 2*fan_in*fan_out for every weight gradient, and 2*fan_in*fan_out
 * for every input gradient except the first layer's (nothing needs d loss / d input). Bias adds,
 * activations, the loss and the update are not GEMMs and are not counted. */
uint64_t tide_mlp_flops_per_sample(const tide_mlp_config_t *c);

/* Model FLOPs of one sample's forward pass alone (an evaluation): 2*fan_in*fan_out per layer. */
uint64_t tide_mlp_forward_flops_per_sample(const tide_mlp_config_t *c);

/* Initial parameters (He-uniform weights from the seed, zero biases) into params
 * (tide_mlp_param_count doubles). */
void tide_mlp_params_init(const tide_mlp_config_t *c, double *params);

/* Scratch space for micro-batches of up to max_samples samples. The config is copied. Caller frees
 * with tide_mlp_work_free (NULL is fine). */
tide_mlp_work_t *tide_mlp_work_new(const tide_mlp_config_t *c, size_t max_samples);
void tide_mlp_work_free(tide_mlp_work_t *w);
/* The work area's input (max_samples x input) and target (max_samples x output) rows, to fill
 * before tide_mlp_microbatch_grad. Owned by w. */
double *tide_mlp_work_inputs(tide_mlp_work_t *w);
double *tide_mlp_work_targets(tide_mlp_work_t *w);

/* Sets grad (param_count doubles) to the sum over the first n samples in the work area of
 * d loss_i / d params, and returns the sum of their losses. params is borrowed. */
double tide_mlp_microbatch_grad(tide_mlp_work_t *w, const double *params, size_t n, double *grad);

/* Mean loss of the first n samples in the work area (forward only). */
double tide_mlp_loss(tide_mlp_work_t *w, const double *params, size_t n);

/* One SGD step from the global fixed-point gradient sum over `batch` samples:
 * g = sum / batch; v = momentum * v + g; p -= lr * v (with momentum 0, v is just g). */
void tide_mlp_sgd_update(const tide_mlp_config_t *c, double *params, double *velocity,
                         const int64_t *grad_sum, size_t n);

#endif
