/* Step wall times (step_times.h). Invariant: kept <= capacity samples; once more steps than that
 * were recorded, the kept ones are a uniform sample of all of them (Algorithm R, a fixed-seed
 * splitmix64, so a run's summary does not depend on anything but its times). */
#include "step_times.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_mlp_step_times {
    size_t capacity, kept;
    uint64_t seen;
    uint64_t rng;
    double max;
    double *v;
};

tide_mlp_step_times_t *tide_mlp_step_times_new(size_t capacity)
{
    tide_mlp_step_times_t *st = tide_xcalloc(1, sizeof(*st));

    st->capacity = capacity ? capacity : 1;
    st->v = tide_xmalloc(sizeof(double) * st->capacity);
    st->rng = 0x5eed;
    return st;
}

void tide_mlp_step_times_free(tide_mlp_step_times_t *st)
{
    if (!st)
        return;
    free(st->v);
    free(st);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void tide_mlp_step_times_add(tide_mlp_step_times_t *st, double ms)
{
    if (st->seen == 0 || ms > st->max)
        st->max = ms;
    st->seen++;
    if (st->kept < st->capacity) {
        st->v[st->kept++] = ms;
        return;
    }
    /* keep this one with probability capacity / seen, in place of a random kept one */
    uint64_t j = splitmix64(&st->rng) % st->seen;
    if (j < st->capacity)
        st->v[j] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile p (0 < p <= 100) of n sorted values. */
static double nearest_rank(const double *sorted, size_t n, unsigned p)
{
    size_t rank = (size_t)(((uint64_t)n * p + 99) / 100); /* ceil(n * p / 100), >= 1 */

    return sorted[(rank ? rank : 1) - 1];
}

uint64_t tide_mlp_step_times_summary(const tide_mlp_step_times_t *st, double *p50, double *p90,
                                     double *max)
{
    double *s;

    if (st->seen == 0)
        return 0;
    s = tide_xmalloc(sizeof(double) * st->kept);
    memcpy(s, st->v, sizeof(double) * st->kept);
    qsort(s, st->kept, sizeof(double), cmp_double);
    if (p50)
        *p50 = nearest_rank(s, st->kept, 50);
    if (p90)
        *p90 = nearest_rank(s, st->kept, 90);
    if (max)
        *max = st->max;
    free(s);
    return st->seen;
}
