/* Internals shared by encode.c and decode.c. */
#ifndef TIDE_PBJSON_PRIVATE_H
#define TIDE_PBJSON_PRIVATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* cJSON reports out-of-memory as NULL; tide treats it as fatal, like tide_xmalloc. Returns j. */
cJSON *tide__pbjson_check(cJSON *j);

/* Length of the valid UTF-8 sequence at p (n > 0 bytes left), or 0 when it is not one (overlong forms,
 * surrogates and code points past U+10FFFF included). */
size_t tide__pbjson_utf8_seq(const unsigned char *p, size_t n);

/* Field member access by descriptor offset. */
#define TIDE__PB_MEMBER(type, msg, off) (*(type *)((char *)(msg) + (off)))

#endif
