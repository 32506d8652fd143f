/* Evaluation phases and the burst loop (eval_tasks.h). Invariant: a process iterates one pool at a
 * time and never declares a new one while the old is unfinished (the worker would forget it); a
 * shard is evaluated with bitwise the parameters of its step's checkpoint, and a shard in hand is
 * always finished and then reported done by the next `next`. */
#include "eval_tasks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "microbatch_tasks.h"
#include "model.h"
#include "xmalloc.h"

struct tide_mlp_eval_phase {
    const tide_mlp_options_t *opt;
    uint32_t rank, world;
    const tide_mlp_eval_ops_t *ops;
    void *ud;
    FILE *log;
    tide_mlp_eval_t *ev;
    uint64_t n_params;
    double *params; /* the open phase's step's parameters, kept aside */
    uint64_t *ids;  /* this rank's share, borrowed by the pool while it is open */
    uint64_t step;
    bool open;
    bool log_failed; /* eval.log could not be appended to in this phase (said once) */
};

tide_mlp_eval_phase_t *tide_mlp_eval_phase_new(const tide_mlp_options_t *o, uint32_t rank,
                                               uint32_t world, const tide_mlp_eval_ops_t *ops,
                                               void *ud, FILE *log)
{
    tide_mlp_eval_phase_t *ph = tide_xcalloc(1, sizeof(*ph));

    ph->opt = o;
    ph->rank = rank;
    ph->world = world ? world : 1;
    ph->ops = ops;
    ph->ud = ud;
    ph->log = log;
    ph->ev = tide_mlp_eval_new(&o->cfg);
    ph->n_params = tide_mlp_param_count(&o->cfg);
    ph->params = tide_xmalloc(sizeof(double) * (ph->n_params ? ph->n_params : 1));
    ph->ids = tide_xcalloc(o->eval_tasks / ph->world + 1, sizeof(uint64_t));
    return ph;
}

void tide_mlp_eval_phase_free(tide_mlp_eval_phase_t *ph)
{
    if (!ph)
        return;
    tide_mlp_eval_free(ph->ev);
    free(ph->ids);
    free(ph->params);
    free(ph);
}

/* Evaluates one shard with params and appends its line; a failed append is said once per phase
 * (the shard still counts as done: its loss is only lost from the log). */
static void evaluate(const tide_mlp_options_t *o, tide_mlp_eval_t *ev, const double *params,
                     uint64_t step, uint64_t shard, const tide_mlp_evaluator_t *who,
                     bool *log_failed, FILE *log)
{
    double loss = tide_mlp_eval_shard_loss(ev, params, shard);
    tide_error_t err = {{0}};

    if (o->eval_compute_ms > 0)
        tide_mlp_simulated_compute(o->eval_compute_ms);
    if (tide_mlp_eval_log_append(o->checkpoint_dir, step, shard, loss, who, &err) != 0 &&
        !*log_failed) {
        *log_failed = true;
        if (log)
            fprintf(log, "tide-mlp: evaluation of step %" PRIu64 ": %s\n", step, err.text);
    }
}

static void close_phase(tide_mlp_eval_phase_t *ph)
{
    ph->open = false;
    if (ph->rank == 0)
        ph->ops->load_phase(ph->ud, false);
}

int tide_mlp_eval_phase_run(tide_mlp_eval_phase_t *ph, uint64_t max, uint64_t *ran)
{
    const tide_mlp_evaluator_t who = {.burst = false, .index = ph->rank};
    uint64_t done = 0, id;
    int rc = 0;

    while (ph->open && done < max) {
        int r = ph->ops->next(ph->ud, &id);
        if (r == 0) {
            close_phase(ph);
            break;
        }
        if (r == 1 && id >= ph->opt->eval_tasks) {
            if (ph->log)
                fprintf(ph->log,
                        "tide-mlp: rank %u: tide handed out evaluation shard %" PRIu64
                        " of step %" PRIu64 ", but a phase has %u; the rank leaves the phase\n",
                        ph->rank, id, ph->step, ph->opt->eval_tasks);
            r = -ERANGE;
        }
        if (r < 0) {
            /* Evaluation is detached from training: the rank trains on, without this phase. */
            if (ph->log && r != -ERANGE)
                fprintf(ph->log,
                        "tide-mlp: rank %u: taking evaluation shards of step %" PRIu64
                        " from tide failed (%s); the rank leaves the phase\n",
                        ph->rank, ph->step, strerror(-r));
            rc = r;
            close_phase(ph);
            break;
        }
        evaluate(ph->opt, ph->ev, ph->params, ph->step, id, &who, &ph->log_failed, ph->log);
        done++;
    }
    if (ran)
        *ran = done;
    return rc;
}

int tide_mlp_eval_phase_drain(tide_mlp_eval_phase_t *ph, uint64_t *ran)
{
    return tide_mlp_eval_phase_run(ph, UINT64_MAX, ran);
}

int tide_mlp_eval_phase_open(tide_mlp_eval_phase_t *ph, uint64_t step, const double *params,
                             uint64_t *ran)
{
    uint32_t n;
    int rc;

    if (ran)
        *ran = 0;
    /* A new declaration makes the worker forget the old pool: finish it first. */
    if (ph->open)
        tide_mlp_eval_phase_drain(ph, ran);
    memcpy(ph->params, params, sizeof(double) * ph->n_params);
    n = tide_mlp_eval_share(ph->opt->eval_tasks, ph->rank, ph->world, ph->ids);
    rc = ph->ops->begin(ph->ud, step, ph->ids, n, ph->opt->eval_tasks);
    if (rc < 0) {
        if (ph->log)
            fprintf(ph->log,
                    "tide-mlp: rank %u: the evaluation shards of step %" PRIu64
                    " could not be declared (%s); no evaluation on this rank\n",
                    ph->rank, step, strerror(-rc));
        return rc;
    }
    ph->step = step;
    ph->open = true;
    ph->log_failed = false;
    if (ph->rank == 0)
        ph->ops->load_phase(ph->ud, true);
    return 0;
}

bool tide_mlp_eval_phase_is_open(const tide_mlp_eval_phase_t *ph, uint64_t *step)
{
    if (step)
        *step = ph->open ? ph->step : 0;
    return ph->open;
}

/* --- the burst loop --------------------------------------------------------------------------- */

int tide_mlp_burst_next_step(const char *dir, uint64_t every, uint64_t job, uint64_t generation,
                             bool has_after, uint64_t after, uint64_t *step)
{
    uint64_t *steps = NULL;
    int n = tide_mlp_ckpt_list(dir, &steps), rc = 0;

    if (n < 0 || every == 0) {
        rc = n < 0 ? n : 0;
        goto done;
    }
    for (int i = 0; i < n; i++) { /* newest first */
        uint64_t fjob = 0, fgen = 0;
        if (has_after && steps[i] <= after)
            break;
        if (steps[i] % every != 0)
            continue;
        if (tide_mlp_ckpt_peek(dir, steps[i], &fjob, &fgen) != 0)
            continue; /* gone, or not (yet) a checkpoint: the loader would refuse it too */
        if ((job > 0 && fjob != job) || (generation > 0 && fgen != generation))
            continue; /* another job's, or another generation's: not a pool of ours */
        *step = steps[i];
        rc = 1;
        break;
    }
done:
    free(steps);
    return rc;
}

/* What one joined phase ended with. */
typedef enum burst_end { BURST_PHASE_DONE, BURST_STOP, BURST_LOST } burst_end_t;

static burst_end_t stop_state(const tide_mlp_eval_ops_t *ops, void *ud)
{
    int s = ops->stop(ud);

    return s > 0 ? BURST_STOP : s < 0 ? BURST_LOST : BURST_PHASE_DONE;
}

/* Loads step's checkpoint, joins its pool and evaluates every shard handed out. */
static burst_end_t burst_phase(const tide_mlp_options_t *o, uint64_t step, uint64_t job,
                               uint64_t generation, const tide_mlp_evaluator_t *who,
                               tide_mlp_eval_t *ev, const tide_mlp_eval_ops_t *ops, void *ud,
                               FILE *log)
{
    tide_mlp_state_t st = {0};
    tide_error_t err = {{0}};
    burst_end_t end = BURST_PHASE_DONE;
    bool log_failed = false;
    uint64_t id;
    int rc;

    rc = tide_mlp_ckpt_load_step(o->checkpoint_dir, step, &o->cfg, &st, &err);
    if (rc == 0 &&
        ((job > 0 && st.job != job) || (generation > 0 && st.generation != generation))) {
        /* replaced since it was peeked at, by another lineage's file */
        tide_errprintf(&err, "it was rewritten by job %" PRIu64 " generation %" PRIu64, st.job,
                       st.generation);
        rc = -ESTALE;
    }
    if (rc) {
        if (log)
            fprintf(log, "tide-mlp: burst %" PRIu64 ": step %" PRIu64 " skipped: %s\n", who->index,
                    step, err.text);
        goto done;
    }
    rc = ops->join(ud, step, o->eval_tasks);
    while (rc == 0) {
        rc = ops->next(ud, &id);
        if (rc != 1)
            break; /* 0: nothing left for this process, the phase is over here */
        if (id >= o->eval_tasks) {
            rc = -ERANGE;
            break;
        }
        /* A shard handed out after a stop is not run: the process exits, and tide gives the
         * shard to a rank. One in hand before the stop was finished and reported by this call. */
        end = stop_state(ops, ud);
        if (end != BURST_PHASE_DONE)
            goto done;
        evaluate(o, ev, st.params, step, id, who, &log_failed, log);
        rc = 0;
    }
    if (rc == -EPIPE) {
        end = BURST_LOST;
    } else if (rc < 0 && log) {
        /* a join refused (the phase is over: an unknown or stale step) or a bad answer */
        fprintf(log, "tide-mlp: burst %" PRIu64 ": step %" PRIu64 " skipped: %s\n", who->index,
                step, rc == -ERANGE ? "tide handed out a shard beyond the phase's" : strerror(-rc));
    }
done:
    tide_mlp_state_free(&st);
    return end;
}

int tide_mlp_burst_run(const tide_mlp_options_t *o, uint64_t job, uint64_t generation,
                       uint64_t index, const tide_mlp_eval_ops_t *ops, void *ud, FILE *log)
{
    const tide_mlp_evaluator_t who = {.burst = true, .index = index};
    tide_mlp_eval_t *ev = tide_mlp_eval_new(&o->cfg);
    bool has_last = false, warned = false;
    uint64_t last = 0, step = 0;
    burst_end_t end;

    for (;;) {
        int found;

        end = stop_state(ops, ud);
        if (end != BURST_PHASE_DONE)
            break;
        found = tide_mlp_burst_next_step(o->checkpoint_dir, o->eval_every, job, generation,
                                         has_last, last, &step);
        if (found < 0 && !warned && log) {
            fprintf(log, "tide-mlp: burst %" PRIu64 ": %s: %s (still looking)\n", index,
                    o->checkpoint_dir, strerror(-found));
            warned = true;
        }
        if (found != 1) {
            ops->wait(ud, TIDE_MLP_BURST_POLL_MS);
            continue;
        }
        has_last = true;
        last = step; /* handled, whatever comes of it: a phase is joined at most once */
        end = burst_phase(o, step, job, generation, &who, ev, ops, ud, log);
        if (end != BURST_PHASE_DONE)
            break;
    }
    tide_mlp_eval_free(ev);
    if (end == BURST_LOST && log)
        fprintf(log, "tide-mlp: burst %" PRIu64 ": the connection to the tide worker was lost\n",
                index);
    return end == BURST_LOST ? 1 : 0;
}
