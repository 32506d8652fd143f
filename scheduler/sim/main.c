/* tide-sim: runs a scenario through the scheduler core on a virtual clock and prints what the
 * policy did (docs/simulator.md). stdout and the CSV hold only simulated quantities (byte-identical
 * for one scenario and seed); the run time and progress go to stderr. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "burst_sim.h"
#include "scenario.h"
#include "sim.h"
#include "steal_sim.h"
#include "xmalloc.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tide-sim SCENARIO.json [--seed N] [-o table|json] [--csv FILE] [--set "
               "PATH=VALUE]... [-v|-q]\n"
               "  --seed N          override the scenario's seed\n"
               "  -o table|json     summary format on stdout (default table)\n"
               "  --csv FILE        time series, one row per timing.sample_s\n"
               "  --set PATH=VALUE  override a scenario key, e.g. --set gate.enabled=false --set "
               "policy.reserve=64\n"
               "                    --set workload.classes[1].arrivals_per_day=40 (VALUE is JSON, "
               "else a string)\n"
               "  -v                progress on stderr, a line per simulated day (default when "
               "stderr is a terminal)\n"
               "  -q                no progress and no run time on stderr\n"
               "The scenario format and the models: docs/simulator.md.\n"
               "       tide-sim steal [FLAGS]   one job's steps with and without work stealing\n"
               "                                (tide-sim steal --help; docs/work-stealing.md)\n"
               "       tide-sim burst [FLAGS]   one job under pulses with burst off, detached, resize\n"
               "                                (tide-sim burst --help; docs/elastic.md)\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"seed", required_argument, NULL, 's'}, {"csv", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 'S'},  {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    const char **sets = NULL;
    size_t n_sets = 0;
    const char *out = "table", *csv_path = NULL;
    tide_sim_options_t opt = {0};
    tide_scenario_t sc;
    tide_error_t err;
    struct timespec t0, t1;
    int verbose = isatty(STDERR_FILENO), quiet = 0, c, rc = 1;
    tide_sim_t *s = NULL;
    FILE *csv = NULL;

    if (argc > 1 && strcmp(argv[1], "steal") == 0)
        return tide_steal_sim_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "burst") == 0)
        return tide_burst_sim_main(argc - 1, argv + 1);
    while ((c = getopt_long(argc, argv, "o:vqh", longopts, NULL)) != -1) {
        switch (c) {
        case 's': {
            char *end;
            errno = 0;
            opt.seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end) {
                fprintf(stderr, "tide-sim: --seed %s: expected a non-negative integer\n", optarg);
                return 2;
            }
            opt.seed_set = true;
            break;
        }
        case 'c':
            csv_path = optarg;
            break;
        case 'S':
            sets = tide_xrealloc(sets, (n_sets + 1) * sizeof(*sets));
            sets[n_sets++] = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'v':
            verbose = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            usage(stdout);
            free(sets);
            return 0;
        default:
            usage(stderr);
            free(sets);
            return 2;
        }
    }
    if (optind != argc - 1 || (strcmp(out, "table") != 0 && strcmp(out, "json") != 0)) {
        usage(stderr);
        free(sets);
        return 2;
    }
    if (tide_scenario_load(argv[optind], sets, n_sets, &sc, &err) < 0) {
        fprintf(stderr, "tide-sim: %s\n", err.text);
        free(sets);
        return 2;
    }
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "tide-sim: %s: %s\n", csv_path, strerror(errno));
        goto done;
    }
    opt.csv = csv;
    opt.progress = verbose && !quiet ? stderr : NULL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s = tide_sim_new(&sc, &opt);
    if (tide_sim_run(s) < 0) {
        fprintf(stderr, "tide-sim: %s: write error\n", csv_path);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (strcmp(out, "json") == 0)
        tide_sim_print_json(tide_sim_result(s), &sc, stdout);
    else
        tide_sim_print_table(tide_sim_result(s), &sc, stdout);
    if (!quiet)
        fprintf(stderr,
                "tide-sim: %.1f simulated days in %.2f s of run time (%" PRIu64 " events, %" PRIu64
                " core calls)\n",
                tide_sim_result(s)->days,
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                tide_sim_result(s)->events, tide_sim_result(s)->core_calls);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    if (csv && fclose(csv) != 0 && rc == 0) {
        fprintf(stderr, "tide-sim: %s: write error\n", csv_path);
        rc = 1;
    }
    tide_sim_free(s);
    tide_scenario_free(&sc);
    free(sets);
    return rc;
}
