/* The worker's data dir: epoch file, rank records and log paths (see datadir.h). Invariant: a
 * record exists for every rank whose RankStarted may have been sent and whose exit was not yet
 * reported, so a restarted worker can find and kill what its predecessor left running. Files are
 * replaced atomically (temporary file + rename), so a crash leaves the old or the new content,
 * never half of one. */
#include "datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xmalloc.h"

static int mkdir_p(const char *path, mode_t last_mode, tide_error_t *err)
{
    char *p = tide_xstrdup(path);
    int rc = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
            rc = -errno;
            tide_errprintf(err, "mkdir %s: %s", p, strerror(errno));
            goto done;
        }
        *s = '/';
    }
    if (mkdir(p, last_mode) < 0 && errno != EEXIST) {
        rc = -errno;
        tide_errprintf(err, "mkdir %s: %s", p, strerror(errno));
        goto done;
    }
done:
    free(p);
    return rc;
}

/* dir is a directory (not a link) of the worker's euid that nobody else may write. */
static int private_dir(const char *dir, tide_error_t *err)
{
    struct stat st;

    if (lstat(dir, &st) < 0) {
        tide_errprintf(err, "hot tier %s: %s", dir, strerror(errno));
        return -errno;
    }
    if (!S_ISDIR(st.st_mode)) {
        tide_errprintf(err, "hot tier %s: not a directory (a link?): refusing it", dir);
        return -EPERM;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022)) {
        tide_errprintf(err,
                       "hot tier %s: %s (uid %u, mode %04o): refusing it, since whoever can change it "
                       "could redirect the worker's writes; remove it, or choose another --ckpt-hot",
                       dir, st.st_uid != geteuid() ? "not this worker's own" : "writable by others",
                       (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

int tide_worker_hot_dir_prepare(const char *hot, tide_error_t *err)
{
    char *parent, *slash, *mine;
    int rc;

    if (!hot || !hot[0])
        return 0;
    rc = mkdir_p(hot, 0700, err);
    if (rc == 0)
        rc = private_dir(hot, err);
    if (rc < 0)
        return rc;
    parent = tide_xstrdup(hot);
    slash = strrchr(parent, '/');
    mine = tide_xasprintf("tide-%u", (unsigned)getuid());
    if (slash && slash != parent) {
        *slash = '\0';
        slash = strrchr(parent, '/');
        if (slash && strcmp(slash + 1, mine) == 0)
            rc = private_dir(parent, err); /* the default layout's /dev/shm/tide-UID */
    }
    free(mine);
    free(parent);
    return rc;
}

int tide_worker_datadir_prepare(const char *dir, tide_error_t *err)
{
    char *sub = NULL;
    struct stat st;
    int rc;

    rc = mkdir_p(dir, 0700, err);
    if (rc < 0)
        return rc;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        tide_errprintf(err, "data dir %s: not a directory", dir);
        return -ENOTDIR;
    }
    if ((st.st_mode & 0777) != 0700 && chmod(dir, 0700) < 0) {
        rc = -errno;
        tide_errprintf(err, "chmod 0700 %s: %s", dir, strerror(errno));
        return rc;
    }
    sub = tide_xasprintf("%s/ranks", dir);
    rc = mkdir_p(sub, 0700, err);
    free(sub);
    if (rc < 0)
        return rc;
    sub = tide_xasprintf("%s/logs", dir);
    rc = mkdir_p(sub, 0700, err);
    free(sub);
    return rc;
}

/* Writes content to path via path.tmp + fsync + rename. */
static int write_atomic(const char *path, const char *content, tide_error_t *err)
{
    char *tmp = tide_xasprintf("%s.tmp", path);
    size_t len = strlen(content), off = 0;
    int fd, rc = 0;

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "open %s: %s", tmp, strerror(errno));
        goto done;
    }
    while (off < len) {
        ssize_t n = write(fd, content + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            tide_errprintf(err, "write %s: %s", tmp, strerror(errno));
            goto done;
        }
        off += (size_t)n;
    }
    if (fsync(fd) < 0) {
        rc = -errno;
        tide_errprintf(err, "fsync %s: %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) < 0) {
        rc = -errno;
        tide_errprintf(err, "rename %s: %s", tmp, strerror(errno));
        goto done;
    }
done:
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* Reads a small file into buf (NUL-terminated, truncated to size-1). */
static int read_small(const char *path, char *buf, size_t size)
{
    size_t off = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return -errno;
    while (off + 1 < size) {
        ssize_t n = read(fd, buf + off, size - 1 - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    close(fd);
    return rc;
}

static int number_load(const char *dir, const char *name, uint64_t *out, tide_error_t *err)
{
    char *path = tide_xasprintf("%s/%s", dir, name);
    char buf[64], *end;
    unsigned long long v;
    int rc;

    *out = 0;
    rc = read_small(path, buf, sizeof(buf));
    if (rc == -ENOENT) {
        rc = 0;
        goto done;
    }
    if (rc < 0) {
        tide_errprintf(err, "read %s: %s", path, strerror(-rc));
        goto done;
    }
    errno = 0;
    v = strtoull(buf, &end, 10);
    if (errno || end == buf || (*end != '\0' && *end != '\n')) {
        tide_errprintf(err, "%s: not a number", path);
        rc = -EINVAL;
        goto done;
    }
    *out = v;
done:
    free(path);
    return rc;
}

static int number_save(const char *dir, const char *name, uint64_t v, tide_error_t *err)
{
    char *path = tide_xasprintf("%s/%s", dir, name);
    char buf[32];
    int rc;

    snprintf(buf, sizeof(buf), "%" PRIu64 "\n", v);
    rc = write_atomic(path, buf, err);
    free(path);
    return rc;
}

int tide_worker_epoch_load(const char *dir, uint64_t *out, tide_error_t *err)
{
    return number_load(dir, "epoch", out, err);
}

int tide_worker_epoch_save(const char *dir, uint64_t epoch, tide_error_t *err)
{
    return number_save(dir, "epoch", epoch, err);
}

int tide_worker_boot_next(const char *dir, int64_t wall_ms, uint64_t *out, tide_error_t *err)
{
    uint64_t last = 0, boot;
    int rc = number_load(dir, "boot", &last, err);

    if (rc < 0)
        return rc;
    boot = last + 1;
    if (wall_ms > 0 && (uint64_t)wall_ms > boot)
        boot = (uint64_t)wall_ms;
    rc = number_save(dir, "boot", boot, err);
    if (rc == 0)
        *out = boot;
    return rc;
}

char *tide_worker_log_dir(const char *dir, const char *job_id)
{
    return tide_xasprintf("%s/logs/%s", dir, job_id);
}

int tide_worker_log_dir_make(const char *dir, const char *job_id, tide_error_t *err)
{
    char *logs = tide_xasprintf("%s/logs", dir);
    char *jd = tide_worker_log_dir(dir, job_id);
    int rc = 0;

    if ((mkdir(logs, 0700) < 0 && errno != EEXIST) || (mkdir(jd, 0700) < 0 && errno != EEXIST)) {
        rc = -errno;
        tide_errprintf(err, "log dir %s: %s", jd, strerror(-rc));
    }
    free(jd);
    free(logs);
    return rc;
}

char *tide_worker_log_path(const char *dir, const char *job_id, int32_t generation, int32_t rank)
{
    return tide_xasprintf("%s/logs/%s/g%d.rank%d.log", dir, job_id, generation, rank);
}

static char *record_path(const char *dir, const char *job_id, int32_t generation, int32_t rank)
{
    return tide_xasprintf("%s/ranks/%s.%d.%d", dir, job_id, generation, rank);
}

int tide_worker_record_write(const char *dir, const char *job_id, int32_t generation, int32_t rank,
                             const tide_worker_record_t *rec, tide_error_t *err)
{
    char *path = record_path(dir, job_id, generation, rank);
    char *content = tide_xasprintf("pid %d\npgid %d\nstart_time %" PRIu64 "\n", (int)rec->pid,
                                   (int)rec->pgid, rec->start_time);
    int rc = write_atomic(path, content, err);

    free(content);
    free(path);
    return rc;
}

int tide_worker_record_remove(const char *dir, const char *job_id, int32_t generation, int32_t rank)
{
    char *path = record_path(dir, job_id, generation, rank);
    int rc = unlink(path) < 0 && errno != ENOENT ? -errno : 0;

    free(path);
    return rc;
}

int tide_proc_stat(pid_t pid, pid_t *pgid, uint64_t *start_time, char *state)
{
    char path[64], buf[1024], *p, *save = NULL, *tok;
    int rc, field = 3;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    rc = read_small(path, buf, sizeof(buf));
    if (rc < 0)
        return rc == -ENOENT || rc == -ESRCH ? -ENOENT : rc;
    /* comm (field 2) may hold spaces and parentheses: the fields resume after the last ')'. */
    p = strrchr(buf, ')');
    if (!p)
        return -EINVAL;
    for (tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
        if (field == 3 && state)
            *state = tok[0];
        else if (field == 5 && pgid)
            *pgid = (pid_t)strtol(tok, NULL, 10);
        else if (field == 22) {
            if (start_time)
                *start_time = strtoull(tok, NULL, 10);
            return 0;
        }
    }
    return -EINVAL;
}

static int record_read(const char *path, tide_worker_record_t *rec)
{
    char buf[256];
    int pid, pgid;
    unsigned long long st;
    int rc = read_small(path, buf, sizeof(buf));

    if (rc < 0)
        return rc;
    if (sscanf(buf, "pid %d\npgid %d\nstart_time %llu", &pid, &pgid, &st) != 3)
        return -EINVAL;
    /* Never let a corrupt record aim kill() at init, our own group or everything (-1). */
    if (pid <= 1 || pgid <= 1)
        return -EINVAL;
    rec->pid = pid;
    rec->pgid = pgid;
    rec->start_time = st;
    return 0;
}

/* Gone or a zombie: either way it holds no GPU any more. Zombies of orphans are init's to reap. */
static bool proc_gone(pid_t pid, uint64_t start_time)
{
    uint64_t t;
    char state = '?';

    if (tide_proc_stat(pid, NULL, &t, &state) < 0)
        return true;
    return t != start_time || state == 'Z' || state == 'X';
}

int tide_worker_records_reap(const char *dir, int64_t wait_ms, tide_worker_reap_stats_t *stats,
                             tide_error_t *err)
{
    char *rdir = tide_xasprintf("%s/ranks", dir);
    tide_worker_record_t *killed = NULL;
    size_t n_killed = 0, cap = 0;
    struct dirent *de;
    DIR *d;
    int rc = 0;

    memset(stats, 0, sizeof(*stats));
    d = opendir(rdir);
    if (!d) {
        rc = errno == ENOENT ? 0 : -errno;
        if (rc < 0)
            tide_errprintf(err, "opendir %s: %s", rdir, strerror(errno));
        goto done;
    }
    while ((de = readdir(d)) != NULL) {
        tide_worker_record_t rec;
        uint64_t start;
        pid_t pgid = 0;
        char state = '?';
        char *path;
        size_t len = strlen(de->d_name);

        if (de->d_name[0] == '.')
            continue;
        path = tide_xasprintf("%s/%s", rdir, de->d_name);
        if (len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0) {
            unlink(path); /* a write that never finished */
            free(path);
            continue;
        }
        if (record_read(path, &rec) < 0) {
            stats->invalid++;
        } else if (tide_proc_stat(rec.pid, &pgid, &start, &state) == 0 && start == rec.start_time &&
                   state != 'Z') {
            /* Same process as recorded: kill its group (or just it, should it have left the group).
             */
            kill(pgid == rec.pgid ? -rec.pgid : rec.pid, SIGKILL);
            if (n_killed == cap) {
                cap = cap ? cap * 2 : 8;
                killed = tide_xrealloc(killed, cap * sizeof(*killed));
            }
            killed[n_killed++] = rec;
            stats->killed++;
        } else {
            stats->stale++;
        }
        unlink(path);
        free(path);
    }
    closedir(d);
    /* Wait (bounded) until the killed ones are gone, so the GPU is free before we register. */
    for (int64_t waited = 0; n_killed && waited < wait_ms; waited += 10) {
        size_t alive = 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        for (size_t i = 0; i < n_killed; i++)
            alive += !proc_gone(killed[i].pid, killed[i].start_time);
        if (!alive)
            break;
        nanosleep(&ts, NULL);
    }
done:
    free(killed);
    free(rdir);
    return rc;
}
