/* The elastic-scaling part of tidectl's views (docs/elastic.md): the Size / Resize / Last resize
 * lines of `tidectl job`, and the lines of `tidectl scale` (what ScaleJob did, the progress of
 * --wait, the completed resize). Pure, like render.c: only what the scheduler reported, sanitized.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "render.h"
#include "table.h"

/* An enum value's name without its prefix, in lower case ("RESIZE_REASON_GROW" -> "grow"). */
static const char *lower_name(const ProtobufCEnumDescriptor *d, int value, const char *prefix,
                              char *buf, size_t size)
{
    tide_cli_enum_name(d, value, prefix, buf, size);
    for (char *p = buf; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return buf;
}

/* "requested", "grow", "shrink", "replace" (or the number of a reason this tidectl does not know).
 */
static const char *reason_word(int r, char *buf, size_t size)
{
    return lower_name(&tide__v1__resize_reason__descriptor, r, "RESIZE_REASON_", buf, size);
}

const char *tide_cli_resize_state_word(int s, char *buf, size_t size)
{
    return lower_name(&tide__v1__resize_state__descriptor, s, "RESIZE_STATE_", buf, size);
}

bool tide_cli_resize_active(const Tide__V1__Resize *r)
{
    return r && r->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_UNSPECIFIED &&
           r->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING &&
           r->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE;
}

/* A phase length: "0.4s", "12.0s", then "1m5s" from a minute on. */
static void seconds_format(double s, char *buf, size_t size)
{
    if (!(s > 0))
        s = 0;
    if (s < 59.95)
        snprintf(buf, size, "%.1fs", s);
    else
        tide_cli_duration_format((int64_t)(s + 0.5), buf, size);
}

/* What the resize ended with (DONE: what the new generation got), else what was asked. */
static int32_t resize_to(const Tide__V1__Resize *r)
{
    return r->state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE && r->workers > 0 ? r->workers
                                                                                   : r->to_workers;
}

static void kv(tide_buf_t *out, const char *key, const char *value)
{
    char *clean = tide_cli_sanitize(value);
    tide_buf_printf(out, "%-14s%s\n", key, clean);
    free(clean);
}

void tide_cli_render_size(const Tide__V1__Job *j, tide_buf_t *out)
{
    const Tide__V1__JobSpec *s = j->spec;
    tide_buf_t b = TIDE_BUF_INIT;

    /* Size:         2 workers (min 2, max 8, requested 4) */
    tide_buf_printf(&b, "%zu worker%s", j->n_worker_ids, j->n_worker_ids == 1 ? "" : "s");
    if (s) {
        int32_t max = s->max_workers > s->min_workers ? s->max_workers : s->min_workers;
        tide_buf_printf(&b, " (min %d, max %d", s->min_workers, max);
        if (j->target_workers > 0)
            tide_buf_printf(&b, ", requested %d", j->target_workers);
        else if (max > s->min_workers)
            tide_buf_append_str(&b, ", elastic");
        tide_buf_append_str(&b, ")");
    } else if (j->target_workers > 0) {
        tide_buf_printf(&b, " (requested %d)", j->target_workers);
    }
    kv(out, "Size:", tide_buf_cstr(&b));
    tide_buf_free(&b);
}

void tide_cli_render_resizes(const Tide__V1__Job *j, int64_t now_ms, tide_buf_t *out)
{
    const Tide__V1__Resize *r = j->resize, *lr = j->last_resize;
    tide_buf_t b = TIDE_BUF_INIT;
    char reason[32], word[32], t[32];

    /* Resize:       2 -> 4 (requested) checkpointing since 1.2s
     *               or: 2 -> 4 (requested) pending: only 3 workers free */
    if (r && r->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_UNSPECIFIED) {
        reason_word(r->reason, reason, sizeof(reason));
        tide_buf_printf(&b, "%d -> %d (%s) ", r->from_workers, r->to_workers, reason);
        if (r->state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING) {
            tide_buf_printf(&b, "pending%s%s", r->detail && *r->detail ? ": " : "",
                            r->detail ? r->detail : "");
        } else {
            tide_buf_append_str(&b, tide_cli_resize_state_word(r->state, word, sizeof(word)));
            if (r->decided_ms > 0) {
                seconds_format((double)(now_ms - r->decided_ms) / 1000.0, t, sizeof(t));
                tide_buf_printf(&b, " since %s", t);
            }
        }
        kv(out, "Resize:", tide_buf_cstr(&b));
        tide_buf_reset(&b);
        /* Why tide resized it by itself ("job 12 (CRITICAL) needs 2 GPUs"); a request says nothing
         * new. */
        if (r->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING &&
            r->reason != TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED && r->detail &&
            *r->detail)
            kv(out, "", r->detail);
    }

    /* Last resize:  2 -> 4 (grow) in 1.42 s (checkpoint 0.31, stop 0.40, start 0.71), generation 3;
     * 2 resizes */
    if (lr && lr->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_UNSPECIFIED) {
        reason_word(lr->reason, reason, sizeof(reason));
        tide_buf_printf(&b, "%d -> %d (%s", lr->from_workers, resize_to(lr), reason);
        if (resize_to(lr) != lr->to_workers)
            tide_buf_printf(&b, ", %d asked", lr->to_workers);
        tide_buf_printf(&b, ") in %.2f s (checkpoint %.2f, stop %.2f, start %.2f), generation %d",
                        lr->total_seconds, lr->checkpoint_seconds, lr->stop_seconds,
                        lr->start_seconds, lr->to_generation);
        if (j->resizes > 0)
            tide_buf_printf(&b, "; %d resize%s", j->resizes, j->resizes == 1 ? "" : "s");
        kv(out, "Last resize:", tide_buf_cstr(&b));
        tide_buf_reset(&b);
    }

    /* Burst:        20%, high-load phase, 1 worker lent; 3 lendings */
    if (j->spec && j->spec->burst_percent > 0) {
        tide_buf_printf(&b, "%d%%, %s", j->spec->burst_percent, j->high_load ? "high-load phase" : "normal phase");
        if (j->lent_workers > 0)
            tide_buf_printf(&b, ", %d worker%s lent", j->lent_workers, j->lent_workers == 1 ? "" : "s");
        if (j->bursts > 0)
            tide_buf_printf(&b, "; %d lending%s", j->bursts, j->bursts == 1 ? "" : "s");
        kv(out, "Burst:", tide_buf_cstr(&b));
    }
    tide_buf_free(&b);
}

void tide_cli_render_scale(const Tide__V1__Job *j, tide_buf_t *out)
{
    const Tide__V1__Resize *r = j->resize;
    const Tide__V1__JobSpec *s = j->spec;
    char *id = tide_cli_sanitize(j->id);
    char word[32];

    if (r && r->state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING) {
        char *detail = tide_cli_sanitize(r->detail);
        tide_buf_printf(out, "job %s: %d workers requested; pending%s%s\n", id, r->to_workers,
                        *detail ? ": " : "", detail);
        free(detail);
    } else if (tide_cli_resize_active(r)) {
        tide_buf_printf(out, "job %s: scaling %d -> %d workers (resizing: %s)\n", id,
                        r->from_workers, r->to_workers,
                        tide_cli_resize_state_word(r->state, word, sizeof(word)));
    } else if (j->state == TIDE__V1__JOB_STATE__JOB_STATE_PENDING) {
        int32_t most = j->target_workers;
        if (most <= 0 && s)
            most = s->max_workers > s->min_workers ? s->max_workers : s->min_workers;
        tide_buf_printf(out, "job %s: will start with at most %d workers%s\n", id, most,
                        j->target_workers > 0 ? "" : " (elastic)");
    } else if (j->target_workers > 0 && j->n_worker_ids == (size_t)j->target_workers) {
        tide_buf_printf(out, "job %s: already %d workers\n", id, j->target_workers);
    } else if (j->target_workers > 0) {
        tide_buf_printf(out, "job %s: %d workers requested (%zu now)\n", id, j->target_workers,
                        j->n_worker_ids);
    } else if (s) {
        int32_t max = s->max_workers > s->min_workers ? s->max_workers : s->min_workers;
        tide_buf_printf(out, "job %s: elastic: %zu workers now, sized by tide within %d..%d\n", id,
                        j->n_worker_ids, s->min_workers, max);
    } else {
        tide_buf_printf(out, "job %s: elastic: %zu workers now\n", id, j->n_worker_ids);
    }
    free(id);
}

void tide_cli_render_resize_progress(const Tide__V1__Job *j, double phase_s, tide_buf_t *out)
{
    const Tide__V1__Resize *r = j->resize;
    char t[32], word[32];

    seconds_format(phase_s, t, sizeof(t));
    if (!r || r->state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_UNSPECIFIED)
        tide_buf_printf(out, "job %s: resizing %s", j->id, t);
    else if (r->state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING)
        tide_buf_printf(out, "job %s: resize to %d pending %s%s%s", j->id, r->to_workers, t,
                        r->detail && *r->detail ? ": " : "", r->detail ? r->detail : "");
    else
        tide_buf_printf(out, "job %s: resizing %d -> %d: %s %s", j->id, r->from_workers,
                        r->to_workers, tide_cli_resize_state_word(r->state, word, sizeof(word)), t);
}

void tide_cli_render_resized(const Tide__V1__Job *j, tide_buf_t *out)
{
    const Tide__V1__Resize *lr = j->last_resize;
    char *id = tide_cli_sanitize(j->id);

    if (!lr) {
        tide_buf_printf(out, "job %s: resized\n", id);
    } else {
        tide_buf_printf(out, "job %s: resized %d -> %d workers", id, lr->from_workers,
                        resize_to(lr));
        if (resize_to(lr) != lr->to_workers)
            tide_buf_printf(out, " (%d asked)", lr->to_workers);
        tide_buf_printf(
            out, " in %.2f s (checkpoint %.2f s, stop %.2f s, start %.2f s), generation %d\n",
            lr->total_seconds, lr->checkpoint_seconds, lr->stop_seconds, lr->start_seconds,
            lr->to_generation);
    }
    free(id);
}
