/* Rule-based failure risk (risk.h). Each rule gives a value in 0..1 and the risk is the largest;
 * the values are documented in docs/metrics.md and kept here in one table of constants. */
#include "risk.h"

#define RISK_ECC_UNCORRECTED 0.9 /* uncorrectable memory errors: retire the pages, expect more */
#define RISK_XID_CRITICAL    0.8 /* the driver reported a failing GPU or memory */
#define RISK_XID_OTHER       0.3 /* any other XID: often the application, sometimes the GPU */
#define RISK_HOT             0.6 /* at TIDE_RISK_HOT_C and above */
#define RISK_HW_SLOWDOWN     0.3 /* the GPU slows itself down: thermal or power brake */

/* NVML clocks-event reasons that mean the hardware protects itself (not the user's clock caps):
 * HW slowdown 0x8, SW thermal slowdown 0x20, HW thermal slowdown 0x40, HW power brake 0x80. */
#define THROTTLE_HW_MASK 0xe8u

static double max2(double a, double b)
{
    return a > b ? a : b;
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
