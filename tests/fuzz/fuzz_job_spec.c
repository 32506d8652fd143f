/* libFuzzer target for the scheduler's SubmitJob path for untrusted specs (scheduler/daemon/svc_jobs.c):
 * the input is a tide.v1.SubmitJobRequest in protobuf bytes, unpacked, converted by
 * tide_conv_spec_from_pb, validated by tide_job_spec_validate and submitted to a core with two workers.
 *
 * Checks, beyond "no crash, no leak": a failed conversion leaves the spec zeroed; every refusal is
 * -EINVAL with a text naming a field of JobSpec (or SubmitJobRequest.spec); the core accepts exactly
 * the specs that validate, with the same error; an accepted job converts back (tide_conv_job, the
 * client's form, and the stored record through tide_conv_record_from_pb) to an equivalent JobSpec:
 * every field equal, but for the documented defaults (priority UNSPECIFIED is NORMAL, max_workers 0 is
 * min_workers); and the core's invariants hold afterwards. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "core_harness.h"

#include "tide/v1/job_service.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Some identifier-like word of text is a field of JobSpec or SubmitJobRequest. */
static bool names_field(const char *text)
{
    const char *p = text;

    while (*p) {
        char word[64];
        size_t n = 0;
        while (*p && !((*p >= 'a' && *p <= 'z') || *p == '_'))
            p++;
        while ((*p >= 'a' && *p <= 'z') || *p == '_' || (*p >= '0' && *p <= '9')) {
            if (n < sizeof(word) - 1)
                word[n++] = *p;
            p++;
        }
        word[n] = '\0';
        if (n && (protobuf_c_message_descriptor_get_field_by_name(&tide__v1__job_spec__descriptor, word) ||
                  protobuf_c_message_descriptor_get_field_by_name(&tide__v1__submit_job_request__descriptor,
                                                                  word)))
            return true;
    }
    return false;
}

static void check_strv(char **a, size_t na, char **b, size_t nb)
{
    check(na == nb);
    for (size_t i = 0; i < na; i++)
        check(str_eq(a[i], b[i]));
}

/* The spec that came back (out) equals what was submitted (in), with the documented defaults. */
static void check_same_pb(const Tide__V1__JobSpec *in, const Tide__V1__JobSpec *out)
{
    check(out != NULL);
    check(str_eq(in->name, out->name));
    check_strv(in->command, in->n_command, out->command, out->n_command);
    check(in->min_workers == out->min_workers);
    check(out->max_workers == (in->max_workers ? in->max_workers : in->min_workers));
    check(out->priority == (in->priority ? in->priority : TIDE__V1__PRIORITY__PRIORITY_NORMAL));
    check(in->n_env == out->n_env);
    for (size_t i = 0; i < in->n_env; i++) {
        check(str_eq(in->env[i]->key, out->env[i]->key));
        check(str_eq(in->env[i]->value, out->env[i]->value));
    }
    check(str_eq(in->workdir, out->workdir));
    check(in->time_limit_seconds == out->time_limit_seconds);
    check(in->launcher == out->launcher);
    check(str_eq(in->pool, out->pool));
    check(in->memory_per_rank_bytes == out->memory_per_rank_bytes);
    check(in->topology == out->topology);
    check(str_eq(in->device, out->device));
    check(in->checkpoint_mfu_threshold == out->checkpoint_mfu_threshold);
    check(in->checkpoint_deadline_seconds == out->checkpoint_deadline_seconds);
    check(in->checkpoint_interval_seconds == out->checkpoint_interval_seconds);
    check(in->adaptive_target == out->adaptive_target);
    check(in->no_stealing == out->no_stealing);
    check(in->burst_percent == out->burst_percent);
    check_strv(in->burst_command, in->n_burst_command, out->burst_command, out->n_burst_command);
    check(in->restart_policy == out->restart_policy);
    check(in->max_restarts == out->max_restarts);
    check(in->restart_backoff_ms == out->restart_backoff_ms);
}

/* job -> Job bytes -> Job: the spec survives (core: the client's form; NULL: the stored record, which is
 * also read back as a restore record and compared with the job's spec). */
static void check_round_trip(tide_core_t *core, const tide_job_t *job, const Tide__V1__JobSpec *in)
{
    tide_arena_t a = TIDE_ARENA_INIT;
    Tide__V1__Job pb;
    Tide__V1__Job *back;
    uint8_t *buf;
    size_t len;

    tide_conv_job(core, job, &pb, &a);
    len = tide__v1__job__get_packed_size(&pb);
    buf = malloc(len ? len : 1);
    check(tide__v1__job__pack(&pb, buf) == len);
    back = tide__v1__job__unpack(NULL, len, buf);
    check(back != NULL && str_eq(back->id, job->id));
    check_same_pb(in, back->spec);
    if (!core) {
        tide_job_record_t rec;
        tide_job_spec_t spec;
        tide_error_t err;
        check(tide_conv_record_from_pb(back, &rec, &spec, &a, &err) == 0);
        check(tide_job_spec_validate(&spec, &err) == 0);
        check(spec.argc == job->spec.argc && spec.min_workers == job->spec.min_workers &&
              spec.max_workers == job->spec.max_workers && spec.priority == job->spec.priority &&
              spec.n_env == job->spec.n_env && spec.n_burst_argv == job->spec.n_burst_argv);
    }
    tide__v1__job__free_unpacked(back, NULL);
    free(buf);
    tide_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Tide__V1__SubmitJobRequest *req = tide__v1__submit_job_request__unpack(NULL, size, data);
    static const tide_job_spec_t zero;
    tide_arena_t a = TIDE_ARENA_INIT;
    tide_job_spec_t spec;
    tide_error_t err = {{0}}, verr = {{0}};
    tide_job_t *job = NULL;
    h_t h;
    int rc, vrc;

    if (!req)
        return 0;
    rc = tide_conv_spec_from_pb(req->spec, &spec, &a, &err);
    if (rc < 0) {
        /* only a missing spec or a bad priority; the spec is left zeroed */
        check(rc == -EINVAL && err.text[0] && names_field(err.text));
        check(memcmp(&spec, &zero, sizeof(spec)) == 0);
        goto done;
    }
    check(rc == 0 && req->spec && spec.argc == req->spec->n_command && spec.n_env == req->spec->n_env);
    vrc = tide_job_spec_validate(&spec, &verr);
    check(vrc == 0 || (vrc == -EINVAL && verr.text[0] && names_field(verr.text)));

    h_init(&h, NULL);
    h_register_ex(&h, "w0", "n0", 0, NULL, 0, "rack=r0");
    h_register_ex(&h, "w1", "n0", 1, NULL, 0, "rack=r0");
    tide_core_actions_clear(h.core);
    rc = tide_core_job_submit(h.core, &spec, &job, &err);
    if (vrc < 0) {
        /* the core refuses it with the validator's words */
        check(rc == vrc && strcmp(err.text, verr.text) == 0);
    } else if (rc < 0) {
        /* a valid spec the core refuses names a pool it does not know */
        check(rc == -EINVAL && spec.pool && spec.pool[0] && names_field(err.text));
    } else {
        check(job != NULL && job->id && job->id[0]);
        check(tide_core_job_find(h.core, job->id) == job);
        check_round_trip(h.core, job, req->spec);
        check_round_trip(NULL, job, req->spec);
    }
    h_check_invariants(&h);
    tide_core_actions_clear(h.core);
    h_fini(&h);
done:
    tide_arena_free(&a);
    tide__v1__submit_job_request__free_unpacked(req, NULL);
    return 0;
}
