/* LogRequest streaming (see logs.h). Invariants: every request ends with exactly one LogData with
 * eof=true (unless the stream itself ended); a followed request ends only after its rank was seen
 * not running *before* a read that hit end of file, so no output written before the exit is lost;
 * nothing is sent while the stream holds queue_limit bytes or more. */
#include "logs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "core.h"
#include "datadir.h"
#include "list.h"
#include "xmalloc.h"

#define QUEUE_LIMIT_DEFAULT    (256 * 1024)
#define CHUNK_MAX              (64 * 1024)
#define FOLLOW_POLL_DEFAULT_MS 200
#define DRAIN_POLL_DEFAULT_MS  10
#define LOG_WAIT_MS            30000 /* a followed rank's log may appear this long after the request */

typedef struct log_req {
    tide_list_t link;
    uint64_t request_id;
    char *job_id;
    int32_t generation;
    int32_t rank;
    bool follow;
    int fd;          /* -1 while a followed log does not exist yet */
    uint64_t wait_until; /* loop ms: give up waiting for the log then */
    off_t offset;
} log_req_t;

struct tide_worker_logs {
    uv_timer_t timer;
    tide_worker_logs_ops_t ops;
    void *ud;
    char *data_dir, *worker_id;
    size_t queue_limit, chunk;
    uint32_t follow_poll_ms, drain_poll_ms;
    uint8_t *buf;
    tide_list_t reqs;
    bool closing;
};

void tide_worker_logs_new(uv_loop_t *loop, const tide_worker_logs_config_t *cfg,
                          const tide_worker_logs_ops_t *ops, void *ud, tide_worker_logs_t **out)
{
    tide_worker_logs_t *l = tide_xcalloc(1, sizeof(*l));

    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    l->ops = *ops;
    l->ud = ud;
    l->data_dir = tide_xstrdup(cfg->data_dir);
    l->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    l->queue_limit = cfg->queue_limit ? cfg->queue_limit : QUEUE_LIMIT_DEFAULT;
    l->chunk = cfg->chunk && cfg->chunk < CHUNK_MAX ? cfg->chunk : CHUNK_MAX;
    l->follow_poll_ms = cfg->follow_poll_ms ? cfg->follow_poll_ms : FOLLOW_POLL_DEFAULT_MS;
    l->drain_poll_ms = cfg->drain_poll_ms ? cfg->drain_poll_ms : DRAIN_POLL_DEFAULT_MS;
    l->buf = tide_xmalloc(l->chunk);
    tide_list_init(&l->reqs);
    *out = l;
}

static void req_free(log_req_t *r)
{
    tide_list_remove(&r->link);
    if (r->fd >= 0)
        close(r->fd);
    free(r->job_id);
    free(r);
}

static void on_closed(uv_handle_t *h)
{
    tide_worker_logs_t *l = h->data;

    free(l->buf);
    free(l->data_dir);
    free(l->worker_id);
    free(l);
}

void tide_worker_logs_reset(tide_worker_logs_t *l)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &l->reqs) req_free(tide_list_entry(pos, log_req_t, link));
    uv_timer_stop(&l->timer);
}

void tide_worker_logs_free(tide_worker_logs_t *l)
{
    if (!l)
        return;
    tide_worker_logs_reset(l);
    l->closing = true;
    uv_close((uv_handle_t *)&l->timer, on_closed);
}

size_t tide_worker_logs_active(const tide_worker_logs_t *l)
{
    const tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &l->reqs) n++;
    return n;
}

static int send_data(tide_worker_logs_t *l, uint64_t request_id, int32_t rank, const uint8_t *data,
                     size_t len, bool eof, const char *error)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__LogData d = TIDE__V1__LOG_DATA__INIT;

    d.request_id = request_id;
    d.rank = rank;
    d.data.data = (uint8_t *)data;
    d.data.len = len;
    d.eof = eof;
    if (error)
        d.error = (char *)error;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA;
    m.log_data = &d;
    return l->ops.send(l->ud, &m);
}

/* The newest generation with a log file for (job, rank), or -1. */
static int32_t newest_generation(const tide_worker_logs_t *l, const char *job_id, int32_t rank)
{
    char *dir = tide_worker_log_dir(l->data_dir, job_id);
    DIR *d = opendir(dir);
    struct dirent *de;
    int32_t best = -1;

    free(dir);
    if (!d)
        return -1;
    while ((de = readdir(d)) != NULL) {
        int gen, r, end = 0;
        if (sscanf(de->d_name, "g%d.rank%d.log%n", &gen, &r, &end) == 2 &&
            de->d_name[end] == '\0' && end > 0 && r == rank && gen > best)
            best = gen;
    }
    closedir(d);
    return best;
}

static void pump(tide_worker_logs_t *l);

static void on_timer(uv_timer_t *t)
{
    pump(t->data);
}

/* Sends what it can; returns with the timer set for the next look (or stopped when idle). */
static void pump(tide_worker_logs_t *l)
{
    bool progress = true, blocked = false, following = false;

    while (progress && !blocked) {
        tide_list_t *pos, *tmp;

        progress = false;
        following = false;
        tide_list_for_each_safe(pos, tmp, &l->reqs)
        {
            log_req_t *r = tide_list_entry(pos, log_req_t, link);
            bool was_running;
            ssize_t n;

            if (l->ops.queued(l->ud) >= l->queue_limit) {
                blocked = true;
                break;
            }
            if (r->fd < 0) {
                /* A followed rank whose launch is still on its way (the request can overtake
                 * it): open its log once it exists. */
                int gen = newest_generation(l, r->job_id, r->rank);
                char *path = gen >= 0 ? tide_worker_log_path(l->data_dir, r->job_id, gen, r->rank)
                                      : NULL;
                r->fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
                free(path);
                if (r->fd < 0 && uv_now(l->timer.loop) < r->wait_until) {
                    following = true;
                    continue;
                }
                if (r->fd < 0) {
                    char *why = tide_xasprintf("no log for job %.128s rank %d on worker %s",
                                               r->job_id, r->rank, l->worker_id);
                    send_data(l, r->request_id, r->rank, NULL, 0, true, why);
                    free(why);
                    req_free(r);
                    progress = true;
                    continue;
                }
                r->generation = gen;
            }
            /* Look at the rank before reading: an exit seen here means the file is complete. */
            was_running =
                r->follow && l->ops.rank_running(l->ud, r->job_id, r->generation, r->rank);
            n = pread(r->fd, l->buf, l->chunk, r->offset);
            if (n < 0 && errno == EINTR) {
                progress = true;
                continue;
            }
            if (n > 0) {
                r->offset += n;
                if (send_data(l, r->request_id, r->rank, l->buf, (size_t)n, false, NULL) < 0)
                    req_free(r);
                progress = true;
            } else if (n == 0 && was_running) {
                following = true;
            } else {
                char why[128];
                if (n < 0)
                    snprintf(why, sizeof(why), "read log: %s", uv_strerror(-errno));
                send_data(l, r->request_id, r->rank, NULL, 0, true, n < 0 ? why : NULL);
                req_free(r);
                progress = true;
            }
        }
    }
    if (blocked)
        uv_timer_start(&l->timer, on_timer, l->drain_poll_ms, 0);
    else if (following)
        uv_timer_start(&l->timer, on_timer, l->follow_poll_ms, 0);
    else
        uv_timer_stop(&l->timer);
}

void tide_worker_logs_kick(tide_worker_logs_t *l)
{
    if (!l->closing && !tide_list_empty(&l->reqs))
        uv_timer_start(&l->timer, on_timer, 0, 0);
}

void tide_worker_logs_request(tide_worker_logs_t *l, const Tide__V1__LogRequest *req)
{
    char *path = NULL;
    log_req_t *r;
    int32_t gen;
    int fd;

    if (req->cancel) {
        tide_list_t *pos;
        tide_list_for_each(pos, &l->reqs)
        {
            r = tide_list_entry(pos, log_req_t, link);
            if (r->request_id == req->request_id) {
                send_data(l, r->request_id, r->rank, NULL, 0, true, NULL);
                req_free(r);
                break;
            }
        }
        return;
    }
    gen = tide_worker_job_id_valid(req->job_id) && req->rank >= 0
              ? newest_generation(l, req->job_id, req->rank)
              : -1;
    if (gen >= 0) {
        path = tide_worker_log_path(l->data_dir, req->job_id, gen, req->rank);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        free(path);
    } else {
        fd = -1;
    }
    if (fd < 0 && !(req->follow && tide_worker_job_id_valid(req->job_id) && req->rank >= 0)) {
        char *why = tide_xasprintf("no log for job %.128s rank %d on worker %s", req->job_id,
                                   req->rank, l->worker_id);
        send_data(l, req->request_id, req->rank, NULL, 0, true, why);
        free(why);
        return;
    }
    r = tide_xcalloc(1, sizeof(*r));
    r->request_id = req->request_id;
    r->job_id = tide_xstrdup(req->job_id);
    r->generation = gen;
    r->rank = req->rank;
    r->follow = req->follow;
    r->fd = fd;
    r->wait_until = uv_now(l->timer.loop) + LOG_WAIT_MS;
    tide_list_push_back(&l->reqs, &r->link);
    uv_timer_start(&l->timer, on_timer, 0, 0);
}
