/* A rank's share of a step (shard.h). Invariant: a micro-batch's contribution to the sum depends
 * only on (params, step, micro-batch index) — never on the rank that computes it or on what it
 * computed before (the gradient buffer is cleared for every micro-batch). */
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fixed_point.h"
#include "model.h"
#include "xmalloc.h"

struct tide_mlp_shard {
    tide_mlp_config_t cfg;
    size_t n_params;
    size_t mb_size;
    int64_t limit;
    tide_mlp_data_t *data;
    tide_mlp_work_t *work;
    double *grad;
};

tide_mlp_shard_t *tide_mlp_shard_new(const tide_mlp_config_t *c)
{
    tide_mlp_shard_t *sh = tide_xcalloc(1, sizeof(*sh));

    sh->cfg = *c;
    sh->n_params = tide_mlp_param_count(c);
    sh->mb_size = c->batch / c->micro_batches;
    sh->limit = tide_mlp_fixed_limit(c->micro_batches);
    sh->data = tide_mlp_data_new(c);
    sh->work = tide_mlp_work_new(c, sh->mb_size);
    sh->grad = tide_xmalloc(sizeof(double) * sh->n_params);
    return sh;
}

void tide_mlp_shard_free(tide_mlp_shard_t *sh)
{
    if (!sh)
        return;
    free(sh->grad);
    tide_mlp_work_free(sh->work);
    tide_mlp_data_free(sh->data);
    free(sh);
}

uint32_t tide_mlp_microbatch_owner(uint32_t m, uint32_t world)
{
    return world ? m % world : 0;
}

int tide_mlp_shard_add_microbatch(tide_mlp_shard_t *sh, const double *params, uint64_t step,
                                  uint32_t m, int64_t *acc)
{
    uint64_t first = step * sh->cfg.batch + (uint64_t)m * sh->mb_size;
    double loss;
    int rc;

    tide_mlp_data_fill(sh->data, first, sh->mb_size, tide_mlp_work_inputs(sh->work),
                       tide_mlp_work_targets(sh->work));
    loss = tide_mlp_microbatch_grad(sh->work, params, sh->mb_size, sh->grad);
    rc = tide_mlp_fixed_accumulate(acc, sh->grad, sh->n_params, sh->limit);
    if (rc == 0)
        rc = tide_mlp_fixed_accumulate(acc + sh->n_params, &loss, 1, sh->limit);
    return rc;
}

int tide_mlp_shard_run(tide_mlp_shard_t *sh, const double *params, uint64_t step, uint32_t rank,
                       uint32_t world, int64_t *acc, uint32_t *microbatches)
{
    uint32_t count = 0;
    int rc = 0;

    memset(acc, 0, sizeof(int64_t) * (sh->n_params + 1));
    for (uint32_t m = 0; m < sh->cfg.micro_batches; m++) {
        if (tide_mlp_microbatch_owner(m, world) != rank)
            continue;
        rc = tide_mlp_shard_add_microbatch(sh, params, step, m, acc);
        if (rc)
            break;
        count++;
    }
    if (microbatches)
        *microbatches = count;
    return rc;
}
