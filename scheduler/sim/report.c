/* What a run measured: samples of the cluster every timing.sample_s (MFU over usable GPUs, idle
 * ones included; allocation; the core's reserve), the CSV time series, the per-class accumulators
 * and the summary printed as a table or JSON. Invariant: nothing printed to stdout or the CSV
 * depends on the wall clock or on addresses, so one scenario and seed give byte-identical output.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_private.h"
#include "xmalloc.h"

void tide__report_init(tide_sim_t *s)
{
    s->acc = tide_xcalloc(s->sc->n_classes, sizeof(*s->acc));
    s->res.n_classes = s->sc->n_classes;
    s->res.classes = tide_xcalloc(s->sc->n_classes, sizeof(*s->res.classes));
    if (s->opt.csv &&
        fprintf(s->opt.csv,
                "time_h,usable_gpus,busy_gpus,free_gpus,reserve_gpus,running_jobs,pending_jobs,"
                "cluster_mfu,copies_running,copies_held,failures,lost_gpu_h,durable_tb\n") < 0)
        s->csv_error = true;
}

void tide__report_free(tide_sim_t *s)
{
    for (size_t i = 0; s->acc && i < s->sc->n_classes; i++)
        free(s->acc[i].delays);
    free(s->acc);
    free(s->res.classes);
    free(s->mfu_samples);
}

void tide__report_delay(tide_sim_t *s, int32_t cls, double seconds)
{
    class_acc_t *a = &s->acc[cls];

    if (a->n_delays == a->cap_delays) {
        a->cap_delays = a->cap_delays ? a->cap_delays * 2 : 256;
        a->delays = tide_xrealloc(a->delays, a->cap_delays * sizeof(double));
    }
    a->delays[a->n_delays++] = seconds;
}

void tide__report_sample(tide_sim_t *s)
{
    tide_reserve_t r;
    int wc[5], jc[6];
    double flops = 0, mfu;
    int32_t copies = 0, held = 0, busy;
    tide_list_t *pos;

    tide_core_reserve(s->core, &r);
    tide_core_worker_counts(s->core, wc);
    tide_core_job_counts(s->core, jc);
    busy = wc[TIDE_WORKER_BUSY];
    tide_list_for_each(pos, &s->running)
    {
        tide_sim_job_t *j = tide_list_entry(pos, tide_sim_job_t, run_node);
        flops += j->mfu * j->ranks;
        copies += j->copying;
        held += j->core->flush_state == TIDE_FLUSH_HELD;
    }
    mfu = r.usable > 0 ? flops / r.usable : 0;
    if (s->n_samples == s->cap_samples) {
        s->cap_samples = s->cap_samples ? s->cap_samples * 2 : 1024;
        s->mfu_samples = tide_xrealloc(s->mfu_samples, s->cap_samples * sizeof(double));
    }
    s->mfu_samples[s->n_samples++] = mfu;
    s->busy_sum += r.usable > 0 ? (double)busy / r.usable : 0;
    s->usable_sum += r.usable;
    s->reserve_sum += r.gpus;
    if (r.gpus > s->res.reserve_max)
        s->res.reserve_max = r.gpus;
    if (s->opt.csv && !s->csv_error &&
        fprintf(s->opt.csv, "%.4f,%d,%d,%d,%d,%d,%d,%.4f,%d,%d,%" PRIu64 ",%.2f,%.3f\n",
                (double)s->now / 3.6e6, (int)r.usable, (int)busy, (int)r.free, (int)r.gpus,
                jc[TIDE_JOB_RUNNING], jc[TIDE_JOB_PENDING], mfu, (int)copies, (int)held,
                s->res.failures, s->res.lost_gpu_h, s->res.durable_bytes / 1e12) < 0)
        s->csv_error = true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, size_t n, double p)
{
    size_t k;

    if (n == 0)
        return 0;
    k = (size_t)ceil(p / 100.0 * (double)n);
    if (k < 1)
        k = 1;
    return v[k - 1];
}

void tide__report_finish(tide_sim_t *s)
{
    tide_sim_result_t *r = &s->res;
    double hours = (double)s->end / 3.6e6;

    r->seed = s->seed;
    r->days = (double)s->end / 86400e3;
    r->gpus = s->sc->total_gpus;
    r->cluster_gpu_h = (double)r->gpus * hours;
    r->goodput = r->cluster_gpu_h > 0 ? r->retained_gpu_h / r->cluster_gpu_h : 0;
    r->effective_mfu = r->cluster_gpu_h > 0 ? r->effective_mfu / (r->cluster_gpu_h * 3600.0) : 0;
    if (s->n_samples) {
        double sum = 0;
        for (size_t i = 0; i < s->n_samples; i++)
            sum += s->mfu_samples[i];
        r->mfu_mean = sum / (double)s->n_samples;
        qsort(s->mfu_samples, s->n_samples, sizeof(double), cmp_double);
        r->mfu_p5 = pct(s->mfu_samples, s->n_samples, 5);
        r->mfu_p95 = pct(s->mfu_samples, s->n_samples, 95);
        r->busy_mean = s->busy_sum / (double)s->n_samples;
        r->usable_mean = s->usable_sum / (double)s->n_samples;
        r->reserve_mean = s->reserve_sum / (double)s->n_samples;
    }
    r->copy_wait_mean_s = s->copy_waits ? s->copy_wait_sum / (double)s->copy_waits : 0;
    r->durable_age_mean_s = s->durable_ages ? s->durable_age_sum / (double)s->durable_ages : 0;
    for (size_t i = 0; i < s->sc->n_classes; i++) {
        class_acc_t *a = &s->acc[i];
        tide_sim_class_result_t *c = &r->classes[i];
        double sum = 0;
        c->name = s->sc->classes[i].name;
        c->priority = s->sc->classes[i].priority;
        c->submitted = a->submitted;
        c->started = a->started;
        c->finished = a->finished;
        c->failed = a->failed;
        if (a->n_delays)
            qsort(a->delays, a->n_delays, sizeof(double), cmp_double);
        for (size_t k = 0; k < a->n_delays; k++)
            sum += a->delays[k];
        c->delay_mean_s = a->n_delays ? sum / (double)a->n_delays : 0;
        c->delay_p50_s = pct(a->delays, a->n_delays, 50);
        c->delay_p95_s = pct(a->delays, a->n_delays, 95);
        c->delay_max_s = a->n_delays ? a->delays[a->n_delays - 1] : 0;
        c->restarts = a->restarts;
        c->restart_mean_s = a->restarts ? a->restart_sum / (double)a->restarts : 0;
        c->restart_max_s = a->restart_max;
        c->preemptions = a->preemptions;
        c->requeues = a->requeues;
        c->retained_gpu_h = a->retained_gpu_h;
        c->lost_gpu_h = a->lost_gpu_h;
        c->effective_training_time = a->wall_gpu_h > 0 ? a->retained_gpu_h / a->wall_gpu_h : 0;
    }
}

/* --- printing --- */

static void dur(char *buf, size_t len, double s)
{
    if (s < 120)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 7200)
        snprintf(buf, len, "%.1fm", s / 60);
    else if (s < 172800)
        snprintf(buf, len, "%.1fh", s / 3600);
    else
        snprintf(buf, len, "%.1fd", s / 86400);
}

void tide_sim_print_table(const tide_sim_result_t *r, const tide_scenario_t *sc, FILE *f)
{
    fprintf(f, "scenario %s: %d GPUs, %.1f days, seed %" PRIu64 "\n", sc->name, (int)r->gpus,
            r->days, r->seed);
    fprintf(f,
            "policy   gate %s (threshold %.0f%%, deadline %.0f min), preemption %s, reserve %s, "
            "aging %.0f min\n",
            sc->gate && sc->durable
                ? "on"
                : (sc->durable ? "off (copy at once)" : "off (no durable copies)"),
            sc->gate_threshold * 100, (double)sc->gate_deadline_ms / 60000,
            sc->preemption ? "on" : "off", sc->reserve_gpus < 0 ? "auto" : "fixed",
            (double)sc->aging_ms / 60000);
    fprintf(f, "\n");
    fprintf(f, "goodput            %6.1f%%   retained %.0f of %.0f GPU-hours at nominal speed\n",
            r->goodput * 100, r->retained_gpu_h, r->cluster_gpu_h);
    fprintf(f, "effective MFU      %6.1f%%   retained model FLOPs / cluster peak\n",
            r->effective_mfu * 100);
    fprintf(f,
            "cluster MFU        %6.1f%%   p5 %.1f%%  p95 %.1f%%  (usable GPUs, idle ones count)\n",
            r->mfu_mean * 100, r->mfu_p5 * 100, r->mfu_p95 * 100);
    fprintf(f, "allocated          %6.1f%%   of %.0f usable GPUs on average\n", r->busy_mean * 100,
            r->usable_mean);
    fprintf(f, "reserve            %8.1f   GPUs on average (max %d)\n", r->reserve_mean,
            (int)r->reserve_max);
    fprintf(f,
            "GPU-hours          train %.0f, eval %.0f, local saves %.0f, starting %.0f; copy "
            "interference %.0f\n",
            r->train_gpu_h, r->eval_gpu_h, r->save_gpu_h, r->start_gpu_h, r->interference_gpu_h);
    fprintf(f,
            "lost GPU-hours     %8.1f   failures %.1f (of which with a precursor %.1f), "
            "preemptions %.1f, moves off predicted failures %.1f (%" PRIu64 ")\n",
            r->lost_gpu_h, r->lost_failure_gpu_h, r->lost_precursor_gpu_h, r->lost_preempt_gpu_h,
            r->lost_move_gpu_h, r->moves);
    fprintf(f,
            "checkpoints        %8" PRIu64 "   local; %" PRIu64
            " durable copies (%.2f TB), %" PRIu64 " held by the gate\n",
            r->checkpoints, r->copies, r->durable_bytes / 1e12, r->copies_held);
    fprintf(f,
            "copy wait          %8.1f s mean, %.1f s max; durable copy age at a failure %.1f min "
            "mean\n",
            r->copy_wait_mean_s, r->copy_wait_max_s, r->durable_age_mean_s / 60);
    fprintf(f,
            "failures           %8" PRIu64 "   (%" PRIu64 " on busy GPUs, %" PRIu64
            " with a precursor)\n",
            r->failures, r->failures_busy, r->precursors);
    fprintf(f,
            "requeues           %8" PRIu64 "   preemptions %" PRIu64 ", rollbacks %" PRIu64
            ", aged %" PRIu64 ", jobs failed %" PRIu64 "\n",
            r->requeues, r->preemptions, r->rollbacks, r->aged, r->jobs_failed);
    fprintf(f, "events             %8" PRIu64 "   core calls %" PRIu64 ", actions %" PRIu64 "\n",
            r->events, r->core_calls, r->actions);
    fprintf(f, "\n%-14s %-8s %7s %7s %14s %7s %7s %7s %7s %7s %10s %8s %6s\n", "class", "priority",
            "submit", "done", "run/wait@end", "delay", "p50", "p95", "max", "preempt", "retainGPUh",
            "lostGPUh", "ETT");
    for (size_t i = 0; i < r->n_classes; i++) {
        const tide_sim_class_result_t *c = &r->classes[i];
        char mean[16], p50[16], p95[16], mx[16], rw[24];
        dur(mean, sizeof(mean), c->delay_mean_s);
        dur(p50, sizeof(p50), c->delay_p50_s);
        dur(p95, sizeof(p95), c->delay_p95_s);
        dur(mx, sizeof(mx), c->delay_max_s);
        snprintf(rw, sizeof(rw), "%" PRIu64 "/%" PRIu64, c->running_at_end, c->waiting_at_end);
        fprintf(f,
                "%-14s %-8s %7" PRIu64 " %7" PRIu64 " %14s %7s %7s %7s %7s %7" PRIu64
                " %10.0f %8.1f %5.1f%%\n",
                c->name, tide_prio_name(c->priority), c->submitted, c->finished, rw, mean, p50, p95,
                mx, c->preemptions, c->retained_gpu_h, c->lost_gpu_h,
                c->effective_training_time * 100);
    }
}

/* s as a JSON string literal. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void tide_sim_print_json(const tide_sim_result_t *r, const tide_scenario_t *sc, FILE *f)
{
    fprintf(f, "{\n  \"scenario\": ");
    json_str(f, sc->name);
    fprintf(f, ",\n");
    fprintf(f, "  \"seed\": %" PRIu64 ",\n", r->seed);
    fprintf(f, "  \"gpus\": %d,\n", (int)r->gpus);
    fprintf(f, "  \"simulated_days\": %.4f,\n", r->days);
    fprintf(f, "  \"gate\": %s,\n", sc->gate && sc->durable ? "true" : "false");
    fprintf(f, "  \"preemption\": %s,\n", sc->preemption ? "true" : "false");
    fprintf(f, "  \"reserve_setting\": %d,\n", (int)sc->reserve_gpus);
    fprintf(f, "  \"goodput\": %.6f,\n", r->goodput);
    fprintf(f, "  \"effective_mfu\": %.6f,\n", r->effective_mfu);
    fprintf(f, "  \"cluster_gpu_hours\": %.3f,\n", r->cluster_gpu_h);
    fprintf(f, "  \"retained_gpu_hours\": %.3f,\n", r->retained_gpu_h);
    fprintf(f, "  \"cluster_mfu\": {\"mean\": %.6f, \"p5\": %.6f, \"p95\": %.6f},\n", r->mfu_mean,
            r->mfu_p5, r->mfu_p95);
    fprintf(f, "  \"allocated_share\": %.6f,\n", r->busy_mean);
    fprintf(f, "  \"usable_gpus_mean\": %.3f,\n", r->usable_mean);
    fprintf(f, "  \"reserve_gpus\": {\"mean\": %.3f, \"max\": %d},\n", r->reserve_mean,
            (int)r->reserve_max);
    fprintf(f,
            "  \"gpu_hours\": {\"train\": %.3f, \"eval\": %.3f, \"local_saves\": %.3f, "
            "\"starting\": %.3f, "
            "\"copy_interference\": %.3f},\n",
            r->train_gpu_h, r->eval_gpu_h, r->save_gpu_h, r->start_gpu_h, r->interference_gpu_h);
    fprintf(f,
            "  \"lost_gpu_hours\": {\"total\": %.3f, \"failures\": %.3f, "
            "\"failures_with_precursor\": %.3f, "
            "\"preemptions\": %.3f, \"moves\": %.3f},\n",
            r->lost_gpu_h, r->lost_failure_gpu_h, r->lost_precursor_gpu_h, r->lost_preempt_gpu_h,
            r->lost_move_gpu_h);
    fprintf(f, "  \"moves\": %" PRIu64 ",\n", r->moves);
    fprintf(f, "  \"checkpoints\": %" PRIu64 ",\n", r->checkpoints);
    fprintf(f, "  \"durable_copies\": %" PRIu64 ",\n", r->copies);
    fprintf(f, "  \"copies_held\": %" PRIu64 ",\n", r->copies_held);
    fprintf(f, "  \"durable_bytes\": %.0f,\n", r->durable_bytes);
    fprintf(f, "  \"copy_wait_s\": {\"mean\": %.3f, \"max\": %.3f},\n", r->copy_wait_mean_s,
            r->copy_wait_max_s);
    fprintf(f, "  \"durable_age_at_failure_s\": %.3f,\n", r->durable_age_mean_s);
    fprintf(f, "  \"failures\": %" PRIu64 ",\n", r->failures);
    fprintf(f, "  \"failures_on_busy_gpus\": %" PRIu64 ",\n", r->failures_busy);
    fprintf(f, "  \"precursors\": %" PRIu64 ",\n", r->precursors);
    fprintf(f, "  \"requeues\": %" PRIu64 ",\n", r->requeues);
    fprintf(f, "  \"preemptions\": %" PRIu64 ",\n", r->preemptions);
    fprintf(f, "  \"rollbacks\": %" PRIu64 ",\n", r->rollbacks);
    fprintf(f, "  \"aged\": %" PRIu64 ",\n", r->aged);
    fprintf(f, "  \"jobs_failed\": %" PRIu64 ",\n", r->jobs_failed);
    fprintf(f, "  \"events\": %" PRIu64 ",\n", r->events);
    fprintf(f, "  \"core_calls\": %" PRIu64 ",\n", r->core_calls);
    fprintf(f, "  \"actions\": %" PRIu64 ",\n", r->actions);
    fprintf(f, "  \"classes\": [\n");
    for (size_t i = 0; i < r->n_classes; i++) {
        const tide_sim_class_result_t *c = &r->classes[i];
        fprintf(f, "    {\"name\": ");
        json_str(f, c->name);
        fprintf(f,
                ", \"priority\": \"%s\", \"submitted\": %" PRIu64 ", \"started\": %" PRIu64
                ", \"finished\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"running_at_end\": %" PRIu64
                ", \"waiting_at_end\": %" PRIu64 ",\n",
                tide_prio_name(c->priority), c->submitted, c->started, c->finished, c->failed,
                c->running_at_end, c->waiting_at_end);
        fprintf(f,
                "     \"queue_delay_s\": {\"mean\": %.3f, \"p50\": %.3f, \"p95\": %.3f, \"max\": "
                "%.3f}, "
                "\"restarts\": %" PRIu64
                ", \"restart_delay_s\": {\"mean\": %.3f, \"max\": %.3f},\n",
                c->delay_mean_s, c->delay_p50_s, c->delay_p95_s, c->delay_max_s, c->restarts,
                c->restart_mean_s, c->restart_max_s);
        fprintf(f,
                "     \"preemptions\": %" PRIu64 ", \"requeues\": %" PRIu64
                ", \"retained_gpu_hours\": %.3f, \"lost_gpu_hours\": %.3f"
                ", \"effective_training_time\": %.6f}%s\n",
                c->preemptions, c->requeues, c->retained_gpu_h, c->lost_gpu_h,
                c->effective_training_time, i + 1 < r->n_classes ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}
