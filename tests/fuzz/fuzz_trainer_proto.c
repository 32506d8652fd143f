/* libFuzzer target for the worker's side of the trainer protocol (worker/trainer_proto.c): the
 * input is a byte stream from a trainer, fed through tide_trainer_lines_feed in pseudo-random chunk
 * sizes; every line that comes out is decoded. Checks the framer against a plain reference split of
 * the whole stream, the decoder's promises (validated fields, "" rather than NULL, distinct task
 * ids within the bounds, a zeroed message on error) and that an error reply about it encodes to
 * valid JSON.
 *
 * Input: [seed byte][stream]. The seed picks the chunk sizes; when its four high bits are set the stream
 * is repeated up to ~70 KB so that lines longer than TIDE_TRAINER_LINE_MAX are reached too (and
 * only its first lines are decoded, which keeps such runs fast). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "trainer_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPEAT_TO (70 * 1024)

static uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* The lines a correct framer yields for the whole stream: "-1" marks an oversize line. */
typedef struct expect {
    const uint8_t *p;
    size_t len;
    bool oversize;
} expect_t;

static size_t reference_split(const uint8_t *s, size_t n, expect_t **out)
{
    size_t cap = 16, k = 0, start = 0, i;
    expect_t *e = malloc(cap * sizeof(*e));

    for (i = 0; i <= n; i++) {
        size_t len;
        bool complete = i < n && s[i] == '\n';
        if (i < n && !complete)
            continue;
        len = i - start;
        /* an unfinished last line counts only once it reaches the limit */
        if (complete || len >= TIDE_TRAINER_LINE_MAX) {
            bool over = len >= TIDE_TRAINER_LINE_MAX;
            if (!over && len > 0 && s[start + len - 1] == '\r')
                len--;
            if (over || len > 0) {
                if (k == cap)
                    e = realloc(e, (cap *= 2) * sizeof(*e));
                e[k++] = (expect_t){s + start, len, over};
            }
        }
        start = i + 1;
    }
    *out = e;
    return k;
}

static bool lower_hex64(const char *s)
{
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[64] == '\0';
}

static void check_decode(const char *line, size_t len, tide_trainer_msg_t *m)
{
    char err[192];
    const char *ref = NULL;
    /* an exact-size copy, so reading past len is caught by ASan */
    char *copy = malloc(len ? len : 1);
    tide_trainer_err_t rc;

    memcpy(copy, line, len);
    rc = tide_trainer_decode(copy, len, m, err, sizeof(err), &ref);
    if (rc == TIDE_TRAINER_OK) {
        if (m->op < TIDE_TRAINER_OP_HELLO || m->op > TIDE_TRAINER_OP_NEXT_TASK || !m->json_)
            abort();
        if ((m->op == TIDE_TRAINER_OP_TASKS || m->op == TIDE_TRAINER_OP_NEXT_TASK) &&
            !tide_trainer_kind_name(m->kind))
            abort();
        if (m->op == TIDE_TRAINER_OP_TASKS) {
            /* distinct exact ids, at most the limit and the total */
            if (m->n_ids > TIDE_TRAINER_TASKS_MAX_IDS || (m->n_ids > 0 && !m->ids) ||
                m->total < 1 || m->total > TIDE_TRAINER_TASKS_MAX_TOTAL ||
                (int64_t)m->n_ids > m->total)
                abort();
            for (size_t i = 0; i < m->n_ids; i++) {
                if (m->ids[i] > TIDE_TRAINER_TASK_ID_MAX)
                    abort();
                for (size_t k = 0; k < i && m->n_ids <= 512; k++)
                    if (m->ids[k] == m->ids[i])
                        abort();
            }
        }
        if (m->op == TIDE_TRAINER_OP_NEXT_TASK &&
            (m->done < -1 || m->done > (int64_t)TIDE_TRAINER_TASK_ID_MAX))
            abort();
        if (!m->job || !m->sdk || !m->path || !m->sha256 || !m->credential)
            abort();
        if (m->op == TIDE_TRAINER_OP_ATTACH && (!m->job[0] || !m->credential[0]))
            abort();
        if (m->status < 0 || m->status > 255 || m->signal < 0 || m->signal > 127)
            abort();
        if (m->step < 0 || m->samples < 0 || m->tokens < 0 || m->request < 0 || m->pid < 0 ||
            m->generation < 0 || m->rank < 0 || !(m->flops >= 0))
            abort();
        if ((unsigned)m->phase >= TIDE_TRAINER_PHASE_COUNT)
            abort();
        if (m->op == TIDE_TRAINER_OP_HELLO && (m->version < 1 || !m->job[0]))
            abort();
        if (m->op == TIDE_TRAINER_OP_CHECKPOINT &&
            (m->bytes > 0 ? !lower_hex64(m->sha256) : (m->sha256[0] && !lower_hex64(m->sha256))))
            abort();
    } else {
        tide_buf_t out = TIDE_BUF_INIT;
        cJSON *j;

        if (m->op != 0 || m->json_ || m->ids || !err[0] || rc > TIDE_TRAINER_ERR_BUSY ||
            (rc > TIDE_TRAINER_ERR_STEP_BACKWARDS && rc != TIDE_TRAINER_ERR_TASK_CONFLICT))
            abort();
        if (rc == TIDE_TRAINER_ERR_TASK_CONFLICT && (!ref || strcmp(ref, "tasks") != 0))
            abort();
        if (ref && strcmp(ref, "hello") != 0 && strcmp(ref, "step") != 0 &&
            strcmp(ref, "phase") != 0 && strcmp(ref, "checkpoint") != 0 &&
            strcmp(ref, "attach") != 0 && strcmp(ref, "exited") != 0 &&
            strcmp(ref, "tasks") != 0 && strcmp(ref, "next_task") != 0)
            abort();
        tide_trainer_encode_error(&out, rc, err, ref);
        j = cJSON_ParseWithLength((const char *)out.data, out.len);
        if (!j || strcmp(cJSON_GetObjectItem(j, "message")->valuestring, err) != 0)
            abort();
        cJSON_Delete(j);
        tide_buf_free(&out);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tide_trainer_lines_t l;
    tide_trainer_msg_t m = {0};
    uint8_t *stream = NULL;
    expect_t *want = NULL;
    size_t n, off = 0, nwant, got = 0, decode_max = SIZE_MAX;
    uint32_t seed;

    if (size < 1)
        return 0;
    seed = 0x9e3779b9u ^ (uint32_t)data[0] * 2654435761u;
    n = size - 1;
    stream = malloc(n ? n : 1);
    memcpy(stream, data + 1, n);
    if ((data[0] & 0xf0) == 0xf0 && n > 0) {
        size_t total = 0;
        uint8_t *big = malloc(REPEAT_TO + n);
        while (total < REPEAT_TO) {
            memcpy(big + total, stream, n);
            total += n;
        }
        free(stream);
        stream = big;
        n = total;
        decode_max = 16; /* the repeats decode alike: only the framing is of interest */
    }
    nwant = reference_split(stream, n, &want);

    tide_trainer_lines_init(&l);
    while (off < n) {
        uint32_t r = rnd(&seed);
        size_t chunk = (r & 3) == 0 ? 1 + (r >> 8) % 70000 : 1 + (r >> 8) % 64;
        const char *line;
        size_t len;
        int rc;

        if (chunk > n - off)
            chunk = n - off;
        tide_trainer_lines_feed(&l, stream + off, chunk);
        off += chunk;
        while ((rc = tide_trainer_lines_next(&l, &line, &len)) != 0) {
            if (got >= nwant)
                abort();
            if (rc < 0) {
                if (!want[got].oversize)
                    abort();
            } else {
                if (rc != 1 || want[got].oversize || len != want[got].len || len == 0 ||
                    len >= TIDE_TRAINER_LINE_MAX || memcmp(line, want[got].p, len) != 0)
                    abort();
                if (got < decode_max)
                    check_decode(line, len, &m);
            }
            got++;
        }
        /* drained: at most one unfinished line is left, and it is below the limit */
        if (l.buf.len - l.start >= TIDE_TRAINER_LINE_MAX)
            abort();
    }
    if (got != nwant)
        abort();
    tide_trainer_msg_free(&m);
    tide_trainer_lines_free(&l);
    free(want);
    free(stream);
    return 0;
}
