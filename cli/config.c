/* Scheduler address and token resolution for tidectl (see config.h). Reads only the files it is told
 * about; never prints a token. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xmalloc.h"


static int check_port(const char *p)
{
    long v;
    char *end;

    if (!*p || !isdigit((unsigned char)*p))
        return -EINVAL;
    v = strtol(p, &end, 10);
    return (*end || v < 1 || v > 65535) ? -EINVAL : 0;
}

int tide_cli_scheduler_resolve(const char *opt, const char *env, char **out, tide_error_t *err)
{
    const char *s = (opt && *opt) ? opt : (env && *env) ? env : TIDE_CLI_DEFAULT_SCHEDULER;
    const char *port = NULL, *why = NULL;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1)
            why = "unterminated '['";
        else if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            why = "expected ':' after ']'";
    } else {
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':'))
            why = "IPv6 addresses need brackets, as in [::1]:7070";
        else if (colon == s)
            why = "missing host";
        else if (colon)
            port = colon + 1;
    }
    if (!why && port && check_port(port) < 0)
        why = "port must be 1-65535";
    for (const char *p = s; !why && *p; p++)
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            why = "contains blanks";
    if (why) {
        tide_errprintf(err, "bad scheduler address '%.100s': %s", s, why);
        return -EINVAL;
    }
    *out = port ? tide_xstrdup(s) : tide_xasprintf("%s:%s", s, TIDE_CLI_DEFAULT_PORT);
    return 0;
}

