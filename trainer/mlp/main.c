/* tide-mlp: a reference data-parallel trainer on MPI (docs/tide-mlp.md). Every rank runs the
 * micro-batches tide's task iterator hands it (its own share, minus what faster ranks stole, plus
 * what it stole), the fixed-point sums meet in one MPI_Allreduce per step, and every rank applies
 * the same update; with --eval-every it also evaluates held-out shards of the newest evaluation
 * phase as detached tasks. Under TIDE_BURST=1 it neither starts MPI nor trains: it evaluates the
 * phases' shards it is handed (eval_tasks.h). Invariant: after each step all ranks hold the same
 * parameters, bitwise equal to those of any other world size and any assignment of micro-batches
 * (each counted exactly once, or the step is recomputed without stealing), and they agree on when
 * to checkpoint and to stop; evaluation never changes the parameters. With --async-checkpoints rank
 * 0 saves a snapshot in the background (async_save.h) and every rank reports it to tide at the same
 * step (CTL_SAVED, or a join point); the run never ends with a save in flight or unreported. */
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async_save.h"
#include "checkpoint.h"
#include "eval.h"
#include "eval_tasks.h"
#include "fixed_point.h"
#include "microbatch_tasks.h"
#include "mlp_config.h"
#include "model.h"
#include "shard.h"
#include "step_times.h"
#include "tide_trainer.h"
#include "xmalloc.h"

#if defined(__SANITIZE_ADDRESS__)
#define MLP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLP_ASAN 1
#endif
#endif

#ifdef MLP_ASAN
#include <sanitizer/lsan_interface.h>
/* Open MPI unloads its plugins in MPI_Finalize and leaves their allocations behind, which an
 * at-exit leak check cannot name, let alone suppress. So this program checks for leaks itself just
 * before MPI_Finalize (when everything of ours must be freed) and turns the at-exit check off. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "leak_check_at_exit=0:print_suppressions=0";
}
/* ... and Open MPI's helper threads allocate outside MPI_Init too (PMIx lookups). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libpmix.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libmpi.so\n"
           "leak:/openmpi/\nleak:libhwloc.so\nleak:libevent\n";
}
#endif

/* Control values that travel after the sums in the step's allreduce (summed over ranks).
 * CTL_SAVED (--async-checkpoints; only rank 0 puts one): the background save that finished since
 * the last step, as its steps done (saved) or its negative errno (failed); 0: none finished. */
enum { CTL_OVERFLOW, CTL_CHECKPOINT, CTL_STOP, CTL_ABORT, CTL_SAVED, CTL_COUNT };

/* Step times kept for the end-of-run percentiles (a reservoir beyond that). */
#define STEP_TIMES_KEPT 65536

/* The evaluation's way to tide (eval_tasks.h): the SDK handle and the detached pool's iterator. */
typedef struct sdk_eval {
    tide_trainer_t *t;
    tide_task_iter_t it;
} sdk_eval_t;

static int sdk_begin(void *ud, uint64_t step, const uint64_t *ids, size_t n, uint64_t total)
{
    sdk_eval_t *s = ud;

    return tide_trainer_tasks_begin(s->t, &s->it, (int64_t)step, TIDE_TRAINER_TASK_DETACHED, ids, n,
                                    total);
}

static int sdk_join(void *ud, uint64_t step, uint64_t total)
{
    sdk_eval_t *s = ud;

    return tide_trainer_tasks_join(s->t, &s->it, (int64_t)step, total);
}

static int sdk_next(void *ud, uint64_t *id)
{
    sdk_eval_t *s = ud;

    return tide_trainer_next_task(&s->it, id);
}

static void sdk_load_phase(void *ud, bool high)
{
    sdk_eval_t *s = ud;

    tide_trainer_load_phase(s->t, high);
}

static int sdk_stop(void *ud)
{
    sdk_eval_t *s = ud;

    if (tide_trainer_poll(s->t) < 0)
        return -1; /* the handle is a no-op now: no stop could ever arrive */
    return tide_trainer_should_stop(s->t, INT64_MAX) ? 1 : 0; /* any stop_after_step at all */
}

static void sdk_wait(void *ud, double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3),
                          .tv_nsec = (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};

    (void)ud;
    nanosleep(&ts, NULL);
}

static const tide_mlp_eval_ops_t sdk_eval_ops = {
    .begin = sdk_begin,
    .join = sdk_join,
    .next = sdk_next,
    .load_phase = sdk_load_phase,
    .stop = sdk_stop,
    .wait = sdk_wait,
};

typedef struct run {
    const tide_mlp_options_t *opt;
    int rank, world;
    tide_trainer_t *sdk;
    uint64_t n; /* parameters */
    double *params, *velocity;
    /* n gradient sums, the loss sum, CTL_COUNT control values, then one count per micro-batch:
     * how many times it ran in this step (the exactly-once check) */
    int64_t *acc;
    uint64_t *owned; /* the micro-batches this rank owns: its share of each step's tasks */
    uint32_t n_owned;
    bool use_tasks;      /* every rank reaches tide and the share fits a declaration */
    uint64_t steps_done; /* also the index of the next step */
    uint64_t generation; /* TIDE_GENERATION of this run (0 outside tide) */
    uint64_t job;        /* TIDE_JOB_ID of this run (0 outside tide or when not a number) */
    bool warned_no_dir;
    bool tiered; /* checkpoints go to the worker's hot tier (--tiered-checkpoints under tide) */
    tide_mlp_step_times_t *times;
    /* --async-checkpoints (with a checkpoint directory or the hot tier): rank 0 saves a snapshot
     * in the background. Every rank tracks the save it still owes tide a report of, so that all
     * report it at the same step (the `pending` fields agree on every rank). */
    bool async;
    tide_mlp_async_save_t *saver; /* rank 0 */
    bool pending;                 /* a save was started and not reported (or failed) yet */
    uint64_t pending_steps;       /* its steps done */
    int64_t pending_request;      /* the tide request it answers on this rank (0: none) */
    int pending_rc;               /* rank 0: a failure known before any thread ran (0: none) */
    tide_error_t pending_err;
    /* Checkpoint accounting for the end-of-run line: saves reported, seconds the loop spent in
     * checkpointing (sync: the whole save; async: the snapshot, joins and reports). */
    uint64_t ckpt_saved;
    double ckpt_stall;
    sdk_eval_t eval_sdk;
    tide_mlp_eval_phase_t *eval; /* NULL without --eval-every */
} run_t;

static uint64_t acc_count(const run_t *r)
{
    return r->n + 1 + CTL_COUNT + r->opt->cfg.micro_batches;
}

static uint64_t env_u64(const char *name)
{
    const char *s = getenv(name);
    char *end = NULL;
    unsigned long long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    return errno || *end ? 0 : v;
}

/* Rank 0 under --tiered-checkpoints: asks the worker where the newest usable copy is (it names on
 * stderr every copy it passed over). Returns 0 with dir filled, -ENOENT (start fresh) or -errno. */
static int restore_dir(run_t *r, char *dir, size_t len)
{
    const tide_trainer_skip_t *sk;
    int64_t step = -1;
    int rc = tide_trainer_restore(r->sdk, &step, dir, len);
    size_t n = tide_trainer_restore_skipped(r->sdk, &sk);

    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "tide-mlp: skipped step %" PRId64 " in %s: %s\n", sk[i].step, sk[i].tier,
                sk[i].reason);
    if (rc == 0 && !r->opt->quiet)
        printf("tide-mlp: restoring step %" PRId64 " from the %s tier\n", step,
               tide_trainer_restore_tier(r->sdk));
    else if (rc == -ENOENT && !r->opt->quiet)
        printf("tide-mlp: no checkpoint to restore (%s)\n", tide_trainer_restore_reason(r->sdk));
    return rc;
}

/* Rank 0 loads the newest valid checkpoint (of another job, or of this job's generation or an
 * earlier one) and broadcasts it. A run whose directory holds a later generation's checkpoint of
 * the same job is a stale rank: it stops here, since it could never save (docs/tide-mlp.md).
 * Returns 0 (resumed or fresh) or 1. */
static int resume(run_t *r)
{
    const tide_mlp_options_t *o = r->opt;
    tide_mlp_state_t st = {0};
    char path[TIDE_MLP_CKPT_PATH_MAX] = "";
    tide_error_t err = {{0}};
    uint64_t hdr[2] = {0, 0};
    int rc = 0;

    if (r->rank == 0 && r->tiered) {
        char dir[TIDE_MLP_CKPT_PATH_MAX];
        rc = restore_dir(r, dir, sizeof(dir));
        if (rc == 0) {
            rc = tide_mlp_ckpt_load_newest(dir, &o->cfg, r->job, r->generation, &st, path, stderr,
                                           &err);
            if (rc == -ENOENT) /* the worker verified a copy that holds no tide-mlp file */
                rc = -EBADMSG;
        } else if (rc != -ENOENT)
            tide_errprintf(&err, "the tide worker's restore failed: %s", strerror(-rc));
        if (rc == 0) {
            hdr[0] = st.steps_done;
            hdr[1] = st.generation;
        } else if (rc != -ENOENT) {
            fprintf(stderr, "tide-mlp: cannot resume: %s\n", err.text);
        }
    } else if (r->rank == 0) {
        rc = tide_mlp_ckpt_load_newest(o->checkpoint_dir, &o->cfg, r->job, r->generation, &st, path,
                                       stderr, &err);
        if ((rc == 0 || rc == -ESTALE) && r->job > 0 && r->generation > 0) {
            tide_error_t why = {{0}};
            int lr = tide_mlp_ckpt_check_lineage(o->checkpoint_dir, r->job, r->generation, &why);
            if (lr) {
                tide_mlp_state_free(&st);
                rc = lr;
                if (lr == -ESTALE)
                    tide_errprintf(&err, "%s; not starting", why.text);
                else
                    tide_errprintf(&err, "%s", why.text);
            }
        }
        if (rc == 0) {
            hdr[0] = st.steps_done;
            hdr[1] = st.generation;
        } else if (rc == -ESTALE) {
            fprintf(stderr, "tide-mlp: %s\n", err.text);
        } else if (rc != -ENOENT) {
            fprintf(stderr, "tide-mlp: cannot resume: %s\n", err.text);
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return 1;
    MPI_Bcast(hdr, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (r->rank == 0) {
        memcpy(r->params, st.params, sizeof(double) * r->n);
        memcpy(r->velocity, st.velocity, sizeof(double) * r->n);
        tide_mlp_state_free(&st);
    }
    MPI_Bcast(r->params, (int)r->n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(r->velocity, (int)r->n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    r->steps_done = hdr[0];
    if (r->rank == 0 && !o->quiet)
        printf("tide-mlp: resumed from %s: %" PRIu64 " steps done (written by generation %" PRIu64
               "), %d ranks now\n",
               path, hdr[0], hdr[1], r->world);
    return 0;
}

/* The state after r->steps_done steps, as a checkpoint holds it (params and velocity borrowed). */
static tide_mlp_state_t state_now(const run_t *r)
{
    tide_mlp_state_t st = {
        .cfg = r->opt->cfg,
        .steps_done = r->steps_done,
        .data_position = r->steps_done * r->opt->cfg.batch,
        .generation = r->generation,
        .job = r->job,
        .n_params = r->n,
        .params = r->params,
        .velocity = r->velocity,
    };
    return st;
}

/* All ranks: rank 0 writes the checkpoint of the state after r->steps_done steps, every rank
 * reports its part to tide. Returns 0 or, on every rank, the negative errno of the failure (rank 0
 * said why): -ESTALE when the directory holds a later generation's checkpoint of this job. */
static int checkpoint(run_t *r, bool requested)
{
    const tide_mlp_options_t *o = r->opt;
    char path[TIDE_MLP_CKPT_PATH_MAX] = "", hex[65] = "";
    uint64_t bytes = 0;
    int64_t request = 0;
    int rc = 0;

    tide_trainer_phase(r->sdk, TIDE_PHASE_CHECKPOINT);
    if (r->rank == 0) {
        tide_mlp_state_t st = state_now(r);
        tide_error_t err = {{0}};
        char dir[TIDE_MLP_CKPT_PATH_MAX];
        if (!r->tiered) {
            rc = tide_mlp_ckpt_save(o->checkpoint_dir, &st, o->checkpoint_keep, path, &bytes, hex,
                                    &err);
        } else if (r->steps_done == 0) {
            rc = -EINVAL;
            tide_errprintf(&err, "no step done yet");
        } else {
            /* The worker's hot tier: one directory per step, pruned by the worker. */
            rc = tide_trainer_ckpt_path(r->sdk, (int64_t)r->steps_done - 1, dir, sizeof(dir));
            if (rc < 0)
                tide_errprintf(&err, "TIDE_CKPT_DIR: %s", strerror(-rc));
            else
                rc = tide_mlp_ckpt_save(dir, &st, 1, path, &bytes, hex, &err);
        }
        if (rc == -ESTALE)
            fprintf(stderr, "tide-mlp: %s\n", err.text);
        else if (rc)
            fprintf(stderr, "tide-mlp: checkpoint after %" PRIu64 " steps failed: %s\n",
                    r->steps_done, err.text);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc)
        return rc;
    if (requested && !tide_trainer_checkpoint_requested(r->sdk, &request, NULL))
        request = 0;
    /* The SDK's step is the index of the last finished step: steps_done - 1. */
    tide_trainer_checkpoint(r->sdk, (int64_t)r->steps_done - 1, path, bytes, hex, request);
    tide_trainer_phase(r->sdk, TIDE_PHASE_FORWARD);
    if (r->rank == 0 && !o->quiet) {
        printf("tide-mlp: checkpoint %s (%" PRIu64 " bytes)\n", path, bytes);
        fflush(stdout);
    }
    r->ckpt_saved++;
    return 0;
}

/* Whether tide asks for a checkpoint this rank has not answered yet. Under --async-checkpoints
 * the request stays pending in the SDK until the save in flight that answers it is reported:
 * that one is not asked for again. */
static bool checkpoint_wanted(run_t *r)
{
    int64_t id = 0;

    if (!tide_trainer_checkpoint_requested(r->sdk, &id, NULL))
        return false;
    return !(r->async && r->pending && id != 0 && id == r->pending_request);
}

/* All ranks, at a checkpoint step under --async-checkpoints (no save pending): rank 0 copies the
 * state after r->steps_done steps and starts saving the copy in the background; every rank notes
 * the save it now owes tide, with the request it answers (taken now, as checkpoint() does). What
 * needs the SDK (the hot tier's path) is done here, on the training thread. A failure known at
 * once is kept and comes out as the save's result. */
static void save_start(run_t *r, bool requested)
{
    const tide_mlp_options_t *o = r->opt;
    int64_t request = 0;

    tide_trainer_phase(r->sdk, TIDE_PHASE_CHECKPOINT);
    if (requested && !tide_trainer_checkpoint_requested(r->sdk, &request, NULL))
        request = 0;
    r->pending = true;
    r->pending_steps = r->steps_done;
    r->pending_request = request;
    r->pending_rc = 0;
    tide_error_clear(&r->pending_err);
    if (r->rank == 0) {
        tide_mlp_state_t st = state_now(r);
        char dir[TIDE_MLP_CKPT_PATH_MAX];
        const char *into = o->checkpoint_dir;
        uint32_t keep = o->checkpoint_keep;
        int rc = 0;

        if (r->tiered && r->steps_done == 0) {
            rc = -EINVAL;
            tide_errprintf(&r->pending_err, "no step done yet");
        } else if (r->tiered) {
            /* The worker's hot tier: one directory per step, pruned by the worker. */
            rc = tide_trainer_ckpt_path(r->sdk, (int64_t)r->steps_done - 1, dir, sizeof(dir));
            if (rc < 0)
                tide_errprintf(&r->pending_err, "TIDE_CKPT_DIR: %s", strerror(-rc));
            into = dir;
            keep = 1;
        }
        if (rc == 0) {
            rc = tide_mlp_async_save_start(r->saver, &st, into, keep);
            if (rc)
                tide_errprintf(&r->pending_err, "cannot start the background save: %s",
                               strerror(-rc));
        }
        r->pending_rc = rc;
    }
    tide_trainer_phase(r->sdk, TIDE_PHASE_FORWARD);
}

/* Rank 0, once per step, as it fills the control values: whether the pending save has finished
 * (its done flag is looked at once here; a finished thread is joined, its result goes to *res).
 * Returns the value every rank then acts on (save_finish): the save's steps done, its negative
 * errno, or 0 (none finished, or not rank 0). */
static int64_t save_poll(run_t *r, tide_mlp_save_result_t *res)
{
    if (r->rank != 0 || !r->pending)
        return 0;
    if (r->pending_rc) {
        res->rc = r->pending_rc;
        res->steps_done = r->pending_steps;
        res->err = r->pending_err;
        return r->pending_rc;
    }
    if (tide_mlp_async_save_poll(r->saver, res) != 1)
        return 0;
    return res->rc == 0 ? (int64_t)res->steps_done : (int64_t)res->rc;
}

/* All ranks, with the same value (save_poll's on rank 0, shared by an allreduce or a broadcast):
 * reports a finished save to tide as checkpoint() does (rank 0 with the file, the others without)
 * or, for a failed one, has rank 0 say why. res is rank 0's. Returns 0 (none finished, or
 * reported) or the failure's negative errno: -ESTALE, a later generation's checkpoint is there. */
static int save_finish(run_t *r, int64_t value, const tide_mlp_save_result_t *res)
{
    const bool r0 = r->rank == 0;

    if (value == 0)
        return 0;
    r->pending = false;
    r->pending_rc = 0;
    if (value < 0) {
        if (r0 && value == -ESTALE)
            fprintf(stderr, "tide-mlp: %s\n", res->err.text);
        else if (r0)
            fprintf(stderr, "tide-mlp: checkpoint after %" PRIu64 " steps failed: %s\n",
                    r->pending_steps, res->err.text);
        return (int)value;
    }
    /* The SDK's step is the index of the last finished step: steps done - 1. */
    tide_trainer_checkpoint(r->sdk, (int64_t)r->pending_steps - 1, r0 ? res->path : "",
                            r0 ? res->bytes : 0, r0 ? res->hex : "", r->pending_request);
    if (r0 && !r->opt->quiet) {
        printf("tide-mlp: checkpoint %s (%" PRIu64 " bytes)\n", res->path, res->bytes);
        fflush(stdout);
    }
    r->ckpt_saved++;
    return 0;
}

/* All ranks, at a join point (another checkpoint is due, the run ends): rank 0 waits for the
 * pending save, broadcasts how it ended, and every rank reports it (save_finish). Returns as
 * save_finish; 0 when no save is pending. */
static int save_join(run_t *r)
{
    tide_mlp_save_result_t res;
    int64_t value = 0;

    if (!r->pending)
        return 0; /* the same on every rank */
    memset(&res, 0, sizeof(res));
    if (r->rank == 0) {
        value = save_poll(r, &res);
        if (value == 0) {
            tide_mlp_async_save_wait(r->saver, &res);
            value = res.rc == 0 ? (int64_t)res.steps_done : (int64_t)res.rc;
        }
    }
    MPI_Bcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return save_finish(r, value, &res);
}

/* Micro-batch m of step into the sums (unless the step already overflowed), counted once more. */
static void run_microbatch(run_t *r, tide_mlp_shard_t *sh, uint64_t step, uint64_t m)
{
    int64_t *ctl = r->acc + r->n + 1;

    ctl[CTL_COUNT + m]++;
    if (!ctl[CTL_OVERFLOW] &&
        tide_mlp_shard_add_microbatch(sh, r->params, step, (uint32_t)m, r->acc) != 0)
        ctl[CTL_OVERFLOW] = 1; /* the step is dropped; its tasks are still taken to the end */
    if (r->opt->simulated_compute_ms > 0)
        tide_mlp_simulated_compute(r->opt->simulated_compute_ms);
}

/* Clears the sums, the overflow and abort flags and the counts for a (re)computation of a step. */
static void clear_step(run_t *r)
{
    int64_t *ctl = r->acc + r->n + 1;

    memset(r->acc, 0, sizeof(int64_t) * (r->n + 1));
    ctl[CTL_OVERFLOW] = 0;
    ctl[CTL_ABORT] = 0;
    memset(ctl + CTL_COUNT, 0, sizeof(int64_t) * r->opt->cfg.micro_batches);
}

/* The rank's own micro-batches, in order: the way without tide's tasks. Returns how many. */
static uint32_t run_owned(run_t *r, tide_mlp_shard_t *sh, uint64_t step)
{
    for (uint32_t i = 0; i < r->n_owned; i++)
        run_microbatch(r, sh, step, r->owned[i]);
    return r->n_owned;
}

/* The micro-batches tide's task iterator hands out (docs/work-stealing.md). Returns 0 with *ran,
 * or < 0 when the iteration failed (the step's result is unknown). */
static int run_tasks(run_t *r, tide_mlp_shard_t *sh, uint64_t step, uint32_t *ran)
{
    const uint32_t mbs = r->opt->cfg.micro_batches;
    tide_task_iter_t it;
    uint64_t id;
    int rc;

    *ran = 0;
    rc = tide_trainer_tasks_begin(r->sdk, &it, (int64_t)step, TIDE_TRAINER_TASK_MEMBER, r->owned,
                                  r->n_owned, mbs);
    while (rc == 0) {
        rc = tide_trainer_next_task(&it, &id);
        if (rc != 1)
            break;
        rc = 0;
        if (id >= mbs) {
            fprintf(stderr,
                    "tide-mlp: rank %d, step %" PRIu64 ": tide handed out micro-batch %" PRIu64
                    ", but a step has %u\n",
                    r->rank, step, id, mbs);
            rc = -ERANGE;
            break;
        }
        run_microbatch(r, sh, step, id);
        (*ran)++;
    }
    return rc;
}

/* Whether every rank can take its micro-batches from tide: all reach a tide worker (else a rank
 * that never declares could hold up the others' steals) and a share fits one declaration. */
static void agree_on_tasks(run_t *r)
{
    const uint32_t mbs = r->opt->cfg.micro_batches;
    bool fits = tide_mlp_max_owned(mbs, (uint32_t)r->world) <= TIDE_TASKS_MAX_SHARE &&
                mbs <= TIDE_TASKS_MAX_TOTAL;
    int mine[2] = {r->sdk ? 1 : 0, r->sdk ? -1 : 0}, all[2];

    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD); /* every one; -(any one) */
    r->use_tasks = all[0] == 1 && fits;
    if (r->rank != 0)
        return;
    if (all[1] == -1 && all[0] == 0)
        fprintf(stderr, "tide-mlp: not every rank reaches tide: micro-batches run without "
                        "stealing\n");
    else if (all[0] == 1 && !fits)
        fprintf(stderr,
                "tide-mlp: more than %d micro-batches per rank: they run without "
                "stealing\n",
                TIDE_TASKS_MAX_SHARE);
}

static int train(run_t *r)
{
    const tide_mlp_options_t *o = r->opt;
    const tide_mlp_config_t *c = &o->cfg;
    const uint64_t mb_size = c->batch / c->micro_batches;
    const double flops_sample = (double)tide_mlp_flops_per_sample(c);
    const double eval_flops_shard =
        (double)tide_mlp_forward_flops_per_sample(c) * (double)tide_mlp_eval_shard_samples(c);
    tide_mlp_shard_t *sh = tide_mlp_shard_new(c);
    int64_t *ctl = r->acc + r->n + 1;
    uint64_t first = r->steps_done, done_here = 0;
    double t0 = MPI_Wtime(), loss = 0;
    int rc = 0;

    if (r->steps_done > 0 && r->steps_done < o->steps) {
        /* stop_after_step for a step a resumed run has already done: stop now, all ranks together
         */
        int stop = tide_trainer_should_stop(r->sdk, (int64_t)r->steps_done - 1) ? 1 : 0;
        MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (stop) {
            if (r->rank == 0 && !o->quiet)
                printf("tide-mlp: stopping before step %" PRIu64 " as tide asked\n", r->steps_done);
            goto done;
        }
    }
    agree_on_tasks(r);
    tide_trainer_phase(r->sdk, TIDE_PHASE_FORWARD); /* later steps say so in their step report */
    for (uint64_t step = r->steps_done; step < o->steps; step++) {
        double step_t0 = MPI_Wtime();
        int64_t want_local, stop_local, saved_local, times = 0;
        tide_mlp_save_result_t saved; /* rank 0: the result behind saved_local */
        uint64_t eval_ran = 0;
        uint32_t mbs = 0, bad = 0;
        bool eval_step;
        bool want_ckpt, stop;
        int trc = 0;

        clear_step(r);
        if (r->use_tasks)
            trc = run_tasks(r, sh, step, &mbs);
        else
            mbs = run_owned(r, sh, step);
        if (trc < 0) {
            fprintf(stderr,
                    "tide-mlp: rank %d, step %" PRIu64 ": taking micro-batches from tide failed "
                    "(%s): which ran elsewhere is unknown, so the run stops\n",
                    r->rank, step, strerror(-trc));
            ctl[CTL_ABORT] = 1; /* still joins the allreduce, so that no rank waits for it */
        }
        if (r->eval && tide_mlp_eval_phase_is_open(r->eval, NULL)) {
            /* this step's share of the open evaluation phase (detached: it never joins the
             * allreduce, so a failure only ends the rank's phase) */
            tide_trainer_phase(r->sdk, TIDE_PHASE_EVAL);
            tide_mlp_eval_phase_run(r->eval, o->eval_per_step, &eval_ran);
        }
        if (r->async)
            want_local = checkpoint_wanted(r) ? 1 : 0;
        else
            want_local = tide_trainer_checkpoint_requested(r->sdk, NULL, NULL) ? 1 : 0;
        stop_local = tide_trainer_should_stop(r->sdk, (int64_t)step) ? 1 : 0;
        saved_local = save_poll(r, &saved); /* decided once: the value rank 0 acts on below */
        ctl[CTL_CHECKPOINT] = want_local;
        ctl[CTL_STOP] = stop_local;
        ctl[CTL_SAVED] = saved_local;
        tide_trainer_phase(r->sdk, TIDE_PHASE_UPDATE);
        MPI_Allreduce(MPI_IN_PLACE, r->acc, (int)acc_count(r), MPI_INT64_T, MPI_SUM,
                      MPI_COMM_WORLD);
        if (ctl[CTL_SAVED] != 0) {
            /* A background save finished: every rank reports it now, whatever this step comes to
             * (ctl[CTL_SAVED] is rank 0's saved_local, the only non-zero addend). */
            double c0 = MPI_Wtime();
            int src = save_finish(r, ctl[CTL_SAVED], &saved);
            r->ckpt_stall += MPI_Wtime() - c0;
            if (src == -ESTALE) {
                rc = 1; /* a stale rank stops at once */
                break;
            }
        }
        if (ctl[CTL_ABORT]) {
            if (r->rank == 0)
                fprintf(stderr,
                        "tide-mlp: step %" PRIu64 ": %" PRId64 " rank(s) could not finish their "
                        "micro-batches; the step is dropped and the run stops\n",
                        step, ctl[CTL_ABORT]);
            rc = 1;
            break;
        }
        if (!tide_mlp_task_counts_ok(ctl + CTL_COUNT, c->micro_batches, &bad, &times)) {
            /* Some micro-batch ran twice or never: the sums are wrong. Every rank recomputes its
             * own share, as without tide's tasks, and the step is reduced again. */
            if (r->rank == 0)
                fprintf(stderr,
                        "tide-mlp: step %" PRIu64
                        ": task accounting off (micro-batch %u ran %" PRId64
                        " times); step recomputed without stealing\n",
                        step, bad, times);
            clear_step(r);
            mbs = run_owned(r, sh, step);
            ctl[CTL_CHECKPOINT] = want_local;
            ctl[CTL_STOP] = stop_local;
            ctl[CTL_SAVED] = 0; /* acted on after the first reduction */
            MPI_Allreduce(MPI_IN_PLACE, r->acc, (int)acc_count(r), MPI_INT64_T, MPI_SUM,
                          MPI_COMM_WORLD);
            if (!tide_mlp_task_counts_ok(ctl + CTL_COUNT, c->micro_batches, &bad, &times)) {
                if (r->rank == 0)
                    fprintf(stderr,
                            "tide-mlp: step %" PRIu64 ": micro-batch %u ran %" PRId64
                            " times even without stealing; the run stops\n",
                            step, bad, times);
                rc = 1;
                break;
            }
        }
        if (ctl[CTL_OVERFLOW]) {
            if (r->rank == 0)
                fprintf(stderr,
                        "tide-mlp: step %" PRIu64
                        ": a gradient or the loss of a micro-batch is not "
                        "finite or beyond the fixed-point range (|x| <= 2^31 / %u); the step is "
                        "dropped and the run stops (try a smaller --lr)\n",
                        step, c->micro_batches);
            rc = 1;
            break;
        }
        tide_mlp_sgd_update(c, r->params, r->velocity, r->acc, r->n);
        tide_mlp_step_times_add(r->times, (MPI_Wtime() - step_t0) * 1e3);
        r->steps_done = step + 1;
        done_here++;
        loss = tide_mlp_fixed_to_double(r->acc[r->n]) / (double)c->batch;
        /* per rank: the micro-batches this rank ran, whoever owned them, and the forward passes
         * of the evaluation shards it ran in this step */
        tide_trainer_step(r->sdk, (int64_t)step, TIDE_PHASE_FORWARD,
                          flops_sample * mb_size * mbs + eval_flops_shard * eval_ran,
                          (int64_t)(mb_size * mbs), 0);
        if (r->rank == 0 && !o->quiet && o->log_every &&
            (r->steps_done % o->log_every == 0 || step == first || r->steps_done == o->steps)) {
            printf("step %" PRIu64 " loss %.6f elapsed %.2fs\n", step, loss, MPI_Wtime() - t0);
            fflush(stdout);
        }

        stop = ctl[CTL_STOP] > 0;
        eval_step = r->eval && r->steps_done % o->eval_every == 0;
        want_ckpt = ctl[CTL_CHECKPOINT] > 0 || stop || r->steps_done == o->steps || eval_step ||
                    (o->checkpoint_every && r->steps_done % o->checkpoint_every == 0);
        if (ctl[CTL_CHECKPOINT] > 0 && !o->checkpoint_dir && !r->tiered && !r->warned_no_dir) {
            if (r->rank == 0)
                fprintf(stderr, "tide-mlp: tide asked for a checkpoint but there is no "
                                "--checkpoint-dir; ignored\n");
            r->warned_no_dir = true;
        }
        if (want_ckpt && (o->checkpoint_dir || r->tiered)) {
            double c0 = MPI_Wtime();
            int crc;

            if (!r->async) {
                crc = checkpoint(r, ctl[CTL_CHECKPOINT] > 0);
            } else {
                /* The save still in flight first: joined and reported before this one starts
                 * (its failure other than -ESTALE is said and training goes on, as in sync). */
                crc = save_join(r);
                if (crc != -ESTALE) {
                    save_start(r, ctl[CTL_CHECKPOINT] > 0);
                    /* The run ends here: its last state is saved and reported before it goes. An
                     * evaluation phase opens on a written checkpoint (its lent processes read the file),
                     * as without the flag. */
                    crc = stop || r->steps_done == o->steps || eval_step ? save_join(r) : 0;
                }
            }
            r->ckpt_stall += MPI_Wtime() - c0;
            /* a stale rank stops at once: it must not train on beside a newer generation */
            if (crc == -ESTALE || (crc != 0 && (stop || r->steps_done == o->steps))) {
                rc = 1; /* the state we stop with is not saved: say so */
                break;
            }
            /* The evaluation phase of this step, from the parameters just saved (bitwise the
             * checkpoint's). Not on a stop: the rank leaves now, and so does its phase. */
            if (eval_step && crc == 0 && !stop)
                tide_mlp_eval_phase_open(r->eval, r->steps_done, r->params, NULL);
            else if (eval_step && crc != 0 && r->rank == 0)
                fprintf(stderr,
                        "tide-mlp: no evaluation phase after step %" PRIu64
                        ": its checkpoint was not written\n",
                        step);
        }
        if (r->eval && r->steps_done == o->steps && !stop)
            tide_mlp_eval_phase_drain(r->eval, NULL); /* the run ends: finish the open phase */
        if (stop) {
            if (r->rank == 0 && !o->quiet)
                printf("tide-mlp: stopping after step %" PRIu64 " as tide asked\n", step);
            break;
        }
    }
    if (r->pending) {
        /* A run that ended on an error with a save in flight: finished and reported first. */
        double c0 = MPI_Wtime();
        if (save_join(r) == -ESTALE)
            rc = 1;
        r->ckpt_stall += MPI_Wtime() - c0;
    }
    if (r->rank == 0 && !o->quiet && done_here) {
        double el = MPI_Wtime() - t0;
        double step_flops = flops_sample * (double)c->batch;
        double p50 = 0, p90 = 0, max = 0;
        printf("tide-mlp: %" PRIu64 " steps in %.2fs on %d ranks: %.2f steps/s, %.3f GFLOP/s "
               "(%.1f MFLOP per step, final loss %.6f)\n",
               done_here, el, r->world, done_here / el, step_flops * done_here / el / 1e9,
               step_flops / 1e6, loss);
        tide_mlp_step_times_summary(r->times, &p50, &p90, &max);
        printf("tide-mlp: step time p50 %.3f ms p90 %.3f ms max %.3f ms\n", p50, p90, max);
        printf("tide-mlp: checkpoints: %" PRIu64 " saved, training stalled %.3f s of %.2f s "
               "(%.2f %%)\n",
               r->ckpt_saved, r->ckpt_stall, el, el > 0 ? 100 * r->ckpt_stall / el : 0.0);
    }
done:
    tide_mlp_shard_free(sh);
    return rc;
}

static int run(const tide_mlp_options_t *o, int rank, int world)
{
    run_t r = {
        .opt = o,
        .rank = rank,
        .world = world,
        .n = tide_mlp_param_count(&o->cfg),
        .generation = env_u64("TIDE_GENERATION"),
        .job = tide_mlp_job_id(getenv("TIDE_JOB_ID")),
    };
    char hex[65];
    int rc = 0;

    r.params = tide_xmalloc(sizeof(double) * r.n);
    r.velocity = tide_xcalloc(r.n, sizeof(double));
    r.acc = tide_xcalloc(acc_count(&r), sizeof(int64_t));
    r.owned = tide_xcalloc(tide_mlp_max_owned(o->cfg.micro_batches, (uint32_t)world) + 1,
                           sizeof(uint64_t));
    r.n_owned =
        tide_mlp_owned_microbatches(o->cfg.micro_batches, (uint32_t)rank, (uint32_t)world, r.owned);
    r.times = tide_mlp_step_times_new(o->steps < STEP_TIMES_KEPT ? (size_t)o->steps + 1
                                                                 : STEP_TIMES_KEPT);
    tide_mlp_params_init(&o->cfg, r.params);
    if (getenv("TIDE_AGENT_SOCK") && !getenv("RANK")) {
        /* The SDK's hello names the rank by RANK; under mpirun the MPI rank is the one to give. */
        char rs[16];
        snprintf(rs, sizeof(rs), "%d", rank);
        setenv("RANK", rs, 1);
    }
    r.sdk = tide_trainer_open();
    r.eval_sdk.t = r.sdk;
    {
        /* Every rank must agree: rank 0 decides (it is the one that saves and restores). */
        int tiered = o->tiered && r.sdk && getenv("TIDE_CKPT_DIR") && getenv("TIDE_CKPT_DIR")[0];
        MPI_Bcast(&tiered, 1, MPI_INT, 0, MPI_COMM_WORLD);
        r.tiered = tiered != 0;
        if (o->tiered && !r.tiered && rank == 0 && !o->quiet)
            fprintf(stderr, "tide-mlp: --tiered-checkpoints needs a tide worker (TIDE_CKPT_DIR): "
                            "using --checkpoint-dir%s\n",
                    o->checkpoint_dir ? "" : " (none: no checkpoints)");
    }
    if (o->eval_every > 0)
        r.eval = tide_mlp_eval_phase_new(o, (uint32_t)rank, (uint32_t)world, &sdk_eval_ops,
                                         &r.eval_sdk, stderr);
    r.async = o->async_checkpoints && (o->checkpoint_dir || r.tiered);
    if (r.async && rank == 0)
        r.saver = tide_mlp_async_save_new(r.n);
    if (o->checkpoint_dir || r.tiered)
        rc = resume(&r);
    if (rc == 0 && r.rank == 0 && !o->quiet)
        printf("tide-mlp: %" PRIu64 " parameters, %d ranks, batch %" PRIu64 " in %u micro-batches, "
               "steps %" PRIu64 "..%" PRIu64 "\n",
               r.n, world, o->cfg.batch, o->cfg.micro_batches, r.steps_done, o->steps);
    if (rc == 0)
        rc = train(&r);
    if (rc == 0 && r.rank == 0) {
        tide_mlp_params_sha256_hex(r.params, r.n, hex);
        printf("params-sha256 %s\n", hex);
    }
    fflush(stdout);
    tide_mlp_async_save_free(r.saver); /* idle: train() joined every save it started */
    tide_mlp_eval_phase_free(r.eval);
    tide_trainer_close(r.sdk);
    tide_mlp_step_times_free(r.times);
    free(r.owned);
    free(r.acc);
    free(r.velocity);
    free(r.params);
    return rc;
}

/* A process on a worker lent to the job (TIDE_BURST=1): no MPI, no training; it evaluates the
 * shards of the job's evaluation phases it is handed until tide takes the worker back. */
static int burst_main(int argc, char **argv)
{
    tide_mlp_options_t o;
    tide_error_t err = {{0}};
    sdk_eval_t sdk = {0};
    int rc;

    tide_mlp_options_default(&o);
    if (tide_mlp_options_parse(&o, argc, argv, &err) != 0) {
        fprintf(stderr, "tide-mlp: %s\n", err.text);
        return 2;
    }
    if (o.help) {
        fputs(tide_mlp_usage(), stdout);
        return 0;
    }
    if (o.eval_every == 0) {
        fprintf(stderr, "tide-mlp: a burst process (TIDE_BURST=1) evaluates the job's evaluation "
                        "phases, and this command has none (--eval-every)\n");
        return 2;
    }
    sdk.t = tide_trainer_open();
    if (!sdk.t) {
        fprintf(stderr, "tide-mlp: a burst process (TIDE_BURST=1) takes its work from a tide "
                        "worker, and there is none\n");
        return 1;
    }
    if (!o.quiet)
        printf("tide-mlp: burst %" PRIu64 " of job %s: evaluating the phases in %s\n",
               env_u64("TIDE_BURST_INDEX"), getenv("TIDE_JOB_ID") ? getenv("TIDE_JOB_ID") : "?",
               o.checkpoint_dir);
    fflush(stdout);
    rc = tide_mlp_burst_run(&o, tide_mlp_job_id(getenv("TIDE_JOB_ID")), env_u64("TIDE_GENERATION"),
                            env_u64("TIDE_BURST_INDEX"), &sdk_eval_ops, &sdk, stderr);
    tide_trainer_close(sdk.t);
    return rc;
}

int main(int argc, char **argv)
{
    tide_mlp_options_t o;
    tide_error_t err = {{0}};
    int rank = 0, world = 1, rc;

    if (tide_trainer_is_burst()) { /* before MPI_Init: a lent process is no MPI rank */
        rc = burst_main(argc, argv);
        fflush(stdout);
#ifdef MLP_ASAN
        if (__lsan_do_recoverable_leak_check() != 0 && rc == 0)
            rc = 1;
#endif
        return rc;
    }
#ifdef MLP_ASAN
    __lsan_disable(); /* what Open MPI allocates in MPI_Init is its own business */
#endif
    MPI_Init(&argc, &argv);
#ifdef MLP_ASAN
    __lsan_enable();
#endif
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tide_mlp_options_default(&o);
    if (tide_mlp_options_parse(&o, argc, argv, &err) != 0) {
        if (rank == 0)
            fprintf(stderr, "tide-mlp: %s\n", err.text);
        rc = 2;
    } else if (o.help) {
        if (rank == 0)
            fputs(tide_mlp_usage(), stdout);
        rc = 0;
    } else if ((uint64_t)tide_mlp_param_count(&o.cfg) + 1 + CTL_COUNT + o.cfg.micro_batches >
               (uint64_t)INT32_MAX) {
        if (rank == 0)
            fprintf(stderr, "tide-mlp: the model has too many parameters for one MPI message\n");
        rc = 2;
    } else {
        rc = run(&o, rank, world);
    }
    fflush(stdout);
#ifdef MLP_ASAN
    if (__lsan_do_recoverable_leak_check() != 0 && rc == 0)
        rc = 1;
#endif
    MPI_Finalize();
    return rc;
}
