/* Aligned text tables for tidectl (see table.h). Cells are sanitized on the way in, so rendering only
 * measures and pads. */
#include "table.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_cli_table {
    size_t ncols;
    size_t nrows; /* header included */
    size_t cap;
    char **cells; /* nrows * ncols, row-major, owned */
    size_t gap;   /* spaces between columns */
};

char *tide_cli_sanitize(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    unsigned char *out = (unsigned char *)tide_xstrndup(s ? s : "", n);

    for (size_t i = 0; i < n; i++) {
        if (out[i] < 0x20 || out[i] == 0x7f) {
            out[i] = ' ';
        } else if (out[i] == 0xc2 && i + 1 < n && out[i + 1] >= 0x80 && out[i + 1] <= 0x9f) {
            /* C1 controls (U+0080..U+009F, CSI among them) encoded in UTF-8. */
            out[i] = ' ';
            out[i + 1] = ' ';
            i++;
        }
    }
    while (n > 0 && out[n - 1] == ' ')
        out[--n] = '\0';
    return (char *)out;
}

size_t tide_cli_display_width(const char *s)
{
    size_t w = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xC0) != 0x80)
            w++;
    return w;
}

tide_cli_table_t *tide_cli_table_new(size_t ncols, const char *const *headers)
{
    tide_cli_table_t *t = tide_xcalloc(1, sizeof(*t));

    t->ncols = ncols;
    t->gap = 3;
    tide_cli_table_add_row(t, headers);
    return t;
}

void tide_cli_table_free(tide_cli_table_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

void tide_cli_table_set_gap(tide_cli_table_t *t, size_t gap)
{
    t->gap = gap ? gap : 1;
}

void tide_cli_table_add_row(tide_cli_table_t *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cells = tide_xrealloc(t->cells, t->cap * t->ncols * sizeof(char *));
    }
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = tide_cli_sanitize(cells[c]);
    t->nrows++;
}

void tide_cli_table_render(const tide_cli_table_t *t, tide_buf_t *out)
{
    size_t *width = tide_xcalloc(t->ncols, sizeof(size_t));

    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t w = tide_cli_display_width(t->cells[r * t->ncols + c]);
            if (w > width[c])
                width[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        size_t line_start = out->len;
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            tide_buf_append_str(out, cell);
            if (c + 1 < t->ncols) {
                size_t pad = width[c] - tide_cli_display_width(cell) + t->gap;
                memset(tide_buf_reserve(out, pad), ' ', pad);
                out->len += pad;
            }
        }
        /* An empty last column leaves padding behind: trim it. */
        while (out->len > line_start && out->data[out->len - 1] == ' ')
            out->len--;
        tide_buf_append(out, "\n", 1);
    }
    free(width);
}

void tide_cli_table_render_indented(const tide_cli_table_t *t, const char *indent, tide_buf_t *out)
{
    tide_buf_t tb = TIDE_BUF_INIT;

    tide_cli_table_render(t, &tb);
    for (const char *p = tide_buf_cstr(&tb); *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
        tide_buf_append_str(out, indent);
        tide_buf_append(out, p, len);
        p += len;
    }
    tide_buf_free(&tb);
}
