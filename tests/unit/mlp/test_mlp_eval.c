/* tide-mlp's evaluation (trainer/mlp/eval.c): a shard's loss is a pure function of (config,
 * params, shard) — the same twice and from two evaluators, different per shard, equal to the mean
 * loss of the held-out samples computed by hand — on held-out data that is not training data; the
 * shares of a phase partition its shards; eval.log lines have the documented format, carry the loss
 * exactly, and are appended whole. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "data.h"
#include "eval.h"
#include "mlp_config.h"
#include "model.h"

static tide_mlp_config_t small_cfg(void)
{
    tide_mlp_options_t o;

    tide_mlp_options_default(&o);
    o.cfg.input = 5;
    o.cfg.width = 7;
    o.cfg.depth = 2;
    o.cfg.output = 3;
    o.cfg.batch = 24;
    o.cfg.micro_batches = 4;
    o.cfg.seed = 11;
    return o.cfg;
}

static bool same_bits(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* The mean loss of held-out shard i by a plain forward pass written here, not the model's, in the
 * order docs/tide-mlp.md fixes (each sum from the bias, inner index ascending; per sample
 * 1/2 sum_o e_o^2, samples in order), so the bits must agree. */
static double reference_loss(const tide_mlp_config_t *c, const double *params, uint64_t shard)
{
    const uint64_t n = c->batch / c->micro_batches;
    double *x = malloc(sizeof(double) * n * c->input), *t = malloc(sizeof(double) * n * c->output);
    double in[64], out[64], total = 0;
    tide_mlp_data_t *d = tide_mlp_data_new(c);

    assert_true(c->input <= 64 && c->width <= 64 && c->output <= 64);
    tide_mlp_data_fill_heldout(d, shard * n, n, x, t);
    for (uint64_t s = 0; s < n; s++) {
        size_t fi = c->input, off = 0;
        double ls = 0;
        memcpy(in, x + s * c->input, sizeof(double) * c->input);
        for (uint32_t l = 0; l <= c->depth; l++) {
            size_t fo = l == c->depth ? c->output : c->width;
            const double *w = params + off, *b = params + off + fi * fo;
            for (size_t j = 0; j < fo; j++) {
                double v = b[j];
                for (size_t k = 0; k < fi; k++)
                    v += in[k] * w[k * fo + j];
                out[j] = l < c->depth ? (v > 0 ? v : 0) : v;
            }
            off += fi * fo + fo;
            memcpy(in, out, sizeof(double) * fo);
            fi = fo;
        }
        for (uint32_t o = 0; o < c->output; o++) {
            double e = in[o] - t[s * c->output + o];
            ls += e * e;
        }
        total += 0.5 * ls;
    }
    tide_mlp_data_free(d);
    free(t);
    free(x);
    return total / (double)n;
}

static void test_shard_loss_is_pure(void **state)
{
    tide_mlp_config_t c = small_cfg();
    uint64_t n = tide_mlp_param_count(&c);
    double *p = malloc(sizeof(double) * n);
    tide_mlp_eval_t *a = tide_mlp_eval_new(&c), *b = tide_mlp_eval_new(&c);
    double l[6];
    (void)state;

    assert_int_equal(tide_mlp_eval_shard_samples(&c), 6);
    tide_mlp_params_init(&c, p);
    for (uint64_t i = 0; i < 6; i++) {
        l[i] = tide_mlp_eval_shard_loss(a, p, i);
        assert_true(l[i] > 0 && l[i] < 1e6);
        /* the same twice, from another evaluator, and after other shards went through it */
        assert_true(same_bits(tide_mlp_eval_shard_loss(b, p, i), l[i]));
        assert_true(same_bits(tide_mlp_eval_shard_loss(a, p, i), l[i]));
        /* what a plain forward pass over the held-out samples gives (the order of the additions
         * is the model's documented one, so the bits agree) */
        assert_true(same_bits(reference_loss(&c, p, i), l[i]));
        for (uint64_t j = 0; j < i; j++)
            assert_false(same_bits(l[i], l[j])); /* a shard of its own */
    }
    /* other parameters, another loss */
    p[0] += 0.25;
    assert_false(same_bits(tide_mlp_eval_shard_loss(a, p, 2), l[2]));
    assert_true(same_bits(tide_mlp_eval_shard_loss(b, p, 2), reference_loss(&c, p, 2)));
    tide_mlp_eval_free(a);
    tide_mlp_eval_free(b);
    tide_mlp_eval_free(NULL);
    free(p);
}

static void test_heldout_data_is_not_training_data(void **state)
{
    tide_mlp_config_t c = small_cfg();
    tide_mlp_data_t *d = tide_mlp_data_new(&c);
    double xt[64 * 5], tt[64 * 3], xh[64 * 5], th[64 * 3], xh2[64 * 5], th2[64 * 3];
    (void)state;

    tide_mlp_data_fill(d, 0, 64, xt, tt);
    tide_mlp_data_fill_heldout(d, 0, 64, xh, th);
    tide_mlp_data_fill_heldout(d, 0, 64, xh2, th2);
    assert_memory_equal(xh, xh2, sizeof(xh)); /* deterministic */
    assert_memory_equal(th, th2, sizeof(th));
    /* no held-out input row equals any training row of the first 64 samples */
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++)
            assert_memory_not_equal(xh + i * 5, xt + j * 5, sizeof(double) * 5);
    /* drawn like training inputs: uniform in [-1, 1) */
    for (int i = 0; i < 64 * 5; i++)
        assert_true(xh[i] >= -1 && xh[i] < 1);
    tide_mlp_data_free(d);
}

static void test_share_partitions_the_shards(void **state)
{
    uint64_t ids[70];
    (void)state;

    for (uint32_t world = 1; world <= 9; world++) {
        int seen[64] = {0};
        for (uint32_t r = 0; r < world; r++) {
            uint32_t n = tide_mlp_eval_share(64, r, world, ids);
            assert_true(n <= 64 / world + 1);
            for (uint32_t i = 0; i < n; i++) {
                assert_int_equal(ids[i], r + (uint64_t)i * world); /* r, r+n, ... ascending */
                seen[ids[i]]++;
            }
        }
        for (int i = 0; i < 64; i++)
            assert_int_equal(seen[i], 1);
    }
    /* more ranks than shards: the last ranks have none */
    assert_int_equal(tide_mlp_eval_share(3, 5, 8, ids), 0);
    assert_int_equal(tide_mlp_eval_share(3, 2, 8, ids), 1);
    assert_int_equal(ids[0], 2);
}

static void test_format(void **state)
{
    const tide_mlp_evaluator_t rank2 = {.burst = false, .index = 2};
    const tide_mlp_evaluator_t burst1 = {.burst = true, .index = 1};
    char buf[160];
    double back, loss = 0.1 + 0.2; /* not a short decimal */
    unsigned long long st, sh;
    int len, used = 0;
    (void)state;

    len = tide_mlp_eval_format(buf, sizeof(buf), 40, 7, 0.5, &rank2);
    assert_string_equal(buf, "eval step 40 shard 7 loss 0.5 by rank 2\n");
    assert_int_equal(len, (int)strlen(buf));
    tide_mlp_eval_format(buf, sizeof(buf), 0, 63, 2, &burst1);
    assert_string_equal(buf, "eval step 0 shard 63 loss 2 by burst 1\n");
    /* %.17g: the loss reads back bitwise */
    tide_mlp_eval_format(buf, sizeof(buf), 18446744073709551615ULL, 4095, loss, &burst1);
    assert_int_equal(
        sscanf(buf, "eval step %llu shard %llu loss %lg by burst 1\n%n", &st, &sh, &back, &used),
        3);
    assert_true(st == 18446744073709551615ULL && sh == 4095);
    assert_true(same_bits(back, loss));
    assert_int_equal(tide_mlp_eval_format(buf, 20, 40, 7, 0.5, &rank2), -ENOSPC);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 16);
    size_t n;

    assert_non_null(f);
    n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_log_append(void **state)
{
    const tide_mlp_evaluator_t r0 = {.burst = false, .index = 0};
    const tide_mlp_evaluator_t b3 = {.burst = true, .index = 3};
    char dir[] = "/tmp/test_mlp_eval.XXXXXX", path[128], *text;
    tide_error_t err = {{0}};
    struct stat st;
    (void)state;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/eval.log", dir);
    assert_int_equal(tide_mlp_eval_log_append(dir, 10, 0, 1.25, &r0, &err), 0);
    assert_int_equal(tide_mlp_eval_log_append(dir, 10, 1, 0.75, &b3, &err), 0);
    assert_int_equal(tide_mlp_eval_log_append(dir, 20, 0, 3, &r0, &err), 0);
    text = slurp(path);
    assert_string_equal(text, "eval step 10 shard 0 loss 1.25 by rank 0\n"
                              "eval step 10 shard 1 loss 0.75 by burst 3\n"
                              "eval step 20 shard 0 loss 3 by rank 0\n");
    free(text);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    unlink(path);
    rmdir(dir);
    /* a directory that is gone: the error names the file */
    assert_int_equal(tide_mlp_eval_log_append(dir, 10, 0, 1, &r0, &err), -ENOENT);
    assert_non_null(strstr(err.text, "eval.log"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_loss_is_pure),
        cmocka_unit_test(test_heldout_data_is_not_training_data),
        cmocka_unit_test(test_share_partitions_the_shards),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_log_append),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
