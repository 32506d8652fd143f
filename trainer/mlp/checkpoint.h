/* tide-mlp checkpoints: the whole training state (parameters, momentum, steps done, data position,
 * the job and generation that wrote it, and the config it belongs to) in one self-checking file.
 * The format, little-endian:
 *
 *   0  magic "TIDEMLP\0"      8  u32 version (2)     12 u32 input   16 u32 width   20 u32 depth
 *   24 u32 output             28 u32 micro_batches   32 u64 batch   40 u64 seed
 *   48 f64 lr                 56 f64 momentum        64 u64 steps_done
 *   72 u64 data_position (= steps_done * batch: the next global sample index)
 *   80 u64 generation         88 u64 n_params        96 u64 job
 *   104 f64 params[n]   then f64 velocity[n]   then 32 bytes: SHA-256 of every byte before it.
 *
 * Version 1 (still read, never written) has no job field: its params start at 96, and it counts as
 * job 0. A file whose checksum, size, magic or version is wrong is never loaded. Files are named
 * mlp-STEPS.ckpt (STEPS = steps done, 12 digits) and written atomically (temporary file, fsync,
 * rename, fsync of the directory). Generations (TIDE_GENERATION, 0 outside tide) order the lineage
 * of one job (TIDE_JOB_ID, 0 outside tide): a run of job j > 0 and generation g > 0 neither loads a
 * checkpoint of job j from a later generation nor writes into a directory that holds one (it is a
 * stale rank), and takes job j's newest generation's newest step, not the highest step (a stale
 * branch may have written higher ones). Other jobs' checkpoints load by step when job j has none of
 * its own (a new job resumes an old job's directory).
 * docs/tide-mlp.md. */
#ifndef TIDE_MLP_CHECKPOINT_H
#define TIDE_MLP_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "mlp_config.h"

#define TIDE_MLP_CKPT_VERSION   2
#define TIDE_MLP_CKPT_HEADER    104 /* version 2 */
#define TIDE_MLP_CKPT_HEADER_V1 96
#define TIDE_MLP_CKPT_PATH_MAX  4096

typedef struct tide_mlp_state {
    tide_mlp_config_t cfg;
    uint64_t steps_done;
    uint64_t data_position;
    uint64_t generation;
    uint64_t job; /* TIDE_JOB_ID of the writer: 0 outside tide, when not a number, in version 1 */
    uint64_t n_params;
    double *params;   /* n_params; owned by whoever filled the state */
    double *velocity; /* n_params */
} tide_mlp_state_t;

/* The size of a (version 2) checkpoint of n_params parameters. */
size_t tide_mlp_ckpt_size(uint64_t n_params);

/* Encodes s into buf (tide_mlp_ckpt_size(s->n_params) bytes, caller's) in the current version.
 * Fills sha256 (32 bytes) with the trailing checksum when not NULL. */
void tide_mlp_ckpt_encode(const tide_mlp_state_t *s, uint8_t *buf, uint8_t *sha256);

/* Decodes and checks buf (version 1 or 2). `expect` is the running config: every field must match.
 * On success fills *s (job 0 for version 1; params and velocity are allocated, caller frees with
 * tide_mlp_state_free) and returns 0.
 * Returns -EBADMSG when the bytes are not a valid checkpoint (checksum, size, magic, version or
 * data position), -EINVAL when it is valid but belongs to another config (err names the field);
 * *s is untouched then. */
int tide_mlp_ckpt_decode(const uint8_t *buf, size_t len, const tide_mlp_config_t *expect,
                         tide_mlp_state_t *s, tide_error_t *err);

/* Frees params and velocity of a state filled by tide_mlp_ckpt_decode (NULL is fine). */
void tide_mlp_state_free(tide_mlp_state_t *s);

/* Writes s to DIR/mlp-STEPS.ckpt atomically, then deletes all but the newest `keep` checkpoints in
 * dir (the new one always stays) in tide_mlp_ckpt_load_newest's order for job s->job, generation
 * s->generation; files ranked above the new one stay and do not count. Fills path
 * (TIDE_MLP_CKPT_PATH_MAX bytes), *bytes and sha256_hex (65 bytes) when not NULL. When s->job and
 * s->generation are > 0 it first runs tide_mlp_ckpt_check_lineage: -ESTALE, nothing written, err
 * "generation 2 is stale: ...; not saving". Returns 0 or a negative errno with err saying what
 * failed (nothing is left half-written). */
int tide_mlp_ckpt_save(const char *dir, const tide_mlp_state_t *s, uint32_t keep, char *path,
                       uint64_t *bytes, char *sha256_hex, tide_error_t *err);

/* Loads the newest valid checkpoint in dir into *s (see tide_mlp_ckpt_decode). Newest: when job > 0
 * and max_generation > 0, job `job`'s own valid files come first, by (generation, step), then all
 * others (other jobs', job 0's) by step; else by step alone. A file that is not valid, or was
 * written by job `job` in a generation above max_generation, is named on `log` (when not NULL) and
 * skipped for the next one; other jobs' files (and job 0's) load whatever their generation. Returns
 * 0 (path filled when not NULL), -ENOENT when dir has no checkpoint files (or does not exist),
 * -ESTALE when none was loaded and some valid ones were refused for their generation, -EBADMSG when
 * it has some but none is valid, -EINVAL when the newest valid one is for another config, or
 * another negative errno for I/O errors; err says which. */
int tide_mlp_ckpt_load_newest(const char *dir, const tide_mlp_config_t *expect, uint64_t job,
                              uint64_t max_generation, tide_mlp_state_t *s, char *path, FILE *log,
                              tide_error_t *err);

/* Job `job`'s newest lineage in dir: the highest generation among its valid checkpoints written by
 * that job (job 0: by any job; valid = checksum, format and a name that matches the step inside;
 * any config) into *generation, and the newest step of that generation into *steps. Returns 1, 0
 * when dir has no such checkpoint (or does not exist), or a negative errno when dir cannot be read
 * (err says why). */
int tide_mlp_ckpt_newest_generation(const char *dir, uint64_t job, uint64_t *generation,
                                    uint64_t *steps, tide_error_t *err);

/* The stale-rank guard: whether generation `generation` of job `job` may continue dir's lineage.
 * Only that job's checkpoints count. Returns 0 when job or generation is 0 (outside tide) or no
 * valid checkpoint of this job in dir is from a later generation, -ESTALE when one is (err:
 * "generation 2 is stale: the checkpoint directory has generation 3's step 140"), or a negative
 * errno when dir cannot be read. */
int tide_mlp_ckpt_check_lineage(const char *dir, uint64_t job, uint64_t generation,
                                tide_error_t *err);

/* The steps of dir's checkpoint files (by their names, valid or not), newest first, into *steps
 * (caller frees; NULL when there are none). Returns the count, 0 when dir does not exist, or a
 * negative errno. */
int tide_mlp_ckpt_list(const char *dir, uint64_t **steps);

/* A hint, for choosing among files cheaply: the job and generation in the header of dir's
 * checkpoint of `steps` (mlp-STEPS.ckpt), read without checking the checksum (a loader checks it).
 * Returns 0, -EBADMSG when the file is too short or not a checkpoint (magic, version), or a
 * negative errno from opening or reading it (-ENOENT: gone). */
int tide_mlp_ckpt_peek(const char *dir, uint64_t steps, uint64_t *job, uint64_t *generation);

/* Loads dir's checkpoint of `steps` (mlp-STEPS.ckpt) into *s, as tide_mlp_ckpt_decode does
 * (caller frees with tide_mlp_state_free). Returns 0, -EBADMSG when it is not valid or holds
 * another step than its name, -EINVAL for another config, or a negative errno from reading it
 * (-ENOENT: no such file); err says which. *s is untouched on failure. */
int tide_mlp_ckpt_load_step(const char *dir, uint64_t steps, const tide_mlp_config_t *expect,
                            tide_mlp_state_t *s, tide_error_t *err);

/* TIDE_JOB_ID as a checkpoint records it: the decimal number (1 .. 2^64-1), or 0 when s is NULL,
 * empty or not entirely a decimal number that fits. */
uint64_t tide_mlp_job_id(const char *s);

/* SHA-256 of buf as 64 lowercase hex digits into hex (65 bytes). */
void tide_mlp_sha256_hex(const void *buf, size_t len, char *hex);

/* SHA-256 of n doubles encoded little-endian, as hex (65 bytes): the params-sha256 of a run. */
void tide_mlp_params_sha256_hex(const double *params, size_t n, char *hex);

#endif
