/* tide-mlp checkpoints: encode/decode round-trip, rejection of damaged bytes (checksum, size,
 * magic, version, data position), config mismatches named by flag, atomic saves that keep the
 * newest N, and a directory scan that skips invalid files for the next older valid one and never
 * loads them. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "checkpoint.h"
#include "data.h"
#include "mlp_config.h"
#include "model.h"

static tide_mlp_config_t small_cfg(void)
{
    tide_mlp_options_t o;
    tide_mlp_options_default(&o);
    o.cfg.input = 5;
    o.cfg.width = 6;
    o.cfg.depth = 2;
    o.cfg.output = 3;
    o.cfg.batch = 32;
    o.cfg.micro_batches = 8;
    return o.cfg;
}

typedef struct fixture {
    tide_mlp_state_t st;
    char dir[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->st.cfg = small_cfg();
    f->st.n_params = tide_mlp_param_count(&f->st.cfg);
    f->st.params = malloc(sizeof(double) * f->st.n_params);
    f->st.velocity = malloc(sizeof(double) * f->st.n_params);
    for (size_t i = 0; i < f->st.n_params; i++) {
        f->st.params[i] = tide_mlp_uniform(1, 2, i, 0) * 1e3;
        f->st.velocity[i] = tide_mlp_uniform(1, 3, i, 0) * 1e-300; /* subnormal-ish, any bits */
    }
    f->st.params[0] = -0.0;
    f->st.velocity[1] = INFINITY;
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_mlp_ckpt.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    DIR *d = opendir(f->dir);
    struct dirent *e;
    char p[512];

    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    free(f->st.params);
    free(f->st.velocity);
    free(f);
    return 0;
}

static uint8_t *encode(const tide_mlp_state_t *s, size_t *len)
{
    *len = tide_mlp_ckpt_size(s->n_params);
    uint8_t *buf = malloc(*len);
    tide_mlp_ckpt_encode(s, buf, NULL);
    return buf;
}

static void test_round_trip(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    size_t len;
    uint8_t *buf = encode(&f->st, &len);
    uint8_t sha[32];

    assert_int_equal(len, 96 + 16 * f->st.n_params + 32);
    assert_memory_equal(buf, "TIDEMLP", 8);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), 0);
    assert_int_equal(out.steps_done, 17);
    assert_int_equal(out.data_position, 17 * 32);
    assert_int_equal(out.generation, 5);
    assert_int_equal(out.n_params, f->st.n_params);
    assert_memory_equal(out.params, f->st.params, sizeof(double) * f->st.n_params);
    assert_memory_equal(out.velocity, f->st.velocity, sizeof(double) * f->st.n_params);
    assert_memory_equal(&out.cfg, &f->st.cfg, sizeof(out.cfg));
    tide_mlp_state_free(&out);
    tide_mlp_state_free(&out); /* twice is fine */
    /* the encoder's checksum is the trailer */
    tide_mlp_ckpt_encode(&f->st, buf, sha);
    assert_memory_equal(sha, buf + len - 32, 32);
    free(buf);
}

static void test_damaged_bytes_are_refused(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    size_t len;
    uint8_t *buf = encode(&f->st, &len);
    const size_t where[] = {0,  9,  13,  50,      65,       73,       81,
                            89, 96, 100, len / 2, len - 33, len - 32, len - 1};

    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
        buf[where[i]] ^= 0x10;
        assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
        assert_non_null(strstr(err.text, "checksum"));
        assert_null(out.params); /* nothing decoded */
        buf[where[i]] ^= 0x10;
    }
    assert_int_equal(tide_mlp_ckpt_decode(buf, len - 1, &f->st.cfg, &out, &err), -EBADMSG);
    assert_int_equal(tide_mlp_ckpt_decode(buf, 40, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "too short"));
    assert_int_equal(tide_mlp_ckpt_decode(buf, 0, &f->st.cfg, &out, &err), -EBADMSG);
    free(buf);
}

/* Writes a valid trailer for whatever the bytes say now. */
static void reseal(uint8_t *buf, size_t len)
{
    unsigned int n = 32;
    assert_int_equal(EVP_Digest(buf, len - 32, buf + len - 32, &n, EVP_sha256(), NULL), 1);
}

/* Valid checksums over wrong contents: a bad magic, version, size or data position. */
static void test_consistency_checks(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    size_t len;
    uint8_t *buf = encode(&f->st, &len);

    buf[0] = 'X';
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "magic"));
    buf[0] = 'T';
    buf[8] = 2;
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "version 2"));
    buf[8] = 1;
    buf[72] ^= 1; /* data position */
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "data position"));
    buf[72] ^= 1;
    buf[88] ^= 1; /* n_params */
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    buf[88] ^= 1;
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), 0);
    tide_mlp_state_free(&out);
    free(buf);
}

static void test_other_config_is_named(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    tide_mlp_config_t c;
    size_t len;
    uint8_t *buf = encode(&f->st, &len);

    c = f->st.cfg;
    c.width = 7;
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &c, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--width 6, this run has --width 7"));
    c = f->st.cfg;
    c.micro_batches = 4;
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &c, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--micro-batches"));
    c = f->st.cfg;
    c.lr = nextafter(c.lr, 1); /* one bit of the learning rate matters */
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &c, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--lr"));
    c = f->st.cfg;
    c.seed = 2;
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &c, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--seed"));
    assert_null(out.params);
    free(buf);
}

static bool exists(const char *dir, uint64_t steps)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
    return access(p, F_OK) == 0;
}

static void flip(const char *dir, uint64_t steps, long off)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
    FILE *fp = fopen(p, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    int ch = fgetc(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    fputc(ch ^ 0x01, fp);
    fclose(fp);
}

static void test_save_keep_and_load_newest_valid(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    char path[TIDE_MLP_CKPT_PATH_MAX], hex[65], want[65];
    uint64_t bytes = 0;
    char *logbuf = NULL;
    size_t loglen = 0;
    FILE *log;
    char sub[128];

    /* an empty or missing directory has nothing to resume */
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, path, NULL, &err),
                     -ENOENT);
    snprintf(sub, sizeof(sub), "%s/not/there", f->dir);
    assert_int_equal(tide_mlp_ckpt_load_newest(sub, &f->st.cfg, &out, path, NULL, &err), -ENOENT);

    for (uint64_t s = 1; s <= 4; s++) {
        f->st.steps_done = s;
        f->st.data_position = s * f->st.cfg.batch;
        f->st.params[3] = (double)s;
        assert_int_equal(tide_mlp_ckpt_save(f->dir, &f->st, 2, path, &bytes, hex, &err), 0);
    }
    assert_false(exists(f->dir, 1));
    assert_false(exists(f->dir, 2));
    assert_true(exists(f->dir, 3));
    assert_true(exists(f->dir, 4));
    assert_int_equal(bytes, tide_mlp_ckpt_size(f->st.n_params));
    {
        size_t len;
        uint8_t *buf = encode(&f->st, &len);
        tide_mlp_sha256_hex(buf, len, want);
        free(buf);
    }
    assert_string_equal(hex, want);
    assert_non_null(strstr(path, "/mlp-000000000004.ckpt"));

    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, path, NULL, &err), 0);
    assert_int_equal(out.steps_done, 4);
    assert_true(out.params[3] == 4.0);
    tide_mlp_state_free(&out);

    /* a flipped byte in the newest: refused with its name, the previous one is loaded */
    flip(f->dir, 4, 200);
    log = open_memstream(&logbuf, &loglen);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, path, log, &err), 0);
    fclose(log);
    assert_int_equal(out.steps_done, 3);
    assert_true(out.params[3] == 3.0);
    assert_non_null(strstr(path, "mlp-000000000003.ckpt"));
    assert_non_null(strstr(logbuf, "mlp-000000000004.ckpt not loaded: checksum mismatch"));
    tide_mlp_state_free(&out);
    free(logbuf);

    /* a config mismatch stops the scan: resuming someone else's run is an error, not a fallback */
    tide_mlp_config_t other = f->st.cfg;
    other.depth = 3;
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &other, &out, path, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--depth"));

    /* all damaged: nothing is loaded */
    flip(f->dir, 3, 5);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, path, NULL, &err),
                     -EBADMSG);
    assert_non_null(strstr(err.text, "none of its 2 checkpoints is valid"));
    assert_null(out.params);

    /* a new save at a lower step keeps the (refused) newer file and prunes only older ones */
    f->st.steps_done = 2;
    f->st.data_position = 2 * f->st.cfg.batch;
    assert_int_equal(tide_mlp_ckpt_save(f->dir, &f->st, 1, NULL, NULL, NULL, &err), 0);
    assert_true(exists(f->dir, 4));
    assert_true(exists(f->dir, 3));
    assert_true(exists(f->dir, 2));
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, NULL, NULL, &err), 0);
    assert_int_equal(out.steps_done, 2);
    tide_mlp_state_free(&out);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
}

static void test_renamed_file_is_refused(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    char a[256], b[256], junk[256];
    char *logbuf = NULL;
    size_t loglen = 0;
    FILE *log;

    f->st.steps_done = 3;
    f->st.data_position = 3 * f->st.cfg.batch;
    assert_int_equal(tide_mlp_ckpt_save(f->dir, &f->st, 2, NULL, NULL, NULL, &err), 0);
    /* a file named for step 9 that holds step 3 is not step 9 */
    snprintf(a, sizeof(a), "%s/mlp-000000000003.ckpt", f->dir);
    snprintf(b, sizeof(b), "%s/mlp-000000000009.ckpt", f->dir);
    assert_int_equal(link(a, b), 0);
    /* names that are not checkpoints are ignored */
    snprintf(junk, sizeof(junk), "%s/mlp-12.ckpt", f->dir);
    fclose(fopen(junk, "w"));
    log = open_memstream(&logbuf, &loglen);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, &out, NULL, log, &err), 0);
    fclose(log);
    assert_int_equal(out.steps_done, 3);
    assert_non_null(strstr(logbuf, "mlp-000000000009.ckpt not loaded"));
    assert_null(strstr(logbuf, "mlp-12.ckpt"));
    tide_mlp_state_free(&out);
    free(logbuf);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
}

static void test_save_failure_is_reported(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    char blocker[128], inside[160];

    /* the directory path runs through a regular file */
    snprintf(blocker, sizeof(blocker), "%s/file", f->dir);
    fclose(fopen(blocker, "w"));
    snprintf(inside, sizeof(inside), "%s/sub", blocker);
    assert_true(tide_mlp_ckpt_save(inside, &f->st, 2, NULL, NULL, NULL, &err) < 0);
    assert_non_null(strstr(err.text, "cannot create"));
}

static void test_params_hash(void **state)
{
    double p[3] = {1.0, -0.0, 0.5};
    char a[65], b[65];
    /* the hash is over little-endian bytes: the same as hashing the bytes on this (LE) machine */
    tide_mlp_params_sha256_hex(p, 3, a);
    tide_mlp_sha256_hex(p, sizeof(p), b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), 64);
    p[1] = 0.0;
    tide_mlp_params_sha256_hex(p, 3, b);
    assert_string_not_equal(a, b);
    /* the known SHA-256 of nothing */
    tide_mlp_params_sha256_hex(p, 0, a);
    assert_string_equal(a, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_bytes_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consistency_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_config_is_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_keep_and_load_newest_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renamed_file_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_failure_is_reported, setup, teardown),
        cmocka_unit_test(test_params_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
