/* xoshiro256** (Blackman and Vigna) seeded by splitmix64, and the few distributions the simulator
 * draws from. Invariant: every function consumes a fixed number of draws per call (tide_rng_below
 * aside, whose rejection loop almost never repeats), so runs with one seed are reproducible. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void tide_rng_seed(tide_rng_t *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);

    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t tide_rng_next(tide_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tide_rng_uniform(tide_rng_t *r)
{
    return (double)(tide_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t tide_rng_below(tide_rng_t *r, uint64_t n)
{
    uint64_t x, limit;

    if (n == 0)
        return 0;
    limit = UINT64_MAX - UINT64_MAX % n; /* values at or above limit would bias the modulo */
    do {
        x = tide_rng_next(r);
    } while (x >= limit);
    return x % n;
}

double tide_rng_exp(tide_rng_t *r, double mean)
{
    return -mean * log1p(-tide_rng_uniform(r)); /* 1 - u is in (0, 1]: never log(0) */
}

double tide_rng_normal(tide_rng_t *r)
{
    double u1 = 1.0 - tide_rng_uniform(r), u2 = tide_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
