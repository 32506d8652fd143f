/* tide-loadgen: N simulated workers against a real tide-scheduler (docs/performance.md, "Fleet load"). Each
 * worker is its own WorkerService/Connect stream; the streams are spread over C HTTP/2 connections (nghttp2
 * client sessions on one libuv loop). Workers register at a bounded rate, then heartbeat at the interval with
 * phases spread evenly; an HTTP/2 PING per connection measures the queueing + handling delay of the frames
 * before it. Invariant: at most one DATA item per stream is queued in nghttp2 (a heartbeat due while the last
 * one is still queued is skipped and counted), and a steady heartbeat allocates nothing (messages are encoded
 * from pre-packed telemetry straight into nghttp2's frame buffer; nghttp2 allocates from size-class
 * free lists). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "tide/v1/worker_service.pb-c.h"

#define N_TELEMETRY   64      /* distinct pre-packed telemetry readings */
#define RBUF_SIZE     (256u << 10)
#define HB_MAX        256     /* bytes of one encoded heartbeat (gRPC prefix included) */
#define OBUF_HIGH     (8u << 20) /* stop pulling frames from nghttp2 past this much unwritten output */
#define REG_OUTSTANDING_DEFAULT 2000

enum { W_IDLE = 0, W_HELLO, W_WELCOMED, W_CLOSED };

typedef struct lg_conn lg_conn_t;

typedef struct lg_worker {
    uint32_t idx;
    int32_t stream_id;
    uint16_t off;      /* bytes of the current message already handed to nghttp2 */
    uint8_t state;
    bool in_flight;    /* a DATA item is queued in nghttp2 */
    uint64_t seq;
    lg_conn_t *conn;
} lg_worker_t;

typedef struct obuf {
    uint8_t *p;
    size_t len, cap, off;
} obuf_t;

struct lg_conn {
    uint32_t idx;
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    nghttp2_session *s;
    bool connected, writing, dirty, dead;
    obuf_t out, wr; /* out: filling; wr: being written */
    bool ping_out;
    uint64_t ping_sent_ns;
    uint64_t next_ping_ns;
};

typedef struct opts {
    const char *sched;
    const char *token_file;
    uint32_t workers, conns, interval_ms, node_gpus, tick_ms, ping_ms, reg_rate, reg_outstanding;
    double duration_s, warmup_s;
    bool json;
} opts_t;

typedef struct stats {
    uint64_t hb_sent, hb_skipped_inflight, hb_skipped_window, hb_skipped_notready;
    uint64_t bytes_sent, rx_msgs;
    uint64_t pings, ping_missed, pings_open_at_end;
    uint32_t *rtt_us;
    size_t n_rtt, cap_rtt;
    uint64_t max_tick_late_us;
    uint64_t max_batch;
} stats_t;

static opts_t O = {.interval_ms = 500, .node_gpus = 8, .tick_ms = 5, .ping_ms = 200, .reg_rate = 10000,
                   .reg_outstanding = REG_OUTSTANDING_DEFAULT, .duration_s = 30, .warmup_s = 5};
static uv_loop_t *loop;
static struct sockaddr_in sched_addr;
static char authority[128];
static char auth_value[600];
static lg_worker_t *workers;
static lg_conn_t *conns;
static uint8_t tele[N_TELEMETRY][128];
static size_t tele_len[N_TELEMETRY];
static uint8_t rbuf[RBUF_SIZE];
static stats_t st;
static uint64_t t0_ns, reg_start_ns, reg_done_ns, win_start_ns, win_end_ns;
static uint64_t hb_cursor;   /* heartbeat slots processed since t0 */
static uint32_t reg_next;    /* next worker to register */
static uint64_t hb_total;    /* heartbeats handed to the connections, warmup and registration included */
static uv_timer_t drain_timer;
static uint32_t n_welcomed, n_closed, n_hello_pending, n_conn_up, n_conn_failed;
static uint32_t welcome_interval_ms;
static char first_error[256];
static bool in_window, finished;
static struct rusage ru_win0;
static uv_timer_t tick_timer;
static uint64_t next_tick_ns;
static int exit_code;

/* ---- nghttp2 allocator: size-class free lists, so a steady state allocates nothing ---- */
#define N_CLASS 12 /* 32 B .. 64 KiB */
typedef union blk {
    union blk *next;
    struct {
        uint32_t cls;
        uint32_t pad;
        uint64_t pad2;
    } h;
} blk_t;
static blk_t *freel[N_CLASS];

static int size_class(size_t n)
{
    size_t c = 32;
    for (int i = 0; i < N_CLASS; i++, c <<= 1)
        if (n <= c)
            return i;
    return -1;
}

static void *pool_malloc(size_t n, void *ud)
{
    int cls = size_class(n);
    blk_t *b;
    (void)ud;
    if (cls >= 0 && freel[cls]) {
        b = freel[cls];
        freel[cls] = b->next;
    } else {
        b = malloc(sizeof(blk_t) + (cls >= 0 ? (size_t)32 << cls : n));
        if (!b)
            return NULL;
    }
    b->h.cls = cls >= 0 ? (uint32_t)cls : UINT32_MAX;
    return b + 1;
}

static void pool_free(void *p, void *ud)
{
    blk_t *b;
    (void)ud;
    if (!p)
        return;
    b = (blk_t *)p - 1;
    if (b->h.cls == UINT32_MAX) {
        free(b);
        return;
    }
    {
        uint32_t cls = b->h.cls;
        b->next = freel[cls];
        freel[cls] = b;
    }
}

static void *pool_calloc(size_t nm, size_t sz, void *ud)
{
    void *p = pool_malloc(nm * sz, ud);
    if (p)
        memset(p, 0, nm * sz);
    return p;
}

static void *pool_realloc(void *p, size_t n, void *ud)
{
    blk_t *b;
    size_t have;
    void *q;
    if (!p)
        return pool_malloc(n, ud);
    b = (blk_t *)p - 1;
    if (b->h.cls != UINT32_MAX) {
        have = (size_t)32 << b->h.cls;
        if (n <= have)
            return p;
    } else {
        q = realloc(b, sizeof(blk_t) + n);
        return q ? (blk_t *)q + 1 : NULL;
    }
    q = pool_malloc(n, ud);
    if (!q)
        return NULL;
    memcpy(q, p, have);
    pool_free(p, ud);
    return q;
}

static nghttp2_mem pool_mem = {NULL, pool_malloc, pool_free, pool_calloc, pool_realloc};

/* ---- encoding ---- */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A gRPC-framed WorkerMessage{heartbeat: {seq, telemetry}} into out (HB_MAX bytes); returns its length. */
static size_t encode_heartbeat(uint8_t *out, uint64_t seq, uint32_t variant)
{
    const uint8_t *t = tele[variant % N_TELEMETRY];
    size_t tl = tele_len[variant % N_TELEMETRY];
    size_t hb_len = 1 + varint_len(seq) + 1 + varint_len(tl) + tl;
    size_t msg_len = 1 + varint_len(hb_len) + hb_len;
    size_t n = 5;

    out[0] = 0;
    out[1] = (uint8_t)(msg_len >> 24);
    out[2] = (uint8_t)(msg_len >> 16);
    out[3] = (uint8_t)(msg_len >> 8);
    out[4] = (uint8_t)msg_len;
    out[n++] = 0x12; /* WorkerMessage.heartbeat = 2, length-delimited */
    n += put_varint(out + n, hb_len);
    out[n++] = 0x08; /* Heartbeat.seq = 1, varint */
    n += put_varint(out + n, seq);
    out[n++] = 0x12; /* Heartbeat.telemetry = 2 */
    n += put_varint(out + n, tl);
    memcpy(out + n, t, tl);
    return n + tl;
}

/* A gRPC-framed hello for worker idx into out (cap bytes); returns its length or 0. */
static size_t encode_hello(uint8_t *out, size_t cap, uint32_t idx)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__WorkerHello h = TIDE__V1__WORKER_HELLO__INIT;
    char id[64], node[32], launcher[32], sock[96];
    uint32_t gpu = idx % O.node_gpus;
    size_t n;

    snprintf(node, sizeof(node), "lg-%06u", idx / O.node_gpus);
    snprintf(id, sizeof(id), "%s/gpu%u", node, gpu);
    snprintf(launcher, sizeof(launcher), "127.0.0.1:%u", 20000 + idx % 40000);
    snprintf(sock, sizeof(sock), "/run/tide/%s-gpu%u.sock", node, gpu);
    h.protocol_version = TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT;
    h.worker_id = id;
    h.node = node;
    h.gpu_index = (int32_t)gpu;
    h.device = (char *)"sim:h100";
    h.peak_flops = 989e12;
    h.memory_bytes = 80ull << 30;
    h.address = (char *)"127.0.0.1";
    h.launcher_address = launcher;
    h.agent_sock = sock;
    h.version = (char *)TIDE_VERSION;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HELLO;
    m.hello = &h;
    n = tide__v1__worker_message__get_packed_size(&m);
    if (n + 5 > cap)
        return 0;
    out[0] = 0;
    out[1] = (uint8_t)(n >> 24);
    out[2] = (uint8_t)(n >> 16);
    out[3] = (uint8_t)(n >> 8);
    out[4] = (uint8_t)n;
    tide__v1__worker_message__pack(&m, out + 5);
    return n + 5;
}

/* Realistic readings (the fields the real worker fills, docs/metrics.md), packed once. */
static void build_telemetry(void)
{
    for (uint32_t v = 0; v < N_TELEMETRY; v++) {
        Tide__V1__Telemetry t = TIDE__V1__TELEMETRY__INIT;
        t.gpu_util = 0.55 + 0.4 * (double)((v * 37) % 64) / 64.0;
        t.mem_total_bytes = 80ull << 30;
        t.mem_used_bytes = (52ull << 30) + (uint64_t)v * (97ull << 20);
        t.temperature_c = 58.0 + (double)(v % 17);
        t.power_w = 420.0 + 3.7 * (double)v;
        t.mem_bw_util = 0.35 + 0.005 * (double)v;
        t.sm_clock_mhz = 1980 - (v % 4) * 15;
        t.mem_clock_mhz = 2619;
        t.throttle_reasons = (v % 16 == 0) ? 4 : 0;
        t.ecc_corrected = v / 8;
        t.ecc_uncorrected = 0;
        t.xid_count = 0;
        t.last_xid = 0;
        t.known = 2047;
        t.net_util = 0.2 + 0.01 * (double)v;
        t.storage_util = 0.05 + 0.002 * (double)v;
        tele_len[v] = tide__v1__telemetry__get_packed_size(&t);
        if (tele_len[v] > sizeof(tele[v])) {
            fprintf(stderr, "tide-loadgen: telemetry too large\n");
            exit(2);
        }
        tide__v1__telemetry__pack(&t, tele[v]);
    }
}

/* The hand-made encoding must be what protobuf-c reads back. */
static int self_check(void)
{
    uint8_t b[HB_MAX];
    uint64_t seqs[] = {1, 127, 128, 300000, 1ull << 40};
    for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
        size_t n = encode_heartbeat(b, seqs[i], (uint32_t)i * 7);
        uint32_t ml = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
        Tide__V1__WorkerMessage *m;
        int ok;
        if (ml + 5 != n)
            return -1;
        m = tide__v1__worker_message__unpack(NULL, ml, b + 5);
        ok = m && m->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT && m->heartbeat->seq == seqs[i] &&
             m->heartbeat->telemetry && m->heartbeat->telemetry->known == 2047;
        if (m)
            tide__v1__worker_message__free_unpacked(m, NULL);
        if (!ok)
            return -1;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

/* ---- output path ---- */
static void obuf_reserve(obuf_t *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    while (b->len + more > b->cap)
        b->cap = b->cap ? b->cap * 2 : 64 << 10;
    b->p = realloc(b->p, b->cap);
    if (!b->p)
        abort();
}

static void conn_flush(lg_conn_t *c);

static void on_written(uv_write_t *req, int status)
{
    lg_conn_t *c = req->data;
    c->writing = false;
    c->wr.len = 0;
    c->wr.off = 0;
    if (status < 0) {
        if (!c->dead && !first_error[0])
            snprintf(first_error, sizeof(first_error), "write: %s", uv_strerror(status));
        c->dead = true;
        return;
    }
    conn_flush(c);
}

static void conn_flush(lg_conn_t *c)
{
    c->dirty = false;
    if (!c->connected || c->dead)
        return;
    while (c->out.len < OBUF_HIGH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->s, &data);
        if (n < 0) {
            snprintf(first_error, sizeof(first_error), "nghttp2 send: %s", nghttp2_strerror((int)n));
            c->dead = true;
            return;
        }
        if (n == 0)
            break;
        obuf_reserve(&c->out, (size_t)n);
        memcpy(c->out.p + c->out.len, data, (size_t)n);
        c->out.len += (size_t)n;
    }
    if (c->writing || c->out.len == 0)
        return;
    {
        uv_buf_t b = uv_buf_init((char *)c->out.p, (unsigned)c->out.len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        obuf_t tmp;
        if (n == (int)c->out.len) {
            c->out.len = 0;
            return;
        }
        if (n < 0 && n != UV_EAGAIN) {
            snprintf(first_error, sizeof(first_error), "write: %s", uv_strerror(n));
            c->dead = true;
            return;
        }
        if (n < 0)
            n = 0;
        /* The rest goes by uv_write from wr; out starts empty again. */
        tmp = c->wr;
        c->wr = c->out;
        c->wr.off = (size_t)n;
        c->out = tmp;
        c->out.len = 0;
        b = uv_buf_init((char *)c->wr.p + c->wr.off, (unsigned)(c->wr.len - c->wr.off));
        c->wreq.data = c;
        c->writing = true;
        if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
            c->writing = false;
            c->dead = true;
        }
    }
}

/* ---- nghttp2 callbacks ---- */
static ssize_t read_data(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    lg_worker_t *w = src->ptr;
    uint8_t m[4096];
    size_t n, take;
    (void)s;
    (void)sid;
    (void)ud;

    if (w->state == W_HELLO && w->seq == 0)
        n = encode_hello(m, sizeof(m), w->idx);
    else
        n = encode_heartbeat(m, w->seq, w->idx + (uint32_t)w->seq);
    if (n == 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    take = n - w->off;
    if (take > length)
        take = length;
    memcpy(buf, m + w->off, take);
    w->off = (uint16_t)(w->off + take);
    if (w->off == n) {
        w->off = 0;
        w->in_flight = false;
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (w->state == W_WELCOMED) {
            hb_total++;
            if (in_window) {
                st.hb_sent++;
                st.bytes_sent += n;
            }
        }
    }
    return (ssize_t)take;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    lg_conn_t *c = ud;
    (void)s;
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
        uint64_t sent;
        memcpy(&sent, f->ping.opaque_data, 8);
        if (c->ping_out && sent == c->ping_sent_ns) {
            c->ping_out = false;
            if (in_window && sent >= win_start_ns) {
                if (st.n_rtt == st.cap_rtt) {
                    st.cap_rtt = st.cap_rtt ? st.cap_rtt * 2 : 4096;
                    st.rtt_us = realloc(st.rtt_us, st.cap_rtt * sizeof(*st.rtt_us));
                    if (!st.rtt_us)
                        abort();
                }
                st.rtt_us[st.n_rtt++] = (uint32_t)((now_ns() - sent) / 1000);
            }
        }
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
                         void *ud)
{
    lg_worker_t *w = nghttp2_session_get_stream_user_data(s, sid);
    (void)flags;
    (void)ud;
    if (!w)
        return 0;
    st.rx_msgs++;
    if (w->state == W_HELLO) {
        /* The first message must be the Welcome. */
        if (len >= 5) {
            uint32_t ml = (uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 8 | data[4];
            if (len >= 5 + (size_t)ml) {
                Tide__V1__SchedulerMessage *m = tide__v1__scheduler_message__unpack(NULL, ml, data + 5);
                if (m && m->msg_case == TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME)
                    welcome_interval_ms = m->welcome->heartbeat_interval_ms;
                else if (!first_error[0])
                    snprintf(first_error, sizeof(first_error), "worker %u: first message is not a Welcome",
                             w->idx);
                if (m)
                    tide__v1__scheduler_message__free_unpacked(m, NULL);
            }
        }
        w->state = W_WELCOMED;
        n_welcomed++;
        n_hello_pending--;
        if (n_welcomed == O.workers)
            reg_done_ns = now_ns();
    }
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    (void)s;
    (void)flags;
    (void)ud;
    if (first_error[0] || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    if ((nl == 12 && !memcmp(name, "grpc-message", 12)) || (nl == 7 && !memcmp(name, ":status", 7) &&
                                                             !(vl == 3 && !memcmp(value, "200", 3))))
        snprintf(first_error, sizeof(first_error), "stream %d: %.*s: %.*s", f->hd.stream_id, (int)nl, name,
                 (int)(vl > 200 ? 200 : vl), value);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t sid, uint32_t code, void *ud)
{
    lg_worker_t *w = nghttp2_session_get_stream_user_data(s, sid);
    (void)ud;
    if (!w)
        return 0;
    if (w->state == W_HELLO)
        n_hello_pending--;
    if (w->state == W_WELCOMED)
        n_welcomed--;
    w->state = W_CLOSED;
    w->in_flight = false;
    n_closed++;
    if (!first_error[0] && code)
        snprintf(first_error, sizeof(first_error), "stream %d reset: %s", sid, nghttp2_http2_strerror(code));
    return 0;
}

/* ---- connections ---- */
static void on_alloc(uv_handle_t *h, size_t sugg, uv_buf_t *b)
{
    (void)h;
    (void)sugg;
    *b = uv_buf_init((char *)rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *b)
{
    lg_conn_t *c = stream->data;
    if (n < 0) {
        if (!first_error[0])
            snprintf(first_error, sizeof(first_error), "connection %u: %s", c->idx, uv_strerror((int)n));
        c->dead = true;
        uv_read_stop(stream);
        return;
    }
    if (n == 0)
        return;
    if (nghttp2_session_mem_recv(c->s, (const uint8_t *)b->base, (size_t)n) < 0) {
        snprintf(first_error, sizeof(first_error), "connection %u: HTTP/2 error from the scheduler", c->idx);
        c->dead = true;
        return;
    }
    conn_flush(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    lg_conn_t *c = req->data;
    nghttp2_settings_entry iv[2] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 24},
                                    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    if (status < 0) {
        snprintf(first_error, sizeof(first_error), "connect %s: %s", O.sched, uv_strerror(status));
        c->dead = true;
        n_conn_failed++;
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->tcp.data = c;
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, (1 << 30));
    c->connected = true;
    n_conn_up++;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    conn_flush(c);
}

static int conn_open(lg_conn_t *c)
{
    nghttp2_session_callbacks *cbs;
    int rc;

    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    rc = nghttp2_session_client_new3(&c->s, cbs, c, NULL, &pool_mem);
    nghttp2_session_callbacks_del(cbs);
    if (rc)
        return -ENOMEM;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    return uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&sched_addr, on_connect);
}

/* ---- the schedule ---- */
static void worker_register(lg_worker_t *w)
{
    nghttp2_nv nv[7];
    nghttp2_data_provider dp;
    size_t nn = 0;
#define NV(n, v)                                                                                            \
    nv[nn++] = (nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                      \
                            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}
    NV(":method", "POST");
    NV(":scheme", "http");
    NV(":path", "/tide.v1.WorkerService/Connect");
    NV(":authority", authority);
    NV("content-type", "application/grpc");
    NV("te", "trailers");
    if (auth_value[0])
        NV("authorization", auth_value);
#undef NV
    dp.source.ptr = w;
    dp.read_callback = read_data;
    w->state = W_HELLO;
    w->seq = 0;
    w->off = 0;
    w->in_flight = true;
    w->stream_id = nghttp2_submit_request(w->conn->s, NULL, nv, nn, &dp, w);
    if (w->stream_id < 0) {
        snprintf(first_error, sizeof(first_error), "submit: %s", nghttp2_strerror(w->stream_id));
        w->state = W_CLOSED;
        n_closed++;
        return;
    }
    n_hello_pending++;
    w->conn->dirty = true;
}

static void heartbeat(lg_worker_t *w)
{
    nghttp2_data_provider dp;
    lg_conn_t *c = w->conn;
    int rc;

    if (w->state != W_WELCOMED || c->dead) {
        st.hb_skipped_notready += in_window;
        return;
    }
    if (w->in_flight) {
        st.hb_skipped_inflight += in_window;
        return;
    }
    if (nghttp2_session_get_stream_remote_window_size(c->s, w->stream_id) < HB_MAX ||
        nghttp2_session_get_remote_window_size(c->s) < HB_MAX) {
        st.hb_skipped_window += in_window;
        return;
    }
    w->seq++;
    w->off = 0;
    dp.source.ptr = w;
    dp.read_callback = read_data;
    rc = nghttp2_submit_data(c->s, NGHTTP2_FLAG_NONE, w->stream_id, &dp);
    if (rc != 0) {
        st.hb_skipped_inflight += in_window;
        return;
    }
    w->in_flight = true;
    c->dirty = true;
}

static void report(void);

static void on_drained(uv_timer_t *t)
{
    (void)t;
    for (uint32_t i = 0; i < O.conns; i++)
        if (conns[i].out.len || conns[i].writing)
            fprintf(stderr, "lg: connection %u still had %zu bytes unwritten at the exit\n", i,
                    conns[i].out.len + conns[i].wr.len - conns[i].wr.off);
    fprintf(stderr, "lg: heartbeats sent in all %" PRIu64 "\n", hb_total);
    uv_stop(loop);
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = now_ns(), due, batch = 0;
    (void)t;

    if (next_tick_ns && in_window && now > next_tick_ns && (now - next_tick_ns) / 1000 > st.max_tick_late_us)
        st.max_tick_late_us = (now - next_tick_ns) / 1000;
    next_tick_ns = now + (uint64_t)O.tick_ms * 1000000u;

    if (n_conn_failed) {
        fprintf(stderr, "tide-loadgen: %s\n", first_error);
        exit_code = 1;
        uv_stop(loop);
        return;
    }
    /* Registration: at most reg_rate per second since the start, at most reg_outstanding unanswered. */
    if (reg_next < O.workers) {
        uint64_t allowed = (now - reg_start_ns) * O.reg_rate / 1000000000u;
        while (reg_next < O.workers && reg_next < allowed && n_hello_pending < O.reg_outstanding) {
            lg_worker_t *w = &workers[reg_next++];
            if (!w->conn->connected) {
                reg_next--;
                break;
            }
            worker_register(w);
        }
    }
    /* Heartbeats: slot k belongs to worker k % N at time t0 + k * interval / N. */
    due = (now - t0_ns) * O.workers / ((uint64_t)O.interval_ms * 1000000u);
    while (hb_cursor < due) {
        heartbeat(&workers[hb_cursor % O.workers]);
        hb_cursor++;
        batch++;
    }
    if (in_window && batch > st.max_batch)
        st.max_batch = batch;
    /* PINGs, staggered over the connections. */
    for (uint32_t i = 0; i < O.conns; i++) {
        lg_conn_t *c = &conns[i];
        if (!c->connected || c->dead || now < c->next_ping_ns)
            continue;
        c->next_ping_ns += (uint64_t)O.ping_ms * 1000000u;
        if (c->next_ping_ns < now)
            c->next_ping_ns = now + (uint64_t)O.ping_ms * 1000000u;
        if (c->ping_out) {
            st.ping_missed += in_window; /* the last one is still unanswered: it keeps counting */
            continue;
        }
        c->ping_sent_ns = now;
        c->ping_out = true;
        nghttp2_submit_ping(c->s, NGHTTP2_FLAG_NONE, (const uint8_t *)&c->ping_sent_ns);
        st.pings += in_window;
        c->dirty = true;
    }
    for (uint32_t i = 0; i < O.conns; i++)
        if (conns[i].dirty)
            conn_flush(&conns[i]);

    /* Phases: registering -> warmup -> window -> done. */
    if (!reg_done_ns && n_welcomed + n_closed >= O.workers && reg_next == O.workers && !n_hello_pending)
        reg_done_ns = now;
    if (reg_done_ns && !win_start_ns && now >= reg_done_ns + (uint64_t)(O.warmup_s * 1e9)) {
        win_start_ns = now;
        in_window = true;
        getrusage(RUSAGE_SELF, &ru_win0);
        fprintf(stderr, "lg: window start %.3f welcomed %u closed %u\n", (double)time(NULL), n_welcomed,
                n_closed);
    }
    if (win_start_ns && !finished && now >= win_start_ns + (uint64_t)(O.duration_s * 1e9)) {
        win_end_ns = now;
        in_window = false;
        finished = true;
        fprintf(stderr, "lg: window end\n");
        report();
        /* No more heartbeats; what is queued goes out before the exit, so hb_total is what was sent. */
        uv_timer_stop(&tick_timer);
        uv_timer_init(loop, &drain_timer);
        uv_timer_start(&drain_timer, on_drained, 500, 0);
        for (uint32_t i = 0; i < O.conns; i++)
            conn_flush(&conns[i]);
    }
    if (!reg_done_ns && reg_start_ns && now - reg_start_ns > 600ull * 1000000000u) {
        fprintf(stderr, "tide-loadgen: registration did not finish in 600 s (%u welcomed, %u closed): %s\n",
                n_welcomed, n_closed, first_error);
        exit_code = 1;
        uv_stop(loop);
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p)
{
    size_t i;
    if (!st.n_rtt)
        return -1;
    i = (size_t)(p * (double)(st.n_rtt - 1) + 0.5);
    return st.rtt_us[i] / 1000.0;
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void report(void)
{
    struct rusage ru;
    double win = (double)(win_end_ns - win_start_ns) / 1e9;
    double reg_s = (double)(reg_done_ns - reg_start_ns) / 1e9;
    double cpu;

    /* A PING still unanswered at the end waited at least this long: counted (a lower bound), or the
     * worst waits would be left out. */
    for (uint32_t i = 0; i < O.conns; i++) {
        lg_conn_t *c = &conns[i];
        if (!c->ping_out || c->ping_sent_ns < win_start_ns)
            continue;
        if (st.n_rtt == st.cap_rtt) {
            st.cap_rtt = st.cap_rtt ? st.cap_rtt * 2 : 4096;
            st.rtt_us = realloc(st.rtt_us, st.cap_rtt * sizeof(*st.rtt_us));
            if (!st.rtt_us)
                abort();
        }
        st.rtt_us[st.n_rtt++] = (uint32_t)((win_end_ns - c->ping_sent_ns) / 1000);
        st.pings_open_at_end++;
    }
    getrusage(RUSAGE_SELF, &ru);
    cpu = tv_s(ru.ru_utime) + tv_s(ru.ru_stime) - tv_s(ru_win0.ru_utime) - tv_s(ru_win0.ru_stime);
    qsort(st.rtt_us, st.n_rtt, sizeof(*st.rtt_us), cmp_u32);
    if (n_welcomed < O.workers)
        exit_code = 1;
    if (O.json) {
        printf("{\"workers\":%u,\"connections\":%u,\"interval_ms\":%u,\"welcome_interval_ms\":%u,"
               "\"welcomed\":%u,\"closed\":%u,\"registration_s\":%.3f,\"window_s\":%.3f,"
               "\"heartbeats_sent\":%" PRIu64 ",\"heartbeats_per_s\":%.1f,\"skipped_inflight\":%" PRIu64
               ",\"skipped_window\":%" PRIu64 ",\"skipped_notready\":%" PRIu64 ",\"bytes_per_heartbeat\":%.1f,"
               "\"pings\":%" PRIu64 ",\"ping_samples\":%zu,\"pings_open_at_end\":%" PRIu64 ",\"ping_missed\":%" PRIu64 ",\"rtt_p50_ms\":%.3f,"
               "\"rtt_p99_ms\":%.3f,\"rtt_max_ms\":%.3f,\"loadgen_cpu_pct\":%.1f,\"max_tick_late_ms\":%.3f,"
               "\"max_batch\":%" PRIu64 ",\"heartbeats_total_at_window_end\":%" PRIu64 ",\"first_error\":\"",
               O.workers, O.conns, O.interval_ms, welcome_interval_ms, n_welcomed, n_closed, reg_s, win,
               st.hb_sent, (double)st.hb_sent / win, st.hb_skipped_inflight, st.hb_skipped_window,
               st.hb_skipped_notready, st.hb_sent ? (double)st.bytes_sent / (double)st.hb_sent : 0.0, st.pings,
               st.n_rtt, st.pings_open_at_end, st.ping_missed, pct(0.5), pct(0.99), pct(1.0), 100.0 * cpu / win,
               (double)st.max_tick_late_us / 1000.0, st.max_batch, hb_total);
        for (const char *p = first_error; *p; p++)
            if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
                putchar(*p);
        printf("\"}\n");
    } else {
        printf("workers %u on %u connections (interval %u ms, the scheduler says %u)\n", O.workers, O.conns,
               O.interval_ms, welcome_interval_ms);
        printf("registration: %u welcomed, %u closed, %.3f s\n", n_welcomed, n_closed, reg_s);
        printf("window %.1f s: %" PRIu64 " heartbeats sent = %.1f/s (skipped: %" PRIu64 " queued, %" PRIu64
               " flow control, %" PRIu64 " not ready), %.1f bytes each\n",
               win, st.hb_sent, (double)st.hb_sent / win, st.hb_skipped_inflight, st.hb_skipped_window,
               st.hb_skipped_notready, st.hb_sent ? (double)st.bytes_sent / (double)st.hb_sent : 0.0);
        printf("PING RTT (%zu samples of %" PRIu64 " sent, %" PRIu64 " of them unanswered at the end and counted "
               "as their age; %" PRIu64 " periods skipped waiting): p50 %.3f ms, p99 %.3f "
               "ms, max %.3f ms\n",
               st.n_rtt, st.pings, st.pings_open_at_end, st.ping_missed, pct(0.5), pct(0.99), pct(1.0));
        printf("loadgen CPU %.1f%% of one core; tick late by up to %.3f ms; up to %" PRIu64
               " heartbeats per tick\n",
               100.0 * cpu / win, (double)st.max_tick_late_us / 1000.0, st.max_batch);
        if (first_error[0])
            printf("first error: %s\n", first_error);
    }
    fflush(stdout);
}

/* ---- setup ---- */
static void usage(FILE *f)
{
    fprintf(f, "usage: tide-loadgen --scheduler HOST:PORT [--token-file F] --workers N [--connections C]\n"
               "                    [--interval-ms 500] [--duration-s 30] [--warmup-s 5] [--node-gpus 8]\n"
               "                    [--reg-rate 10000] [--reg-outstanding 2000] [--tick-ms 5] [--ping-ms 200]\n"
               "                    [-o json]\n"
               "Registers N simulated workers (node lg-NNNNNN, gpu 0..node-gpus-1, one Connect stream each)\n"
               "over C HTTP/2 connections (default: ceil(N/1000)), then heartbeats each every interval,\n"
               "phases spread evenly; a PING per connection every --ping-ms measures queueing + handling\n"
               "delay. Prints the window's numbers (stderr: progress and \"lg: window start/end\").\n");
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {
        {"scheduler", required_argument, NULL, 's'},   {"token-file", required_argument, NULL, 't'},
        {"workers", required_argument, NULL, 'n'},     {"connections", required_argument, NULL, 'c'},
        {"interval-ms", required_argument, NULL, 'i'}, {"duration-s", required_argument, NULL, 'd'},
        {"warmup-s", required_argument, NULL, 'w'},    {"node-gpus", required_argument, NULL, 'g'},
        {"reg-rate", required_argument, NULL, 'r'},    {"reg-outstanding", required_argument, NULL, 'R'},
        {"tick-ms", required_argument, NULL, 'k'},     {"ping-ms", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0}};
    int ch, bad = 0;

    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 's': O.sched = optarg; break;
        case 't': O.token_file = optarg; break;
        case 'n': bad |= parse_u32(optarg, &O.workers); break;
        case 'c': bad |= parse_u32(optarg, &O.conns); break;
        case 'i': bad |= parse_u32(optarg, &O.interval_ms); break;
        case 'g': bad |= parse_u32(optarg, &O.node_gpus); break;
        case 'r': bad |= parse_u32(optarg, &O.reg_rate); break;
        case 'R': bad |= parse_u32(optarg, &O.reg_outstanding); break;
        case 'k': bad |= parse_u32(optarg, &O.tick_ms); break;
        case 'p': bad |= parse_u32(optarg, &O.ping_ms); break;
        case 'd': O.duration_s = atof(optarg); break;
        case 'w': O.warmup_s = atof(optarg); break;
        case 'o':
            if (strcmp(optarg, "json"))
                bad = -1;
            O.json = true;
            break;
        case 'h': usage(stdout); exit(0);
        default: bad = -1; break;
        }
    }
    if (bad || optind != argc || !O.sched || !O.workers || !O.interval_ms || !O.node_gpus || !O.tick_ms ||
        !O.ping_ms || !O.reg_rate || !O.reg_outstanding || O.duration_s <= 0 || O.warmup_s < 0) {
        usage(stderr);
        return -1;
    }
    if (!O.conns)
        O.conns = (O.workers + 999) / 1000;
    if (O.conns > O.workers)
        O.conns = O.workers;
    if (O.conns > 19000) {
        fprintf(stderr, "tide-loadgen: at most 19000 connections (the open-file limit)\n");
        return -1;
    }
    return 0;
}

static int read_token(void)
{
    FILE *f;
    char tok[512];
    size_t n;

    if (!O.token_file)
        return 0;
    f = fopen(O.token_file, "r");
    if (!f) {
        fprintf(stderr, "tide-loadgen: %s: %s\n", O.token_file, strerror(errno));
        return -1;
    }
    n = fread(tok, 1, sizeof(tok) - 1, f);
    fclose(f);
    tok[n] = '\0';
    while (n && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
        tok[--n] = '\0';
    snprintf(auth_value, sizeof(auth_value), "Bearer %s", tok);
    return 0;
}

int main(int argc, char **argv)
{
    char host[64];
    const char *colon;
    int port;

    if (parse_args(argc, argv) < 0 || read_token() < 0)
        return 2;
    colon = strrchr(O.sched, ':');
    if (!colon || (size_t)(colon - O.sched) >= sizeof(host)) {
        fprintf(stderr, "tide-loadgen: --scheduler wants HOST:PORT\n");
        return 2;
    }
    memcpy(host, O.sched, (size_t)(colon - O.sched));
    host[colon - O.sched] = '\0';
    port = atoi(colon + 1);
    if (uv_ip4_addr(host, port, &sched_addr) < 0) {
        fprintf(stderr, "tide-loadgen: %s: not an IPv4 address\n", host);
        return 2;
    }
    snprintf(authority, sizeof(authority), "%s", O.sched);
    build_telemetry();
    if (self_check() < 0) {
        fprintf(stderr, "tide-loadgen: heartbeat encoding self-check failed\n");
        return 2;
    }
    loop = uv_default_loop();
    workers = calloc(O.workers, sizeof(*workers));
    conns = calloc(O.conns, sizeof(*conns));
    if (!workers || !conns)
        return 2;
    t0_ns = reg_start_ns = now_ns();
    for (uint32_t i = 0; i < O.conns; i++) {
        conns[i].idx = i;
        conns[i].next_ping_ns = t0_ns + (uint64_t)O.ping_ms * 1000000u * i / O.conns;
        if (conn_open(&conns[i]) < 0) {
            fprintf(stderr, "tide-loadgen: cannot open connection %u\n", i);
            return 1;
        }
    }
    for (uint32_t i = 0; i < O.workers; i++) {
        workers[i].idx = i;
        workers[i].conn = &conns[i % O.conns];
    }
    uv_timer_init(loop, &tick_timer);
    uv_timer_start(&tick_timer, on_tick, 1, O.tick_ms);
    fprintf(stderr, "lg: %u workers over %u connections to %s\n", O.workers, O.conns, O.sched);
    uv_run(loop, UV_RUN_DEFAULT);
    if (!finished && exit_code == 0)
        exit_code = 1;
    if (reg_done_ns)
        fprintf(stderr, "lg: done (%u welcomed, %u closed)%s%s\n", n_welcomed, n_closed,
                first_error[0] ? ": " : "", first_error);
    /* Exits without tearing the connections down: the scheduler sees them close with the process. */
    return exit_code;
}
