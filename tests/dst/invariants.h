/* The invariants the harness checks (tests/dst/README.md), after every step and at the events that
 * matter (a spawn, a core call, a commit, a reply, a restart), on top of h_check_invariants' checks of
 * the core's internals: no worker over-committed; no acknowledged job lost (across restarts, final
 * states final, numbers never reused); never two generations of a job at once; no job waiting behind a
 * lower class while capacity allows (the pass replayed on a model of the cluster), and every job ended
 * at the end unless it never could run; placement honours pool, class, memory, device and topology; the
 * headroom reserve; checkpoint steps and the checkpoint gate; the core's timers; work stealing (at most
 * once, exactly once, no task lost when its holder dies, every waiting next_task answered); elastic
 * scaling (ScaleJob's answers, sizes within bounds and targets, resize phases, grow claims, the
 * resizable list). Known core bugs are tolerated as dst.h describes unless strict. */
#ifndef TIDE_DST_INVARIANTS_H
#define TIDE_DST_INVARIANTS_H

#include "dst.h"
#include "shell.h"
#include "store.h"
#include "world.h"

#define DST_STARVE_MS 5000
#define DST_STEAL_LIVE_MS 30000 /* in the quiet world, a next_task waits at most this long */

checker_t *chk_new(void);
void chk_free(checker_t *c);

/* A worker is about to start (job, gen, rank); orphaned: the scheduler has written that worker off;
 * burst: a lent slot's process (its slot number is used again after the process before it ended). */
void chk_on_spawn(dst_t *d, agent_t *a, const char *job, int32_t gen, int32_t rank, bool orphaned, bool burst);
/* A core call returned with these events; the reserve and usable count before it. */
void chk_after_call(dst_t *d, const shell_event_t *ev, size_t n, int32_t reserve_before,
                    int32_t usable_before);
/* The core accepted a submit with this id (not acknowledged yet). */
void chk_on_submit(dst_t *d, const char *id);
/* The core dropped a finished job (DELETE_JOB). */
void chk_on_delete(dst_t *d, const char *id);
/* A batch is about to be committed. */
void chk_on_commit(dst_t *d, const store_batch_t *b);
/* The turn's batch is durable (its events become visible) / was lost in a crash. */
void chk_turn_committed(dst_t *d);
void chk_turn_lost(dst_t *d);
/* A reply reached its client (after its commit); arg: OP_SCALE's target (0: elastic). */
void chk_on_reply(dst_t *d, shell_op_t op, const char *id, int rc, int32_t arg);
/* A job as a ScaleJob call found it (exists false: unknown to the core). */
typedef struct chk_scale {
    bool exists;
    int state;
    int32_t target, resize_state, resize_to, size_cap, generation, n_ranks, min, max;
    bool settled; /* running, fully started, no worker awaited, not yielding, no resize in progress: a
                     shrink starts now */
} chk_scale_t;
/* tide_core_job_scale(id, workers, elastic) returned rc (err: its text) after emitting n_acts actions,
 * for a job that was `before`: the right answer, and a refusal changed nothing. */
void chk_on_scale(dst_t *d, const char *id, int32_t workers, bool elastic, int rc, const char *err,
                  const chk_scale_t *before, size_t n_acts);
/* Drain (docs/elastic.md, "Drain"). What the worker was before tide_core_worker_drain: known to the core,
 * bound to (job, gen, rank) (job "" when free), that rank a current rank of a RUNNING job. */
typedef struct chk_drain {
    bool exists;
    char job[DST_ID_MAX];
    int32_t gen, rank;
    bool current; /* a rank < n_ranks of the job's current generation, the job RUNNING */
} chk_drain_t;
/* tide_core_worker_drain(id) returned rc after emitting n_acts actions, for a worker that was `before`:
 * -ENOENT exactly when it was unknown (and then no action); else it is cordoned, bound to nothing new,
 * and its job, when it ran a current rank there, is changing generation. The worker is watched until
 * chk_on_uncordon. */
void chk_on_drain(dst_t *d, const char *id, int rc, const chk_drain_t *before, size_t n_acts);
/* A client uncordoned the worker (the core accepted it). */
void chk_on_uncordon(dst_t *d, const char *id);
/* Hang detection: the shell is about to hand the core rank progress p of (job, gen, rank) from w: the
 * checker notes when the rank's step last moved as the core can see it (its own bookkeeping). */
void chk_on_progress(dst_t *d, const tide_worker_t *w, const char *job, int32_t gen, int32_t rank,
                     const tide_trainer_progress_t *p);
/* The scheduler was rebuilt from the store. */
void chk_on_restart(dst_t *d);
/* Work stealing. The core is about to give a thief tasks (a GIVE_TASKS action, after its call). */
void chk_on_give(dst_t *d, const tide_action_t *a);
/* The core launches a process in a lent slot (a LAUNCH for a slot after the generation's ranks). */
void chk_on_lend(dst_t *d, const tide_action_t *a);
/* Around tide_core_tasks_done of m: the ids' holders before the call (at most max of them), then the
 * check that what the call committed was held by, and handed to, the reporting rank. */
void chk_task_holders(dst_t *d, const net_msg_t *m, tide_task_kind_t kind, int32_t *before, size_t max);
void chk_task_committed(dst_t *d, const net_msg_t *m, tide_task_kind_t kind, const int32_t *before, size_t max);
/* The core's view of one pool is consistent: its counts add up; walk: they agree with the holders of
 * the job's task ids, and every holder is alive. */
void chk_task_pool(dst_t *d, const char *job_id, int32_t gen, tide_task_kind_t kind, int64_t step, bool walk);

/* After every step of the event loop. */
void chk_step(dst_t *d);
/* After the world was left alone: everything ended that could. */
void chk_final(dst_t *d);
/* Whether the quiet world is done: every job ended (or can never run), no process runs, every worker
 * is free. */
bool chk_settled(dst_t *d);

#endif
