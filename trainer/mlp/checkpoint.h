/* tide-mlp checkpoints: the whole training state (parameters, momentum, steps done, data position,
 * generation and the config it belongs to) in one self-checking file. The format, little-endian:
 *
 *   0  magic "TIDEMLP\0"      8  u32 version (1)     12 u32 input   16 u32 width   20 u32 depth
 *   24 u32 output             28 u32 micro_batches   32 u64 batch   40 u64 seed
 *   48 f64 lr                 56 f64 momentum        64 u64 steps_done
 *   72 u64 data_position (= steps_done * batch: the next global sample index)
 *   80 u64 generation         88 u64 n_params        96 f64 params[n]   then f64 velocity[n]
 *   then 32 bytes: SHA-256 of every byte before it.
 *
 * A file whose checksum, size, magic or version is wrong is never loaded. Files are named
 * mlp-STEPS.ckpt (STEPS = steps done, 12 digits) and written atomically (temporary file, fsync,
 * rename, fsync of the directory). docs/tide-mlp.md. */
#ifndef TIDE_MLP_CHECKPOINT_H
#define TIDE_MLP_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "mlp_config.h"

#define TIDE_MLP_CKPT_VERSION  1
#define TIDE_MLP_CKPT_HEADER   96
#define TIDE_MLP_CKPT_PATH_MAX 4096

typedef struct tide_mlp_state {
    tide_mlp_config_t cfg;
    uint64_t steps_done;
    uint64_t data_position;
    uint64_t generation;
    uint64_t n_params;
    double *params;   /* n_params; owned by whoever filled the state */
    double *velocity; /* n_params */
} tide_mlp_state_t;

/* The size of a checkpoint of n_params parameters. */
size_t tide_mlp_ckpt_size(uint64_t n_params);

/* Encodes s into buf (tide_mlp_ckpt_size(s->n_params) bytes, caller's). Fills sha256 (32 bytes)
 * with the trailing checksum when not NULL. */
void tide_mlp_ckpt_encode(const tide_mlp_state_t *s, uint8_t *buf, uint8_t *sha256);

/* Decodes and checks buf. `expect` is the running config: every field must match. On success fills
 * *s (params and velocity are allocated, caller frees with tide_mlp_state_free) and returns 0.
 * Returns -EBADMSG when the bytes are not a valid checkpoint (checksum, size, magic, version or
 * data position), -EINVAL when it is valid but belongs to another config (err names the field);
 * *s is untouched then. */
int tide_mlp_ckpt_decode(const uint8_t *buf, size_t len, const tide_mlp_config_t *expect,
                         tide_mlp_state_t *s, tide_error_t *err);

/* Frees params and velocity of a state filled by tide_mlp_ckpt_decode (NULL is fine). */
void tide_mlp_state_free(tide_mlp_state_t *s);

/* Writes s to DIR/mlp-STEPS.ckpt atomically, then deletes all but the newest `keep` checkpoints in
 * dir. Fills path (TIDE_MLP_CKPT_PATH_MAX bytes), *bytes and sha256_hex (65 bytes) when not NULL.
 * Returns 0 or a negative errno with err saying what failed (nothing is left half-written). */
int tide_mlp_ckpt_save(const char *dir, const tide_mlp_state_t *s, uint32_t keep, char *path,
                       uint64_t *bytes, char *sha256_hex, tide_error_t *err);

/* Loads the newest valid checkpoint in dir into *s (see tide_mlp_ckpt_decode). A file that is not
 * valid is named on `log` (when not NULL) and skipped for the next older one. Returns 0 (path
 * filled when not NULL), -ENOENT when dir has no checkpoint files (or does not exist), -EBADMSG
 * when it has some but none is valid, -EINVAL when the newest valid one is for another config, or
 * another negative errno for I/O errors; err says which. */
int tide_mlp_ckpt_load_newest(const char *dir, const tide_mlp_config_t *expect, tide_mlp_state_t *s,
                              char *path, FILE *log, tide_error_t *err);

/* SHA-256 of buf as 64 lowercase hex digits into hex (65 bytes). */
void tide_mlp_sha256_hex(const void *buf, size_t len, char *hex);

/* SHA-256 of n doubles encoded little-endian, as hex (65 bytes): the params-sha256 of a run. */
void tide_mlp_params_sha256_hex(const double *params, size_t n, char *hex);

#endif
