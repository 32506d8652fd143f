/* Internals shared by encode.c and decode.c. */
#ifndef TIDE_PBJSON_PRIVATE_H
#define TIDE_PBJSON_PRIVATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* cJSON reports out-of-memory as NULL; tide treats it as fatal, like tide_xmalloc. Returns j. */
cJSON *tide__pbjson_check(cJSON *j);

/* Field member access by descriptor offset. */
#define TIDE__PB_MEMBER(type, msg, off) (*(type *)((char *)(msg) + (off)))

#endif
