/* Scripted perturbations of a worker (`tide-worker --perturb FILE`, docs/worker.md): one per line,
 * `SECONDS ACTION [ARG]` counted from the worker's start, `#` starts a comment:
 *   slow PERCENT            run the ranks at PERCENT% speed from then on (100 restores)
 *   heat CELSIUS_PER_MINUTE the GPU warms (or cools, negative) at that rate from then on
 *   ecc CORRECTED_PER_MINUTE corrected ECC errors accrue at that rate from then on
 *   ecc-uncorrected COUNT   COUNT uncorrected ECC errors at once
 *   xid CODE                one XID event with that code
 *   die                     the worker dies
 * Parsing and "what holds at time t" are pure, so every telemetry backend (sim, cpu, nvml) overlays
 * the same script the same way, and the simulator can replay it on a virtual clock. */
#ifndef TIDE_WORKER_PERTURB_H
#define TIDE_WORKER_PERTURB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gpu.h"

typedef enum tide_perturb_action {
    TIDE_PERTURB_SLOW = 0,
    TIDE_PERTURB_HEAT,
    TIDE_PERTURB_ECC,
    TIDE_PERTURB_ECC_UNCORRECTED,
    TIDE_PERTURB_XID,
    TIDE_PERTURB_DIE,
} tide_perturb_action_t;

typedef struct tide_perturb_event {
    int64_t at_ms;
    tide_perturb_action_t action;
    double value; /* PERCENT, CELSIUS_PER_MINUTE, CORRECTED_PER_MINUTE, COUNT or CODE; 0 for die */
    int line;     /* where it was written */
} tide_perturb_event_t;

typedef struct tide_perturb {
    tide_perturb_event_t *events; /* n, ordered by at_ms (lines with the same time keep their order) */
    size_t n;
} tide_perturb_t;

/* What the script says holds at a time. */
typedef struct tide_perturb_state {
    double speed;             /* 0.01..1: fraction of full speed */
    double heat_c;            /* degrees added to the temperature so far */
    uint64_t ecc_corrected;   /* added so far */
    uint64_t ecc_uncorrected; /* added so far */
    uint64_t xid_count;       /* events so far */
    uint32_t last_xid;        /* the newest code, 0: none */
    bool die;
} tide_perturb_state_t;

/* Parses text (NUL-terminated); name is the file name for messages. Returns 0 and fills *out, or
 * -EINVAL with err naming the line ("perturb.txt:3: unknown action 'hot' (slow, heat, ecc,
 * ecc-uncorrected, xid, die)"). An empty script is fine. */
int tide_perturb_parse(const char *text, const char *name, tide_perturb_t *out, tide_error_t *err);
/* Reads and parses a file (at most 1 MiB). -errno with err naming the file. */
int tide_perturb_load(const char *path, tide_perturb_t *out, tide_error_t *err);
void tide_perturb_free(tide_perturb_t *p);

/* The state at t_ms since the worker's start. O(events). */
void tide_perturb_state_at(const tide_perturb_t *p, int64_t t_ms, tide_perturb_state_t *st);
/* Overlays st on a reading: temperature + heat, ECC counts added, XID added (marking those fields
 * known). Utilization is left to the backend, which sees the slowed ranks. */
void tide_perturb_apply(const tide_perturb_state_t *st, tide_gpu_telemetry_t *t);

#endif
