/* tide-bench-steal: how many steal requests the scheduler serves per second on one core, counting what
 * the daemon does per request besides the core: decoding each worker message from protobuf bytes and
 * encoding each scheduler message. J jobs of R ranks (8 GPUs per node) run steps of T tasks per rank;
 * in each step every rank pops its own deque (emulated here, as the workers would) and the ranks whose
 * deque is empty steal until the pool is empty: declare, done, steal request, release, give — the whole
 * exchange through the real core. Rank r is given a speed so that stealing actually happens.
 *   tide-bench-steal [JOBS [RANKS [TASKS [STEPS]]]]     (default 512 8 16 20) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "tide/v1/worker_service.pb-c.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One rank's deque as its worker holds it: ids[head, tail). */
typedef struct deque {
    uint64_t ids[4096];
    int head, tail;
    uint64_t steal_id;
    bool waiting; /* a steal is out */
    bool finished;
} deque_t;

static uint8_t wire[1 << 20];
static uint64_t ids_buf[1 << 20]; /* the ids of one batch of GIVE_TASKS actions */
static tide_action_t acts_buf[1 << 16];

/* The daemon's per-message codec work: pack, then unpack what a peer would receive. */
static Tide__V1__WorkerMessage *roundtrip_w(Tide__V1__WorkerMessage *m)
{
    size_t n = tide__v1__worker_message__pack(m, wire);
    return tide__v1__worker_message__unpack(NULL, n, wire);
}

static void roundtrip_s(Tide__V1__SchedulerMessage *m)
{
    size_t n = tide__v1__scheduler_message__pack(m, wire);
    Tide__V1__SchedulerMessage *u = tide__v1__scheduler_message__unpack(NULL, n, wire);
    tide__v1__scheduler_message__free_unpacked(u, NULL);
}

int main(int argc, char **argv)
{
    int jobs = argc > 1 ? atoi(argv[1]) : 512, ranks = argc > 2 ? atoi(argv[2]) : 8;
    int tasks = argc > 3 ? atoi(argv[3]) : 16, steps = argc > 4 ? atoi(argv[4]) : 20;
    int nw = jobs * ranks;
    tide_core_t *core = tide_core_new(NULL);
    tide_worker_t **ws = calloc((size_t)nw, sizeof(*ws));
    tide_job_t **js = calloc((size_t)jobs, sizeof(*js));
    deque_t *dq = calloc((size_t)nw, sizeof(*dq));
    uint64_t requests = 0, given = 0, rejected = 0;
    double t0, elapsed;
    tide_error_t err;

    if (ranks < 2 || tasks < 1 || tasks > 4096 || jobs < 1) {
        fprintf(stderr, "usage: tide-bench-steal [JOBS [RANKS>=2 [TASKS<=4096 [STEPS]]]]\n");
        return 2;
    }
    tide_core_set_time(core, 1000, 1000);
    for (int i = 0; i < nw; i++) {
        char id[64], node[32];
        tide_worker_info_t info = {.id = id, .node = node, .gpu_index = i % 8, .device = "sim:h100",
                                   .peak_flops = 989e12, .address = "10.0.0.1", .version = "bench"};
        snprintf(id, sizeof(id), "node%06d/gpu%d", i / 8, i % 8);
        snprintf(node, sizeof(node), "node%06d", i / 8);
        if (tide_core_worker_register(core, &info, &ws[i], NULL, 0, &ws[i], &err) < 0)
            abort();
    }
    tide_core_actions_clear(core);
    for (int j = 0; j < jobs; j++) {
        char *av[] = {"train", NULL};
        tide_job_spec_t spec = {.name = "b", .argv = av, .argc = 1, .min_workers = ranks, .max_workers = ranks};
        if (tide_core_job_submit(core, &spec, &js[j], &err) < 0 || js[j]->state != TIDE_JOB_RUNNING)
            abort();
        for (int r = 0; r < ranks; r++)
            tide_core_rank_started(core, js[j]->ranks[r].worker, js[j]->id, 1, r, 1, r ? 0 : 29500);
        tide_core_actions_clear(core);
    }

    t0 = now_s();
    for (int s = 0; s < steps; s++) {
        for (int j = 0; j < jobs; j++) {
            tide_job_t *job = js[j];
            deque_t *d = &dq[j * ranks];
            int left = ranks, rounds = 0;
            /* Every rank declares its share. */
            for (int r = 0; r < ranks; r++) {
                Tide__V1__TasksDeclared td = TIDE__V1__TASKS_DECLARED__INIT;
                Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT, *u;
                d[r].head = d[r].tail = 0;
                d[r].finished = d[r].waiting = false;
                for (int k = 0; k < tasks; k++)
                    d[r].ids[d[r].tail++] = (uint64_t)(r * tasks + k);
                td.job_id = job->id;
                td.generation = job->generation;
                td.rank = r;
                td.kind = TIDE__V1__TASK_KIND__TASK_KIND_MEMBER;
                td.step = s;
                td.task_ids = d[r].ids;
                td.n_task_ids = (size_t)tasks;
                td.total = (uint64_t)(ranks * tasks);
                m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED;
                m.tasks_declared = &td;
                u = roundtrip_w(&m);
                if (tide_core_tasks_declared(core, job->ranks[r].worker, u->tasks_declared->job_id, job->generation, r,
                                             TIDE_TASK_MEMBER, s, u->tasks_declared->task_ids,
                                             u->tasks_declared->n_task_ids, u->tasks_declared->total, &err) < 0)
                    rejected++;
                tide__v1__worker_message__free_unpacked(u, NULL);
            }
            tide_core_actions_clear(core);
            /* Rounds: rank r pops r+1 tasks per round (rank 0 is the slowest); an empty deque steals. */
            while (left > 0) {
                if (++rounds > 1000000) {
                    fprintf(stderr, "tide-bench-steal: job %s step %d never finished: a steal was not answered\n",
                            job->id, s);
                    return 1;
                }
                for (int r = 0; r < ranks; r++) {
                    deque_t *q = &d[r];
                    uint64_t done[64];
                    int nd = 0;
                    if (q->finished || q->waiting)
                        continue;
                    for (int k = 0; k <= r && q->head < q->tail && nd < 64; k++)
                        done[nd++] = q->ids[q->head++];
                    if (nd)
                        tide_core_tasks_done(core, job->ranks[r].worker, job->id, job->generation, r, TIDE_TASK_MEMBER,
                                             s, done, (size_t)nd, (uint32_t)(q->tail - q->head), &err);
                    if (q->head < q->tail)
                        continue;
                    {
                        Tide__V1__StealRequest sr = TIDE__V1__STEAL_REQUEST__INIT;
                        Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT, *u;
                        sr.job_id = job->id;
                        sr.generation = job->generation;
                        sr.rank = r;
                        sr.kind = TIDE__V1__TASK_KIND__TASK_KIND_MEMBER;
                        sr.step = s;
                        sr.steal_id = ++q->steal_id;
                        m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST;
                        m.steal_request = &sr;
                        u = roundtrip_w(&m);
                        q->waiting = true;
                        requests++;
                        tide_core_steal_request(core, job->ranks[r].worker, job->id, job->generation, r,
                                                TIDE_TASK_MEMBER, s, u->steal_request->steal_id, &err);
                        tide__v1__worker_message__free_unpacked(u, NULL);
                    }
                }
                /* Carry out the actions the way the workers would, until none are left. The batch is
                 * copied (ids too) and cleared first: answering it makes new actions. */
                for (;;) {
                    size_t na;
                    const tide_action_t *acts = tide_core_actions(core, &na);
                    tide_action_t *copy = acts_buf;
                    uint64_t *gids = ids_buf;
                    size_t n = na, used = 0;
                    if (na == 0)
                        break;
                    if (na > sizeof(acts_buf) / sizeof(acts_buf[0]))
                        abort(); /* more than one round of this bench can produce */
                    for (size_t i = 0; i < n; i++) {
                        copy[i] = acts[i];
                        if (acts[i].type == TIDE_ACT_GIVE_TASKS) {
                            memcpy(gids + used, acts[i].task_ids, acts[i].n_task_ids * sizeof(uint64_t));
                            copy[i].task_ids = gids + used;
                            used += acts[i].n_task_ids;
                        }
                    }
                    tide_core_actions_clear(core);
                    for (size_t i = 0; i < n; i++) {
                        Tide__V1__SchedulerMessage sm = TIDE__V1__SCHEDULER_MESSAGE__INIT;
                        const tide_action_t *a = &copy[i];
                        if (a->type == TIDE_ACT_RELEASE_TASKS) {
                            Tide__V1__ReleaseTasks rt = TIDE__V1__RELEASE_TASKS__INIT;
                            deque_t *v = &d[a->rank];
                            uint64_t out[4096];
                            int k = 0;
                            rt.job_id = (char *)a->job_id;
                            rt.release_id = a->request_id;
                            rt.max_tasks = a->max_tasks;
                            sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
                            sm.release_tasks = &rt;
                            roundtrip_s(&sm);
                            while (k < (int)a->max_tasks && v->tail > v->head)
                                out[k++] = v->ids[--v->tail];
                            {
                                Tide__V1__TasksReleased tr = TIDE__V1__TASKS_RELEASED__INIT;
                                Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT, *u;
                                tr.job_id = job->id;
                                tr.release_id = a->request_id;
                                tr.task_ids = out;
                                tr.n_task_ids = (size_t)k;
                                m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED;
                                m.tasks_released = &tr;
                                u = roundtrip_w(&m);
                                int rrc = tide_core_tasks_released(
                                    core, job->ranks[a->rank].worker, job->id, job->generation, a->rank,
                                    TIDE_TASK_MEMBER, s, a->request_id, u->tasks_released->task_ids,
                                    u->tasks_released->n_task_ids, (uint32_t)(v->tail - v->head), &err);
                                if (rrc < 0)
                                    rejected++;
                                tide__v1__worker_message__free_unpacked(u, NULL);
                            }
                        } else if (a->type == TIDE_ACT_GIVE_TASKS) {
                            Tide__V1__GiveTasks gt = TIDE__V1__GIVE_TASKS__INIT;
                            deque_t *t = &d[a->rank];
                            gt.job_id = (char *)a->job_id;
                            gt.steal_id = a->request_id;
                            gt.task_ids = (uint64_t *)a->task_ids;
                            gt.n_task_ids = a->n_task_ids;
                            sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
                            sm.give_tasks = &gt;
                            roundtrip_s(&sm);
                            t->waiting = false;
                            given += a->n_task_ids;
                            if (a->n_task_ids == 0) {
                                t->finished = true;
                                left--;
                            } else {
                                for (size_t k = 0; k < a->n_task_ids; k++)
                                    t->ids[t->tail++] = a->task_ids[k];
                            }
                        }
                    }
                }
            }
        }
    }
    elapsed = now_s() - t0;
    printf("tide-bench-steal: %d jobs x %d ranks, %d tasks per rank per step, %d steps, one thread\n", jobs, ranks,
           tasks, steps);
    printf("steal requests: %llu in %.3f s = %.0f per second (%.2f us each, with declare/done/release/give and "
           "their protobuf coding); %llu tasks stolen; %llu reports refused\n",
           (unsigned long long)requests, elapsed, (double)requests / elapsed, elapsed * 1e6 / (double)requests,
           (unsigned long long)given, (unsigned long long)rejected);
    tide_core_free(core);
    free(dq);
    free(js);
    free(ws);
    return 0;
}
