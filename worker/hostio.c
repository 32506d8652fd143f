/* The node's network and storage utilization (hostio.h) from /proc/net/dev, /proc/diskstats and the
 * link speeds under /sys/class/net. Invariant: each chosen device keeps its own last good sample
 * (counters and time), so a rate always spans exactly the interval since that sample; a read
 * allocates nothing. */
#include "hostio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "xmalloc.h"

#define NAME_MAX_LEN         64 /* diskstats names are at most 31 bytes, interface names 15 */
#define BUF_MIN              (16 * 1024) /* the read buffer: enough for ~120 interfaces or disks */
#define BUF_MAX              (4 * 1024 * 1024)
#define NET_FIELDS           16 /* numbers after "IF:" in /proc/net/dev */
#define DISK_FIELDS          11 /* numbers after "major minor name" in /proc/diskstats */
#define SECTOR_BYTES         512.0 /* diskstats counts 512-byte sectors whatever the disk's block size */
#define ARPHRD_LOOPBACK_TYPE 772 /* /sys/class/net/IF/type of a loopback device */

typedef struct iodev {
    char name[NAME_MAX_LEN];
    double speed;     /* net: link speed in bytes/s, 0 when unknown; disks: unused */
    uint64_t cur[3];  /* this read's counters: net rx, tx; disk sectors read, written, io ms */
    uint64_t prev[3]; /* the last good sample, taken at prev_ms */
    int64_t prev_ms;
    bool have_prev;
    bool seen;      /* scratch for one read: its line was found and parsed */
    bool malformed; /* scratch for one read: its line was found but did not parse */
} iodev_t;

typedef struct devlist {
    iodev_t *v;
    size_t n, cap;
} devlist_t;

struct tide_hostio {
    devlist_t net, disks;
    double net_capacity, storage_capacity;
    char *net_path;  /* PROC/net/dev */
    char *disk_path; /* PROC/diskstats */
    char *buf;       /* one file's text at a time, NUL-terminated */
    size_t buf_size; /* bytes, including room for the NUL */
};

/* ---- parsing ----------------------------------------------------------------------------------
 */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The next decimal number of a line, after optional blanks; it must end at a blank or the line's
 * end. Refuses signs, other characters and overflow. */
static int next_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;

    while (s < end && is_blank(*s))
        s++;
    if (s == end || *s < '0' || *s > '9')
        return -EINVAL;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    if (s < end && !is_blank(*s))
        return -EINVAL;
    *p = s;
    *out = v;
    return 0;
}

static const char *line_end(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl ? nl : s + strlen(s);
}

/* One /proc/net/dev line: the interface name (a span of the line; the name ends at the first ':',
 * which names never contain) and, when the name was found, its rx and tx byte counters.
 * Returns 0; -ENOENT when the line names no interface (the two header lines); -EINVAL when the
 * numbers after the name are malformed (then *name is set). */
static int net_line(const char *s, const char *end, const char **name, size_t *name_len,
                    uint64_t *rx, uint64_t *tx)
{
    const char *colon, *n;
    uint64_t f[NET_FIELDS];

    while (s < end && is_blank(*s))
        s++;
    colon = memchr(s, ':', (size_t)(end - s));
    if (!colon || colon == s)
        return -ENOENT;
    for (n = s; n < colon; n++)
        if (is_blank(*n))
            return -ENOENT;
    *name = s;
    *name_len = (size_t)(colon - s);
    s = colon + 1; /* "eth0:1234" (no blank after the colon) is the same as "eth0: 1234" */
    for (int i = 0; i < NET_FIELDS; i++)
        if (next_u64(&s, end, &f[i]) != 0)
            return -EINVAL;
    *rx = f[0];
    *tx = f[8];
    return 0;
}

/* One /proc/diskstats line: "major minor name f1 .. f11 [more]". Returns as net_line; -ENOENT when
 * the line does not start with two numbers and a name. */
static int disk_line(const char *s, const char *end, const char **name, size_t *name_len,
                     uint64_t c[3])
{
    uint64_t major, minor, f[DISK_FIELDS];

    if (next_u64(&s, end, &major) != 0 || next_u64(&s, end, &minor) != 0)
        return -ENOENT;
    while (s < end && is_blank(*s))
        s++;
    *name = s;
    while (s < end && !is_blank(*s))
        s++;
    *name_len = (size_t)(s - *name);
    if (*name_len == 0)
        return -ENOENT;
    for (int i = 0; i < DISK_FIELDS; i++)
        if (next_u64(&s, end, &f[i]) != 0)
            return -EINVAL;
    c[0] = f[2]; /* sectors read: field 6 of the line */
    c[1] = f[6]; /* sectors written: field 10 */
    c[2] = f[9]; /* ms doing I/O: field 13 */
    return 0;
}

static bool span_is(const char *name, size_t len, const char *dev)
{
    return strlen(dev) == len && memcmp(name, dev, len) == 0;
}

int tide_hostio_parse_net_dev(const char *text, const char *dev, uint64_t *rx_bytes,
                              uint64_t *tx_bytes)
{
    for (const char *s = text; *s;) {
        const char *end = line_end(s), *name = NULL;
        size_t len = 0;
        uint64_t rx, tx;
        int rc = net_line(s, end, &name, &len, &rx, &tx);

        if (rc != -ENOENT && span_is(name, len, dev)) {
            if (rc == 0) {
                *rx_bytes = rx;
                *tx_bytes = tx;
            }
            return rc;
        }
        s = *end ? end + 1 : end;
    }
    return -ENOENT;
}

int tide_hostio_parse_diskstats(const char *text, const char *dev, uint64_t *sectors_read,
                                uint64_t *sectors_written, uint64_t *io_ms)
{
    for (const char *s = text; *s;) {
        const char *end = line_end(s), *name = NULL;
        size_t len = 0;
        uint64_t c[3];
        int rc = disk_line(s, end, &name, &len, c);

        if (rc != -ENOENT && span_is(name, len, dev)) {
            if (rc == 0) {
                *sectors_read = c[0];
                *sectors_written = c[1];
                *io_ms = c[2];
            }
            return rc;
        }
        s = *end ? end + 1 : end;
    }
    return -ENOENT;
}

/* ---- files ------------------------------------------------------------------------------------
 */

/* Reads a whole small file into h->buf: one open, reads until EOF or the buffer is full, one close.
 * A text larger than the buffer is cut after its last complete line (the devices after it read as
 * missing). Returns 0 or -errno. */
static int read_text(tide_hostio_t *h, const char *path)
{
    size_t len = 0;
    int rc = 0, fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    while (len < h->buf_size - 1) {
        ssize_t r = read(fd, h->buf + len, h->buf_size - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (rc == 0 && len == h->buf_size - 1) {
        while (len > 0 && h->buf[len - 1] != '\n')
            len--;
    }
    h->buf[len] = '\0';
    return rc;
}

/* The size of a file read to its end (procfs files report st_size 0), or -errno. */
static long text_size(const char *path)
{
    char chunk[4096];
    long total = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            total = r < 0 ? -errno : total;
            break;
        }
        total += r;
        if (total > BUF_MAX)
            break;
    }
    close(fd);
    return total;
}

/* A small sysfs attribute's first line, without its newline. Returns 0 or -errno. */
static int read_attr(const char *path, char *out, size_t size)
{
    ssize_t r;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    do
        r = read(fd, out, size - 1);
    while (r < 0 && errno == EINTR);
    int rc = r < 0 ? -errno : 0;
    close(fd);
    if (rc == 0) {
        out[r] = '\0';
        out[strcspn(out, "\n")] = '\0';
    }
    return rc;
}

/* ---- device lists -----------------------------------------------------------------------------
 */

static bool devlist_has(const devlist_t *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0)
            return true;
    return false;
}

/* Appends a device (ignoring a repeat, which would otherwise count twice in a sum). */
static void devlist_add(devlist_t *l, const char *name)
{
    if (devlist_has(l, name))
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = tide_xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
    snprintf(l->v[l->n].name, sizeof(l->v[l->n].name), "%s", name);
    l->n++;
}

/* A name usable as one path component and one token of a /proc line. */
static bool valid_name(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n >= NAME_MAX_LEN || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; *s; s++)
        if (*s == '/' || *s == ':' || *s == ',' || (unsigned char)*s <= ' ')
            return false;
    return true;
}

typedef int (*name_check_fn)(void *ctx, const char *name, tide_error_t *err);

/* Splits "a,b , c" into names (blanks around a name are dropped, empty items skipped), checks each
 * with `check` and adds it. Returns 0, -EINVAL for a name that cannot be one, or check's error. */
static int parse_list(const char *list, const char *flag, devlist_t *l, name_check_fn check,
                      void *ctx, tide_error_t *err)
{
    char name[NAME_MAX_LEN];
    int rc = 0;

    for (const char *s = list; *s && rc == 0;) {
        const char *e = strchr(s, ',');
        size_t len;

        if (!e)
            e = s + strlen(s);
        while (s < e && is_blank(*s))
            s++;
        len = (size_t)(e - s);
        while (len > 0 && is_blank(s[len - 1]))
            len--;
        if (len > 0) {
            snprintf(name, sizeof(name), "%.*s", (int)len, s);
            if (len >= NAME_MAX_LEN || !valid_name(name)) {
                tide_errprintf(err, "%s: \"%.*s\" is not a device name", flag, (int)len, s);
                rc = -EINVAL;
            } else if ((rc = check(ctx, name, err)) == 0) {
                devlist_add(l, name);
            }
        }
        s = *e ? e + 1 : e;
    }
    return rc;
}

struct net_ctx {
    const char *sys_root;
};

static int check_net(void *ctx, const char *name, tide_error_t *err)
{
    const struct net_ctx *c = ctx;
    char path[4096];
    struct stat st;

    snprintf(path, sizeof(path), "%s/class/net/%s", c->sys_root, name);
    if (stat(path, &st) != 0) {
        tide_errprintf(err, "--net-dev: no interface \"%s\" (no %s)", name, path);
        return -ENOENT;
    }
    return 0;
}

struct disk_ctx {
    const char *text; /* PROC/diskstats, or NULL when it could not be read */
    const char *path;
    int read_rc;
};

static int check_disk(void *ctx, const char *name, tide_error_t *err)
{
    const struct disk_ctx *c = ctx;
    uint64_t a, b, d;

    if (!c->text) {
        tide_errprintf(err, "--storage-dev: cannot read %s: %s", c->path, strerror(-c->read_rc));
        return c->read_rc;
    }
    if (tide_hostio_parse_diskstats(c->text, name, &a, &b, &d) == -ENOENT) {
        tide_errprintf(err, "--storage-dev: no disk \"%s\" in %s", name, c->path);
        return -ENOENT;
    }
    return 0;
}

/* The default interfaces: every one that is up ("unknown" counts for all but loopback, as virtual
 * and some physical drivers never report "up"), except loopback. Sorted, for a stable order. */
static void default_net(const char *sys_root, devlist_t *l)
{
    char path[4096], attr[64];
    struct dirent **ents = NULL;
    int n;

    snprintf(path, sizeof(path), "%s/class/net", sys_root);
    n = scandir(path, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        bool loopback = strcmp(name, "lo") == 0;

        if (valid_name(name)) {
            snprintf(path, sizeof(path), "%s/class/net/%s/type", sys_root, name);
            if (read_attr(path, attr, sizeof(attr)) == 0 && atoi(attr) == ARPHRD_LOOPBACK_TYPE)
                loopback = true;
            snprintf(path, sizeof(path), "%s/class/net/%s/operstate", sys_root, name);
            if (!loopback && read_attr(path, attr, sizeof(attr)) == 0 &&
                (strcmp(attr, "up") == 0 || strcmp(attr, "unknown") == 0))
                devlist_add(l, name);
        }
        free(ents[i]);
    }
    free(ents);
}

/* The default disks: SYS/block's entries but the virtual and removable kinds. */
static void default_disks(const char *sys_root, devlist_t *l)
{
    static const char *const skip[] = {"loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"};
    char path[4096];
    struct dirent **ents = NULL;
    int n;

    snprintf(path, sizeof(path), "%s/block", sys_root);
    n = scandir(path, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        bool keep = valid_name(name);

        for (size_t k = 0; keep && k < sizeof(skip) / sizeof(skip[0]); k++)
            if (strncmp(name, skip[k], strlen(skip[k])) == 0)
                keep = false;
        if (keep)
            devlist_add(l, name);
        free(ents[i]);
    }
    free(ents);
}

/* The link speed in bytes/s from SYS/class/net/IF/speed (Mb/s); 0 when unknown (-1, 0, unreadable:
 * down links and virtual interfaces). */
static double link_speed(const char *sys_root, const char *name)
{
    char path[4096], attr[64], *end;
    long long mbps;

    snprintf(path, sizeof(path), "%s/class/net/%s/speed", sys_root, name);
    if (read_attr(path, attr, sizeof(attr)) != 0)
        return 0;
    errno = 0;
    mbps = strtoll(attr, &end, 10);
    if (errno != 0 || end == attr || *end != '\0' || mbps <= 0)
        return 0;
    return (double)mbps * 1e6 / 8;
}

/* ---- sampling ---------------------------------------------------------------------------------
 */

typedef int (*line_fn)(const char *s, const char *end, const char **name, size_t *name_len,
                       uint64_t c[3]);

static int net_line3(const char *s, const char *end, const char **name, size_t *name_len,
                     uint64_t c[3])
{
    return net_line(s, end, name, name_len, &c[0], &c[1]);
}

static iodev_t *devlist_find(devlist_t *l, const char *name, size_t len)
{
    for (size_t i = 0; i < l->n; i++)
        if (span_is(name, len, l->v[i].name))
            return &l->v[i];
    return NULL;
}

/* One pass over h->buf: the chosen devices' counters into cur, with seen/malformed. Returns true
 * when no chosen device's line was malformed. */
static bool scan(tide_hostio_t *h, devlist_t *l, line_fn parse)
{
    bool ok = true;

    for (size_t i = 0; i < l->n; i++)
        l->v[i].seen = l->v[i].malformed = false;
    for (const char *s = h->buf; *s;) {
        const char *end = line_end(s), *name = NULL;
        size_t len = 0;
        uint64_t c[3] = {0, 0, 0};
        int rc = parse(s, end, &name, &len, c);
        iodev_t *d = rc == -ENOENT ? NULL : devlist_find(l, name, len);

        if (d && rc == 0) {
            memcpy(d->cur, c, sizeof(c));
            d->seen = true;
        } else if (d) {
            d->malformed = true;
            ok = false;
        }
        s = *end ? end + 1 : end;
    }
    return ok;
}

/* Advances one device's sample to cur at now_ms and gives its deltas over dt_ms. Returns false when
 * there is no rate this time: no line (the baseline is dropped: a device that comes back starts
 * over), a malformed line (the baseline stays), the first sample, or no time elapsed. Counters that
 * went backwards (a reset) count as no traffic this time. */
static bool advance(iodev_t *d, int ncounters, int64_t now_ms, double delta[3], double *dt_ms)
{
    bool backwards = false;

    if (d->malformed)
        return false;
    if (!d->seen) {
        d->have_prev = false;
        return false;
    }
    if (d->have_prev && now_ms == d->prev_ms)
        return false; /* keep the baseline: the next read measures from it */
    if (!d->have_prev || now_ms < d->prev_ms) {
        memcpy(d->prev, d->cur, sizeof(d->prev));
        d->prev_ms = now_ms;
        d->have_prev = true;
        return false;
    }
    for (int i = 0; i < ncounters; i++)
        if (d->cur[i] < d->prev[i])
            backwards = true;
    for (int i = 0; i < ncounters; i++)
        delta[i] = backwards ? 0 : (double)(d->cur[i] - d->prev[i]);
    *dt_ms = (double)(now_ms - d->prev_ms);
    memcpy(d->prev, d->cur, sizeof(d->prev));
    d->prev_ms = now_ms;
    return true;
}

static double clamp01(double v)
{
    return v > 1 ? 1 : (v > 0 ? v : 0);
}

static void sample_net(tide_hostio_t *h, int64_t now_ms, tide_hostio_reading_t *out)
{
    double sum_rx = 0, sum_tx = 0, busiest = 0;
    bool any = false, any_known_speed = false, ok;

    if (h->net.n == 0 || read_text(h, h->net_path) != 0)
        return;
    ok = scan(h, &h->net, net_line3);
    for (size_t i = 0; i < h->net.n; i++) {
        iodev_t *d = &h->net.v[i];
        double delta[3], dt_ms, rx, tx;

        if (!advance(d, 2, now_ms, delta, &dt_ms))
            continue;
        rx = delta[0] * 1000 / dt_ms;
        tx = delta[1] * 1000 / dt_ms;
        sum_rx += rx;
        sum_tx += tx;
        any = true;
        if (d->speed > 0) {
            busiest = fmax(busiest, fmax(rx, tx) / d->speed);
            any_known_speed = true;
        }
    }
    if (!ok || !any)
        return;
    out->net_bytes_per_s = fmax(sum_rx, sum_tx);
    if (h->net_capacity > 0) {
        out->net_util = clamp01(out->net_bytes_per_s / h->net_capacity);
        out->known |= TIDE_GPU_HAS_NET;
    } else if (any_known_speed) {
        out->net_util = clamp01(busiest);
        out->known |= TIDE_GPU_HAS_NET;
    }
}

static void sample_disks(tide_hostio_t *h, int64_t now_ms, tide_hostio_reading_t *out)
{
    double bytes = 0, busiest = 0;
    bool any = false, ok;

    if (h->disks.n == 0 || read_text(h, h->disk_path) != 0)
        return;
    ok = scan(h, &h->disks, disk_line);
    for (size_t i = 0; i < h->disks.n; i++) {
        double delta[3], dt_ms;

        if (!advance(&h->disks.v[i], 3, now_ms, delta, &dt_ms))
            continue;
        bytes += (delta[0] + delta[1]) * SECTOR_BYTES * 1000 / dt_ms;
        busiest = fmax(busiest, delta[2] / dt_ms);
        any = true;
    }
    if (!ok || !any)
        return;
    out->storage_bytes_per_s = bytes;
    out->storage_util = clamp01(h->storage_capacity > 0 ? bytes / h->storage_capacity : busiest);
    out->known |= TIDE_GPU_HAS_STORAGE;
}

/* ---- the object -------------------------------------------------------------------------------
 */

static bool valid_capacity(double v)
{
    return isfinite(v) && v >= 0;
}

/* Sizes the read buffer once: 16 KiB, or twice the larger file when that is more (4 MiB at most).
 */
static void size_buffer(tide_hostio_t *h)
{
    long a = text_size(h->net_path), b = text_size(h->disk_path), big = a > b ? a : b;
    size_t want = BUF_MIN;

    while (big > 0 && want < 2 * (size_t)big && want < BUF_MAX)
        want *= 2;
    h->buf_size = want + 1;
    h->buf = tide_xmalloc(h->buf_size);
}

int tide_hostio_open(const tide_hostio_config_t *cfg, int64_t now_ms, tide_hostio_t **out,
                     tide_error_t *err)
{
    const char *proc = cfg->proc_root ? cfg->proc_root : "/proc";
    const char *sys = cfg->sys_root ? cfg->sys_root : "/sys";
    tide_hostio_t *h = NULL;
    tide_hostio_reading_t ignored;
    int rc = 0;

    *out = NULL;
    if (!valid_capacity(cfg->net_capacity)) {
        tide_errprintf(err, "--net-capacity: %g is not a finite number >= 0 (bytes/s)",
                       cfg->net_capacity);
        return -EINVAL;
    }
    if (!valid_capacity(cfg->storage_capacity)) {
        tide_errprintf(err, "--storage-capacity: %g is not a finite number >= 0 (bytes/s)",
                       cfg->storage_capacity);
        return -EINVAL;
    }
    h = tide_xcalloc(1, sizeof(*h));
    h->net_capacity = cfg->net_capacity;
    h->storage_capacity = cfg->storage_capacity;
    h->net_path = tide_xasprintf("%s/net/dev", proc);
    h->disk_path = tide_xasprintf("%s/diskstats", proc);
    size_buffer(h);

    if (cfg->net_devs && *cfg->net_devs) {
        struct net_ctx ctx = {sys};
        if ((rc = parse_list(cfg->net_devs, "--net-dev", &h->net, check_net, &ctx, err)) != 0)
            goto error;
    } else {
        default_net(sys, &h->net);
    }
    for (size_t i = 0; i < h->net.n; i++)
        h->net.v[i].speed = link_speed(sys, h->net.v[i].name);

    if (cfg->storage_devs && *cfg->storage_devs) {
        struct disk_ctx ctx = {NULL, h->disk_path, 0};
        ctx.read_rc = read_text(h, h->disk_path);
        ctx.text = ctx.read_rc == 0 ? h->buf : NULL;
        rc = parse_list(cfg->storage_devs, "--storage-dev", &h->disks, check_disk, &ctx, err);
        if (rc != 0)
            goto error;
    } else {
        default_disks(sys, &h->disks);
    }

    tide_hostio_read(h, now_ms, &ignored); /* the baseline */
    *out = h;
    return 0;

error:
    tide_hostio_close(h);
    return rc;
}

int tide_hostio_read(tide_hostio_t *h, int64_t now_ms, tide_hostio_reading_t *out)
{
    memset(out, 0, sizeof(*out));
    sample_net(h, now_ms, out);
    sample_disks(h, now_ms, out);
    return 0;
}

void tide_hostio_close(tide_hostio_t *h)
{
    if (!h)
        return;
    free(h->buf);
    free(h->disk_path);
    free(h->net_path);
    free(h->disks.v);
    free(h->net.v);
    free(h);
}
