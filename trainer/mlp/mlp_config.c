/* tide-mlp's flags and their validation. Invariant: a config that passes tide_mlp_config_validate
 * describes a model whose buffers fit in memory and a batch that splits into equal micro-batches.
 */
#include "mlp_config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* The largest model accepted: params, velocity, gradient and the fixed-point sums, 8 bytes each. */
#define MAX_PARAM_BYTES (8ULL << 30)

void tide_mlp_options_default(tide_mlp_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->cfg.input = 32;
    o->cfg.width = 128;
    o->cfg.depth = 3;
    o->cfg.output = 4;
    o->cfg.micro_batches = 16;
    o->cfg.batch = 256;
    o->cfg.seed = 1;
    o->cfg.lr = 0.01;
    o->cfg.momentum = 0.9;
    o->steps = 100;
    o->checkpoint_keep = 2;
    o->log_every = 10;
    o->eval_tasks = 64;
    o->eval_per_step = 1;
    o->eval_compute_ms = -1; /* until parsed: --simulated-compute's */
}

const char *tide_mlp_usage(void)
{
    return "usage: tide-mlp [flags]   (start with mpirun -n N; N may be 1)\n"
           "Trains an MLP by SGD on synthetic data; the parameters after a step do not depend on "
           "N.\n"
           "  --steps N             train until N steps are done (default 100)\n"
           "  --width W             units per hidden layer (default 128)\n"
           "  --depth D             hidden layers (default 3)\n"
           "  --input I             input features (default 32)\n"
           "  --output O            outputs (default 4)\n"
           "  --batch B             global batch, samples per step (default 256)\n"
           "  --micro-batches M     micro-batches per step, dividing B (default 16)\n"
           "  --lr X                learning rate (default 0.01)\n"
           "  --momentum X          SGD momentum in [0,1) (default 0.9)\n"
           "  --seed S              data, teacher and initial parameters (default 1)\n"
           "  --checkpoint-dir DIR  save checkpoints there and resume from the newest valid one\n"
           "  --checkpoint-every K  also save every K steps (default 0: at the end, on stop or "
           "request)\n"
           "  --checkpoint-keep N   newest checkpoints kept (default 2)\n"
           "  --log-every K         progress line every K steps (default 10; 0: none)\n"
           "  --simulated-compute MS  each micro-batch also costs MS ms of running time (sleeps;\n"
           "                        a stopped process does not advance it; default 0)\n"
           "  --eval-every K        an evaluation phase after every K-th step, on the checkpoint\n"
           "                        written then (needs --checkpoint-dir; default 0: none)\n"
           "  --eval-tasks T        held-out shards per evaluation phase (default 64, at most "
           "4096)\n"
           "  --eval-per-step E     shards a rank evaluates per training step while a phase lasts\n"
           "                        (default 1)\n"
           "  --eval-compute MS     simulated running time per shard (default: "
           "--simulated-compute)\n"
           "  --tiered-checkpoints  under tide (TIDE_CKPT_DIR set): save into the worker's hot\n"
           "                        tier and resume from its newest verified copy (hot, warm,\n"
           "                        cold); --checkpoint-every sets the cadence\n"
           "  --async-checkpoints   rank 0 snapshots the state and saves it in the background,\n"
           "                        while training goes on (one save in flight; the final one\n"
           "                        and one on a stop are waited for)\n"
           "  --quiet               print only the final params-sha256 line\n"
           "  --help                this text\n";
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
                     tide_error_t *err)
{
    char *end = NULL;
    unsigned long long v;

    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        goto bad;
    v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        goto bad;
    *out = v;
    return 0;
bad:
    tide_errprintf(err, "%s: expected an integer in [%llu, %llu], got '%s'", flag,
                   (unsigned long long)lo, (unsigned long long)hi, s ? s : "");
    return -EINVAL;
}

static int parse_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                     tide_error_t *err)
{
    uint64_t v;
    int rc = parse_u64(flag, s, lo, hi, &v, err);

    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

static int parse_double(const char *flag, const char *s, double lo, double hi, bool lo_open,
                        double *out, tide_error_t *err)
{
    char *end = NULL;
    double v;

    errno = 0;
    if (!s || !*s)
        goto bad;
    v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || (lo_open && v == lo) || v >= hi)
        goto bad;
    *out = v;
    return 0;
bad:
    tide_errprintf(err, "%s: expected a number in %c%g, %g), got '%s'", flag, lo_open ? '(' : '[',
                   lo, hi, s ? s : "");
    return -EINVAL;
}

enum {
    OPT_STEPS = 256,
    OPT_WIDTH,
    OPT_DEPTH,
    OPT_INPUT,
    OPT_OUTPUT,
    OPT_BATCH,
    OPT_MICRO,
    OPT_LR,
    OPT_MOMENTUM,
    OPT_SEED,
    OPT_CKPT_DIR,
    OPT_CKPT_EVERY,
    OPT_CKPT_KEEP,
    OPT_LOG_EVERY,
    OPT_SIM_COMPUTE,
    OPT_EVAL_EVERY,
    OPT_EVAL_TASKS,
    OPT_EVAL_PER_STEP,
    OPT_EVAL_COMPUTE,
    OPT_QUIET,
    OPT_TIERED,
    OPT_ASYNC,
    OPT_HELP,
};

static const struct option long_options[] = {
    {"steps", required_argument, NULL, OPT_STEPS},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"depth", required_argument, NULL, OPT_DEPTH},
    {"input", required_argument, NULL, OPT_INPUT},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"micro-batches", required_argument, NULL, OPT_MICRO},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"seed", required_argument, NULL, OPT_SEED},
    {"checkpoint-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"checkpoint-keep", required_argument, NULL, OPT_CKPT_KEEP},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"simulated-compute", required_argument, NULL, OPT_SIM_COMPUTE},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"eval-tasks", required_argument, NULL, OPT_EVAL_TASKS},
    {"eval-per-step", required_argument, NULL, OPT_EVAL_PER_STEP},
    {"eval-compute", required_argument, NULL, OPT_EVAL_COMPUTE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"tiered-checkpoints", no_argument, NULL, OPT_TIERED},
    {"async-checkpoints", no_argument, NULL, OPT_ASYNC},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static const char *flag_name(int c)
{
    for (const struct option *o = long_options; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

int tide_mlp_options_parse(tide_mlp_options_t *o, int argc, char **argv, tide_error_t *err)
{
    tide_mlp_config_t *c = &o->cfg;
    char flag[64];
    int rc = 0;
    int ch;

    opterr = 0;
    optind = 0; /* glibc: 0 also resets getopt's internal state, so the parser can run again */
    while ((ch = getopt_long(argc, argv, "+", long_options, NULL)) != -1) {
        if (ch == '?' || ch == ':') {
            const char *bad = argv[optind - 1];
            if (optopt >= OPT_STEPS)
                tide_errprintf(err, "--%s: missing value", flag_name(optopt));
            else if (optopt > 0)
                tide_errprintf(err, "unknown flag '-%c' (see --help)", optopt);
            else
                tide_errprintf(err, "unknown flag '%s' (see --help)", bad ? bad : "");
            rc = -EINVAL;
            goto done;
        }
        snprintf(flag, sizeof(flag), "--%s", flag_name(ch));
        switch (ch) {
        case OPT_STEPS:
            rc = parse_u64(flag, optarg, 0, 1ULL << 40, &o->steps, err);
            break;
        case OPT_WIDTH:
            rc = parse_u32(flag, optarg, 1, 1u << 16, &c->width, err);
            break;
        case OPT_DEPTH:
            rc = parse_u32(flag, optarg, 1, 64, &c->depth, err);
            break;
        case OPT_INPUT:
            rc = parse_u32(flag, optarg, 1, 1u << 16, &c->input, err);
            break;
        case OPT_OUTPUT:
            rc = parse_u32(flag, optarg, 1, 1u << 12, &c->output, err);
            break;
        case OPT_BATCH:
            rc = parse_u64(flag, optarg, 1, 1ULL << 31, &c->batch, err);
            break;
        case OPT_MICRO:
            rc = parse_u32(flag, optarg, 1, 1u << 20, &c->micro_batches, err);
            break;
        case OPT_LR:
            rc = parse_double(flag, optarg, 0, 1e6, true, &c->lr, err);
            break;
        case OPT_MOMENTUM:
            rc = parse_double(flag, optarg, 0, 1, false, &c->momentum, err);
            break;
        case OPT_SEED:
            rc = parse_u64(flag, optarg, 0, UINT64_MAX, &c->seed, err);
            break;
        case OPT_CKPT_DIR:
            if (!optarg || !*optarg) {
                tide_errprintf(err, "--checkpoint-dir: expected a directory");
                rc = -EINVAL;
            }
            o->checkpoint_dir = optarg;
            break;
        case OPT_CKPT_EVERY:
            rc = parse_u64(flag, optarg, 0, 1ULL << 40, &o->checkpoint_every, err);
            break;
        case OPT_CKPT_KEEP:
            rc = parse_u32(flag, optarg, 1, 1000, &o->checkpoint_keep, err);
            break;
        case OPT_LOG_EVERY:
            rc = parse_u64(flag, optarg, 0, 1ULL << 40, &o->log_every, err);
            break;
        case OPT_SIM_COMPUTE:
            rc = parse_double(flag, optarg, 0, 1e6, false, &o->simulated_compute_ms, err);
            break;
        case OPT_EVAL_EVERY:
            rc = parse_u64(flag, optarg, 0, 1ULL << 40, &o->eval_every, err);
            break;
        case OPT_EVAL_TASKS:
            rc = parse_u32(flag, optarg, 1, TIDE_MLP_EVAL_TASKS_MAX, &o->eval_tasks, err);
            break;
        case OPT_EVAL_PER_STEP:
            rc = parse_u32(flag, optarg, 1, TIDE_MLP_EVAL_TASKS_MAX, &o->eval_per_step, err);
            break;
        case OPT_EVAL_COMPUTE:
            rc = parse_double(flag, optarg, 0, 1e6, false, &o->eval_compute_ms, err);
            break;
        case OPT_QUIET:
            o->quiet = true;
            break;
        case OPT_TIERED:
            o->tiered = true;
            break;
        case OPT_ASYNC:
            o->async_checkpoints = true;
            break;
        case OPT_HELP:
            o->help = true;
            break;
        }
        if (rc)
            goto done;
    }
    if (optind < argc) {
        tide_errprintf(err, "unexpected argument '%s' (see --help)", argv[optind]);
        rc = -EINVAL;
        goto done;
    }
    if (o->eval_compute_ms < 0)
        o->eval_compute_ms = o->simulated_compute_ms;
    if (o->eval_every > 0 && !o->checkpoint_dir && !o->help) {
        /* the phase is computed from the step's checkpoint, and eval.log lives beside it */
        tide_errprintf(err, "--eval-every: needs --checkpoint-dir");
        rc = -EINVAL;
        goto done;
    }
    if (!o->help)
        rc = tide_mlp_config_validate(c, err);
done:
    return rc;
}

int tide_mlp_config_validate(const tide_mlp_config_t *c, tide_error_t *err)
{
    if (c->width < 1 || c->depth < 1 || c->input < 1 || c->output < 1) {
        tide_errprintf(err, "--width, --depth, --input and --output must be >= 1");
        return -EINVAL;
    }
    if (c->batch < 1 || c->micro_batches < 1 || c->micro_batches > c->batch ||
        c->batch % c->micro_batches) {
        tide_errprintf(err, "--micro-batches: %u does not divide --batch %llu", c->micro_batches,
                       (unsigned long long)c->batch);
        return -EINVAL;
    }
    if (!(c->lr > 0) || !isfinite(c->lr)) {
        tide_errprintf(err, "--lr: must be a finite number > 0");
        return -EINVAL;
    }
    if (!(c->momentum >= 0 && c->momentum < 1)) {
        tide_errprintf(err, "--momentum: must be in [0, 1)");
        return -EINVAL;
    }
    /* width <= 2^16 and depth <= 64 keep the count far from overflowing 64 bits */
    if (tide_mlp_param_count(c) * 32 > MAX_PARAM_BYTES) {
        tide_errprintf(err,
                       "--width/--depth/--input/--output: %llu parameters is more than this "
                       "trainer holds (%llu)",
                       (unsigned long long)tide_mlp_param_count(c),
                       (unsigned long long)(MAX_PARAM_BYTES / 32));
        return -EINVAL;
    }
    /* one micro-batch's activations: samples x (input + depth*width + output) doubles, twice */
    if ((c->batch / c->micro_batches) *
            ((uint64_t)c->input + (uint64_t)c->depth * c->width + c->output) * 16 >
        MAX_PARAM_BYTES) {
        tide_errprintf(err,
                       "--batch/--micro-batches: a micro-batch of %llu samples needs too much "
                       "memory for its activations; use more micro-batches",
                       (unsigned long long)(c->batch / c->micro_batches));
        return -EINVAL;
    }
    return 0;
}
