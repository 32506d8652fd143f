/* tide-mlp's model and step: the parameter and FLOP counts by hand, the backward pass against
 * finite differences, the data generator's determinism, and — the point of the trainer — parameters
 * after several steps that are bitwise the same for any world size and any assignment of
 * micro-batches. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data.h"
#include "fixed_point.h"
#include "mlp_config.h"
#include "model.h"
#include "shard.h"

static tide_mlp_config_t tiny(void)
{
    tide_mlp_options_t o;
    tide_mlp_options_default(&o);
    o.cfg.input = 3;
    o.cfg.width = 4;
    o.cfg.depth = 2;
    o.cfg.output = 2;
    o.cfg.batch = 24;
    o.cfg.micro_batches = 6;
    o.cfg.seed = 42;
    o.cfg.lr = 0.05;
    o.cfg.momentum = 0.9;
    return o.cfg;
}

static void test_counts_by_hand(void **state)
{
    tide_mlp_config_t c = tiny();
    (void)state;

    /* layers 3x4, 4x4, 4x2 plus biases 4, 4, 2 */
    assert_int_equal(tide_mlp_param_count(&c), 12 + 4 + 16 + 4 + 8 + 2);
    /* forward 2*(12+16+8) = 72, weight gradients 72, input gradients of layers 1 and 2: 2*(16+8) */
    assert_int_equal(tide_mlp_flops_per_sample(&c), 72 + 72 + 48);
    c.depth = 1; /* 3x4, 4x2 */
    assert_int_equal(tide_mlp_param_count(&c), 12 + 4 + 8 + 2);
    assert_int_equal(tide_mlp_flops_per_sample(&c), 2 * 20 + 2 * 20 + 2 * 8);
    /* the defaults: 32 -> 128 -> 128 -> 128 -> 4 */
    tide_mlp_options_t o;
    tide_mlp_options_default(&o);
    uint64_t mn = 32 * 128 + 2 * 128 * 128 + 128 * 4;
    assert_int_equal(tide_mlp_flops_per_sample(&o.cfg), 4 * mn + 2 * (mn - 32 * 128));
}

static void test_gradient_matches_finite_differences(void **state)
{
    tide_mlp_config_t c = tiny();
    size_t n = tide_mlp_param_count(&c), ns = 5;
    tide_mlp_work_t *w = tide_mlp_work_new(&c, ns);
    tide_mlp_data_t *d = tide_mlp_data_new(&c);
    double *p = malloc(sizeof(double) * n), *g = malloc(sizeof(double) * n);
    double loss;
    (void)state;

    tide_mlp_params_init(&c, p);
    for (size_t i = 0; i < n; i++) /* non-zero biases too */
        p[i] += 0.1 * tide_mlp_uniform(3, 3, i, 0);
    tide_mlp_data_fill(d, 1000, ns, tide_mlp_work_inputs(w), tide_mlp_work_targets(w));
    loss = tide_mlp_microbatch_grad(w, p, ns, g);
    assert_true(fabs(loss - tide_mlp_loss(w, p, ns) * ns) <= 1e-12 * fabs(loss));
    for (size_t i = 0; i < n; i++) {
        const double h = 1e-6, keep = p[i];
        double up, down, fd;
        p[i] = keep + h;
        up = tide_mlp_loss(w, p, ns) * ns;
        p[i] = keep - h;
        down = tide_mlp_loss(w, p, ns) * ns;
        p[i] = keep;
        fd = (up - down) / (2 * h);
        assert_true(fabs(fd - g[i]) <= 1e-5 * (1 + fabs(g[i])));
    }
    free(g);
    free(p);
    tide_mlp_data_free(d);
    tide_mlp_work_free(w);
}

static void test_data_is_a_function_of_the_index(void **state)
{
    tide_mlp_config_t c = tiny();
    tide_mlp_data_t *a = tide_mlp_data_new(&c), *b = tide_mlp_data_new(&c);
    double xa[10 * 3], ta[10 * 2], xb[4 * 3], tb[4 * 2];
    (void)state;

    tide_mlp_data_fill(a, 500, 10, xa, ta);
    tide_mlp_data_fill(b, 503, 4, xb, tb); /* samples 503..506 from another generator */
    assert_memory_equal(xa + 3 * 3, xb, sizeof(xb));
    assert_memory_equal(ta + 3 * 2, tb, sizeof(tb));
    for (size_t i = 0; i < 30; i++)
        assert_true(xa[i] >= -1.0 && xa[i] < 1.0);
    /* another seed, other data */
    c.seed = 43;
    tide_mlp_data_t *e = tide_mlp_data_new(&c);
    tide_mlp_data_fill(e, 503, 4, xb, tb);
    assert_memory_not_equal(xa + 3 * 3, xb, sizeof(xb));
    /* the generator's raw numbers are fixed forever: a change would silently change every run */
    assert_true(tide_mlp_splitmix64(0) == 0xe220a8397b1dcdafULL);
    tide_mlp_data_free(e);
    tide_mlp_data_free(b);
    tide_mlp_data_free(a);
}

/* Runs `steps` steps with micro-batches dealt to `world` ranks (owner = m % world, or a random
 * owner per step when world is 0), summing the ranks' fixed-point parts in reverse rank order. */
static void train(const tide_mlp_config_t *c, uint32_t world, int steps, double *p, double *v)
{
    size_t n = tide_mlp_param_count(c);
    tide_mlp_shard_t *sh = tide_mlp_shard_new(c);
    int64_t *part = calloc(n + 1, sizeof(int64_t)), *total = calloc(n + 1, sizeof(int64_t));
    uint64_t rng = 99;

    tide_mlp_params_init(c, p);
    memset(v, 0, sizeof(double) * n);
    for (int s = 0; s < steps; s++) {
        memset(total, 0, sizeof(int64_t) * (n + 1));
        if (world == 0) {
            /* a work-stealing free-for-all: each micro-batch on its own "rank", in a random order
             */
            uint32_t order[64];
            for (uint32_t m = 0; m < c->micro_batches; m++)
                order[m] = m;
            for (uint32_t i = c->micro_batches; i > 1; i--) {
                rng = tide_mlp_splitmix64(rng);
                uint32_t j = (uint32_t)(rng % i), t = order[i - 1];
                order[i - 1] = order[j];
                order[j] = t;
            }
            for (uint32_t i = 0; i < c->micro_batches; i++) {
                memset(part, 0, sizeof(int64_t) * (n + 1));
                assert_int_equal(tide_mlp_shard_add_microbatch(sh, p, (uint64_t)s, order[i], part),
                                 0);
                assert_int_equal(tide_mlp_fixed_add(total, part, n + 1), 0);
            }
        } else {
            uint32_t count = 0;
            for (uint32_t r = world; r-- > 0;) {
                uint32_t mbs = 0;
                assert_int_equal(tide_mlp_shard_run(sh, p, (uint64_t)s, r, world, part, &mbs), 0);
                count += mbs;
                assert_int_equal(tide_mlp_fixed_add(total, part, n + 1), 0);
            }
            assert_int_equal(count, c->micro_batches);
        }
        tide_mlp_sgd_update(c, p, v, total, n);
    }
    free(total);
    free(part);
    tide_mlp_shard_free(sh);
}

static void test_steps_do_not_depend_on_the_world_size(void **state)
{
    tide_mlp_config_t c = tiny();
    size_t n = tide_mlp_param_count(&c);
    double *p1 = malloc(sizeof(double) * n), *v1 = malloc(sizeof(double) * n);
    double *p = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * n);
    double *p0 = malloc(sizeof(double) * n);
    const uint32_t worlds[] = {2, 3, 4, 5, 6, 7, 0};
    (void)state;

    tide_mlp_params_init(&c, p0);
    train(&c, 1, 8, p1, v1);
    assert_memory_not_equal(p0, p1, sizeof(double) * n); /* it did train */
    for (size_t i = 0; i < sizeof(worlds) / sizeof(worlds[0]); i++) {
        train(&c, worlds[i], 8, p, v);
        assert_memory_equal(p, p1, sizeof(double) * n);
        assert_memory_equal(v, v1, sizeof(double) * n);
    }
    /* and a different micro-batch count is a different (still deterministic) computation */
    c.micro_batches = 4;
    train(&c, 2, 8, p, v);
    assert_memory_not_equal(p, p1, sizeof(double) * n);
    free(p0);
    free(v);
    free(p);
    free(v1);
    free(p1);
}

static void test_training_lowers_the_loss(void **state)
{
    tide_mlp_options_t o;
    tide_mlp_options_default(&o);
    o.cfg.width = 32;
    o.cfg.depth = 2;
    o.cfg.batch = 64;
    o.cfg.micro_batches = 4;
    size_t n = tide_mlp_param_count(&o.cfg);
    double *p = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * n),
           *p0 = malloc(sizeof(double) * n);
    tide_mlp_work_t *w = tide_mlp_work_new(&o.cfg, 256);
    tide_mlp_data_t *d = tide_mlp_data_new(&o.cfg);
    double before, after;
    (void)state;

    /* held-out samples far beyond the training range */
    tide_mlp_data_fill(d, 1ULL << 40, 256, tide_mlp_work_inputs(w), tide_mlp_work_targets(w));
    tide_mlp_params_init(&o.cfg, p0);
    before = tide_mlp_loss(w, p0, 256);
    train(&o.cfg, 2, 60, p, v);
    after = tide_mlp_loss(w, p, 256);
    assert_true(after < 0.7 * before);
    tide_mlp_data_free(d);
    tide_mlp_work_free(w);
    free(p0);
    free(v);
    free(p);
}

static void test_sgd_update_by_hand(void **state)
{
    tide_mlp_config_t c = tiny();
    double p[2] = {1.0, -2.0}, v[2] = {0.5, 0.0};
    int64_t sum[2] = {(int64_t)4 << 32, -((int64_t)1 << 31)}; /* 4.0 and -0.5 over the batch */
    (void)state;

    c.batch = 2;
    c.lr = 0.25;
    c.momentum = 0.5;
    tide_mlp_sgd_update(&c, p, v, sum, 2);
    /* g = 2, v = 0.25 + 2 = 2.25, p = 1 - 0.5625; g = -0.25, v = -0.25, p = -2 + 0.0625 */
    assert_true(v[0] == 2.25 && p[0] == 1.0 - 0.5625);
    assert_true(v[1] == -0.25 && p[1] == -2.0 + 0.0625);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_by_hand),
        cmocka_unit_test(test_gradient_matches_finite_differences),
        cmocka_unit_test(test_data_is_a_function_of_the_index),
        cmocka_unit_test(test_steps_do_not_depend_on_the_world_size),
        cmocka_unit_test(test_training_lowers_the_loss),
        cmocka_unit_test(test_sgd_update_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
