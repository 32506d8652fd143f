/* Bearer tokens (design.md: authentication from day one). The scheduler reads or creates its token file
 * (mode 0600); workers and tidectl find theirs from a flag, TIDE_TOKEN, TIDE_TOKEN_FILE or the default. */
#ifndef TIDE_TOKEN_H
#define TIDE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* The default scheduler data directory: /var/lib/tide for root, else $HOME/.local/share/tide.
 * Caller frees. */
char *tide_default_data_dir(void);

/* Reads the token in path (trimmed of whitespace). -ENOENT when missing, -EINVAL when empty; err names
 * the path. *out: caller frees. */
int tide_token_read(const char *path, char **out, tide_error_t *err);

/* Reads path, or creates it (mode 0600, 32 random bytes as hex) when missing. *out: caller frees. */
int tide_token_load_or_create(const char *path, char **out, tide_error_t *err);

/* A client's token: the file given by flag_file if set, else $TIDE_TOKEN, else the file $TIDE_TOKEN_FILE,
 * else DEFAULT_DATA_DIR/token when readable. *out is NULL (returns 0) when none is found. */
int tide_token_resolve(const char *flag_file, char **out, tide_error_t *err);

/* Compares in time independent of where they differ. */
bool tide_token_equal(const char *a, const char *b);

#endif
