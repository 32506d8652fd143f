/* Table and describe views for tidectl (see render.h). Everything the scheduler sends goes through
 * tide_cli_sanitize (directly or via the table) before it reaches the output. */
#include "render.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "duration.h"
#include "table.h"
#include "xmalloc.h"

const char *tide_cli_enum_name(const ProtobufCEnumDescriptor *d, int value, const char *prefix, char *buf,
                               size_t size)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);
    size_t plen = strlen(prefix);

    if (!v)
        snprintf(buf, size, "%d", value);
    else if (strncmp(v->name, prefix, plen) == 0)
        snprintf(buf, size, "%s", v->name + plen);
    else
        snprintf(buf, size, "%s", v->name);
    return buf;
}

static const char *job_state(int s, char *buf, size_t n)
{
    return tide_cli_enum_name(&tide__v1__job_state__descriptor, s, "JOB_STATE_", buf, n);
}

/* A class name: "HIGH"; UNSPECIFIED reads as NORMAL, as the scheduler treats it. */
static const char *prio_name(int p, char *buf, size_t n)
{
    return tide_cli_enum_name(&tide__v1__priority__descriptor, p ? p : TIDE__V1__PRIORITY__PRIORITY_NORMAL,
                              "PRIORITY_", buf, n);
}

/* Whether aging moved the job to another class: its effective class when set and different. */
static int aged_class(const Tide__V1__Job *j)
{
    int sp = j->spec && j->spec->priority ? (int)j->spec->priority : TIDE__V1__PRIORITY__PRIORITY_NORMAL;
    return j->effective_priority && (int)j->effective_priority != sp ? (int)j->effective_priority : 0;
}

/* "12:03" in local time (utc: "12:03 UTC"). */
static void clock_format(int64_t ms, bool utc, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (ms <= 0 || (utc ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm)) ||
        strftime(buf, size, utc ? "%H:%M UTC" : "%H:%M", &tm) == 0)
        snprintf(buf, size, "-");
}

void tide_cli_time_format(int64_t ms, bool utc, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (ms <= 0) {
        snprintf(buf, size, "-");
        return;
    }
    if (utc ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm)) {
        snprintf(buf, size, "%" PRId64, ms);
        return;
    }
    if (strftime(buf, size, utc ? "%Y-%m-%d %H:%M:%S UTC" : "%Y-%m-%d %H:%M:%S", &tm) == 0 && size)
        buf[0] = '\0';
}

static bool shell_safe(const char *w)
{
    if (!*w)
        return false;
    for (const char *p = w; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("_@%+=:,./-", c)))
            return false;
    }
    return true;
}

char *tide_cli_shell_join(char *const *argv, size_t n)
{
    tide_buf_t b = TIDE_BUF_INIT;
    char *s;

    for (size_t i = 0; i < n; i++) {
        const char *w = argv[i] ? argv[i] : "";
        if (i)
            tide_buf_append(&b, " ", 1);
        if (shell_safe(w)) {
            tide_buf_append_str(&b, w);
            continue;
        }
        tide_buf_append(&b, "'", 1);
        for (const char *p = w; *p; p++) {
            if (*p == '\'')
                tide_buf_append_str(&b, "'\\''");
            else
                tide_buf_append(&b, p, 1);
        }
        tide_buf_append(&b, "'", 1);
    }
    s = tide_xstrdup(tide_buf_cstr(&b));
    tide_buf_free(&b);
    return s;
}

void tide_cli_exit_code_format(int32_t code, char *buf, size_t size)
{
    const char *abbrev = NULL;

    if (code > 128 && code - 128 < NSIG)
        abbrev = sigabbrev_np(code - 128);
    if (abbrev)
        snprintf(buf, size, "%d (SIG%s)", code, abbrev);
    else
        snprintf(buf, size, "%d", code);
}

static void workers_cell(const Tide__V1__Job *j, char *buf, size_t size)
{
    const Tide__V1__JobSpec *s = j->spec;
    int32_t min, max;
    char now[32];

    if (!s) {
        snprintf(buf, size, "%zu", j->n_worker_ids);
        return;
    }
    min = s->min_workers;
    max = s->max_workers > min ? s->max_workers : min;
    if (tide_cli_resize_active(j->resize)) /* the old generation may be gone already: say both sizes */
        snprintf(now, sizeof(now), "%d\u2192%d", j->resize->from_workers, j->resize->to_workers);
    else
        snprintf(now, sizeof(now), "%zu", j->n_worker_ids);
    if (min == max)
        snprintf(buf, size, "%s/%d", now, min);
    else
        snprintf(buf, size, "%s/%d-%d", now, min, max);
}

void tide_cli_bytes_format(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = -1;

    if (bytes < 1024) {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
        return;
    }
    /* 1023.96 KiB prints as "1.0 MiB", not "1024.0 KiB". */
    do {
        v /= 1024;
        u++;
    } while (v >= 1023.95 && u < 5);
    snprintf(buf, size, "%.1f %s", v, units[u]);
}

const Tide__V1__TrainerProgress *tide_cli_job_progress(const Tide__V1__Job *j)
{
    for (size_t i = 0; i < j->n_ranks; i++)
        if (j->ranks[i]->rank == 0)
            return j->ranks[i]->progress && j->ranks[i]->progress->sdk ? j->ranks[i]->progress : NULL;
    return NULL;
}

/* A rank's reported step: "1200", "-" when none. */
static void step_cell(const Tide__V1__TrainerProgress *p, char *buf, size_t size)
{
    if (p && p->sdk && p->step >= 0)
        snprintf(buf, size, "%" PRId64, p->step);
    else
        snprintf(buf, size, "-");
}

void tide_cli_render_jobs(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out)
{
    static const char *const headers[] = {"ID",  "NAME", "OWNER", "STATE",  "WORKERS",
                                          "GEN", "STEP", "AGE",   "MESSAGE"};
    tide_cli_table_t *t = tide_cli_table_new(9, headers);

    for (size_t i = 0; i < n; i++) {
        const Tide__V1__Job *j = jobs[i];
        char state[32], workers[96], gen[16], step[24], age[16];
        const char *cells[9];

        workers_cell(j, workers, sizeof(workers));
        snprintf(gen, sizeof(gen), "%d", j->generation);
        step_cell(tide_cli_job_progress(j), step, sizeof(step));
        if (j->submit_time_ms > 0)
            tide_cli_age_format((now_ms - j->submit_time_ms) / 1000, age, sizeof(age));
        else
            snprintf(age, sizeof(age), "-");
        cells[0] = j->id;
        cells[1] = j->spec && j->spec->name && *j->spec->name ? j->spec->name : "-";
        cells[2] = j->owner && *j->owner ? j->owner : "-"; /* "": a scheduler from before identities */
        cells[3] = job_state(j->state, state, sizeof(state));
        cells[4] = workers;
        cells[5] = gen;
        cells[6] = step;
        cells[7] = age;
        cells[8] = j->message;
        tide_cli_table_add_row(t, cells);
    }
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
}

void tide_cli_render_queue(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out)
{
    static const char *const headers[] = {"POS", "JOB", "NAME", "CLASS", "GPUS", "WAITING", "REASON"};
    tide_cli_table_t *t = tide_cli_table_new(7, headers);

    for (size_t i = 0; i < n; i++) {
        const Tide__V1__Job *j = jobs[i];
        const Tide__V1__JobSpec *sp = j->spec;
        char pos[16], cls[48], from[24], to[24], gpus[32], waiting[16];
        const char *cells[7];
        int aged = aged_class(j);

        if (j->queue_position > 0)
            snprintf(pos, sizeof(pos), "%d", j->queue_position);
        else
            snprintf(pos, sizeof(pos), "-");
        prio_name(sp ? (int)sp->priority : 0, from, sizeof(from));
        if (aged)
            snprintf(cls, sizeof(cls), "%s->%s", from, prio_name(aged, to, sizeof(to)));
        else
            snprintf(cls, sizeof(cls), "%s", from);
        if (!sp)
            snprintf(gpus, sizeof(gpus), "-");
        else if (sp->max_workers > sp->min_workers)
            snprintf(gpus, sizeof(gpus), "%d..%d", sp->min_workers, sp->max_workers);
        else
            snprintf(gpus, sizeof(gpus), "%d", sp->min_workers);
        if (j->submit_time_ms > 0)
            tide_cli_age_format((now_ms - j->submit_time_ms) / 1000, waiting, sizeof(waiting));
        else
            snprintf(waiting, sizeof(waiting), "-");
        cells[0] = pos;
        cells[1] = j->id;
        cells[2] = sp && sp->name && *sp->name ? sp->name : "-";
        cells[3] = cls;
        cells[4] = gpus;
        cells[5] = waiting;
        cells[6] = j->message && *j->message ? j->message : "-";
        tide_cli_table_add_row(t, cells);
    }
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
}

/* "Key:" padded to a fixed column, then the sanitized value. */
static void kv(tide_buf_t *out, const char *key, const char *value)
{
    char *clean = tide_cli_sanitize(value && *value ? value : "-");
    tide_buf_printf(out, "%-14s%s\n", key, clean);
    free(clean);
}

static void kvf(tide_buf_t *out, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kvf(tide_buf_t *out, const char *key, const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    kv(out, key, s);
    free(s);
}

void tide_cli_si_format(double v, char *buf, size_t size)
{
    static const char prefixes[] = "\0KMGTPEZ";
    int p = 0;

    while (v >= 999.5 && p < 7) {
        v /= 1000;
        p++;
    }
    if (v < 9.995)
        snprintf(buf, size, "%.2f%.1s", v, &prefixes[p]);
    else if (v < 99.95)
        snprintf(buf, size, "%.1f%.1s", v, &prefixes[p]);
    else
        snprintf(buf, size, "%.0f%.1s", v, &prefixes[p]);
}

const char *tide_cli_ratio_format(double ratio, char *buf, size_t size)
{
    double pct = 100 * ratio;

    if (pct >= 10)
        snprintf(buf, size, "%.1f%%", pct);
    else if (pct >= 0.1)
        snprintf(buf, size, "%.2f%%", pct);
    else
        snprintf(buf, size, "%.2g%%", pct);
    return buf;
}

static const char *const dim_short[4] = {"gpu", "membw", "net", "io"};

/* The busiest known dimension, or -1. */
static int busiest(const double u[4], uint32_t known)
{
    int best = -1;

    for (int d = 0; d < 4; d++)
        if ((known & (1u << d)) && (best < 0 || u[d] > u[best]))
            best = d;
    return best;
}

const char *tide_cli_bound_format(const double u[4], uint32_t known, char *buf, size_t size)
{
    int best = busiest(u, known);

    if (best < 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%s %.0f%%", dim_short[best], 100 * u[best]);
    return buf;
}

const char *tide_cli_utilization_format(const double u[4], uint32_t known, char *buf, size_t size)
{
    int best = busiest(u, known);
    size_t n = 0;

    buf[0] = '\0';
    for (int d = 0; d < 4 && n < size; d++) {
        char r[16];
        if (known & (1u << d))
            tide_cli_ratio_format(u[d], r, sizeof(r));
        else
            snprintf(r, sizeof(r), "-");
        n += (size_t)snprintf(buf + n, size - n, "%s%s %s", d ? ", " : "", dim_short[d], r);
    }
    if (best >= 0 && n < size)
        snprintf(buf + n, size - n, " (bound by %s)", dim_short[best]);
    return buf;
}

/* A step's length: "850ms", "4.2ms", "1.25s", "12.5s", "340s". */
static void step_time_format(double s, char *buf, size_t size)
{
    if (s * 1000 < 9.95)
        snprintf(buf, size, "%.1fms", s * 1000);
    else if (s < 0.9995)
        snprintf(buf, size, "%.0fms", s * 1000);
    else if (s < 9.995)
        snprintf(buf, size, "%.2fs", s);
    else if (s < 99.95)
        snprintf(buf, size, "%.1fs", s);
    else
        snprintf(buf, size, "%.0fs", s);
}

/* STEP, TRAINER, STEP-TIME and FLOP/S of one rank: "-" for what its trainer did not report. */
static void progress_cells(const Tide__V1__TrainerProgress *p, char *step, char *phase, char *time, char *rate,
                           size_t size)
{
    bool sdk = p && p->sdk;

    step_cell(p, step, size);
    if (sdk && p->phase != TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_UNSPECIFIED)
        tide_cli_enum_name(&tide__v1__trainer_phase__descriptor, p->phase, "TRAINER_PHASE_", phase, size);
    else
        snprintf(phase, size, "-");
    if (sdk && p->step_seconds > 0)
        step_time_format(p->step_seconds, time, size);
    else
        snprintf(time, size, "-");
    /* Achieved model FLOP/s over ~10 s (the worker's window), else the last step's: what MFU
     * divides by the peak. */
    if (sdk && p->flops_per_s > 0)
        tide_cli_si_format(p->flops_per_s, rate, size);
    else if (sdk && p->step_seconds > 0 && p->step_flops > 0)
        tide_cli_si_format(p->step_flops / p->step_seconds, rate, size);
    else
        snprintf(rate, size, "-");
}

static void render_ranks(const Tide__V1__Job *j, tide_buf_t *out)
{
    tide_cli_table_t *t;
    tide_buf_t tb = TIDE_BUF_INIT;
    const char *p;

    if (j->n_ranks > 0) {
        static const char *const headers[] = {"RANK", "WORKER",  "PHASE",     "PID",   "EXIT",
                                              "STEP", "TRAINER", "STEP-TIME", "FLOP/S"};
        t = tide_cli_table_new(9, headers);
        for (size_t i = 0; i < j->n_ranks; i++) {
            const Tide__V1__JobRank *r = j->ranks[i];
            char rank[16], phase[32], pid[16], code[48], step[32], trainer[32], time[32], rate[32];
            const char *cells[9] = {rank, r->worker_id, phase, pid, code, step, trainer, time, rate};
            snprintf(rank, sizeof(rank), "%d", r->rank);
            tide_cli_enum_name(&tide__v1__rank_phase__descriptor, r->phase, "RANK_PHASE_", phase, sizeof(phase));
            if (r->pid > 0)
                snprintf(pid, sizeof(pid), "%d", r->pid);
            else
                snprintf(pid, sizeof(pid), "-");
            if (r->phase == TIDE__V1__RANK_PHASE__RANK_PHASE_EXITED)
                tide_cli_exit_code_format(r->exit_code, code, sizeof(code));
            else
                snprintf(code, sizeof(code), "-");
            progress_cells(r->progress, step, trainer, time, rate, 32);
            tide_cli_table_add_row(t, cells);
        }
    } else if (j->n_worker_ids > 0) {
        static const char *const headers[] = {"RANK", "WORKER"};
        t = tide_cli_table_new(2, headers);
        for (size_t i = 0; i < j->n_worker_ids; i++) {
            char rank[24];
            const char *cells[2] = {rank, j->worker_ids[i]};
            snprintf(rank, sizeof(rank), "%zu", i);
            tide_cli_table_add_row(t, cells);
        }
    } else {
        kv(out, "Ranks:", "-");
        return;
    }
    tide_buf_append_str(out, "Ranks:\n");
    tide_cli_table_render(t, &tb);
    /* Indent the table under its key. */
    for (p = tide_buf_cstr(&tb); *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
        tide_buf_append_str(out, "  ");
        tide_buf_append(out, p, len);
        p += len;
    }
    tide_buf_free(&tb);
    tide_cli_table_free(t);
}

/* The last checkpoint and the CheckpointJob request in flight, under one key:
 *   Checkpoint:   step 1200 (generation 2, 4 ranks), 1.5 GiB, /ckpt/step-1200, 3m ago
 *                 request 1714564790000 pending, deadline in 50s */
static void render_checkpoint(const Tide__V1__Job *j, int64_t now_ms, tide_buf_t *out)
{
    const Tide__V1__Checkpoint *c = j->last_checkpoint;
    char pending[128] = "";

    if (j->checkpoint_request) {
        int64_t left = j->checkpoint_deadline_ms - now_ms;
        if (j->checkpoint_deadline_ms <= 0)
            snprintf(pending, sizeof(pending), "request %" PRIu64 " pending", j->checkpoint_request);
        else if (left < 0)
            snprintf(pending, sizeof(pending), "request %" PRIu64 " pending, deadline passed",
                     j->checkpoint_request);
        else
            snprintf(pending, sizeof(pending), "request %" PRIu64 " pending, deadline in %" PRId64 "s",
                     j->checkpoint_request, (left + 500) / 1000);
    }
    if (c) {
        char bytes[32], age[32] = "";
        tide_cli_bytes_format(c->bytes, bytes, sizeof(bytes));
        if (c->time_ms > 0) {
            char a[16];
            tide_cli_age_format((now_ms - c->time_ms) / 1000, a, sizeof(a));
            snprintf(age, sizeof(age), ", %s ago", a);
        }
        kvf(out, "Checkpoint:", "step %" PRId64 " (generation %d, %d rank%s), %s%s%s%s", c->step, c->generation,
            c->ranks, c->ranks == 1 ? "" : "s", bytes, c->path && *c->path ? ", " : "", c->path ? c->path : "",
            age);
        if (*pending)
            kv(out, "", pending);
    } else if (*pending) {
        kvf(out, "Checkpoint:", "none yet; %s", pending);
    } else {
        kv(out, "Checkpoint:", NULL);
    }
}

/* Appends ", " (when b has text) and the formatted part. */
static void join(tide_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void join(tide_buf_t *b, const char *fmt, ...)
{
    va_list ap;

    if (b->len)
        tide_buf_append_str(b, ", ");
    va_start(ap, fmt);
    tide_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* What the job asks of its GPUs (docs/policies.md, "Placement") and of its checkpoint gate, when it
 * asks anything:
 *   Placement:    pool train, one rack, >= 80.0 GiB per rank, device h100
 *   Durable gate: hold durable copies while MFU >= 20.0%, at most 10m between durable copies */
static void render_placement(const Tide__V1__JobSpec *s, tide_buf_t *out)
{
    tide_buf_t b = TIDE_BUF_INIT;

    if (s->pool && *s->pool)
        join(&b, "pool %s", s->pool);
    if (s->topology == TIDE__V1__TOPOLOGY__TOPOLOGY_NODE)
        join(&b, "one node");
    else if (s->topology == TIDE__V1__TOPOLOGY__TOPOLOGY_RACK)
        join(&b, "one rack");
    else if (s->topology == TIDE__V1__TOPOLOGY__TOPOLOGY_SWITCH)
        join(&b, "one switch");
    else if (s->topology != TIDE__V1__TOPOLOGY__TOPOLOGY_ANY)
        join(&b, "topology %d", (int)s->topology);
    if (s->memory_per_rank_bytes) {
        char m[32];
        tide_cli_bytes_format(s->memory_per_rank_bytes, m, sizeof(m));
        join(&b, ">= %s per rank", m);
    }
    if (s->device && *s->device)
        join(&b, "device %s", s->device);
    if (b.len)
        kv(out, "Placement:", tide_buf_cstr(&b));
    tide_buf_reset(&b);
    /* The job's own checkpoint gate settings (the scheduler's apply to what it leaves unset). */
    if (s->checkpoint_mfu_threshold > 0) {
        char r[32];
        join(&b, "hold durable copies while MFU >= %s",
             tide_cli_ratio_format(s->checkpoint_mfu_threshold, r, sizeof(r)));
    }
    if (s->checkpoint_deadline_seconds > 0) {
        char d[32];
        tide_cli_duration_format(s->checkpoint_deadline_seconds, d, sizeof(d));
        join(&b, "at most %s between durable copies", d);
    }
    if (b.len)
        kv(out, "Durable gate:", tide_buf_cstr(&b));
    /* Its checkpoint cadence (docs/fault-tolerance.md, "Checkpoint cadence"); unset: the scheduler's. */
    if (s->checkpoint_interval_seconds > 0) {
        char d[32];
        tide_cli_duration_format(s->checkpoint_interval_seconds, d, sizeof(d));
        kvf(out, "Cadence:", "a checkpoint asked for every %s", d);
    } else if (s->checkpoint_interval_seconds < 0) {
        kv(out, "Cadence:", "the trainer's own checkpoints only");
    }
    tide_buf_free(&b);
}

/* The MFU target band against the measured MFU (docs/policies.md, "Headroom"):
 *   MFU target:   55-65% (adaptive); now 41.3%, below it */
static void render_target(const Tide__V1__Job *j, tide_buf_t *out)
{
    char now[96] = "";

    if (j->mfu_target_high <= 0)
        return;
    if (j->state == TIDE__V1__JOB_STATE__JOB_STATE_RUNNING && j->mfu > 0) {
        char m[32];
        snprintf(now, sizeof(now), "; now %s, %s", tide_cli_ratio_format(j->mfu, m, sizeof(m)),
                 j->mfu < j->mfu_target_low ? "below it" : j->mfu > j->mfu_target_high ? "above it" : "within it");
    }
    kvf(out, "MFU target:", "%.0f-%.0f%%%s%s", 100 * j->mfu_target_low, 100 * j->mfu_target_high,
        j->spec && j->spec->adaptive_target ? " (adaptive)" : "", now);
}

/* Preemptions:  2; yielding to job 12 now (checkpointing before it stops) */
static void render_preemptions(const Tide__V1__Job *j, tide_buf_t *out)
{
    bool yielding = j->preempted_by && *j->preempted_by;

    if (j->preemptions <= 0 && !yielding)
        return;
    if (yielding)
        kvf(out, "Preemptions:", "%d; yielding to job %s now (checkpointing before it stops)", j->preemptions,
            j->preempted_by);
    else
        kvf(out, "Preemptions:", "%d", j->preemptions);
}

/* The durable copy (docs/policies.md, "Checkpoint gate"), under one key:
 *   Durable:      step 1200 (generation 2), 1.5 GiB, /durable/17/step-1200/ckpt.pt, 3m ago; 2 copies, 3.0 GiB
 *                 step 1300 held since 12:03 (MFU 71% >= 30%)                                  */
static void render_durable(const Tide__V1__Job *j, int64_t now_ms, bool utc, tide_buf_t *out)
{
    const Tide__V1__Checkpoint *c = j->durable_checkpoint;
    tide_buf_t b = TIDE_BUF_INIT;
    char since[32], bytes[32];

    if (!c && j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_NONE && j->flushes == 0)
        return;
    if (c) {
        tide_cli_bytes_format(c->bytes, bytes, sizeof(bytes));
        tide_buf_printf(&b, "step %" PRId64 " (generation %d), %s", c->step, c->generation, bytes);
        if (c->path && *c->path)
            tide_buf_printf(&b, ", %s", c->path);
        if (c->time_ms > 0) {
            char a[16];
            tide_cli_age_format((now_ms - c->time_ms) / 1000, a, sizeof(a));
            tide_buf_printf(&b, ", %s ago", a);
        }
    } else {
        tide_buf_append_str(&b, "none yet");
    }
    if (j->flushes > 0) {
        tide_cli_bytes_format(j->flushed_bytes, bytes, sizeof(bytes));
        tide_buf_printf(&b, "; %u cop%s, %s written", j->flushes, j->flushes == 1 ? "y" : "ies", bytes);
    }
    kv(out, "Durable:", tide_buf_cstr(&b));
    tide_buf_reset(&b);
    clock_format(j->flush_since_ms, utc, since, sizeof(since));
    if (j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_HELD) {
        double thr = j->spec ? j->spec->checkpoint_mfu_threshold : 0;
        char m[32], t[32];
        tide_buf_printf(&b, "step %" PRId64 " held since %s", j->flush_step, since);
        if (j->mfu > 0 && thr > 0)
            tide_buf_printf(&b, " (MFU %s %s %s)", tide_cli_ratio_format(j->mfu, m, sizeof(m)),
                            j->mfu >= thr ? ">=" : "<", tide_cli_ratio_format(thr, t, sizeof(t)));
        else if (j->mfu > 0)
            tide_buf_printf(&b, " (MFU %s, at or above the scheduler's threshold)",
                            tide_cli_ratio_format(j->mfu, m, sizeof(m)));
        else
            tide_buf_append_str(&b, " (until MFU drops or the deadline)");
    } else if (j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_COPYING) {
        tide_buf_printf(&b, "step %" PRId64 " copying since %s", j->flush_step, since);
    }
    if (b.len)
        kv(out, "", tide_buf_cstr(&b));
    tide_buf_free(&b);
}

void tide_cli_render_job(const Tide__V1__Job *j, int64_t now_ms, bool utc, tide_buf_t *out)
{
    const Tide__V1__JobSpec *s = j->spec;
    char buf[64], buf2[64];

    kv(out, "ID:", j->id);
    kv(out, "Name:", s ? s->name : NULL);
    kv(out, "State:", job_state(j->state, buf, sizeof(buf)));
    kv(out, "Owner:", j->owner);
    if (j->run_as && *j->run_as)
        kv(out, "Runs as:", j->run_as);
    tide_cli_enum_name(&tide__v1__priority__descriptor, s ? (int)s->priority : 0, "PRIORITY_", buf, sizeof(buf));
    if (aged_class(j) && j->state == TIDE__V1__JOB_STATE__JOB_STATE_PENDING)
        kvf(out, "Priority:", "%s (aged to %s while waiting)", buf, prio_name(aged_class(j), buf2, sizeof(buf2)));
    else if (aged_class(j) && j->state == TIDE__V1__JOB_STATE__JOB_STATE_RUNNING)
        kvf(out, "Priority:", "%s (runs as %s after aging)", buf, prio_name(aged_class(j), buf2, sizeof(buf2)));
    else
        kv(out, "Priority:", buf);
    /* UNSPECIFIED starts ranks as ENV does (types.proto). */
    kv(out, "Launcher:",
       !s ? NULL
          : tide_cli_enum_name(&tide__v1__launcher__descriptor,
                               s->launcher ? (int)s->launcher : TIDE__V1__LAUNCHER__LAUNCHER_ENV, "LAUNCHER_", buf,
                               sizeof(buf)));
    tide_cli_render_size(j, out);
    if (s)
        render_placement(s, out);
    kvf(out, "Generation:", "%d", j->generation);
    tide_cli_render_resizes(j, now_ms, out);
    render_ranks(j, out);
    tide_cli_render_tasks(j, out);
    if (j->master_addr && *j->master_addr)
        kvf(out, "Master:", "%s:%d", j->master_addr, j->master_port);
    render_checkpoint(j, now_ms, out);
    render_durable(j, now_ms, utc, out);
    render_preemptions(j, out);
    tide_cli_render_recovery(j, now_ms, utc, out);
    if (s) {
        char *cmd = tide_cli_shell_join(s->command, s->n_command);
        kv(out, "Command:", cmd);
        free(cmd);
        kv(out, "Workdir:", s->workdir);
        if (s->n_env == 0)
            kv(out, "Environment:", NULL);
        for (size_t i = 0; i < s->n_env; i++) {
            char *e = tide_xasprintf("%s=%s", s->env[i]->key, s->env[i]->value);
            kv(out, i == 0 ? "Environment:" : "", e);
            free(e);
        }
        if (s->time_limit_seconds > 0)
            tide_cli_duration_format(s->time_limit_seconds, buf, sizeof(buf));
        else
            snprintf(buf, sizeof(buf), "none");
        kv(out, "Time limit:", buf);
    }
    tide_cli_time_format(j->submit_time_ms, utc, buf, sizeof(buf));
    if (j->submit_time_ms > 0) {
        tide_cli_age_format((now_ms - j->submit_time_ms) / 1000, buf2, sizeof(buf2));
        kvf(out, "Submitted:", "%s (%s ago)", buf, buf2);
    } else {
        kv(out, "Submitted:", buf);
    }
    tide_cli_time_format(j->start_time_ms, utc, buf, sizeof(buf));
    kv(out, "Started:", buf);
    tide_cli_time_format(j->end_time_ms, utc, buf, sizeof(buf));
    kv(out, "Ended:", buf);
    if (j->start_time_ms > 0) {
        int64_t end = j->end_time_ms > 0 ? j->end_time_ms : now_ms;
        tide_cli_duration_format((end - j->start_time_ms) / 1000, buf, sizeof(buf));
        kvf(out, "Duration:", "%s%s", buf, j->end_time_ms > 0 ? "" : " (running)");
    } else {
        kv(out, "Duration:", NULL);
    }
    kvf(out, "GPU-seconds:", "%.1f", j->gpu_seconds);
    if (j->flops_per_s > 0) {
        char rate[32], hfu[64] = "";
        double hw = 0, peak = 0;
        /* HFU over the ranks whose trainers report recomputation (docs/metrics.md). */
        for (size_t r = 0; r < j->n_ranks; r++) {
            const Tide__V1__TrainerProgress *p = j->ranks[r]->progress;
            if (p && p->hw_flops_per_s > 0) {
                hw += p->hw_flops_per_s;
                peak += p->peak_flops;
            }
        }
        if (hw > 0 && peak > 0) {
            char h[32];
            snprintf(hfu, sizeof(hfu), "; HFU %s with recomputation",
                     tide_cli_ratio_format(hw / peak, h, sizeof(h)));
        }
        tide_cli_si_format(j->flops_per_s, rate, sizeof(rate));
        kvf(out, "MFU:", "%s (%sFLOP/s of model FLOPs over ~10 s)%s",
            tide_cli_ratio_format(j->mfu, buf, sizeof(buf)), rate, hfu);
    }
    if (j->utilization && j->utilization->known) {
        const Tide__V1__Utilization *u = j->utilization;
        const double v[4] = {u->compute, u->memory_bandwidth, u->network, u->storage_io};
        char line[128];
        kv(out, "Utilization:", tide_cli_utilization_format(v, u->known, line, sizeof(line)));
    }
    render_target(j, out);
    if (j->failed_rank >= 0 && (j->state == TIDE__V1__JOB_STATE__JOB_STATE_FAILED || j->exit_code != 0)) {
        tide_cli_exit_code_format(j->exit_code, buf, sizeof(buf));
        kvf(out, "Exit code:", "%s (rank %d)", buf, j->failed_rank);
    } else if (j->state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
        kv(out, "Exit code:", "0");
    } else {
        kv(out, "Exit code:", NULL);
    }
    kv(out, "Message:", j->message);
}

void tide_cli_render_workers(Tide__V1__Worker *const *ws, size_t n, int64_t now_ms, tide_buf_t *out)
{
    static const char *const headers[] = {"ID",   "NODE",     "GPU",  "DEVICE", "STATE", "JOB",
                                          "RANK", "CORDONED", "UTIL", "TEMP",   "RISK",  "HEARTBEAT"};
    tide_cli_table_t *t = tide_cli_table_new(12, headers);

    for (size_t i = 0; i < n; i++) {
        const Tide__V1__Worker *w = ws[i];
        const Tide__V1__Telemetry *tm = w->telemetry;
        bool has_job = w->job_id && *w->job_id;
        char gpu[16], state[32], rank[16], util[16], temp[16], hb[16], risk[16], cordon[40];
        const char *cells[12];

        snprintf(gpu, sizeof(gpu), "%d", w->gpu_index);
        if (w->departed) /* it said goodbye and left (listed with --all only) */
            snprintf(state, sizeof(state), "DEPARTED");
        else
            tide_cli_enum_name(&tide__v1__worker_state__descriptor, w->state, "WORKER_STATE_", state,
                               sizeof(state));
        if (has_job && w->rank >= 0)
            snprintf(rank, sizeof(rank), "%d", w->rank);
        else
            snprintf(rank, sizeof(rank), "-");
        if (tm)
            snprintf(util, sizeof(util), "%.0f%%", tm->gpu_util * 100.0);
        else
            snprintf(util, sizeof(util), "-");
        if (tm && tm->temperature_c != 0)
            snprintf(temp, sizeof(temp), "%.0fC", tm->temperature_c);
        else
            snprintf(temp, sizeof(temp), "-");
        if (w->last_heartbeat_ms > 0)
            tide_cli_age_format((now_ms - w->last_heartbeat_ms) / 1000, hb, sizeof(hb));
        else
            snprintf(hb, sizeof(hb), "-");
        cells[0] = w->id;
        cells[1] = w->node && *w->node ? w->node : "-";
        cells[2] = gpu;
        cells[3] = w->device && *w->device ? w->device : "-";
        cells[4] = state;
        cells[5] = has_job ? w->job_id : "-";
        cells[6] = rank;
        /* Why it is cordoned, in a word: "drained", "quarantined", "predicted failure" (the reason's head). */
        if (w->cordoned && w->cordon_reason && *w->cordon_reason) {
            size_t head = strcspn(w->cordon_reason, ":");
            snprintf(cordon, sizeof(cordon), "%.*s", (int)(head < sizeof(cordon) - 1 ? head : sizeof(cordon) - 1),
                     w->cordon_reason);
        } else {
            snprintf(cordon, sizeof(cordon), "%s", w->cordoned ? "yes" : "no");
        }
        snprintf(risk, sizeof(risk), "%.2f", w->failure_risk);
        cells[7] = cordon;
        cells[8] = util;
        cells[9] = temp;
        cells[10] = risk;
        cells[11] = hb;
        tide_cli_table_add_row(t, cells);
    }
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

void tide_cli_render_event(const Tide__V1__Event *ev, bool utc, tide_buf_t *out)
{
    char when[64];
    char *type = tide_cli_sanitize(or_dash(ev->type)), *job = tide_cli_sanitize(or_dash(ev->job_id));
    char *worker = tide_cli_sanitize(or_dash(ev->worker_id)), *msg = tide_cli_sanitize(ev->message);

    tide_cli_time_format(ev->time_ms, utc, when, sizeof(when));
    tide_buf_printf(out, "%s  %-18s %-6s %-14s %s", when, type, job, worker, msg);
    /* An empty message leaves padding behind. */
    while (out->len > 0 && out->data[out->len - 1] == ' ')
        out->len--;
    tide_buf_append(out, "\n", 1);
    free(type);
    free(job);
    free(worker);
    free(msg);
}

/* The headroom reserve (docs/policies.md, "Headroom"), when the scheduler reports one:
 *   Reserve:    3 GPUs kept free for failures and bursts (2 spares + 1 burst); only LOW work may use them
 *               failure rate 3 per 1,000 GPUs a month (configured); 12 GPUs free now */
static void render_reserve(const Tide__V1__ClusterStatus *st, tide_buf_t *out)
{
    if (!st->reserve_fixed && st->reserve_gpus <= 0 && st->failure_rate_per_gpu_hour <= 0)
        return; /* a scheduler without the reserve policy */
    if (st->reserve_fixed)
        tide_buf_printf(out, "%-12s%d GPU%s kept free (set with --reserve); only LOW work may use them\n", "Reserve:",
                        st->reserve_gpus, st->reserve_gpus == 1 ? "" : "s");
    else if (st->reserve_gpus <= 0 && st->workers_ready + st->workers_busy < 16)
        tide_buf_printf(out, "%-12snone (fewer than 16 usable GPUs; --reserve N sets one)\n", "Reserve:");
    else if (st->reserve_gpus <= 0)
        tide_buf_printf(out, "%-12snone (0 spares + 0 burst at this failure rate)\n", "Reserve:");
    else
        tide_buf_printf(out,
                        "%-12s%d GPU%s kept free for failures and bursts (%d spare%s + %d burst); only LOW "
                        "work may use them\n",
                        "Reserve:", st->reserve_gpus, st->reserve_gpus == 1 ? "" : "s", st->reserve_spares,
                        st->reserve_spares == 1 ? "" : "s", st->reserve_burst);
    tide_buf_printf(out, "%-12sfailure rate %.3g per 1,000 GPUs a month (%s); %d GPU%s free now\n", "",
                    st->failure_rate_per_gpu_hour * 1000.0 * 730.0,
                    st->failure_rate_observed ? "observed" : "configured", st->gpus_free,
                    st->gpus_free == 1 ? "" : "s");
}

void tide_cli_render_status(const Tide__V1__ClusterStatus *st, const char *scheduler, tide_buf_t *out)
{
    char up[64];
    char *version = tide_cli_sanitize(or_dash(st->version)), *store = tide_cli_sanitize(or_dash(st->store));

    tide_cli_duration_format(st->uptime_ms / 1000, up, sizeof(up));
    tide_buf_printf(out, "%-12s%s (tide %s, up %s, leader epoch %" PRIu64 ", store %s)\n", "Scheduler:",
                    scheduler, version, up, st->leader_epoch, store);
    tide_buf_printf(out, "%-12s%d total: %d ready, %d busy, %d suspect, %d dead; %d cordoned\n", "Workers:",
                    st->workers_total, st->workers_ready, st->workers_busy, st->workers_suspect,
                    st->workers_dead, st->workers_cordoned);
    tide_buf_printf(out, "%-12s%d pending, %d running", "Jobs:", st->jobs_pending, st->jobs_running);
    if (st->jobs_preempting > 0)
        tide_buf_printf(out, " (%d yielding to a higher class)", st->jobs_preempting);
    tide_buf_printf(out, ", %d succeeded, %d failed, %d cancelled\n", st->jobs_succeeded, st->jobs_failed,
                    st->jobs_cancelled);
    render_reserve(st, out);
    if (st->peak_flops > 0) {
        char m[32], a[32], p[32];
        tide_cli_si_format(st->flops_per_s, a, sizeof(a));
        tide_cli_si_format(st->peak_flops, p, sizeof(p));
        tide_buf_printf(out, "%-12s%s (%sFLOP/s of model FLOPs on %sFLOP/s of healthy GPUs, idle ones too)\n",
                        "MFU:", tide_cli_ratio_format(st->mfu, m, sizeof(m)), a, p);
    }
    if (st->mfu_target_high > 0) {
        /* The running jobs' bands against the MFU of their own GPUs (docs/policies.md, "Headroom"). */
        char m[32] = "unknown";
        if (st->running_mfu > 0)
            tide_cli_ratio_format(st->running_mfu, m, sizeof(m));
        tide_buf_printf(out, "%-12s%.0f-%.0f%% (the running jobs' bands, by GPUs); their GPUs now %s\n", "Target:",
                        100 * st->mfu_target_low, 100 * st->mfu_target_high, m);
    }
    if (st->utilization_known) {
        const double v[4] = {st->utilization_compute, st->utilization_memory_bandwidth,
                             st->utilization_network, st->utilization_storage};
        char line[128];
        char *status = tide_cli_sanitize(or_dash(st->health_status));
        tide_buf_printf(out, "%s %s\n", "Utilization:",
                        tide_cli_utilization_format(v, st->utilization_known, line, sizeof(line)));
        tide_buf_printf(out, "%-12s%.0f/100: %s\n", "Health:", st->health_score, status);
        free(status);
    }
    free(version);
    free(store);
}

void tide_cli_render_job_change(const Tide__V1__Job *j, tide_buf_t *out)
{
    char state[32];
    char *id = tide_cli_sanitize(j->id), *msg = tide_cli_sanitize(j->message);

    job_state(j->state, state, sizeof(state));
    tide_buf_printf(out, "job %s: %s", id, state);
    switch (j->state) {
    case TIDE__V1__JOB_STATE__JOB_STATE_PENDING:
        if (*msg)
            tide_buf_printf(out, " (%s)", msg);
        break;
    case TIDE__V1__JOB_STATE__JOB_STATE_RUNNING:
        if (j->n_worker_ids > 0) {
            tide_buf_append_str(out, " on ");
            for (size_t i = 0; i < j->n_worker_ids; i++) {
                char *w = tide_cli_sanitize(j->worker_ids[i]);
                tide_buf_printf(out, "%s%s", i ? "," : "", w);
                free(w);
            }
        }
        tide_buf_printf(out, " (generation %d)", j->generation);
        break;
    case TIDE__V1__JOB_STATE__JOB_STATE_FAILED:
        if (*msg) {
            tide_buf_printf(out, ": %s", msg);
        } else if (j->failed_rank >= 0) {
            char code[48];
            tide_cli_exit_code_format(j->exit_code, code, sizeof(code));
            tide_buf_printf(out, ": rank %d exited with code %s", j->failed_rank, code);
        }
        break;
    default:
        if (*msg)
            tide_buf_printf(out, ": %s", msg);
        break;
    }
    tide_buf_append(out, "\n", 1);
    free(id);
    free(msg);
}
