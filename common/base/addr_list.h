/* Lists of "HOST:PORT" addresses as users give them ("a:7070,b:7070,[::1]:7070"): the scheduler
 * replicas a worker or tidectl may reach (the leader among them, docs/operations.md). */
#ifndef TIDE_ADDR_LIST_H
#define TIDE_ADDR_LIST_H

#include <stddef.h>

#include "error.h"

#define TIDE_ADDR_LIST_MAX 16

typedef struct tide_addr_list {
    char *addrs[TIDE_ADDR_LIST_MAX]; /* owned, "HOST:PORT" each */
    size_t n;
} tide_addr_list_t;

/* Parses a comma-separated list of HOST:PORT (IPv6 in brackets). An element without a port gets
 * default_port when it is not NULL, else it is an error. Returns 0 with out filled (at least one
 * address), or -EINVAL with err saying which element is wrong and why (without a flag name); out is
 * then empty. */
int tide_addr_list_parse(const char *s, const char *default_port, tide_addr_list_t *out, tide_error_t *err);
/* Frees the addresses; the list is empty after. NULL is fine. */
void tide_addr_list_free(tide_addr_list_t *l);

#endif
