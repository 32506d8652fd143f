/* What telemetry costs a worker (docs/performance.md): the time of one reading of each backend the
 * worker can use (sim, cpu tracking a busy process, nvml when a libnvidia-ml loads, and the node's
 * network and storage figures), as a share of one core at the default 2 readings a second; and the
 * size on the wire of a heartbeat carrying every telemetry field, with and without one SDK rank's
 * progress. Usage: tide-bench-telemetry [READS] (default 20000). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gpu.h"
#include "hostio.h"
#include "tide/v1/worker_service.pb-c.h"

#define READS_PER_S 2.0 /* the worker reads once per 500 ms heartbeat */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void row(const char *what, double us)
{
    printf("| %-44s | %8.2f | %7.4f%% |\n", what, us, us * READS_PER_S / 1e6 * 100);
}

static void bench_gpu(const char *spec, const char *what, long reads, const int32_t *pids,
                      size_t n_pids)
{
    tide_gpu_t *g = NULL;
    tide_gpu_telemetry_t t;
    tide_error_t err;
    double t0;

    tide_error_clear(&err);
    if (tide_gpu_open(spec, 0, tide_clock_mono_ms(), 1e12, &g, &err) < 0) {
        printf("| %-44s | %8s | %8s |\n", what, "-", "-");
        fprintf(stderr, "%s: %s\n", spec, err.text);
        return;
    }
    t0 = now_s();
    for (long i = 0; i < reads; i++) {
        tide_gpu_track(g, pids, n_pids);
        tide_gpu_read(g, tide_clock_mono_ms(), true, &t);
    }
    row(what, (now_s() - t0) / (double)reads * 1e6);
    tide_gpu_close(g);
}

static void bench_hostio(long reads)
{
    tide_hostio_config_t cfg;
    tide_hostio_t *h = NULL;
    tide_hostio_reading_t r;
    tide_error_t err;
    double t0;

    memset(&cfg, 0, sizeof(cfg));
    tide_error_clear(&err);
    if (tide_hostio_open(&cfg, tide_clock_mono_ms(), &h, &err) < 0) {
        fprintf(stderr, "hostio: %s\n", err.text);
        return;
    }
    t0 = now_s();
    for (long i = 0; i < reads; i++)
        tide_hostio_read(h, tide_clock_mono_ms(), &r);
    row("node network + storage (hostio, defaults)", (now_s() - t0) / (double)reads * 1e6);
    tide_hostio_close(h);
}

/* A heartbeat with every telemetry field set to a realistic value (large counters, odd fractions),
 * packed as the worker sends it. */
static void heartbeat_size(void)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__Heartbeat hb = TIDE__V1__HEARTBEAT__INIT;
    Tide__V1__Telemetry t = TIDE__V1__TELEMETRY__INIT;
    Tide__V1__RankProgress rp = TIDE__V1__RANK_PROGRESS__INIT;
    Tide__V1__TrainerProgress p = TIDE__V1__TRAINER_PROGRESS__INIT;
    Tide__V1__RankProgress *prog[1] = {&rp};
    size_t bare, full;

    t.gpu_util = 0.973;
    t.mem_used_bytes = 123456789012ULL;
    t.mem_total_bytes = 150323855360ULL;
    t.temperature_c = 71.5;
    t.power_w = 612.25;
    t.mem_bw_util = 0.4417;
    t.sm_clock_mhz = 1980;
    t.mem_clock_mhz = 3201;
    t.throttle_reasons = 0x4;
    t.ecc_corrected = 1234;
    t.ecc_uncorrected = 1;
    t.xid_count = 2;
    t.last_xid = 79;
    t.net_util = 0.3125;
    t.storage_util = 0.0731;
    t.known = 0x7ff;
    hb.telemetry = &t;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT;
    m.heartbeat = &hb;
    bare = tide__v1__worker_message__get_packed_size(&m);

    p.sdk = true;
    p.step = 123456;
    p.phase = 2;
    p.step_flops = 3.7e15;
    p.samples = 1024;
    p.tokens = 4194304;
    p.step_seconds = 1.234;
    p.steps_reported = 123456;
    p.last_report_ms = 1796000000000LL;
    p.flops_per_s = 3.01e15;
    p.flops_per_s_5m = 2.98e15;
    p.flops_per_s_life = 2.95e15;
    p.peak_flops = 989e12 * 8;
    p.mfu = 0.3804;
    rp.job_id = "j-000123";
    rp.generation = 3;
    rp.rank = 17;
    rp.progress = &p;
    hb.n_progress = 1;
    hb.progress = prog;
    full = tide__v1__worker_message__get_packed_size(&m);
    printf("\nHeartbeat on the wire (protobuf, + 5 bytes of gRPC framing): every telemetry field %zu "
           "bytes; with one SDK rank's progress %zu bytes (target <= 256)\n",
           bare, full);
}

int main(int argc, char **argv)
{
    long reads = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    int32_t child;

    if (reads <= 0)
        reads = 20000;
    /* A busy process for the cpu backend to measure (its /proc files change between reads). */
    child = (int32_t)fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the bench, even if it crashes */
        for (volatile unsigned long x = 0;; x++)
            ;
    }
    printf("Telemetry: time per reading, and its share of one core at %.0f readings/s (%ld reads)\n\n",
           READS_PER_S, reads);
    printf("| %-44s | %8s | %8s |\n", "reading", "us", "core");
    printf("|%s|%s|%s|\n", "----------------------------------------------", "----------",
           "----------");
    bench_gpu("sim:h100", "sim:h100", reads, NULL, 0);
    bench_gpu("cpu", "cpu (one busy rank, via its parent)", reads, &child, child > 0 ? 1 : 0);
    bench_gpu("nvml", "nvml (libnvidia-ml.so.1 or $TIDE_NVML_LIB)", reads / 10, NULL, 0);
    bench_hostio(reads);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    heartbeat_size();
    return 0;
}
