/* A tide-mlp checkpoint saved in the background (--async-checkpoints, docs/tide-mlp.md): the caller
 * hands over the state at a step, which is copied into a snapshot buffer the object owns (allocated
 * once, reused), and one background thread runs tide_mlp_ckpt_save on that copy (lineage check,
 * encode, write, fsync, rename, prune) while the caller trains on. At most one save is in flight.
 * The thread makes no MPI and no SDK calls: the caller reports the result once it has collected it.
 * Pure of MPI and the SDK, so the unit tests drive it directly. */
#ifndef TIDE_MLP_ASYNC_SAVE_H
#define TIDE_MLP_ASYNC_SAVE_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"

typedef struct tide_mlp_async_save tide_mlp_async_save_t;

/* What a finished save ended with: rc 0 (path, bytes, hex filled, as tide_mlp_ckpt_save fills
 * them) or the negative errno with err saying why (-ESTALE: a later generation's checkpoint of the
 * job is in the directory, nothing written). steps_done: the step of the state that was saved. */
typedef struct tide_mlp_save_result {
    int rc;
    uint64_t steps_done;
    char path[TIDE_MLP_CKPT_PATH_MAX];
    uint64_t bytes;
    char hex[65];
    tide_error_t err;
} tide_mlp_save_result_t;

/* For tests: called on the background thread before it saves (never with the snapshot locked). */
typedef void (*tide_mlp_async_save_hook_cb)(void *ud);

/* A saver for states of n_params parameters (the snapshot buffers are allocated here, once).
 * Never fails (out of memory aborts); free with tide_mlp_async_save_free. */
tide_mlp_async_save_t *tide_mlp_async_save_new(uint64_t n_params);

/* Copies *s (its params and velocity too: the caller may change its own at once after the call)
 * and dir (borrowed for the call), and starts the thread that saves the copy into dir keeping the
 * newest `keep` (tide_mlp_ckpt_save). Returns 0; -EBUSY when a save is in flight or its result was
 * not collected yet (poll or wait); -EINVAL when s has another parameter count or dir does not fit
 * TIDE_MLP_CKPT_PATH_MAX; or the negative errno of pthread_create. Nothing started on failure. */
int tide_mlp_async_save_start(tide_mlp_async_save_t *a, const tide_mlp_state_t *s, const char *dir,
                              uint32_t keep);

/* Whether a save was started and its result not collected yet. */
bool tide_mlp_async_save_busy(const tide_mlp_async_save_t *a);

/* Looks once at whether the save in flight has finished: if so, joins the thread, fills *res and
 * returns 1 (the object is idle again, the file, if rc is 0, complete and in place); returns 0
 * while it runs, -ENOENT when none was started. */
int tide_mlp_async_save_poll(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res);

/* Waits for the save in flight to finish, joins it and fills *res. Returns 0, or -ENOENT when none
 * was started. */
int tide_mlp_async_save_wait(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res);

/* Sets the test hook (NULL: none) that each later save calls on its thread before saving. */
void tide_mlp_async_save_set_hook(tide_mlp_async_save_t *a, tide_mlp_async_save_hook_cb cb,
                                  void *ud);

/* Waits for a save in flight (its result is dropped), then frees everything. NULL is fine. */
void tide_mlp_async_save_free(tide_mlp_async_save_t *a);

#endif
