/* The trainer protocol, worker side: line framing of a byte stream and decoding of one line into a
 * validated message; encoding of the worker's messages. docs/trainer-api.md is the contract. Pure C
 * (cJSON for parsing), no I/O, so it is unit-tested and fuzzed directly (tests/fuzz/fuzz_trainer_proto).
 */
#ifndef TIDE_WORKER_TRAINER_PROTO_H
#define TIDE_WORKER_TRAINER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Longest line, newline included. */
#define TIDE_TRAINER_LINE_MAX 65536

typedef enum tide_trainer_op {
    TIDE_TRAINER_OP_HELLO = 1,
    TIDE_TRAINER_OP_STEP,
    TIDE_TRAINER_OP_PHASE,
    TIDE_TRAINER_OP_CHECKPOINT,
    /* tide-rank-exec (MPI ranks, docs/mpi.md), not trainers */
    TIDE_TRAINER_OP_ATTACH,
    TIDE_TRAINER_OP_EXITED,
    /* tasks (docs/work-stealing.md) */
    TIDE_TRAINER_OP_TASKS,
    TIDE_TRAINER_OP_NEXT_TASK,
    /* phase-aware burst (docs/elastic.md, "Burst") */
    TIDE_TRAINER_OP_LOAD,
    /* checkpoint tiers (docs/trainer-api.md, "Checkpoint tiers") */
    TIDE_TRAINER_OP_RESTORE,
} tide_trainer_op_t;

/* Kinds of task pool (docs/work-stealing.md); same values as tide.v1.TaskKind. */
typedef enum tide_trainer_kind {
    TIDE_TRAINER_KIND_MEMBER = 1,
    TIDE_TRAINER_KIND_DETACHED = 2,
} tide_trainer_kind_t;

/* Bounds of a `tasks` declaration. */
#define TIDE_TRAINER_TASKS_MAX_IDS   4096    /* ids one rank declares per pool */
#define TIDE_TRAINER_TASKS_MAX_TOTAL 1048576 /* tasks in one pool */
#define TIDE_TRAINER_TASK_ID_MAX     UINT64_C(9007199254740991) /* 2^53 - 1 */

/* Same values as tide_phase_t in trainer/tide_trainer.h and tide.v1.TrainerPhase - 1. */
typedef enum tide_trainer_phase {
    TIDE_TRAINER_PHASE_FORWARD = 0,
    TIDE_TRAINER_PHASE_BACKWARD,
    TIDE_TRAINER_PHASE_UPDATE,
    TIDE_TRAINER_PHASE_EVAL,
    TIDE_TRAINER_PHASE_CHECKPOINT,
    TIDE_TRAINER_PHASE_IDLE,
    TIDE_TRAINER_PHASE_COUNT
} tide_trainer_phase_t;

/* Error codes of the protocol; tide_trainer_err_name gives the wire string ("bad_json", ...). */
typedef enum tide_trainer_err {
    TIDE_TRAINER_OK = 0,
    TIDE_TRAINER_ERR_BAD_JSON,
    TIDE_TRAINER_ERR_LINE_TOO_LONG,
    TIDE_TRAINER_ERR_UNKNOWN_OP,
    TIDE_TRAINER_ERR_BAD_FIELD,
    TIDE_TRAINER_ERR_NOT_HELLO,
    TIDE_TRAINER_ERR_UNKNOWN_RANK,
    TIDE_TRAINER_ERR_STEP_BACKWARDS,
    /* tasks (docs/work-stealing.md) */
    TIDE_TRAINER_ERR_UNKNOWN_TASK,  /* a `done` id this rank was not handed */
    TIDE_TRAINER_ERR_UNKNOWN_STEP,  /* next_task for a pool this rank did not declare */
    TIDE_TRAINER_ERR_TASK_CONFLICT, /* a `tasks` that repeats an id, exceeds total, or differs */
    TIDE_TRAINER_ERR_BUSY,          /* a second next_task while one waits */
} tide_trainer_err_t;

/* One decoded trainer message. Strings point into the decoder's storage (valid until the next
 * tide_trainer_decode on the same tide_trainer_msg_t, or tide_trainer_msg_free). */
typedef struct tide_trainer_msg {
    tide_trainer_op_t op;
    /* hello */
    int64_t version;
    const char *job;
    int64_t generation;
    int64_t rank;
    int64_t pid;
    const char *sdk; /* "" when absent */
    /* step (phase also for OP_PHASE) */
    int64_t step; /* also checkpoint */
    tide_trainer_phase_t phase;
    double flops;
    double recompute_flops; /* FLOPs recomputed on top of flops (activation checkpointing); -1:
                               not reported */
    int64_t samples;
    int64_t tokens;
    /* checkpoint */
    const char *path;   /* "" when absent */
    uint64_t bytes;
    const char *sha256; /* 64 lowercase hex digits, or "" when bytes == 0 */
    int64_t request;    /* 0 when absent */
    /* attach (job, generation, rank, pid as for hello) */
    const char *credential;
    /* exited */
    int64_t status;     /* exit status 0..255 (0 when killed by a signal) */
    int64_t signal;     /* the signal that ended it, or 0 */
    /* tasks, next_task (step as above) */
    tide_trainer_kind_t kind; /* MEMBER when absent */
    const uint64_t *ids;      /* tasks: n_ids distinct ids, in the trainer's order (NULL when 0) */
    size_t n_ids;
    int64_t total;            /* tasks: 1 .. TIDE_TRAINER_TASKS_MAX_TOTAL, >= n_ids */
    int64_t done;             /* next_task: the finished task's id; -1 when absent */
    /* load */
    bool high; /* the job is in a high-load phase */
    /* private */
    void *json_;
    uint64_t *ids_;           /* owns ids */
} tide_trainer_msg_t;

/* Splits a byte stream into lines. Bytes go in with tide_trainer_lines_feed; complete lines come
 * out of tide_trainer_lines_next. A line longer than TIDE_TRAINER_LINE_MAX is reported once as
 * TIDE_TRAINER_ERR_LINE_TOO_LONG and skipped up to its newline, without buffering it. Empty lines
 * (also "\r\n" alone) are skipped silently. Fields are private. */
typedef struct tide_trainer_lines {
    tide_buf_t buf;   /* buf.data[start, buf.len): bytes not returned yet */
    size_t start;     /* bytes at the front already returned (dropped by the next feed) */
    size_t tail;      /* bytes of the unfinished last line at the end of buf (holds no newline) */
    bool discarding;  /* inside an oversize line: drop bytes up to the next newline */
} tide_trainer_lines_t;

void tide_trainer_lines_init(tide_trainer_lines_t *l);
void tide_trainer_lines_free(tide_trainer_lines_t *l);
/* Appends n bytes (buffers at most TIDE_TRAINER_LINE_MAX bytes of an unfinished line; complete
 * lines stay buffered until tide_trainer_lines_next returns them, so call it until it returns 0
 * after each feed). */
void tide_trainer_lines_feed(tide_trainer_lines_t *l, const void *data, size_t n);
/* The next complete line: returns 1 with *line and *len (without the newline; a trailing '\r' is
 * dropped too; valid until the next feed/next call), 0 when no complete line is buffered, or -1
 * once for each oversize line (TIDE_TRAINER_ERR_LINE_TOO_LONG). */
int tide_trainer_lines_next(tide_trainer_lines_t *l, const char **line, size_t *len);

/* Decodes and validates one line (no newline). Returns TIDE_TRAINER_OK and fills *m, or an error
 * code with a message naming the field in err (e.g. "step: must be an integer >= 0") and
 * *ref set to the op name when it is known (else NULL). Stateless: "not_hello", "unknown_rank",
 * "step_backwards", "unknown_task", "unknown_step", "busy" and a `tasks` that differs from an
 * earlier one are the caller's to decide; a `tasks` that repeats an id or has more ids than its
 * total is "task_conflict" here. */
tide_trainer_err_t tide_trainer_decode(const char *line, size_t len, tide_trainer_msg_t *m,
                                       char *err, size_t err_size, const char **ref);
/* Frees what the last decode kept (the JSON and the ids). Safe on a zeroed or freed msg. */
void tide_trainer_msg_free(tide_trainer_msg_t *m);

const char *tide_trainer_err_name(tide_trainer_err_t e);
/* "forward", ...; NULL when out of range. */
const char *tide_trainer_phase_name(tide_trainer_phase_t p);
/* The phase named s; -1 when unknown. */
int tide_trainer_phase_parse(const char *s);
/* "member", "detached"; NULL when out of range. */
const char *tide_trainer_kind_name(tide_trainer_kind_t k);

/* Encoders: each appends one line, newline included, to out. Strings are JSON-escaped. */
void tide_trainer_encode_welcome(tide_buf_t *out, const char *worker_id);
void tide_trainer_encode_error(tide_buf_t *out, tide_trainer_err_t code, const char *message,
                               const char *ref);
void tide_trainer_encode_checkpoint_now(tide_buf_t *out, int64_t id, int64_t deadline_unix_ms);
void tide_trainer_encode_stop_after_step(tide_buf_t *out, int64_t step);
/* The answers to next_task (docs/work-stealing.md): run task id next / this rank's part is done. */
void tide_trainer_encode_task(tide_buf_t *out, int64_t step, tide_trainer_kind_t kind, uint64_t id);
void tide_trainer_encode_no_task(tide_buf_t *out, int64_t step, tide_trainer_kind_t kind);

/* One copy a restore search passed over (strings borrowed). */
typedef struct tide_trainer_restore_skip {
    const char *tier;
    int64_t step; /* -1: the tier's job directory could not be read */
    const char *reason;
} tide_trainer_restore_skip_t;
/* The answer to `restore`: step >= 0 with path and tier, or step < 0 ("none": true) with reason;
 * skipped[] in either case (docs/trainer-api.md). */
void tide_trainer_encode_restore(tide_buf_t *out, int64_t step, const char *path, const char *tier,
                                 const char *reason, const tide_trainer_restore_skip_t *skipped,
                                 size_t n_skipped);

#endif
