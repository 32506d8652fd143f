/* The simulated network (see net.h). Invariants: each direction of a stream delivers in the order
 * messages were sent and never after its CLOSE (a late copy arrives after its original, possibly
 * after newer messages, and never reaches a reader that saw the stream end); due times never decrease
 * along a direction; a stream is freed only once both sides are done with it and nothing is in
 * flight. */
#include "net.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

#define QUANTUM_MS 5 /* due times are rounded up to this: fewer distinct instants, the same orders */

static int64_t quantize(int64_t t)
{
    return (t + QUANTUM_MS - 1) / QUANTUM_MS * QUANTUM_MS;
}

net_t *net_new(void)
{
    net_t *n = tide_xcalloc(1, sizeof(*n));
    n->next_id = 1;
    return n;
}

static void dir_clear(net_dir_t *dr)
{
    net_msg_t *m = dr->head, *next;

    for (; m; m = next) {
        next = m->next;
        net_msg_free(m);
    }
    dr->head = dr->tail = NULL;
}

static void late_clear(net_dir_t *dr)
{
    net_msg_t *m = dr->late, *next;

    for (; m; m = next) {
        next = m->next;
        net_msg_free(m);
    }
    dr->late = NULL;
}

static void stream_free(net_stream_t *s)
{
    for (int i = 0; i < 2; i++) {
        dir_clear(&s->dir[i]);
        late_clear(&s->dir[i]);
    }
    free(s);
}

void net_free(net_t *n)
{
    net_stream_t *s, *next;

    if (!n)
        return;
    for (s = n->streams; s; s = next) {
        next = s->next;
        stream_free(s);
    }
    free(n);
}

net_stream_t *net_open(dst_t *d, int agent)
{
    net_t *n = d->net;
    net_stream_t *s = tide_xcalloc(1, sizeof(*s)), **pp = &n->streams;

    s->id = n->next_id++;
    s->agent = agent;
    while (*pp)
        pp = &(*pp)->next;
    *pp = s;
    return s;
}

net_stream_t *net_find(net_t *n, uint64_t id)
{
    for (net_stream_t *s = n->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static void dir_push(net_dir_t *dr, net_msg_t *m, int64_t due)
{
    if (due < dr->last_due)
        due = dr->last_due;
    m->due = quantize(due);
    dr->last_due = m->due;
    m->next = NULL;
    if (dr->tail)
        dr->tail->next = m;
    else
        dr->head = m;
    dr->tail = m;
}

/* Loses a random tail of what is in flight in dr. */
static void dir_cut(dst_t *d, net_dir_t *dr)
{
    size_t n = 0, keep;
    net_msg_t *m, **pp;

    for (m = dr->head; m; m = m->next)
        n++;
    keep = (size_t)dst_below(d, (int64_t)n + 1);
    pp = &dr->head;
    dr->tail = NULL;
    while (*pp && keep > 0) {
        dr->tail = *pp;
        pp = &(*pp)->next;
        keep--;
    }
    m = *pp;
    *pp = NULL;
    while (m) {
        net_msg_t *next = m->next;
        net_msg_free(m);
        m = next;
    }
}

static void dir_close(dst_t *d, net_dir_t *dr, int64_t notice_ms)
{
    if (dr->closed)
        return;
    dir_push(dr, net_msg_new(NM_CLOSE), d->now + notice_ms);
    dr->closed = true;
}

void net_send(dst_t *d, net_stream_t *s, net_side_t side, net_msg_t *m)
{
    net_dir_t *dr = &s->dir[side];
    bool faults = !d->calm && !d->sw.no_net_faults;
    int64_t delay;

    if (dr->closed) {
        net_msg_free(m);
        return;
    }
    d->stats->msgs++;
    if (faults && dst_chance(d, d->k.p_drop)) {
        d->stats->drops++;
        dst_trace(d, "net: %s on stream %llu dropped: the stream dies", net_kind_name(m->kind),
                  (unsigned long long)s->id);
        net_msg_free(m);
        net_break(d, s);
        return;
    }
    delay = dst_range(d, 1, d->k.delay_max_ms);
    if (faults && dst_chance(d, d->k.p_slow)) {
        d->stats->slow++;
        delay = dst_range(d, 300, 3000);
    }
    dir_push(dr, m, d->now + delay);
}

void net_send_late(dst_t *d, net_stream_t *s, net_side_t side, const net_msg_t *m, int64_t extra_ms)
{
    net_dir_t *dr = &s->dir[side];
    net_msg_t *c, **pp;

    if (dr->closed)
        return;
    c = net_msg_dup(m);
    /* after everything already sent on the direction (its original included): a re-send never
     * overtakes what it repeats, but may trail what was sent after it */
    c->due = quantize(d->now + extra_ms > dr->last_due ? d->now + extra_ms : dr->last_due + QUANTUM_MS);
    for (pp = &dr->late; *pp && (*pp)->due <= c->due; pp = &(*pp)->next)
        ;
    c->next = *pp;
    *pp = c;
}

void net_close(dst_t *d, net_stream_t *s, net_side_t closing_reader, bool abort)
{
    net_dir_t *mine = &s->dir[closing_reader], *other = &s->dir[!closing_reader];

    dir_clear(mine);
    mine->closed = true;
    if (closing_reader == NET_TO_SCHED)
        s->sched_gone = true;
    else
        s->worker_gone = true;
    if (abort)
        dir_cut(d, other);
    dir_close(d, other, dst_range(d, 1, d->k.delay_max_ms));
}

void net_break(dst_t *d, net_stream_t *s)
{
    for (int i = 0; i < 2; i++) {
        if (s->dir[i].closed)
            continue;
        dir_cut(d, &s->dir[i]);
        /* the scheduler may notice much later (a half-open connection) than the worker */
        dir_close(d, &s->dir[i], i == NET_TO_SCHED ? dst_range(d, 1, 4000) : dst_range(d, 1, 1500));
    }
}

net_msg_t *net_pop(net_t *n, net_side_t side, int64_t now, bool (*skip)(void *, net_stream_t *),
                   void *ud, net_stream_t **from)
{
    net_stream_t *best = NULL;
    net_msg_t *m, **best_pp = NULL;
    bool best_late = false;

    for (net_stream_t *s = n->streams; s; s = s->next) {
        net_dir_t *dr = &s->dir[side];
        bool gone = side == NET_TO_SCHED ? s->sched_gone : s->worker_gone;
        if (gone)
            late_clear(dr); /* the reader saw the stream end: late copies are lost */
        for (int late = 0; late < 2; late++) {
            net_msg_t **pp = late ? &dr->late : &dr->head;
            net_msg_t *h = *pp;
            if (!h || h->due > now || (best_pp && h->due >= (*best_pp)->due))
                continue;
            if (skip && skip(ud, s))
                continue;
            best = s;
            best_pp = pp;
            best_late = late;
        }
    }
    if (!best)
        return NULL;
    m = *best_pp;
    *best_pp = m->next;
    if (!best_late && !m->next)
        best->dir[side].tail = NULL;
    m->next = NULL;
    *from = best;
    return m;
}

int64_t net_next_due(net_t *n, bool (*skip)(void *, net_stream_t *), void *ud)
{
    int64_t next = INT64_MAX;

    for (net_stream_t *s = n->streams; s; s = s->next) {
        for (int i = 0; i < 2; i++) {
            for (int late = 0; late < 2; late++) {
                const net_msg_t *h = late ? s->dir[i].late : s->dir[i].head;
                if (!h || h->due >= next)
                    continue;
                if (i == NET_TO_WORKER && skip && skip(ud, s))
                    continue;
                next = h->due;
            }
        }
    }
    return next;
}

void net_gc(net_t *n)
{
    net_stream_t **pp = &n->streams;

    while (*pp) {
        net_stream_t *s = *pp;
        if (s->sched_gone && s->worker_gone && !s->dir[0].head && !s->dir[1].head) {
            /* late copies die with the stream: both readers are gone */
            *pp = s->next;
            stream_free(s);
        } else {
            pp = &s->next;
        }
    }
}

net_msg_t *net_msg_new(net_kind_t kind)
{
    net_msg_t *m = tide_xcalloc(1, sizeof(*m));
    m->kind = kind;
    return m;
}

void net_msg_free(net_msg_t *m)
{
    if (!m)
        return;
    free(m->ranks);
    free(m->prog);
    free(m->ids);
    free(m);
}

net_msg_t *net_msg_dup(const net_msg_t *m)
{
    net_msg_t *c = tide_xmalloc(sizeof(*c));

    *c = *m;
    c->next = NULL;
    c->ranks = NULL;
    c->prog = NULL;
    c->ids = NULL;
    c->n_ids = 0;
    net_msg_set_ids(c, m->ids, m->n_ids);
    if (m->n_ranks) {
        c->ranks = tide_xmalloc(m->n_ranks * sizeof(*m->ranks));
        memcpy(c->ranks, m->ranks, m->n_ranks * sizeof(*m->ranks));
    }
    if (m->n_prog) {
        c->prog = tide_xmalloc(m->n_prog * sizeof(*m->prog));
        memcpy(c->prog, m->prog, m->n_prog * sizeof(*m->prog));
    }
    return c;
}

void net_msg_set_ids(net_msg_t *m, const uint64_t *ids, size_t n)
{
    free(m->ids);
    m->ids = NULL;
    m->n_ids = n;
    if (n) {
        m->ids = tide_xmalloc(n * sizeof(*ids));
        memcpy(m->ids, ids, n * sizeof(*ids));
    }
}

const char *net_kind_name(net_kind_t k)
{
    static const char *names[] = {"Hello",        "Heartbeat",     "RankStarted",   "RankExited",
                                  "CheckpointSaved", "Flushed",    "Goodbye",       "TasksDeclared",
                                  "TasksDone",    "StealRequest",  "TasksReleased", "Welcome",
                                  "Launch",       "Stop",          "CheckpointNow", "Flush",
                                  "ReleaseTasks", "GiveTasks",     "Close"};
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}
