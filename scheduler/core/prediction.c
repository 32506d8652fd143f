/* Failure prediction (docs/fault-tolerance.md, "Prediction"; the article's section 4.3): each heartbeat's
 * telemetry feeds the GPU's risk tracker (common/metrics/risk.h, O(1) per sample); a GPU PREDICTED to fail
 * is cordoned with the reason and the job whose rank runs there moves off it at a new generation —
 * checkpoint first when it reports through the SDK — before the GPU dies. Invariant: a worker is acted on
 * once per prediction; an operator's uncordon starts its tracker afresh. */
#include <stdio.h>

#include "core_private.h"

/* Bits of tide_telemetry_t.known (TIDE_GPU_HAS_*, common/gpu/gpu.h). */
#define KNOWN_UTIL     (1u << 0)
#define KNOWN_TEMP     (1u << 2)
#define KNOWN_POWER    (1u << 3)
#define KNOWN_THROTTLE (1u << 6)
#define KNOWN_ECC      (1u << 7)
#define KNOWN_XID      (1u << 8)

void tide__predict_sample(tide_core_t *core, tide_worker_t *w)
{
    const tide_telemetry_t *t = &w->telemetry;
    uint32_t known = t->known; /* the shell mapped an older worker's 0 already */
    tide_risk_input_t in = {
        .has_temperature = (known & KNOWN_TEMP) != 0,
        .temperature_c = t->temperature_c,
        .has_ecc = (known & KNOWN_ECC) != 0,
        .ecc_corrected = t->ecc_corrected,
        .ecc_uncorrected = t->ecc_uncorrected,
        .has_xid = (known & KNOWN_XID) != 0,
        .xid_count = t->xid_count,
        .last_xid = t->last_xid,
        .has_throttle = (known & KNOWN_THROTTLE) != 0,
        .throttle_reasons = t->throttle_reasons,
        .has_power = (known & KNOWN_POWER) != 0,
        .power_w = t->power_w,
        .has_util = (known & KNOWN_UTIL) != 0,
        .util = t->gpu_util,
    };
    char reason[192];
    const char *why;
    tide_risk_verdict_t v;

    if (!core->cfg.predict_failures)
        return;
    /* No reason text per heartbeat (it costs more than the rules): the tracker keeps the prediction's. */
    v = tide_risk_track_update(&w->risk, &core->cfg.risk, &in, core->now_mono, &w->risk_score, NULL, 0);
    if (v != TIDE_RISK_PREDICTED)
        return;
    if (w->risk_acted) {
        /* Its job is still here (there was no room to move it, or the move was called off): try again, at
         * most every 5 s. Only while that job runs the generation with a rank here and can change generation. */
        tide_job_t *job = w->job;
        if (job && job->state == TIDE_JOB_RUNNING && w->generation == job->generation && w->rank >= 0 &&
            w->rank < job->n_ranks && core->now_mono >= w->risk_retry_at && tide__resize_can_begin(job)) {
            w->risk_retry_at = core->now_mono + 5000;
            tide__worker_move_off(core, w, TIDE_RESIZE_PREDICTED, w->risk.predicted_why);
        }
        return;
    }
    why = w->risk.predicted_why;
    w->risk_acted = true;
    w->risk_retry_at = core->now_mono + 5000;
    snprintf(reason, sizeof(reason), "predicted failure: %s", why);
    tide__event(core, "worker.failure_predicted", w->job, w, "worker %s is predicted to fail (risk %.2f: %s)%s", w->id,
                w->risk_score, why, w->job ? "; cordoned, its job moves off it" : "; cordoned");
    tide__worker_cordon(core, w, reason);
    tide__worker_move_off(core, w, TIDE_RESIZE_PREDICTED, why);
}

void tide__predict_reset(tide_worker_t *w)
{
    tide_risk_track_reset(&w->risk);
    w->risk_score = 0;
    w->risk_acted = false;
    w->risk_waiting = false;
    w->risk_retry_at = 0;
}
