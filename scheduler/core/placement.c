/* Gang placement: all or nothing for min_workers, as many as free up to max_workers, on as few nodes as
 * possible. Single node: the node whose free count fits best (smallest that is big enough). Otherwise
 * the nodes with the most free workers first. Ranks come out grouped by node, GPUs ascending, so that
 * LOCAL_RANK follows the GPU index. O(TIDE_NODE_BUCKETS + workers chosen). */
#include "core_private.h"

static int32_t take(tide_node_t *n, int32_t want, tide_worker_t **ws, int32_t at)
{
    tide_list_t *pos;
    int32_t got = 0;

    tide_list_for_each(pos, &n->free) {
        if (got == want)
            break;
        ws[at + got++] = tide_list_entry(pos, tide_worker_t, free_node);
    }
    return got;
}

int32_t tide__place(tide_core_t *core, const tide_job_t *job, tide_worker_t **ws)
{
    int32_t k = job->spec.max_workers < core->n_free ? job->spec.max_workers : core->n_free;
    int32_t got = 0;
    tide_list_t *pos;

    if (k < job->spec.min_workers || k <= 0)
        return 0;
    /* Best fit on one node. */
    for (int c = k < TIDE_NODE_BUCKETS ? k : TIDE_NODE_BUCKETS; c <= TIDE_NODE_BUCKETS; c++) {
        tide_list_for_each(pos, &core->buckets[c]) {
            tide_node_t *n = tide_list_entry(pos, tide_node_t, bucket);
            if (n->n_free >= k)
                return take(n, k, ws, 0);
        }
    }
    /* Spread: largest nodes first. */
    for (int c = TIDE_NODE_BUCKETS; c >= 1 && got < k; c--) {
        tide_list_for_each(pos, &core->buckets[c]) {
            tide_node_t *n = tide_list_entry(pos, tide_node_t, bucket);
            got += take(n, k - got, ws, got);
            if (got == k)
                break;
        }
    }
    return got;
}
