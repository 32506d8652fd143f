/* The Slurm identity of a tide-worker task (see slurm.h). Invariant: nothing here decides anything
 * outside Slurm (no SLURM_JOB_ID: present is false and every other field is unset); a malformed variable
 * is an error, never a guess. */
#include "slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_get(tide_worker_getenv_fn get, const char *name)
{
    const char *v = get ? get(name) : getenv(name);
    return v && v[0] ? v : NULL;
}

/* A decimal number 0..max into *out; -EINVAL otherwise. */
static int number(const char *name, const char *v, long max, long *out, tide_error_t *err)
{
    char *end = NULL;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 0 || n > max) {
        tide_errprintf(err, "%s: '%.32s' is not a number from 0 to %ld", name, v, max);
        return -EINVAL;
    }
    *out = n;
    return 0;
}

static int copy(const char *name, const char *v, char *dst, size_t cap, tide_error_t *err)
{
    if (strlen(v) >= cap) {
        tide_errprintf(err, "%s: longer than %zu characters", name, cap - 1);
        return -EINVAL;
    }
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* Entry idx of a comma-separated list of GPU indices ("0,1,2,3") into *out; the whole list must be
 * well formed. */
static int list_entry(const char *list, long idx, long *out, tide_error_t *err)
{
    const char *p = list;
    long i = 0;

    *out = -1;
    for (;;) {
        char *end = NULL;
        long n;
        errno = 0;
        n = strtol(p, &end, 10);
        if (errno || end == p || *p < '0' || *p > '9' || n > 1023 || (*end && *end != ',')) {
            tide_errprintf(err, "SLURM_STEP_GPUS: '%.64s' is not a list of GPU indices", list);
            return -EINVAL;
        }
        if (i == idx)
            *out = n;
        if (!*end)
            break;
        p = end + 1;
        i++;
    }
    if (*out >= 0)
        return 0;
    tide_errprintf(err, "SLURM_LOCALID %ld: SLURM_STEP_GPUS '%.64s' lists %ld GPU(s); start one task per GPU "
                        "(srun --ntasks-per-node equal to --gpus-per-node)",
                   idx, list, i + 1);
    return -EINVAL;
}

int tide_worker_slurm_detect(tide_worker_getenv_fn get, tide_worker_slurm_t *out, tide_error_t *err)
{
    const char *v;
    long gpu = -1;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    out->procid = out->localid = out->nodeid = -1;
    out->gpu_index = -1;
    if (!(v = env_get(get, "SLURM_JOB_ID")))
        return 0;
    out->present = true;
    rc = copy("SLURM_JOB_ID", v, out->job_id, sizeof(out->job_id), err);
    if (rc == 0 && (v = env_get(get, "SLURM_STEP_ID")))
        rc = copy("SLURM_STEP_ID", v, out->step_id, sizeof(out->step_id), err);
    if (rc == 0 && (v = env_get(get, "SLURMD_NODENAME")))
        rc = copy("SLURMD_NODENAME", v, out->node, sizeof(out->node), err);
    if (rc == 0 && (v = env_get(get, "SLURM_PROCID")))
        rc = number("SLURM_PROCID", v, 1L << 30, &out->procid, err);
    if (rc == 0 && (v = env_get(get, "SLURM_LOCALID")))
        rc = number("SLURM_LOCALID", v, 1023, &out->localid, err);
    if (rc == 0 && (v = env_get(get, "SLURM_NODEID")))
        rc = number("SLURM_NODEID", v, 1L << 30, &out->nodeid, err);
    if (rc == 0 && out->localid >= 0) {
        if ((v = env_get(get, "SLURM_STEP_GPUS")))
            rc = list_entry(v, out->localid, &gpu, err);
        else
            gpu = out->localid;
    }
    if (rc == 0)
        out->gpu_index = (int32_t)gpu;
    return rc;
}

int tide_worker_slurm_labels(const tide_worker_slurm_t *s, const char **keys, const char **values,
                             char *vbuf)
{
    const struct {
        const char *key;
        long v;
    } nums[] = {{"slurm.procid", s->procid}, {"slurm.localid", s->localid}, {"slurm.nodeid", s->nodeid}};
    int n = 0;

    if (!s->present)
        return 0;
    keys[n] = "slurm.job_id";
    values[n++] = s->job_id;
    if (s->step_id[0]) {
        keys[n] = "slurm.step_id";
        values[n++] = s->step_id;
    }
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        if (nums[i].v < 0)
            continue;
        snprintf(vbuf + 24 * i, 24, "%ld", nums[i].v);
        keys[n] = nums[i].key;
        values[n++] = vbuf + 24 * i;
    }
    if (s->node[0]) {
        keys[n] = "slurm.node";
        values[n++] = s->node;
    }
    return n;
}
