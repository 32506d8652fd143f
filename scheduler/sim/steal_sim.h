/* tide-sim steal: one job's steps simulated at the scale of tasks, with and without work stealing, the
 * real core deciding every steal (steal_sim.c, docs/work-stealing.md). */
#ifndef TIDE_SIM_STEAL_SIM_H
#define TIDE_SIM_STEAL_SIM_H

/* The `tide-sim steal ...` command line (argv[0] is "steal"). Prints the comparison on stdout.
 * Returns the exit status (0, or 2 for bad flags). */
int tide_steal_sim_main(int argc, char **argv);

#endif
