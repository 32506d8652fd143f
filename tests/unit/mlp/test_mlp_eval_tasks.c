/* tide-mlp's evaluation phases and burst loop (trainer/mlp/eval_tasks.c) against a fake SDK (an
 * ops struct that records every call): a rank declares its share, takes at most E shards per call,
 * evaluates each with the parameters kept aside when the phase opened, drains an unfinished phase
 * before declaring the next, and rank 0 reports high load for exactly the phase's life; a lent
 * process joins each new phase of its own job and generation once, from the step's checkpoint,
 * finishes and reports the shard in hand, runs none handed out after a stop, skips phases it cannot
 * join or load, and exits 1 when the connection is lost. No sockets, no sleeps (the fake's wait
 * returns at once), no timing. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "eval.h"
#include "eval_tasks.h"
#include "mlp_config.h"
#include "model.h"

/* --- the fake SDK --------------------------------------------------------------------------- */

#define MAX_NEXT_CALLS 1000

typedef struct fake fake_t;
struct fake {
    char trace[8192]; /* every call, in order: "begin 10 [0,1] 5;", "next 3;", "load 1;" ... */
    uint64_t pool[128];
    size_t pool_n, pool_next;
    int begins, joins, nexts, waits, loads_high, loads_low;
    uint64_t joined[16];
    int begin_rc;     /* begin returns this */
    int refuse_joins; /* > 0: the next of a joined pool fails with this errno (a refused join) */
    int fail_next_at; /* the nth next call (1-based; 0: never) returns fail_rc */
    int fail_rc;
    uint64_t bogus_id;   /* > 0: a begun pool hands out this id first */
    int stop_at_handout; /* stop becomes pending when next hands out this many shards (0: never) */
    int stop_at_done; /* stop becomes pending when a pool says done for the nth time (0: never) */
    int stop_rc;      /* what stop() answers once pending: 1, or -1 (connection lost) */
    bool stop_pending;
    int handed, dones;
    void (*on_wait)(fake_t *f); /* the burst tests' "ranks" write checkpoints here */
    void *test;
};

static void trace(fake_t *f, const char *fmt, ...)
{
    size_t len = strlen(f->trace);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(f->trace + len, sizeof(f->trace) - len, fmt, ap);
    va_end(ap);
}

static int fake_begin(void *ud, uint64_t step, const uint64_t *ids, size_t n, uint64_t total)
{
    fake_t *f = ud;

    f->begins++;
    trace(f, "begin %llu [", (unsigned long long)step);
    for (size_t i = 0; i < n; i++)
        trace(f, "%s%llu", i ? "," : "", (unsigned long long)ids[i]);
    trace(f, "] %llu;", (unsigned long long)total);
    if (f->begin_rc)
        return f->begin_rc;
    assert_true(n <= 120);
    f->pool_n = 0;
    if (f->bogus_id)
        f->pool[f->pool_n++] = f->bogus_id;
    memcpy(f->pool + f->pool_n, ids, sizeof(*ids) * n); /* outside tide: the rank's own ids */
    f->pool_n += n;
    f->pool_next = 0;
    return 0;
}

static int fake_join(void *ud, uint64_t step, uint64_t total)
{
    fake_t *f = ud;

    assert_true(f->joins < 16);
    f->joined[f->joins++] = step;
    trace(f, "join %llu %llu;", (unsigned long long)step, (unsigned long long)total);
    /* the ranks have started none: every shard is there to take */
    f->pool_n = total < 128 ? total : 128;
    for (size_t i = 0; i < f->pool_n; i++)
        f->pool[i] = i;
    f->pool_next = 0;
    return 0;
}

static int fake_next(void *ud, uint64_t *id)
{
    fake_t *f = ud;

    f->nexts++;
    assert_true(f->nexts < MAX_NEXT_CALLS);
    if (f->fail_next_at && f->nexts == f->fail_next_at) {
        trace(f, "next fail;");
        return f->fail_rc;
    }
    if (f->refuse_joins && f->joins > 0 && f->begins == 0) {
        trace(f, "next refused;");
        return -f->refuse_joins;
    }
    if (f->pool_next >= f->pool_n) {
        trace(f, "next done;");
        if (++f->dones == f->stop_at_done)
            f->stop_pending = true;
        return 0;
    }
    *id = f->pool[f->pool_next++];
    trace(f, "next %llu;", (unsigned long long)*id);
    if (++f->handed == f->stop_at_handout)
        f->stop_pending = true;
    return 1;
}

static void fake_load_phase(void *ud, bool high)
{
    fake_t *f = ud;

    trace(f, "load %d;", high ? 1 : 0);
    if (high)
        f->loads_high++;
    else
        f->loads_low++;
}

static int fake_stop(void *ud)
{
    fake_t *f = ud;

    return f->stop_pending ? (f->stop_rc ? f->stop_rc : 1) : 0;
}

static void fake_wait(void *ud, double ms)
{
    fake_t *f = ud;

    assert_true(ms > 0);
    f->waits++;
    assert_true(f->waits < MAX_NEXT_CALLS);
    if (f->on_wait)
        f->on_wait(f);
}

static const tide_mlp_eval_ops_t fake_ops = {
    .begin = fake_begin,
    .join = fake_join,
    .next = fake_next,
    .load_phase = fake_load_phase,
    .stop = fake_stop,
    .wait = fake_wait,
};

/* --- fixture: options, a checkpoint directory, parameters ------------------------------------ */

typedef struct fixture {
    tide_mlp_options_t o;
    char dir[64];
    uint64_t n;
    double *a, *b; /* two parameter vectors */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));

    tide_mlp_options_default(&f->o);
    f->o.cfg.input = 4;
    f->o.cfg.width = 6;
    f->o.cfg.depth = 2;
    f->o.cfg.output = 2;
    f->o.cfg.batch = 16;
    f->o.cfg.micro_batches = 4;
    f->o.eval_every = 2;
    f->o.eval_tasks = 5;
    f->o.eval_per_step = 2;
    f->o.eval_compute_ms = 0;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_mlp_evt.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->o.checkpoint_dir = f->dir;
    f->n = tide_mlp_param_count(&f->o.cfg);
    f->a = malloc(sizeof(double) * f->n);
    f->b = malloc(sizeof(double) * f->n);
    tide_mlp_params_init(&f->o.cfg, f->a);
    for (uint64_t i = 0; i < f->n; i++)
        f->b[i] = f->a[i] * 0.5 + 0.01;
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
    free(f->a);
    free(f->b);
    free(f);
    return 0;
}

static void save(const fixture_t *f, const tide_mlp_config_t *cfg, uint64_t steps, uint64_t job,
                 uint64_t gen, const double *params)
{
    uint64_t n = tide_mlp_param_count(cfg);
    double *v = calloc(n, sizeof(double)), *p = malloc(sizeof(double) * n);
    tide_mlp_state_t st = {
        .cfg = *cfg,
        .steps_done = steps,
        .data_position = steps * cfg->batch,
        .generation = gen,
        .job = job,
        .n_params = n,
        .params = p,
        .velocity = v,
    };
    tide_error_t err = {{0}};

    if (params)
        memcpy(p, params, sizeof(double) * n);
    else
        tide_mlp_params_init(cfg, p);
    if (tide_mlp_ckpt_save(f->dir, &st, 100, NULL, NULL, NULL, &err) != 0)
        fail_msg("save of step %llu: %s", (unsigned long long)steps, err.text);
    free(p);
    free(v);
}

/* eval.log, parsed. */
typedef struct line {
    unsigned long long step, shard, who;
    double loss;
    char kind[16];
} line_t;

static int read_log(const fixture_t *f, line_t *out, int max)
{
    char path[128], buf[256];
    FILE *fp;
    int n = 0;

    snprintf(path, sizeof(path), "%s/eval.log", f->dir);
    fp = fopen(path, "r");
    if (!fp)
        return 0;
    while (fgets(buf, sizeof(buf), fp)) {
        line_t l;
        assert_true(n < max);
        if (sscanf(buf, "eval step %llu shard %llu loss %lg by %15s %llu", &l.step, &l.shard,
                   &l.loss, l.kind, &l.who) != 5)
            fail_msg("bad eval.log line: %s", buf);
        out[n++] = l;
    }
    fclose(fp);
    return n;
}

static bool same_bits(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* Every (step, shard) of `steps` appears exactly once, by `kind` `who`, with the loss of params. */
static void expect_phase(const fixture_t *f, const line_t *lines, int n, uint64_t step,
                         const double *params, const char *kind, uint64_t who)
{
    tide_mlp_eval_t *ev = tide_mlp_eval_new(&f->o.cfg);

    for (uint64_t shard = 0; shard < f->o.eval_tasks; shard++) {
        int seen = 0;
        for (int i = 0; i < n; i++) {
            if (lines[i].step != step || lines[i].shard != shard)
                continue;
            seen++;
            assert_string_equal(lines[i].kind, kind);
            assert_int_equal(lines[i].who, who);
            if (!same_bits(lines[i].loss, tide_mlp_eval_shard_loss(ev, params, shard)))
                fail_msg("step %llu shard %llu: loss %.17g is not the reference's",
                         (unsigned long long)step, (unsigned long long)shard, lines[i].loss);
        }
        if (seen != 1)
            fail_msg("step %llu shard %llu appears %d times", (unsigned long long)step,
                     (unsigned long long)shard, seen);
    }
    tide_mlp_eval_free(ev);
}

static int count_step(const line_t *lines, int n, uint64_t step)
{
    int c = 0;

    for (int i = 0; i < n; i++)
        c += lines[i].step == step;
    return c;
}

/* --- a rank's phases -------------------------------------------------------------------------- */

static void test_phase_takes_e_per_step_with_the_kept_params(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {0};
    tide_mlp_eval_phase_t *ph = tide_mlp_eval_phase_new(&f->o, 0, 1, &fake_ops, &fk, stderr);
    double *live = malloc(sizeof(double) * f->n);
    line_t lines[32];
    uint64_t ran = 99, step = 99;

    assert_false(tide_mlp_eval_phase_is_open(ph, &step));
    assert_int_equal(step, 0);
    /* nothing open: nothing taken */
    assert_int_equal(tide_mlp_eval_phase_run(ph, 2, &ran), 0);
    assert_int_equal(ran, 0);
    assert_int_equal(fk.nexts, 0);

    memcpy(live, f->a, sizeof(double) * f->n);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 10, live, &ran), 0);
    assert_int_equal(ran, 0);
    assert_string_equal(fk.trace, "begin 10 [0,1,2,3,4] 5;load 1;");
    assert_true(tide_mlp_eval_phase_is_open(ph, &step));
    assert_int_equal(step, 10);
    /* training goes on and changes the live parameters: the phase kept its own copy */
    for (uint64_t i = 0; i < f->n; i++)
        live[i] += 1;

    assert_int_equal(tide_mlp_eval_phase_run(ph, 2, &ran), 0);
    assert_int_equal(ran, 2);
    assert_int_equal(tide_mlp_eval_phase_run(ph, 2, &ran), 0);
    assert_int_equal(ran, 2);
    assert_true(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_int_equal(fk.loads_low, 0); /* still high while shards remain */
    assert_int_equal(tide_mlp_eval_phase_run(ph, 2, &ran), 0);
    assert_int_equal(ran, 1); /* the last one, then "done" */
    assert_false(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_int_equal(fk.loads_high, 1);
    assert_int_equal(fk.loads_low, 1);
    assert_int_equal(fk.nexts, 6);
    assert_string_equal(fk.trace, "begin 10 [0,1,2,3,4] 5;load 1;next 0;next 1;next 2;next 3;next "
                                  "4;next done;load 0;");
    assert_int_equal(tide_mlp_eval_phase_run(ph, 2, &ran), 0);
    assert_int_equal(ran, 0);
    assert_int_equal(fk.nexts, 6);

    int n = read_log(f, lines, 32);
    assert_int_equal(n, 5);
    expect_phase(f, lines, n, 10, f->a, "rank", 0);
    tide_mlp_eval_phase_free(ph);
    tide_mlp_eval_phase_free(NULL);
    free(live);
}

static void test_phase_drains_the_old_one_before_declaring(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {0};
    tide_mlp_eval_phase_t *ph;
    line_t lines[32];
    uint64_t ran = 0;
    const char *begin20;

    f->o.eval_tasks = 4;
    ph = tide_mlp_eval_phase_new(&f->o, 0, 1, &fake_ops, &fk, stderr);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 10, f->a, NULL), 0);
    assert_int_equal(tide_mlp_eval_phase_run(ph, 1, &ran), 0);
    assert_int_equal(ran, 1);
    /* the next phase opens while shards 1..3 of step 10 are not taken yet */
    assert_int_equal(tide_mlp_eval_phase_open(ph, 20, f->b, &ran), 0);
    assert_int_equal(ran, 3);
    begin20 = strstr(fk.trace, "begin 20");
    assert_non_null(begin20);
    assert_string_equal(fk.trace, "begin 10 [0,1,2,3] 4;load 1;next 0;next 1;next 2;next 3;next "
                                  "done;load 0;begin 20 [0,1,2,3] 4;load 1;");
    assert_int_equal(tide_mlp_eval_phase_drain(ph, &ran), 0);
    assert_int_equal(ran, 4);
    assert_false(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_int_equal(fk.loads_high, 2);
    assert_int_equal(fk.loads_low, 2);

    int n = read_log(f, lines, 32);
    assert_int_equal(n, 8);
    expect_phase(f, lines, n, 10, f->a, "rank", 0);
    expect_phase(f, lines, n, 20, f->b, "rank", 0);
    tide_mlp_eval_phase_free(ph);
}

static void test_phase_of_another_rank(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {0};
    tide_mlp_eval_phase_t *ph;
    line_t lines[32];
    uint64_t ran = 0;

    f->o.eval_tasks = 8;
    ph = tide_mlp_eval_phase_new(&f->o, 1, 3, &fake_ops, &fk, stderr);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 4, f->a, NULL), 0);
    assert_int_equal(tide_mlp_eval_phase_drain(ph, &ran), 0);
    assert_int_equal(ran, 3);
    /* its share r, r+n, ...; only rank 0 reports the load */
    assert_string_equal(fk.trace, "begin 4 [1,4,7] 8;next 1;next 4;next 7;next done;");
    int n = read_log(f, lines, 32);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) {
        assert_string_equal(lines[i].kind, "rank");
        assert_int_equal(lines[i].who, 1);
    }
    tide_mlp_eval_phase_free(ph);

    /* a rank beyond the shards declares an empty share and is done at once */
    memset(&fk, 0, sizeof(fk));
    ph = tide_mlp_eval_phase_new(&f->o, 9, 10, &fake_ops, &fk, stderr);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 6, f->a, NULL), 0);
    assert_int_equal(tide_mlp_eval_phase_run(ph, 1, &ran), 0);
    assert_int_equal(ran, 0);
    assert_string_equal(fk.trace, "begin 6 [] 8;next done;");
    tide_mlp_eval_phase_free(ph);
}

static void test_phase_failures_end_the_phase(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {.fail_next_at = 2, .fail_rc = -EPIPE};
    tide_mlp_eval_phase_t *ph = tide_mlp_eval_phase_new(&f->o, 0, 2, &fake_ops, &fk, NULL);
    uint64_t ran = 0;

    /* the iteration fails: the rank leaves the phase (and rank 0 reports the load over) */
    assert_int_equal(tide_mlp_eval_phase_open(ph, 2, f->a, NULL), 0);
    assert_int_equal(tide_mlp_eval_phase_run(ph, 5, &ran), -EPIPE);
    assert_int_equal(ran, 1);
    assert_false(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_string_equal(fk.trace, "begin 2 [0,2,4] 5;load 1;next 0;next fail;load 0;");
    assert_int_equal(tide_mlp_eval_phase_run(ph, 5, &ran), 0);
    assert_int_equal(ran, 0);
    tide_mlp_eval_phase_free(ph);

    /* a declaration that fails opens nothing and reports no load */
    memset(&fk, 0, sizeof(fk));
    fk.begin_rc = -ENOMEM;
    ph = tide_mlp_eval_phase_new(&f->o, 0, 1, &fake_ops, &fk, NULL);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 2, f->a, NULL), -ENOMEM);
    assert_false(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_int_equal(fk.loads_high, 0);
    tide_mlp_eval_phase_free(ph);

    /* a shard id beyond the phase's: not evaluated, the phase ends */
    memset(&fk, 0, sizeof(fk));
    fk.bogus_id = 5;
    ph = tide_mlp_eval_phase_new(&f->o, 0, 1, &fake_ops, &fk, NULL);
    assert_int_equal(tide_mlp_eval_phase_open(ph, 2, f->a, NULL), 0);
    assert_int_equal(tide_mlp_eval_phase_run(ph, 5, &ran), -ERANGE);
    assert_int_equal(ran, 0);
    assert_false(tide_mlp_eval_phase_is_open(ph, NULL));
    assert_int_equal(fk.loads_low, 1);
    tide_mlp_eval_phase_free(ph);

    line_t lines[8];
    assert_int_equal(read_log(f, lines, 8), 1); /* only the one shard before the failure */
}

/* --- the burst loop -----------------------------------------------------------------------------
 */

static void test_burst_next_step(void **state)
{
    fixture_t *f = *state;
    char path[128];
    uint64_t s = 0;
    FILE *fp;

    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 7, 2, false, 0, &s), 0); /* empty */
    save(f, &f->o.cfg, 2, 7, 2, f->a);
    save(f, &f->o.cfg, 4, 7, 2, f->a);
    save(f, &f->o.cfg, 5, 7, 2, f->a);
    save(f, &f->o.cfg, 6, 7, 2, f->a);
    save(f, &f->o.cfg, 8, 9, 1, f->a);  /* another job's */
    save(f, &f->o.cfg, 10, 7, 3, f->a); /* a later generation of job 7 */
    /* not a checkpoint (yet): skipped */
    snprintf(path, sizeof(path), "%s/mlp-000000000012.ckpt", f->dir);
    fp = fopen(path, "w");
    fputs("junk", fp);
    fclose(fp);

    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 7, 2, false, 0, &s), 1);
    assert_int_equal(s, 6);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 7, 2, true, 4, &s), 1);
    assert_int_equal(s, 6);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 7, 2, true, 6, &s), 0);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 9, 1, false, 0, &s), 1);
    assert_int_equal(s, 8);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 7, 3, false, 0, &s), 1);
    assert_int_equal(s, 10);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 2, 0, 0, false, 0, &s), 1);
    assert_int_equal(s, 10); /* outside tide: any job, any generation */
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 5, 7, 2, false, 0, &s), 1);
    assert_int_equal(s, 5);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 5, 7, 2, true, 5, &s), 0);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 4, 7, 2, false, 0, &s), 1);
    assert_int_equal(s, 4);
    assert_int_equal(tide_mlp_burst_next_step(f->dir, 0, 7, 2, false, 0, &s), 0);
    assert_int_equal(tide_mlp_burst_next_step("/nonexistent/tide-mlp", 2, 7, 2, false, 0, &s), 0);
}

static void write_step6(fake_t *fk)
{
    fixture_t *f = fk->test;

    if (fk->waits == 1)
        save(f, &f->o.cfg, 6, 7, 2, f->b); /* the ranks reach the next phase */
    if (fk->waits == 3)
        fk->stop_pending = true; /* tide takes the worker back */
}

static void test_burst_joins_each_new_phase_once(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {.on_wait = write_step6, .test = f};
    line_t lines[64];

    save(f, &f->o.cfg, 2, 7, 2, f->b); /* older: never joined */
    save(f, &f->o.cfg, 3, 7, 2, f->b); /* not a multiple of --eval-every */
    save(f, &f->o.cfg, 4, 7, 2, f->a);
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 3, &fake_ops, &fk, stderr), 0);
    assert_int_equal(fk.joins, 2);
    assert_int_equal(fk.joined[0], 4);
    assert_int_equal(fk.joined[1], 6);
    assert_int_equal(fk.begins, 0);
    assert_int_equal(fk.loads_high + fk.loads_low, 0); /* a lent process reports no load */
    assert_int_equal(fk.nexts, 12);                    /* 5 shards and "done", twice */
    assert_int_equal(fk.waits, 3);
    int n = read_log(f, lines, 64);
    assert_int_equal(n, 10);
    expect_phase(f, lines, n, 4, f->a, "burst", 3);
    expect_phase(f, lines, n, 6, f->b, "burst", 3);
}

static void test_burst_stops_between_shards(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {.stop_at_handout = 3};
    line_t lines[64];
    int n;

    save(f, &f->o.cfg, 4, 7, 2, f->a);
    /* the stop is pending when the third shard is handed out: the second was finished and
     * reported done by that call, the third is not run (tide gives it to a rank) */
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 0, &fake_ops, &fk, NULL), 0);
    assert_string_equal(fk.trace, "join 4 5;next 0;next 1;next 2;");
    n = read_log(f, lines, 64);
    assert_int_equal(n, 2);
    assert_int_equal(lines[0].shard, 0);
    assert_int_equal(lines[1].shard, 1);

    /* a stop that comes with the phase's end: every shard was run, and the loop exits */
    {
        char path[128];
        snprintf(path, sizeof(path), "%s/eval.log", f->dir);
        unlink(path);
    }
    memset(&fk, 0, sizeof(fk));
    fk.stop_at_done = 1;
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 0, &fake_ops, &fk, NULL), 0);
    assert_int_equal(fk.nexts, 6);
    assert_int_equal(fk.waits, 0);
    n = read_log(f, lines, 64);
    expect_phase(f, lines, n, 4, f->a, "burst", 0);

    /* a stop before anything is found: no join at all */
    memset(&fk, 0, sizeof(fk));
    fk.stop_pending = true;
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 0, &fake_ops, &fk, NULL), 0);
    assert_int_equal(fk.joins, 0);
}

static void refused_then_more(fake_t *fk)
{
    fixture_t *f = fk->test;
    tide_mlp_config_t other = f->o.cfg;

    if (fk->waits == 1) {
        fk->refuse_joins = 0;
        save(f, &f->o.cfg, 6, 7, 2, f->b);
    }
    if (fk->waits == 2) {
        other.width = 5; /* another configuration's file: not loaded, not joined */
        save(f, &other, 8, 7, 2, NULL);
    }
    if (fk->waits == 4)
        fk->stop_pending = true;
}

static void test_burst_skips_what_it_cannot_join_or_load(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {.refuse_joins = EPROTO, .on_wait = refused_then_more, .test = f};
    line_t lines[64];

    save(f, &f->o.cfg, 4, 7, 2, f->a);
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 1, &fake_ops, &fk, NULL), 0);
    /* step 4's join was refused (its phase is over), step 8 is of another config */
    assert_int_equal(fk.joins, 2);
    assert_int_equal(fk.joined[0], 4);
    assert_int_equal(fk.joined[1], 6);
    int n = read_log(f, lines, 64);
    assert_int_equal(n, 5);
    assert_int_equal(count_step(lines, n, 4), 0);
    expect_phase(f, lines, n, 6, f->b, "burst", 1);
}

static void test_burst_exits_1_when_the_connection_is_lost(void **state)
{
    fixture_t *f = *state;
    fake_t fk = {.fail_next_at = 3, .fail_rc = -EPIPE};

    save(f, &f->o.cfg, 4, 7, 2, f->a);
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 0, &fake_ops, &fk, NULL), 1);
    assert_int_equal(fk.nexts, 3);

    /* lost while waiting for a phase */
    memset(&fk, 0, sizeof(fk));
    fk.stop_pending = true;
    fk.stop_rc = -1;
    assert_int_equal(tide_mlp_burst_run(&f->o, 7, 2, 0, &fake_ops, &fk, NULL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_phase_takes_e_per_step_with_the_kept_params, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_phase_drains_the_old_one_before_declaring, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_phase_of_another_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_phase_failures_end_the_phase, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_next_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_joins_each_new_phase_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_stops_between_shards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_skips_what_it_cannot_join_or_load, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_burst_exits_1_when_the_connection_is_lost, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
