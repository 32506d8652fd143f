/* Rule-based failure risk (risk.h): the instantaneous rules on one sample (the largest applies) and
 * the trend tracker (noisy-or of rules over filtered signals, confirmed over time). Every value and
 * threshold is in the table of constants below and in docs/metrics.md. The tracker is O(1) per
 * sample and keeps its whole history in tide_risk_track_t: no allocation, no clock. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "risk.h"

/* ---- The table (docs/metrics.md, "Failure risk") ---- */

/* Instantaneous rules (tide_failure_risk): counters since the worker started. */
#define RISK_ECC_UNCORRECTED 0.9 /* uncorrectable memory errors: retire the pages, expect more */
#define RISK_XID_CRITICAL    0.8 /* the driver reported a failing GPU or memory */
#define RISK_XID_OTHER       0.3 /* any other XID: often the application, sometimes the GPU */
#define RISK_HOT             0.6 /* at TIDE_RISK_HOT_C and above */
#define RISK_HW_SLOWDOWN     0.3 /* the GPU slows itself down: thermal or power brake */

/* NVML clocks-event reasons that mean the hardware protects itself (not the user's clock caps):
 * HW slowdown 0x8, SW thermal slowdown 0x20, HW thermal slowdown 0x40, HW power brake 0x80. */
#define THROTTLE_HW_MASK 0xe8u

/* Tracker defaults (tide_risk_cfg_t). */
#define CFG_THRESHOLD       0.7
#define CFG_CONFIRM_MS      10000
#define CFG_GAP_MS          30000
#define CFG_TREND_FLOOR_C   75.0
#define CFG_HORIZON_MS      60000
#define CFG_POWER_DEVIATION 0.30
#define CFG_POWER_PRIME_MS  10000
#define CFG_UTIL_STEADY     0.1
#define CFG_ECC_RATE_LOW    1.0   /* per minute */
#define CFG_ECC_RATE_HIGH   100.0 /* per minute */

/* Tracker rule values. */
#define TRACK_HOT        RISK_HOT /* temperature level, linear from warm_c to hot_c */
#define TRACK_SLOPE_LATE 0.5      /* projected to reach hot_c at the end of the horizon */
#define TRACK_SLOPE_SOON 0.8      /* ... within SLOPE_SOON_MS (linear in between) */
#define SLOPE_SOON_MS    20000
#define TRACK_THROTTLE   RISK_HW_SLOWDOWN
#define TRACK_POWER      0.3
#define TRACK_ECC_RATE   0.8 /* at ecc_rate_high; log-linear from 0 at ecc_rate_low */
#define TRACK_CRITICAL   1.0 /* a new uncorrected ECC error or a new critical XID */
#define TRACK_XID_OTHER  0.3 /* a new other XID, decaying linearly to 0 over XID_DECAY_MS */
#define XID_DECAY_MS     60000

/* Tracker filters: exponential averages with these time constants (irregular sampling: the weight
 * of a sample dt after the previous one is 1 - exp(-dt / tau)). */
#define TEMP_TAU_MS  2000.0  /* temperature level */
#define SLOPE_TAU_MS 5000.0  /* slope of the temperature level, C/min */
#define POWER_TAU_MS 60000.0 /* power baseline */
#define UTIL_TAU_MS  10000.0 /* utilization average */
#define ECC_TAU_MS   60000.0 /* corrected-ECC rate, per minute: one lone error is 1/min */
#define POWER_MIN_W  1.0     /* below it a baseline is too small to compare against */

static double max2(double a, double b)
{
    return a > b ? a : b;
}

static double clamp01(double x)
{
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

bool tide_xid_critical(uint32_t xid)
{
    switch (xid) {
    case 48: /* double-bit ECC error */
    case 63: /* row remapping (pending) */
    case 64: /* row remapping failed */
    case 74: /* NVLink error */
    case 79: /* fallen off the bus */
    case 92: /* high single-bit ECC rate */
    case 94: /* contained ECC error */
    case 95: /* uncontained ECC error */
        return true;
    default:
        return false;
    }
}

double tide_failure_risk(const tide_risk_input_t *in)
{
    double r = 0;

    if (in->has_ecc && in->ecc_uncorrected > 0)
        r = max2(r, RISK_ECC_UNCORRECTED);
    if (in->has_xid && in->xid_count > 0)
        r = max2(r, tide_xid_critical(in->last_xid) ? RISK_XID_CRITICAL : RISK_XID_OTHER);
    if (in->has_temperature && in->temperature_c > TIDE_RISK_WARM_C) {
        double f = (in->temperature_c - TIDE_RISK_WARM_C) / (TIDE_RISK_HOT_C - TIDE_RISK_WARM_C);
        r = max2(r, RISK_HOT * (f > 1 ? 1 : f));
    }
    if (in->has_throttle && (in->throttle_reasons & THROTTLE_HW_MASK))
        r = max2(r, RISK_HW_SLOWDOWN);
    return r;
}

/* ---- The trend tracker ---- */

void tide_risk_cfg_default(tide_risk_cfg_t *cfg)
{
    *cfg = (tide_risk_cfg_t){
        .threshold = CFG_THRESHOLD,
        .confirm_ms = CFG_CONFIRM_MS,
        .gap_ms = CFG_GAP_MS,
        .warm_c = TIDE_RISK_WARM_C,
        .hot_c = TIDE_RISK_HOT_C,
        .trend_floor_c = CFG_TREND_FLOOR_C,
        .horizon_ms = CFG_HORIZON_MS,
        .power_deviation = CFG_POWER_DEVIATION,
        .power_prime_ms = CFG_POWER_PRIME_MS,
        .util_steady = CFG_UTIL_STEADY,
        .ecc_rate_low = CFG_ECC_RATE_LOW,
        .ecc_rate_high = CFG_ECC_RATE_HIGH,
    };
}

void tide_risk_track_reset(tide_risk_track_t *t)
{
    memset(t, 0, sizeof(*t));
}

const char *tide_risk_verdict_name(tide_risk_verdict_t v)
{
    switch (v) {
    case TIDE_RISK_OK:
        return "ok";
    case TIDE_RISK_WATCH:
        return "watch";
    case TIDE_RISK_PREDICTED:
        return "predicted";
    }
    return "?";
}

static double ewma(double avg, double x, int64_t dt_ms, double tau_ms)
{
    return avg + (1 - exp(-(double)dt_ms / tau_ms)) * (x - avg);
}

/* A signal's trend restarts on its first sample, after a silence longer than gap_ms, and if the
 * clock goes backwards (the caller's bug; never trust a negative dt). */
static bool restarts(bool seen, int64_t dt, const tide_risk_cfg_t *cfg)
{
    return !seen || dt < 0 || dt > cfg->gap_ms;
}

/* What each rule gave on this sample, for the score and the reason. */
typedef struct rules {
    double level, slope, throttle, power, ecc_rate, critical, xid_other;
    double temp_c, slope_c_min, power_w, power_base_w, ecc_per_min;
    uint64_t throttle_bits, new_uncorrected;
    uint32_t xid_critical, xid_other_code;
    int64_t xid_other_age_ms;
} rules_t;

static void temperature(tide_risk_track_t *t, const tide_risk_cfg_t *cfg,
                        const tide_risk_input_t *in, int64_t now_ms, rules_t *r)
{
    double x = in->temperature_c;
    int64_t dt = now_ms - t->temp_ms;

    if (!in->has_temperature || !isfinite(x))
        return;
    if (restarts(t->temp_seen, dt, cfg)) {
        /* no momentum across a gap: the level starts at the reading, the slope at flat */
        t->temp_seen = true;
        t->temp_avg = x;
        t->slope_avg = 0;
        t->temp_ms = now_ms;
    } else if (dt > 0) {
        double prev = t->temp_avg;

        t->temp_avg = ewma(prev, x, dt, TEMP_TAU_MS);
        /* the slope of the averaged level: one integer step of a raw reading moves it little */
        t->slope_avg =
            ewma(t->slope_avg, (t->temp_avg - prev) * 60000.0 / (double)dt, dt, SLOPE_TAU_MS);
        t->temp_ms = now_ms;
    }
    r->temp_c = t->temp_avg;
    r->slope_c_min = t->slope_avg;
    if (cfg->hot_c > cfg->warm_c)
        r->level = TRACK_HOT * clamp01((t->temp_avg - cfg->warm_c) / (cfg->hot_c - cfg->warm_c));
    else
        r->level = t->temp_avg >= cfg->hot_c ? TRACK_HOT : 0;

    /* Slope: where the level would be at the end of the horizon at the current slope. A flat or
     * falling GPU, or one whose reading is still cool, adds nothing; the sooner it would reach
     * hot_c, the more. (The floor looks at the reading, not the average, which lags a ramp by
     * slope x TEMP_TAU: 4 C at 120 C/min.) */
    if (t->slope_avg > 0 && x > cfg->trend_floor_c &&
        t->temp_avg + t->slope_avg * (double)cfg->horizon_ms / 60000.0 >= cfg->hot_c) {
        double eta_ms =
            t->temp_avg >= cfg->hot_c ? 0 : (cfg->hot_c - t->temp_avg) / t->slope_avg * 60000.0;
        double span = (double)cfg->horizon_ms - SLOPE_SOON_MS;
        double f = span > 0 ? clamp01(((double)cfg->horizon_ms - eta_ms) / span) : 1;

        r->slope = TRACK_SLOPE_LATE + (TRACK_SLOPE_SOON - TRACK_SLOPE_LATE) * f;
    }
}

static void power(tide_risk_track_t *t, const tide_risk_cfg_t *cfg, const tide_risk_input_t *in,
                  int64_t now_ms, rules_t *r)
{
    bool has_util = in->has_util && isfinite(in->util);
    bool steady = false;
    double p = in->power_w;
    int64_t dt;

    if (has_util) {
        dt = now_ms - t->util_ms;
        if (restarts(t->util_seen, dt, cfg)) {
            t->util_seen = true;
            t->util_avg = in->util;
            t->util_ms = now_ms;
        } else if (dt > 0) {
            steady = fabs(in->util - t->util_avg) < cfg->util_steady;
            t->util_avg = ewma(t->util_avg, in->util, dt, UTIL_TAU_MS);
            t->util_ms = now_ms;
        } else {
            steady = fabs(in->util - t->util_avg) < cfg->util_steady;
        }
    }
    if (!in->has_power || !isfinite(p))
        return;
    dt = now_ms - t->power_ms;
    /* The baseline is the power at this workload: it starts again whenever the utilization moves
     * (a job starting or ending changes the power legitimately). Without utilization there is no
     * telling a workload change from an anomaly, so the rule stays silent. */
    if (restarts(t->power_seen, dt, cfg) || !steady) {
        t->power_seen = true;
        t->power_base = p;
        t->power_since_ms = now_ms;
        t->power_ms = now_ms;
        return;
    }
    if (dt == 0)
        return;
    if (now_ms - t->power_since_ms >= cfg->power_prime_ms && t->power_base > POWER_MIN_W &&
        fabs(p - t->power_base) / t->power_base > cfg->power_deviation) {
        r->power = TRACK_POWER;
        r->power_w = p;
        r->power_base_w = t->power_base;
    }
    t->power_base = ewma(t->power_base, p, dt, POWER_TAU_MS);
    t->power_ms = now_ms;
}

static void ecc(tide_risk_track_t *t, const tide_risk_cfg_t *cfg, const tide_risk_input_t *in,
                int64_t now_ms, rules_t *r)
{
    int64_t dt = now_ms - t->ecc_ms;

    if (!in->has_ecc)
        return;
    if (!t->ecc_seen) {
        /* totals from before we watched are history, not news */
        t->ecc_seen = true;
        t->ecc_uncorrected = in->ecc_uncorrected;
        t->ecc_corrected = in->ecc_corrected;
        t->ecc_rate = 0;
        t->ecc_ms = now_ms;
        return;
    }
    /* A counter that went backwards was reset (driver reload, worker restart): rebase on it. */
    if (in->ecc_uncorrected > t->ecc_uncorrected) {
        r->critical = TRACK_CRITICAL;
        r->new_uncorrected = in->ecc_uncorrected - t->ecc_uncorrected;
    }
    t->ecc_uncorrected = in->ecc_uncorrected;

    if (in->ecc_corrected < t->ecc_corrected) {
        t->ecc_corrected = in->ecc_corrected;
        t->ecc_ms = now_ms;
    } else if (dt != 0) { /* at dt 0 the errors wait for the next sample, which has a rate */
        double per_min =
            dt > 0 ? (double)(in->ecc_corrected - t->ecc_corrected) * 60000.0 / (double)dt : 0;

        /* after a gap the average over the gap, without momentum */
        t->ecc_rate =
            restarts(true, dt, cfg) ? per_min : ewma(t->ecc_rate, per_min, dt, ECC_TAU_MS);
        t->ecc_corrected = in->ecc_corrected;
        t->ecc_ms = now_ms;
    }
    r->ecc_per_min = t->ecc_rate;
    if (t->ecc_rate > cfg->ecc_rate_low && cfg->ecc_rate_high > cfg->ecc_rate_low)
        r->ecc_rate = TRACK_ECC_RATE * clamp01(log(t->ecc_rate / cfg->ecc_rate_low) /
                                               log(cfg->ecc_rate_high / cfg->ecc_rate_low));
}

static void xid(tide_risk_track_t *t, const tide_risk_input_t *in, int64_t now_ms, rules_t *r)
{
    if (in->has_xid) {
        if (!t->xid_seen) {
            t->xid_seen = true;
        } else if (in->xid_count > t->xid_count) {
            /* only the newest code is known: earlier ones in the same interval are lost */
            if (tide_xid_critical(in->last_xid)) {
                r->critical = TRACK_CRITICAL;
                r->xid_critical = in->last_xid;
            } else {
                t->xid_other_seen = true;
                t->xid_other = in->last_xid;
                t->xid_other_ms = now_ms;
            }
        }
        t->xid_count = in->xid_count; /* also rebases a reset counter */
    }
    if (t->xid_other_seen) {
        int64_t age = now_ms - t->xid_other_ms;

        if (age < 0)
            age = 0;
        if (age < XID_DECAY_MS) {
            r->xid_other = TRACK_XID_OTHER * (1 - (double)age / XID_DECAY_MS);
            r->xid_other_code = t->xid_other;
            r->xid_other_age_ms = age;
        } else {
            t->xid_other_seen = false;
        }
    }
}

static void throttle_names(uint64_t bits, char *out, size_t len)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {0x40, "HW thermal slowdown"},
        {0x20, "SW thermal slowdown"},
        {0x80, "HW power brake"},
        {0x08, "HW slowdown"},
    };
    size_t pos = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && pos < len; i++) {
        if (bits & names[i].bit) {
            int n = snprintf(out + pos, len - pos, "%s%s", pos ? ", " : "", names[i].name);

            pos += n > 0 ? (size_t)n : 0;
        }
    }
}

typedef struct item {
    double r;
    char text[80];
} item_t;

/* The contributing rules, largest first, joined by "; " into reason[len]. */
static void describe(const rules_t *r, char *reason, size_t len)
{
    item_t it[6];
    size_t n = 0, pos = 0;
    double temp = 1 - (1 - r->level) * (1 - r->slope);

    if (r->critical > 0) {
        it[n].r = r->critical + 1; /* first, whatever else */
        if (r->new_uncorrected && r->xid_critical)
            snprintf(it[n].text, sizeof(it[n].text), "%llu new uncorrected ECC; critical XID %u",
                     (unsigned long long)r->new_uncorrected, r->xid_critical);
        else if (r->new_uncorrected)
            snprintf(it[n].text, sizeof(it[n].text), "%llu new uncorrected ECC",
                     (unsigned long long)r->new_uncorrected);
        else
            snprintf(it[n].text, sizeof(it[n].text), "critical XID %u", r->xid_critical);
        n++;
    }
    if (temp > 0) {
        it[n].r = temp;
        if (r->slope > 0)
            snprintf(it[n].text, sizeof(it[n].text), "temperature %.1f C rising %.1f C/min",
                     r->temp_c, r->slope_c_min);
        else
            snprintf(it[n].text, sizeof(it[n].text), "temperature %.1f C", r->temp_c);
        n++;
    }
    if (r->throttle > 0) {
        it[n].r = r->throttle;
        throttle_names(r->throttle_bits, it[n].text, sizeof(it[n].text));
        n++;
    }
    if (r->power > 0) {
        it[n].r = r->power;
        snprintf(it[n].text, sizeof(it[n].text), "power %.0f W, %+.0f%% from %.0f W", r->power_w,
                 (r->power_w - r->power_base_w) / r->power_base_w * 100, r->power_base_w);
        n++;
    }
    if (r->ecc_rate > 0) {
        it[n].r = r->ecc_rate;
        snprintf(it[n].text, sizeof(it[n].text), "corrected ECC %.1f/min", r->ecc_per_min);
        n++;
    }
    if (r->xid_other > 0) {
        it[n].r = r->xid_other;
        snprintf(it[n].text, sizeof(it[n].text), "XID %u %lld s ago", r->xid_other_code,
                 (long long)(r->xid_other_age_ms / 1000));
        n++;
    }
    for (size_t i = 1; i < n; i++) { /* insertion sort, largest first, stable */
        item_t x = it[i];
        size_t j = i;

        for (; j > 0 && it[j - 1].r < x.r; j--)
            it[j] = it[j - 1];
        it[j] = x;
    }
    if (n == 0) {
        snprintf(reason, len, "none");
        return;
    }
    for (size_t i = 0; i < n && pos < len; i++) {
        int w = snprintf(reason + pos, len - pos, "%s%s", i ? "; " : "", it[i].text);

        pos += w > 0 ? (size_t)w : 0;
    }
}

tide_risk_verdict_t tide_risk_track_update(tide_risk_track_t *t, const tide_risk_cfg_t *cfg,
                                           const tide_risk_input_t *in, int64_t now_ms,
                                           double *score, char *reason, size_t len)
{
    rules_t r;
    double s;
    bool critical;
    tide_risk_verdict_t v;

    memset(&r, 0, sizeof(r));
    temperature(t, cfg, in, now_ms, &r);
    if (in->has_throttle && (in->throttle_reasons & THROTTLE_HW_MASK)) {
        r.throttle = TRACK_THROTTLE;
        r.throttle_bits = in->throttle_reasons & THROTTLE_HW_MASK;
    }
    power(t, cfg, in, now_ms, &r);
    ecc(t, cfg, in, now_ms, &r);
    xid(t, in, now_ms, &r);
    s = 1 - (1 - r.level) * (1 - r.slope) * (1 - r.throttle) * (1 - r.power) * (1 - r.ecc_rate) *
                (1 - r.critical) * (1 - r.xid_other);
    s = clamp01(s);
    critical = r.critical > 0;

    /* Confirmation: continuously at or above the threshold, sample after sample; a dip, a gap or
     * a clock going backwards starts it again. */
    if (t->any && (now_ms < t->last_ms || now_ms - t->last_ms > cfg->gap_ms))
        t->above = false;
    if (s >= cfg->threshold) {
        if (!t->above) {
            t->above = true;
            t->above_ms = now_ms;
        }
    } else {
        t->above = false;
    }
    t->any = true;
    t->last_ms = now_ms;

    if (critical || (t->above && now_ms - t->above_ms >= cfg->confirm_ms))
        v = TIDE_RISK_PREDICTED;
    else if (t->above)
        v = TIDE_RISK_WATCH;
    else
        v = TIDE_RISK_OK;

    /* The text only when someone reads it: formatting it costs more than the rules (a heartbeat's budget). */
    if (v == TIDE_RISK_PREDICTED && !t->predicted) {
        t->predicted = true;
        t->predicted_ms = now_ms;
        describe(&r, t->predicted_why, sizeof(t->predicted_why));
    }
    if (t->predicted)
        v = TIDE_RISK_PREDICTED;
    if (score)
        *score = s;
    if (reason && len > 0) {
        if (t->predicted)
            snprintf(reason, len, "%s", t->predicted_why);
        else
            describe(&r, reason, len);
    }
    return v;
}
