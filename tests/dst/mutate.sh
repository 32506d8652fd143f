#!/bin/sh
# Shows that the work-stealing, elastic-scaling, burst, drain, hang and recovery invariants of tide-dst can fail
# (tests/dst/README.md, "Mutants"): copies the source tree to a scratch directory, breaks the core
# (scheduler/core/task_pool.c, resize.c, placement.c, job_queue.c, lending.c, job_lifecycle.c, drain.c,
# hang.c, restart.c, history.c) or the worker deque (worker/task_deque.c) in one named way, builds tide-dst
# there and runs seeds until one fails. The tree itself is never touched.
#
#   tests/dst/mutate.sh [-n SEEDS] [-k] [NAME ...]     (no NAME: every mutant; -k: keep the scratch dir)
#
# Exit 0 when every mutant named was caught (some seed failed), 1 when one survived.
set -eu

SEEDS=300
KEEP=0
while getopts "n:k" o; do
    case $o in
    n) SEEDS=$OPTARG ;;
    k) KEEP=1 ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))

SRC=$(cd "$(dirname "$0")/../.." && pwd)
ALL="replay-skip give-early release-keeps release-no-replay lost-keeps-tasks held-count welcome-no-steals
     resize-no-cap resize-no-wait grow-claim-kept resize-phases
     burst-kept burst-no-stop burst-gen-keeps burst-no-orphans burst-spares
     drain-no-cordon drain-no-move hang-early hang-never
     restart-no-backoff restart-max-plus-one restart-exit-on-loss history-not-closed resume-durable"
# Not in ALL: burst-queue-waits survives 300 seeds (a queued job meets workers lent into its shape in about
# one seed of 300: lending needs a shape nobody waits for; tests/unit/core/test_core_burst.c catches it).
NAMES=${*:-$ALL}
WORK=${TMPDIR:-/tmp}/tide-mutants.$$
FLAGS=""

cleanup() { [ "$KEEP" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK"
mkdir -p "$WORK/src"
(cd "$SRC" && tar cf - --exclude='./build*' --exclude='./.git' .) | (cd "$WORK/src" && tar xf -)
cmake -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release >"$WORK/configure.log" 2>&1

# mutate NAME: prints the FILE(s) it rewrites in the scratch tree (python: exact text, each must match
# once; a mutant may be a list of such edits).
mutate() {
    python3 - "$WORK/src" "$1" <<'EOF'
import sys
root, name = sys.argv[1], sys.argv[2]
core, deque = "scheduler/core/task_pool.c", "worker/task_deque.c"
life = "scheduler/core/job_lifecycle.c"
resize, placement, queue = "scheduler/core/resize.c", "scheduler/core/placement.c", "scheduler/core/job_queue.c"
lending = "scheduler/core/lending.c"
drain, hang = "scheduler/core/drain.c", "scheduler/core/hang.c"
restart, history = "scheduler/core/restart.c", "scheduler/core/history.c"
M = {
  # The core ignores a repeated steal id instead of answering it again: a thief whose GiveTasks was
  # lost with its stream waits for good (invariant 4).
  "replay-skip": (core,
    "            emit_give(&c, rank); /* lost on the way: the same answer again */",
    "            (void)0; /* MUTANT: no replay */"),
  # The core gives the thief the victim's tasks at once instead of waiting for the victim's answer
  # (invariant 1).
  "give-early": (core,
    "        uint64_t half = (V->est + 1) / 2;\n",
    "        uint64_t half = (V->est + 1) / 2;\n"
    "        given_reserve(T, (size_t)half); /* MUTANT: give before the victim confirmed */\n"
    "        for (size_t si = 0; si <= p->mask && T->n_given < half; si++)\n"
    "            if (p->slots[si].state == SLOT_HELD && p->slots[si].holder == v) {\n"
    "                p->slots[si].holder = t;\n"
    "                T->given[T->n_given++] = p->slots[si].id;\n"
    "            }\n"
    "        if (T->n_given > 0) {\n"
    "            give(c, t);\n"
    "            return true;\n"
    "        }\n"),
  # The victim's deque answers ReleaseTasks with its tail but keeps the tasks queued (invariant 1).
  "release-keeps": (deque,
    "        uint64_t id = ring_pop_back(&p->queue);\n\n        map_find(&p->map, id)->state = TIDE_TASK_RELEASED;\n",
    "        uint64_t id = p->queue.buf[(p->queue.head + p->queue.len - 1 - (n - i)) & (p->queue.cap - 1)]; /* MUTANT */\n"),
  # The victim's deque answers a repeated release id with fresh tasks instead of the same ones: the
  # first answer's tasks, lost on the way, never run (invariant 2).
  "release-no-replay": (deque,
    "    if (old) {\n        /* A replay",
    "    if (old && 0) { /* MUTANT */\n        /* A replay"),
  # A lost rank keeps its tasks and its generation goes on (today every loss ends the generation and
  # drops its pools in the same call, so skipping only the orphaning could not be seen) (invariant 3).
  "lost-keeps-tasks": (life,
    "    tide__tasks_rank_gone(core, job, rank, true); /* orphans until the generation ends */\n"
    "    if (!started) {\n        rollback(core, job, why);\n        return;\n    }\n",
    "    tide__tasks_rank_gone(core, job, rank, !started); /* MUTANT: no orphans, a started generation goes on */\n"
    "    if (!started) {\n        rollback(core, job, why);\n        return;\n    }\n"
    "    return;\n"),
  # A commit forgets to take the task off the held count (invariant 3).
  "held-count": (core,
    "            s->state = SLOT_COMMITTED;\n            p->held--;\n",
    "            s->state = SLOT_COMMITTED; /* MUTANT: held not decremented */\n"),
  # A Welcome does not send the pending steals again: a steal lost with its stream is never answered
  # (invariant 4).
  "welcome-no-steals": (deque,
    "            (void)send_steal(d, r, next, next->steal_id);",
    "            (void)0; /* MUTANT: pending steals not re-sent */"),
  # Elastic scaling. Placement ignores the size cap (a requested size, a resize's new size): a job is
  # placed with max_workers whatever it asked for (a resize starts a generation bigger than its size).
  "resize-no-cap": (placement,
    "    k = tide__job_size_cap(job); /* max_workers, or less: a requested size, a resize */",
    "    k = job->spec.max_workers; /* MUTANT: no size cap */"),
  # A resizing job is placed again without waiting for its old generation's ranks to exit (never two
  # generations at once).
  "resize-no-wait": (queue,
    "        if (!tide_list_empty(&job->bound)) {\n            /* Never two generations at once",
    "        if (!tide_list_empty(&job->bound) && job->resize.state != TIDE_RESIZE_STOPPING) { /* MUTANT */\n"
    "            /* Never two generations at once"),
  # A grow's claim on free workers is not released when its new generation is placed (the claims add
  # up; only a resize not placed yet claims).
  "grow-claim-kept": (resize,
    "    release_claim(core, job);\n    if (r->state != TIDE_RESIZE_STOPPING && r->state != TIDE_RESIZE_STARTING)\n",
    "    /* MUTANT: claim kept */\n    if (r->state != TIDE_RESIZE_STOPPING && r->state != TIDE_RESIZE_STARTING)\n"),
  # The start phase of a resize is timed from the checkpoint instead of the stop: its phases do not add
  # up to its latency.
  "resize-phases": (resize,
    "        r->start_s = (double)(core->now_mono - r->stopped_mono) / 1e3;",
    "        r->start_s = (double)(core->now_mono - r->ckpt_mono) / 1e3; /* MUTANT */"),
  # Phase-aware burst. A lent slot that empties keeps its worker bound (burst workers always return).
  "burst-kept": (lending,
    "    if (w && w->job == job && w->rank == r)\n        tide__worker_release(core, w);\n}",
    "    (void)w; /* MUTANT: the worker is never released */\n}"),
  # Taking lent workers back sends no STOP: they run on, bound (burst workers always return; at the end
  # every worker is free).
  "burst-no-stop": (lending,
    "    if (w->connected) {\n        tide_action_t *a = tide__act(core, TIDE_ACT_STOP);",
    "    if (0) { /* MUTANT: no STOP */\n        tide_action_t *a = tide__act(core, TIDE_ACT_STOP);"),
  # A generation's end forgets to count its lent workers out (a job that is not running lends nothing).
  "burst-gen-keeps": (lending,
    "    job->n_lent = 0;\n    job->lent_workers = 0;\n",
    "    /* MUTANT: n_lent and lent_workers kept */\n"),
  # A lent process that ends keeps the tasks it held instead of orphaning them (no task lost when its
  # holder dies).
  "burst-no-orphans": (lending,
    "    tide__tasks_rank_gone(core, job, rank, true);\n    slot_release(core, job, rank);",
    "    tide__tasks_rank_gone(core, job, rank, false); /* MUTANT */\n    slot_release(core, job, rank);"),
  # Lending takes the hot spares (never the hot spares).
  "burst-spares": (lending,
    "        limit = core->n_free - (core->reserve.spares < core->reserve.gpus ? core->reserve.spares : core->reserve.gpus);",
    "        limit = core->n_free; /* MUTANT */"),
  # A queued job that waits for the shape does not get what was lent there back, neither after the pass
  # nor before it would preempt (no job waits while capacity allows: the starvation model counts lent
  # workers as free).
  "burst-queue-waits": [(lending,
    "    if (core->n_blocked == 0)\n        return;\n    tide_list_for_each_safe",
    "    if (core->n_blocked >= 0) /* MUTANT */\n        return;\n    tide_list_for_each_safe"),
   (lending,
    "            if (job->lent_workers > 0)\n                reclaim(core, job, \"a queued job waits for capacity\");",
    "            if (0) /* MUTANT */\n                reclaim(core, job, \"a queued job waits for capacity\");")],
  # A drain does not cordon the worker (drain: the worker is cordoned).
  "drain-no-cordon": (drain,
    "int rc = tide_core_worker_cordon(core, id, true, &w, err);",
    "int rc = tide_core_worker_cordon(core, id, false, &w, err); /* MUTANT */"),
  # A drain of a settled running job's worker begins no resize: the job stays on it (drain: the job
  # moves off the worker).
  "drain-no-move": (drain,
    "        tide__resize_begin(core, job, job->n_ranks, TIDE_RESIZE_DRAIN, detail);",
    "        (void)detail; /* MUTANT: no resize */"),
  # A rank is declared hung after half the limit (hang: a rank that kept stepping is never declared hung).
  "hang-early": (hang,
    "        if (idle > lim && idle > worst) {",
    "        if (idle > lim / 2 && idle > worst) { /* MUTANT */"),
  # No rank is ever declared hung (hang: a rank that made no progress past the limit is declared hung).
  "hang-never": (hang,
    "    if (hung < 0) {\n        job->hang_check_at",
    "    if (hung < 0 || worst >= 0) { /* MUTANT */\n        job->hang_check_at"),
  # The restart backoff is ignored: every restart is queued at once (recovery: a restart after the first
  # in a row waits its backoff outside the queues).
  "restart-no-backoff": (restart,
    "    if (backoff > 0 && job->state == TIDE_JOB_PENDING) {",
    "    if (0 && backoff > 0 && job->state == TIDE_JOB_PENDING) { /* MUTANT */"),
  # One restart in a row more than max_restarts (recovery: restarts_in_row never exceeds the max).
  "restart-max-plus-one": (restart,
    "    if (!restart || job->restarts_in_row >= max) {",
    "    if (!restart || job->restarts_in_row > max) { /* MUTANT */"),
  # A rank's own failing exit restarts an on-loss job (recovery: only on-failure jobs restart on an exit).
  "restart-exit-on-loss": (restart,
    "(pol == TIDE_RESTART_ON_LOSS && kind != TIDE_FAILURE_EXIT)",
    "(pol == TIDE_RESTART_ON_LOSS) /* MUTANT */"),
  # A generation that ends is not closed in the history (history: only the current generation is open).
  "history-not-closed": (history,
    "    if (g)\n        close_rec(core, g, end);\n    if (job->next_failure_ms)",
    "    (void)g; /* MUTANT */\n    if (job->next_failure_ms)"),
  # A new generation resumes from the durable copy, not the newest checkpoint (recovery: never from one
  # older than the newest acknowledged).
  "resume-durable": (history,
    "    g->resumed_step = job->last_ckpt.step;",
    "    g->resumed_step = job->durable_ckpt.step; /* MUTANT */"),
  # A complete checkpoint does not re-arm the checkpoint cadence (checkpoints: the cadence's look is armed).
  "cadence-not-armed": ("scheduler/core/job_checkpoint.c",
    "    tide__cadence_arm(core, job); /* the next one is due an interval from this one (it rearms) */",
    "    tide__job_rearm(core, job); /* MUTANT */"),
}
if name not in M:
    sys.exit("unknown mutant %s (known: %s)" % (name, " ".join(M)))
edits = M[name] if isinstance(M[name], list) else [M[name]]
for f, old, new in edits:
    p = root + "/" + f
    s = open(p).read()
    if s.count(old) != 1:
        sys.exit("mutant %s: its text is in %s %d times (the code changed: update tests/dst/mutate.sh)" % (name, f, s.count(old)))
    open(p, "w").write(s.replace(old, new))
print(" ".join(sorted(set(f for f, _, _ in edits))))
EOF
}

survived=0
for name in $NAMES; do
    file=$(mutate "$name") || exit 2
    if ! cmake --build "$WORK/build" -j2 --target tide-dst >"$WORK/build-$name.log" 2>&1; then
        echo "mutant $name: does not build (see $WORK/build-$name.log)"
        survived=1
    else
        start=$(date +%s)
        out=$("$WORK/build/tests/dst/tide-dst" --seed 1 --seeds "$SEEDS" -q $FLAGS 2>&1 || true)
        secs=$(($(date +%s) - start))
        msg=$(printf '%s\n' "$out" | sed -n '/^DST: invariant broken/{n;p;q}' | cut -c1-220)
        seed=$(printf '%s\n' "$out" | sed -n 's/^DST: invariant broken (seed \([0-9]*\),.*/\1/p' | head -1)
        if [ -z "$seed" ] && printf '%s\n' "$out" | grep -q '^\[  FAILED  \] test_dst'; then
            # not one of the harness's invariants: the core's own checks (h_check_invariants), a crash
            seed=$(printf '%s\n' "$out" | sed -n 's/^DST: seed \([0-9]*\) failed.*/\1/p' | head -1)
            msg=" (not a DST invariant) $(printf '%s\n' "$out" | grep -m1 -E 'ERROR|error:' | cut -c1-160)"
            seed=${seed:-?}
        fi
        if [ -n "$seed" ]; then
            echo "mutant $name: caught by seed $seed (${secs}s):$msg"
        else
            echo "mutant $name: SURVIVED $SEEDS seeds (${secs}s)"
            survived=1
        fi
    fi
    for f in $file; do
        cp "$SRC/$f" "$WORK/src/$f" # the next mutant starts from the real code
    done
done
exit $survived
