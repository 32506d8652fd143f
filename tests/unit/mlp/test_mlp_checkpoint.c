/* tide-mlp checkpoints: encode/decode round-trip, rejection of damaged bytes (checksum, size,
 * magic, version, data position), version-1 files (no job), config mismatches named by flag,
 * atomic saves that keep the newest N, a directory scan that skips invalid files for the next
 * older valid one and never loads them, and generations within one job: a later generation's file
 * of the same job is never loaded and a stale generation never writes beside one, the job's own
 * files rank by (generation, step) for loading and pruning, while other jobs' files (whatever their
 * generation) load when it has none and never make a run stale; and the pieces a lent process
 * uses to pick and load one step's checkpoint (list, header peek, load by step). */
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
    f->st.job = 7;
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

    assert_int_equal(len, 104 + 16 * f->st.n_params + 32);
    assert_memory_equal(buf, "TIDEMLP", 8);
    assert_int_equal(buf[8], 2); /* version 2: with the job */
    assert_int_equal(buf[96], 7);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), 0);
    assert_int_equal(out.steps_done, 17);
    assert_int_equal(out.data_position, 17 * 32);
    assert_int_equal(out.generation, 5);
    assert_int_equal(out.job, 7);
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
    const size_t where[] = {0,  9,   13,  50,  65,      73,       81,       89,
                            96, 100, 104, 108, len / 2, len - 33, len - 32, len - 1};

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
    buf[8] = 3;
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "version 3, this program reads 1 to 2"));
    buf[8] = 0;
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "version 0"));
    /* a version-2 body labelled version 1: 8 bytes too long for its parameter count */
    buf[8] = 1;
    reseal(buf, len);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "does not match"));
    buf[8] = 2;
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
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, path, NULL, &err),
                     -ENOENT);
    snprintf(sub, sizeof(sub), "%s/not/there", f->dir);
    assert_int_equal(tide_mlp_ckpt_load_newest(sub, &f->st.cfg, 0, 0, &out, path, NULL, &err),
                     -ENOENT);

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

    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, path, NULL, &err),
                     0);
    assert_int_equal(out.steps_done, 4);
    assert_true(out.params[3] == 4.0);
    tide_mlp_state_free(&out);

    /* a flipped byte in the newest: refused with its name, the previous one is loaded */
    flip(f->dir, 4, 200);
    log = open_memstream(&logbuf, &loglen);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, path, log, &err), 0);
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
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &other, 0, 0, &out, path, NULL, &err),
                     -EINVAL);
    assert_non_null(strstr(err.text, "--depth"));

    /* all damaged: nothing is loaded */
    flip(f->dir, 3, 5);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, path, NULL, &err),
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
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, NULL, NULL, &err),
                     0);
    assert_int_equal(out.steps_done, 2);
    tide_mlp_state_free(&out);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
}

/* Saves the fixture's state as `steps` steps done by `generation` (the guard permitting). */
static int save_as(fixture_t *f, uint64_t steps, uint64_t generation, uint32_t keep,
                   tide_error_t *err)
{
    f->st.steps_done = steps;
    f->st.data_position = steps * f->st.cfg.batch;
    f->st.generation = generation;
    f->st.params[3] = (double)steps;
    return tide_mlp_ckpt_save(f->dir, &f->st, keep, NULL, NULL, NULL, err);
}

/* Writes the fixture's state as `steps` by `generation` straight to its file: no guard, as a
 * concurrent writer would. */
static void plant(fixture_t *f, uint64_t steps, uint64_t generation)
{
    char p[256];
    size_t len;
    uint8_t *buf;
    FILE *fp;

    f->st.steps_done = steps;
    f->st.data_position = steps * f->st.cfg.batch;
    f->st.generation = generation;
    f->st.params[3] = (double)steps;
    buf = encode(&f->st, &len);
    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", f->dir, (unsigned long long)steps);
    fp = fopen(p, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    fclose(fp);
    free(buf);
}

/* Reads DIR/mlp-STEPS.ckpt whole (caller frees). */
static uint8_t *read_ckpt(const char *dir, uint64_t steps, size_t *len)
{
    char p[256];
    FILE *fp;
    uint8_t *buf;
    long n;

    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
    fp = fopen(p, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    n = ftell(fp);
    assert_true(n > 0);
    rewind(fp);
    buf = malloc((size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static void unlink_ckpt(const char *dir, uint64_t steps)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
    assert_int_equal(unlink(p), 0);
}

/* Writes the fixture's state as `steps` by `generation` in format version 1, as an older tide-mlp
 * did: the same header up to n_params (version 1), no job, the parameters from offset 96. */
static void plant_v1(fixture_t *f, uint64_t steps, uint64_t generation)
{
    char p[256];
    size_t len, len1;
    uint8_t *buf, *v1;
    FILE *fp;

    f->st.steps_done = steps;
    f->st.data_position = steps * f->st.cfg.batch;
    f->st.generation = generation;
    f->st.params[3] = (double)steps;
    buf = encode(&f->st, &len);
    len1 = len - 8;
    v1 = malloc(len1);
    memcpy(v1, buf, 96);
    v1[8] = 1;
    memcpy(v1 + 96, buf + 104, len - 104 - 32);
    reseal(v1, len1);
    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", f->dir, (unsigned long long)steps);
    fp = fopen(p, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(v1, 1, len1, fp), len1);
    fclose(fp);
    free(v1);
    free(buf);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
        else if (e->d_name[1] && (e->d_name[1] != '.' || e->d_name[2]))
            n++; /* a temporary .mlp-*.tmp counts too */
    if (d)
        closedir(d);
    return n;
}

/* Loads as generation max_generation of job `job`; returns the steps done of what was loaded (-1:
 * nothing) and fills the log. */
static long load_as(fixture_t *f, uint64_t job, uint64_t max_generation, char **logbuf, int *rc,
                    tide_error_t *err)
{
    tide_mlp_state_t out = {0};
    size_t loglen = 0;
    FILE *log = open_memstream(logbuf, &loglen);
    long steps = -1;

    *rc = tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, job, max_generation, &out, NULL, log, err);
    fclose(log);
    if (*rc == 0) {
        assert_true(out.params[3] == (double)out.steps_done);
        steps = (long)out.steps_done;
    } else {
        assert_null(out.params);
    }
    tide_mlp_state_free(&out);
    return steps;
}

/* load_as for the fixture's job (7: the writer of every file unless a test says otherwise). */
static long load_gen(fixture_t *f, uint64_t max_generation, char **logbuf, int *rc,
                     tide_error_t *err)
{
    return load_as(f, f->st.job, max_generation, logbuf, rc, err);
}

static void test_later_generation_is_never_loaded(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    char *logbuf = NULL;
    int rc;

    /* a lineage: generation 2 wrote step 3, generation 3 step 6, generation 5 step 9 */
    assert_int_equal(save_as(f, 3, 2, 10, &err), 0);
    assert_int_equal(save_as(f, 6, 3, 10, &err), 0);
    assert_int_equal(save_as(f, 9, 5, 10, &err), 0);

    /* 0: any generation (outside tide); the own generation and any later run load the newest */
    assert_int_equal(load_gen(f, 0, &logbuf, &rc, &err), 9);
    assert_string_equal(logbuf, "");
    free(logbuf);
    assert_int_equal(load_gen(f, 5, &logbuf, &rc, &err), 9);
    assert_string_equal(logbuf, "");
    free(logbuf);
    assert_int_equal(load_gen(f, 6, &logbuf, &rc, &err), 9);
    free(logbuf);

    /* generation 4 is older than step 9's writer: that one is refused by name, step 6 is loaded */
    assert_int_equal(load_gen(f, 4, &logbuf, &rc, &err), 6);
    assert_non_null(strstr(logbuf, "mlp-000000000009.ckpt not loaded: written by generation 5, "
                                   "this run is generation 4\n"));
    assert_null(strstr(logbuf, "mlp-000000000006.ckpt"));
    free(logbuf);
    assert_int_equal(load_gen(f, 2, &logbuf, &rc, &err), 3);
    assert_non_null(strstr(logbuf, "000009.ckpt not loaded: written by generation 5"));
    assert_non_null(strstr(logbuf, "000006.ckpt not loaded: written by generation 3, this run is "
                                   "generation 2"));
    free(logbuf);

    /* nothing of generation 1 or older: -ESTALE, not a fresh start and not "none is valid" */
    assert_int_equal(load_gen(f, 1, &logbuf, &rc, &err), -1);
    assert_int_equal(rc, -ESTALE);
    assert_non_null(strstr(err.text, "no valid checkpoint of generation 1 or older (3 of a later"));
    free(logbuf);

    /* a damaged file still counts as damaged, whatever generation it claims: it belongs to no
     * lineage, so it ranks after the job's valid files (and is named as damaged once reached,
     * below) */
    flip(f->dir, 6, 300);
    assert_int_equal(load_gen(f, 4, &logbuf, &rc, &err), 3);
    assert_non_null(strstr(logbuf, "000009.ckpt not loaded: written by generation 5"));
    assert_null(strstr(logbuf, "000006.ckpt"));
    free(logbuf);

    /* a later generation's file of another config is refused for its generation, not an error */
    tide_mlp_config_t other = f->st.cfg;
    tide_mlp_state_t out = {0};
    other.width = 9;
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &other, 7, 1, &out, NULL, NULL, &err),
                     -ESTALE);
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &other, 7, 4, &out, NULL, NULL, &err),
                     -EINVAL);
    assert_non_null(strstr(err.text, "000003.ckpt does not belong to this run"));
    assert_null(out.params);

    /* without step 3 the damaged step 6 is reached: named as damaged, not as a later generation */
    unlink_ckpt(f->dir, 3);
    assert_int_equal(load_gen(f, 4, &logbuf, &rc, &err), -1);
    assert_int_equal(rc, -ESTALE);
    assert_non_null(strstr(logbuf, "000006.ckpt not loaded: checksum mismatch"));
    assert_non_null(strstr(err.text, "(1 of a later one)"));
    free(logbuf);
}

static void test_newest_generation(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    uint64_t gen = 77, steps = 77;
    char sub[128];

    snprintf(sub, sizeof(sub), "%s/not/there", f->dir);
    assert_int_equal(tide_mlp_ckpt_newest_generation(sub, 7, &gen, &steps, &err), 0);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 0);
    assert_int_equal(gen, 77); /* untouched when there is none */

    assert_int_equal(save_as(f, 3, 2, 10, &err), 0);
    assert_int_equal(save_as(f, 6, 4, 10, &err), 0);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_int_equal(gen, 4);
    assert_int_equal(steps, 6);
    /* the highest generation wins over the highest step: a stale writer's step 12 of generation 3
     * (planted past the guard) does not hide generation 4 */
    plant(f, 12, 3);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_int_equal(gen, 4);
    assert_int_equal(steps, 6);
    /* the newest step of the highest generation */
    plant(f, 8, 4);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_int_equal(gen, 4);
    assert_int_equal(steps, 8);
    /* damaged files and renamed ones do not count */
    flip(f->dir, 8, 100);
    flip(f->dir, 6, 100);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_int_equal(gen, 3);
    assert_int_equal(steps, 12);
    {
        char a[256], b[256];
        plant(f, 14, 9);
        snprintf(a, sizeof(a), "%s/mlp-000000000014.ckpt", f->dir);
        snprintf(b, sizeof(b), "%s/mlp-000000000015.ckpt", f->dir);
        assert_int_equal(rename(a, b), 0);
    }
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_int_equal(gen, 3);
}

static void test_stale_generation_does_not_save(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    char sub[128];
    int before;

    /* into a missing directory or one with only older generations: saved */
    snprintf(sub, sizeof(sub), "%s/new", f->dir);
    f->st.generation = 3;
    assert_int_equal(tide_mlp_ckpt_save(sub, &f->st, 2, NULL, NULL, NULL, &err), 0);
    assert_true(exists(sub, f->st.steps_done));
    {
        char p[256];
        snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", sub, (unsigned long long)f->st.steps_done);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(rmdir(sub), 0);
    }
    assert_int_equal(save_as(f, 100, 1, 2, &err), 0);
    assert_int_equal(save_as(f, 140, 3, 2, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 3, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 0, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 0, 2, &err), 0); /* no job: no lineage */

    /* generation 2 is stale: nothing written, nothing pruned, the reason in err */
    before = count_files(f->dir);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 2, &err), -ESTALE);
    assert_string_equal(
        err.text, "generation 2 is stale: the checkpoint directory has generation 3's step 140");
    assert_int_equal(save_as(f, 150, 2, 1, &err), -ESTALE);
    assert_string_equal(err.text, "generation 2 is stale: the checkpoint directory has "
                                  "generation 3's step 140; not saving");
    assert_false(exists(f->dir, 150));
    assert_int_equal(save_as(f, 120, 2, 1, &err), -ESTALE); /* below it too */
    assert_false(exists(f->dir, 120));
    assert_int_equal(count_files(f->dir), before);
    assert_true(exists(f->dir, 100) && exists(f->dir, 140));

    /* its own generation and later ones continue the lineage; outside tide nothing is checked */
    assert_int_equal(save_as(f, 150, 3, 10, &err), 0);
    assert_int_equal(save_as(f, 160, 4, 10, &err), 0);
    assert_int_equal(save_as(f, 170, 0, 10, &err), 0);
    assert_true(exists(f->dir, 170));
    /* a damaged file of a later generation does not block a save */
    plant(f, 180, 9);
    flip(f->dir, 180, 50);
    assert_int_equal(save_as(f, 175, 4, 10, &err), 0);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
}

/* The resubmit workflow: a new job pointed at a directory that another job left at a later
 * generation resumes from it; only the run's own job's later generations are refused. */
static void test_other_jobs_later_generation_is_loaded(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    char *logbuf = NULL;
    int rc;

    /* job 7 reached generation 3 and step 6 */
    assert_int_equal(save_as(f, 3, 2, 10, &err), 0);
    assert_int_equal(save_as(f, 6, 3, 10, &err), 0);

    /* job 8, generation 1, submitted again with the same directory: the newest by step */
    assert_int_equal(load_as(f, 8, 1, &logbuf, &rc, &err), 6);
    assert_string_equal(logbuf, "");
    free(logbuf);
    /* job 7's generation 1 is stale, though: its own later generations are refused */
    assert_int_equal(load_as(f, 7, 1, &logbuf, &rc, &err), -1);
    assert_int_equal(rc, -ESTALE);
    assert_non_null(strstr(logbuf, "000006.ckpt not loaded: written by generation 3"));
    assert_non_null(strstr(logbuf, "000003.ckpt not loaded: written by generation 2"));
    free(logbuf);
    /* no job (outside tide, or TIDE_JOB_ID not a number): no lineage, any generation loads */
    assert_int_equal(load_as(f, 0, 1, &logbuf, &rc, &err), 6);
    assert_string_equal(logbuf, "");
    free(logbuf);

    /* job 8 continues: its generation 1 saves step 9 beside job 7's files, and its generation 2
     * step 12. Now its generation 1 skips its own step 12 and loads its own step 9; job 7's step 6
     * (generation 3 > 1) would be next and is not refused either. */
    f->st.job = 8;
    assert_int_equal(save_as(f, 9, 1, 10, &err), 0);
    assert_int_equal(save_as(f, 12, 2, 10, &err), 0);
    assert_int_equal(load_as(f, 8, 1, &logbuf, &rc, &err), 9);
    assert_non_null(strstr(logbuf, "000012.ckpt not loaded: written by generation 2, this run is "
                                   "generation 1\n"));
    assert_null(strstr(logbuf, "000009.ckpt"));
    free(logbuf);
    unlink_ckpt(f->dir, 9);
    assert_int_equal(load_as(f, 8, 1, &logbuf, &rc, &err), 6);
    assert_null(strstr(logbuf, "000006.ckpt"));
    free(logbuf);
    /* job 7's generation 2 takes its own step 3 over job 8's higher steps; without it, it may load
     * job 8's step 12 (another job's file) */
    assert_int_equal(load_as(f, 7, 2, &logbuf, &rc, &err), 3);
    assert_null(strstr(logbuf, "000012.ckpt"));
    free(logbuf);
    unlink_ckpt(f->dir, 3);
    assert_int_equal(load_as(f, 7, 2, &logbuf, &rc, &err), 12);
    assert_non_null(strstr(logbuf, "000006.ckpt not loaded: written by generation 3"));
    free(logbuf);
    f->st.job = 7;
}

/* A stale rank of generation 1 that outlived its stop wrote step 30 after generation 2's steps 10
 * and 20: job 7's own files rank by (generation, step), so the newer generation's newest step is
 * loaded and the stale branch is the first to be pruned; other jobs' files (higher steps or not)
 * are used only when the job has none of its own. */
static void test_stale_branch_ranks_below_newer_generation(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    char *logbuf = NULL;
    int rc;

    assert_int_equal(save_as(f, 10, 2, 10, &err), 0);
    assert_int_equal(save_as(f, 20, 2, 10, &err), 0);
    plant(f, 30, 1); /* the stale branch: no guard, as a rank that checked before step 10 was */

    /* generation 3 (and 2) resume from generation 2's step 20, not from the higher step 30 */
    assert_int_equal(load_gen(f, 3, &logbuf, &rc, &err), 20);
    assert_string_equal(logbuf, "");
    free(logbuf);
    assert_int_equal(load_gen(f, 2, &logbuf, &rc, &err), 20);
    free(logbuf);
    /* the stale generation 1 itself refuses generation 2's files (main.c then stops it) */
    assert_int_equal(load_gen(f, 1, &logbuf, &rc, &err), 30);
    assert_non_null(strstr(logbuf, "000020.ckpt not loaded: written by generation 2"));
    assert_non_null(strstr(logbuf, "000010.ckpt not loaded: written by generation 2"));
    free(logbuf);
    /* outside tide (no job, or generation 0) there is no lineage: the highest step, as before */
    assert_int_equal(load_as(f, 0, 3, &logbuf, &rc, &err), 30);
    free(logbuf);
    assert_int_equal(load_gen(f, 0, &logbuf, &rc, &err), 30);
    free(logbuf);
    /* damaged, generation 2's step 20 (no lineage now) gives way to its step 10, still not to the
     * stale step 30 */
    flip(f->dir, 20, 400);
    assert_int_equal(load_gen(f, 3, &logbuf, &rc, &err), 10);
    assert_null(strstr(logbuf, "000030.ckpt"));
    free(logbuf);
    unlink_ckpt(f->dir, 20);
    assert_int_equal(save_as(f, 20, 2, 10, &err), 0);

    /* other jobs' files with higher steps: job 9's step 50 and a version-1 (job 0) step 60 */
    f->st.job = 9;
    plant(f, 50, 6);
    plant_v1(f, 60, 8);
    f->st.job = 7;
    assert_int_equal(load_gen(f, 3, &logbuf, &rc, &err), 20);
    assert_string_equal(logbuf, "");
    free(logbuf);
    /* a job with none of its own (job 8) takes the newest by step among all of them */
    assert_int_equal(load_as(f, 8, 1, &logbuf, &rc, &err), 60);
    free(logbuf);
    /* job 7 with only later generations of its own (generation 1 of it sees none it may load)
     * falls back to the others by step as well */
    unlink_ckpt(f->dir, 30);
    assert_int_equal(load_gen(f, 1, &logbuf, &rc, &err), 60);
    assert_non_null(strstr(logbuf, "000020.ckpt not loaded: written by generation 2"));
    free(logbuf);
    plant(f, 30, 1);

    /* pruning, keep 3, generation 2 saves step 25: its own 25, 20, 10 stay and the stale step 30
     * goes first (it ranks below them though its step is higher); the other jobs' files above
     * step 25 stay, as refused ones do */
    assert_int_equal(save_as(f, 25, 2, 3, &err), 0);
    assert_true(exists(f->dir, 25) && exists(f->dir, 20) && exists(f->dir, 10));
    assert_false(exists(f->dir, 30));
    assert_true(exists(f->dir, 50) && exists(f->dir, 60));
    /* keep 1: only the new file of the lineage stays; keep 0 keeps the new file too */
    assert_int_equal(save_as(f, 26, 2, 1, &err), 0);
    assert_true(exists(f->dir, 26));
    assert_false(exists(f->dir, 25) || exists(f->dir, 20) || exists(f->dir, 10));
    assert_int_equal(save_as(f, 27, 2, 0, &err), 0);
    assert_true(exists(f->dir, 27));
    assert_false(exists(f->dir, 26));
    assert_true(exists(f->dir, 50) && exists(f->dir, 60));
    assert_int_equal(load_gen(f, 3, &logbuf, &rc, &err), 27);
    free(logbuf);

    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
}

/* The guards compare with the run's own job only. */
static void test_lineage_guard_ignores_other_jobs(void **state)
{
    fixture_t *f = *state;
    tide_error_t err = {{0}};
    uint64_t gen = 0, steps = 0;

    /* job 9 at generation 6, step 140 (and a version-1 file, job 0, of generation 8) */
    f->st.job = 9;
    assert_int_equal(save_as(f, 140, 6, 10, &err), 0);
    plant_v1(f, 160, 8);
    f->st.job = 7;
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 2, &err), 0);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 0);
    /* job 7's generation 2 saves beside them, and prunes by step as before */
    assert_int_equal(save_as(f, 150, 2, 10, &err), 0);
    assert_true(exists(f->dir, 150));

    /* job 7's generation 3 writes: now its generation 2 is stale, named by job 7's newest */
    assert_int_equal(save_as(f, 155, 3, 10, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 2, &err), -ESTALE);
    assert_string_equal(
        err.text, "generation 2 is stale: the checkpoint directory has generation 3's step 155");
    assert_int_equal(save_as(f, 170, 2, 10, &err), -ESTALE);
    assert_false(exists(f->dir, 170));
    /* for job 9 (generation 6) and job 8 nothing of theirs is newer */
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 9, 6, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 8, 1, &err), 0);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 9, 5, &err), -ESTALE);
    assert_non_null(strstr(err.text, "generation 6's step 140"));

    /* each job's own newest lineage; job 0 asks about every file, version 1 included */
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 7, &gen, &steps, &err), 1);
    assert_true(gen == 3 && steps == 155);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 9, &gen, &steps, &err), 1);
    assert_true(gen == 6 && steps == 140);
    assert_int_equal(tide_mlp_ckpt_newest_generation(f->dir, 0, &gen, &steps, &err), 1);
    assert_true(gen == 8 && steps == 160);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
}

/* Version-1 files (no job field) decode as job 0 with their generation, and load in a directory
 * scan whatever the run's job and generation. */
static void test_version1_file_still_loads(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    char *logbuf = NULL;
    size_t len;
    uint8_t *buf;
    int rc;

    plant_v1(f, 20, 4);
    buf = read_ckpt(f->dir, 20, &len);
    assert_int_equal(len, 96 + 16 * f->st.n_params + 32);
    assert_int_equal(buf[8], 1);
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), 0);
    assert_int_equal(out.steps_done, 20);
    assert_int_equal(out.generation, 4);
    assert_int_equal(out.job, 0);
    assert_memory_equal(out.params, f->st.params, sizeof(double) * f->st.n_params);
    assert_memory_equal(out.velocity, f->st.velocity, sizeof(double) * f->st.n_params);
    tide_mlp_state_free(&out);
    /* still self-checking */
    buf[120] ^= 4;
    assert_int_equal(tide_mlp_ckpt_decode(buf, len, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "checksum"));
    free(buf);

    /* job 7's generation 2 loads it (job 0 is not its lineage), as does a run outside tide */
    assert_int_equal(load_as(f, 7, 2, &logbuf, &rc, &err), 20);
    assert_string_equal(logbuf, "");
    free(logbuf);
    assert_int_equal(load_as(f, 0, 0, &logbuf, &rc, &err), 20);
    free(logbuf);
    assert_int_equal(tide_mlp_ckpt_check_lineage(f->dir, 7, 2, &err), 0);
    /* and resaving continues in version 2 */
    assert_int_equal(save_as(f, 21, 2, 1, &err), 0);
    assert_false(exists(f->dir, 20));
    buf = read_ckpt(f->dir, 21, &len);
    assert_int_equal(buf[8], 2);
    assert_int_equal(buf[96], 7);
    free(buf);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
}

static void test_job_id(void **state)
{
    (void)state;
    assert_int_equal(tide_mlp_job_id("7"), 7);
    assert_int_equal(tide_mlp_job_id("0042"), 42);
    assert_true(tide_mlp_job_id("18446744073709551615") == UINT64_MAX);
    /* anything else is no job */
    assert_int_equal(tide_mlp_job_id(NULL), 0);
    assert_int_equal(tide_mlp_job_id(""), 0);
    assert_int_equal(tide_mlp_job_id("18446744073709551616"), 0);
    assert_int_equal(tide_mlp_job_id("99999999999999999999999"), 0);
    assert_int_equal(tide_mlp_job_id("job-7"), 0);
    assert_int_equal(tide_mlp_job_id("7a"), 0);
    assert_int_equal(tide_mlp_job_id(" 7"), 0);
    assert_int_equal(tide_mlp_job_id("-1"), 0);
    assert_int_equal(tide_mlp_job_id("+1"), 0);
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
    assert_int_equal(tide_mlp_ckpt_load_newest(f->dir, &f->st.cfg, 0, 0, &out, NULL, log, &err), 0);
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

static void test_list_peek_and_load_step(void **state)
{
    fixture_t *f = *state;
    tide_mlp_state_t out = {0};
    tide_error_t err = {{0}};
    tide_mlp_config_t other;
    uint64_t *steps = NULL, job = 0, gen = 0;
    char a[256], b[256];

    assert_int_equal(tide_mlp_ckpt_list(f->dir, &steps), 0);
    free(steps);
    assert_int_equal(tide_mlp_ckpt_list("/nonexistent/tide-mlp", &steps), 0);
    free(steps);
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 17, &f->st.cfg, &out, &err), -ENOENT);
    assert_non_null(strstr(err.text, "mlp-000000000017.ckpt"));
    assert_int_equal(tide_mlp_ckpt_peek(f->dir, 17, &job, &gen), -ENOENT);

    f->st.params[3] = 17;
    assert_int_equal(tide_mlp_ckpt_save(f->dir, &f->st, 5, NULL, NULL, NULL, &err), 0);
    f->st.steps_done = 20;
    f->st.data_position = 20 * f->st.cfg.batch;
    f->st.params[3] = 20;
    assert_int_equal(tide_mlp_ckpt_save(f->dir, &f->st, 5, NULL, NULL, NULL, &err), 0);
    plant_v1(f, 12, 4);
    assert_int_equal(tide_mlp_ckpt_list(f->dir, &steps), 3);
    assert_int_equal(steps[0], 20);
    assert_int_equal(steps[1], 17);
    assert_int_equal(steps[2], 12);
    free(steps);

    assert_int_equal(tide_mlp_ckpt_peek(f->dir, 17, &job, &gen), 0);
    assert_int_equal(job, 7);
    assert_int_equal(gen, 5);
    assert_int_equal(tide_mlp_ckpt_peek(f->dir, 12, &job, &gen), 0); /* version 1: job 0 */
    assert_int_equal(job, 0);
    assert_int_equal(gen, 4);

    /* not the newest: exactly the step asked for, bitwise */
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 17, &f->st.cfg, &out, &err), 0);
    assert_int_equal(out.steps_done, 17);
    assert_int_equal(out.job, 7);
    assert_true(out.params[3] == 17);
    assert_memory_equal(out.params + 4, f->st.params + 4, sizeof(double) * (f->st.n_params - 4));
    tide_mlp_state_free(&out);

    /* another config, a damaged file, a file named for another step: refused, *s untouched */
    other = f->st.cfg;
    other.width++;
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 17, &other, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--width"));
    flip(f->dir, 20, 300);
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 20, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "checksum"));
    assert_int_equal(tide_mlp_ckpt_peek(f->dir, 20, &job, &gen), 0); /* only a hint */
    snprintf(a, sizeof(a), "%s/mlp-000000000017.ckpt", f->dir);
    snprintf(b, sizeof(b), "%s/mlp-000000000018.ckpt", f->dir);
    assert_int_equal(link(a, b), 0);
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 18, &f->st.cfg, &out, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "holds step 17"));
    assert_null(out.params);
    flip(f->dir, 17, 0); /* the magic */
    assert_int_equal(tide_mlp_ckpt_peek(f->dir, 17, &job, &gen), -EBADMSG);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
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
        cmocka_unit_test_setup_teardown(test_later_generation_is_never_loaded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newest_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_generation_does_not_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_jobs_later_generation_is_loaded, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lineage_guard_ignores_other_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_branch_ranks_below_newer_generation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_version1_file_still_loads, setup, teardown),
        cmocka_unit_test(test_job_id),
        cmocka_unit_test_setup_teardown(test_save_failure_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_peek_and_load_step, setup, teardown),
        cmocka_unit_test(test_params_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
