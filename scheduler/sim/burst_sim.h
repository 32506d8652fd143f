/* tide-sim burst: one job under the article's pulse load on a fixed time step, with phase-aware
 * burst off, lending by detached tasks and lending by generation resize, the real burst controller
 * deciding (burst_sim.c, docs/elastic.md "Burst: the policy, and when it pays"). */
#ifndef TIDE_SIM_BURST_SIM_H
#define TIDE_SIM_BURST_SIM_H

/* The `tide-sim burst ...` command line (argv[0] is "burst"). Prints the comparison (or, with
 * --sweep, one table over pulse lengths x costs) on stdout. Returns the exit status (0, or 2 for
 * bad flags). */
int tide_burst_sim_main(int argc, char **argv);

#endif
