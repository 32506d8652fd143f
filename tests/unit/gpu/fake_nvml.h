/* The fixed values of the fake libnvidia-ml (fake_nvml.c), shared with the test that checks them.
 */
#ifndef TIDE_FAKE_NVML_H
#define TIDE_FAKE_NVML_H

#define FAKE_NVML_COUNT           2
#define FAKE_NVML_NAME            "NVIDIA H100 80GB HBM3"
#define FAKE_NVML_MEM_TOTAL       (80ULL << 30)
#define FAKE_NVML_MEM_USED        (30ULL << 30)
#define FAKE_NVML_UTIL_GPU        87u /* % */
#define FAKE_NVML_UTIL_MEM        45u /* % */
#define FAKE_NVML_TEMP_C          61u
#define FAKE_NVML_POWER_MW        512345u
#define FAKE_NVML_POWER_LIMIT_MW  700000u
#define FAKE_NVML_SM_MHZ          1980u
#define FAKE_NVML_MEM_MHZ         2619u
#define FAKE_NVML_THROTTLE        0x4ULL /* nvmlClocksThrottleReasonSwPowerCap */
#define FAKE_NVML_ECC_CORRECTED   3ULL
#define FAKE_NVML_ECC_UNCORRECTED 1ULL

#endif
