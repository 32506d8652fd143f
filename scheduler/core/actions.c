/* The action buffer: what the core asks its shell to do, in order. Strings the actions point at are
 * copies kept until tide_core_actions_clear, which also frees dropped jobs, so every pointer in an
 * action stays valid until then. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

tide_action_t *tide__act(tide_core_t *core, tide_action_type_t type)
{
    tide_action_t *a;

    if (core->n_actions == core->cap_actions) {
        core->cap_actions = core->cap_actions ? core->cap_actions * 2 : 64;
        core->actions = tide_xrealloc(core->actions, core->cap_actions * sizeof(*core->actions));
    }
    a = &core->actions[core->n_actions++];
    memset(a, 0, sizeof(*a));
    a->type = type;
    a->rank = -1;
    return a;
}

static const char *keep_owned(tide_core_t *core, char *s)
{
    if (core->n_strings == core->cap_strings) {
        core->cap_strings = core->cap_strings ? core->cap_strings * 2 : 64;
        core->strings = tide_xrealloc(core->strings, core->cap_strings * sizeof(*core->strings));
    }
    core->strings[core->n_strings++] = s;
    return s;
}

const char *tide__keep(tide_core_t *core, const char *s)
{
    return s ? keep_owned(core, tide_xstrdup(s)) : NULL;
}

void tide__event(tide_core_t *core, const char *type, tide_job_t *job, tide_worker_t *w,
                 const char *fmt, ...)
{
    tide_action_t *a = tide__act(core, TIDE_ACT_EVENT);
    char *text;
    va_list ap;

    va_start(ap, fmt);
    text = tide_xvasprintf(fmt, ap);
    va_end(ap);
    a->event_type = type;
    a->job = job;
    a->worker = w;
    a->job_id = job ? job->id : NULL;
    a->worker_id = w ? w->id : NULL;
    a->text = keep_owned(core, text);
}

void tide__persist_job(tide_core_t *core, tide_job_t *job)
{
    if (job->dirty || job->dropped)
        return;
    job->dirty = true;
    tide__act(core, TIDE_ACT_PERSIST_JOB)->job = job;
}

void tide__persist_worker(tide_core_t *core, tide_worker_t *w)
{
    if (w->dirty)
        return;
    w->dirty = true;
    tide__act(core, TIDE_ACT_PERSIST_WORKER)->worker = w;
}

/* Task ids of GIVE_TASKS actions: chunks that never move (pools may be freed before actions_clear). */
struct tide_id_chunk {
    struct tide_id_chunk *next;
    size_t used, cap;
    uint64_t ids[];
};

const uint64_t *tide__keep_ids(tide_core_t *core, const uint64_t *ids, size_t n)
{
    struct tide_id_chunk *c = core->id_chunks;
    uint64_t *dst;

    if (n == 0)
        return NULL;
    if (!c || c->cap - c->used < n) {
        size_t cap = c ? c->cap * 2 : 1024;
        if (cap < n)
            cap = n;
        c = tide_xmalloc(sizeof(*c) + cap * sizeof(uint64_t));
        c->next = core->id_chunks;
        c->used = 0;
        c->cap = cap;
        core->id_chunks = c;
    }
    dst = c->ids + c->used;
    memcpy(dst, ids, n * sizeof(*ids));
    c->used += n;
    return dst;
}

/* Keeps the newest (largest) chunk for the next batch. */
static void ids_reset(tide_core_t *core)
{
    struct tide_id_chunk *c = core->id_chunks;

    if (!c)
        return;
    while (c->next) {
        struct tide_id_chunk *old = c->next;
        c->next = old->next;
        free(old);
    }
    c->used = 0;
}

void tide__keep_ids_free(tide_core_t *core)
{
    while (core->id_chunks) {
        struct tide_id_chunk *c = core->id_chunks;
        core->id_chunks = c->next;
        free(c);
    }
}

const tide_action_t *tide_core_actions(const tide_core_t *core, size_t *n)
{
    *n = core->n_actions;
    return core->actions;
}

void tide__act_launch(tide_core_t *core, tide_job_t *job, tide_worker_t *w, int32_t r)
{
    tide_action_t *a = tide__act(core, TIDE_ACT_LAUNCH);

    a->job = job;
    a->worker = w;
    a->conn = w->conn;
    a->generation = job->generation;
    a->rank = r;
    a->master_port = job->master_port;
    job->launch_epoch = core->actions_epoch + 1;
    tide__slot_set(core, job, r, TIDE_RANK_LAUNCHED);
}

bool tide__unlaunch(tide_core_t *core, tide_job_t *job, int32_t r)
{
    if (job->launch_epoch != core->actions_epoch + 1)
        return false;
    for (size_t i = core->n_actions; i-- > 0;) {
        tide_action_t *a = &core->actions[i];
        if (a->type == TIDE_ACT_LAUNCH && a->job == job && a->generation == job->generation && a->rank == r) {
            memmove(a, a + 1, (core->n_actions - i - 1) * sizeof(*a));
            core->n_actions--;
            return true;
        }
    }
    return false;
}

void tide_core_actions_clear(tide_core_t *core)
{
    tide_list_t *pos, *tmp;

    for (size_t i = 0; i < core->n_actions; i++) {
        tide_action_t *a = &core->actions[i];
        if (a->type == TIDE_ACT_PERSIST_JOB && a->job)
            a->job->dirty = false;
        else if (a->type == TIDE_ACT_PERSIST_WORKER && a->worker)
            a->worker->dirty = false;
    }
    core->n_actions = 0;
    core->actions_epoch++;
    for (size_t i = 0; i < core->n_strings; i++)
        free(core->strings[i]);
    core->n_strings = 0;
    ids_reset(core);
    tide_list_for_each_safe(pos, tmp, &core->graveyard) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, all_node);
        tide_list_remove(pos);
        tide__job_free(job);
    }
}
