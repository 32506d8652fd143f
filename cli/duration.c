/* Duration parsing and formatting for tidectl (see duration.h). Pure; every input is a user's string
 * and is checked for overflow before any arithmetic. */
#include "duration.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_SECONDS (100LL * 365 * 86400)

/* Reads 1-12 digits at *p into *v and advances *p; returns false when there are none. */
static bool read_digits(const char **p, int64_t *v)
{
    const char *s = *p;
    int64_t x = 0;
    int n = 0;

    while (*s >= '0' && *s <= '9') {
        if (++n > 12)
            return false;
        x = x * 10 + (*s++ - '0');
    }
    if (n == 0)
        return false;
    *v = x;
    *p = s;
    return true;
}

/* "D-HH", "D-HH:MM", "D-HH:MM:SS", "MM:SS", "HH:MM:SS". */
static int parse_slurm(const char *s, int64_t *out)
{
    const char *p = s;
    int64_t days = 0, f[3];
    int n = 0;
    bool has_days = false;

    if (strchr(s, '-')) {
        if (!read_digits(&p, &days) || *p++ != '-')
            return -EINVAL;
        has_days = true;
    }
    for (;;) {
        if (n == 3 || !read_digits(&p, &f[n]))
            return -EINVAL;
        n++;
        if (*p == '\0')
            break;
        if (*p++ != ':')
            return -EINVAL;
    }
    if (has_days) {
        /* D-HH[:MM[:SS]]: hours first. */
        int64_t h = f[0], m = n > 1 ? f[1] : 0, sec = n > 2 ? f[2] : 0;
        if (h >= 24 || m >= 60 || sec >= 60)
            return -EINVAL;
        if (days > MAX_SECONDS / 86400)
            return -ERANGE;
        *out = days * 86400 + h * 3600 + m * 60 + sec;
    } else if (n == 2) {
        /* MM:SS; minutes may exceed 59 ("90:00"). */
        if (f[1] >= 60)
            return -EINVAL;
        *out = f[0] * 60 + f[1];
    } else if (n == 3) {
        if (f[1] >= 60 || f[2] >= 60)
            return -EINVAL;
        *out = f[0] * 3600 + f[1] * 60 + f[2];
    } else {
        return -EINVAL; /* a lone number has no ':' and never gets here */
    }
    return *out > MAX_SECONDS ? -ERANGE : 0;
}

int tide_cli_duration_parse(const char *s, int64_t *seconds)
{
    static const struct {
        char unit;
        int64_t mult;
    } units[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
    const char *p = s;
    int64_t total = 0, v;
    unsigned seen = 0;

    if (!s || !*s)
        return -EINVAL;
    if (strcasecmp(s, "unlimited") == 0 || strcasecmp(s, "infinite") == 0) {
        *seconds = 0;
        return 0;
    }
    if (strpbrk(s, ":-")) {
        int64_t out;
        int rc = parse_slurm(s, &out);
        if (rc == 0)
            *seconds = out;
        return rc;
    }
    if (!read_digits(&p, &v))
        return -EINVAL;
    if (*p == '\0') {
        if (v > MAX_SECONDS)
            return -ERANGE;
        *seconds = v;
        return 0;
    }
    for (;;) {
        size_t u;
        for (u = 0; u < sizeof(units) / sizeof(units[0]); u++)
            if (*p == units[u].unit)
                break;
        if (u == sizeof(units) / sizeof(units[0]) || (seen & (1u << u)))
            return -EINVAL;
        seen |= 1u << u;
        p++;
        if (v > MAX_SECONDS / units[u].mult)
            return -ERANGE;
        total += v * units[u].mult;
        if (total > MAX_SECONDS)
            return -ERANGE;
        if (*p == '\0')
            break;
        if (!read_digits(&p, &v))
            return -EINVAL;
    }
    *seconds = total;
    return 0;
}

void tide_cli_age_format(int64_t s, char *buf, size_t size)
{
    if (s < 0)
        s = 0;
    if (s < 60)
        snprintf(buf, size, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    else if (s < 86400)
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    else if (s < 365 * 86400)
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
    else
        snprintf(buf, size, "%lldy", (long long)(s / (365 * 86400)));
}

void tide_cli_duration_format(int64_t s, char *buf, size_t size)
{
    static const struct {
        char unit;
        int64_t mult;
    } units[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
    size_t used = 0;

    if (size == 0)
        return;
    buf[0] = '\0';
    if (s <= 0) {
        snprintf(buf, size, "0s");
        return;
    }
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        int64_t n = s / units[u].mult;
        s %= units[u].mult;
        if (n == 0)
            continue;
        int w = snprintf(buf + used, size - used, "%lld%c", (long long)n, units[u].unit);
        if (w < 0 || (size_t)w >= size - used)
            return;
        used += (size_t)w;
    }
}
