/* The MLP's forward and backward passes and its SGD update (model.h). Invariant: each output
 * element of every product is accumulated in one fixed order (ascending inner index, starting from
 * the bias or zero) whatever the blocking, so a micro-batch's gradient is a pure function of its
 * inputs. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fixed_point.h"
#include "xmalloc.h"

enum { STREAM_INIT = 16 };

struct tide_mlp_work {
    tide_mlp_config_t cfg;
    size_t max_samples;
    size_t layers; /* depth + 1 */
    size_t *dims;  /* layers + 1 sizes: input, width..., output */
    size_t *w_off; /* per layer: offset of W_l in the parameter array */
    size_t *b_off; /* per layer: offset of b_l */
    double **act;  /* act[0]: inputs; act[l]: layer l's outputs (after ReLU for hidden ones) */
    double *targets;
    double *delta, *delta_in; /* max_samples x max dim: d loss / d pre-activation */
    double *wt;               /* max fan_in x fan_out: a transposed weight matrix */
};

static size_t layer_in(const tide_mlp_config_t *c, size_t l)
{
    return l == 0 ? c->input : c->width;
}

static size_t layer_out(const tide_mlp_config_t *c, size_t l)
{
    return l == c->depth ? c->output : c->width;
}

uint64_t tide_mlp_param_count(const tide_mlp_config_t *c)
{
    uint64_t n = 0;
    for (size_t l = 0; l <= c->depth; l++)
        n += (uint64_t)layer_in(c, l) * layer_out(c, l) + layer_out(c, l);
    return n;
}

uint64_t tide_mlp_flops_per_sample(const tide_mlp_config_t *c)
{
    uint64_t f = 0;
    for (size_t l = 0; l <= c->depth; l++) {
        uint64_t mn = (uint64_t)layer_in(c, l) * layer_out(c, l);
        f += 2 * mn; /* forward */
        f += 2 * mn; /* weight gradient */
        if (l > 0)
            f += 2 * mn; /* input gradient */
    }
    return f;
}

uint64_t tide_mlp_forward_flops_per_sample(const tide_mlp_config_t *c)
{
    uint64_t f = 0;
    for (size_t l = 0; l <= c->depth; l++)
        f += 2 * (uint64_t)layer_in(c, l) * layer_out(c, l);
    return f;
}

void tide_mlp_params_init(const tide_mlp_config_t *c, double *params)
{
    size_t off = 0;
    for (size_t l = 0; l <= c->depth; l++) {
        size_t fi = layer_in(c, l), fo = layer_out(c, l);
        double scale = sqrt(6.0 / (double)fi);
        for (size_t i = 0; i < fi * fo; i++)
            params[off + i] = scale * tide_mlp_uniform(c->seed, STREAM_INIT, l, i);
        off += fi * fo;
        memset(params + off, 0, sizeof(double) * fo);
        off += fo;
    }
}

tide_mlp_work_t *tide_mlp_work_new(const tide_mlp_config_t *c, size_t max_samples)
{
    tide_mlp_work_t *w = tide_xcalloc(1, sizeof(*w));
    size_t maxdim = c->input, off = 0, maxw = 0;

    w->cfg = *c;
    w->max_samples = max_samples ? max_samples : 1;
    w->layers = (size_t)c->depth + 1;
    w->dims = tide_xcalloc(w->layers + 1, sizeof(size_t));
    w->w_off = tide_xcalloc(w->layers, sizeof(size_t));
    w->b_off = tide_xcalloc(w->layers, sizeof(size_t));
    w->act = tide_xcalloc(w->layers + 1, sizeof(double *));
    w->dims[0] = c->input;
    for (size_t l = 0; l < w->layers; l++) {
        size_t fi = layer_in(c, l), fo = layer_out(c, l);
        w->dims[l + 1] = fo;
        w->w_off[l] = off;
        off += fi * fo;
        w->b_off[l] = off;
        off += fo;
        if (fo > maxdim)
            maxdim = fo;
        if (fi * fo > maxw)
            maxw = fi * fo;
    }
    for (size_t l = 0; l <= w->layers; l++)
        w->act[l] = tide_xmalloc(sizeof(double) * w->max_samples * w->dims[l]);
    w->targets = tide_xmalloc(sizeof(double) * w->max_samples * c->output);
    w->delta = tide_xmalloc(sizeof(double) * w->max_samples * maxdim);
    w->delta_in = tide_xmalloc(sizeof(double) * w->max_samples * maxdim);
    w->wt = tide_xmalloc(sizeof(double) * maxw);
    return w;
}

void tide_mlp_work_free(tide_mlp_work_t *w)
{
    if (!w)
        return;
    free(w->wt);
    free(w->delta_in);
    free(w->delta);
    free(w->targets);
    for (size_t l = 0; w->act && l <= w->layers; l++)
        free(w->act[l]);
    free(w->act);
    free(w->b_off);
    free(w->w_off);
    free(w->dims);
    free(w);
}

double *tide_mlp_work_inputs(tide_mlp_work_t *w)
{
    return w->act[0];
}

double *tide_mlp_work_targets(tide_mlp_work_t *w)
{
    return w->targets;
}

/* C[s][:] += sum_k A[s][k] * B[k][:] for s < n, k ascending for every element (A: n x kd, B: kd x
 * m, C: n x m). Four rows share each pass over B; each element still sees the same additions in the
 * same order as one row at a time would. */
static void gemm_acc(const double *restrict A, size_t n, size_t kd, const double *restrict B,
                     size_t m, double *restrict C)
{
    size_t s = 0;
    for (; s + 4 <= n; s += 4) {
        const double *a0 = A + s * kd, *a1 = a0 + kd, *a2 = a1 + kd, *a3 = a2 + kd;
        double *restrict c0 = C + s * m, *restrict c1 = c0 + m, *restrict c2 = c1 + m,
                         *restrict c3 = c2 + m;
        for (size_t k = 0; k < kd; k++) {
            const double *restrict b = B + k * m;
            const double x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
            for (size_t j = 0; j < m; j++) {
                const double bj = b[j];
                c0[j] += x0 * bj;
                c1[j] += x1 * bj;
                c2[j] += x2 * bj;
                c3[j] += x3 * bj;
            }
        }
    }
    for (; s < n; s++) {
        const double *a = A + s * kd;
        double *restrict c = C + s * m;
        for (size_t k = 0; k < kd; k++) {
            const double *restrict b = B + k * m;
            const double x = a[k];
            for (size_t j = 0; j < m; j++)
                c[j] += x * b[j];
        }
    }
}

/* G[k][:] += sum_s A[s][k] * D[s][:], s ascending for every element (A: n x kd, D: n x m,
 * G: kd x m). Four samples per pass, added one after the other in sample order. */
static void gemm_tn_acc(const double *restrict A, size_t n, size_t kd, const double *restrict D,
                        size_t m, double *restrict G)
{
    size_t s = 0;
    for (; s + 4 <= n; s += 4) {
        const double *a0 = A + s * kd, *a1 = a0 + kd, *a2 = a1 + kd, *a3 = a2 + kd;
        const double *restrict d0 = D + s * m, *restrict d1 = d0 + m, *restrict d2 = d1 + m,
                               *restrict d3 = d2 + m;
        for (size_t k = 0; k < kd; k++) {
            double *restrict g = G + k * m;
            const double x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
            for (size_t j = 0; j < m; j++) {
                double v = g[j];
                v += x0 * d0[j];
                v += x1 * d1[j];
                v += x2 * d2[j];
                v += x3 * d3[j];
                g[j] = v;
            }
        }
    }
    for (; s < n; s++) {
        const double *a = A + s * kd;
        const double *restrict d = D + s * m;
        for (size_t k = 0; k < kd; k++) {
            double *restrict g = G + k * m;
            const double x = a[k];
            for (size_t j = 0; j < m; j++)
                g[j] += x * d[j];
        }
    }
}

/* Forward over n samples into w->act[1..layers]. */
static void forward(tide_mlp_work_t *w, const double *params, size_t n)
{
    for (size_t l = 0; l < w->layers; l++) {
        size_t fi = w->dims[l], fo = w->dims[l + 1];
        const double *W = params + w->w_off[l], *b = params + w->b_off[l];
        double *out = w->act[l + 1];
        for (size_t s = 0; s < n; s++)
            memcpy(out + s * fo, b, sizeof(double) * fo);
        gemm_acc(w->act[l], n, fi, W, fo, out);
        if (l + 1 < w->layers)
            for (size_t i = 0; i < n * fo; i++)
                out[i] = out[i] > 0 ? out[i] : 0;
    }
}

/* Sum over samples of 1/2 |y - t|^2; fills w->delta with y - t when want_delta. */
static double loss_and_delta(tide_mlp_work_t *w, size_t n, int want_delta)
{
    size_t m = w->cfg.output;
    const double *y = w->act[w->layers], *t = w->targets;
    double loss = 0;

    for (size_t s = 0; s < n; s++) {
        double ls = 0;
        for (size_t o = 0; o < m; o++) {
            double d = y[s * m + o] - t[s * m + o];
            ls += d * d;
            if (want_delta)
                w->delta[s * m + o] = d;
        }
        loss += 0.5 * ls;
    }
    return loss;
}

double tide_mlp_microbatch_grad(tide_mlp_work_t *w, const double *params, size_t n, double *grad)
{
    double loss;

    memset(grad, 0, sizeof(double) * tide_mlp_param_count(&w->cfg));
    if (n > w->max_samples)
        n = w->max_samples;
    if (n == 0)
        return 0;
    forward(w, params, n);
    loss = loss_and_delta(w, n, 1);
    for (size_t l = w->layers; l-- > 0;) {
        size_t fi = w->dims[l], fo = w->dims[l + 1];
        const double *W = params + w->w_off[l];
        double *gW = grad + w->w_off[l], *gb = grad + w->b_off[l];
        double *tmp;

        gemm_tn_acc(w->act[l], n, fi, w->delta, fo, gW);
        for (size_t s = 0; s < n; s++)
            for (size_t j = 0; j < fo; j++)
                gb[j] += w->delta[s * fo + j];
        if (l == 0)
            break;
        /* delta_in = (delta . W^T) masked by the ReLU of layer l's input */
        for (size_t k = 0; k < fi; k++)
            for (size_t j = 0; j < fo; j++)
                w->wt[j * fi + k] = W[k * fo + j];
        memset(w->delta_in, 0, sizeof(double) * n * fi);
        gemm_acc(w->delta, n, fo, w->wt, fi, w->delta_in);
        for (size_t i = 0; i < n * fi; i++)
            if (!(w->act[l][i] > 0))
                w->delta_in[i] = 0;
        tmp = w->delta;
        w->delta = w->delta_in;
        w->delta_in = tmp;
    }
    return loss;
}

double tide_mlp_loss(tide_mlp_work_t *w, const double *params, size_t n)
{
    if (n > w->max_samples)
        n = w->max_samples;
    if (n == 0)
        return 0;
    forward(w, params, n);
    return loss_and_delta(w, n, 0) / (double)n;
}

void tide_mlp_sgd_update(const tide_mlp_config_t *c, double *params, double *velocity,
                         const int64_t *grad_sum, size_t n)
{
    const double batch = (double)c->batch;
    for (size_t i = 0; i < n; i++) {
        double g = tide_mlp_fixed_to_double(grad_sum[i]) / batch;
        double v = c->momentum * velocity[i] + g;
        velocity[i] = v;
        params[i] -= c->lr * v;
    }
}
