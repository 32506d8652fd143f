/* Allocation that aborts on out-of-memory, for daemons and tools (as redis' zmalloc, slurm's xmalloc):
 * there are no NULL branches to test. Input from the network is validated before anything is sized by it. */
#ifndef TIDE_XMALLOC_H
#define TIDE_XMALLOC_H

#include <stdarg.h>
#include <stddef.h>

void *tide_xmalloc(size_t n);
void *tide_xcalloc(size_t n, size_t size);
void *tide_xrealloc(void *p, size_t n);
/* Caller frees. tide_xstrdup(NULL) returns NULL. */
char *tide_xstrdup(const char *s);
char *tide_xstrndup(const char *s, size_t n);
char *tide_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *tide_xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
