/* Address lists (addr_list.h). Invariant: a parsed list holds 1..TIDE_ADDR_LIST_MAX well-formed
 * "HOST:PORT" strings, in the order given, duplicates included (the caller's order is its preference). */
#include "addr_list.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

static int check_port(const char *p, size_t len)
{
    long v = 0;

    if (len == 0 || len > 5)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)p[i]))
            return -EINVAL;
        v = v * 10 + (p[i] - '0');
    }
    return v >= 1 && v <= 65535 ? 0 : -EINVAL;
}

/* One element [s, s+len): NULL and *out set, or the reason it is wrong. */
static const char *parse_one(const char *s, size_t len, const char *default_port, char **out)
{
    const char *port = NULL, *end = s + len;
    size_t host_len;

    if (len == 0)
        return "empty address";
    for (const char *p = s; p < end; p++) {
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            return "contains blanks";
    }
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || close == s + 1)
            return "unterminated '['";
        if (close + 1 < end && close[1] != ':')
            return "expected ':' after ']'";
        host_len = (size_t)(close + 1 - s);
        port = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = memchr(s, ':', len);
        if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)))
            return "IPv6 addresses need brackets, as in [::1]:7070";
        if (colon == s)
            return "missing host";
        host_len = colon ? (size_t)(colon - s) : len;
        port = colon ? colon + 1 : NULL;
    }
    if (port) {
        if (check_port(port, (size_t)(end - port)) < 0)
            return "port must be 1-65535";
        *out = tide_xstrndup(s, len);
        return NULL;
    }
    if (!default_port)
        return "not HOST:PORT";
    *out = tide_xasprintf("%.*s:%s", (int)host_len, s, default_port);
    return NULL;
}

int tide_addr_list_parse(const char *s, const char *default_port, tide_addr_list_t *out, tide_error_t *err)
{
    const char *p = s;

    memset(out, 0, sizeof(*out));
    if (!s || !*s) {
        tide_errprintf(err, "no address");
        return -EINVAL;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *why;

        if (out->n == TIDE_ADDR_LIST_MAX) {
            tide_errprintf(err, "more than %d addresses", TIDE_ADDR_LIST_MAX);
            tide_addr_list_free(out);
            return -EINVAL;
        }
        why = parse_one(p, len, default_port, &out->addrs[out->n]);
        if (why) {
            if (strchr(s, ','))
                tide_errprintf(err, "'%.*s' in '%.100s': %s", (int)(len > 100 ? 100 : len), p, s, why);
            else
                tide_errprintf(err, "'%.100s': %s", s, why);
            tide_addr_list_free(out);
            return -EINVAL;
        }
        out->n++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

void tide_addr_list_free(tide_addr_list_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->addrs[i]);
    memset(l, 0, sizeof(*l));
}
