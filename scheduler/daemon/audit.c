/* The audit log file: JSON lines built with cJSON (so every string is escaped), appended and flushed one
 * by one; a write that fails is counted and the file is tried again at the next SIGHUP. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "audit.h"
#include "log.h"
#include "users.h"
#include "xmalloc.h"

struct tide_audit {
    char *path;
    FILE *f;
    uint64_t entries, dropped;
};

static FILE *open_log(const char *path, int *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    FILE *f;

    if (fd < 0) {
        *err = -errno;
        return NULL;
    }
    if (!(f = fdopen(fd, "a"))) {
        *err = -errno;
        close(fd);
    }
    return f;
}

int tide_audit_open(const char *path, tide_audit_t **out, tide_error_t *err)
{
    tide_audit_t *a = tide_xcalloc(1, sizeof(*a));
    int rc = 0;

    *out = NULL;
    if (path) {
        a->path = tide_xstrdup(path);
        if (!(a->f = open_log(path, &rc))) {
            tide_errprintf(err, "audit log %s: %s", path, strerror(-rc));
            tide_audit_free(a);
            return rc;
        }
    }
    *out = a;
    return 0;
}

void tide_audit_reopen(tide_audit_t *a)
{
    int rc = 0;

    if (!a || !a->path)
        return;
    if (a->f)
        fclose(a->f);
    if (!(a->f = open_log(a->path, &rc)))
        tide_err("audit log %s: cannot reopen (%s): entries are dropped until the next SIGHUP", a->path,
                 strerror(-rc));
}

void tide_audit_free(tide_audit_t *a)
{
    if (!a)
        return;
    if (a->f)
        fclose(a->f);
    free(a->path);
    free(a);
}

bool tide_audit_changes(const char *path)
{
    static const char *const changing[] = {
        "/tide.v1.JobService/SubmitJob",        "/tide.v1.JobService/CancelJob",
        "/tide.v1.JobService/CheckpointJob",    "/tide.v1.JobService/ScaleJob",
        "/tide.v1.ClusterService/CordonWorker", "/tide.v1.ClusterService/UncordonWorker",
        "/tide.v1.ClusterService/DrainWorker",
    };
    for (size_t i = 0; i < sizeof(changing) / sizeof(changing[0]); i++)
        if (!strcmp(changing[i], path))
            return true;
    return false;
}

void tide_audit_write(tide_audit_t *a, int64_t wall_ms, const tide_rpc_identity_t *id, const char *peer,
                      const char *path, const char *target, tide_grpc_code_t code, const char *message)
{
    cJSON *o;
    char when[40], *line;
    time_t t = (time_t)(wall_ms / 1000);
    struct tm tm;
    const char *method = strrchr(path, '/');

    a->entries++;
    if (!a->path)
        return;
    if (!a->f) {
        a->dropped++;
        return;
    }
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + strlen(when), sizeof(when) - strlen(when), ".%03dZ", (int)(wall_ms % 1000));
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", when);
    cJSON_AddStringToObject(o, "user", id->name);
    cJSON_AddStringToObject(o, "role", tide_role_name((tide_role_t)id->role));
    cJSON_AddStringToObject(o, "peer", peer ? peer : "");
    cJSON_AddStringToObject(o, "method", method ? method + 1 : path);
    cJSON_AddStringToObject(o, "target", target ? target : "");
    cJSON_AddStringToObject(o, "code", tide_grpc_code_name(code));
    cJSON_AddStringToObject(o, "message", message ? message : "");
    line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line || fprintf(a->f, "%s\n", line) < 0 || fflush(a->f) != 0)
        a->dropped++;
    free(line);
}

uint64_t tide_audit_entries(const tide_audit_t *a)
{
    return a ? a->entries : 0;
}

uint64_t tide_audit_dropped(const tide_audit_t *a)
{
    return a ? a->dropped : 0;
}
