/* Scheduler core policy rules (docs/policies.md), one scenario per rule: queue order and aging,
 * dedicated pools, gang placement (locality, topology, memory, device, shapes), per-shape blocking,
 * preemption, the checkpoint gate, the headroom reserve, target bands and lost-rank requeues. Each
 * test drives the pure core on a fake clock, asserts the rule so that breaking it fails the test,
 * and checks the core's invariants after every step. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

#define GIB (1ULL << 30)

static const char *reason(h_t *h, const tide_job_t *job)
{
    static char buf[512];
    return tide_core_job_reason(h->core, job, buf, sizeof(buf));
}

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

/* name is one of the entries of the "(known: a, b, c)" list in text. */
static void assert_listed(const char *text, const char *name)
{
    const char *p = strstr(text, "(known: ");
    size_t n = strlen(name);

    assert_non_null(p);
    for (p += 8; *p && *p != ')'; p += strcspn(p, ",)"), p += *p == ',' ? 2 : 0) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == ')'))
            return;
    }
    fail_msg("pool %s is not listed in \"%s\"", name, text);
}

/* Every rank of job runs on one node, named node (NULL: any one node). */
static void assert_one_node(const tide_job_t *job, const char *node)
{
    assert_true(job->n_ranks > 0);
    for (int32_t r = 0; r < job->n_ranks; r++) {
        assert_non_null(job->ranks[r].worker);
        assert_string_equal(job->ranks[r].worker->node_name,
                            node ? node : job->ranks[0].worker->node_name);
        assert_int_equal(job->ranks[r].local_rank, r);
        assert_int_equal(job->ranks[r].local_world_size, job->n_ranks);
    }
}

static bool runs_on(const tide_job_t *job, const char *node)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].worker && strcmp(job->ranks[r].worker->node_name, node) == 0)
            return true;
    return false;
}

/* Whether any action of type targets a worker of job's current ranks. */
static bool acted_on(h_t *h, tide_action_type_t type, const tide_job_t *job)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].worker && h_find(h, type, job->ranks[r].worker->id, -1))
            return true;
    return false;
}

static tide_core_config_t config(void)
{
    tide_core_config_t cfg;
    h_config(&cfg);
    return cfg;
}

static tide_job_t *run(h_t *h, int n, tide_prio_t prio)
{
    tide_job_t *job = h_submit(h, n, n, prio);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(h);
    assert_int_equal(job->ranks_running, n);
    h_check_invariants(h);
    return job;
}

/* --- queues --- */

static void test_queue_order_is_class_then_fifo(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *hold, *l1, *n1, *l2, *h1, *n2, *c1, *order[6];
    (void)state;
    cfg.preemption = false;
    cfg.aging_ms = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 1, NULL, 0, NULL);
    hold = run(&h, 1, TIDE_PRIO_LOW);
    l1 = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    n1 = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    l2 = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    h1 = h_submit(&h, 1, 1, TIDE_PRIO_HIGH);
    n2 = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    c1 = h_submit(&h, 1, 1, TIDE_PRIO_CRITICAL);
    order[0] = c1, order[1] = h1, order[2] = n1, order[3] = n2, order[4] = l1, order[5] = l2;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(order[i]->state, TIDE_JOB_PENDING);
        assert_int_equal(tide_core_job_queue_position(h.core, order[i]), i + 1);
    }
    assert_int_equal(tide_core_job_queue_position(h.core, hold), 0);
    h_check_invariants(&h);
    /* Free the GPU six times: they run in exactly that order. */
    h_exit_all(&h, hold);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(order[i]->state, TIDE_JOB_RUNNING);
        for (int k = i + 1; k < 6; k++) {
            assert_int_equal(order[k]->state, TIDE_JOB_PENDING);
            assert_int_equal(tide_core_job_queue_position(h.core, order[k]), k - i);
        }
        h_start_all(&h);
        h_check_invariants(&h);
        h_exit_all(&h, order[i]);
    }
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_aging_raises_low_to_high_never_critical(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *low, *normal, *normal2, *crit;
    int64_t t0;
    (void)state;
    cfg.preemption = false;
    cfg.aging_ms = 60000;
    h_init(&h, &cfg);
    /* No worker yet: the only deadline is the LOW job's aging. */
    t0 = h.mono;
    low = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    assert_int_equal(tide_core_next_deadline(h.core), t0 + 60000);
    h_clear(&h);
    h_advance(&h, 59999);
    assert_int_equal(low->eff_priority, TIDE_PRIO_LOW);
    assert_int_equal(h_count_event(&h, "job.aged"), 0);
    h_advance(&h, 1);
    assert_int_equal(low->eff_priority, TIDE_PRIO_NORMAL);
    assert_int_equal(h_count_event(&h, "job.aged"), 1);
    assert_contains(h_event_text(&h, "job.aged", 0), "now queued as NORMAL");
    assert_int_equal(tide_core_next_deadline(h.core), t0 + 120000);
    h_clear(&h);
    h_advance(&h, 60000);
    assert_int_equal(low->eff_priority, TIDE_PRIO_HIGH);
    assert_contains(h_event_text(&h, "job.aged", 0), "now queued as HIGH");
    assert_int_equal(tide_core_next_deadline(h.core), INT64_MAX); /* HIGH is as far as aging goes */
    h_clear(&h);
    h_advance(&h, 10 * 60000);
    assert_int_equal(low->eff_priority, TIDE_PRIO_HIGH);
    assert_int_equal(h_count_event(&h, "job.aged"), 0);
    assert_int_equal(low->spec.priority, TIDE_PRIO_LOW);
    h_check_invariants(&h);
    h_fini(&h);

    /* On a busy cluster: an aged LOW job goes to the tail of NORMAL (behind NORMAL work already
     * waiting), then ahead of it once it is HIGH, but never ahead of CRITICAL work. */
    h_init(&h, &cfg);
    h_node(&h, "n1", 1, NULL, 0, NULL);
    (void)run(&h, 1, TIDE_PRIO_HIGH);
    low = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    h_advance_alive(&h, 30000, NULL);
    normal = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(tide_core_job_queue_position(h.core, normal), 1);
    assert_int_equal(tide_core_job_queue_position(h.core, low), 2);
    h_advance_alive(&h, 30000, NULL); /* t + 60 s */
    assert_int_equal(low->eff_priority, TIDE_PRIO_NORMAL);
    assert_int_equal(tide_core_job_queue_position(h.core, normal), 1);
    assert_int_equal(tide_core_job_queue_position(h.core, low), 2);
    h_advance_alive(&h, 30000, NULL); /* t + 90 s: normal waited 60 s in NORMAL */
    assert_int_equal(normal->eff_priority, TIDE_PRIO_HIGH);
    assert_int_equal(low->eff_priority, TIDE_PRIO_NORMAL);
    h_advance_alive(&h, 30000, NULL); /* t + 120 s */
    assert_int_equal(low->eff_priority, TIDE_PRIO_HIGH);
    normal2 = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    crit = h_submit(&h, 1, 1, TIDE_PRIO_CRITICAL);
    assert_int_equal(tide_core_job_queue_position(h.core, crit), 1);
    assert_int_equal(tide_core_job_queue_position(h.core, normal), 2);
    assert_int_equal(tide_core_job_queue_position(h.core, low), 3);
    assert_int_equal(tide_core_job_queue_position(h.core, normal2),
                     4); /* LOW work now ahead of it */
    h_advance_alive(&h, 5 * 60000, NULL);
    assert_int_equal(low->eff_priority, TIDE_PRIO_HIGH);
    assert_int_equal(normal2->eff_priority, TIDE_PRIO_HIGH);
    assert_int_equal(crit->eff_priority, TIDE_PRIO_CRITICAL);
    assert_int_equal(tide_core_job_queue_position(h.core, crit), 1);
    assert_int_equal(tide_core_job_queue_position(h.core, low), 3);
    assert_int_equal(tide_core_job_queue_position(h.core, normal2), 4);
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- pools --- */

static void test_dedicated_pool_takes_only_its_class(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *n1, *n2, *c1, *c2;
    tide_job_spec_t spec;
    tide_error_t err = {0};
    tide_job_t *out = NULL;
    char buf[128];
    (void)state;
    cfg.preemption = false;
    h_init(&h, &cfg);
    assert_int_equal(tide_core_pool_add(h.core, "crit", TIDE_PRIO_CRITICAL, &err), 0);
    h_node(&h, "c1", 4, NULL, 0, "pool=crit");
    h_node(&h, "d1", 4, NULL, 0, NULL);

    n1 = run(&h, 4, TIDE_PRIO_NORMAL);
    assert_one_node(n1, "d1");
    n2 = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(n2->state, TIDE_JOB_PENDING); /* c1 is free, but CRITICAL's */
    assert_int_equal(h.core->n_free, 4);
    h_check_invariants(&h);

    /* A CRITICAL job without a pool may use the pool dedicated to its class. */
    c1 = run(&h, 2, TIDE_PRIO_CRITICAL);
    assert_one_node(c1, "c1");
    spec = h_spec(2, 2, TIDE_PRIO_CRITICAL);
    spec.pool = "crit";
    c2 = h_submit_spec(&h, &spec);
    assert_int_equal(c2->state, TIDE_JOB_RUNNING);
    assert_string_equal(h_nodes_of(c2, buf, sizeof(buf)), "c1,c1");
    assert_int_equal(n2->state, TIDE_JOB_PENDING);

    /* A NORMAL job naming the dedicated pool is refused, with the reason. */
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.pool = "crit";
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_contains(err.text, "dedicated to CRITICAL");
    assert_contains(err.text, "NORMAL");
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_unknown_pool_names_the_known_ones(void **state)
{
    h_t h;
    tide_job_spec_t spec;
    tide_error_t err = {0};
    tide_job_t *out = NULL;
    int counts[6];
    (void)state;
    h_init(&h, NULL);
    assert_int_equal(tide_core_pool_add(h.core, "train-critical", TIDE_PRIO_CRITICAL, &err), 0);
    assert_int_equal(tide_core_pool_add(h.core, "gold", -1, &err), 0); /* named, no worker yet */
    h_node(&h, "a1", 2, NULL, 0, "pool=train-critical");
    h_node(&h, "b1", 2, NULL, 0, "pool=train");
    h_node(&h, "d1", 2, NULL, 0, NULL);

    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.pool = "nope";
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_contains(err.text, "\"nope\" is unknown");
    assert_listed(err.text, "train-critical");
    assert_listed(err.text, "train");
    assert_listed(err.text, "default");
    assert_listed(err.text, "gold");
    tide_core_job_counts(h.core, counts);
    assert_int_equal(counts[TIDE_JOB_PENDING] + counts[TIDE_JOB_RUNNING], 0);

    /* Bad pool names and classes are refused by pool_add. */
    assert_int_equal(tide_core_pool_add(h.core, "", -1, &err), -EINVAL);
    assert_int_equal(tide_core_pool_add(h.core, "a b", -1, &err), -EINVAL);
    assert_int_equal(tide_core_pool_add(h.core, "x", 7, &err), -EINVAL);

    /* A named pool without workers is accepted; the job waits with a reason. */
    spec.pool = "gold";
    out = h_submit_spec(&h, &spec);
    assert_int_equal(out->state, TIDE_JOB_PENDING);
    assert_contains(reason(&h, out), "in pool gold; no usable worker matches");
    /* A pool only a worker carries is known too. */
    spec.pool = "train";
    out = h_submit_spec(&h, &spec);
    assert_int_equal(out->state, TIDE_JOB_RUNNING);
    assert_true(runs_on(out, "b1"));
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- placement --- */

static void test_small_gang_lands_on_the_best_fitting_node(void **state)
{
    h_t h;
    tide_job_t *j4, *j5, *j3, *j8;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n8", 8, NULL, 0, NULL);
    h_node(&h, "n3", 3, NULL, 0, NULL);
    h_node(&h, "n5", 5, NULL, 0, NULL);
    h_node(&h, "n4", 4, NULL, 0, NULL);
    j4 = run(&h, 4, TIDE_PRIO_NORMAL);
    assert_one_node(j4, "n4");
    j5 = run(&h, 5, TIDE_PRIO_NORMAL);
    assert_one_node(j5, "n5");
    j3 = run(&h, 3, TIDE_PRIO_NORMAL);
    assert_one_node(j3, "n3");
    j8 = run(&h, 8, TIDE_PRIO_NORMAL);
    assert_one_node(j8, "n8");
    /* GPUs ascend with the local rank */
    for (int32_t r = 0; r < 8; r++)
        assert_int_equal(j8->ranks[r].worker->gpu_index, r);
    assert_int_equal(h.core->n_free, 0);
    h_fini(&h);
}

static void test_gang_lands_in_one_rack_when_no_node_fits(void **state)
{
    h_t h;
    tide_job_t *j1, *j2, *j3;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "b1", 6, NULL, 0, "rack=r2,switch=s1");
    h_node(&h, "a1", 4, NULL, 0, "rack=r1,switch=s1");
    h_node(&h, "b2", 6, NULL, 0, "rack=r2,switch=s1");
    h_node(&h, "a2", 4, NULL, 0, "rack=r1,switch=s1");
    /* No node has 8: the smallest rack with 8 free is r1. */
    j1 = run(&h, 8, TIDE_PRIO_NORMAL);
    for (int32_t r = 0; r < 8; r++)
        assert_string_equal(j1->ranks[r].worker->node_name, r < 4 ? j1->ranks[0].worker->node_name
                                                                  : j1->ranks[4].worker->node_name);
    assert_true(runs_on(j1, "a1") && runs_on(j1, "a2"));
    assert_int_equal(j1->ranks[3].local_world_size, 4);
    assert_int_equal(j1->ranks[4].group_rank, 1);
    /* The next 8 go to r2: one node whole (6), then 2 from the other. */
    j2 = run(&h, 8, TIDE_PRIO_NORMAL);
    assert_true(runs_on(j2, "b1") && runs_on(j2, "b2"));
    assert_int_equal(j2->ranks[0].local_world_size, 6);
    assert_int_equal(j2->ranks[7].local_world_size, 2);
    /* 4 left on one node of r2: a 4-GPU job lands there. */
    j3 = run(&h, 4, TIDE_PRIO_NORMAL);
    assert_one_node(j3, NULL);
    assert_true(runs_on(j3, "b1") || runs_on(j3, "b2"));
    h_fini(&h);
}

static void test_topology_rack_refuses_to_spread(void **state)
{
    h_t h;
    tide_job_spec_t spec;
    tide_job_t *r5a, *r5b, *big, *any;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "a1", 4, NULL, 0, "rack=r1");
    h_node(&h, "b1", 4, NULL, 0, "rack=r2");
    /* Never: no rack has 8 usable GPUs. */
    spec = h_spec(8, 8, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_RACK;
    big = h_submit_spec(&h, &spec);
    assert_int_equal(big->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, big),
                        "waiting: needs 8 GPUs in one rack; the largest usable fit is 4");
    /* The same gang without the constraint spreads over both racks. */
    any = run(&h, 8, TIDE_PRIO_LOW);
    assert_true(runs_on(any, "a1") && runs_on(any, "b1"));
    assert_int_equal(big->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);

    /* Two racks of 8 with 3 free in each: 6 are free, but not in one rack. */
    h_init(&h, NULL);
    h_node(&h, "a1", 4, NULL, 0, "rack=r1");
    h_node(&h, "a2", 4, NULL, 0, "rack=r1");
    h_node(&h, "b1", 4, NULL, 0, "rack=r2");
    h_node(&h, "b2", 4, NULL, 0, "rack=r2");
    spec = h_spec(5, 5, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_RACK;
    r5a = h_submit_spec(&h, &spec);
    r5b = h_submit_spec(&h, &spec);
    assert_int_equal(r5a->state, TIDE_JOB_RUNNING);
    assert_int_equal(r5b->state, TIDE_JOB_RUNNING);
    assert_true(runs_on(r5a, "a1") != runs_on(r5a, "b1")); /* one rack each */
    assert_true(runs_on(r5a, "a1") == runs_on(r5a, "a2"));
    assert_true(runs_on(r5b, "b1") == runs_on(r5b, "b2"));
    spec = h_spec(6, 6, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_RACK;
    big = h_submit_spec(&h, &spec);
    assert_int_equal(big->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, big), "waiting: needs 6 GPUs in one rack; largest fit is 3");
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_topology_node_and_switch(void **state)
{
    h_t h;
    tide_job_spec_t spec;
    tide_job_t *node4, *node2, *any, *sw12, *sw8;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    h_node(&h, "n2", 2, NULL, 0, NULL);
    spec = h_spec(4, 4, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_NODE;
    node4 = h_submit_spec(&h, &spec);
    assert_int_equal(node4->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, node4),
                        "waiting: needs 4 GPUs on one node; the largest usable fit is 2");
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_NODE;
    node2 = h_submit_spec(&h, &spec);
    assert_int_equal(node2->state, TIDE_JOB_RUNNING);
    assert_one_node(node2, NULL);
    h_start_all(&h);
    h_exit_all(&h, node2);
    any = run(&h, 4, TIDE_PRIO_NORMAL);
    assert_true(runs_on(any, "n1") && runs_on(any, "n2"));
    h_check_invariants(&h);
    h_fini(&h);

    /* Switch: s1 holds two racks of 4, s2 one rack of 8. */
    h_init(&h, NULL);
    h_node(&h, "a1", 4, NULL, 0, "rack=r1,switch=s1");
    h_node(&h, "a2", 4, NULL, 0, "rack=r2,switch=s1");
    h_node(&h, "b1", 8, NULL, 0, "rack=r3,switch=s2");
    spec = h_spec(12, 12, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_SWITCH;
    sw12 = h_submit_spec(&h, &spec);
    assert_int_equal(sw12->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, sw12),
                        "waiting: needs 12 GPUs under one switch; the largest usable fit is 8");
    spec = h_spec(7, 7, TIDE_PRIO_NORMAL);
    spec.topology = TIDE_TOPO_SWITCH;
    sw8 = h_submit_spec(&h, &spec);
    assert_int_equal(sw8->state, TIDE_JOB_RUNNING);
    assert_one_node(sw8, "b1"); /* the node fits: best of all */
    spec.topology = TIDE_TOPO_SWITCH;
    sw8 = h_submit_spec(&h, &spec);
    assert_int_equal(sw8->state, TIDE_JOB_RUNNING);
    assert_true(runs_on(sw8, "a1") && runs_on(sw8, "a2") && !runs_on(sw8, "b1"));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_memory_fit(void **state)
{
    h_t h;
    tide_job_spec_t spec;
    tide_job_t *big, *wait64, *huge, *small;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "m40", 4, NULL, 40 * GIB, NULL);
    h_node(&h, "m80", 4, NULL, 80 * GIB, NULL);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.memory_per_rank = 80 * GIB;
    big = h_submit_spec(&h, &spec);
    assert_int_equal(big->state, TIDE_JOB_RUNNING);
    assert_one_node(big, "m80");
    /* 4 free GPUs with 40 GiB and 2 with 80: a job needing 64 GiB a rank waits. */
    spec = h_spec(4, 4, TIDE_PRIO_NORMAL);
    spec.memory_per_rank = 64 * GIB;
    wait64 = h_submit_spec(&h, &spec);
    assert_int_equal(wait64->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, wait64),
                        "waiting: needs 4 GPUs with >= 64 GiB; largest fit is 2");
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.memory_per_rank = 100 * GIB;
    huge = h_submit_spec(&h, &spec);
    assert_int_equal(huge->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, huge),
                        "waiting: needs 1 GPU with >= 100 GiB; no usable worker matches");
    /* 40 GiB is enough on either: it is not blocked by the 64 GiB job, which cannot use m40. */
    spec = h_spec(4, 4, TIDE_PRIO_LOW);
    spec.memory_per_rank = 40 * GIB;
    small = h_submit_spec(&h, &spec);
    assert_int_equal(small->state, TIDE_JOB_RUNNING);
    assert_one_node(small, "m40");
    for (tide_job_t *j = tide_core_job_next(h.core, NULL); j; j = tide_core_job_next(h.core, j))
        for (int32_t r = 0; r < j->n_ranks; r++)
            assert_true(j->ranks[r].worker->memory_bytes >= j->spec.memory_per_rank);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_device_match_and_shapes_never_mix(void **state)
{
    h_t h;
    tide_job_spec_t spec;
    tide_job_t *h100, *a100, *b200, *mixed, *two;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "h", 2, "NVIDIA H100 80GB HBM3", 80 * GIB, NULL);
    h_node(&h, "a", 2, "NVIDIA A100-SXM4-40GB", 40 * GIB, NULL);
    /* 4 GPUs, but of two shapes: a gang never mixes them. */
    mixed = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(mixed->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, mixed), "waiting: needs 4 GPUs; the largest usable fit is 2");
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.device = "a100"; /* case-insensitive substring */
    a100 = h_submit_spec(&h, &spec);
    assert_int_equal(a100->state, TIDE_JOB_RUNNING);
    assert_one_node(a100, "a");
    spec.device = "H100 80GB";
    h100 = h_submit_spec(&h, &spec);
    assert_int_equal(h100->state, TIDE_JOB_RUNNING);
    assert_one_node(h100, "h");
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.device = "b200";
    b200 = h_submit_spec(&h, &spec);
    assert_int_equal(b200->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, b200),
                        "waiting: needs 1 GPU of device \"b200\"; no usable worker matches");
    h_start_all(&h);
    h_exit_all(&h, a100);
    h_exit_all(&h, h100);
    /* An elastic gang takes up to max, still from one shape. */
    two = h_submit(&h, 1, 4, TIDE_PRIO_LOW);
    assert_int_equal(two->state, TIDE_JOB_RUNNING);
    assert_int_equal(two->n_ranks, 2);
    assert_one_node(two, NULL);
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- per-shape blocking --- */

static void test_blocking_is_per_shape(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_job_t *j1, *j2, *j3, *k, *j4;
    (void)state;
    cfg.preemption = false;
    h_init(&h, &cfg);
    h_node(&h, "pa", 4, NULL, 0, "pool=a");
    h_node(&h, "pb", 4, NULL, 0, "pool=b");
    spec = h_spec(4, 4, TIDE_PRIO_NORMAL);
    spec.pool = "a";
    (void)h_submit_spec(&h, &spec);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.pool = "a";
    j1 = h_submit_spec(&h, &spec);
    assert_int_equal(j1->state, TIDE_JOB_PENDING);
    /* A later job of the same class in pool b is not blocked by j1. */
    spec.pool = "b";
    j2 = h_submit_spec(&h, &spec);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_one_node(j2, "pb");
    /* Nor is a LOW job open to both pools: it takes pool b. */
    j3 = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    assert_int_equal(j3->state, TIDE_JOB_RUNNING);
    assert_one_node(j3, "pb");
    /* A job open to both that waits blocks both: the last GPU of pool b is held for it. */
    k = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(k->state, TIDE_JOB_PENDING);
    spec = h_spec(1, 1, TIDE_PRIO_LOW);
    spec.pool = "b";
    j4 = h_submit_spec(&h, &spec);
    assert_int_equal(j4->state, TIDE_JOB_PENDING);
    {
        char want[96];
        snprintf(want, sizeof(want), "queued behind job %s (NORMAL), which waits for the same GPUs",
                 k->id);
        assert_string_equal(reason(&h, j4), want);
    }
    assert_int_equal(h.core->n_free, 1);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_a_job_that_could_never_fit_blocks_nobody(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_job_t *never, *small, *wait6, *k;
    (void)state;
    cfg.preemption = false;
    h_init(&h, &cfg);
    h_node(&h, "pa", 4, NULL, 0, "pool=a");
    h_node(&h, "pb", 8, NULL, 0, "pool=b");
    /* 8 GPUs in pool a: never (a has 4); it blocks no one. */
    spec = h_spec(8, 8, TIDE_PRIO_CRITICAL);
    spec.pool = "a";
    never = h_submit_spec(&h, &spec);
    assert_int_equal(never->state, TIDE_JOB_PENDING);
    assert_contains(reason(&h, never), "the largest usable fit is 4");
    spec = h_spec(1, 1, TIDE_PRIO_LOW);
    spec.pool = "a";
    small = h_submit_spec(&h, &spec);
    assert_int_equal(small->state, TIDE_JOB_RUNNING);
    h_start_all(&h);
    h_exit_all(&h, small);

    /* Pool b full; a 6-GPU job can only ever run in b: it waits there, and leaves pool a (which it
     * could never use) to the jobs behind it. */
    (void)run(&h, 8, TIDE_PRIO_NORMAL);
    wait6 = h_submit(&h, 6, 6, TIDE_PRIO_NORMAL);
    assert_int_equal(wait6->state, TIDE_JOB_PENDING);
    k = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(k->state, TIDE_JOB_RUNNING);
    assert_one_node(k, "pa");
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- preemption --- */

static void test_preemption_takes_the_lowest_class_and_only_what_it_needs(void **state)
{
    h_t h;
    tide_job_t *low, *normal, *low2, *high;
    char want[128];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    low = run(&h, 2, TIDE_PRIO_LOW);
    normal = run(&h, 2, TIDE_PRIO_NORMAL);
    low2 = h_submit(&h, 2, 2, TIDE_PRIO_LOW); /* queued before the victim is requeued */
    assert_int_equal(low2->state, TIDE_JOB_PENDING);
    h_clear(&h);

    high = h_submit(&h, 2, 2, TIDE_PRIO_HIGH);
    /* low (no SDK) is stopped at once; normal is not touched. */
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    assert_int_equal(normal->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 2);
    assert_false(acted_on(&h, TIDE_ACT_STOP, normal));
    assert_false(acted_on(&h, TIDE_ACT_CHECKPOINT_NOW, normal));
    assert_int_equal(h_count_event(&h, "job.preempting"), 1);
    assert_contains(h_event_text(&h, "job.preempting", 0), "stopping now");
    assert_int_equal(h_count_event(&h, "job.preempted"), 1);
    snprintf(want, sizeof(want), "preempted by job %s (HIGH)", high->id);
    assert_contains(low->message, want);
    assert_contains(low->message, "no checkpoint: restarts from the beginning");
    assert_int_equal(low->preemptions, 1);
    /* requeued at the front of its class */
    assert_true(tide_core_job_queue_position(h.core, low) <
                tide_core_job_queue_position(h.core, low2));
    /* the preemptor waits for the victim's ranks to stop; never two generations of low at once */
    assert_int_equal(high->state, TIDE_JOB_PENDING);
    assert_contains(reason(&h, low), "waiting for 2 ranks of generation 1 to stop");
    h_check_invariants(&h);

    assert_int_equal(h_stop_all(&h), 2);
    assert_int_equal(high->state, TIDE_JOB_RUNNING);
    assert_int_equal(normal->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    h_start_all(&h);
    h_check_invariants(&h);

    /* Once the preemptor ends, the victim resumes as generation 2, ahead of low2. */
    h_exit_all(&h, high);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    assert_int_equal(low->generation, 2);
    assert_int_equal(low2->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_preemption_prefers_the_victim_with_a_recent_checkpoint(void **state)
{
    h_t h;
    tide_job_t *older, *newer, *job;
    const tide_action_t *a;
    char want[128];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    h_node(&h, "n2", 2, NULL, 0, NULL);
    older = run(&h, 2, TIDE_PRIO_LOW);
    newer = run(&h, 2, TIDE_PRIO_LOW);
    h_sdk(&h, older, 0.5);
    h_sdk(&h, newer, 0.5);
    h_advance_alive(&h, 10000, NULL);
    h_ckpt(&h, older,
           100); /* older lost less work: it yields, though newest-first would pick newer */
    assert_int_equal(older->last_ckpt.step, 100);
    h_advance_alive(&h, 5000, NULL);
    h_clear(&h);

    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    /* SDK victim: CHECKPOINT_NOW to each rank, still running while it checkpoints */
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 2);
    assert_true(acted_on(&h, TIDE_ACT_CHECKPOINT_NOW, older));
    assert_false(acted_on(&h, TIDE_ACT_CHECKPOINT_NOW, newer));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    a = h_find(&h, TIDE_ACT_CHECKPOINT_NOW, NULL, -1);
    assert_int_equal(a->deadline_ms, h.core->now_wall + 30000);
    assert_int_equal(older->state, TIDE_JOB_RUNNING);
    assert_string_equal(older->preempted_by, job->id);
    assert_contains(h_event_text(&h, "job.preempting", 0), "checkpointing first");
    assert_contains(reason(&h, job), "1 lower-class job checkpointing to make room");
    h_check_invariants(&h);
    h_clear(&h);

    /* It checkpoints: it yields, stopping its ranks, and resumes from that step later. */
    h_advance_alive(&h, 2000, NULL);
    h_ckpt(&h, older, 130);
    assert_int_equal(older->state, TIDE_JOB_PENDING);
    assert_string_equal(older->preempted_by, job->id); /* until its ranks stopped */
    snprintf(want, sizeof(want),
             "preempted by job %s (NORMAL); checkpointed; resumes from checkpoint step 130",
             job->id);
    assert_contains(older->message, want);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 2);
    /* Nobody else is asked to make room meanwhile. */
    assert_false(acted_on(&h, TIDE_ACT_CHECKPOINT_NOW, newer));
    assert_int_equal(h_count_event(&h, "job.preempting"), 0);
    assert_int_equal(h_stop_all(&h), 2);
    assert_null(older->preempted_by);
    assert_int_equal(job->preempt_victims, 0);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(newer->state, TIDE_JOB_RUNNING);
    assert_false(acted_on(&h, TIDE_ACT_CHECKPOINT_NOW, newer));
    assert_null(newer->preempted_by);
    h_start_all(&h);
    h_check_invariants(&h);
    h_exit_all(&h, job);
    assert_int_equal(older->state, TIDE_JOB_RUNNING);
    assert_int_equal(older->generation, 2);
    assert_int_equal(older->last_ckpt.step, 130);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_preemption_grace_ends_the_wait(void **state)
{
    h_t h;
    tide_job_t *low, *crit;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    low = run(&h, 2, TIDE_PRIO_LOW);
    h_sdk(&h, low, 0.4);
    crit = h_submit(&h, 2, 2, TIDE_PRIO_CRITICAL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 2);
    h_clear(&h);
    h_advance_alive(&h, 29500, NULL);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    h_advance_alive(&h, 500, NULL);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    assert_contains(low->message, "its checkpoint grace ended");
    assert_non_null(h_find_event(&h, "job.checkpoint_missed"));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 2);
    h_stop_all(&h);
    assert_int_equal(crit->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_no_preemption_when_not_allowed_or_not_enough(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *high, *high2, *low, *normal, *crit;
    (void)state;
    /* HIGH does not preempt HIGH. */
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    high = run(&h, 2, TIDE_PRIO_HIGH);
    h_clear(&h);
    high2 = h_submit(&h, 2, 2, TIDE_PRIO_HIGH);
    assert_int_equal(high2->state, TIDE_JOB_PENDING);
    assert_int_equal(high->state, TIDE_JOB_RUNNING);
    assert_null(h_find_event(&h, "job.preempting"));
    h_check_invariants(&h);
    h_fini(&h);

    /* The lower classes together would not free enough: nobody is disturbed. */
    h_init(&h, NULL);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    low = run(&h, 2, TIDE_PRIO_LOW);
    high = run(&h, 2, TIDE_PRIO_HIGH);
    h_clear(&h);
    normal = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(normal->state, TIDE_JOB_PENDING);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    assert_null(h_find_event(&h, "job.preempting"));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP) + h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    h_advance_alive(&h, 5000, NULL);
    assert_null(h_find_event(&h, "job.preempting"));
    h_check_invariants(&h);
    h_fini(&h);

    /* Preemption off. */
    cfg.preemption = false;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    low = run(&h, 2, TIDE_PRIO_LOW);
    h_clear(&h);
    crit = h_submit(&h, 2, 2, TIDE_PRIO_CRITICAL);
    assert_int_equal(crit->state, TIDE_JOB_PENDING);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    assert_null(h_find_event(&h, "job.preempting"));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Victims are chosen inside one domain of the preemptor's topology: X runs l1 (LOW, fresh
 * checkpoint: the cheapest victim) and n1 (NORMAL); Y runs l2 and l3 (LOW). */
static void test_preemption_respects_topology(void **state)
{
    for (int rack = 0; rack < 2; rack++) {
        h_t h;
        tide_job_t *l1, *n1, *l2, *l3, *high;
        tide_job_spec_t spec;
        const char *xn, *yn; /* owned by the workers */
        (void)state;
        h_init(&h, NULL);
        h_node(&h, "x", 4, NULL, 0, "rack=r1");
        h_node(&h, "y", 4, NULL, 0, "rack=r2");
        l1 = run(&h, 2, TIDE_PRIO_LOW);
        n1 = run(&h, 2, TIDE_PRIO_NORMAL);
        l2 = run(&h, 2, TIDE_PRIO_LOW);
        l3 = run(&h, 2, TIDE_PRIO_LOW);
        xn = l1->ranks[0].worker->node_name;
        yn = l2->ranks[0].worker->node_name;
        assert_true(runs_on(n1, xn) && runs_on(l3, yn) && strcmp(xn, yn) != 0);
        h_advance_alive(&h, 10000, NULL);
        h_ckpt(&h, l1, 7);
        h_clear(&h);
        spec = h_spec(4, 4, TIDE_PRIO_HIGH);
        spec.topology = rack ? TIDE_TOPO_RACK : TIDE_TOPO_ANY;
        high = h_submit_spec(&h, &spec);
        assert_int_equal(n1->state, TIDE_JOB_RUNNING);
        if (rack) {
            /* l1 alone frees 2 in rack r1 (n1 cannot go): l2 and l3 free rack r2 */
            assert_int_equal(l1->state, TIDE_JOB_RUNNING);
            assert_int_equal(l2->state, TIDE_JOB_PENDING);
            assert_int_equal(l3->state, TIDE_JOB_PENDING);
        } else {
            /* anywhere: the two cheapest victims (l1, then l3, the newer of two equals) */
            assert_int_equal(l1->state, TIDE_JOB_PENDING);
            assert_int_equal(l2->state, TIDE_JOB_RUNNING);
            assert_int_equal(l3->state, TIDE_JOB_PENDING);
        }
        assert_int_equal(h_count_event(&h, "job.preempted"), 2);
        h_stop_all(&h);
        assert_int_equal(high->state, TIDE_JOB_RUNNING);
        if (rack)
            assert_one_node(high, yn);
        else
            assert_true(runs_on(high, xn) && runs_on(high, yn));
        h_check_invariants(&h);
        h_fini(&h);
    }
}

/* --- checkpoint gate --- */

static tide_core_config_t gate_config(void)
{
    tide_core_config_t cfg = config();
    cfg.ckpt_flush = true;
    cfg.ckpt_mfu_threshold = 0.30;
    cfg.ckpt_deadline_ms = 60000;
    cfg.ckpt_gate_check_ms = 5000;
    return cfg;
}

static void flushed(h_t *h, tide_job_t *job, int r, int64_t step, bool ok, uint64_t bytes)
{
    char path[64];
    snprintf(path, sizeof(path), "/durable/%s/step%lld/rank%d", job->id, (long long)step, r);
    tide_core_ckpt_flushed(h->core, job->ranks[r].worker, job->id, job->generation, r, step, ok,
                           path, bytes, "cd", ok ? NULL : "disk full");
}

/* Steps the clock in gate periods, reporting the job's MFU before each. */
static void gate_wait(h_t *h, tide_job_t *job, double mfu, int64_t ms)
{
    for (int64_t t = 0; t < ms; t += 5000) {
        tide_core_job_telemetry(h->core, job, mfu, 0);
        h_jump(h, 5000);
    }
}

static void test_ckpt_gate_holds_while_mfu_is_high(void **state)
{
    h_t h;
    tide_core_config_t cfg = gate_config();
    tide_job_t *job;
    const tide_action_t *a;
    (void)state;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    tide_core_job_telemetry(h.core, job, 0.5, 0);
    assert_true(fabs(tide_core_job_mfu(h.core, job) - 0.5) < 1e-9);
    h_clear(&h);
    h_ckpt(&h, job, 10);
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    assert_int_equal(job->flush_step, 10);
    assert_contains(h_event_text(&h, "job.checkpoint_held", 0), "MFU is 50.0% (>= 30.0%)");
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    gate_wait(&h, job, 0.5, 20000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    h_check_invariants(&h);

    /* MFU drops: FLUSH to every running rank at the next check. */
    gate_wait(&h, job, 0.2, 5000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    for (int r = 0; r < 2; r++) {
        a = h_find(&h, TIDE_ACT_FLUSH, job->ranks[r].worker->id, r);
        assert_non_null(a);
        assert_int_equal(a->step, 10);
        assert_int_equal(a->generation, job->generation);
        assert_ptr_equal(a->conn, job->ranks[r].worker->conn);
    }
    assert_contains(h_event_text(&h, "job.checkpoint_flushing", 0), "MFU 20.0% < 30.0%");
    assert_int_equal(job->flush_state, TIDE_FLUSH_COPYING);
    h_clear(&h);

    /* Durable once every rank copied its part; a repeated report counts once. */
    flushed(&h, job, 0, 10, true, 500);
    flushed(&h, job, 0, 10, true, 500);
    flushed(&h, job, 1, 9, true, 500); /* another step: ignored */
    assert_int_equal(job->durable_ckpt.step, -1);
    assert_null(h_find_event(&h, "job.checkpoint_durable"));
    flushed(&h, job, 1, 10, true, 700);
    assert_int_equal(job->durable_ckpt.step, 10);
    assert_int_equal(job->durable_ckpt.bytes, 1200);
    assert_string_equal(job->durable_ckpt.path, "/durable/1/step10/rank0");
    assert_int_equal(job->flushes, 1);
    assert_int_equal(job->flushed_bytes, 1200);
    assert_int_equal(job->flush_state, TIDE_FLUSH_NONE);
    assert_non_null(h_find_event(&h, "job.checkpoint_durable"));
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    h_check_invariants(&h);
    h_fini(&h);

    /* Without the gate configured, nothing is held or copied. */
    cfg.ckpt_flush = false;
    h_init(&h, &cfg);
    h_node(&h, "n1", 1, NULL, 0, NULL);
    job = run(&h, 1, TIDE_PRIO_NORMAL);
    h_ckpt(&h, job, 1);
    assert_int_equal(job->flush_state, TIDE_FLUSH_NONE);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    h_fini(&h);
}

static void test_ckpt_gate_releases_at_the_deadline(void **state)
{
    h_t h;
    tide_core_config_t cfg = gate_config();
    tide_job_t *job;
    int64_t started;
    (void)state;
    h_init(&h, &cfg);
    h_jump(&h, 0); /* the wall clock follows mono from here */
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    started = job->start_ms;
    gate_wait(&h, job, 0.9, 10000);
    tide_core_job_telemetry(h.core, job, 0.9, 0);
    h_ckpt(&h, job, 10);
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    h_clear(&h);
    gate_wait(&h, job, 0.9, 45000); /* 55 s since the start */
    assert_int_equal(h.core->now_wall - started, 55000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    gate_wait(&h, job, 0.9, 5000); /* 60 s: the deadline, whatever the MFU */
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    assert_contains(h_event_text(&h, "job.checkpoint_flushing", 0), "deadline 60s");
    h_clear(&h);
    flushed(&h, job, 0, 10, true, 1);
    flushed(&h, job, 1, 10, true, 1);
    assert_int_equal(job->durable_ckpt.step, 10);

    /* The next deadline counts from that durable copy. */
    gate_wait(&h, job, 0.9, 10000);
    tide_core_job_telemetry(h.core, job, 0.9, 0);
    h_ckpt(&h, job, 20);
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    h_clear(&h);
    gate_wait(&h, job, 0.9, 45000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    gate_wait(&h, job, 0.9, 5000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    assert_int_equal(h_find(&h, TIDE_ACT_FLUSH, NULL, -1)->step, 20);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_ckpt_gate_failure_and_newer_checkpoints(void **state)
{
    h_t h;
    tide_core_config_t cfg = gate_config();
    tide_job_t *job;
    (void)state;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    tide_core_job_telemetry(h.core, job, 0.1, 0);
    h_clear(&h);
    h_ckpt(&h, job, 10);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2); /* MFU low: at once */
    h_clear(&h);

    /* A failure re-holds the copy and retries it later. */
    flushed(&h, job, 0, 10, false, 0);
    assert_contains(h_event_text(&h, "job.checkpoint_flush_failed", 0), "disk full");
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    flushed(&h, job, 1, 10, true, 5); /* the other rank's late success counts for nothing */
    assert_int_equal(job->durable_ckpt.step, -1);
    h_clear(&h);
    gate_wait(&h, job, 0.1, 25000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    gate_wait(&h, job, 0.1, 5000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    assert_int_equal(h_find(&h, TIDE_ACT_FLUSH, NULL, -1)->step, 10);
    h_clear(&h);

    /* A newer checkpoint lands while copying: it is taken next. */
    tide_core_job_telemetry(h.core, job, 0.1, 0);
    h_ckpt(&h, job, 20);
    assert_int_equal(job->last_ckpt.step, 20);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    flushed(&h, job, 0, 10, true, 5);
    flushed(&h, job, 1, 10, true, 5);
    assert_int_equal(job->durable_ckpt.step, 10);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    assert_int_equal(h_find(&h, TIDE_ACT_FLUSH, NULL, -1)->step, 20);
    h_clear(&h);
    flushed(&h, job, 0, 20, true, 5);
    flushed(&h, job, 1, 20, true, 5);
    assert_int_equal(job->durable_ckpt.step, 20);
    assert_int_equal(job->flushes, 2);
    assert_int_equal(job->flushed_bytes, 20);

    /* A held copy is replaced by a newer checkpoint: only the newest is copied. */
    tide_core_job_telemetry(h.core, job, 0.8, 0);
    h_ckpt(&h, job, 30);
    h_ckpt(&h, job, 40);
    assert_int_equal(job->flush_state, TIDE_FLUSH_HELD);
    assert_int_equal(job->flush_step, 40);
    h_clear(&h);
    gate_wait(&h, job, 0.1, 5000);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    assert_int_equal(h_find(&h, TIDE_ACT_FLUSH, NULL, -1)->step, 40);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_ckpt_gate_per_job_settings(void **state)
{
    h_t h;
    tide_core_config_t cfg = gate_config();
    tide_job_spec_t spec;
    tide_job_t *thr, *dl;
    (void)state;
    cfg.ckpt_deadline_ms = 30LL * 60 * 1000;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    /* Its own threshold (60%) over the config's (30%): MFU 50% does not hold it. */
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.ckpt_mfu_threshold = 0.6;
    thr = h_submit_spec(&h, &spec);
    /* Its own deadline (20 s) under the config's (30 min). */
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.ckpt_deadline_s = 20;
    dl = h_submit_spec(&h, &spec);
    h_start_all(&h);
    tide_core_job_telemetry(h.core, thr, 0.5, 0);
    tide_core_job_telemetry(h.core, dl, 0.5, 0);
    h_ckpt(&h, thr, 1);
    h_ckpt(&h, dl, 1);
    assert_int_equal(thr->flush_state, TIDE_FLUSH_COPYING);
    assert_contains(h_event_text(&h, "job.checkpoint_flushing", 0), "MFU 50.0% < 60.0%");
    assert_int_equal(dl->flush_state, TIDE_FLUSH_HELD);
    h_clear(&h);
    for (int i = 0; i < 3; i++) {
        tide_core_job_telemetry(h.core, dl, 0.5, 0);
        h_jump(&h, 5000);
    }
    assert_int_equal(dl->flush_state, TIDE_FLUSH_HELD);
    tide_core_job_telemetry(h.core, dl, 0.5, 0);
    h_jump(&h, 5000);
    assert_int_equal(dl->flush_state, TIDE_FLUSH_COPYING);
    assert_contains(h_event_text(&h, "job.checkpoint_flushing", 0), "deadline 20s");
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- headroom reserve and target bands --- */

static void test_poisson_quantile(void **state)
{
    (void)state;
    assert_int_equal(tide_poisson_quantile(1, 0.99), 4);
    assert_int_equal(tide_poisson_quantile(0.25, 0.99), 2);
    assert_int_equal(tide_poisson_quantile(0.01, 0.99), 0);
    assert_int_equal(tide_poisson_quantile(1, 0.5), 1);
    assert_int_equal(tide_poisson_quantile(10, 0.99), 18);
    assert_int_equal(tide_poisson_quantile(100, 0.99), 124);
    assert_int_equal(tide_poisson_quantile(0, 0.99), 0);
    assert_int_equal(tide_poisson_quantile(-3, 0.99), 0);
    assert_int_equal(tide_poisson_quantile(NAN, 0.99), 0);
    assert_int_equal(tide_poisson_quantile(5, 0), 0);
    assert_true(tide_poisson_quantile(1, 1.0) >= 10); /* q = 1 is clamped, not an endless loop */
    /* Large lambda: lambda + z * sqrt(lambda), z(0.99) = 2.326 */
    {
        const double lambdas[] = {1e4, 1e6, 1e8, 1e9};
        for (size_t i = 0; i < sizeof(lambdas) / sizeof(lambdas[0]); i++) {
            double l = lambdas[i], k = tide_poisson_quantile(l, 0.99);
            double z = (k - l) / sqrt(l);
            if (!(z > 2.30 && z < 2.36))
                fail_msg("lambda %g: quantile %.0f is %.3f sigma above the mean", l, k, z);
        }
    }
    assert_int_equal(tide_poisson_quantile(1e4, 0.99), 10233);
    assert_true(tide_poisson_quantile(1e4, 0.999) > tide_poisson_quantile(1e4, 0.99));
}

static void test_reserve_sizing(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_reserve_t r;
    char id[32];
    (void)state;
    cfg.failure_rate = 1.0 / 64; /* lambda = 16 GPUs x 4 h / 64 = 1 */
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 7, NULL, 0, NULL);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.usable, 15);
    assert_int_equal(r.gpus, 0); /* below 16 GPUs */
    assert_false(r.fixed);
    snprintf(id, sizeof(id), "n2/gpu7");
    h_register(&h, id, "n2", 7);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.usable, 16);
    assert_true(fabs(r.expected_failures - 1.0) < 1e-9);
    assert_int_equal(r.spares, 4);
    assert_int_equal(r.burst, 0);
    assert_int_equal(r.gpus, 4);
    assert_int_equal(r.free, 16);
    assert_false(r.observed);
    h_fini(&h);

    /* Never more than half the cluster. */
    cfg.failure_rate = 1.0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 20, NULL, 0, NULL);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.gpus, 10);
    h_fini(&h);

    /* A fixed reserve applies whatever the size. */
    cfg = config();
    cfg.reserve_gpus = 3;
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    tide_core_reserve(h.core, &r);
    assert_true(r.fixed);
    assert_int_equal(r.gpus, 3);
    /* a NORMAL job may take 1, the reserve keeps 3 */
    {
        tide_job_t *j = h_submit(&h, 1, 4, TIDE_PRIO_NORMAL);
        assert_int_equal(j->state, TIDE_JOB_RUNNING);
        assert_int_equal(j->n_ranks, 1);
    }
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_burst_capacity_follows_high_jobs(void **state)
{
    h_t h;
    tide_job_t *a, *b, *c;
    tide_reserve_t r;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.gpus, 0); /* 16 GPUs at 3 failures a month per 1,000: no spare needed */
    a = run(&h, 1, TIDE_PRIO_HIGH);
    b = run(&h, 4, TIDE_PRIO_HIGH);
    c = run(&h, 8, TIDE_PRIO_HIGH);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.burst, 2); /* 13 ranks x the HIGH band's width (10%) = 1.3 */
    assert_int_equal(r.gpus, 2);
    (void)run(&h, 1, TIDE_PRIO_NORMAL); /* NORMAL work adds no burst (and may take 3 - 2 free) */
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.burst, 2);
    h_exit_all(&h, b);
    h_exit_all(&h, a);
    h_exit_all(&h, c);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.burst, 0); /* back to nothing, whatever the order they ended in */
    assert_int_equal(r.gpus, 0);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_reserve_keeps_normal_out_lets_low_in(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *a, *b, *low, *low2;
    (void)state;
    cfg.reserve_gpus = 4;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    a = h_submit(&h, 12, 16, TIDE_PRIO_NORMAL);
    assert_int_equal(a->state, TIDE_JOB_RUNNING);
    assert_int_equal(a->n_ranks, 12);
    h_start_all(&h);
    b = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    assert_string_equal(reason(&h, b),
                        "waiting: needs 1 GPU; 4 free but the headroom reserve keeps 4 "
                        "(only LOW work may use it)");
    /* LOW work may use the reserve, even with B waiting (B does not wait for those GPUs). */
    low = h_submit(&h, 3, 3, TIDE_PRIO_LOW);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    h_start_all(&h);
    low2 = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    assert_int_equal(low2->state, TIDE_JOB_RUNNING);
    h_start_all(&h);
    assert_int_equal(h.core->n_free, 0);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    /* When A ends, B runs at once. */
    h_exit_all(&h, a);
    assert_int_equal(b->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_low_work_in_the_reserve_is_preempted_by_normal(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *low, *normal;
    char want[96];
    (void)state;
    cfg.reserve_gpus = 4;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    low = run(&h, 8, TIDE_PRIO_LOW);
    h_clear(&h);
    /* 12 = 16 less the reserve: only by taking low's GPUs. */
    normal = h_submit(&h, 12, 12, TIDE_PRIO_NORMAL);
    assert_int_equal(normal->state, TIDE_JOB_PENDING);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    snprintf(want, sizeof(want), "preempted by job %s (NORMAL)", normal->id);
    assert_contains(low->message, want);
    h_stop_all(&h);
    assert_int_equal(normal->state, TIDE_JOB_RUNNING);
    assert_int_equal(normal->n_ranks, 12);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);

    /* 13 would eat into the reserve: low is left alone. */
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    low = run(&h, 8, TIDE_PRIO_LOW);
    h_clear(&h);
    normal = h_submit(&h, 13, 13, TIDE_PRIO_NORMAL);
    assert_int_equal(normal->state, TIDE_JOB_PENDING);
    assert_int_equal(low->state, TIDE_JOB_RUNNING);
    assert_null(h_find_event(&h, "job.preempting"));
    h_check_invariants(&h);
    h_fini(&h);
}

/* Three failures in the first GPU-hour make the observed rate huge: more failures expected in the lead
 * time than there are GPUs. The spares are every usable GPU (the quantile, which would cost
 * O(sqrt(expected)) terms on every registration of a large fleet, is not computed), the reserve half. */
static void test_absurd_expected_failures_skip_the_quantile(void **state)
{
    h_t h;
    tide_reserve_t r;
    char id[32];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 10, NULL, 0, NULL);
    h_node(&h, "n2", 10, NULL, 0, NULL);
    h_jump(&h, 180 * 1000); /* 1 GPU-hour */
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "n1/gpu%d", i);
        tide_core_worker_failed(h.core, tide_core_worker_find(h.core, id), "xid 79");
    }
    tide_core_reserve(h.core, &r);
    assert_true(r.observed);
    assert_int_equal(r.usable, 17);
    assert_true(r.expected_failures > 100); /* 3 per GPU-hour x 17 GPUs x 4 h */
    assert_int_equal(r.spares, 17);
    assert_int_equal(r.gpus, 8);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_observed_failure_rate_replaces_the_configured_one(void **state)
{
    h_t h;
    tide_reserve_t r;
    char id[32];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 10, NULL, 0, NULL);
    h_node(&h, "n2", 10, NULL, 0, NULL);
    h_jump(&h, 3600 * 1000); /* 20 GPU-hours */
    tide_core_reserve(h.core, &r);
    assert_true(fabs(r.gpu_hours - 20) < 1e-6);
    for (int i = 0; i < 2; i++) {
        snprintf(id, sizeof(id), "n1/gpu%d", i);
        tide_core_worker_failed(h.core, tide_core_worker_find(h.core, id), "xid 79");
    }
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.failures, 2);
    assert_false(r.observed);
    assert_true(fabs(r.failure_rate - tide_core_config(h.core)->failure_rate) < 1e-15);
    tide_core_worker_failed(h.core, tide_core_worker_find(h.core, "n1/gpu2"), "xid 79");
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.failures, 3);
    assert_true(r.observed);
    assert_true(fabs(r.failure_rate - 3.0 / 20) < 1e-9);
    assert_int_equal(r.usable, 17);
    assert_true(fabs(r.expected_failures - 0.15 * 17 * 4) < 1e-9);
    assert_int_equal(r.gpus, 8); /* Poisson(10.2) at 99% is 18: capped at half of 17 */
    assert_int_equal(r.spares, 18);
    /* A failed worker that is already dead is not counted twice. */
    tide_core_worker_failed(h.core, tide_core_worker_find(h.core, "n1/gpu2"), "again");
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.failures, 3);
    h_check_invariants(&h);
    h_fini(&h);
}

static void assert_band(h_t *h, const tide_job_t *job, double lo, double hi)
{
    double l, u;
    tide_core_job_target(h->core, job, &l, &u);
    if (fabs(l - lo) > 1e-9 || fabs(u - hi) > 1e-9)
        fail_msg("job %s: band [%.3f, %.3f], want [%.3f, %.3f]", job->id, l, u, lo, hi);
}

static void test_target_bands(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_job_t *low, *normal, *high, *crit, *na, *ad;
    char node[32];
    (void)state;
    cfg.preemption = false;
    h_init(&h, &cfg);
    /* By class, on a small cluster (pending jobs: no worker yet). */
    low = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    normal = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    high = h_submit(&h, 1, 1, TIDE_PRIO_HIGH);
    crit = h_submit(&h, 1, 1, TIDE_PRIO_CRITICAL);
    assert_band(&h, low, 0.65, 0.75);
    assert_band(&h, normal, 0.55, 0.65);
    assert_band(&h, high, 0.50, 0.60);
    assert_band(&h, crit, 0.45, 0.55);
    h_fini(&h);

    /* New-arch GPUs: 10 points lower. */
    h_init(&h, &cfg);
    h_node(&h, "na", 1, NULL, 0, "new-arch=b200");
    h_node(&h, "old", 1, NULL, 0, "new-arch=false");
    na = run(&h, 1, TIDE_PRIO_NORMAL);
    normal = run(&h, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(na->new_arch_ranks + normal->new_arch_ranks, 1);
    assert_band(&h, na->new_arch_ranks ? na : normal, 0.45, 0.55);
    assert_band(&h, na->new_arch_ranks ? normal : na, 0.55, 0.65);
    h_fini(&h);

    /* Adaptive: lower early (first 20% of the time limit), plain mid-run, higher late (last 20%).
     */
    h_init(&h, &cfg);
    h_node(&h, "n1", 1, NULL, 0, NULL);
    spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    spec.adaptive_target = true;
    spec.time_limit_s = 1000;
    ad = h_submit_spec(&h, &spec);
    h_start_all(&h);
    assert_band(&h, ad, 0.45, 0.55);
    h_jump(&h, 500 * 1000);
    assert_band(&h, ad, 0.55, 0.65);
    h_jump(&h, 350 * 1000);
    assert_int_equal(ad->state, TIDE_JOB_RUNNING);
    assert_band(&h, ad, 0.60, 0.70);
    h_fini(&h);

    /* A cluster of 1,024 GPUs or more: 5 points lower. */
    h_init(&h, &cfg);
    for (int n = 0; n < 128; n++) {
        snprintf(node, sizeof(node), "n%03d", n);
        h_node(&h, node, 8, NULL, 0, NULL);
    }
    high = run(&h, 8, TIDE_PRIO_HIGH);
    assert_band(&h, high, 0.45, 0.55);
    h_fini(&h);
}

/* --- lost ranks --- */

static void test_lost_rank_requeues_and_resumes(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *dead;
    int32_t gen;
    (void)state;
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    h_ckpt(&h, job, 5);
    gen = job->generation;
    dead = job->ranks[1].worker;
    h_clear(&h);
    tide_core_worker_failed(h.core, dead, "xid 79");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_contains(job->message, "rank 1 lost");
    assert_contains(job->message, "resumes from checkpoint step 5");
    assert_non_null(h_find_event(&h, "job.requeued"));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 1);
    /* 2 GPUs are free, but rank 0 of generation 1 still stops: never two generations at once. */
    assert_int_equal(h.core->n_free, 2);
    assert_string_equal(reason(&h, job), "waiting for 1 rank of generation 1 to stop");
    h_check_invariants(&h);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, gen + 1);
    for (int32_t r = 0; r < job->n_ranks; r++)
        assert_ptr_not_equal(job->ranks[r].worker, dead);
    h_start_all(&h);
    h_check_invariants(&h);
    /* The budget is spent: the next loss fails it. */
    tide_core_worker_failed(h.core, job->ranks[0].worker, "xid 48");
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "rank 0 lost");
    h_check_invariants(&h);
    h_fini(&h);

    /* Without max_restarts, a loss fails the job at once. */
    h_init(&h, NULL);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    tide_core_worker_failed(h.core, job->ranks[1].worker, "xid 79");
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A rank that exits non-zero while a peer's worker is gone or going (mpirun kills the survivors when one
 * node dies, before its death is detected) is a loss of the generation, not the job's own failure. */
static void test_collateral_exit_after_a_lost_peer(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *gone, *w0;
    char id[16];
    (void)state;
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    h_ckpt(&h, job, 5);
    snprintf(id, sizeof(id), "%s", job->id);
    gone = job->ranks[1].worker;
    w0 = job->ranks[0].worker;
    h_clear(&h);
    tide_core_worker_disconnected(h.core, gone, gone->conn, false); /* its stream closed: SUSPECT */
    tide_core_rank_exited(h.core, w0, id, job->generation, 0, 137, NULL);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_contains(job->message, "rank 1 lost (rank 0 exited with code 137 after rank 1's worker n1/gpu1 was lost)");
    assert_contains(job->message, "resumes from checkpoint step 5");
    /* The suspect worker stays bound until it dies or comes back: no second generation beside it. */
    assert_ptr_equal(gone->job, job);
    h_check_invariants(&h);
    h_jump(&h, 2000); /* it dies */
    assert_int_equal(gone->state, TIDE_WORKER_DEAD);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    h_check_invariants(&h);
    h_fini(&h);

    /* With every peer healthy the same exit fails the job. */
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    snprintf(id, sizeof(id), "%s", job->id);
    tide_core_rank_exited(h.core, job->ranks[0].worker, id, job->generation, 0, 137, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "rank 0 on n1/gpu0 exited with code 137");
    h_fini(&h);
}

/* A job queued again after a lost rank may take the reserve's hot spares (design.md: a spare in its
 * place); a fresh job of the same size may not. */
static void test_recovering_job_takes_the_spares(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *fresh;
    (void)state;
    cfg.reserve_gpus = 4;
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    h_node(&h, "n3", 8, NULL, 0, NULL);
    job = run(&h, 20, TIDE_PRIO_CRITICAL);
    h_clear(&h);
    tide_core_worker_failed(h.core, job->ranks[19].worker, "xid 79");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_true(job->recovering);
    h_stop_all(&h);
    /* 23 usable, 23 free, reserve 4 (all spares): 19 would be left for fresh work, 23 for it. */
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->n_ranks, 20);
    assert_false(job->recovering);
    h_start_all(&h);
    h_check_invariants(&h);
    h_exit_all(&h, job);
    h_clear(&h);
    /* Without a loss behind it, the same job must leave the reserve alone. */
    fresh = h_submit(&h, 20, 20, TIDE_PRIO_CRITICAL);
    assert_int_equal(fresh->state, TIDE_JOB_PENDING);
    assert_contains(reason(&h, fresh), "hot spares");
    h_check_invariants(&h);
    h_fini(&h);
}

/* When LOW victims alone would leave the job inside the reserve, victims above LOW are added until it
 * would not. */
static void test_preemption_reaches_past_the_reserve(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *normal, *low, *crit;
    (void)state;
    cfg.reserve_gpus = 4;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    normal = run(&h, 8, TIDE_PRIO_NORMAL);
    low = run(&h, 4, TIDE_PRIO_LOW);
    h_clear(&h);
    /* free 4 + LOW-held 4 - reserve 4 = 4 < 8: taking LOW's 4 alone changes nothing for the reserve. */
    crit = h_submit(&h, 8, 8, TIDE_PRIO_CRITICAL);
    assert_int_equal(h_count_event(&h, "job.preempting"), 2);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    assert_int_equal(normal->state, TIDE_JOB_PENDING);
    h_stop_all(&h);
    assert_int_equal(crit->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A durable copy whose answers never come is held again and retried, not left copying forever. */
static void test_ckpt_copy_times_out(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    (void)state;
    cfg.ckpt_flush = true;
    cfg.ckpt_copy_timeout_ms = 60000;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2, TIDE_PRIO_NORMAL);
    h_sdk(&h, job, 0.1);
    h_clear(&h);
    h_ckpt(&h, job, 7);
    assert_int_equal(job->flush_state, TIDE_FLUSH_COPYING);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    h_clear(&h);
    h_jump(&h, 59000);
    assert_int_equal(job->flush_state, TIDE_FLUSH_COPYING);
    h_jump(&h, 2000);
    assert_non_null(h_find_event(&h, "job.checkpoint_flush_failed"));
    assert_contains(h_event_text(&h, "job.checkpoint_flush_failed", 0), "got no answer from 2 workers");
    h_clear(&h);
    /* Held, then released again at the next look (its MFU is still low). */
    h_sdk(&h, job, 0.1);
    h_jump(&h, cfg.ckpt_gate_check_ms);
    assert_int_equal(job->flush_state, TIDE_FLUSH_COPYING);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 2);
    h_check_invariants(&h);
    h_fini(&h);
}

/* The status figures: the running jobs' bands weighted by their ranks. */
static void test_running_target_weights_by_ranks(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    double lo, hi, mfu;
    (void)state;
    cfg.reserve_gpus = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    tide_core_running_target(h.core, &lo, &hi, &mfu);
    assert_true(lo == 0 && hi == 0 && mfu == 0);
    run(&h, 6, TIDE_PRIO_CRITICAL); /* 45-55% */
    run(&h, 2, TIDE_PRIO_LOW);      /* 65-75% */
    tide_core_running_target(h.core, &lo, &hi, &mfu);
    assert_true(fabs(lo - (6 * 0.45 + 2 * 0.65) / 8) < 1e-9);
    assert_true(fabs(hi - (6 * 0.55 + 2 * 0.75) / 8) < 1e-9);
    h_fini(&h);
}

/* Review regressions. A big job is judged against the idle cluster: the running jobs' burst share is
 * not part of it, so a 16-GPU HIGH job on 16 GPUs waits (and blocks) instead of being "never". */
static void test_burst_share_does_not_make_a_job_never_fit(void **state)
{
    h_t h;
    tide_job_t *big, *normal;
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    run(&h, 1, TIDE_PRIO_HIGH);
    big = h_submit(&h, 16, 16, TIDE_PRIO_HIGH);
    normal = h_submit(&h, 8, 8, TIDE_PRIO_NORMAL);
    assert_int_equal(big->state, TIDE_JOB_PENDING);
    assert_int_equal(normal->state, TIDE_JOB_PENDING); /* held for big, not run past it */
    assert_int_not_equal(big->wait, TIDE_WAIT_NEVER);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A requeued job whose old ranks still stop holds the shapes it could use. */
static void test_stopping_job_holds_its_capacity(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *hi, *nn;
    (void)state;
    cfg.max_restarts = 1;
    cfg.preemption = false;
    cfg.reserve_gpus = 0; /* no burst share: this is about the stopping ranks */
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    hi = h_submit(&h, 4, 8, TIDE_PRIO_HIGH);
    h_start_all(&h);
    run(&h, 8, TIDE_PRIO_NORMAL);
    nn = h_submit(&h, 6, 6, TIDE_PRIO_NORMAL);
    tide_core_worker_failed(h.core, hi->ranks[0].worker, "xid 79");
    h_stop_all(&h);
    assert_int_equal(hi->state, TIDE_JOB_RUNNING);
    assert_int_equal(nn->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A durable copy is released only when every rank can copy its part. */
static void test_ckpt_copy_waits_for_every_rank(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *j;
    tide_worker_t *w1;
    (void)state;
    cfg.ckpt_flush = true;
    cfg.ckpt_gate_check_ms = 500; /* looks again before the silent worker is declared dead */
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    j = run(&h, 2, TIDE_PRIO_NORMAL);
    tide_core_job_telemetry(h.core, j, 0.5, 0);
    h_ckpt(&h, j, 10);
    assert_int_equal(j->flush_state, TIDE_FLUSH_HELD);
    w1 = j->ranks[1].worker;
    tide_core_worker_disconnected(h.core, w1, w1->conn, false);
    h_clear(&h);
    tide_core_job_telemetry(h.core, j, 0.1, 0);
    h.mono += cfg.ckpt_gate_check_ms;
    tide_core_set_time(h.core, h.mono, H_WALL0 + h.mono);
    tide_core_worker_heartbeat(h.core, j->ranks[0].worker, NULL);
    tide_core_tick(h.core);
    assert_int_equal(h_count(&h, TIDE_ACT_FLUSH), 0);
    assert_int_equal(j->flush_state, TIDE_FLUSH_HELD);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A rank on a worker that lost its stream (not dead) may still run: the next generation waits. */
static void test_no_second_generation_while_a_suspect_rank_runs(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *j;
    tide_worker_t *a, *b;
    int32_t g;
    (void)state;
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    h_node(&h, "n2", 3, NULL, 0, NULL);
    j = run(&h, 3, TIDE_PRIO_NORMAL);
    g = j->generation;
    a = j->ranks[1].worker;
    b = j->ranks[0].worker;
    tide_core_worker_disconnected(h.core, a, a->conn, false);
    tide_core_worker_failed(h.core, b, "xid 79");
    h_stop_all(&h);
    assert_int_equal(j->state, TIDE_JOB_PENDING);
    assert_int_equal(j->generation, g);
    assert_ptr_equal(a->job, j);
    assert_contains(reason(&h, j), "to stop");
    h_check_invariants(&h);
    /* Its death releases it; then the job starts again. */
    tide_core_worker_failed(h.core, a, "gone");
    assert_null(a->job);
    assert_int_equal(j->state, TIDE_JOB_RUNNING);
    assert_int_equal(j->generation, g + 1);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Waiting only for the reserve, a job evicts no LOW work (it frees nothing the job may use). */
static void test_reserve_wait_evicts_no_low_work(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *x, *l;
    (void)state;
    cfg.reserve_gpus = 4;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    h_node(&h, "n2", 8, NULL, 0, NULL);
    x = run(&h, 6, TIDE_PRIO_NORMAL);
    l = run(&h, 2, TIDE_PRIO_LOW);
    h_clear(&h);
    h_submit(&h, 7, 7, TIDE_PRIO_HIGH);
    assert_int_equal(h_count_event(&h, "job.preempting"), 1);
    assert_int_equal(l->state, TIDE_JOB_RUNNING);
    assert_int_equal(x->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A job requeued at the front of its class does not stop older jobs behind it from aging. */
static void test_aging_looks_past_a_requeued_head(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *a, *b;
    (void)state;
    cfg.aging_ms = 60000;
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    b = run(&h, 8, TIDE_PRIO_LOW);
    a = h_submit(&h, 8, 8, TIDE_PRIO_LOW);
    h_jump(&h, 50000);
    tide_core_worker_failed(h.core, b->ranks[3].worker, "xid 79");
    h_stop_all(&h);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    h_jump(&h, 15000);
    assert_int_equal(a->eff_priority, TIDE_PRIO_NORMAL);
    h_check_invariants(&h);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_order_is_class_then_fifo),
        cmocka_unit_test(test_aging_raises_low_to_high_never_critical),
        cmocka_unit_test(test_dedicated_pool_takes_only_its_class),
        cmocka_unit_test(test_unknown_pool_names_the_known_ones),
        cmocka_unit_test(test_small_gang_lands_on_the_best_fitting_node),
        cmocka_unit_test(test_gang_lands_in_one_rack_when_no_node_fits),
        cmocka_unit_test(test_topology_rack_refuses_to_spread),
        cmocka_unit_test(test_topology_node_and_switch),
        cmocka_unit_test(test_memory_fit),
        cmocka_unit_test(test_device_match_and_shapes_never_mix),
        cmocka_unit_test(test_blocking_is_per_shape),
        cmocka_unit_test(test_a_job_that_could_never_fit_blocks_nobody),
        cmocka_unit_test(test_preemption_takes_the_lowest_class_and_only_what_it_needs),
        cmocka_unit_test(test_preemption_prefers_the_victim_with_a_recent_checkpoint),
        cmocka_unit_test(test_preemption_grace_ends_the_wait),
        cmocka_unit_test(test_no_preemption_when_not_allowed_or_not_enough),
        cmocka_unit_test(test_preemption_respects_topology),
        cmocka_unit_test(test_ckpt_gate_holds_while_mfu_is_high),
        cmocka_unit_test(test_ckpt_gate_releases_at_the_deadline),
        cmocka_unit_test(test_ckpt_gate_failure_and_newer_checkpoints),
        cmocka_unit_test(test_ckpt_gate_per_job_settings),
        cmocka_unit_test(test_poisson_quantile),
        cmocka_unit_test(test_reserve_sizing),
        cmocka_unit_test(test_burst_capacity_follows_high_jobs),
        cmocka_unit_test(test_reserve_keeps_normal_out_lets_low_in),
        cmocka_unit_test(test_low_work_in_the_reserve_is_preempted_by_normal),
        cmocka_unit_test(test_observed_failure_rate_replaces_the_configured_one),
        cmocka_unit_test(test_absurd_expected_failures_skip_the_quantile),
        cmocka_unit_test(test_target_bands),
        cmocka_unit_test(test_lost_rank_requeues_and_resumes),
        cmocka_unit_test(test_collateral_exit_after_a_lost_peer),
        cmocka_unit_test(test_recovering_job_takes_the_spares),
        cmocka_unit_test(test_preemption_reaches_past_the_reserve),
        cmocka_unit_test(test_ckpt_copy_times_out),
        cmocka_unit_test(test_running_target_weights_by_ranks),
        cmocka_unit_test(test_burst_share_does_not_make_a_job_never_fit),
        cmocka_unit_test(test_stopping_job_holds_its_capacity),
        cmocka_unit_test(test_ckpt_copy_waits_for_every_rank),
        cmocka_unit_test(test_no_second_generation_while_a_suspect_rank_runs),
        cmocka_unit_test(test_reserve_wait_evicts_no_low_work),
        cmocka_unit_test(test_aging_looks_past_a_requeued_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
