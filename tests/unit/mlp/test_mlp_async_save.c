/* tide-mlp's background checkpoint save (trainer/mlp/async_save.h): the file holds the state as it
 * was when the save started, whatever the caller changes afterwards; no result is handed out while
 * the save runs, and a collected result names a complete file (size, SHA-256, contents); a series
 * of saves loses none; one save at a time (-EBUSY); failures (an unwritable directory, a stale
 * generation) come back as the result; freeing an object with a save in flight waits for it. The
 * save is held on its thread by the test hook, released when the test says so (no sleeps). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "async_save.h"
#include "checkpoint.h"
#include "data.h"
#include "mlp_config.h"
#include "model.h"

/* The hook's gate: the save thread says it entered, then waits until the test opens the gate. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, open;
} gate_t;

static void gate_hook(void *ud)
{
    gate_t *g = ud;

    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* Waits (10 s at most) until the save thread is in the hook. */
static void gate_wait_entered(gate_t *g)
{
    struct timespec dl;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&g->mu);
    while (!g->entered && pthread_cond_timedwait(&g->cv, &g->mu, &dl) == 0)
        ;
    assert_true(g->entered);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct fixture {
    tide_mlp_state_t st;
    char dir[64];
    gate_t gate;
} fixture_t;

static void fill(tide_mlp_state_t *s, uint64_t salt)
{
    for (size_t i = 0; i < s->n_params; i++) {
        s->params[i] = tide_mlp_uniform(1, 2 + salt, i, 0) * 1e3;
        s->velocity[i] = tide_mlp_uniform(1, 3 + salt, i, 0);
    }
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    tide_mlp_options_t o;

    tide_mlp_options_default(&o);
    o.cfg.input = 5;
    o.cfg.width = 6;
    o.cfg.depth = 2;
    o.cfg.output = 3;
    o.cfg.batch = 32;
    o.cfg.micro_batches = 8;
    f->st.cfg = o.cfg;
    f->st.n_params = tide_mlp_param_count(&f->st.cfg);
    f->st.params = malloc(sizeof(double) * f->st.n_params);
    f->st.velocity = malloc(sizeof(double) * f->st.n_params);
    fill(&f->st, 0);
    f->st.steps_done = 17;
    f->st.data_position = 17 * f->st.cfg.batch;
    f->st.generation = 5;
    f->st.job = 7;
    pthread_mutex_init(&f->gate.mu, NULL);
    pthread_cond_init(&f->gate.cv, NULL);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_mlp_async.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];

    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            rm_tree(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    rm_tree(f->dir);
    pthread_cond_destroy(&f->gate.cv);
    pthread_mutex_destroy(&f->gate.mu);
    free(f->st.params);
    free(f->st.velocity);
    free(f);
    return 0;
}

static bool file_exists(const char *dir, uint64_t steps)
{
    char p[256];
    struct stat sb;

    snprintf(p, sizeof(p), "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
    return stat(p, &sb) == 0;
}

/* Polls until the save has finished (10 s at most); returns poll's last answer. */
static int poll_until_done(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res)
{
    struct timespec t0, now, nap = {0, 1000000};
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        rc = tide_mlp_async_save_poll(a, res);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (rc != 0 || now.tv_sec - t0.tv_sec > 10)
            return rc;
        nanosleep(&nap, NULL); /* a poll interval, not a synchronisation */
    }
}

/* The file of res (complete: its size, its SHA-256, its state) holds exactly *want. */
static void check_file(const fixture_t *f, const tide_mlp_save_result_t *res,
                       const tide_mlp_state_t *want)
{
    tide_mlp_state_t got = {0};
    tide_error_t err = {{0}};
    char hex[65];
    struct stat sb;
    uint8_t *buf;
    FILE *fp;

    assert_int_equal(res->rc, 0);
    assert_int_equal(res->steps_done, want->steps_done);
    assert_int_equal(stat(res->path, &sb), 0);
    assert_int_equal((uint64_t)sb.st_size, res->bytes);
    assert_int_equal(res->bytes, tide_mlp_ckpt_size(want->n_params));
    buf = malloc(res->bytes);
    fp = fopen(res->path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(buf, 1, res->bytes, fp), res->bytes);
    fclose(fp);
    tide_mlp_sha256_hex(buf, res->bytes, hex);
    assert_string_equal(hex, res->hex);
    free(buf);
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, want->steps_done, &want->cfg, &got, &err), 0);
    assert_int_equal(got.steps_done, want->steps_done);
    assert_int_equal(got.data_position, want->data_position);
    assert_int_equal(got.generation, want->generation);
    assert_int_equal(got.job, want->job);
    assert_memory_equal(got.params, want->params, sizeof(double) * want->n_params);
    assert_memory_equal(got.velocity, want->velocity, sizeof(double) * want->n_params);
    tide_mlp_state_free(&got);
}

/* A copy of s with its own arrays (free with tide_mlp_state_free). */
static tide_mlp_state_t copy_state(const tide_mlp_state_t *s)
{
    tide_mlp_state_t c = *s;

    c.params = malloc(sizeof(double) * s->n_params);
    c.velocity = malloc(sizeof(double) * s->n_params);
    memcpy(c.params, s->params, sizeof(double) * s->n_params);
    memcpy(c.velocity, s->velocity, sizeof(double) * s->n_params);
    return c;
}

static void test_snapshot_is_the_state_at_start(void **state)
{
    fixture_t *f = *state;
    tide_mlp_async_save_t *a = tide_mlp_async_save_new(f->st.n_params);
    tide_mlp_state_t before = copy_state(&f->st);
    tide_mlp_save_result_t res;

    tide_mlp_async_save_set_hook(a, gate_hook, &f->gate);
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 2), 0);
    /* the caller trains on at once: the next step changes every value (and the state's fields) */
    fill(&f->st, 100);
    f->st.params[0] = -1.5;
    f->st.steps_done = 18;
    f->st.data_position = 18 * f->st.cfg.batch;
    gate_wait_entered(&f->gate);
    /* held on its thread: nothing finished, no file yet, no second save */
    assert_true(tide_mlp_async_save_busy(a));
    assert_int_equal(tide_mlp_async_save_poll(a, &res), 0);
    assert_int_equal(tide_mlp_async_save_poll(a, &res), 0);
    assert_false(file_exists(f->dir, 17));
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 2), -EBUSY);
    gate_open(&f->gate);
    memset(&res, 0, sizeof(res));
    assert_int_equal(tide_mlp_async_save_wait(a, &res), 0);
    assert_false(tide_mlp_async_save_busy(a));
    check_file(f, &res, &before); /* the state at step 17, not the mutated one */
    assert_false(file_exists(f->dir, 18));
    /* collected: nothing more to poll or wait for */
    assert_int_equal(tide_mlp_async_save_poll(a, &res), -ENOENT);
    assert_int_equal(tide_mlp_async_save_wait(a, &res), -ENOENT);
    tide_mlp_state_free(&before);
    tide_mlp_async_save_free(a);
}

static void test_poll_hands_out_only_complete_files(void **state)
{
    fixture_t *f = *state;
    tide_mlp_async_save_t *a = tide_mlp_async_save_new(f->st.n_params);
    tide_mlp_state_t before = copy_state(&f->st);
    tide_mlp_save_result_t res;

    assert_int_equal(tide_mlp_async_save_poll(a, &res), -ENOENT); /* none started */
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 2), 0);
    fill(&f->st, 7);
    memset(&res, 0, sizeof(res));
    assert_int_equal(poll_until_done(a, &res), 1);
    check_file(f, &res, &before);
    tide_mlp_state_free(&before);
    tide_mlp_async_save_free(a);
}

static void test_a_series_loses_no_checkpoint(void **state)
{
    fixture_t *f = *state;
    tide_mlp_async_save_t *a = tide_mlp_async_save_new(f->st.n_params);
    tide_mlp_state_t want[6];
    tide_mlp_save_result_t res;

    for (int i = 0; i < 6; i++) {
        f->st.steps_done = 10 * (uint64_t)(i + 1);
        f->st.data_position = f->st.steps_done * f->st.cfg.batch;
        fill(&f->st, (uint64_t)i);
        want[i] = copy_state(&f->st);
        assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 10), 0);
        fill(&f->st, 1000 + (uint64_t)i);
        memset(&res, 0, sizeof(res));
        if (i % 2)
            assert_int_equal(tide_mlp_async_save_wait(a, &res), 0);
        else
            assert_int_equal(poll_until_done(a, &res), 1);
        check_file(f, &res, &want[i]);
    }
    /* every one of them is still there, each with its own step's state (keep 10) */
    for (int i = 0; i < 6; i++) {
        tide_mlp_state_t got = {0};
        tide_error_t err = {{0}};
        assert_int_equal(
            tide_mlp_ckpt_load_step(f->dir, want[i].steps_done, &f->st.cfg, &got, &err), 0);
        assert_memory_equal(got.params, want[i].params, sizeof(double) * got.n_params);
        assert_memory_equal(got.velocity, want[i].velocity, sizeof(double) * got.n_params);
        tide_mlp_state_free(&got);
        tide_mlp_state_free(&want[i]);
    }
    tide_mlp_async_save_free(a);
}

static void test_failures_come_back_as_the_result(void **state)
{
    fixture_t *f = *state;
    tide_mlp_async_save_t *a = tide_mlp_async_save_new(f->st.n_params);
    tide_mlp_save_result_t res;
    tide_error_t err = {{0}};
    char blocker[128], inside[160], newer[128];

    /* the directory path runs through a regular file */
    snprintf(blocker, sizeof(blocker), "%s/file", f->dir);
    fclose(fopen(blocker, "w"));
    snprintf(inside, sizeof(inside), "%s/sub", blocker);
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, inside, 2), 0);
    memset(&res, 0, sizeof(res));
    assert_int_equal(poll_until_done(a, &res), 1);
    assert_true(res.rc < 0);
    assert_int_equal(res.steps_done, 17);
    assert_non_null(strstr(res.err.text, "cannot create"));

    /* a later generation of the job saved into the directory: this one is stale */
    snprintf(newer, sizeof(newer), "%s/lineage", f->dir);
    f->st.generation = 6;
    f->st.steps_done = 20;
    f->st.data_position = 20 * f->st.cfg.batch;
    assert_int_equal(tide_mlp_ckpt_save(newer, &f->st, 2, NULL, NULL, NULL, &err), 0);
    f->st.generation = 5;
    f->st.steps_done = 30;
    f->st.data_position = 30 * f->st.cfg.batch;
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, newer, 2), 0);
    memset(&res, 0, sizeof(res));
    assert_int_equal(tide_mlp_async_save_wait(a, &res), 0);
    assert_int_equal(res.rc, -ESTALE);
    assert_non_null(strstr(res.err.text, "not saving"));
    assert_false(file_exists(newer, 30));

    /* refused before any thread: another parameter count */
    f->st.n_params--;
    assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 2), -EINVAL);
    f->st.n_params++;
    assert_false(tide_mlp_async_save_busy(a));
    tide_mlp_async_save_free(a);
}

static void test_free_waits_for_the_save_in_flight(void **state)
{
    fixture_t *f = *state;
    tide_mlp_async_save_t *a = tide_mlp_async_save_new(f->st.n_params);
    tide_mlp_state_t before = copy_state(&f->st);
    tide_mlp_state_t got = {0};
    tide_error_t err = {{0}};

    assert_int_equal(tide_mlp_async_save_start(a, &f->st, f->dir, 2), 0);
    tide_mlp_async_save_free(a); /* joins: the file is complete when it returns */
    assert_int_equal(tide_mlp_ckpt_load_step(f->dir, 17, &f->st.cfg, &got, &err), 0);
    assert_memory_equal(got.params, before.params, sizeof(double) * before.n_params);
    tide_mlp_state_free(&got);
    tide_mlp_state_free(&before);
    tide_mlp_async_save_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_is_the_state_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poll_hands_out_only_complete_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_series_loses_no_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures_come_back_as_the_result, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_waits_for_the_save_in_flight, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
