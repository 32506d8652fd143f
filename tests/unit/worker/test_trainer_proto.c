/* Unit tests of the trainer protocol, worker side (worker/trainer_proto.c): line framing across
 * feeds, oversize and CRLF lines, decoding of every op and of each bad field, and encoders whose
 * output must parse back through cJSON with the same strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "trainer_proto.h"

/* Collects every line (or -1 for an oversize one) that _next returns into a '|'-joined string. */
static void drain(tide_trainer_lines_t *l, tide_buf_t *got)
{
    const char *line;
    size_t len;
    int rc;

    while ((rc = tide_trainer_lines_next(l, &line, &len)) != 0) {
        if (rc < 0) {
            tide_buf_append_str(got, "<too long>|");
            continue;
        }
        assert_int_equal(rc, 1);
        assert_true(len > 0);
        assert_null(memchr(line, '\n', len));
        tide_buf_append(got, line, len);
        tide_buf_append_str(got, "|");
    }
}

static void test_lines_split_across_feeds(void **state)
{
    const char *stream = "{\"op\":\"phase\",\"phase\":\"eval\"}\nabc\n\ndef\r\n\r\nlast";
    size_t n = strlen(stream), chunk;

    /* every chunk size gives the same lines; an unfinished last line is not returned */
    for (chunk = 1; chunk <= n; chunk++) {
        tide_trainer_lines_t l;
        tide_buf_t got = TIDE_BUF_INIT;
        size_t off;

        tide_trainer_lines_init(&l);
        for (off = 0; off < n; off += chunk) {
            tide_trainer_lines_feed(&l, stream + off, off + chunk <= n ? chunk : n - off);
            drain(&l, &got);
        }
        assert_string_equal(tide_buf_cstr(&got), "{\"op\":\"phase\",\"phase\":\"eval\"}|abc|def|");
        tide_trainer_lines_feed(&l, "\n", 1);
        tide_buf_reset(&got);
        drain(&l, &got);
        assert_string_equal(tide_buf_cstr(&got), "last|");
        tide_buf_free(&got);
        tide_trainer_lines_free(&l);
    }
}

static void test_lines_many_in_one_feed(void **state)
{
    tide_trainer_lines_t l;
    tide_buf_t in = TIDE_BUF_INIT, got = TIDE_BUF_INIT, want = TIDE_BUF_INIT;
    int i;

    for (i = 0; i < 1000; i++) {
        tide_buf_printf(&in, "line %d\n", i);
        tide_buf_printf(&want, "line %d|", i);
    }
    tide_trainer_lines_init(&l);
    tide_trainer_lines_feed(&l, in.data, in.len);
    drain(&l, &got);
    assert_string_equal(tide_buf_cstr(&got), tide_buf_cstr(&want));
    /* nothing left over */
    tide_trainer_lines_feed(&l, "x\n", 2);
    tide_buf_reset(&got);
    drain(&l, &got);
    assert_string_equal(tide_buf_cstr(&got), "x|");
    tide_trainer_lines_free(&l);
    tide_buf_free(&in);
    tide_buf_free(&got);
    tide_buf_free(&want);
}

/* An oversize line fed in pieces: reported once, never buffered in full, next line parses. */
static void test_lines_oversize_streamed(void **state)
{
    tide_trainer_lines_t l;
    tide_buf_t got = TIDE_BUF_INIT;
    char chunk[4096];
    int i;

    memset(chunk, 'x', sizeof(chunk));
    tide_trainer_lines_init(&l);
    tide_trainer_lines_feed(&l, "ok1\n", 4);
    for (i = 0; i < 64; i++) { /* 256 KiB without a newline */
        tide_trainer_lines_feed(&l, chunk, sizeof(chunk));
        drain(&l, &got);
        assert_true(l.buf.len <= TIDE_TRAINER_LINE_MAX + 4);
    }
    assert_string_equal(tide_buf_cstr(&got), "ok1|<too long>|");
    tide_trainer_lines_feed(&l, "xx\n{\"op\":\"phase\",\"phase\":\"idle\"}\n", 34);
    drain(&l, &got);
    assert_string_equal(tide_buf_cstr(&got), "ok1|<too long>|{\"op\":\"phase\",\"phase\":\"idle\"}|");
    tide_trainer_lines_free(&l);
    tide_buf_free(&got);
}

/* An oversize line that arrives whole in one feed, and lines right at the limit. */
static void test_lines_oversize_whole_and_limits(void **state)
{
    tide_trainer_lines_t l;
    tide_buf_t in = TIDE_BUF_INIT, got = TIDE_BUF_INIT;
    char *big = malloc(TIDE_TRAINER_LINE_MAX + 2);

    memset(big, 'y', TIDE_TRAINER_LINE_MAX + 2);
    tide_trainer_lines_init(&l);
    /* 65535 bytes + '\n' = 65536: fits */
    tide_buf_append(&in, big, TIDE_TRAINER_LINE_MAX - 1);
    tide_buf_append_str(&in, "\n");
    /* 65536 bytes + '\n': too long */
    tide_buf_append(&in, big, TIDE_TRAINER_LINE_MAX);
    tide_buf_append_str(&in, "\n");
    /* 65534 bytes + "\r\n" = 65536: fits; 65535 + "\r\n": too long */
    tide_buf_append(&in, big, TIDE_TRAINER_LINE_MAX - 2);
    tide_buf_append_str(&in, "\r\n");
    tide_buf_append(&in, big, TIDE_TRAINER_LINE_MAX - 1);
    tide_buf_append_str(&in, "\r\nafter\n");
    tide_trainer_lines_feed(&l, in.data, in.len);
    {
        const char *line;
        size_t len;
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), 1);
        assert_int_equal(len, TIDE_TRAINER_LINE_MAX - 1);
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), -1);
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), 1);
        assert_int_equal(len, TIDE_TRAINER_LINE_MAX - 2);
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), -1);
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), 1);
        assert_int_equal(len, 5);
        assert_memory_equal(line, "after", 5);
        assert_int_equal(tide_trainer_lines_next(&l, &line, &len), 0);
    }
    /* the same byte by byte: same outcome, never more than one line buffered */
    tide_trainer_lines_free(&l);
    for (size_t i = 0; i < in.len; i++) {
        tide_trainer_lines_feed(&l, in.data + i, 1);
        drain(&l, &got);
        assert_true(l.buf.len <= TIDE_TRAINER_LINE_MAX + 1);
    }
    assert_int_equal(got.len, (TIDE_TRAINER_LINE_MAX - 1) + (TIDE_TRAINER_LINE_MAX - 2) +
                                  strlen("after") + 3 + 2 * strlen("<too long>|"));
    assert_non_null(strstr(tide_buf_cstr(&got), "|<too long>|"));
    assert_non_null(strstr(tide_buf_cstr(&got), "|after|"));
    tide_trainer_lines_free(&l);
    tide_buf_free(&in);
    tide_buf_free(&got);
    free(big);
}

/* --- decoding --------------------------------------------------------------------------------- */

static tide_trainer_err_t dec(const char *line, tide_trainer_msg_t *m, char *err, const char **ref)
{
    return tide_trainer_decode(line, strlen(line), m, err, 192, ref);
}

static void test_decode_hello(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;

    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"job\":\"j-1\",\"generation\":3,\"rank\":7,"
                         "\"pid\":4242,\"sdk\":\"c/1\",\"future\":[1,{\"x\":2}]}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_string_equal(ref, "hello");
    assert_int_equal(m.op, TIDE_TRAINER_OP_HELLO);
    assert_int_equal(m.version, 1);
    assert_string_equal(m.job, "j-1");
    assert_int_equal(m.generation, 3);
    assert_int_equal(m.rank, 7);
    assert_int_equal(m.pid, 4242);
    assert_string_equal(m.sdk, "c/1");
    /* sdk is optional; whitespace around the object is fine */
    assert_int_equal(dec("  {\"op\":\"hello\",\"v\":1,\"job\":\"j\",\"generation\":0,\"rank\":0,"
                         "\"pid\":1} ",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_string_equal(m.sdk, "");
    /* missing and bad fields name the field */
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"generation\":0,\"rank\":0,\"pid\":1}", &m,
                         err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_string_equal(ref, "hello");
    assert_non_null(strstr(err, "job:"));
    assert_int_equal(m.op, 0);
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"job\":\"\",\"generation\":0,\"rank\":0,"
                         "\"pid\":1}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "job:"));
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"job\":\"j\",\"generation\":-1,\"rank\":0,"
                         "\"pid\":1}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "generation:"));
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"job\":\"j\",\"generation\":0,"
                         "\"rank\":4294967296,\"pid\":1}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "rank:"));
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":\"1\",\"job\":\"j\",\"generation\":0,\"rank\":0,"
                         "\"pid\":1}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "v:"));
    assert_int_equal(dec("{\"op\":\"hello\",\"v\":1,\"job\":\"j\",\"generation\":0,\"rank\":0,"
                         "\"pid\":1,\"sdk\":5}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "sdk:"));
    tide_trainer_msg_free(&m);
}

static void test_decode_step(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;

    assert_int_equal(dec("{\"op\":\"step\",\"step\":12,\"phase\":\"update\",\"flops\":1.5e12,"
                         "\"samples\":32,\"tokens\":4096}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.op, TIDE_TRAINER_OP_STEP);
    assert_int_equal(m.step, 12);
    assert_int_equal(m.phase, TIDE_TRAINER_PHASE_UPDATE);
    assert_true(m.flops == 1.5e12);
    assert_int_equal(m.samples, 32);
    assert_int_equal(m.tokens, 4096);
    assert_true(m.recompute_flops == -1); /* not reported: no HFU */
    assert_int_equal(dec("{\"op\":\"step\",\"step\":13,\"phase\":\"update\",\"flops\":1.5e12,"
                         "\"recompute_flops\":5e11,\"samples\":32,\"tokens\":4096}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_true(m.flops == 1.5e12 && m.recompute_flops == 5e11);
    /* huge but finite FLOPs, 2^53 - 1 steps, an integer written with an exponent */
    assert_int_equal(dec("{\"op\":\"step\",\"step\":9007199254740991,\"phase\":\"idle\","
                         "\"flops\":1e300,\"samples\":1e3,\"tokens\":0}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.step, INT64_C(9007199254740991));
    assert_true(m.flops == 1e300);
    assert_int_equal(m.samples, 1000);
    /* -0 flops is 0 */
    assert_int_equal(dec("{\"op\":\"step\",\"step\":0,\"phase\":\"forward\",\"flops\":-0,"
                         "\"samples\":0,\"tokens\":0}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_false(signbit(m.flops));

    static const struct {
        const char *line, *field;
    } bad[] = {
        {"{\"op\":\"step\",\"step\":1.5,\"phase\":\"forward\",\"flops\":1,\"samples\":0,\"tokens\":0}",
         "step:"},
        {"{\"op\":\"step\",\"step\":9007199254740992,\"phase\":\"forward\",\"flops\":1,"
         "\"samples\":0,\"tokens\":0}",
         "step:"},
        {"{\"op\":\"step\",\"step\":1e20,\"phase\":\"forward\",\"flops\":1,\"samples\":0,"
         "\"tokens\":0}",
         "step:"},
        {"{\"op\":\"step\",\"step\":-1,\"phase\":\"forward\",\"flops\":1,\"samples\":0,\"tokens\":0}",
         "step:"},
        {"{\"op\":\"step\",\"step\":\"1\",\"phase\":\"forward\",\"flops\":1,\"samples\":0,"
         "\"tokens\":0}",
         "step:"},
        {"{\"op\":\"step\",\"phase\":\"forward\",\"flops\":1,\"samples\":0,\"tokens\":0}", "step:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"sleep\",\"flops\":1,\"samples\":0,\"tokens\":0}",
         "phase:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"Forward\",\"flops\":1,\"samples\":0,\"tokens\":0}",
         "phase:"},
        {"{\"op\":\"step\",\"step\":1,\"flops\":1,\"samples\":0,\"tokens\":0}", "phase:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":-1,\"samples\":0,\"tokens\":0}",
         "flops:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":null,\"samples\":0,"
         "\"tokens\":0}",
         "flops:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1e999,\"samples\":0,"
         "\"tokens\":0}",
         "flops:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1,\"samples\":-3,\"tokens\":0}",
         "samples:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1,\"recompute_flops\":-1,"
         "\"samples\":0,\"tokens\":0}",
         "recompute_flops:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1,\"recompute_flops\":\"2\","
         "\"samples\":0,\"tokens\":0}",
         "recompute_flops:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1,\"samples\":0,\"tokens\":0.5}",
         "tokens:"},
        {"{\"op\":\"step\",\"step\":1,\"phase\":\"forward\",\"flops\":1,\"samples\":0}", "tokens:"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dec(bad[i].line, &m, err, &ref), TIDE_TRAINER_ERR_BAD_FIELD);
        assert_string_equal(ref, "step");
        if (strncmp(err, bad[i].field, strlen(bad[i].field)) != 0)
            fail_msg("%s: got \"%s\", want it to name %s", bad[i].line, err, bad[i].field);
        assert_int_equal(m.op, 0);
        assert_null(m.json_);
    }
    assert_string_equal(err, "tokens: must be an integer >= 0");
    tide_trainer_msg_free(&m);
}

static void test_decode_phase_and_checkpoint(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;
    const char *sha = "0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789abcdef";

    for (int p = 0; p < TIDE_TRAINER_PHASE_COUNT; p++) {
        char line[96];
        snprintf(line, sizeof(line), "{\"op\":\"phase\",\"phase\":\"%s\"}",
                 tide_trainer_phase_name((tide_trainer_phase_t)p));
        assert_int_equal(dec(line, &m, err, &ref), TIDE_TRAINER_OK);
        assert_int_equal(m.op, TIDE_TRAINER_OP_PHASE);
        assert_int_equal(m.phase, p);
        assert_int_equal(tide_trainer_phase_parse(tide_trainer_phase_name((tide_trainer_phase_t)p)),
                         p);
    }
    assert_null(tide_trainer_phase_name(TIDE_TRAINER_PHASE_COUNT));
    assert_int_equal(tide_trainer_phase_parse("nope"), -1);
    assert_int_equal(dec("{\"op\":\"phase\"}", &m, err, &ref), TIDE_TRAINER_ERR_BAD_FIELD);
    assert_string_equal(ref, "phase");

    char line[512];
    snprintf(line, sizeof(line),
             "{\"op\":\"checkpoint\",\"step\":100,\"path\":\"/ckpt/a \\\"b\\\"\\n\",\"bytes\":123,"
             "\"sha256\":\"%s\",\"request\":9}",
             sha);
    assert_int_equal(dec(line, &m, err, &ref), TIDE_TRAINER_OK);
    assert_int_equal(m.op, TIDE_TRAINER_OP_CHECKPOINT);
    assert_int_equal(m.step, 100);
    assert_string_equal(m.path, "/ckpt/a \"b\"\n");
    assert_int_equal(m.bytes, 123);
    assert_string_equal(m.sha256,
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    assert_int_equal(m.request, 9);
    /* path, sha256 (when bytes is 0) and request are optional */
    assert_int_equal(dec("{\"op\":\"checkpoint\",\"step\":0,\"bytes\":0}", &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_string_equal(m.path, "");
    assert_string_equal(m.sha256, "");
    assert_int_equal(m.request, 0);
    assert_int_equal(dec("{\"op\":\"checkpoint\",\"step\":0,\"bytes\":0,\"sha256\":\"\"}", &m, err,
                         &ref),
                     TIDE_TRAINER_OK);

    static const struct {
        const char *line, *field;
    } bad[] = {
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":5,\"sha256\":\"abc\"}", "sha256:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":5}", "sha256:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":5,\"sha256\":\"0123456789abcdef0123456789abcdef"
         "0123456789abcdef0123456789abcdeg\"}",
         "sha256:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":5,\"sha256\":\"0123456789abcdef0123456789abcdef"
         "0123456789abcdef0123456789abcdef0\"}",
         "sha256:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":0,\"sha256\":7}", "sha256:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":-5}", "bytes:"},
        {"{\"op\":\"checkpoint\",\"step\":1}", "bytes:"},
        {"{\"op\":\"checkpoint\",\"bytes\":0}", "step:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":0,\"path\":[]}", "path:"},
        {"{\"op\":\"checkpoint\",\"step\":1,\"bytes\":0,\"request\":-2}", "request:"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dec(bad[i].line, &m, err, &ref), TIDE_TRAINER_ERR_BAD_FIELD);
        assert_string_equal(ref, "checkpoint");
        if (strncmp(err, bad[i].field, strlen(bad[i].field)) != 0)
            fail_msg("%s: got \"%s\", want it to name %s", bad[i].line, err, bad[i].field);
    }
    tide_trainer_msg_free(&m);
    tide_trainer_msg_free(&m); /* twice is fine */
}

/* tide-rank-exec's attach and exited (docs/mpi.md) share the socket and the decoder. */
static void test_decode_attach_and_exited(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;

    assert_int_equal(dec("{\"op\":\"attach\",\"v\":1,\"job\":\"j\",\"generation\":4,\"rank\":1,"
                         "\"credential\":\"c\\\"red\",\"pid\":99}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_string_equal(ref, "attach");
    assert_int_equal(m.op, TIDE_TRAINER_OP_ATTACH);
    assert_int_equal(m.version, 1);
    assert_string_equal(m.job, "j");
    assert_int_equal(m.generation, 4);
    assert_int_equal(m.rank, 1);
    assert_string_equal(m.credential, "c\"red");
    assert_int_equal(m.pid, 99);
    assert_int_equal(dec("{\"op\":\"attach\",\"v\":1,\"job\":\"j\",\"generation\":4,\"rank\":1,"
                         "\"pid\":99}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "credential:"));
    assert_int_equal(dec("{\"op\":\"attach\",\"v\":1,\"job\":\"j\",\"generation\":4,\"rank\":1,"
                         "\"credential\":\"\",\"pid\":99}",
                         &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "credential:"));

    assert_int_equal(dec("{\"op\":\"exited\",\"status\":3,\"signal\":0}", &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.op, TIDE_TRAINER_OP_EXITED);
    assert_int_equal(m.status, 3);
    assert_int_equal(m.signal, 0);
    assert_string_equal(m.credential, "");
    assert_int_equal(dec("{\"op\":\"exited\",\"status\":0,\"signal\":9}", &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.signal, 9);
    assert_int_equal(dec("{\"op\":\"exited\",\"status\":256,\"signal\":0}", &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_string_equal(err, "status: must be an integer from 0 to 255");
    assert_string_equal(ref, "exited");
    assert_int_equal(dec("{\"op\":\"exited\",\"status\":0}", &m, err, &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "signal:"));
    tide_trainer_msg_free(&m);
}

static void test_decode_tasks_and_next_task(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;
    tide_buf_t line = TIDE_BUF_INIT;

    assert_int_equal(dec("{\"op\":\"tasks\",\"step\":12,\"ids\":[7,3,9007199254740991,0],"
                         "\"total\":8}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_string_equal(ref, "tasks");
    assert_int_equal(m.op, TIDE_TRAINER_OP_TASKS);
    assert_int_equal(m.step, 12);
    assert_int_equal(m.kind, TIDE_TRAINER_KIND_MEMBER); /* the default */
    assert_int_equal(m.total, 8);
    assert_int_equal(m.n_ids, 4);
    assert_int_equal(m.ids[0], 7);
    assert_int_equal(m.ids[1], 3); /* the trainer's order */
    assert_true(m.ids[2] == UINT64_C(9007199254740991));
    assert_int_equal(m.ids[3], 0);
    /* kind, an empty share, and a second decode into the same message (the ids are replaced) */
    assert_int_equal(dec("{\"op\":\"tasks\",\"step\":0,\"kind\":\"detached\",\"ids\":[],"
                         "\"total\":1048576}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.kind, TIDE_TRAINER_KIND_DETACHED);
    assert_int_equal(m.n_ids, 0);
    assert_int_equal(m.total, 1048576);
    /* the largest share */
    tide_buf_append_str(&line, "{\"op\":\"tasks\",\"step\":1,\"total\":4096,\"ids\":[");
    for (int i = 0; i < TIDE_TRAINER_TASKS_MAX_IDS; i++)
        tide_buf_printf(&line, "%s%d", i ? "," : "", i);
    tide_buf_append_str(&line, "]}");
    assert_int_equal(tide_trainer_decode((const char *)line.data, line.len, &m, err, sizeof(err),
                                         &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.n_ids, 4096);
    assert_int_equal(m.ids[4095], 4095);
    /* one more is too many */
    line.len -= 2;
    tide_buf_append_str(&line, ",4096]}");
    assert_int_equal(tide_trainer_decode((const char *)line.data, line.len, &m, err, sizeof(err),
                                         &ref),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_non_null(strstr(err, "ids:"));
    assert_int_equal(m.op, 0);
    assert_null(m.ids);
    tide_buf_free(&line);

    /* bad fields name the field; repeats and a short total are conflicts */
    static const struct {
        const char *line, *field;
        tide_trainer_err_t code;
    } bad[] = {
        {"{\"op\":\"tasks\",\"ids\":[1],\"total\":1}", "step:", TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":-1,\"ids\":[1],\"total\":1}", "step:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"total\":1}", "ids:", TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":{},\"total\":1}", "ids:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":\"1,2\",\"total\":2}", "ids:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[1,-2],\"total\":2}", "ids[1]:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[1.5],\"total\":2}", "ids[0]:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[9007199254740992],\"total\":2}", "ids[0]:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[\"1\"],\"total\":2}", "ids[0]:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[null],\"total\":2}", "ids[0]:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[1]}", "total:", TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[],\"total\":0}", "total:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[],\"total\":1048577}", "total:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"kind\":\"eval\",\"ids\":[],\"total\":1}", "kind:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"kind\":1,\"ids\":[],\"total\":1}", "kind:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[4,5,4],\"total\":9}", "4 appears",
         TIDE_TRAINER_ERR_TASK_CONFLICT},
        {"{\"op\":\"tasks\",\"step\":1,\"ids\":[1,2,3],\"total\":2}", "total:",
         TIDE_TRAINER_ERR_TASK_CONFLICT},
        {"{\"op\":\"next_task\"}", "step:", TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"next_task\",\"step\":1,\"done\":-1}", "done:", TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"next_task\",\"step\":1,\"done\":\"3\"}", "done:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"next_task\",\"step\":1,\"done\":9007199254740992}", "done:",
         TIDE_TRAINER_ERR_BAD_FIELD},
        {"{\"op\":\"next_task\",\"step\":1,\"kind\":\"Member\"}", "kind:",
         TIDE_TRAINER_ERR_BAD_FIELD},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dec(bad[i].line, &m, err, &ref), bad[i].code);
        assert_non_null(strstr(err, bad[i].field));
        assert_int_equal(m.op, 0);
        assert_null(m.ids);
        assert_non_null(ref);
    }

    assert_int_equal(dec("{\"op\":\"next_task\",\"step\":5}", &m, err, &ref), TIDE_TRAINER_OK);
    assert_string_equal(ref, "next_task");
    assert_int_equal(m.op, TIDE_TRAINER_OP_NEXT_TASK);
    assert_int_equal(m.step, 5);
    assert_int_equal(m.kind, TIDE_TRAINER_KIND_MEMBER);
    assert_int_equal(m.done, -1);
    assert_int_equal(dec("{\"op\":\"next_task\",\"step\":5,\"kind\":\"detached\","
                         "\"done\":9007199254740991}",
                         &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.kind, TIDE_TRAINER_KIND_DETACHED);
    assert_true(m.done == INT64_C(9007199254740991));
    assert_int_equal(dec("{\"op\":\"next_task\",\"step\":5,\"done\":0}", &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.done, 0);
    tide_trainer_msg_free(&m);
    tide_trainer_msg_free(&m); /* twice is fine */
}

/* load (phase-aware burst, docs/trainer-api.md): high is a JSON boolean, nothing else. */
static void test_decode_load(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref;
    static const char *const bad[] = {
        "{\"op\":\"load\"}",
        "{\"op\":\"load\",\"high\":1}",
        "{\"op\":\"load\",\"high\":0}",
        "{\"op\":\"load\",\"high\":\"true\"}",
        "{\"op\":\"load\",\"high\":null}",
        "{\"op\":\"load\",\"high\":[true]}",
        "{\"op\":\"load\",\"High\":true}",
    };

    assert_int_equal(dec("{\"op\":\"load\",\"high\":true}", &m, err, &ref), TIDE_TRAINER_OK);
    assert_int_equal(m.op, TIDE_TRAINER_OP_LOAD);
    assert_string_equal(ref, "load");
    assert_true(m.high);
    assert_int_equal(dec("{\"high\" : false , \"op\":\"load\", \"extra\": 7}", &m, err, &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.op, TIDE_TRAINER_OP_LOAD);
    assert_false(m.high);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dec("{\"op\":\"load\",\"high\":true}", &m, err, &ref), TIDE_TRAINER_OK);
        ref = NULL;
        assert_int_equal(dec(bad[i], &m, err, &ref), TIDE_TRAINER_ERR_BAD_FIELD);
        assert_string_equal(ref, "load");
        if (strcmp(err, "high: must be true or false") != 0)
            fail_msg("%s: got \"%s\"", bad[i], err);
        assert_int_equal(m.op, 0); /* a failed decode leaves the message empty */
        assert_false(m.high);
    }
    /* the list of ops an unknown one gets names it */
    assert_int_equal(dec("{\"op\":\"loads\"}", &m, err, &ref), TIDE_TRAINER_ERR_UNKNOWN_OP);
    assert_non_null(strstr(err, "load"));
    tide_trainer_msg_free(&m);
}

static void test_decode_bad_json_and_unknown_op(void **state)
{
    tide_trainer_msg_t m = {0};
    char err[192];
    const char *ref = "x";
    static const char *const bad_json[] = {
        "", "not json", "{", "[1,2]", "\"op\"", "42", "{\"op\":\"step\"} trailing", "{\"op\":}",
        "{\"op\":\"phase\",\"phase\":\"eval\"}{}",
    };
    static const char *const unknown[] = {
        "{}", "{\"op\":\"launch\"}", "{\"op\":5}", "{\"op\":null}", "{\"OP\":\"step\"}",
        "{\"op\":\"welcome\"}",
    };

    for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++) {
        ref = "x";
        assert_int_equal(dec(bad_json[i], &m, err, &ref), TIDE_TRAINER_ERR_BAD_JSON);
        assert_null(ref);
        assert_true(err[0] != '\0');
    }
    /* a NUL inside the line */
    assert_int_equal(tide_trainer_decode("{\"op\":\"phase\",\"phase\":\"eval\"}\0x", 31, &m, err,
                                         sizeof(err), &ref),
                     TIDE_TRAINER_ERR_BAD_JSON);
    /* a line that is not NUL-terminated is read only up to len */
    assert_int_equal(tide_trainer_decode("{\"op\":\"phase\",\"phase\":\"eval\"}garbage", 29, &m, err,
                                         sizeof(err), &ref),
                     TIDE_TRAINER_OK);
    assert_int_equal(m.phase, TIDE_TRAINER_PHASE_EVAL);
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        ref = "x";
        assert_int_equal(dec(unknown[i], &m, err, &ref), TIDE_TRAINER_ERR_UNKNOWN_OP);
        assert_null(ref);
        assert_non_null(strstr(err, "op:"));
    }
    /* a tiny error buffer truncates, NULL err and ref are fine */
    assert_int_equal(tide_trainer_decode("{\"op\":\"phase\"}", 14, &m, err, 4, NULL),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    assert_string_equal(err, "pha");
    assert_int_equal(tide_trainer_decode("{\"op\":\"phase\"}", 14, &m, NULL, 0, NULL),
                     TIDE_TRAINER_ERR_BAD_FIELD);
    tide_trainer_msg_free(&m);
}

/* --- encoding --------------------------------------------------------------------------------- */

static cJSON *parse_line(tide_buf_t *b)
{
    cJSON *j;

    assert_true(b->len > 0);
    assert_int_equal(b->data[b->len - 1], '\n');
    assert_null(memchr(b->data, '\n', b->len - 1)); /* one line */
    j = cJSON_ParseWithLength((const char *)b->data, b->len);
    assert_non_null(j);
    return j;
}

static void test_encoders_round_trip(void **state)
{
    static const char *const tricky[] = {
        "plain",
        "quote \" backslash \\ slash /",
        "newline\nreturn\rtab\tbell\a nul-less \x01\x1f del \x7f",
        "utf-8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
        "",
    };
    tide_buf_t b = TIDE_BUF_INIT;
    cJSON *j;

    for (size_t i = 0; i < sizeof(tricky) / sizeof(tricky[0]); i++) {
        tide_buf_reset(&b);
        tide_trainer_encode_welcome(&b, tricky[i]);
        j = parse_line(&b);
        assert_string_equal(cJSON_GetObjectItem(j, "op")->valuestring, "welcome");
        assert_int_equal(cJSON_GetObjectItem(j, "v")->valuedouble, 1);
        assert_string_equal(cJSON_GetObjectItem(j, "worker")->valuestring, tricky[i]);
        cJSON_Delete(j);

        tide_buf_reset(&b);
        tide_trainer_encode_error(&b, TIDE_TRAINER_ERR_BAD_FIELD, tricky[i], "step");
        j = parse_line(&b);
        assert_string_equal(cJSON_GetObjectItem(j, "op")->valuestring, "error");
        assert_string_equal(cJSON_GetObjectItem(j, "code")->valuestring, "bad_field");
        assert_string_equal(cJSON_GetObjectItem(j, "message")->valuestring, tricky[i]);
        assert_string_equal(cJSON_GetObjectItem(j, "ref")->valuestring, "step");
        cJSON_Delete(j);
    }
    /* invalid UTF-8 becomes U+FFFD; no ref when unknown */
    tide_buf_reset(&b);
    tide_trainer_encode_error(&b, TIDE_TRAINER_ERR_BAD_JSON, "bad \xff\xc3 end", NULL);
    j = parse_line(&b);
    assert_string_equal(cJSON_GetObjectItem(j, "message")->valuestring,
                        "bad \xef\xbf\xbd\xef\xbf\xbd end");
    assert_null(cJSON_GetObjectItem(j, "ref"));
    assert_string_equal(cJSON_GetObjectItem(j, "code")->valuestring, "bad_json");
    cJSON_Delete(j);

    /* every error code has its wire name */
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_LINE_TOO_LONG), "line_too_long");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_UNKNOWN_OP), "unknown_op");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_NOT_HELLO), "not_hello");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_UNKNOWN_RANK), "unknown_rank");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_STEP_BACKWARDS), "step_backwards");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_UNKNOWN_TASK), "unknown_task");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_UNKNOWN_STEP), "unknown_step");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_TASK_CONFLICT), "task_conflict");
    assert_string_equal(tide_trainer_err_name(TIDE_TRAINER_ERR_BUSY), "busy");
    assert_string_equal(tide_trainer_err_name((tide_trainer_err_t)99), "internal");
    assert_string_equal(tide_trainer_kind_name(TIDE_TRAINER_KIND_MEMBER), "member");
    assert_string_equal(tide_trainer_kind_name(TIDE_TRAINER_KIND_DETACHED), "detached");
    assert_null(tide_trainer_kind_name((tide_trainer_kind_t)0));

    /* task and no_task */
    tide_buf_reset(&b);
    tide_trainer_encode_task(&b, 12, TIDE_TRAINER_KIND_DETACHED, UINT64_C(9007199254740991));
    assert_string_equal(tide_buf_cstr(&b), "{\"op\":\"task\",\"step\":12,\"kind\":\"detached\","
                                           "\"id\":9007199254740991}\n");
    j = parse_line(&b);
    assert_true(cJSON_GetObjectItem(j, "id")->valuedouble == 9007199254740991.0);
    cJSON_Delete(j);
    tide_buf_reset(&b);
    tide_trainer_encode_no_task(&b, 0, TIDE_TRAINER_KIND_MEMBER);
    assert_string_equal(tide_buf_cstr(&b), "{\"op\":\"no_task\",\"step\":0,\"kind\":\"member\"}\n");
    j = parse_line(&b);
    cJSON_Delete(j);

    /* integers print exactly (no exponent, no rounding through a double) */
    tide_buf_reset(&b);
    tide_trainer_encode_checkpoint_now(&b, INT64_C(9007199254740991), INT64_C(1700000000123));
    assert_string_equal(tide_buf_cstr(&b), "{\"op\":\"checkpoint_now\",\"id\":9007199254740991,"
                                           "\"deadline_unix_ms\":1700000000123}\n");
    j = parse_line(&b);
    assert_true(cJSON_GetObjectItem(j, "deadline_unix_ms")->valuedouble == 1700000000123.0);
    cJSON_Delete(j);
    tide_buf_reset(&b);
    tide_trainer_encode_stop_after_step(&b, 1000000000000000);
    assert_string_equal(tide_buf_cstr(&b),
                        "{\"op\":\"stop_after_step\",\"step\":1000000000000000}\n");
    j = parse_line(&b);
    assert_string_equal(cJSON_GetObjectItem(j, "op")->valuestring, "stop_after_step");
    cJSON_Delete(j);
    /* encoders append */
    tide_buf_reset(&b);
    tide_trainer_encode_stop_after_step(&b, 1);
    tide_trainer_encode_stop_after_step(&b, 2);
    assert_string_equal(tide_buf_cstr(&b), "{\"op\":\"stop_after_step\",\"step\":1}\n"
                                           "{\"op\":\"stop_after_step\",\"step\":2}\n");
    tide_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_split_across_feeds),
        cmocka_unit_test(test_lines_many_in_one_feed),
        cmocka_unit_test(test_lines_oversize_streamed),
        cmocka_unit_test(test_lines_oversize_whole_and_limits),
        cmocka_unit_test(test_decode_hello),
        cmocka_unit_test(test_decode_step),
        cmocka_unit_test(test_decode_phase_and_checkpoint),
        cmocka_unit_test(test_decode_attach_and_exited),
        cmocka_unit_test(test_decode_tasks_and_next_task),
        cmocka_unit_test(test_decode_load),
        cmocka_unit_test(test_decode_bad_json_and_unknown_op),
        cmocka_unit_test(test_encoders_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
