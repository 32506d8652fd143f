/* The synthetic data generator and its teacher network (data.h). Invariant: a sample depends on
 * (seed, config shape, global sample index, training or held out) only — never on the rank, the
 * world size or the call order. */
#include "data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* STREAM_HELDOUT: the evaluation's inputs; never used for training. */
enum { STREAM_INPUT = 1, STREAM_TEACHER_W1 = 2, STREAM_TEACHER_W2 = 3, STREAM_HELDOUT = 4 };

struct tide_mlp_data {
    uint32_t input, output;
    uint64_t seed;
    double *w1; /* [input][TEACHER_WIDTH] */
    double *w2; /* [TEACHER_WIDTH][output] */
};

uint64_t tide_mlp_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double tide_mlp_uniform(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    uint64_t h = tide_mlp_splitmix64(seed ^ tide_mlp_splitmix64(stream));
    h = tide_mlp_splitmix64(h ^ a);
    h = tide_mlp_splitmix64(h + b);
    /* 53 bits -> [0, 1) exactly, then [-1, 1) exactly */
    return (double)(h >> 11) * 0x1p-52 - 1.0;
}

tide_mlp_data_t *tide_mlp_data_new(const tide_mlp_config_t *c)
{
    tide_mlp_data_t *d = tide_xcalloc(1, sizeof(*d));
    const size_t tw = TIDE_MLP_TEACHER_WIDTH;
    double s1 = sqrt(6.0 / c->input), s2 = sqrt(3.0 / tw);

    d->input = c->input;
    d->output = c->output;
    d->seed = c->seed;
    d->w1 = tide_xmalloc(sizeof(double) * c->input * tw);
    d->w2 = tide_xmalloc(sizeof(double) * tw * c->output);
    for (size_t k = 0; k < c->input; k++)
        for (size_t j = 0; j < tw; j++)
            d->w1[k * tw + j] = s1 * tide_mlp_uniform(c->seed, STREAM_TEACHER_W1, k, j);
    for (size_t j = 0; j < tw; j++)
        for (size_t o = 0; o < c->output; o++)
            d->w2[j * c->output + o] = s2 * tide_mlp_uniform(c->seed, STREAM_TEACHER_W2, j, o);
    return d;
}

void tide_mlp_data_free(tide_mlp_data_t *d)
{
    if (!d)
        return;
    free(d->w1);
    free(d->w2);
    free(d);
}

static void fill(const tide_mlp_data_t *d, uint64_t stream, uint64_t first, size_t n, double *x,
                 double *t)
{
    const size_t tw = TIDE_MLP_TEACHER_WIDTH;
    double h[TIDE_MLP_TEACHER_WIDTH];

    for (size_t s = 0; s < n; s++) {
        double *xs = x + s * d->input, *ts = t + s * d->output;
        for (size_t k = 0; k < d->input; k++)
            xs[k] = tide_mlp_uniform(d->seed, stream, first + s, k);
        memset(h, 0, sizeof(h));
        for (size_t k = 0; k < d->input; k++)
            for (size_t j = 0; j < tw; j++)
                h[j] += xs[k] * d->w1[k * tw + j];
        for (size_t o = 0; o < d->output; o++)
            ts[o] = 0;
        for (size_t j = 0; j < tw; j++) {
            double a = h[j] > 0 ? h[j] : 0;
            for (size_t o = 0; o < d->output; o++)
                ts[o] += a * d->w2[j * d->output + o];
        }
    }
}

void tide_mlp_data_fill(const tide_mlp_data_t *d, uint64_t first, size_t n, double *x, double *t)
{
    fill(d, STREAM_INPUT, first, n, x, t);
}

void tide_mlp_data_fill_heldout(const tide_mlp_data_t *d, uint64_t first, size_t n, double *x,
                                double *t)
{
    fill(d, STREAM_HELDOUT, first, n, x, t);
}
