/* The trainer protocol, worker side (trainer_proto.h, docs/trainer-api.md): line framing, decoding
 * of trainer messages with cJSON and encoding of the worker's. Invariants: the framer never holds
 * more than TIDE_TRAINER_LINE_MAX bytes of an unfinished line; a decode either fills the whole
 * message with validated values or returns an error and leaves the message empty. */
#include "trainer_proto.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* Integers on the wire are exact: below 2^53, every JSON integer maps to one double and back. */
#define MAX_EXACT 9007199254740991.0 /* 2^53 - 1 */
#define INT32_LIMIT 2147483647.0

/* --- framing ---------------------------------------------------------------------------------- */

void tide_trainer_lines_init(tide_trainer_lines_t *l)
{
    memset(l, 0, sizeof(*l));
    tide_buf_init(&l->buf);
}

void tide_trainer_lines_free(tide_trainer_lines_t *l)
{
    if (!l)
        return;
    tide_buf_free(&l->buf);
    tide_trainer_lines_init(l);
}

/* Layout of buf: [returned lines: start][complete lines, each ending in '\n'][tail]. An oversize
 * unfinished line is kept as a stub of exactly TIDE_TRAINER_LINE_MAX bytes while the rest of it is
 * discarded; when its newline arrives a '\n' ends the stub, and _next reports any line of
 * TIDE_TRAINER_LINE_MAX bytes or more (newline excluded) as too long. */
void tide_trainer_lines_feed(tide_trainer_lines_t *l, const void *data, size_t n)
{
    const char *p = data;

    if (l->start > 0) {
        tide_buf_consume(&l->buf, l->start);
        l->start = 0;
    }
    while (n > 0) {
        const char *nl;

        if (l->discarding) {
            nl = memchr(p, '\n', n);
            if (!nl)
                return;
            n -= (size_t)(nl - p) + 1;
            p = nl + 1;
            l->discarding = false;
            /* ends the stub, or makes an empty line when _next already reported it */
            tide_buf_append(&l->buf, "\n", 1);
            l->tail = 0;
            continue;
        }
        nl = memrchr(p, '\n', n);
        if (nl) {
            /* complete lines (the first may be oversize: _next reports it) */
            size_t k = (size_t)(nl - p) + 1;
            tide_buf_append(&l->buf, p, k);
            l->tail = 0;
            p += k;
            n -= k;
            continue;
        }
        if (l->tail + n < TIDE_TRAINER_LINE_MAX) {
            tide_buf_append(&l->buf, p, n);
            l->tail += n;
            return;
        }
        /* the unfinished line reaches the limit: keep a stub, drop the rest up to its newline */
        tide_buf_append(&l->buf, p, TIDE_TRAINER_LINE_MAX - l->tail);
        l->tail = TIDE_TRAINER_LINE_MAX;
        l->discarding = true;
        return;
    }
}

int tide_trainer_lines_next(tide_trainer_lines_t *l, const char **line, size_t *len)
{
    for (;;) {
        size_t complete_end = l->buf.len - l->tail;
        const char *p, *nl;
        size_t n;

        if (l->start >= complete_end)
            break;
        p = (const char *)l->buf.data + l->start;
        nl = memchr(p, '\n', complete_end - l->start); /* found: the region ends in '\n' */
        n = (size_t)(nl - p);
        l->start += n + 1;
        if (n >= TIDE_TRAINER_LINE_MAX)
            return -1;
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0)
            continue;
        *line = p;
        *len = n;
        return 1;
    }
    if (l->discarding && l->tail == TIDE_TRAINER_LINE_MAX) {
        /* report the oversize line now rather than when (if ever) its newline comes */
        l->buf.len -= l->tail;
        l->tail = 0;
        return -1;
    }
    return 0;
}

/* --- decoding --------------------------------------------------------------------------------- */

static const char *const phase_names[TIDE_TRAINER_PHASE_COUNT] = {
    "forward", "backward", "update", "eval", "checkpoint", "idle"};

static const char *const err_names[] = {
    [TIDE_TRAINER_OK] = "ok",
    [TIDE_TRAINER_ERR_BAD_JSON] = "bad_json",
    [TIDE_TRAINER_ERR_LINE_TOO_LONG] = "line_too_long",
    [TIDE_TRAINER_ERR_UNKNOWN_OP] = "unknown_op",
    [TIDE_TRAINER_ERR_BAD_FIELD] = "bad_field",
    [TIDE_TRAINER_ERR_NOT_HELLO] = "not_hello",
    [TIDE_TRAINER_ERR_UNKNOWN_RANK] = "unknown_rank",
    [TIDE_TRAINER_ERR_STEP_BACKWARDS] = "step_backwards",
    [TIDE_TRAINER_ERR_UNKNOWN_TASK] = "unknown_task",
    [TIDE_TRAINER_ERR_UNKNOWN_STEP] = "unknown_step",
    [TIDE_TRAINER_ERR_TASK_CONFLICT] = "task_conflict",
    [TIDE_TRAINER_ERR_BUSY] = "busy",
};

static const char *const kind_names[] = {
    [TIDE_TRAINER_KIND_MEMBER] = "member",
    [TIDE_TRAINER_KIND_DETACHED] = "detached",
};

const char *tide_trainer_err_name(tide_trainer_err_t e)
{
    if ((unsigned)e >= sizeof(err_names) / sizeof(err_names[0]))
        return "internal";
    return err_names[e];
}

const char *tide_trainer_phase_name(tide_trainer_phase_t p)
{
    if ((unsigned)p >= TIDE_TRAINER_PHASE_COUNT)
        return NULL;
    return phase_names[p];
}

const char *tide_trainer_kind_name(tide_trainer_kind_t k)
{
    if (k != TIDE_TRAINER_KIND_MEMBER && k != TIDE_TRAINER_KIND_DETACHED)
        return NULL;
    return kind_names[k];
}

int tide_trainer_phase_parse(const char *s)
{
    int i;

    if (!s)
        return -1;
    for (i = 0; i < TIDE_TRAINER_PHASE_COUNT; i++)
        if (strcmp(s, phase_names[i]) == 0)
            return i;
    return -1;
}

void tide_trainer_msg_free(tide_trainer_msg_t *m)
{
    if (!m)
        return;
    cJSON_Delete(m->json_);
    free(m->ids_);
    memset(m, 0, sizeof(*m));
}

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;

    if (!err || err_size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

typedef struct decoder {
    const cJSON *obj;
    char *err;
    size_t err_size;
    tide_trainer_err_t code; /* what a failed decode reports: BAD_FIELD unless set */
} decoder_t;

/* An exact integer field in [min, max]. Returns false (with the message) when it is missing and
 * required, or not such an integer. */
static bool get_int(decoder_t *d, const char *name, bool required, double min, double max,
                    int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->obj, name);
    double x;

    if (!v) {
        if (!required)
            return true;
        goto bad;
    }
    if (!cJSON_IsNumber(v))
        goto bad;
    x = v->valuedouble;
    if (!(x >= min && x <= max) || (double)(int64_t)x != x) /* also false for NaN */
        goto bad;
    *out = (int64_t)x;
    return true;
bad:
    if (max == MAX_EXACT)
        set_err(d->err, d->err_size, "%s: must be an integer >= %.0f", name, min);
    else
        set_err(d->err, d->err_size, "%s: must be an integer from %.0f to %.0f", name, min, max);
    return false;
}

/* A string field; "" when absent and optional. Non-empty when nonempty is set. */
static bool get_str(decoder_t *d, const char *name, bool required, bool nonempty,
                    const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->obj, name);

    if (!v && !required) {
        *out = "";
        return true;
    }
    if (!cJSON_IsString(v) || !v->valuestring || (nonempty && !v->valuestring[0])) {
        set_err(d->err, d->err_size, "%s: must be a%s string", name, nonempty ? " non-empty" : "");
        return false;
    }
    *out = v->valuestring;
    return true;
}

static bool get_phase(decoder_t *d, tide_trainer_phase_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->obj, "phase");
    int p = cJSON_IsString(v) ? tide_trainer_phase_parse(v->valuestring) : -1;

    if (p < 0) {
        set_err(d->err, d->err_size,
                "phase: must be one of forward, backward, update, eval, checkpoint, idle");
        return false;
    }
    *out = (tide_trainer_phase_t)p;
    return true;
}

static bool decode_hello(decoder_t *d, tide_trainer_msg_t *m)
{
    return get_int(d, "v", true, 1, MAX_EXACT, &m->version) &&
           get_str(d, "job", true, true, &m->job) &&
           get_int(d, "generation", true, 0, INT32_LIMIT, &m->generation) &&
           get_int(d, "rank", true, 0, INT32_LIMIT, &m->rank) &&
           get_int(d, "pid", true, 0, INT32_LIMIT, &m->pid) &&
           get_str(d, "sdk", false, false, &m->sdk);
}

/* tide-rank-exec's first line (docs/mpi.md): like hello, with the generation's credential. */
static bool decode_attach(decoder_t *d, tide_trainer_msg_t *m)
{
    return get_int(d, "v", true, 1, MAX_EXACT, &m->version) &&
           get_str(d, "job", true, true, &m->job) &&
           get_int(d, "generation", true, 0, INT32_LIMIT, &m->generation) &&
           get_int(d, "rank", true, 0, INT32_LIMIT, &m->rank) &&
           get_str(d, "credential", true, true, &m->credential) &&
           get_int(d, "pid", true, 0, INT32_LIMIT, &m->pid);
}

/* tide-rank-exec's report of its rank's end: exit status, or 0 and the signal. */
static bool decode_exited(decoder_t *d, tide_trainer_msg_t *m)
{
    return get_int(d, "status", true, 0, 255, &m->status) &&
           get_int(d, "signal", true, 0, 127, &m->signal);
}

static bool decode_step(decoder_t *d, tide_trainer_msg_t *m)
{
    const cJSON *f;

    if (!get_int(d, "step", true, 0, MAX_EXACT, &m->step) || !get_phase(d, &m->phase))
        return false;
    f = cJSON_GetObjectItemCaseSensitive(d->obj, "flops");
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < 0) {
        set_err(d->err, d->err_size, "flops: must be a finite number >= 0");
        return false;
    }
    m->flops = f->valuedouble == 0 ? 0.0 : f->valuedouble; /* no -0 */
    m->recompute_flops = -1;
    f = cJSON_GetObjectItemCaseSensitive(d->obj, "recompute_flops");
    if (f) {
        if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < 0) {
            set_err(d->err, d->err_size, "recompute_flops: must be a finite number >= 0");
            return false;
        }
        m->recompute_flops = f->valuedouble == 0 ? 0.0 : f->valuedouble;
    }
    return get_int(d, "samples", true, 0, MAX_EXACT, &m->samples) &&
           get_int(d, "tokens", true, 0, MAX_EXACT, &m->tokens);
}

static bool is_hex64(char *s)
{
    size_t i;

    for (i = 0; i < 64; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'F')
            s[i] = (char)(c - 'A' + 'a'); /* stored lowercase */
        else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return s[64] == '\0';
}

static bool decode_checkpoint(decoder_t *d, tide_trainer_msg_t *m)
{
    cJSON *sha = cJSON_GetObjectItemCaseSensitive(d->obj, "sha256");
    int64_t bytes = 0;

    if (!get_int(d, "step", true, 0, MAX_EXACT, &m->step) ||
        !get_str(d, "path", false, false, &m->path) ||
        !get_int(d, "bytes", true, 0, MAX_EXACT, &bytes) ||
        !get_int(d, "request", false, 0, MAX_EXACT, &m->request))
        return false;
    m->bytes = (uint64_t)bytes;
    m->sha256 = "";
    if (sha && !cJSON_IsString(sha))
        goto bad_sha;
    if (bytes == 0 && (!sha || !sha->valuestring[0]))
        return true;
    if (!sha || !is_hex64(sha->valuestring))
        goto bad_sha;
    m->sha256 = sha->valuestring;
    return true;
bad_sha:
    set_err(d->err, d->err_size, "sha256: must be 64 hex digits (or empty when bytes is 0)");
    return false;
}

/* kind: optional, "member" (the default) or "detached". */
static bool get_kind(decoder_t *d, tide_trainer_kind_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->obj, "kind");

    *out = TIDE_TRAINER_KIND_MEMBER;
    if (!v)
        return true;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "member") == 0)
        return true;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "detached") == 0) {
        *out = TIDE_TRAINER_KIND_DETACHED;
        return true;
    }
    set_err(d->err, d->err_size, "kind: must be member or detached");
    return false;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* tasks (docs/work-stealing.md): a rank's share of a pool. Field errors are bad_field; a repeated
 * id or more ids than the total is task_conflict. The ids keep the trainer's order. */
static bool decode_tasks(decoder_t *d, tide_trainer_msg_t *m)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d->obj, "ids"), *v;
    uint64_t *sorted = NULL;
    size_t n = 0, i;
    bool ok = false;

    if (!get_int(d, "step", true, 0, MAX_EXACT, &m->step) || !get_kind(d, &m->kind))
        return false;
    if (!cJSON_IsArray(arr)) {
        set_err(d->err, d->err_size, "ids: must be an array of integers");
        return false;
    }
    cJSON_ArrayForEach(v, arr)
    {
        if (++n > TIDE_TRAINER_TASKS_MAX_IDS) {
            set_err(d->err, d->err_size, "ids: at most %d ids per declaration",
                    TIDE_TRAINER_TASKS_MAX_IDS);
            return false;
        }
    }
    if (!get_int(d, "total", true, 1, TIDE_TRAINER_TASKS_MAX_TOTAL, &m->total))
        return false;
    if (n > 0) {
        m->ids_ = tide_xmalloc(n * sizeof(uint64_t));
        sorted = tide_xmalloc(n * sizeof(uint64_t));
    }
    i = 0;
    cJSON_ArrayForEach(v, arr)
    {
        double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(x >= 0 && x <= MAX_EXACT) || (double)(int64_t)x != x) {
            set_err(d->err, d->err_size, "ids[%zu]: must be an integer from 0 to 2^53 - 1", i);
            goto done;
        }
        m->ids_[i] = sorted[i] = (uint64_t)x;
        i++;
    }
    if ((int64_t)n > m->total) {
        d->code = TIDE_TRAINER_ERR_TASK_CONFLICT;
        set_err(d->err, d->err_size, "total: %lld is below the %zu ids declared",
                (long long)m->total, n);
        goto done;
    }
    if (n > 1)
        qsort(sorted, n, sizeof(*sorted), cmp_u64);
    for (i = 1; i < n; i++) {
        if (sorted[i] == sorted[i - 1]) {
            d->code = TIDE_TRAINER_ERR_TASK_CONFLICT;
            set_err(d->err, d->err_size, "ids: %llu appears more than once",
                    (unsigned long long)sorted[i]);
            goto done;
        }
    }
    m->ids = m->ids_;
    m->n_ids = n;
    ok = true;
done:
    free(sorted);
    return ok;
}

/* next_task: the next task of a pool, reporting the previous one done. */
static bool decode_next_task(decoder_t *d, tide_trainer_msg_t *m)
{
    m->done = -1;
    return get_int(d, "step", true, 0, MAX_EXACT, &m->step) && get_kind(d, &m->kind) &&
           get_int(d, "done", false, 0, MAX_EXACT, &m->done);
}

/* restore (docs/trainer-api.md, "Checkpoint tiers"): no fields. */
static bool decode_restore(decoder_t *d, tide_trainer_msg_t *m)
{
    (void)d;
    (void)m;
    return true;
}

/* load (docs/trainer-api.md): the job entered (high true) or left a high-load phase. */
static bool decode_load(decoder_t *d, tide_trainer_msg_t *m)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->obj, "high");

    if (!cJSON_IsBool(v)) {
        set_err(d->err, d->err_size, "high: must be true or false");
        return false;
    }
    m->high = cJSON_IsTrue(v);
    return true;
}

tide_trainer_err_t tide_trainer_decode(const char *line, size_t len, tide_trainer_msg_t *m,
                                       char *err, size_t err_size, const char **ref)
{
    static const struct {
        const char *name;
        tide_trainer_op_t op;
        bool (*decode)(decoder_t *, tide_trainer_msg_t *);
    } ops[] = {
        {"hello", TIDE_TRAINER_OP_HELLO, decode_hello},
        {"step", TIDE_TRAINER_OP_STEP, decode_step},
        {"phase", TIDE_TRAINER_OP_PHASE, NULL},
        {"checkpoint", TIDE_TRAINER_OP_CHECKPOINT, decode_checkpoint},
        {"attach", TIDE_TRAINER_OP_ATTACH, decode_attach},
        {"exited", TIDE_TRAINER_OP_EXITED, decode_exited},
        {"tasks", TIDE_TRAINER_OP_TASKS, decode_tasks},
        {"next_task", TIDE_TRAINER_OP_NEXT_TASK, decode_next_task},
        {"load", TIDE_TRAINER_OP_LOAD, decode_load},
        {"restore", TIDE_TRAINER_OP_RESTORE, decode_restore},
    };
    decoder_t d = {.err = err, .err_size = err_size, .code = TIDE_TRAINER_ERR_BAD_FIELD};
    const char *end = NULL;
    const cJSON *op;
    cJSON *root = NULL;
    size_t i;
    bool ok;

    tide_trainer_msg_free(m);
    if (ref)
        *ref = NULL;
    if (err && err_size)
        err[0] = '\0';
    /* cJSON stops at a NUL; one inside the line would hide what follows it */
    if (len == 0 || memchr(line, '\0', len))
        goto bad_json;
    root = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!root || !cJSON_IsObject(root))
        goto bad_json;
    while (end < line + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (end != line + len)
        goto bad_json;
    d.obj = root;
    op = cJSON_GetObjectItemCaseSensitive(root, "op");
    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (cJSON_IsString(op) && strcmp(op->valuestring, ops[i].name) == 0)
            break;
    if (i == sizeof(ops) / sizeof(ops[0])) {
        set_err(err, err_size,
                "op: must be one of hello, step, phase, checkpoint, attach, exited, tasks, "
                "next_task, load, restore");
        cJSON_Delete(root);
        return TIDE_TRAINER_ERR_UNKNOWN_OP;
    }
    if (ref)
        *ref = ops[i].name; /* static: outlives the message */
    m->op = ops[i].op;
    m->job = m->sdk = m->path = m->sha256 = m->credential = "";
    m->done = -1;
    ok = ops[i].decode ? ops[i].decode(&d, m) : get_phase(&d, &m->phase);
    if (!ok) {
        cJSON_Delete(root);
        free(m->ids_);
        memset(m, 0, sizeof(*m));
        return d.code;
    }
    m->json_ = root;
    return TIDE_TRAINER_OK;
bad_json:
    cJSON_Delete(root);
    set_err(err, err_size, "line: not a JSON object");
    return TIDE_TRAINER_ERR_BAD_JSON;
}

/* --- encoding --------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k, i;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        k = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        k = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        k = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    for (i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return k;
}

/* Appends s as a JSON string, quotes included. Control characters are escaped; bytes that are not
 * valid UTF-8 become U+FFFD, so the line is always valid JSON and valid UTF-8. */
static void put_string(tide_buf_t *out, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p);

    tide_buf_append(out, "\"", 1);
    while (n > 0) {
        unsigned char c = *p;
        size_t k;

        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tide_buf_append(out, e, 2);
        } else if (c == '\n') {
            tide_buf_append(out, "\\n", 2);
        } else if (c == '\r') {
            tide_buf_append(out, "\\r", 2);
        } else if (c == '\t') {
            tide_buf_append(out, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            tide_buf_append(out, e, 6);
        } else if ((k = utf8_len(p, n)) > 0) {
            tide_buf_append(out, p, k);
            p += k;
            n -= k;
            continue;
        } else {
            tide_buf_append(out, "\xef\xbf\xbd", 3);
        }
        p++;
        n--;
    }
    tide_buf_append(out, "\"", 1);
}

void tide_trainer_encode_welcome(tide_buf_t *out, const char *worker_id)
{
    tide_buf_append_str(out, "{\"op\":\"welcome\",\"v\":1,\"worker\":");
    put_string(out, worker_id);
    tide_buf_append_str(out, "}\n");
}

void tide_trainer_encode_error(tide_buf_t *out, tide_trainer_err_t code, const char *message,
                               const char *ref)
{
    tide_buf_printf(out, "{\"op\":\"error\",\"code\":\"%s\",\"message\":", tide_trainer_err_name(code));
    put_string(out, message);
    if (ref) {
        tide_buf_append_str(out, ",\"ref\":");
        put_string(out, ref);
    }
    tide_buf_append_str(out, "}\n");
}

void tide_trainer_encode_checkpoint_now(tide_buf_t *out, int64_t id, int64_t deadline_unix_ms)
{
    tide_buf_printf(out,
                    "{\"op\":\"checkpoint_now\",\"id\":%" PRId64 ",\"deadline_unix_ms\":%" PRId64
                    "}\n",
                    id, deadline_unix_ms);
}

void tide_trainer_encode_stop_after_step(tide_buf_t *out, int64_t step)
{
    tide_buf_printf(out, "{\"op\":\"stop_after_step\",\"step\":%" PRId64 "}\n", step);
}

void tide_trainer_encode_task(tide_buf_t *out, int64_t step, tide_trainer_kind_t kind, uint64_t id)
{
    const char *k = tide_trainer_kind_name(kind);

    tide_buf_printf(out,
                    "{\"op\":\"task\",\"step\":%" PRId64 ",\"kind\":\"%s\",\"id\":%" PRIu64
                    "}\n",
                    step, k ? k : "member", id);
}

void tide_trainer_encode_no_task(tide_buf_t *out, int64_t step, tide_trainer_kind_t kind)
{
    const char *k = tide_trainer_kind_name(kind);

    tide_buf_printf(out, "{\"op\":\"no_task\",\"step\":%" PRId64 ",\"kind\":\"%s\"}\n", step,
                    k ? k : "member");
}

void tide_trainer_encode_restore(tide_buf_t *out, int64_t step, const char *path, const char *tier,
                                 const char *reason, const tide_trainer_restore_skip_t *skipped,
                                 size_t n_skipped)
{
    tide_buf_printf(out, "{\"op\":\"restore\",");
    if (step >= 0) {
        tide_buf_printf(out, "\"step\":%" PRId64 ",\"path\":", step);
        put_string(out, path ? path : "");
        tide_buf_printf(out, ",\"tier\":");
        put_string(out, tier ? tier : "");
    } else {
        tide_buf_printf(out, "\"none\":true,\"reason\":");
        put_string(out, reason ? reason : "");
    }
    tide_buf_printf(out, ",\"skipped\":[");
    for (size_t i = 0; i < n_skipped; i++) {
        tide_buf_printf(out, "%s{\"tier\":", i ? "," : "");
        put_string(out, skipped[i].tier);
        tide_buf_printf(out, ",\"step\":%" PRId64 ",\"reason\":", skipped[i].step);
        put_string(out, skipped[i].reason);
        tide_buf_printf(out, "}");
    }
    tide_buf_printf(out, "]}\n");
}
