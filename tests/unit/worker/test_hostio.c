/* worker/hostio.c: the /proc parsers on fixed texts, the utilization arithmetic on a fixture tree
 * (a throwaway proc_root/sys_root whose counters the test writes before each read at a chosen
 * time), and one open/read against this machine's real /proc and /sys. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "fake_tree.h"
#include "hostio.h"

#define NET_HEADER                                                                                 \
    "Inter-|   Receive                                                |  Transmit\n"               \
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "     \
    "drop fifo colls carrier compressed\n"

static void near(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-12 * fmax(1, fabs(want)))
        fail_msg("%s: got %.17g, want %.17g", what, got, want);
}

/* ---- parsers ----------------------------------------------------------------------------------
 */

static const char real_net_dev[] = NET_HEADER
    "    lo: 6124745834 4539290    0    0    0     0          0         0 6124745834 4539290    "
    "0    0    0     0       0          0\n"
    "  ifb0:       0       0    0    0    0     0          0         0        0       0    0    "
    "0    0     0       0          0\n"
    "  eth0: 95080643   11797    0    0    0     0          0         0   724153   10859    0    "
    "0    0     0       0          0\n";

static void test_parse_net_normal(void **state)
{
    uint64_t rx = 1, tx = 1;

    (void)state;
    assert_int_equal(tide_hostio_parse_net_dev(real_net_dev, "eth0", &rx, &tx), 0);
    assert_int_equal(rx, 95080643);
    assert_int_equal(tx, 724153);
    assert_int_equal(tide_hostio_parse_net_dev(real_net_dev, "lo", &rx, &tx), 0);
    assert_int_equal(rx, 6124745834ull);
    assert_int_equal(tx, 6124745834ull);
    assert_int_equal(tide_hostio_parse_net_dev(real_net_dev, "ifb0", &rx, &tx), 0);
    assert_int_equal(rx, 0);
    assert_int_equal(tx, 0);
}

static void test_parse_net_no_space(void **state)
{
    static const char text[] =
        NET_HEADER "  eth0:18446744073709551615 5 0 0 0 0 0 0 98765432109876 9 0 0 0 0 0 0\n"
                   "ib0:12 1 0 0 0 0 0 0 34 1 0 0 0 0 0 0"; /* no final newline */
    uint64_t rx = 0, tx = 0;

    (void)state;
    assert_int_equal(tide_hostio_parse_net_dev(text, "eth0", &rx, &tx), 0);
    assert_int_equal(rx, UINT64_MAX);
    assert_int_equal(tx, 98765432109876ull);
    assert_int_equal(tide_hostio_parse_net_dev(text, "ib0", &rx, &tx), 0);
    assert_int_equal(rx, 12);
    assert_int_equal(tx, 34);
}

static void test_parse_net_missing_and_prefix(void **state)
{
    static const char text[] = NET_HEADER "  eth0.100: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n"
                                          "  eth10: 3 0 0 0 0 0 0 0 4 0 0 0 0 0 0 0\n"
                                          "  eth1: 5 0 0 0 0 0 0 0 6 0 0 0 0 0 0 0\n"
                                          "  : 7 0 0 0 0 0 0 0 8 0 0 0 0 0 0 0\n";
    uint64_t rx = 0, tx = 0;

    (void)state;
    assert_int_equal(tide_hostio_parse_net_dev(text, "eth0", &rx, &tx), -ENOENT);
    assert_int_equal(tide_hostio_parse_net_dev(text, "eth", &rx, &tx), -ENOENT);
    assert_int_equal(tide_hostio_parse_net_dev(text, "th1", &rx, &tx), -ENOENT);
    assert_int_equal(tide_hostio_parse_net_dev(text, "face", &rx, &tx), -ENOENT);
    assert_int_equal(tide_hostio_parse_net_dev(text, "", &rx, &tx), -ENOENT);
    assert_int_equal(tide_hostio_parse_net_dev(text, "eth1", &rx, &tx), 0);
    assert_int_equal(rx, 5);
    assert_int_equal(tx, 6);
    assert_int_equal(tide_hostio_parse_net_dev(text, "eth0.100", &rx, &tx), 0);
    assert_int_equal(rx, 1);
    assert_int_equal(tide_hostio_parse_net_dev("", "eth0", &rx, &tx), -ENOENT);
}

static void test_parse_net_malformed(void **state)
{
    uint64_t rx = 7, tx = 7;

    (void)state;
    /* too few numbers, a letter, a sign, an overflow: the device is there but unreadable */
    assert_int_equal(tide_hostio_parse_net_dev("eth0: 1 2 3\n", "eth0", &rx, &tx), -EINVAL);
    assert_int_equal(
        tide_hostio_parse_net_dev("eth0: 1 0 0 0 0 0 0 0 2x 0 0 0 0 0 0 0\n", "eth0", &rx, &tx),
        -EINVAL);
    assert_int_equal(
        tide_hostio_parse_net_dev("eth0: -1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n", "eth0", &rx, &tx),
        -EINVAL);
    assert_int_equal(tide_hostio_parse_net_dev("eth0: 18446744073709551616 0 0 0 0 0 0 0 2 0 0 0 "
                                               "0 0 0 0\n",
                                               "eth0", &rx, &tx),
                     -EINVAL);
    /* fifteen numbers; a sixteenth that is not one */
    assert_int_equal(
        tide_hostio_parse_net_dev("eth0: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0\n", "eth0", &rx, &tx),
        -EINVAL);
    assert_int_equal(
        tide_hostio_parse_net_dev("eth0: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0x\n", "eth0", &rx, &tx),
        -EINVAL);
    /* the numbers do not continue onto the next line */
    assert_int_equal(
        tide_hostio_parse_net_dev("eth0: 1 0 0 0 0 0 0 0\n2 0 0 0 0 0 0 0\n", "eth0", &rx, &tx),
        -EINVAL);
    assert_int_equal(rx, 7);
    assert_int_equal(tx, 7);
    /* another device's bad line does not matter */
    assert_int_equal(tide_hostio_parse_net_dev("eth1: x\neth0: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n",
                                               "eth0", &rx, &tx),
                     0);
    assert_int_equal(rx, 1);
    assert_int_equal(tx, 2);
}

static const char real_diskstats[] =
    "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    " 254       0 vda 532832 34433 19018834 1882744 425142 186197 18694160 161310 0 165132 "
    "2088960 207609 76 40360280 37213 90762 7692\n"
    " 254       1 vda1 100 0 200 0 0 0 300 0 0 400 0 0 0 0 0 0 0\n"
    " 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

static void test_parse_diskstats_normal(void **state)
{
    uint64_t r = 0, w = 0, ms = 0;

    (void)state;
    assert_int_equal(tide_hostio_parse_diskstats(real_diskstats, "vda", &r, &w, &ms), 0);
    assert_int_equal(r, 19018834);
    assert_int_equal(w, 18694160);
    assert_int_equal(ms, 165132);
    assert_int_equal(tide_hostio_parse_diskstats(real_diskstats, "vda1", &r, &w, &ms), 0);
    assert_int_equal(r, 200);
    assert_int_equal(w, 300);
    assert_int_equal(ms, 400);
    /* kernels before 4.18: exactly eleven fields */
    assert_int_equal(
        tide_hostio_parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n", "sda", &r, &w, &ms), 0);
    assert_int_equal(r, 3);
    assert_int_equal(w, 7);
    assert_int_equal(ms, 10);
}

static void test_parse_diskstats_missing_and_prefix(void **state)
{
    static const char text[] = "8 1 sda1 1 2 3 4 5 6 7 8 9 10 11\n"
                               "259 0 nvme0n1 0 0 1 0 0 0 2 0 0 3 0\n"
                               "259 1 nvme0n1p1 0 0 4 0 0 0 5 0 0 6 0\n";
    uint64_t r = 0, w = 0, ms = 0;

    (void)state;
    assert_int_equal(tide_hostio_parse_diskstats(text, "sda", &r, &w, &ms), -ENOENT);
    assert_int_equal(tide_hostio_parse_diskstats(text, "nvme0", &r, &w, &ms), -ENOENT);
    assert_int_equal(tide_hostio_parse_diskstats(text, "vda", &r, &w, &ms), -ENOENT);
    assert_int_equal(tide_hostio_parse_diskstats(text, "nvme0n1", &r, &w, &ms), 0);
    assert_int_equal(r, 1);
    assert_int_equal(w, 2);
    assert_int_equal(ms, 3);
    assert_int_equal(tide_hostio_parse_diskstats(text, "nvme0n1p1", &r, &w, &ms), 0);
    assert_int_equal(r, 4);
    assert_int_equal(ms, 6);
}

static void test_parse_diskstats_malformed(void **state)
{
    uint64_t r = 9, w = 9, ms = 9;

    (void)state;
    /* the four-field partition lines of 2.6.2x kernels, a letter, a sign */
    assert_int_equal(tide_hostio_parse_diskstats("8 1 sda1 1 2 3 4\n", "sda1", &r, &w, &ms),
                     -EINVAL);
    assert_int_equal(
        tide_hostio_parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 1O 11\n", "sda", &r, &w, &ms),
        -EINVAL);
    assert_int_equal(
        tide_hostio_parse_diskstats("8 0 sda 1 2 -3 4 5 6 7 8 9 10 11\n", "sda", &r, &w, &ms),
        -EINVAL);
    /* ten fields, and an eleventh that is not a number */
    assert_int_equal(
        tide_hostio_parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10\n", "sda", &r, &w, &ms), -EINVAL);
    assert_int_equal(
        tide_hostio_parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11s\n", "sda", &r, &w, &ms),
        -EINVAL);
    assert_int_equal(r, 9);
    /* lines that do not even start with "major minor name" are skipped */
    assert_int_equal(tide_hostio_parse_diskstats("garbage sda\nx 0 sda 1 2 3 4 5 6 7 8 9 10 11\n",
                                                 "sda", &r, &w, &ms),
                     -ENOENT);
}

/* ---- the fixture tree -------------------------------------------------------------------------
 */

typedef tide_fake_tree_t fixture_t;
#define put tide_fake_tree_put

/* An interface under sys/class/net: speed in Mb/s, or NULL for one whose speed cannot be read. */
static void iface(const fixture_t *f, const char *name, const char *operstate, const char *speed)
{
    char rel[256];

    snprintf(rel, sizeof(rel), "sys/class/net/%s/operstate", name);
    put(f, rel, "%s\n", operstate);
    if (speed) {
        snprintf(rel, sizeof(rel), "sys/class/net/%s/speed", name);
        put(f, rel, "%s\n", speed);
    }
}

typedef struct netc {
    const char *name;
    uint64_t rx, tx;
} netc_t;

static void net_dev(const fixture_t *f, const netc_t *c, size_t n)
{
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof(text), "%s", NET_HEADER);

    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len,
                                "%6s: %llu 10 0 0 0 0 0 0 %llu 20 0 0 0 0 0 0\n", c[i].name,
                                (unsigned long long)c[i].rx, (unsigned long long)c[i].tx);
    put(f, "proc/net/dev", "%s", text);
}

typedef struct diskc {
    const char *name;
    uint64_t rd, wr, io_ms;
} diskc_t;

static void diskstats(const fixture_t *f, const diskc_t *c, size_t n)
{
    char text[4096];
    size_t len = 0;

    text[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len,
                                "   8 %zu %s 1 0 %llu 0 1 0 %llu 0 0 %llu 0 0 0 0 0 0 0\n", i,
                                c[i].name, (unsigned long long)c[i].rd, (unsigned long long)c[i].wr,
                                (unsigned long long)c[i].io_ms);
    put(f, "proc/diskstats", "%s", text);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));

    if (!f || tide_fake_tree_init(f, "hostio") < 0) {
        free(f);
        return -1;
    }
    diskstats(f, NULL, 0);
    net_dev(f, NULL, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    int rc = tide_fake_tree_rm(f->root);

    free(f);
    return rc;
}

static tide_hostio_config_t config(const fixture_t *f)
{
    tide_hostio_config_t c = {0};

    c.proc_root = f->proc;
    c.sys_root = f->sys;
    return c;
}

static tide_hostio_t *open_ok(const tide_hostio_config_t *c, int64_t now_ms)
{
    tide_hostio_t *h = NULL;
    tide_error_t err = {{0}};
    int rc = tide_hostio_open(c, now_ms, &h, &err);

    if (rc != 0)
        fail_msg("open: %d %s", rc, err.text);
    assert_non_null(h);
    return h;
}

static tide_hostio_reading_t read_at(tide_hostio_t *h, int64_t now_ms)
{
    tide_hostio_reading_t r;

    memset(&r, 0xa5, sizeof(r));
    assert_int_equal(tide_hostio_read(h, now_ms, &r), 0);
    return r;
}

/* Two links of 1 and 10 Gb/s: each against its own speed, the busier direction of each, the
 * busiest link binding; the bytes/s field is max(sum rx, sum tx). */
static void test_net_link_speed(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    iface(f, "eth0", "up", "1000");  /* 125e6 bytes/s */
    iface(f, "eth1", "up", "10000"); /* 1.25e9 bytes/s */
    net_dev(f, (netc_t[]){{"eth0", 1000, 2000}, {"eth1", 3000, 4000}}, 2);
    c.net_devs = "eth0, eth1";
    h = open_ok(&c, 10000);

    r = read_at(h, 10000 + 2000);                /* 2 s */
    assert_int_equal(r.known, TIDE_GPU_HAS_NET); /* no disk: storage unknown */
    near(r.net_util, 0, "idle");
    near(r.net_bytes_per_s, 0, "idle bytes");

    /* eth0: rx 62.5 MB/s (0.5), tx 12.5 MB/s; eth1: tx 250 MB/s (0.2) -> 0.5 */
    net_dev(
        f,
        (netc_t[]){{"eth0", 1000 + 125000000, 2000 + 25000000}, {"eth1", 3000, 4000 + 500000000}},
        2);
    r = read_at(h, 14000);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET);
    near(r.net_util, 0.5, "eth0's rx binds");
    near(r.net_bytes_per_s, 262.5e6, "max(sum rx, sum tx)");

    /* one second later: eth0 transmits 100 MB (0.8) and receives 1 MB; eth1 receives 1 GB (0.8) */
    net_dev(f,
            (netc_t[]){{"eth0", 1000 + 126000000, 2000 + 125000000},
                       {"eth1", 3000 + 1000000000, 4000 + 500000000}},
            2);
    r = read_at(h, 15000);
    near(r.net_util, 0.8, "eth1 at 1e9 of 1.25e9 bytes/s, eth0 tx at 100e6 of 125e6: 0.8 each");
    near(r.net_bytes_per_s, 1001e6, "sum rx");

    /* eth0's tx alone is the busiest direction anywhere */
    net_dev(f,
            (netc_t[]){{"eth0", 1000 + 126000000, 2000 + 125000000 + 112500000},
                       {"eth1", 3000 + 1000000000, 4000 + 500000000}},
            2);
    r = read_at(h, 16000);
    near(r.net_util, 0.9, "eth0 tx");

    /* more than the link: clamped */
    net_dev(f,
            (netc_t[]){{"eth0", 1000 + 126000000 + 250000000, 2000 + 125000000 + 112500000},
                       {"eth1", 3000 + 1000000000, 4000 + 500000000}},
            2);
    r = read_at(h, 17000);
    near(r.net_util, 1, "clamped");
    near(r.net_bytes_per_s, 250e6, "unclamped bytes");
    tide_hostio_close(h);
}

/* --net-capacity: the chosen interfaces together (also those of unknown speed), busiest direction.
 */
static void test_net_capacity_sums(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    iface(f, "eth0", "up", "1000");
    iface(f, "ib0", "up", "-1");
    iface(f, "lo", "unknown", NULL);
    iface(f, "ifb0", "down", NULL);
    net_dev(f, (netc_t[]){{"lo", 0, 0}, {"eth0", 0, 0}, {"ib0", 0, 0}, {"ifb0", 0, 0}}, 4);
    c.net_capacity = 1e9;
    h = open_ok(&c, 0); /* the default list: eth0 and ib0, not lo, not ifb0 (down) */

    net_dev(f,
            (netc_t[]){{"lo", 5000000000, 5000000000},
                       {"eth0", 300000000, 10},
                       {"ib0", 200000000, 400000000},
                       {"ifb0", 5000000000, 5000000000}},
            4);
    r = read_at(h, 1000);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET);
    near(r.net_util, 0.5, "(300 + 200) MB/s rx of 1 GB/s; lo and ifb0 are not counted");
    near(r.net_bytes_per_s, 500e6, "bytes");

    /* transmit is now the busier sum */
    net_dev(f,
            (netc_t[]){{"lo", 5000000000, 5000000000},
                       {"eth0", 300000000, 10 + 100000000},
                       {"ib0", 200000000, 400000000 + 600000000},
                       {"ifb0", 5000000000, 5000000000}},
            4);
    r = read_at(h, 2000);
    near(r.net_util, 0.7, "tx sum");
    tide_hostio_close(h);
}

/* Only interfaces whose speed cannot be known: network is unknown, not 0; the bytes are still
 * there. */
static void test_net_unknown_speed(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    iface(f, "eth0", "up", "-1");
    iface(f, "veth1", "unknown", "0");
    iface(f, "ifb0", "down", NULL);
    net_dev(f, (netc_t[]){{"eth0", 0, 0}, {"veth1", 0, 0}, {"ifb0", 0, 0}}, 3);
    h = open_ok(&c, 0);
    net_dev(f, (netc_t[]){{"eth0", 1000, 0}, {"veth1", 0, 3000}, {"ifb0", 0, 0}}, 3);
    r = read_at(h, 1000);
    assert_int_equal(r.known & TIDE_GPU_HAS_NET, 0);
    near(r.net_util, 0, "unknown is 0 in the field");
    near(r.net_bytes_per_s, 3000, "bytes are measured all the same");
    tide_hostio_close(h);

    /* with one known link beside them, only the known one is measured */
    iface(f, "eth1", "up", "8"); /* 1e6 bytes/s */
    net_dev(f, (netc_t[]){{"eth0", 0, 0}, {"eth1", 0, 0}, {"veth1", 0, 0}}, 3);
    h = open_ok(&c, 0);
    net_dev(f, (netc_t[]){{"eth0", 900000000, 0}, {"eth1", 250000, 0}, {"veth1", 0, 0}}, 3);
    r = read_at(h, 1000);
    assert_int_equal(r.known & TIDE_GPU_HAS_NET, TIDE_GPU_HAS_NET);
    near(r.net_util, 0.25, "eth1 only");
    tide_hostio_close(h);
}

/* The busiest disk's busy-time fraction; the default disk list skips loop, zram, dm- and the rest.
 */
static void test_storage_busy(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;
    static const char *const disks[] = {"loop0", "ram0", "zram0", "dm-0", "md127",
                                        "sr0",   "fd0",  "nbd3",  "sda",  "nvme0n1"};

    for (size_t i = 0; i < sizeof(disks) / sizeof(disks[0]); i++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "sys/block/%s/size", disks[i]);
        put(f, rel, "1\n");
    }
    diskstats(f,
              (diskc_t[]){{"loop0", 0, 0, 0},
                          {"sda", 10, 20, 30},
                          {"sda1", 0, 0, 0},
                          {"nvme0n1", 0, 0, 0},
                          {"dm-0", 0, 0, 0}},
              5);
    h = open_ok(&c, 5000);
    diskstats(f,
              (diskc_t[]){{"loop0", 999999, 999999, 2000},
                          {"sda", 10 + 1000, 20 + 3000, 30 + 500},
                          {"sda1", 0, 0, 2000},
                          {"nvme0n1", 4000, 0, 1500},
                          {"dm-0", 999999, 999999, 2000}},
              5);
    r = read_at(h, 7000);
    assert_int_equal(r.known, TIDE_GPU_HAS_STORAGE); /* no interface: network unknown */
    near(r.storage_util, 0.75, "nvme0n1 busy 1.5 s of 2 s; sda 0.25; loop0, dm-0 and sda1 skipped");
    near(r.storage_bytes_per_s, (1000.0 + 3000 + 4000) * 512 / 2, "sectors of sda and nvme0n1");

    /* idle disks are known 0 */
    r = read_at(h, 8000);
    assert_int_equal(r.known, TIDE_GPU_HAS_STORAGE);
    near(r.storage_util, 0, "idle");
    tide_hostio_close(h);
}

/* --storage-capacity: sectors read and written of the named disks, in bytes/s, over the capacity.
 */
static void test_storage_capacity(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    diskstats(f, (diskc_t[]){{"sda", 0, 0, 0}, {"sdb", 0, 0, 0}, {"sdc", 0, 0, 0}}, 3);
    c.storage_devs = "sda,sdb";
    c.storage_capacity = 1024000; /* 2000 sectors/s */
    h = open_ok(&c, 0);
    diskstats(
        f, (diskc_t[]){{"sda", 300, 200, 1000}, {"sdb", 0, 500, 1000}, {"sdc", 9999, 9999, 1000}},
        3);
    r = read_at(h, 1000);
    assert_int_equal(r.known, TIDE_GPU_HAS_STORAGE);
    near(r.storage_util, 0.5, "1000 sectors/s of 2000; sdc not chosen");
    near(r.storage_bytes_per_s, 512000, "bytes");

    diskstats(
        f, (diskc_t[]){{"sda", 300 + 5000, 200, 1000}, {"sdb", 0, 500, 1000}, {"sdc", 0, 0, 0}}, 3);
    r = read_at(h, 2000);
    near(r.storage_util, 1, "clamped");
    near(r.storage_bytes_per_s, 2560000, "unclamped bytes");
    tide_hostio_close(h);
}

/* A counter that goes backwards (an interface or disk reset) is no traffic for that sample, and the
 * next sample measures from the new value. */
static void test_counter_backwards(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    iface(f, "eth0", "up", "8"); /* 1e6 bytes/s */
    iface(f, "eth1", "up", "8");
    net_dev(f, (netc_t[]){{"eth0", 5000000, 5000000}, {"eth1", 0, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 100, 100, 100000}}, 1);
    c.storage_devs = "sda";
    h = open_ok(&c, 0);

    /* eth0 reset: rx back to 1000, tx (after the reset) already above its old value */
    net_dev(f, (netc_t[]){{"eth0", 1000, 5900000}, {"eth1", 100000, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 10, 10, 10}}, 1);
    r = read_at(h, 1000);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET | TIDE_GPU_HAS_STORAGE);
    near(r.net_util, 0.1, "eth0 counts as idle; eth1 0.1");
    near(r.net_bytes_per_s, 100000, "eth1 only");
    near(r.storage_util, 0, "sda reset");
    near(r.storage_bytes_per_s, 0, "sda reset bytes");

    net_dev(f, (netc_t[]){{"eth0", 1000 + 500000, 5900000}, {"eth1", 100000, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 10, 10, 10 + 400}}, 1);
    r = read_at(h, 2000);
    near(r.net_util, 0.5, "measured from the value after the reset");
    near(r.storage_util, 0.4, "sda from its new value");
    tide_hostio_close(h);
}

/* No time elapsed, a file gone or garbled, a device gone: unknown for that sample, never 0. */
static void test_unknown_samples(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_reading_t r;
    tide_hostio_t *h;
    char path[256];

    iface(f, "eth0", "up", "8");
    iface(f, "eth1", "up", "8");
    net_dev(f, (netc_t[]){{"eth0", 0, 0}, {"eth1", 0, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 0, 0, 0}}, 1);
    c.storage_devs = "sda";
    h = open_ok(&c, 1000);

    r = read_at(h, 1000); /* Δt = 0 */
    assert_int_equal(r.known, 0);
    near(r.net_util, 0, "zeroed");
    near(r.net_bytes_per_s, 0, "zeroed");
    r = read_at(h, 999); /* Δt < 0 */
    assert_int_equal(r.known, 0);

    net_dev(f, (netc_t[]){{"eth0", 200000, 0}, {"eth1", 0, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 0, 0, 300}}, 1);
    r = read_at(h, 1999); /* from the sample at 999 */
    assert_int_equal(r.known, TIDE_GPU_HAS_NET | TIDE_GPU_HAS_STORAGE);
    near(r.net_util, 0.2, "1 s");
    near(r.storage_util, 0.3, "1 s");

    /* the files vanish: both unknown */
    snprintf(path, sizeof(path), "%s/net/dev", f->proc);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/diskstats", f->proc);
    assert_int_equal(unlink(path), 0);
    r = read_at(h, 2999);
    assert_int_equal(r.known, 0);

    /* back, two seconds after the last good sample: the rate spans both */
    net_dev(f, (netc_t[]){{"eth0", 200000 + 1200000, 0}, {"eth1", 0, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 0, 0, 300 + 1000}}, 1);
    r = read_at(h, 3999);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET | TIDE_GPU_HAS_STORAGE);
    near(r.net_util, 0.6, "over 2 s");
    near(r.storage_util, 0.5, "over 2 s");

    /* a chosen device's line garbled: that dimension unknown */
    put(f, "proc/net/dev", NET_HEADER "eth0: 1 2 3\neth1: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
    put(f, "proc/diskstats", "8 0 sda 1 2 3\n");
    r = read_at(h, 4999);
    assert_int_equal(r.known, 0);

    /* readable again: eth0 and sda measure from their last good samples (3999), eth1 from 4999,
     * where its own line was fine */
    net_dev(f, (netc_t[]){{"eth0", 1400000 + 1000000, 0}, {"eth1", 100000, 0}}, 2);
    diskstats(f, (diskc_t[]){{"sda", 0, 0, 1300 + 600}}, 1);
    r = read_at(h, 5999);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET | TIDE_GPU_HAS_STORAGE);
    near(r.net_util, 0.5, "eth0 over 2 s");
    near(r.net_bytes_per_s, 500000 + 100000, "eth0 over 2 s + eth1 over 1 s");
    near(r.storage_util, 0.3, "sda over 2 s");

    /* eth0 gone from the file: eth1 alone is measured; sda gone: storage unknown */
    net_dev(f, (netc_t[]){{"eth1", 100000 + 300000, 0}}, 1);
    diskstats(f, (diskc_t[]){{"sdb", 0, 0, 0}}, 1);
    r = read_at(h, 6999);
    assert_int_equal(r.known, TIDE_GPU_HAS_NET);
    near(r.net_util, 0.3, "eth1");
    near(r.net_bytes_per_s, 300000, "eth1 only");
    tide_hostio_close(h);
}

static void test_bad_config(void **state)
{
    fixture_t *f = *state;
    tide_hostio_config_t c = config(f);
    tide_hostio_t *h = (tide_hostio_t *)&c;
    tide_error_t err = {{0}};

    iface(f, "eth0", "up", "1000");
    diskstats(f, (diskc_t[]){{"sda", 0, 0, 0}}, 1);

    c.net_devs = "eth0,ib7";
    assert_int_equal(tide_hostio_open(&c, 0, &h, &err), -ENOENT);
    assert_null(h);
    assert_non_null(strstr(err.text, "\"ib7\""));
    c.net_devs = "../../etc";
    assert_int_equal(tide_hostio_open(&c, 0, &h, &err), -EINVAL);
    c.net_devs = NULL;

    c.storage_devs = "sda1";
    assert_int_equal(tide_hostio_open(&c, 0, &h, &err), -ENOENT);
    assert_non_null(strstr(err.text, "\"sda1\""));
    c.storage_devs = "sda";

    const double bad[] = {-1, NAN, INFINITY, -0.001};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c.net_capacity = bad[i];
        memset(&err, 0, sizeof(err));
        assert_int_equal(tide_hostio_open(&c, 0, &h, &err), -EINVAL);
        assert_non_null(strstr(err.text, "--net-capacity"));
        c.net_capacity = 0;
        c.storage_capacity = bad[i];
        memset(&err, 0, sizeof(err));
        assert_int_equal(tide_hostio_open(&c, 0, &h, &err), -EINVAL);
        assert_non_null(strstr(err.text, "--storage-capacity"));
        c.storage_capacity = 0;
    }
    assert_null(h);

    /* blanks and repeats in the list are fine; the repeat is counted once */
    iface(f, "eth1", "up", "8");
    net_dev(f, (netc_t[]){{"eth0", 0, 0}, {"eth1", 0, 0}}, 2);
    c.net_devs = " eth1 , eth1,";
    c.net_capacity = 1e6;
    h = open_ok(&c, 0);
    net_dev(f, (netc_t[]){{"eth0", 0, 0}, {"eth1", 300000, 0}}, 2);
    tide_hostio_reading_t r = read_at(h, 1000);
    near(r.net_util, 0.3, "eth1 once");
    tide_hostio_close(h);
    tide_hostio_close(NULL);
}

/* This machine's real /proc and /sys: the defaults open, reads succeed (which dimensions are known
 * depends on the machine's links and disks). */
static void test_real_machine(void **state)
{
    tide_hostio_config_t c = {0};
    tide_hostio_reading_t r;
    tide_hostio_t *h;

    (void)state;
    h = open_ok(&c, 1000);
    assert_int_equal(tide_hostio_read(h, 2000, &r), 0);
    assert_true(r.net_util >= 0 && r.net_util <= 1);
    assert_int_equal(tide_hostio_read(h, 3000, &r), 0);
    assert_true(r.storage_util >= 0 && r.storage_util <= 1);
    assert_true(r.net_bytes_per_s >= 0 && r.storage_bytes_per_s >= 0);
    printf("# this machine: known 0x%x net %.3g (%.0f B/s) storage %.3g (%.0f B/s)\n", r.known,
           r.net_util, r.net_bytes_per_s, r.storage_util, r.storage_bytes_per_s);
    tide_hostio_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_net_normal),
        cmocka_unit_test(test_parse_net_no_space),
        cmocka_unit_test(test_parse_net_missing_and_prefix),
        cmocka_unit_test(test_parse_net_malformed),
        cmocka_unit_test(test_parse_diskstats_normal),
        cmocka_unit_test(test_parse_diskstats_missing_and_prefix),
        cmocka_unit_test(test_parse_diskstats_malformed),
        cmocka_unit_test_setup_teardown(test_net_link_speed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_net_capacity_sums, setup, teardown),
        cmocka_unit_test_setup_teardown(test_net_unknown_speed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storage_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storage_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counter_backwards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_samples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
        cmocka_unit_test(test_real_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
