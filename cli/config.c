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

#include "addr_list.h"
#include "buf.h"
#include "xmalloc.h"


int tide_cli_scheduler_resolve(const char *opt, const char *env, char **out, tide_error_t *err)
{
    const char *s = (opt && *opt) ? opt : (env && *env) ? env : TIDE_CLI_DEFAULT_SCHEDULER;
    tide_addr_list_t l;
    tide_error_t e;
    tide_buf_t b;

    if (tide_addr_list_parse(s, TIDE_CLI_DEFAULT_PORT, &l, &e) < 0) {
        tide_errprintf(err, "bad scheduler address %s", e.text);
        return -EINVAL;
    }
    tide_buf_init(&b);
    for (size_t i = 0; i < l.n; i++)
        tide_buf_printf(&b, "%s%s", i ? "," : "", l.addrs[i]);
    tide_addr_list_free(&l);
    *out = tide_xstrndup((const char *)b.data, b.len);
    tide_buf_free(&b);
    return 0;
}

