/* Checkpoint encoding, checking, atomic writing, the newest-valid scan and the generation guard
 * (checkpoint.h). Invariant: nothing is decoded from bytes whose SHA-256 does not match, a
 * checkpoint file appears under its final name only once all of its bytes are on disk, and a run of
 * job j > 0, generation g > 0 loads nothing of job j's later generations, writes nothing into a
 * directory that holds one, and ranks job j's own files by (generation, step) for loading and
 * pruning (other jobs' files never count for its lineage and rank after its own, by step). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "model.h"
#include "xmalloc.h"

static const uint8_t magic[8] = {'T', 'I', 'D', 'E', 'M', 'L', 'P', 0};

#define SHA_LEN 32

size_t tide_mlp_ckpt_size(uint64_t n_params)
{
    return TIDE_MLP_CKPT_HEADER + 16 * (size_t)n_params + SHA_LEN;
}

static size_t header_size(uint32_t version)
{
    return version == 1 ? TIDE_MLP_CKPT_HEADER_V1 : TIDE_MLP_CKPT_HEADER;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    put_u64(p, v);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static double get_f64(const uint8_t *p)
{
    uint64_t v = get_u64(p);
    double d;
    memcpy(&d, &v, sizeof(d));
    return d;
}

static void sha256(const void *buf, size_t len, uint8_t *out)
{
    unsigned int n = SHA_LEN;
    if (!EVP_Digest(buf, len, out, &n, EVP_sha256(), NULL))
        abort(); /* only on OOM or a broken libcrypto */
}

static void to_hex(const uint8_t *d, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = '\0';
}

void tide_mlp_sha256_hex(const void *buf, size_t len, char *hex)
{
    uint8_t d[SHA_LEN];
    sha256(buf, len, d);
    to_hex(d, SHA_LEN, hex);
}

void tide_mlp_params_sha256_hex(const double *params, size_t n, char *hex)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t chunk[8 * 512];
    uint8_t d[SHA_LEN];
    unsigned int dn = SHA_LEN;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
        abort();
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 512 && i < n; k++, i++)
            put_f64(chunk + 8 * k, params[i]);
        if (!EVP_DigestUpdate(ctx, chunk, 8 * k))
            abort();
    }
    if (!EVP_DigestFinal_ex(ctx, d, &dn))
        abort();
    EVP_MD_CTX_free(ctx);
    to_hex(d, SHA_LEN, hex);
}

void tide_mlp_ckpt_encode(const tide_mlp_state_t *s, uint8_t *buf, uint8_t *sha_out)
{
    const tide_mlp_config_t *c = &s->cfg;
    size_t n = s->n_params;
    uint8_t *p;

    memcpy(buf, magic, 8);
    put_u32(buf + 8, TIDE_MLP_CKPT_VERSION);
    put_u32(buf + 12, c->input);
    put_u32(buf + 16, c->width);
    put_u32(buf + 20, c->depth);
    put_u32(buf + 24, c->output);
    put_u32(buf + 28, c->micro_batches);
    put_u64(buf + 32, c->batch);
    put_u64(buf + 40, c->seed);
    put_f64(buf + 48, c->lr);
    put_f64(buf + 56, c->momentum);
    put_u64(buf + 64, s->steps_done);
    put_u64(buf + 72, s->data_position);
    put_u64(buf + 80, s->generation);
    put_u64(buf + 88, n);
    put_u64(buf + 96, s->job);
    p = buf + TIDE_MLP_CKPT_HEADER;
    for (size_t i = 0; i < n; i++, p += 8)
        put_f64(p, s->params[i]);
    for (size_t i = 0; i < n; i++, p += 8)
        put_f64(p, s->velocity[i]);
    sha256(buf, (size_t)(p - buf), p);
    if (sha_out)
        memcpy(sha_out, p, SHA_LEN);
}

static bool same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* The checks that need no config: length, checksum, magic, version, size and data position.
 * Returns 0 or -EBADMSG (err says which). */
static int check_bytes(const uint8_t *buf, size_t len, tide_error_t *err)
{
    uint8_t d[SHA_LEN];
    uint64_t n, batch, steps, pos;
    uint32_t version;
    size_t hdr;

    if (len < TIDE_MLP_CKPT_HEADER_V1 + SHA_LEN) {
        tide_errprintf(err, "too short (%zu bytes)", len);
        return -EBADMSG;
    }
    sha256(buf, len - SHA_LEN, d);
    if (memcmp(d, buf + len - SHA_LEN, SHA_LEN) != 0) {
        tide_errprintf(err,
                       "checksum mismatch (SHA-256 of the contents differs from the stored one)");
        return -EBADMSG;
    }
    if (memcmp(buf, magic, 8) != 0) {
        tide_errprintf(err, "not a tide-mlp checkpoint (bad magic)");
        return -EBADMSG;
    }
    version = get_u32(buf + 8);
    if (version < 1 || version > TIDE_MLP_CKPT_VERSION) {
        tide_errprintf(err, "format version %u, this program reads 1 to %u", version,
                       TIDE_MLP_CKPT_VERSION);
        return -EBADMSG;
    }
    hdr = header_size(version);
    n = get_u64(buf + 88);
    if (len < hdr + SHA_LEN || n > (len - hdr - SHA_LEN) / 16 || len != hdr + 16 * n + SHA_LEN) {
        tide_errprintf(err, "size %zu does not match its %" PRIu64 " parameters", len, n);
        return -EBADMSG;
    }
    batch = get_u64(buf + 32);
    steps = get_u64(buf + 64);
    pos = get_u64(buf + 72);
    if (batch == 0 || steps > UINT64_MAX / batch || pos != steps * batch) {
        tide_errprintf(err, "data position %" PRIu64 " is not steps done (%" PRIu64 ") x batch",
                       pos, steps);
        return -EBADMSG;
    }
    return 0;
}

/* The job of bytes that passed check_bytes: 0 in version 1, which has no such field. */
static uint64_t file_job(const uint8_t *buf)
{
    return get_u32(buf + 8) == 1 ? 0 : get_u64(buf + 96);
}

int tide_mlp_ckpt_decode(const uint8_t *buf, size_t len, const tide_mlp_config_t *expect,
                         tide_mlp_state_t *s, tide_error_t *err)
{
    tide_mlp_config_t c;
    uint64_t n;
    const uint8_t *p;
    int rc = check_bytes(buf, len, err);

    if (rc)
        return rc;
    memset(&c, 0, sizeof(c)); /* padding too: configs are compared with memcmp */
    n = get_u64(buf + 88);
    c.input = get_u32(buf + 12);
    c.width = get_u32(buf + 16);
    c.depth = get_u32(buf + 20);
    c.output = get_u32(buf + 24);
    c.micro_batches = get_u32(buf + 28);
    c.batch = get_u64(buf + 32);
    c.seed = get_u64(buf + 40);
    c.lr = get_f64(buf + 48);
    c.momentum = get_f64(buf + 56);
#define MATCH(field, flag, fmt, cast)                                                              \
    if (c.field != expect->field) {                                                                \
        tide_errprintf(err, "it was made with " flag " " fmt ", this run has " flag " " fmt,       \
                       (cast)c.field, (cast)expect->field);                                        \
        return -EINVAL;                                                                            \
    }
    MATCH(input, "--input", "%u", unsigned)
    MATCH(width, "--width", "%u", unsigned)
    MATCH(depth, "--depth", "%u", unsigned)
    MATCH(output, "--output", "%u", unsigned)
    MATCH(batch, "--batch", "%llu", unsigned long long)
    MATCH(micro_batches, "--micro-batches", "%u", unsigned)
    MATCH(seed, "--seed", "%llu", unsigned long long)
#undef MATCH
    if (!same_double(c.lr, expect->lr)) {
        tide_errprintf(err, "it was made with --lr %.17g, this run has --lr %.17g", c.lr,
                       expect->lr);
        return -EINVAL;
    }
    if (!same_double(c.momentum, expect->momentum)) {
        tide_errprintf(err, "it was made with --momentum %.17g, this run has --momentum %.17g",
                       c.momentum, expect->momentum);
        return -EINVAL;
    }
    if (n != tide_mlp_param_count(expect)) {
        tide_errprintf(err, "%" PRIu64 " parameters, this model has %" PRIu64, n,
                       tide_mlp_param_count(expect));
        return -EBADMSG;
    }
    s->cfg = c;
    s->steps_done = get_u64(buf + 64);
    s->data_position = get_u64(buf + 72);
    s->generation = get_u64(buf + 80);
    s->job = file_job(buf);
    s->n_params = n;
    s->params = tide_xmalloc(sizeof(double) * (n ? n : 1));
    s->velocity = tide_xmalloc(sizeof(double) * (n ? n : 1));
    p = buf + header_size(get_u32(buf + 8));
    for (size_t i = 0; i < n; i++, p += 8)
        s->params[i] = get_f64(p);
    for (size_t i = 0; i < n; i++, p += 8)
        s->velocity[i] = get_f64(p);
    return 0;
}

void tide_mlp_state_free(tide_mlp_state_t *s)
{
    if (!s)
        return;
    free(s->params);
    free(s->velocity);
    s->params = s->velocity = NULL;
}

static int read_file(const char *path, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t *buf = NULL;
    size_t got = 0;
    int rc = 0;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto done;
    }
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!buf) {
        rc = -ENOMEM;
        goto done;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            goto done;
        }
        got += (size_t)r;
    }
    *out = buf;
    *len = got;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return rc;
}

/* Checkpoint files in dir, by steps done, newest first. Returns the count (0 when the directory
 * does not exist) or a negative errno. *steps is caller-freed. */
static int list_checkpoints(const char *dir, uint64_t **steps)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;

    *steps = NULL;
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    while ((e = readdir(d)) != NULL) {
        unsigned long long st;
        char canon[64];
        int used = 0;
        if (sscanf(e->d_name, "mlp-%12llu.ckpt%n", &st, &used) != 1 || e->d_name[used] != '\0')
            continue;
        snprintf(canon, sizeof(canon), "mlp-%012llu.ckpt", st);
        if (strcmp(canon, e->d_name) != 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            v = tide_xrealloc(v, cap * sizeof(*v));
        }
        v[n++] = st;
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* insertion sort, descending: a handful of files */
        for (size_t j = i; j > 0 && v[j - 1] < v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *steps = v;
    return (int)n;
}

static void ckpt_path(char *out, const char *dir, uint64_t steps)
{
    snprintf(out, TIDE_MLP_CKPT_PATH_MAX, "%s/mlp-%012llu.ckpt", dir, (unsigned long long)steps);
}

/* What one checkpoint file in a directory holds, as far as its order is concerned. */
typedef struct entry {
    uint64_t steps; /* from its name */
    uint64_t job;   /* the rest only when valid */
    uint64_t gen;
    bool valid; /* checksum, format, and the step inside is the one in its name */
} entry_t;

/* Every checkpoint file in dir, read whole and checked (any config), newest step first. Returns
 * the count (0 when the directory does not exist) or a negative errno. *out is caller-freed. */
static int scan(const char *dir, entry_t **out)
{
    uint64_t *steps = NULL;
    entry_t *v = NULL;
    int n = list_checkpoints(dir, &steps);

    if (n > 0)
        v = tide_xcalloc((size_t)n, sizeof(*v));
    for (int i = 0; i < n; i++) {
        char file[TIDE_MLP_CKPT_PATH_MAX];
        uint8_t *buf = NULL;
        size_t len = 0;

        v[i].steps = steps[i];
        ckpt_path(file, dir, steps[i]);
        if (read_file(file, &buf, &len) != 0)
            continue; /* unreadable: not valid, as for the loader */
        if (check_bytes(buf, len, NULL) == 0 && get_u64(buf + 64) == steps[i]) {
            v[i].valid = true;
            v[i].job = file_job(buf);
            v[i].gen = get_u64(buf + 80);
        }
        free(buf);
    }
    free(steps);
    *out = v;
    return n;
}

/* Whether e is a valid checkpoint of job `job`'s lineage (never for job 0: no lineage). */
static bool in_lineage(const entry_t *e, uint64_t job)
{
    return job != 0 && e->valid && e->job == job;
}

/* The order in which checkpoints are newer for job `job`: its own lineage first, by (generation,
 * step), so that a stale branch (an older generation that outlived its stop and wrote higher
 * steps) ranks below the newer generation; then every other file (other jobs, job 0, damaged ones)
 * by step. Job 0: by step alone. */
static bool ranks_before(const entry_t *a, const entry_t *b, uint64_t job)
{
    bool ma = in_lineage(a, job), mb = in_lineage(b, job);

    if (ma != mb)
        return ma;
    if (ma && a->gen != b->gen)
        return a->gen > b->gen;
    return a->steps > b->steps;
}

static void sort_for(entry_t *v, int n, uint64_t job)
{
    for (int i = 1; i < n; i++) /* insertion sort: a handful of files */
        for (int j = i; j > 0 && ranks_before(&v[j], &v[j - 1], job); j--) {
            entry_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

static int mkdir_p(const char *dir)
{
    char *p = tide_xstrdup(dir);
    int rc = 0;

    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = -errno;
            goto done;
        }
        *q = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = -errno;
done:
    free(p);
    return rc;
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

int tide_mlp_ckpt_save(const char *dir, const tide_mlp_state_t *s, uint32_t keep, char *path,
                       uint64_t *bytes, char *sha256_hex, tide_error_t *err)
{
    size_t len = tide_mlp_ckpt_size(s->n_params);
    uint8_t *buf = tide_xmalloc(len);
    char final[TIDE_MLP_CKPT_PATH_MAX], tmp[TIDE_MLP_CKPT_PATH_MAX + 32];
    entry_t *files = NULL;
    uint64_t lineage;
    int fd = -1, dfd = -1, rc, n;

    if (s->job > 0 && s->generation > 0) {
        /* a stale rank must not add to (or prune) a newer generation's lineage */
        tide_error_t why = {{0}};
        rc = tide_mlp_ckpt_check_lineage(dir, s->job, s->generation, &why);
        if (rc == -ENOTDIR)
            rc = 0; /* no checkpoints there; creating the directory fails below and says so */
        if (rc == -ESTALE)
            tide_errprintf(err, "%s; not saving", why.text);
        else if (rc)
            tide_errprintf(err, "%s", why.text);
        if (rc)
            goto done;
    }
    tide_mlp_ckpt_encode(s, buf, NULL);
    rc = mkdir_p(dir);
    if (rc) {
        tide_errprintf(err, "%s: cannot create: %s", dir, strerror(-rc));
        goto done;
    }
    ckpt_path(final, dir, s->steps_done);
    snprintf(tmp, sizeof(tmp), "%s/.mlp-%012llu.ckpt.tmp%ld", dir,
             (unsigned long long)s->steps_done, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    rc = write_all(fd, buf, len);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    fd = -1;
    if (rc == 0 && rename(tmp, final) != 0)
        rc = -errno;
    if (rc) {
        tide_errprintf(err, "%s: %s", final, strerror(-rc));
        unlink(tmp);
        goto done;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: fsync: %s", dir, strerror(errno));
        goto done;
    }
    if (path)
        snprintf(path, TIDE_MLP_CKPT_PATH_MAX, "%s", final);
    if (bytes)
        *bytes = len;
    if (sha256_hex)
        tide_mlp_sha256_hex(buf, len, sha256_hex);
    /* Keep the newest `keep` at or below this one, this file included, in the loader's order (for
     * this job's lineage: by generation, then step, so a stale branch's higher steps go first).
     * Files that rank above it can only be ones the loader refused (it takes the first valid one):
     * they stay, for a human to look at, and do not count. */
    lineage = s->generation > 0 ? s->job : 0;
    n = scan(dir, &files);
    sort_for(files, n, lineage);
    for (int i = 0, kept = 1; i < n; i++) {
        const entry_t *e = &files[i];
        char old[TIDE_MLP_CKPT_PATH_MAX];
        bool above;

        if (e->steps == s->steps_done)
            continue; /* this one */
        if (in_lineage(e, lineage))
            above = e->gen > s->generation || (e->gen == s->generation && e->steps > s->steps_done);
        else
            above = e->steps > s->steps_done;
        if (above || kept++ < (int)keep)
            continue;
        ckpt_path(old, dir, e->steps);
        unlink(old);
    }
done:
    free(files);
    if (dfd >= 0)
        close(dfd);
    free(buf);
    return rc;
}

int tide_mlp_ckpt_load_newest(const char *dir, const tide_mlp_config_t *expect, uint64_t job,
                              uint64_t max_generation, tide_mlp_state_t *s, char *path, FILE *log,
                              tide_error_t *err)
{
    entry_t *files = NULL;
    int n = scan(dir, &files);
    int rc = -ENOENT, newer = 0;

    if (job == 0 || max_generation == 0)
        job = max_generation = 0; /* no lineage to keep: any generation loads, newest step first */
    sort_for(files, n > 0 ? n : 0, job); /* this job's newest generation's newest step first */

    if (n < 0) {
        rc = n;
        tide_errprintf(err, "%s: %s", dir, strerror(-rc));
        goto done;
    }
    if (n == 0) {
        tide_errprintf(err, "%s: no checkpoint", dir);
        goto done;
    }
    rc = -EBADMSG;
    tide_errprintf(err, "%s: none of its %d checkpoints is valid", dir, n);
    for (int i = 0; i < n; i++) {
        char file[TIDE_MLP_CKPT_PATH_MAX];
        tide_error_t why = {{0}};
        uint8_t *buf = NULL;
        size_t len = 0;
        uint64_t held, gen;
        bool later;
        int r;

        ckpt_path(file, dir, files[i].steps);
        r = read_file(file, &buf, &len);
        if (r) {
            if (log)
                fprintf(log, "tide-mlp: checkpoint %s not loaded: %s\n", file, strerror(-r));
            continue;
        }
        r = tide_mlp_ckpt_decode(buf, len, expect, s, &why);
        if (r == -EBADMSG) {
            free(buf);
            if (log)
                fprintf(log, "tide-mlp: checkpoint %s not loaded: %s\n", file, why.text);
            continue;
        }
        /* 0 or -EINVAL: the bytes are intact, so the header can be read whatever the config */
        held = get_u64(buf + 64);
        gen = get_u64(buf + 80);
        /* only this job's own later generations are refused: another job's file is a lineage of
         * its own, which a new job may continue (submitted again with the same directory) */
        later = max_generation && gen > max_generation && file_job(buf) == job;
        free(buf);
        if (r == 0 && (held != files[i].steps || later))
            tide_mlp_state_free(s);
        if (held != files[i].steps) {
            if (log)
                fprintf(log, "tide-mlp: checkpoint %s not loaded: it holds step %llu\n", file,
                        (unsigned long long)held);
            continue;
        }
        if (later) {
            /* a later generation's: loading it would fork its lineage (this run is stale) */
            if (log)
                fprintf(log,
                        "tide-mlp: checkpoint %s not loaded: written by generation %llu, this run "
                        "is generation %llu\n",
                        file, (unsigned long long)gen, (unsigned long long)max_generation);
            newer++;
            continue;
        }
        if (r == -EINVAL) {
            tide_errprintf(err, "checkpoint %s does not belong to this run: %s", file, why.text);
            rc = r;
            goto done;
        }
        if (path)
            snprintf(path, TIDE_MLP_CKPT_PATH_MAX, "%s", file);
        rc = 0;
        tide_error_clear(err);
        goto done;
    }
    if (newer) {
        rc = -ESTALE;
        tide_errprintf(err,
                       "%s: no valid checkpoint of generation %llu or older (%d of a later one)",
                       dir, (unsigned long long)max_generation, newer);
    }
done:
    free(files);
    return rc;
}

int tide_mlp_ckpt_newest_generation(const char *dir, uint64_t job, uint64_t *generation,
                                    uint64_t *steps_out, tide_error_t *err)
{
    entry_t *files = NULL;
    int n = scan(dir, &files);
    int rc = 0;

    if (n < 0) {
        rc = n;
        tide_errprintf(err, "%s: %s", dir, strerror(-rc));
        goto done;
    }
    /* files[] is newest step first, so the first file of a generation is its newest step */
    for (int i = 0; i < n; i++) {
        const entry_t *e = &files[i];
        if (!e->valid || (job != 0 && e->job != job))
            continue;
        if (rc == 0 || e->gen > *generation) {
            *generation = e->gen;
            *steps_out = e->steps;
            rc = 1;
        }
    }
done:
    free(files);
    return rc;
}

int tide_mlp_ckpt_check_lineage(const char *dir, uint64_t job, uint64_t generation,
                                tide_error_t *err)
{
    uint64_t newest = 0, steps = 0;
    int rc;

    if (job == 0 || generation == 0)
        return 0; /* outside tide: no lineage to keep */
    rc = tide_mlp_ckpt_newest_generation(dir, job, &newest, &steps, err);
    if (rc < 0)
        return rc;
    if (rc == 1 && newest > generation) {
        tide_errprintf(err,
                       "generation %llu is stale: the checkpoint directory has generation %llu's "
                       "step %llu",
                       (unsigned long long)generation, (unsigned long long)newest,
                       (unsigned long long)steps);
        return -ESTALE;
    }
    return 0;
}

int tide_mlp_ckpt_list(const char *dir, uint64_t **steps)
{
    return list_checkpoints(dir, steps);
}

int tide_mlp_ckpt_peek(const char *dir, uint64_t steps, uint64_t *job, uint64_t *generation)
{
    char file[TIDE_MLP_CKPT_PATH_MAX];
    uint8_t hdr[TIDE_MLP_CKPT_HEADER];
    size_t got = 0;
    uint32_t version;
    int fd, rc = 0;

    ckpt_path(file, dir, steps);
    fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    while (got < sizeof(hdr)) {
        ssize_t r = read(fd, hdr + got, sizeof(hdr) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            goto done;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    version = got >= 12 ? get_u32(hdr + 8) : 0;
    if (got < header_size(version ? version : 1) || memcmp(hdr, magic, 8) != 0 || version < 1 ||
        version > TIDE_MLP_CKPT_VERSION) {
        rc = -EBADMSG;
        goto done;
    }
    *job = file_job(hdr);
    *generation = get_u64(hdr + 80);
done:
    close(fd);
    return rc;
}

int tide_mlp_ckpt_load_step(const char *dir, uint64_t steps, const tide_mlp_config_t *expect,
                            tide_mlp_state_t *s, tide_error_t *err)
{
    char file[TIDE_MLP_CKPT_PATH_MAX];
    tide_mlp_state_t st = {0};
    tide_error_t why = {{0}};
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;

    ckpt_path(file, dir, steps);
    rc = read_file(file, &buf, &len);
    if (rc) {
        tide_errprintf(err, "%s: %s", file, strerror(-rc));
        goto done;
    }
    rc = tide_mlp_ckpt_decode(buf, len, expect, &st, &why);
    if (rc) {
        tide_errprintf(err, "%s: %s", file, why.text);
        goto done;
    }
    if (st.steps_done != steps) {
        tide_errprintf(err, "%s: it holds step %llu", file, (unsigned long long)st.steps_done);
        tide_mlp_state_free(&st);
        rc = -EBADMSG;
        goto done;
    }
    *s = st;
done:
    free(buf);
    return rc;
}

uint64_t tide_mlp_job_id(const char *s)
{
    uint64_t v = 0;

    if (!s || !*s)
        return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return 0; /* not a number, or one that does not fit: no job to tell lineages by */
        v = v * 10 + (uint64_t)(*s - '0');
    }
    return v;
}
