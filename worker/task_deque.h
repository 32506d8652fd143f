/* Task deques, worker side (docs/work-stealing.md): for each rank this worker runs, the pools its
 * trainer declared with `tasks`, each a deque of queued task ids that next_task pops from the head
 * and ReleaseTasks takes from the tail, the tasks handed to the trainer, the completions not yet
 * reported (TasksDone), the steal that serves an empty deque, and the rank's task statistics. Pure
 * C: no I/O, no libuv, no clock; messages to the scheduler go out through ops.send and time comes
 * in as now_ms (monotonic), so tests drive it without sockets.
 *
 * A rank is named by the id its owner gives it (the worker core's id) and by (job, generation,
 * rank) for the scheduler's messages. Kinds are tide.v1.TaskKind values (1 member, 2 detached). A
 * task id is, on this worker, in exactly one state per pool: queued, handed, done or released. */
#ifndef TIDE_WORKER_TASK_DEQUE_H
#define TIDE_WORKER_TASK_DEQUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tide/v1/worker_service.pb-c.h"

typedef struct tide_task_deque tide_task_deque_t;

typedef struct tide_task_deque_ops {
    /* Queues msg (borrowed for the call) on the scheduler stream. Returns 0, or -errno when it was
     * not queued (no welcomed stream): the deque keeps what it must send again. */
    int (*send)(void *ud, const Tide__V1__WorkerMessage *msg);
} tide_task_deque_ops_t;

/* What next_task gets. */
typedef enum tide_task_next {
    TIDE_TASK_NEXT_TASK = 1, /* run *id now */
    TIDE_TASK_NEXT_NONE = 2, /* no_task: the rank's part of the step is done */
    TIDE_TASK_NEXT_WAIT = 3, /* a steal is out: the answer comes from a later give */
} tide_task_next_t;

/* Where a task id is, as far as this rank's pool knows. */
typedef enum tide_task_state {
    TIDE_TASK_UNKNOWN = 0,  /* never in this pool here */
    TIDE_TASK_QUEUED = 1,   /* in the deque */
    TIDE_TASK_HANDED = 2,   /* handed to the trainer, not done */
    TIDE_TASK_DONE = 3,     /* done (reported or not) */
    TIDE_TASK_RELEASED = 4, /* released to the scheduler for a thief */
} tide_task_state_t;

/* An answer owed to a next_task that waited (or that a newer declaration cut short). */
typedef struct tide_task_answer {
    void *waiter; /* the caller's token for that next_task; NULL: nobody to answer */
    int kind;
    int64_t step;
    bool has_task; /* true: `task` with id; false: `no_task` */
    uint64_t id;
} tide_task_answer_t;

/* A rank's task figures (TrainerProgress 18-23). */
typedef struct tide_task_stats {
    uint64_t tasks_run;        /* tasks its trainer finished */
    uint64_t tasks_stolen;     /* of those, received through GiveTasks */
    uint64_t tasks_given;      /* ids released from its deque */
    double task_seconds;       /* mean handed -> done of the tasks that ended in the last
                                  ~10 s; when none did but one is under way, the recent
                                  (weighted) mean, or that task's time if already longer;
                                  0: not measured (none ended lately and none under way) */
    double busy_fraction;      /* share of the last ~10 s with a task handed (0..1) */
    double steal_wait_seconds; /* total time a next_task waited for a steal's answer */
} tide_task_stats_t;

/* Creates an empty set of deques; ops copied, ud borrowed. Caller frees. */
void tide_task_deque_new(const tide_task_deque_ops_t *ops, void *ud, tide_task_deque_t **out);
/* NULL is fine. Sends nothing. */
void tide_task_deque_free(tide_task_deque_t *d);

/* Rank rank_id runs here as (job_id, generation, rank) (job_id copied); a known id is ignored. */
void tide_task_deque_rank_add(tide_task_deque_t *d, uint64_t rank_id, const char *job_id,
                              int32_t generation, int32_t rank, int64_t now_ms);
/* The rank ended: its pools go (waiters are dropped, not answered). Unknown ids are ignored. */
void tide_task_deque_rank_remove(tide_task_deque_t *d, uint64_t rank_id);

/* The trainer declared its share (ids, n distinct ids below 2^53; n <= total) of pool (kind, step)
 * and TasksDeclared goes out (again on the next welcome if it could not). An identical repeat is
 * ignored; a newer step of the same kind replaces the rank's pool of that kind (the old one is
 * kept, bounded, for its unreported completions, releases and steal; a next_task waiting on it is
 * owed `no_task`, filled in *cut). Steps only move forward in a generation: a step older than the
 * rank's current one of that kind is refused, whether its pool is kept or already forgotten.
 * Returns 0, -EEXIST (task_conflict: differs from the earlier declaration, names a replaced or
 * older step, repeats an id, or n > total), -EINVAL (bad kind), -ENXIO (unknown rank); err says
 * why. Nothing changes on error (nothing sent, *cut empty). ids borrowed; cut may be NULL. */
int tide_task_deque_declare(tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step,
                            const uint64_t *ids, size_t n, uint64_t total, int64_t now_ms,
                            tide_task_answer_t *cut, tide_error_t *err);
/* next_task: done (>= 0, or -1 for none) is marked done first (reported later); then the head of
 * the deque is handed out (TIDE_TASK_NEXT_TASK, *id), and when that was the last queued id of a
 * pool not exhausted, the steal goes out ahead: TasksDone with the unreported completions, then a
 * StealRequest with the rank's next steal id (nothing without a stream). On an empty deque:
 * TIDE_TASK_NEXT_NONE at once when the pool is exhausted (a steal was answered empty; its
 * unreported completions go now); else the trainer waits as `waiter` (TIDE_TASK_NEXT_WAIT) for the
 * steal already out, or for a new one (TasksDone, then StealRequest); TIDE_TASK_NEXT_NONE when that
 * cannot be sent. Errors change nothing: -ENOENT (unknown_step: the rank has no current pool
 * (kind, step)), -EBUSY (busy: another next_task waits on the pool), -EINVAL (unknown_task: done
 * was not handed to this rank), -ENXIO (unknown rank). waiter is the caller's token (not NULL),
 * kept until a give answers it, a newer declaration cuts it short, or forget_waiter. */
int tide_task_deque_next(tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step,
                         int64_t done, void *waiter, int64_t now_ms, uint64_t *id,
                         tide_error_t *err);
/* The waiter's connection went away: it is no longer answered (the steal stays out; its answer
 * goes into the deque). */
void tide_task_deque_forget_waiter(tide_task_deque_t *d, uint64_t rank_id, void *waiter,
                                   int64_t now_ms);
/* ReleaseTasks (borrowed): takes up to max_tasks queued ids from the tail of the pool's deque
 * (never a handed one) and answers with TasksReleased. A replay, a release_id answered before (one
 * of the last 8) for the same kind and step, gets the same ids again and takes nothing; the same
 * id for another pool is a new release. An unknown pool gets none. Returns 0, or -ENOENT when
 * (job, generation, rank) is not a rank here (nothing sent). */
int tide_task_deque_release(tide_task_deque_t *d, const Tide__V1__ReleaseTasks *req);
/* GiveTasks (borrowed): the answer to the pool's pending steal (sent ahead or for a waiter). The
 * first valid id goes to the waiting next_task (*ans), the rest into the deque; when the waiter got
 * the only one (nothing queued), the next steal goes out ahead at once (TasksDone with unreported
 * completions, then a StealRequest with the next steal id; nothing without a stream). An empty
 * answer marks the pool exhausted (no further steals for it; next_task answers no_task at once),
 * sends its unreported completions, and the waiter, if any, gets no_task. A give whose steal_id is
 * not the pool's pending one (a replay already applied) is ignored. Ids the pool already holds
 * (queued, handed or done) and new ids beyond the pool's total are skipped. Returns 0
 * (ans->waiter NULL when nobody is to be answered), or -ENOENT when (job, generation, rank) is not
 * a rank here. */
int tide_task_deque_give(tide_task_deque_t *d, const Tide__V1__GiveTasks *g, int64_t now_ms,
                         tide_task_answer_t *ans);
/* The rank is being stopped (its generation ends): a next_task waiting for a steal's answer is owed
 * `no_task` now, since the scheduler drops the generation's pools and may never answer, and the trainer
 * must get back to its step loop to see stop_after_step. Every pool of the rank is marked exhausted
 * and its steal forgotten, a steal sent ahead with nobody waiting yet too, so that a later next_task
 * on an empty deque gets `no_task` at once (a late GiveTasks for it is ignored: the generation's
 * work is redone from its checkpoint anyway). Fills out (room for max) and returns how many answers
 * are owed; call again while it returns max. */
size_t tide_task_deque_stopping(tide_task_deque_t *d, uint64_t rank_id, int64_t now_ms, tide_task_answer_t *out,
                                size_t max);
/* A Welcome arrived: per rank, pool by pool (oldest first), TasksDeclared (each current pool again:
 * as declared while none of its tasks moved, else the ids it holds now, queued, handed or done,
 * stolen ones too, released ones not, same total; a replaced pool only if never sent), then
 * TasksDone with all its completions (repeats are no-ops for the scheduler, losses are not); then
 * the rank's pending StealRequests with their ids, oldest first. Sends fail quietly. */
void tide_task_deque_welcome(tide_task_deque_t *d);
/* Heartbeat: sends TasksDone for every pool with completions not yet reported. */
void tide_task_deque_flush(tide_task_deque_t *d);

/* Queries (pure reads). */
/* The rank's task figures at now_ms (see tide_task_stats_t). Returns 0 and fills *out, or -ENXIO
 * for an unknown rank (*out zeroed). */
int tide_task_deque_stats(const tide_task_deque_t *d, uint64_t rank_id, int64_t now_ms,
                          tide_task_stats_t *out);
/* Where id is in the rank's pool (kind, step), current or replaced. */
tide_task_state_t tide_task_deque_where(const tide_task_deque_t *d, uint64_t rank_id, int kind,
                                        int64_t step, uint64_t id);
/* Whether the rank has completions that did not go out yet (their TasksDone could not be sent: no
 * stream). Its exit waits for them (docs/worker.md, "Ranks"). False for an unknown rank. */
bool tide_task_deque_unsent(const tide_task_deque_t *d, uint64_t rank_id);
/* Ids queued in that pool (0 when unknown). */
size_t tide_task_deque_queued(const tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step);
/* The pool's pending steal id, 0 when none (or no such pool). */
uint64_t tide_task_deque_pending_steal(const tide_task_deque_t *d, uint64_t rank_id, int kind,
                                       int64_t step);

#endif
