/* HTTP/1.1 server side on http-parser (see http1.h). Invariant: responses are appended to conn->out
 * in request order; after `done` nothing more is parsed; input is kept in `stash` only while the
 * output queue is over its bound (pipelining cannot grow the queue without limit). */
#include "http1.h"

#include <errno.h>
#include <http_parser.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide__http1_conn {
    http_parser parser;
    tide__srv_conn_t *conn;
    tide_buf_t url;    /* request-target of the request being parsed */
    size_t head_bytes; /* request line + header bytes of that request */
    bool too_large;
    bool in_request;
    bool done;
    bool error;
    uint64_t answered;
    tide_buf_t stash; /* input not parsed yet (output over its bound) */
    tide_buf_t body;  /* response body scratch, reused */
};

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

static void respond(tide__http1_conn_t *h, int status, const char *ctype, const char *extra,
                    const uint8_t *body, size_t len)
{
    tide_buf_t *out = &h->conn->out;

    tide_buf_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
                    status, reason(status), ctype, len, extra ? extra : "",
                    h->done ? "Connection: close\r\n" : "");
    tide_buf_append(out, body, len);
    h->answered++;
}

static void respond_text(tide__http1_conn_t *h, int status, const char *extra, const char *text)
{
    respond(h, status, "text/plain; charset=utf-8", extra, (const uint8_t *)text, strlen(text));
}

static int on_message_begin(http_parser *p)
{
    tide__http1_conn_t *h = p->data;

    h->url.len = 0;
    h->head_bytes = 0;
    h->too_large = false;
    h->in_request = true;
    return 0;
}

static int count_head(tide__http1_conn_t *h, size_t len)
{
    h->head_bytes += len;
    if (h->head_bytes > TIDE_HTTP1_MAX_HEAD) {
        h->too_large = true;
        return -1; /* stops the parser: answered with 431 */
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    tide__http1_conn_t *h = p->data;

    if (count_head(h, len))
        return -1;
    tide_buf_append(&h->url, at, len);
    return 0;
}

static int on_header_part(http_parser *p, const char *at, size_t len)
{
    (void)at;
    return count_head(p->data, len + 4);
}

static int on_message_complete(http_parser *p)
{
    tide__http1_conn_t *h = p->data;
    tide__srv_ctx_t *ctx = h->conn->ctx;
    const char *url = tide_buf_cstr(&h->url);
    size_t plen = strcspn(url, "?#");
    char *path = tide_xstrndup(url, plen);

    h->in_request = false;
    if (!http_should_keep_alive(p) || h->conn->state != TIDE__CONN_OPEN)
        h->done = true;
    if (p->method != HTTP_GET) {
        respond_text(h, 405, "Allow: GET\r\n", "method not allowed\n");
    } else if (!ctx->http_handler) {
        respond_text(h, 404, NULL, "not found\n");
    } else {
        const char *ctype = NULL;
        int status;

        h->body.len = 0;
        status = ctx->http_handler("GET", path, &h->body, &ctype, ctx->ud);
        if (status < 100 || status > 599)
            status = 500;
        respond(h, status, ctype ? ctype : "text/plain; charset=utf-8", NULL, h->body.data,
                h->body.len);
    }
    free(path);
    if (h->done || h->conn->out.len >= TIDE_RPC_OUT_HIGH)
        http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_part,
    .on_header_value = on_header_part,
    .on_message_complete = on_message_complete,
};

tide__http1_conn_t *tide__http1_new(tide__srv_conn_t *conn)
{
    tide__http1_conn_t *h = tide_xcalloc(1, sizeof(*h));

    http_parser_init(&h->parser, HTTP_REQUEST);
    h->parser.data = h;
    h->conn = conn;
    return h;
}

void tide__http1_free(tide__http1_conn_t *h)
{
    if (!h)
        return;
    tide_buf_free(&h->url);
    tide_buf_free(&h->stash);
    tide_buf_free(&h->body);
    free(h);
}

/* Runs the parser over data; keeps what it did not reach when it paused. */
static int execute(tide__http1_conn_t *h, const uint8_t *data, size_t len, bool from_stash)
{
    size_t n = http_parser_execute(&h->parser, &settings, (const char *)data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&h->parser);

    if (e == HPE_PAUSED) {
        if (h->done) {
            if (from_stash)
                h->stash.len = 0;
            return 0;
        }
        http_parser_pause(&h->parser, 0);
        if (from_stash) {
            tide_buf_consume(&h->stash, n);
        } else {
            tide_buf_append(&h->stash, data + n, len - n);
        }
        return 0;
    }
    if (from_stash)
        h->stash.len = 0;
    if (e != HPE_OK) {
        h->done = true;
        h->error = true;
        h->in_request = false;
        if (h->too_large)
            respond_text(h, 431, NULL, "request header fields too large\n");
        else
            respond_text(h, 400, NULL, "bad request\n");
        return -EPROTO;
    }
    if (h->parser.upgrade) /* we speak no upgrade protocol: answered, then close */
        h->done = true;
    return 0;
}

int tide__http1_feed(tide__http1_conn_t *h, const uint8_t *data, size_t len)
{
    if (h->done)
        return h->error ? -EPROTO : 0;
    if (h->stash.len > 0) {
        /* Still stalled: keep the bytes in order behind what waits. The shell stops reading while
         * stalled, so this holds at most one read's worth more. */
        tide_buf_append(&h->stash, data, len);
        return tide__http1_resume(h);
    }
    if (len == 0)
        return 0;
    return execute(h, data, len, false);
}

int tide__http1_resume(tide__http1_conn_t *h)
{
    if (h->done)
        return h->error ? -EPROTO : 0;
    if (h->stash.len == 0 || h->conn->out.len >= TIDE_RPC_OUT_HIGH)
        return 0;
    return execute(h, h->stash.data, h->stash.len, true);
}

bool tide__http1_stalled(const tide__http1_conn_t *h)
{
    return h->stash.len > 0 && !h->done;
}

bool tide__http1_done(const tide__http1_conn_t *h)
{
    return h->done;
}

bool tide__http1_in_request(const tide__http1_conn_t *h)
{
    return h->in_request;
}

uint64_t tide__http1_answered(const tide__http1_conn_t *h)
{
    return h->answered;
}
