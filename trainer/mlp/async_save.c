/* The background checkpoint save of --async-checkpoints (async_save.h): one snapshot, one thread.
 * Invariant: the thread only reads the snapshot and writes the result, and sets `done` (release)
 * after its last write; the caller touches neither while a save is in flight, and collects the
 * result only after it saw `done` (acquire) or joined the thread, so a collected result always
 * names a file that is complete and in place. */
#include "async_save.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_mlp_async_save {
    uint64_t n_params;
    tide_mlp_state_t snap; /* params and velocity: owned buffers, reused by every save */
    char dir[TIDE_MLP_CKPT_PATH_MAX];
    uint32_t keep;
    tide_mlp_save_result_t res; /* written by the thread, read after `done` */
    pthread_t thread;
    bool running; /* a thread was started and not joined yet (caller's side only) */
    atomic_bool done;
    tide_mlp_async_save_hook_cb hook;
    void *hook_ud;
};

tide_mlp_async_save_t *tide_mlp_async_save_new(uint64_t n_params)
{
    tide_mlp_async_save_t *a = tide_xcalloc(1, sizeof(*a));

    a->n_params = n_params;
    a->snap.params = tide_xmalloc(sizeof(double) * (n_params ? n_params : 1));
    a->snap.velocity = tide_xmalloc(sizeof(double) * (n_params ? n_params : 1));
    atomic_init(&a->done, false);
    return a;
}

static void *save_main(void *arg)
{
    tide_mlp_async_save_t *a = arg;
    tide_mlp_save_result_t *r = &a->res;

    if (a->hook)
        a->hook(a->hook_ud);
    r->rc = tide_mlp_ckpt_save(a->dir, &a->snap, a->keep, r->path, &r->bytes, r->hex, &r->err);
    atomic_store_explicit(&a->done, true, memory_order_release);
    return NULL;
}

int tide_mlp_async_save_start(tide_mlp_async_save_t *a, const tide_mlp_state_t *s, const char *dir,
                              uint32_t keep)
{
    double *params = a->snap.params, *velocity = a->snap.velocity;
    int rc;

    if (a->running)
        return -EBUSY;
    if (s->n_params != a->n_params || strlen(dir) >= sizeof(a->dir))
        return -EINVAL;
    a->snap = *s;
    a->snap.params = params;
    a->snap.velocity = velocity;
    memcpy(params, s->params, sizeof(double) * s->n_params);
    memcpy(velocity, s->velocity, sizeof(double) * s->n_params);
    snprintf(a->dir, sizeof(a->dir), "%s", dir);
    a->keep = keep;
    memset(&a->res, 0, sizeof(a->res));
    a->res.steps_done = s->steps_done;
    atomic_store_explicit(&a->done, false, memory_order_relaxed);
    rc = -pthread_create(&a->thread, NULL, save_main, a);
    if (rc == 0)
        a->running = true;
    return rc;
}

bool tide_mlp_async_save_busy(const tide_mlp_async_save_t *a)
{
    return a->running;
}

/* Joins the finished (or finishing) thread and hands its result over. */
static void collect(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res)
{
    pthread_join(a->thread, NULL);
    a->running = false;
    if (res)
        *res = a->res;
}

int tide_mlp_async_save_poll(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res)
{
    if (!a->running)
        return -ENOENT;
    if (!atomic_load_explicit(&a->done, memory_order_acquire))
        return 0;
    collect(a, res);
    return 1;
}

int tide_mlp_async_save_wait(tide_mlp_async_save_t *a, tide_mlp_save_result_t *res)
{
    if (!a->running)
        return -ENOENT;
    collect(a, res);
    return 0;
}

void tide_mlp_async_save_set_hook(tide_mlp_async_save_t *a, tide_mlp_async_save_hook_cb cb,
                                  void *ud)
{
    a->hook = cb;
    a->hook_ud = ud;
}

void tide_mlp_async_save_free(tide_mlp_async_save_t *a)
{
    if (!a)
        return;
    if (a->running)
        collect(a, NULL);
    free(a->snap.params);
    free(a->snap.velocity);
    free(a);
}
