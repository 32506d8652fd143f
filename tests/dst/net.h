/* The simulated network between the workers and the scheduler: one stream per worker connection,
 * each direction a FIFO (what TCP keeps), every message with its own delay. Faults: a dropped message
 * means its stream died (the rest of that direction is lost, each side notices in its own time); slow
 * messages stall their stream; streams are independent, so an old stream's messages can reach the
 * scheduler after the newer stream's hello; a late copy of a task message (net_send_late) arrives out
 * of order on its stream until the reader saw the stream end. Stream ids are never reused (the core
 * compares them). */
#ifndef TIDE_DST_NET_H
#define TIDE_DST_NET_H

#include "core.h"
#include "dst.h"

typedef enum net_kind {
    /* worker -> scheduler */
    NM_HELLO,
    NM_HEARTBEAT,
    NM_RANK_STARTED,
    NM_RANK_EXITED,
    NM_CKPT_SAVED,
    NM_FLUSHED,
    NM_GOODBYE,
    NM_TASKS_DECLARED, /* work stealing (docs/work-stealing.md) */
    NM_TASKS_DONE,
    NM_STEAL,
    NM_TASKS_RELEASED,
    /* scheduler -> worker */
    NM_WELCOME,
    NM_LAUNCH,
    NM_STOP,
    NM_CKPT_NOW,
    NM_FLUSH,
    NM_RELEASE_TASKS,
    NM_GIVE_TASKS,
    /* either way: the stream ended for the reader */
    NM_CLOSE,
} net_kind_t;

/* A rank in a hello. */
typedef struct net_rank {
    char job[DST_ID_MAX];
    int32_t gen, rank, code, pid, port;
    bool running;
} net_rank_t;

/* A rank's trainer progress in a heartbeat. */
typedef struct net_progress {
    char job[DST_ID_MAX];
    int32_t gen, rank;
    tide_trainer_progress_t p;
} net_progress_t;

typedef struct net_msg {
    net_kind_t kind;
    int64_t due;
    uint64_t epoch; /* scheduler -> worker */
    char job[DST_ID_MAX];
    int32_t gen, rank, code, pid, port, world;
    bool burst; /* NM_LAUNCH: a lent slot (LaunchRank.burst; rank >= world) */
    int64_t step;
    uint64_t request; /* also: steal id (NM_STEAL, NM_GIVE_TASKS), release id (NM_*RELEASE*) */
    bool ok;
    /* task messages */
    int32_t task_kind;
    uint64_t total;   /* NM_TASKS_DECLARED */
    uint32_t queued;  /* NM_TASKS_DONE, NM_TASKS_RELEASED; max_tasks for NM_RELEASE_TASKS */
    uint64_t *ids;    /* owned */
    size_t n_ids;
    uint64_t boot, stream_seq; /* HELLO: the agent's process (its joins) and stream (WorkerHello) */
    net_rank_t *ranks; /* HELLO; owned */
    size_t n_ranks;
    net_progress_t *prog; /* HEARTBEAT; owned */
    size_t n_prog;
    struct net_msg *next;
} net_msg_t;

typedef struct net_dir {
    net_msg_t *head, *tail;
    int64_t last_due;
    bool closed; /* a CLOSE is queued (or the reader is gone): nothing more enters */
    net_msg_t *late; /* late copies, by due time, outside the FIFO; dropped once the reader is gone */
} net_dir_t;

typedef enum net_side { NET_TO_SCHED = 0, NET_TO_WORKER = 1 } net_side_t;

typedef struct net_stream {
    uint64_t id;             /* the conn token the core sees: (void *)(uintptr_t)id */
    int agent;               /* the worker's index in the world */
    net_dir_t dir[2];        /* [NET_TO_SCHED], [NET_TO_WORKER] */
    bool sched_gone;         /* the scheduler side ended (read its CLOSE, closed it, or crashed) */
    bool worker_gone;        /* the worker side ended */
    tide_worker_t *sched_worker; /* the scheduler's: who this stream's hello registered */
    bool goodbye;            /* the scheduler read a goodbye on it */
    int gone_kb;             /* why the scheduler lost it: 1 during operation, 2 in a restart (dst.h) */
    struct net_stream *next;
} net_stream_t;

struct net {
    net_stream_t *streams; /* ascending id */
    uint64_t next_id;
};

net_t *net_new(void);
void net_free(net_t *n);
/* A new stream for agent (the worker just connected). Owned by the net. */
net_stream_t *net_open(dst_t *d, int agent);
net_stream_t *net_find(net_t *n, uint64_t id);
/* A message for the NET_TO_* direction side; takes ownership of m (freed when it cannot travel). May
 * break the stream (a drop). */
void net_send(dst_t *d, net_stream_t *s, net_side_t side, net_msg_t *m);
/* A copy of m that arrives after extra_ms, and after everything already sent on the direction, but
 * possibly after messages sent later (m stays the caller's); nothing when the direction is closed. */
void net_send_late(dst_t *d, net_stream_t *s, net_side_t side, const net_msg_t *m, int64_t extra_ms);
/* One side ends the stream. The reader of the other direction gets a CLOSE after what is already in
 * flight (abort: a random tail of it is lost); what travels towards the closing side is discarded. */
void net_close(dst_t *d, net_stream_t *s, net_side_t closing_reader, bool abort);
/* The connection died: each direction loses a random tail and each reader gets a CLOSE, after a
 * delay of its own. */
void net_break(dst_t *d, net_stream_t *s);
/* The earliest due message towards side, over all streams, due by now; NULL when none. Streams
 * skipped returns true for are not looked at (a hung worker reads nothing). The caller frees it. */
net_msg_t *net_pop(net_t *n, net_side_t side, int64_t now, bool (*skip)(void *, net_stream_t *),
                   void *ud, net_stream_t **from);
/* The earliest due time of any queued message (towards the worker: on streams skip does not skip),
 * or INT64_MAX. */
int64_t net_next_due(net_t *n, bool (*skip)(void *, net_stream_t *), void *ud);
/* Frees streams both sides are done with and that carry nothing. */
void net_gc(net_t *n);

net_msg_t *net_msg_new(net_kind_t kind);
void net_msg_free(net_msg_t *m);
net_msg_t *net_msg_dup(const net_msg_t *m);
/* Gives m a copy of ids (n may be 0). */
void net_msg_set_ids(net_msg_t *m, const uint64_t *ids, size_t n);
const char *net_kind_name(net_kind_t k);

static inline void *net_conn(const net_stream_t *s)
{
    return (void *)(uintptr_t)s->id;
}

#endif
