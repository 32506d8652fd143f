/* A fake libnvidia-ml for CI: exports the NVML functions tide's nvml backend uses (gpu_nvml_abi.h)
 * with fixed values, two "NVIDIA H100 80GB HBM3" devices, and failures chosen by environment:
 *   FAKE_NVML_FAIL=power,temperature  those calls return NVML_ERROR_UNKNOWN ("init" returns
 *       NVML_ERROR_DRIVER_NOT_LOADED); names: init count handle name memory utilization temperature
 *       power power_limit clock throttle ecc events wait
 *   FAKE_NVML_XID=79                  the first event wait delivers one XID 79
 *   FAKE_NVML_NAME="NVIDIA L4"        another device name
 * The environment is read once, in nvmlInit_v2, so no call races the test's setenv. Invariant:
 * every nvmlInit_v2 is matched by nvmlShutdown before the library is unloaded (checked in a
 * destructor). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_nvml.h"
#include "gpu_nvml_abi.h"

struct nvmlDevice_st {
    unsigned int index;
};

struct nvmlEventSet_st {
    nvmlDevice_t device; /* the one registered device, or NULL */
    unsigned long long types;
};

static struct nvmlDevice_st devices[FAKE_NVML_COUNT] = {{0}, {1}};
static char fail_list[256];
static char device_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
static unsigned int xid_code;
static atomic_bool xid_pending;
static atomic_int inits; /* nvmlInit_v2 calls not yet shut down */

__attribute__((destructor)) static void check_balanced(void)
{
    if (atomic_load(&inits) != 0) {
        fprintf(stderr, "fake_nvml: unloaded with %d nvmlInit_v2 not shut down\n",
                atomic_load(&inits));
        abort();
    }
}

static bool failing(const char *call)
{
    size_t n = strlen(call);

    for (const char *p = fail_list; *p;) {
        size_t len = strcspn(p, ",");

        if (len == n && strncmp(p, call, n) == 0)
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

static bool valid(nvmlDevice_t d)
{
    return d == &devices[0] || d == &devices[1];
}

nvmlReturn_t nvmlInit_v2(void)
{
    const char *fail = getenv("FAKE_NVML_FAIL");
    const char *xid = getenv("FAKE_NVML_XID");
    const char *name = getenv("FAKE_NVML_NAME");

    snprintf(fail_list, sizeof(fail_list), "%s", fail ? fail : "");
    snprintf(device_name, sizeof(device_name), "%s", name ? name : FAKE_NVML_NAME);
    xid_code = xid ? (unsigned int)strtoul(xid, NULL, 10) : 0;
    atomic_store(&xid_pending, xid_code != 0);
    if (failing("init"))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    atomic_fetch_add(&inits, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    if (atomic_load(&inits) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    atomic_fetch_sub(&inits, 1);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (failing("count"))
        return NVML_ERROR_UNKNOWN;
    *deviceCount = FAKE_NVML_COUNT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (failing("handle"))
        return NVML_ERROR_UNKNOWN;
    if (index >= FAKE_NVML_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("name"))
        return NVML_ERROR_UNKNOWN;
    if (strlen(device_name) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, device_name, strlen(device_name) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("memory"))
        return NVML_ERROR_UNKNOWN;
    memory->total = FAKE_NVML_MEM_TOTAL;
    memory->used = FAKE_NVML_MEM_USED;
    memory->free = FAKE_NVML_MEM_TOTAL - FAKE_NVML_MEM_USED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("utilization"))
        return NVML_ERROR_UNKNOWN;
    utilization->gpu = FAKE_NVML_UTIL_GPU;
    utilization->memory = FAKE_NVML_UTIL_MEM;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    if (!valid(device) || sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("temperature"))
        return NVML_ERROR_UNKNOWN;
    *temp = FAKE_NVML_TEMP_C;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("power"))
        return NVML_ERROR_UNKNOWN;
    *power = FAKE_NVML_POWER_MW;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("power_limit"))
        return NVML_ERROR_UNKNOWN;
    *limit = FAKE_NVML_POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    if (!valid(device) || (type != NVML_CLOCK_SM && type != NVML_CLOCK_MEM))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("clock"))
        return NVML_ERROR_UNKNOWN;
    *clock = type == NVML_CLOCK_SM ? FAKE_NVML_SM_MHZ : FAKE_NVML_MEM_MHZ;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *clocksThrottleReasons)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("throttle"))
        return NVML_ERROR_UNKNOWN;
    *clocksThrottleReasons = FAKE_NVML_THROTTLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts)
{
    if (!valid(device) || counterType != NVML_VOLATILE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("ecc"))
        return NVML_ERROR_UNKNOWN;
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *eccCounts = FAKE_NVML_ECC_CORRECTED;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = FAKE_NVML_ECC_UNCORRECTED;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (failing("events"))
        return NVML_ERROR_UNKNOWN;
    *set =
        calloc(1, sizeof(**set)); /* freed by nvmlEventSetFree: LeakSanitizer checks the caller */
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    if (!valid(device) || !set)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->device = device;
    set->types |= eventTypes;
    return NVML_SUCCESS;
}

/* Returns at once with the pending XID, else after a short nap with NVML_ERROR_TIMEOUT: the real
 * call may also return early, so the caller must treat a timeout as "wait again". */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct timespec nap = {0, 5 * 1000 * 1000};

    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("wait"))
        return NVML_ERROR_UNKNOWN;
    if ((set->types & nvmlEventTypeXidCriticalError) && atomic_exchange(&xid_pending, false)) {
        memset(data, 0, sizeof(*data));
        data->device = set->device;
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = xid_code;
        return NVML_SUCCESS;
    }
    if (timeoutms < 5)
        nap.tv_nsec = (long)timeoutms * 1000 * 1000;
    nanosleep(&nap, NULL);
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set);
    return NVML_SUCCESS;
}
