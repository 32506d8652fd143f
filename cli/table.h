/* kubectl-style aligned tables: a header row and rows of cells, each column as wide as its widest cell
 * (counted in characters, not bytes), three spaces between columns (by default), the last column not
 * padded. */
#ifndef TIDE_CLI_TABLE_H
#define TIDE_CLI_TABLE_H

#include <stddef.h>

#include "buf.h"

typedef struct tide_cli_table tide_cli_table_t;

/* A table with ncols columns named by headers (copied). Never NULL; free with tide_cli_table_free. */
tide_cli_table_t *tide_cli_table_new(size_t ncols, const char *const *headers);
void tide_cli_table_free(tide_cli_table_t *t);

/* Spaces between columns instead of three (at least 1): for dense views that must fit 80 columns
 * (tidectl top). */
void tide_cli_table_set_gap(tide_cli_table_t *t, size_t gap);

/* Appends a row of ncols cells (copied; NULL prints as ""). Control characters in cells (newlines,
 * tabs, escape sequences from the scheduler's messages) are replaced by spaces so a row stays one
 * line and cannot drive the terminal. */
void tide_cli_table_add_row(tide_cli_table_t *t, const char *const *cells);

/* Writes the table into out. */
void tide_cli_table_render(const tide_cli_table_t *t, tide_buf_t *out);
/* The same with indent before every line (a table under a "Key:" line of a describe view). */
void tide_cli_table_render_indented(const tide_cli_table_t *t, const char *indent, tide_buf_t *out);

/* Copy of s with control characters (C0, DEL, C1 in UTF-8) replaced by ' ' and trailing blanks
 * trimmed. Caller frees. */
char *tide_cli_sanitize(const char *s);

/* Display width of a UTF-8 string: one per code point (East Asian wide characters are not special). */
size_t tide_cli_display_width(const char *s);

#endif
