/* The invariants the harness checks (tests/dst/README.md), after every step and at the events that
 * matter (a spawn, a core call, a commit, a reply, a restart), on top of h_check_invariants' checks of
 * the core's internals: no worker over-committed; no acknowledged job lost (across restarts, final
 * states final, numbers never reused); never two generations of a job at once; no job waiting behind a
 * lower class while capacity allows (the pass replayed on a model of the cluster), and every job ended
 * at the end unless it never could run; placement honours pool, class, memory, device and topology; the
 * headroom reserve; checkpoint steps and the checkpoint gate; the core's timers. Known core bugs are
 * tolerated as dst.h describes unless strict. */
#ifndef TIDE_DST_INVARIANTS_H
#define TIDE_DST_INVARIANTS_H

#include "dst.h"
#include "shell.h"
#include "store.h"
#include "world.h"

#define DST_STARVE_MS 5000

checker_t *chk_new(void);
void chk_free(checker_t *c);

/* A worker is about to start (job, gen, rank); orphaned: the scheduler has written that worker off. */
void chk_on_spawn(dst_t *d, agent_t *a, const char *job, int32_t gen, int32_t rank, bool orphaned);
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
/* A reply reached its client (after its commit). */
void chk_on_reply(dst_t *d, shell_op_t op, const char *id, int rc);
/* The scheduler was rebuilt from the store. */
void chk_on_restart(dst_t *d);
/* After every step of the event loop. */
void chk_step(dst_t *d);
/* After the world was left alone: everything ended that could. */
void chk_final(dst_t *d);
/* Whether the quiet world is done: every job ended (or can never run), no process runs, every worker
 * is free. */
bool chk_settled(dst_t *d);

#endif
