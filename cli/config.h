/* Where tidectl finds its scheduler and its token: flags, then environment, then defaults. The
 * environment is passed in (not read here), so the precedence is testable. */
#ifndef TIDE_CLI_CONFIG_H
#define TIDE_CLI_CONFIG_H

#include "error.h"

#define TIDE_CLI_DEFAULT_SCHEDULER "127.0.0.1:7070"
#define TIDE_CLI_DEFAULT_PORT "7070"

/* The scheduler addresses: opt (--scheduler) if set, else env (TIDE_SCHEDULER) if non-empty, else
 * 127.0.0.1:7070; a comma-separated list names several replicas (the leader among them is used). "HOST"
 * gets the default port; IPv6 hosts need brackets ("[::1]:7070"). Returns 0 with *out, the list with
 * ports, comma-separated (caller frees), or -EINVAL with err ("bad scheduler address 'x:y': ..."). */
int tide_cli_scheduler_resolve(const char *opt, const char *env, char **out, tide_error_t *err);

#endif
