/* The worker's checkpoint tier store (issue 8 part 4; docs/worker.md, "Durable checkpoint copies").
 * A copy of one rank's checkpoint in a tier lives at TIERDIR/JOB/step-STEP/rank-RANK/: the
 * trainer's file(s), one level, and a manifest `tide-manifest.json` naming each file with its size
 * and SHA-256. Blocking file I/O, thread-safe, no global state, never logs: run it off the loop
 * (the threadpool, as tide_flush_copy). */
#ifndef TIDE_WORKER_CKPT_STORE_H
#define TIDE_WORKER_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "fs_as.h"

#define TIDE_CKPT_MANIFEST "tide-manifest.json"
/* Limits a manifest must respect (anything beyond is refused as -EINVAL). */
#define TIDE_CKPT_MAX_FILES      65536
#define TIDE_CKPT_MAX_FILE_BYTES (UINT64_C(1) << 50) /* 1 PiB */
#define TIDE_CKPT_MAX_SKIPS      8                   /* skips kept in tide_ckpt_found_t */

typedef struct tide_ckpt_file {
    /* A plain file name inside the rank directory: no '/', not "" / "." / ".." / the manifest's. */
    char *name;
    uint64_t bytes;
    char sha256[65]; /* lowercase hex */
} tide_ckpt_file_t;

/* A manifest. Filled by tide_ckpt_verify / tide_ckpt_meta_scan / tide_ckpt_find: then it owns its
 * strings and is freed by tide_ckpt_meta_clear. Given to tide_ckpt_manifest_write: borrowed. */
typedef struct tide_ckpt_meta {
    char *job; /* a valid job id (tide_worker_job_id_valid) */
    int32_t generation;
    int64_t step;
    int32_t rank;
    tide_ckpt_file_t *files; /* sorted by name when filled here */
    size_t n_files;          /* at least 1 */
    /* The trainer's sha256 for the whole checkpoint (lowercase hex; "" when it reported none): the
     * file's when it is one file, else flush_copy's directory rule (the SHA-256 of the lines
     * "HEX  NAME\n" of its files sorted by name). tide_ckpt_verify checks it against the files. */
    char sha256[65];
    int64_t time_ms; /* wall clock when written; 0 given to manifest_write: now */
} tide_ckpt_meta_t;

/* Frees what meta holds and zeroes it. NULL is fine. */
void tide_ckpt_meta_clear(tide_ckpt_meta_t *meta);

/* TIERDIR/JOB/step-STEP/rank-RANK. Caller frees. */
char *tide_ckpt_rank_dir(const char *tierdir, const char *job, int64_t step, int32_t rank);

/* Fills *out for the checkpoint already in dir: its regular files (one level; the manifest and its
 * temporary names left out), each hashed; job, generation, step and rank copied from the arguments
 * (job borrowed), sha256 = trainer_sha256 (lowercased; NULL or "": the one file's sha, or the
 * directory rule for several), time_ms 0. Returns 0, -ENOENT (no files), -EINVAL (a bad argument),
 * -EBADMSG (trainer_sha256 is neither the one file's nor the directory rule's: the files are not
 * what the trainer reported) or -errno, with err naming the path; *out is zeroed on failure.
 * Symbolic links and subdirectories in dir are not part of the checkpoint. Caller clears *out. */
int tide_ckpt_meta_scan(const char *dir, const char *job, int32_t generation, int64_t step,
                        int32_t rank, const char *trainer_sha256, tide_ckpt_meta_t *out,
                        tide_error_t *err);

/* Writes meta (borrowed) as dir/tide-manifest.json: through a temporary name in dir, fsynced,
 * renamed into place (replacing an older manifest), dir fsynced. Does not read the files. Returns
 * 0, -EINVAL (meta breaks a rule above, err names the field) or -errno; on failure no temporary
 * file is left and an existing manifest is untouched. */
int tide_ckpt_manifest_write(const char *dir, const tide_ckpt_meta_t *meta, tide_error_t *err);

/* Reads dir/tide-manifest.json into *out (caller clears) and re-hashes every listed file. Returns
 * 0; -ENOENT (no manifest); -EINVAL (bad JSON, a missing or mistyped field, a bad name such as one
 * with
 * '/' or "..", an absurd size or count; err names it); -EBADMSG (a listed file is missing, is not a
 * regular file, or its size or SHA-256 differs; or the whole sha256 matches none of the files: err
 * names the file with expected and actual); other -errno. *out is zeroed on failure. */
int tide_ckpt_verify(const char *dir, tide_ckpt_meta_t *out, tide_error_t *err);

typedef struct tide_ckpt_tier {
    const char *name; /* "hot", "mirror", "warm", "cold" ...; borrowed */
    const char *dir;  /* TIERDIR; borrowed; NULL or "": the tier is skipped */
    /* NULL: read as the caller. Else the tier is read with this account's file-system identity
     * (fs_as.h): a hot tier's TIERDIR/JOB belongs to the rank's account when it runs as another */
    const tide_fs_account_t *as;
} tide_ckpt_tier_t;

/* One copy tide_ckpt_find passed over. */
typedef struct tide_ckpt_skip {
    const char *tier; /* the search's tier name (borrowed from it) */
    int64_t step;     /* -1: the tier's TIERDIR/JOB could not be read at all */
    int rc;           /* why: -ENOENT no copy of the rank / no manifest, -EINVAL bad manifest,
                         -EBADMSG corrupt or truncated, -ESTALE another job / rank / step or a
                         generation above the bound, other -errno */
    char reason[256]; /* e.g. "rank-0/ckpt.bin: sha256 X, manifest says Y" */
} tide_ckpt_skip_t;

typedef void (*tide_ckpt_skip_cb)(void *ud, const tide_ckpt_skip_t *skip);

typedef struct tide_ckpt_search {
    const tide_ckpt_tier_t *tiers; /* in order of preference; borrowed */
    size_t n_tiers;
    const char *job; /* borrowed */
    int32_t rank;
    int64_t resume_step; /* the newest acceptable step; -1: any */
    int32_t generation;  /* the caller's: copies written by a higher one are skipped; -1: any */
    tide_ckpt_skip_cb on_skip; /* optional: called for every skip, in search order */
    void *ud;
} tide_ckpt_search_t;

typedef struct tide_ckpt_found {
    size_t tier;                                   /* index into the search's tiers */
    char *path;                                    /* the rank directory of the copy; owned */
    tide_ckpt_meta_t meta;                         /* its verified manifest; owned */
    tide_ckpt_skip_t skipped[TIDE_CKPT_MAX_SKIPS]; /* the first skips, in search order */
    size_t n_skipped;                              /* all skips (may exceed TIDE_CKPT_MAX_SKIPS) */
} tide_ckpt_found_t;

/* Finds the newest step <= resume_step of (job, rank) with a copy that belongs to the caller's
 * lineage and verifies: steps newest first, and for one step the tiers in order (an earlier tier
 * wins a tie; a newer step in a later tier beats an older one in an earlier tier). Reads one
 * directory per tier (TIERDIR/JOB; names starting with '.' are copies being written) and then only
 * the candidates it tries. Returns 0 with *out filled, or -ENOENT (nothing usable; err says so) or
 * -EINVAL (a bad search); in both cases out->skipped / n_skipped still tell what was passed over.
 * Caller clears *out with tide_ckpt_found_clear either way. */
int tide_ckpt_find(const tide_ckpt_search_t *s, tide_ckpt_found_t *out, tide_error_t *err);
/* Frees what found holds and zeroes it. NULL is fine. */
void tide_ckpt_found_clear(tide_ckpt_found_t *found);

/* Keeps the newest `keep` (>= 0) steps of job in the tier at tierdir and removes the others (each
 * renamed to a '.' name first, so a reader never finds half a step). Names starting with '.' (steps
 * being written) and anything not "step-N" are left alone. Returns 0 (also when TIERDIR/JOB does
 * not exist) or -errno (-EINVAL for a bad argument) with err naming the path; steps removed before
 * a failure stay removed. */
int tide_ckpt_prune(const char *tierdir, const char *job, int keep, tide_error_t *err);

#endif
