/* errprintf-style error text, see error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

void tide_errprintf(tide_error_t *err, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

void tide_error_clear(tide_error_t *err)
{
    if (err)
        err->text[0] = '\0';
}
