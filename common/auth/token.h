/* Bearer tokens (design.md: authentication from day one). The scheduler reads or creates its token file
 * (mode 0600); workers and tidectl find theirs from a flag, TIDE_TOKEN, TIDE_TOKEN_FILE or the default. */
#ifndef TIDE_TOKEN_H
#define TIDE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Token files larger than this are read only this far. */
#define TIDE_TOKEN_FILE_MAX 4096

/* The default scheduler data directory: /var/lib/tide for root, else $HOME/.local/share/tide.
 * Caller frees. */
char *tide_default_data_dir(void);

/* Reads the token in path (trimmed of whitespace). -ENOENT when missing, -EINVAL when empty; err names
 * the path. *out: caller frees. */
int tide_token_read(const char *path, char **out, tide_error_t *err);

/* A new secret: 32 random bytes as 64 hex characters. Returns 0 with *out (caller frees), or -EIO. */
int tide_token_generate(char **out, tide_error_t *err);

/* Reads path, or creates it (mode 0600, tide_token_generate's secret) when missing. *out: caller frees. */
int tide_token_load_or_create(const char *path, char **out, tide_error_t *err);

/* A client's token, first found of: the file flag_file (--token-file), the value env_token
 * ($TIDE_TOKEN, trimmed), the file env_token_file ($TIDE_TOKEN_FILE), the file default_path when
 * readable. Any argument may be NULL. *out is NULL (returns 0) when none is found; a named file that
 * cannot be read is an error (-errno, err names it). Caller frees *out. */
int tide_token_resolve(const char *flag_file, const char *env_token, const char *env_token_file,
                       const char *default_path, char **out, tide_error_t *err);

/* Compares in time independent of where they differ. */
bool tide_token_equal(const char *a, const char *b);

#endif
