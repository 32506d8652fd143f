/* Held-out evaluation and eval.log (eval.h). Invariant: a shard's loss depends only on (config,
 * params, shard index) — never on the step, the rank or the process that computes it — and each
 * evaluated shard is one whole line of eval.log, written by one write(2). */
#include "eval.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "model.h"
#include "xmalloc.h"

struct tide_mlp_eval {
    uint64_t samples; /* per shard */
    tide_mlp_data_t *data;
    tide_mlp_work_t *work;
};

uint64_t tide_mlp_eval_shard_samples(const tide_mlp_config_t *c)
{
    return c->micro_batches ? c->batch / c->micro_batches : c->batch;
}

tide_mlp_eval_t *tide_mlp_eval_new(const tide_mlp_config_t *c)
{
    tide_mlp_eval_t *ev = tide_xcalloc(1, sizeof(*ev));

    ev->samples = tide_mlp_eval_shard_samples(c);
    ev->data = tide_mlp_data_new(c);
    ev->work = tide_mlp_work_new(c, ev->samples);
    return ev;
}

void tide_mlp_eval_free(tide_mlp_eval_t *ev)
{
    if (!ev)
        return;
    tide_mlp_work_free(ev->work);
    tide_mlp_data_free(ev->data);
    free(ev);
}

double tide_mlp_eval_shard_loss(tide_mlp_eval_t *ev, const double *params, uint64_t shard)
{
    tide_mlp_data_fill_heldout(ev->data, shard * ev->samples, ev->samples,
                               tide_mlp_work_inputs(ev->work), tide_mlp_work_targets(ev->work));
    return tide_mlp_loss(ev->work, params, ev->samples);
}

uint32_t tide_mlp_eval_share(uint32_t tasks, uint32_t rank, uint32_t world, uint64_t *ids)
{
    uint32_t n = 0;

    if (world == 0)
        world = 1;
    for (uint64_t i = rank; i < tasks; i += world)
        ids[n++] = i;
    return n;
}

int tide_mlp_eval_format(char *buf, size_t size, uint64_t step, uint64_t shard, double loss,
                         const tide_mlp_evaluator_t *who)
{
    int len = snprintf(buf, size,
                       "eval step %" PRIu64 " shard %" PRIu64 " loss %.17g by %s %" PRIu64 "\n",
                       step, shard, loss, who->burst ? "burst" : "rank", who->index);

    return len < 0 || (size_t)len >= size ? -ENOSPC : len;
}

int tide_mlp_eval_log_append(const char *dir, uint64_t step, uint64_t shard, double loss,
                             const tide_mlp_evaluator_t *who, tide_error_t *err)
{
    char path[4096], line[160];
    int len = tide_mlp_eval_format(line, sizeof(line), step, shard, loss, who);
    int fd = -1, rc = 0;
    ssize_t w;

    if (len < 0 || snprintf(path, sizeof(path), "%s/eval.log", dir) >= (int)sizeof(path)) {
        rc = -ENAMETOOLONG;
        tide_errprintf(err, "%s/eval.log: %s", dir, strerror(-rc));
        goto done;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", path, strerror(errno));
        goto done;
    }
    do
        w = write(fd, line, (size_t)len);
    while (w < 0 && errno == EINTR);
    if (w != len) {
        /* a short write would leave half a line: say so rather than finish it with a second write
         * that another writer's line could land in front of */
        rc = w < 0 ? -errno : -EIO;
        tide_errprintf(err, "%s: %s", path, strerror(-rc));
    }
done:
    if (fd >= 0 && close(fd) != 0 && rc == 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", path, strerror(errno));
    }
    return rc;
}
