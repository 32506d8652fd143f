/* tide-mlp: a reference data-parallel trainer on MPI (docs/tide-mlp.md). Every rank runs the
 * micro-batches it owns, the fixed-point sums meet in one MPI_Allreduce per step, and every rank
 * applies the same update. Invariant: after each step all ranks hold the same parameters, bitwise
 * equal to those of any other world size, and they agree on when to checkpoint and to stop. */
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fixed_point.h"
#include "mlp_config.h"
#include "model.h"
#include "shard.h"
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

/* Control values that travel at the end of the step's allreduce (summed over ranks). */
enum { CTL_OVERFLOW, CTL_CHECKPOINT, CTL_STOP, CTL_COUNT };

typedef struct run {
    const tide_mlp_options_t *opt;
    int rank, world;
    tide_trainer_t *sdk;
    uint64_t n; /* parameters */
    double *params, *velocity;
    int64_t *acc;        /* n gradient sums, the loss sum, then CTL_COUNT control values */
    uint64_t steps_done; /* also the index of the next step */
    uint64_t generation; /* TIDE_GENERATION of this run (0 outside tide) */
    bool warned_no_dir;
} run_t;

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

/* Rank 0 loads the newest valid checkpoint and broadcasts it. Returns 0 (resumed or fresh) or 1. */
static int resume(run_t *r)
{
    const tide_mlp_options_t *o = r->opt;
    tide_mlp_state_t st = {0};
    char path[TIDE_MLP_CKPT_PATH_MAX] = "";
    tide_error_t err = {{0}};
    uint64_t hdr[2] = {0, 0};
    int rc = 0;

    if (r->rank == 0) {
        rc = tide_mlp_ckpt_load_newest(o->checkpoint_dir, &o->cfg, &st, path, stderr, &err);
        if (rc == 0) {
            hdr[0] = st.steps_done;
            hdr[1] = st.generation;
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

/* All ranks: rank 0 writes the checkpoint of the state after r->steps_done steps, every rank
 * reports its part to tide. Returns 0 or 1 (the checkpoint failed; rank 0 said why). */
static int checkpoint(run_t *r, bool requested)
{
    const tide_mlp_options_t *o = r->opt;
    char path[TIDE_MLP_CKPT_PATH_MAX] = "", hex[65] = "";
    uint64_t bytes = 0;
    int64_t request = 0;
    int rc = 0;

    tide_trainer_phase(r->sdk, TIDE_PHASE_CHECKPOINT);
    if (r->rank == 0) {
        tide_mlp_state_t st = {
            .cfg = o->cfg,
            .steps_done = r->steps_done,
            .data_position = r->steps_done * o->cfg.batch,
            .generation = r->generation,
            .n_params = r->n,
            .params = r->params,
            .velocity = r->velocity,
        };
        tide_error_t err = {{0}};
        rc =
            tide_mlp_ckpt_save(o->checkpoint_dir, &st, o->checkpoint_keep, path, &bytes, hex, &err);
        if (rc)
            fprintf(stderr, "tide-mlp: checkpoint after %" PRIu64 " steps failed: %s\n",
                    r->steps_done, err.text);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc)
        return 1;
    if (requested && !tide_trainer_checkpoint_requested(r->sdk, &request, NULL))
        request = 0;
    /* The SDK's step is the index of the last finished step: steps_done - 1. */
    tide_trainer_checkpoint(r->sdk, (int64_t)r->steps_done - 1, path, bytes, hex, request);
    tide_trainer_phase(r->sdk, TIDE_PHASE_FORWARD);
    if (r->rank == 0 && !o->quiet) {
        printf("tide-mlp: checkpoint %s (%" PRIu64 " bytes)\n", path, bytes);
        fflush(stdout);
    }
    return 0;
}

static int train(run_t *r)
{
    const tide_mlp_options_t *o = r->opt;
    const tide_mlp_config_t *c = &o->cfg;
    const uint64_t mb_size = c->batch / c->micro_batches;
    const double flops_sample = (double)tide_mlp_flops_per_sample(c);
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
    tide_trainer_phase(r->sdk, TIDE_PHASE_FORWARD); /* later steps say so in their step report */
    for (uint64_t step = r->steps_done; step < o->steps; step++) {
        uint32_t mbs = 0;
        bool want_ckpt, stop;

        ctl[CTL_OVERFLOW] = 0;
        if (tide_mlp_shard_run(sh, r->params, step, (uint32_t)r->rank, (uint32_t)r->world, r->acc,
                               &mbs) != 0)
            ctl[CTL_OVERFLOW] = 1;
        ctl[CTL_CHECKPOINT] = tide_trainer_checkpoint_requested(r->sdk, NULL, NULL) ? 1 : 0;
        ctl[CTL_STOP] = tide_trainer_should_stop(r->sdk, (int64_t)step) ? 1 : 0;
        tide_trainer_phase(r->sdk, TIDE_PHASE_UPDATE);
        MPI_Allreduce(MPI_IN_PLACE, r->acc, (int)(r->n + 1 + CTL_COUNT), MPI_INT64_T, MPI_SUM,
                      MPI_COMM_WORLD);
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
        r->steps_done = step + 1;
        done_here++;
        loss = tide_mlp_fixed_to_double(r->acc[r->n]) / (double)c->batch;
        tide_trainer_step(r->sdk, (int64_t)step, TIDE_PHASE_FORWARD, flops_sample * mb_size * mbs,
                          (int64_t)(mb_size * mbs), 0);
        if (r->rank == 0 && !o->quiet && o->log_every &&
            (r->steps_done % o->log_every == 0 || step == first || r->steps_done == o->steps)) {
            printf("step %" PRIu64 " loss %.6f elapsed %.2fs\n", step, loss, MPI_Wtime() - t0);
            fflush(stdout);
        }

        stop = ctl[CTL_STOP] > 0;
        want_ckpt = ctl[CTL_CHECKPOINT] > 0 || stop || r->steps_done == o->steps ||
                    (o->checkpoint_every && r->steps_done % o->checkpoint_every == 0);
        if (ctl[CTL_CHECKPOINT] > 0 && !o->checkpoint_dir && !r->warned_no_dir) {
            if (r->rank == 0)
                fprintf(stderr, "tide-mlp: tide asked for a checkpoint but there is no "
                                "--checkpoint-dir; ignored\n");
            r->warned_no_dir = true;
        }
        if (want_ckpt && o->checkpoint_dir && checkpoint(r, ctl[CTL_CHECKPOINT] > 0) != 0 &&
            (stop || r->steps_done == o->steps)) {
            rc = 1; /* the state we stop with is not saved: say so */
            break;
        }
        if (stop) {
            if (r->rank == 0 && !o->quiet)
                printf("tide-mlp: stopping after step %" PRIu64 " as tide asked\n", step);
            break;
        }
    }
    if (r->rank == 0 && !o->quiet && done_here) {
        double el = MPI_Wtime() - t0;
        double step_flops = flops_sample * (double)c->batch;
        printf("tide-mlp: %" PRIu64 " steps in %.2fs on %d ranks: %.2f steps/s, %.3f GFLOP/s "
               "(%.1f MFLOP per step, final loss %.6f)\n",
               done_here, el, r->world, done_here / el, step_flops * done_here / el / 1e9,
               step_flops / 1e6, loss);
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
    };
    char hex[65];
    int rc = 0;

    r.params = tide_xmalloc(sizeof(double) * r.n);
    r.velocity = tide_xcalloc(r.n, sizeof(double));
    r.acc = tide_xcalloc(r.n + 1 + CTL_COUNT, sizeof(int64_t));
    tide_mlp_params_init(&o->cfg, r.params);
    if (getenv("TIDE_AGENT_SOCK") && !getenv("RANK")) {
        /* The SDK's hello names the rank by RANK; under mpirun the MPI rank is the one to give. */
        char rs[16];
        snprintf(rs, sizeof(rs), "%d", rank);
        setenv("RANK", rs, 1);
    }
    r.sdk = tide_trainer_open();
    if (o->checkpoint_dir)
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
    tide_trainer_close(r.sdk);
    free(r.acc);
    free(r.velocity);
    free(r.params);
    return rc;
}

int main(int argc, char **argv)
{
    tide_mlp_options_t o;
    tide_error_t err = {{0}};
    int rank = 0, world = 1, rc;

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
    } else if ((uint64_t)tide_mlp_param_count(&o.cfg) + 1 + CTL_COUNT > (uint64_t)INT32_MAX) {
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
