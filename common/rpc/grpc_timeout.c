/* grpc-timeout parsing and formatting (gRPC over HTTP/2 spec, "Timeout"). Pure functions; parsing
 * rejects anything but 1-8 digits and one unit, so an attacker cannot overflow the arithmetic. */
#include "grpc_timeout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MAX_VALUE 99999999LL

int tide_grpc_timeout_parse(const char *s, size_t len, int64_t *ms)
{
    int64_t v = 0;
    size_t i;

    if (len < 2 || len > 9)
        return -EINVAL;
    for (i = 0; i + 1 < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    switch (s[len - 1]) {
    case 'H':
        *ms = v * 3600000;
        break;
    case 'M':
        *ms = v * 60000;
        break;
    case 'S':
        *ms = v * 1000;
        break;
    case 'm':
        *ms = v;
        break;
    case 'u':
        *ms = (v + 999) / 1000;
        break;
    case 'n':
        *ms = (v + 999999) / 1000000;
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

void tide_grpc_timeout_format(int64_t ms, char out[TIDE_GRPC_TIMEOUT_MAX_LEN])
{
    static const struct {
        int64_t div;
        char unit;
    } units[] = {{1, 'm'}, {1000, 'S'}, {60000, 'M'}, {3600000, 'H'}};
    size_t i;

    if (ms < 1)
        ms = 1;
    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        int64_t v = ms / units[i].div + (ms % units[i].div != 0);
        if (v <= MAX_VALUE || units[i].unit == 'H') {
            if (v > MAX_VALUE)
                v = MAX_VALUE;
            /* v <= 99999999: 8 digits, a unit and the NUL fit exactly. */
            char tmp[32];
            snprintf(tmp, sizeof(tmp), "%lld%c", (long long)v, units[i].unit);
            memcpy(out, tmp, strlen(tmp) + 1);
            return;
        }
    }
}
