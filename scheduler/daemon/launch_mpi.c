/* The MPI part of a LaunchRank (docs/mpi.md): the job's nodes in rank order, as aliases mpirun can
 * use (tide-n0, tide-n1, ...: real node names may hold '.', '_' or '/', which Open MPI mangles, or
 * equal the launching host's name, which mpirun would start without the rsh agent), each with its
 * first rank's WorkerLauncher and its workers' trainer sockets; and the generation's credential,
 * HMAC-SHA256 of the job id and generation under the scheduler's launch key, so it needs no storage
 * and opens nothing but that generation's daemons and ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "daemon.h"

static char *credential(tide_daemon_t *d, const tide_job_t *job, int32_t generation)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char *msg = tide_arena_alloc(&d->arena, strlen(job->id) + 16), *hex;

    snprintf(msg, strlen(job->id) + 16, "%s\n%d", job->id, generation);
    if (!HMAC(EVP_sha256(), d->launch_key, (int)strlen(d->launch_key), (const unsigned char *)msg,
              strlen(msg), md, &n))
        abort(); /* only on OOM */
    hex = tide_arena_alloc(&d->arena, 2 * n + 1);
    for (unsigned int i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return hex;
}

void tide_daemon_mpi_launch(tide_daemon_t *d, const tide_job_t *job, int32_t generation,
                            Tide__V1__LaunchRank *l)
{
    int32_t groups = 0;
    Tide__V1__MpiHost **hosts;

    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].group_rank + 1 > groups)
            groups = job->ranks[r].group_rank + 1;
    hosts = tide_arena_calloc(&d->arena, (size_t)groups + 1, sizeof(*hosts));
    for (int32_t g = 0; g < groups; g++) {
        Tide__V1__MpiHost *h = tide_arena_alloc(&d->arena, sizeof(*h));
        char *alias = tide_arena_alloc(&d->arena, 24);
        tide__v1__mpi_host__init(h);
        snprintf(alias, 24, "tide-n%d", g);
        h->node = alias;
        h->first_rank = -1;
        h->agent_socks = tide_arena_calloc(&d->arena, (size_t)job->n_ranks + 1, sizeof(char *));
        for (int32_t r = 0; r < job->n_ranks; r++) {
            const tide_job_rank_t *s = &job->ranks[r];
            tide_worker_t *w;
            if (s->group_rank != g)
                continue;
            w = s->worker ? s->worker : tide_core_worker_find(d->core, s->worker_id);
            if (h->first_rank < 0) {
                h->first_rank = r;
                h->launcher_address =
                    w && w->launcher_address ? w->launcher_address : (char *)"";
            }
            h->slots++;
            h->agent_socks[h->n_agent_socks++] = w && w->agent_sock ? w->agent_sock : (char *)"";
        }
        hosts[g] = h;
    }
    l->n_mpi_hosts = (size_t)groups;
    l->mpi_hosts = hosts;
    l->mpi_credential = credential(d, job, generation);
}
