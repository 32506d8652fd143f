/* tide-sim burst: one data-parallel job of n ranks under the article's pulse load, stepped in fixed
 * dt, with burst off, burst by detached tasks and burst by generation resize; every LEND/RECLAIM
 * comes from the real controller (core/burst.h) fed the job's phase at each 500 ms heartbeat. The
 * three modes see the same pulses (one seeded draw per cycle), so their differences are the
 * policy's alone; the same work is done in each, so useful GPU-time is the same and wall time and
 * GPU-time held are compared. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst.h"
#include "burst_sim.h"
#include "rng.h"
#include "xmalloc.h"

#define HEARTBEAT_MS 500
#define DT_MS        10

typedef enum bmode { MODE_OFF, MODE_DETACHED, MODE_RESIZE } bmode_t;
static const char *const mode_names[] = {"off", "detached", "resize"};

typedef struct bopt {
    int ranks, cycles, avail; /* avail < 0: as many as the controller asks for */
    double length_s, period_s, factor, cost_ms, percent, jitter;
    double resize_scale; /* resize mode tells the controller cost_ms x this; it pauses cost_ms */
    uint64_t seed;
} bopt_t;

typedef struct bres {
    double wall_s, held_gpu_s, lent_gpu_s, useful_gpu_s, paused_s;
    int lends;
} bres_t;

/* The pulses as they run with nothing lent: cycle c's pulse lasts pulse_s[c] wall seconds (work
 * pulse_s[c] / f iterations, each needing f x a base iteration's FLOPs), then normal_s[c] seconds
 * of base iterations (1 iteration = 1 s). */
typedef struct load {
    int cycles;
    double *pulse_s, *normal_s;
} load_t;

static void load_make(const bopt_t *o, load_t *ld)
{
    tide_rng_t r;
    tide_rng_seed(&r, o->seed, 7);
    ld->cycles = o->cycles;
    ld->pulse_s = tide_xcalloc((size_t)o->cycles, sizeof(double));
    ld->normal_s = tide_xcalloc((size_t)o->cycles, sizeof(double));
    for (int c = 0; c < o->cycles; c++) {
        ld->pulse_s[c] = o->length_s * (1 + o->jitter * (2 * tide_rng_uniform(&r) - 1));
        ld->normal_s[c] =
            (o->period_s - o->length_s) * (1 + o->jitter * (2 * tide_rng_uniform(&r) - 1));
    }
}

static void load_free(load_t *ld)
{
    free(ld->pulse_s);
    free(ld->normal_s);
}

/* Iterations per second. Detached: the k lent workers share only the pulse's extra (f - 1) x base
 * work with the n ranks; the base part stays on the ranks. Resize: the job runs on n + k ranks and
 * all of its work scales (perfect data parallelism). */
static double rate(bmode_t m, double n, double k, double f, bool pulse)
{
    if (m == MODE_RESIZE)
        return pulse ? (n + k) / (n * f) : (n + k) / n;
    return pulse ? 1 / (1 + (f - 1) * n / (n + k)) : 1;
}

static void run(const bopt_t *o, const load_t *ld, bmode_t m, bres_t *res)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    double n = o->ranks, seg_left, useful = 0;
    /* active: the lent workers that work (detached: started; resize: past the pause) */
    int c = 0, lent = 0, active = 0;
    bool pulse = true, reclaiming = false;
    int64_t t = 0, pause_until = 0, useful_at = 0, cost = (int64_t)llround(o->cost_ms);
    int64_t cost_seen = m == MODE_RESIZE ? (int64_t)llround(o->cost_ms * o->resize_scale) : cost;

    memset(res, 0, sizeof(*res));
    tide_burst_cfg_default(&cfg);
    cfg.percent = o->percent;
    tide_burst_init(&b);
    for (int i = 0; i < ld->cycles; i++)
        useful += n * (ld->pulse_s[i] + ld->normal_s[i]);
    seg_left = ld->pulse_s[0] / o->factor;
    for (;;) {
        double left = DT_MS / 1000.0, used;
        bool paused = t < pause_until;

        if (m == MODE_RESIZE && !paused && reclaiming) { /* the shrink's generation is running */
            lent = active = 0;
            reclaiming = false;
        }
        if (m == MODE_RESIZE && !paused && lent > 0 && !reclaiming)
            active = lent;
        if (m == MODE_DETACHED && lent > 0 && t >= useful_at)
            active = lent;
        if (m != MODE_OFF && !paused && t % HEARTBEAT_MS == 0) {
            int32_t k = 0;
            tide_burst_observe(&b, &cfg, t, pulse);
            switch (tide_burst_decide(&b, &cfg, t, o->ranks, o->avail < 0 ? o->ranks : o->avail,
                                      cost_seen, &k)) {
            case TIDE_BURST_LEND:
                tide_burst_lent(&b, t, k);
                lent = k;
                res->lends++;
                if (m == MODE_RESIZE)
                    pause_until = t + cost;
                else
                    useful_at = t + cost;
                break;
            case TIDE_BURST_RECLAIM:
                tide_burst_reclaimed(&b);
                if (m == MODE_RESIZE) {
                    pause_until = t + cost;
                    reclaiming = true;
                } else {
                    lent = active = 0;
                }
                break;
            case TIDE_BURST_HOLD:
                break;
            }
            paused = t < pause_until;
        }
        if (paused)
            res->paused_s += left;
        while (!paused && left > 0) {
            double r = rate(m, n, active, o->factor, pulse), need = seg_left / r;
            if (need > left) {
                seg_left -= r * left;
                left = 0;
                break;
            }
            left -= need;
            if (pulse) {
                pulse = false;
                seg_left = ld->normal_s[c];
            } else if (++c < ld->cycles) {
                pulse = true;
                seg_left = ld->pulse_s[c] / o->factor;
            } else {
                break;
            }
        }
        used = c >= ld->cycles ? DT_MS / 1000.0 - left : DT_MS / 1000.0;
        res->held_gpu_s += (n + lent) * used;
        res->lent_gpu_s += lent * used;
        if (c >= ld->cycles) {
            res->wall_s = t / 1000.0 + used;
            break;
        }
        t += DT_MS;
    }
    res->useful_gpu_s = useful;
}

static void row_json(const char *name, const bres_t *r, const bres_t *off, bool last)
{
    printf(
        "\"%s\": {\"wall_s\": %.3f, \"vs_off\": %.5f, \"held_gpu_s\": %.1f, \"lent_gpu_s\": %.1f, "
        "\"paused_s\": %.2f, \"lends\": %d, \"goodput\": %.5f}%s",
        name, r->wall_s, r->wall_s / off->wall_s - 1, r->held_gpu_s, r->lent_gpu_s, r->paused_s,
        r->lends, r->useful_gpu_s / r->held_gpu_s, last ? "" : ", ");
}

static void run_all(const bopt_t *o, bres_t r[3])
{
    load_t ld;
    load_make(o, &ld);
    for (int m = 0; m < 3; m++)
        run(o, &ld, (bmode_t)m, &r[m]);
    load_free(&ld);
}

static void one(const bopt_t *o, bool json)
{
    bres_t r[3];
    run_all(o, r);
    if (json) {
        printf(
            "{\"ranks\": %d, \"pulse_length_s\": %g, \"pulse_period_s\": %g, \"pulse_factor\": %g, "
            "\"cost_ms\": %g, \"resize_cost_scale\": %g, \"percent\": %g, \"cycles\": %d, "
            "\"jitter\": %g, "
            "\"seed\": %llu, ",
            o->ranks, o->length_s, o->period_s, o->factor, o->cost_ms, o->resize_scale, o->percent,
            o->cycles, o->jitter, (unsigned long long)o->seed);
        for (int m = 0; m < 3; m++)
            row_json(mode_names[m], &r[m], &r[0], m == 2);
        printf("}\n");
        return;
    }
    printf("tide-sim burst: %d ranks, a %.1f s pulse of every %.1f s at %.2fx (jitter %.0f%%), %d "
           "cycles, "
           "cost %.2f s (resize: told x%g), burst %.0f%%, seed %llu\n\n",
           o->ranks, o->length_s, o->period_s, o->factor, 100 * o->jitter, o->cycles,
           o->cost_ms / 1000, o->resize_scale, o->percent, (unsigned long long)o->seed);
    printf("%-10s %11s %8s %13s %11s %9s %6s %8s\n", "mode", "wall s", "vs off", "GPU-s held",
           "lent GPU-s", "paused s", "lends", "goodput");
    for (int m = 0; m < 3; m++)
        printf("%-10s %11.1f %+7.1f%% %13.0f %11.0f %9.1f %6d %8.4f\n", mode_names[m], r[m].wall_s,
               100 * (r[m].wall_s / r[0].wall_s - 1), r[m].held_gpu_s, r[m].lent_gpu_s,
               r[m].paused_s, r[m].lends, r[m].useful_gpu_s / r[m].held_gpu_s);
}

/* The article's shape: 10 of every 100 iterations at f x the load, so with nothing lent the pulse
 * takes 10 f of every 10 f + 90 seconds. */
static double article_period(double length_s, double f)
{
    return length_s * (1 + 9 / f);
}

static void sweep(const bopt_t *base, bool json)
{
    static const double lengths[] = {0.5, 2, 10, 60, 300}, costs[] = {300, 3000, 30000};
    bool first = true;

    if (json)
        printf("{\"ranks\": %d, \"pulse_factor\": %g, \"percent\": %g, \"cycles\": %d, \"seed\": "
               "%llu, \"rows\": [",
               base->ranks, base->factor, base->percent, base->cycles,
               (unsigned long long)base->seed);
    else
        printf("tide-sim burst --sweep: %d ranks, pulse factor %.2f, period %.1f x the pulse, "
               "burst %.0f%%, "
               "%d cycles, jitter %.0f%%, resize cost told x%g, seed %llu\n\n"
               "| pulse s | cost s | off wall s | detached vs off | lends | lent GPU-s | goodput | "
               "resize vs off | lends | paused s | goodput |\n"
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
               base->ranks, base->factor, 1 + 9 / base->factor, base->percent, base->cycles,
               100 * base->jitter, base->resize_scale, (unsigned long long)base->seed);
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        for (size_t j = 0; j < sizeof(costs) / sizeof(costs[0]); j++) {
            bopt_t o = *base;
            bres_t r[3];
            o.length_s = lengths[i];
            o.period_s = article_period(lengths[i], o.factor);
            o.cost_ms = costs[j];
            run_all(&o, r);
            if (json) {
                printf("%s{\"pulse_s\": %g, \"period_s\": %g, \"cost_s\": %g, ", first ? "" : ", ",
                       o.length_s, o.period_s, o.cost_ms / 1000);
                for (int m = 0; m < 3; m++)
                    row_json(mode_names[m], &r[m], &r[0], m == 2);
                printf("}");
                first = false;
                continue;
            }
            printf("| %g | %g | %.0f | %+.1f%% | %d | %.0f | %.3f | %+.1f%% | %d | %.0f | %.3f |\n",
                   o.length_s, o.cost_ms / 1000, r[0].wall_s, 100 * (r[1].wall_s / r[0].wall_s - 1),
                   r[1].lends, r[1].lent_gpu_s, r[1].useful_gpu_s / r[1].held_gpu_s,
                   100 * (r[2].wall_s / r[0].wall_s - 1), r[2].lends, r[2].paused_s,
                   r[2].useful_gpu_s / r[2].held_gpu_s);
        }
    }
    if (json)
        printf("]}\n");
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: tide-sim burst [--ranks N] [--pulse-length S] [--pulse-period S] [--pulse-factor "
        "F]\n"
        "                      [--cost-ms MS] [--percent P] [--avail N] [--cycles C] [--jitter J]\n"
        "                      [--seed N] [--sweep] [-o table|json]\n"
        "  --ranks N          the job's ranks (default 64)\n"
        "  --pulse-length S   a high phase, wall seconds with nothing lent (default 10)\n"
        "  --pulse-period S   a whole cycle, wall seconds with nothing lent (default: the "
        "article's\n"
        "                     10 of every 100 iterations, length x (1 + 9 / F))\n"
        "  --pulse-factor F   a pulse iteration needs F x a base iteration's work (default 5)\n"
        "  --cost-ms MS       the price of a change: resize pauses the job MS at each lend and\n"
        "                     each reclaim; detached workers start working MS after the lend\n"
        "                     (default 3260: a 0.26 s resize + a 3 s PyTorch-like restart)\n"
        "  --resize-cost-scale X  resize mode tells the controller X x the cost (default 1; its\n"
        "                     pauses stay the cost); (100 + P) / P weighs a pause of all ranks\n"
        "                     against what P%% more ranks save\n"
        "  --percent P        burst size, %% of the ranks (default 20)\n"
        "  --avail N          workers the reserve has free for the job (default: no limit)\n"
        "  --cycles C         the work: C pulse cycles (default 50)\n"
        "  --jitter J         each pulse and gap length x uniform(1 - J, 1 + J) (default 0.2)\n"
        "  --seed N           (default 1)\n"
        "  --sweep            pulse lengths 0.5 2 10 60 300 s x costs 0.3 3 30 s, one table\n"
        "  -o table|json      (default table)\n");
}

int tide_burst_sim_main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"ranks", required_argument, NULL, 'r'},
        {"pulse-length", required_argument, NULL, 'l'},
        {"pulse-period", required_argument, NULL, 'p'},
        {"pulse-factor", required_argument, NULL, 'f'},
        {"cost-ms", required_argument, NULL, 'c'},
        {"percent", required_argument, NULL, 'P'},
        {"avail", required_argument, NULL, 'a'},
        {"cycles", required_argument, NULL, 'C'},
        {"jitter", required_argument, NULL, 'j'},
        {"seed", required_argument, NULL, 'e'},
        {"sweep", no_argument, NULL, 'S'},
        {"output", required_argument, NULL, 'o'},
        {"resize-cost-scale", required_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bopt_t o = {.ranks = 64,
                .cycles = 50,
                .avail = -1,
                .length_s = 10,
                .period_s = 0,
                .factor = 5,
                .cost_ms = 3260,
                .percent = 20,
                .jitter = 0.2,
                .resize_scale = 1,
                .seed = 1};
    bool do_sweep = false, json = false;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (c) {
        case 'r':
            o.ranks = (int)strtol(optarg, &end, 10);
            break;
        case 'l':
            o.length_s = strtod(optarg, &end);
            break;
        case 'p':
            o.period_s = strtod(optarg, &end);
            break;
        case 'f':
            o.factor = strtod(optarg, &end);
            break;
        case 'c':
            o.cost_ms = strtod(optarg, &end);
            break;
        case 'P':
            o.percent = strtod(optarg, &end);
            break;
        case 'a':
            o.avail = (int)strtol(optarg, &end, 10);
            break;
        case 'C':
            o.cycles = (int)strtol(optarg, &end, 10);
            break;
        case 'j':
            o.jitter = strtod(optarg, &end);
            break;
        case 'x':
            o.resize_scale = strtod(optarg, &end);
            break;
        case 'e':
            o.seed = strtoull(optarg, &end, 10);
            break;
        case 'S':
            do_sweep = true;
            end = (char *)"";
            break;
        case 'o':
            end = (char *)"";
            if (strcmp(optarg, "json") == 0)
                json = true;
            else if (strcmp(optarg, "table") != 0)
                end = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (errno || !end || *end) {
            fprintf(stderr, "tide-sim burst: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (o.period_s == 0)
        o.period_s = article_period(o.length_s, o.factor);
    if (optind != argc || o.ranks < 1 || o.ranks > 100000 || o.cycles < 1 || o.cycles > 100000 ||
        !(o.length_s > 0 && o.length_s <= 86400) || !(o.factor >= 1 && o.factor <= 1000) ||
        !(o.period_s > o.length_s && o.period_s <= 864000) ||
        !(o.cost_ms >= 0 && o.cost_ms <= 3.6e6) || !(o.percent >= 0 && o.percent <= 1000) ||
        !(o.jitter >= 0 && o.jitter < 1) || o.avail < -1 ||
        !(o.resize_scale >= 0 && o.resize_scale <= 1000)) {
        usage(stderr);
        return 2;
    }
    if (do_sweep)
        sweep(&o, json);
    else
        one(&o, json);
    return 0;
}
