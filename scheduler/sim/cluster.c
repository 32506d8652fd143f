/* Simulated workers: one per GPU, registered with the core under the scenario's layout (nodes of
 * gpus_per_node GPUs, racks of nodes_per_rack nodes, switches of racks_per_switch racks; a group
 * starts a new rack and switch) with the labels pool / rack / switch / new-arch. Invariant: a
 * worker is `up` exactly while the core has it registered and not failed; its conn token is its own
 * slot (distinct, non-NULL), and its epoch changes at every failure so events addressed to the old
 * process are void. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_private.h"
#include "xmalloc.h"

static void register_worker(tide_sim_t *s, tide_sim_worker_t *sw)
{
    const tide_sim_group_t *g = &s->sc->groups[sw->group];
    tide_kv_t labels[4];
    size_t n = 0;
    tide_worker_info_t info;
    tide_error_t err;
    tide_worker_t *w = NULL;
    int gpu = (int)((sw - s->workers) % s->sc->gpus_per_node);

    labels[n++] = (tide_kv_t){.key = TIDE_LABEL_RACK, .value = sw->rack};
    labels[n++] = (tide_kv_t){.key = TIDE_LABEL_SWITCH, .value = sw->sw};
    if (g->pool[0])
        labels[n++] = (tide_kv_t){.key = TIDE_LABEL_POOL, .value = (char *)g->pool};
    if (g->new_arch)
        labels[n++] = (tide_kv_t){.key = TIDE_LABEL_NEW_ARCH, .value = "true"};
    memset(&info, 0, sizeof(info));
    info.id = sw->id;
    info.node = sw->node;
    info.gpu_index = gpu;
    info.device = g->device;
    info.peak_flops = g->peak_flops;
    info.memory_bytes = g->memory_bytes;
    info.labels = labels;
    info.n_labels = n;
    info.address = sw->node;
    info.version = "tide-sim";
    tide__sim_called(s);
    if (tide_core_worker_register(s->core, &info, sw, NULL, 0, &w, &err) < 0) {
        fprintf(stderr, "tide-sim: the core refused worker %s: %s\n", sw->id, err.text);
        abort(); /* the ids and nodes above are never empty */
    }
    sw->w = w;
    sw->up = true;
    s->n_up++;
}

void tide__cluster_init(tide_sim_t *s)
{
    const tide_scenario_t *sc = s->sc;
    int32_t idx = 0, node = 0, rack0 = 0, sw0 = 0;

    s->n_workers = sc->total_gpus;
    s->workers = tide_xcalloc((size_t)s->n_workers, sizeof(*s->workers));
    for (int k = 0; k < 2; k++)
        s->kind_idx[k] = tide_xcalloc((size_t)s->n_workers, sizeof(uint32_t));
    for (size_t gi = 0; gi < sc->n_groups; gi++) {
        const tide_sim_group_t *g = &sc->groups[gi];
        int32_t nodes = g->gpus / sc->gpus_per_node;
        int32_t racks = (nodes + sc->nodes_per_rack - 1) / sc->nodes_per_rack;
        for (int32_t k = 0; k < nodes; k++, node++) {
            int32_t rack = rack0 + k / sc->nodes_per_rack;
            int32_t swi = sw0 + (k / sc->nodes_per_rack) / sc->racks_per_switch;
            for (int32_t gpu = 0; gpu < sc->gpus_per_node; gpu++, idx++) {
                tide_sim_worker_t *sw = &s->workers[idx];
                snprintf(sw->node, sizeof(sw->node), "n%05d", (int)node);
                snprintf(sw->id, sizeof(sw->id), "n%05d/g%d", (int)node, (int)gpu);
                snprintf(sw->rack, sizeof(sw->rack), "r%04d", (int)rack);
                snprintf(sw->sw, sizeof(sw->sw), "s%03d", (int)swi);
                sw->group = (int32_t)gi;
                sw->new_arch = g->new_arch;
                s->kind_idx[g->new_arch][s->kind_n[g->new_arch]++] = (uint32_t)idx;
                s->peak_sum += g->peak_flops;
            }
        }
        rack0 += racks;
        sw0 += (racks + sc->racks_per_switch - 1) / sc->racks_per_switch;
    }
    for (int32_t i = 0; i < s->n_workers; i++) {
        register_worker(s, &s->workers[i]);
        tide__sim_process_actions(s);
    }
}

void tide__cluster_free(tide_sim_t *s)
{
    free(s->workers);
    free(s->kind_idx[0]);
    free(s->kind_idx[1]);
}

tide_sim_worker_t *tide__cluster_worker(tide_sim_t *s, const tide_worker_t *w)
{
    int node = 0, gpu = 0;

    if (w->conn)
        return (tide_sim_worker_t *)w->conn;
    /* A failed worker has no stream: find it by its id. */
    if (sscanf(w->id, "n%d/g%d", &node, &gpu) != 2)
        return NULL;
    if (node < 0 || gpu < 0 || gpu >= s->sc->gpus_per_node ||
        (int64_t)node * s->sc->gpus_per_node + gpu >= s->n_workers)
        return NULL;
    return &s->workers[node * s->sc->gpus_per_node + gpu];
}

void tide__cluster_fail(tide_sim_t *s, tide_sim_worker_t *sw)
{
    if (!sw->up)
        return;
    s->res.failures++;
    if (sw->w->job)
        s->res.failures_busy++;
    sw->up = false;
    sw->doomed = false;
    sw->epoch++;
    s->n_up--;
    tide__sim_called(s);
    tide_core_worker_failed(s->core, sw->w, "simulated GPU failure");
    tide__sim_push(s, s->now + (int64_t)(s->sc->lead_h * 3.6e6), EV_WORKER_BACK,
                   (uint32_t)(sw - s->workers), 0, 0, NULL);
}

void tide__cluster_back(tide_sim_t *s, tide_sim_worker_t *sw)
{
    tide_worker_t *w;

    if (sw->up)
        return;
    register_worker(s, sw);
    /* A replaced GPU: the operator uncordons what prediction cordoned. */
    if (sw->w->cordoned && sw->w->cordon_reason && strncmp(sw->w->cordon_reason, "predicted", 9) == 0) {
        tide__sim_called(s);
        tide_core_worker_cordon(s->core, sw->w->id, false, &w, NULL);
    }
}
