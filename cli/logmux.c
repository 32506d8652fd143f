/* Per-rank line assembly for `tidectl logs` (see logmux.h). Invariant: a rank's held bytes never
 * contain a newline and never exceed TIDE_CLI_LOGMUX_MAX_PARTIAL. */
#include "logmux.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

typedef struct pending {
    int32_t rank;
    tide_buf_t partial;
} pending_t;

struct tide_cli_logmux {
    bool prefix;
    pending_t *ranks; /* sorted by rank */
    size_t n, cap;
};

tide_cli_logmux_t *tide_cli_logmux_new(bool prefix)
{
    tide_cli_logmux_t *m = tide_xcalloc(1, sizeof(*m));
    m->prefix = prefix;
    return m;
}

void tide_cli_logmux_free(tide_cli_logmux_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        tide_buf_free(&m->ranks[i].partial);
    free(m->ranks);
    free(m);
}

static pending_t *get(tide_cli_logmux_t *m, int32_t rank)
{
    size_t i;

    for (i = 0; i < m->n && m->ranks[i].rank < rank; i++)
        ;
    if (i < m->n && m->ranks[i].rank == rank)
        return &m->ranks[i];
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 8;
        m->ranks = tide_xrealloc(m->ranks, m->cap * sizeof(*m->ranks));
    }
    memmove(&m->ranks[i + 1], &m->ranks[i], (m->n - i) * sizeof(*m->ranks));
    m->n++;
    m->ranks[i].rank = rank;
    tide_buf_init(&m->ranks[i].partial);
    return &m->ranks[i];
}

static void emit_line(tide_buf_t *out, int32_t rank, const tide_buf_t *held, const uint8_t *p, size_t len)
{
    tide_buf_printf(out, "[rank %d] ", rank);
    if (held->len)
        tide_buf_append(out, held->data, held->len);
    tide_buf_append(out, p, len);
    tide_buf_append(out, "\n", 1);
}

void tide_cli_logmux_feed(tide_cli_logmux_t *m, int32_t rank, const uint8_t *data, size_t len, tide_buf_t *out)
{
    pending_t *pr;

    if (!m->prefix) {
        tide_buf_append(out, data, len);
        return;
    }
    pr = get(m, rank);
    while (len > 0) {
        const uint8_t *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;

        if (nl) {
            emit_line(out, rank, &pr->partial, data, take);
            tide_buf_reset(&pr->partial);
            data += take + 1;
            len -= take + 1;
            continue;
        }
        /* No newline: hold it, writing out whatever would overflow the bound. */
        if (pr->partial.len + take > TIDE_CLI_LOGMUX_MAX_PARTIAL) {
            size_t room = TIDE_CLI_LOGMUX_MAX_PARTIAL - pr->partial.len;
            emit_line(out, rank, &pr->partial, data, room);
            tide_buf_reset(&pr->partial);
            data += room;
            len -= room;
            continue;
        }
        tide_buf_append(&pr->partial, data, take);
        len = 0;
    }
}

void tide_cli_logmux_flush(tide_cli_logmux_t *m, tide_buf_t *out)
{
    for (size_t i = 0; i < m->n; i++) {
        pending_t *pr = &m->ranks[i];
        if (pr->partial.len == 0)
            continue;
        emit_line(out, pr->rank, &pr->partial, NULL, 0);
        tide_buf_reset(&pr->partial);
    }
}
