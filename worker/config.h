/* tide-worker's command line and environment (docs/worker.md, "Flags"). */
#ifndef TIDE_WORKER_CONFIG_H
#define TIDE_WORKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "error.h"
#include "log.h"
#include "tls.h"

typedef struct tide_worker_config {
    char *scheduler; /* HOST:PORT */
    char *id;        /* NODE/gpuINDEX by default */
    char *node;      /* hostname by default */
    int32_t gpu_index;
    char *gpu;                   /* "sim:h100" by default; checked when the GPU is opened */
    tide_worker_label_t *labels; /* n_labels entries; keys and values owned */
    size_t n_labels;
    char *advertise; /* hostname by default */
    char *listen;    /* HOST:PORT of the WorkerLauncher service (docs/mpi.md) */
    char *perturb;   /* --perturb FILE: scripted perturbations (perturb.h); NULL: none */
    double peak_flops; /* --peak-flops: the MFU denominator instead of the device's; 0: the device's */
    char *net_devs;          /* --net-dev: interfaces (worker/hostio.h); NULL: the default set */
    double net_capacity;     /* --net-capacity bytes/s; 0: link speeds */
    char *storage_devs;      /* --storage-dev: disks; NULL: every whole disk */
    double storage_capacity; /* --storage-capacity bytes/s; 0: busy-time fraction */
    bool probe;              /* --probe: print one reading and exit (probe.h) */
    bool allow_root_jobs;    /* --allow-root-jobs: a root worker may run ranks as root (run_as.h) */
    bool slurm;              /* started by srun (SLURM_JOB_ID): GPU, node and slurm.* labels from Slurm (slurm.h) */
    char *ckpt_durable; /* --ckpt-durable DIR (absolute): where checkpoint copies go, instead
                           of the scheduler's directory; NULL: the scheduler's (flush.h) */
    char *ckpt_hot;  /* --ckpt-hot DIR (absolute): the hot tier (ckpt_tiers.h); default
                        /dev/shm/tide-UID/SAFE_ID when /dev/shm is a writable directory, else
                        DATADIR/ckpt-hot */
    char *ckpt_warm; /* --ckpt-warm DIR (absolute): the warm tier; default DATADIR/ckpt-warm */
    int ckpt_keep_hot;  /* --ckpt-keep-hot N (>= 1): newest steps kept per job in hot; 2 */
    int ckpt_keep_warm; /* --ckpt-keep-warm N (>= 1): the same in warm; 4 */
    int64_t ckpt_hot_ttl_ms; /* --ckpt-hot-ttl DURATION: at start and hourly, HOT/JOB and HOT/mirror/JOB
                                of jobs with no rank here whose newest file is older go; 24 h; 0: never */
    int ckpt_mirror_min_free; /* --ckpt-mirror-min-free PCT (0..90): peers' mirror copies leave this % of
                                 the hot tier's filesystem free; 25; 0: no limit */
    char *data_dir;  /* /var/lib/tide/worker/NODE-gpuINDEX by default */
    char *token;     /* NULL: none */
    /* TLS (docs/security.md): --tls-cert/--tls-key/--tls-ca, else TIDE_TLS_CERT/KEY/CA; NULL: none. With
     * tls_ca the worker's calls (scheduler, peers) are TLS; with tls_cert its own server (WorkerLauncher,
     * WorkerCheckpoints) is, and the certificate is its client certificate too. */
    char *tls_cert, *tls_key, *tls_ca;
    bool insecure;              /* --insecure: plaintext to or on non-loopback addresses */
    tide_tls_ctx_t *tls_client; /* built by tide_worker_config_load_tls from tls_ca (+ cert); owned */
    tide_tls_ctx_t *tls_server; /* ... from tls_cert/tls_key (tls_ca verifies peers' certificates); owned */
    tide_log_level_t log_level;
    uint32_t stop_grace_ms;
} tide_worker_config_t;

/* Parses argv (and TIDE_SCHEDULER, TIDE_TOKEN, TIDE_TOKEN_FILE) into cfg, filling defaults. Returns
 * 0; 1 for --help (nothing else filled); -EINVAL with one line in err naming the bad flag. The
 * caller frees cfg with tide_worker_config_free in every case. */
int tide_worker_config_parse(int argc, char **argv, tide_worker_config_t *cfg, tide_error_t *err);
void tide_worker_config_free(tide_worker_config_t *cfg);
/* Applies the plaintext rule (a non-loopback scheduler or --listen needs TLS or --insecure: -EPERM with err
 * naming the address and the flags) and reads the TLS files into cfg->tls_client / tls_server (NULL where
 * not configured). Returns 0, or -errno with err naming the file that cannot be read or the key that does
 * not match. tide-worker exits 1 on either. */
int tide_worker_config_load_tls(tide_worker_config_t *cfg, tide_error_t *err);
/* The --help text (static). */
const char *tide_worker_usage(void);

#endif
