/* cJSON -> message by walking the descriptor (proto3 JSON mapping, see pbjson.h). The message under
 * construction is consistent at every step (counts set only with their zeroed arrays), so a failure at
 * any point is cleaned up by protobuf_c_message_free_unpacked and the caller gets nothing. */
#include "base64.h"
#include "pbjson.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbjson_private.h"
#include "xmalloc.h"

typedef struct decoder {
    unsigned flags;
    tide_error_t *err;
    char path[256]; /* "spec.env[\"A\"]" of the value being decoded, for errors */
    size_t path_len;
} decoder_t;

/* Appends to the path (truncating) and returns the old length for path_pop. */
static size_t path_push(decoder_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t path_push(decoder_t *d, const char *fmt, ...)
{
    size_t old = d->path_len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(d->path + old, sizeof(d->path) - old, fmt, ap);
    va_end(ap);
    if (n > 0)
        d->path_len = old + (size_t)n < sizeof(d->path) ? old + (size_t)n : sizeof(d->path) - 1;
    return old;
}

static void path_pop(decoder_t *d, size_t old)
{
    d->path_len = old;
    d->path[old] = '\0';
}

static int fail(decoder_t *d, const char *what)
{
    tide_errprintf(d->err, "%s: %s", d->path_len ? d->path : "(top level)", what);
    return -EINVAL;
}

/* An integer from a JSON number (integral, within 2^53 so the double was exact) or a decimal string. */
static int get_int(decoder_t *d, const cJSON *j, bool is_unsigned, int64_t *s_out, uint64_t *u_out)
{
    if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        if (!isfinite(v) || floor(v) != v)
            return fail(d, "expected an integer");
        if (fabs(v) >= 9007199254740992.0) /* 2^53 + 1 already reads as 2^53 */
            return fail(d, "integer of 2^53 or more must be given as a string");
        if (is_unsigned) {
            if (v < 0)
                return fail(d, "expected a non-negative integer");
            *u_out = (uint64_t)v;
        } else {
            *s_out = (int64_t)v;
        }
        return 0;
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring;
        char *end;
        if (!*s || !((*s >= '0' && *s <= '9') || (*s == '-' && !is_unsigned)))
            return fail(d, "expected an integer");
        errno = 0;
        if (is_unsigned)
            *u_out = strtoull(s, &end, 10);
        else
            *s_out = strtoll(s, &end, 10);
        if (*end)
            return fail(d, "expected an integer");
        if (errno == ERANGE)
            return fail(d, "integer out of range");
        return 0;
    }
    return fail(d, "expected an integer");
}

static int get_double(decoder_t *d, const cJSON *j, double *out)
{
    if (cJSON_IsNumber(j)) {
        *out = j->valuedouble;
        return 0;
    }
    /* A raw item holds number text: tide_pbjson_encode writes floats that way. */
    if (cJSON_IsString(j) || (cJSON_IsRaw(j) && j->valuestring)) {
        const char *s = j->valuestring;
        char *end;
        if (cJSON_IsRaw(j) && (strcmp(s, "NaN") == 0 || strcmp(s, "Infinity") == 0 || strcmp(s, "-Infinity") == 0))
            return fail(d, "expected a number");
        if (strcmp(s, "NaN") == 0)
            *out = NAN;
        else if (strcmp(s, "Infinity") == 0)
            *out = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
            *out = -INFINITY;
        else {
            /* strtod alone would take "inf", "0x10" and leading blanks, which JSON numbers never are. */
            if (!*s || !(*s == '-' || (*s >= '0' && *s <= '9')) || strpbrk(s, "xXiInN"))
                return fail(d, "expected a number");
            *out = strtod(s, &end);
            if (*end)
                return fail(d, "expected a number");
        }
        return 0;
    }
    return fail(d, "expected a number");
}

static int decode_message_into(decoder_t *d, const cJSON *obj, ProtobufCMessage *msg);

/* proto3 strings are UTF-8: a peer's runtime refuses a message holding anything else. */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), step;

    for (size_t i = 0; i < n; i += step) {
        if ((step = tide__pbjson_utf8_seq(p + i, n - i)) == 0)
            return false;
    }
    return true;
}

static ProtobufCMessage *new_message(const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = tide_xcalloc(1, desc->sizeof_message);
    protobuf_c_message_init(desc, m);
    return m;
}

/* Decodes one value of field f into p, which holds the type's zero value (or the default). */
static int decode_value(decoder_t *d, const ProtobufCFieldDescriptor *f, const cJSON *j, void *p)
{
    int64_t s = 0;
    uint64_t u = 0;
    double v;
    int rc;

    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if ((rc = get_int(d, j, false, &s, &u)) < 0)
            return rc;
        if (s < INT32_MIN || s > INT32_MAX)
            return fail(d, "integer out of range");
        *(int32_t *)p = (int32_t)s;
        return 0;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if ((rc = get_int(d, j, true, &s, &u)) < 0)
            return rc;
        if (u > UINT32_MAX)
            return fail(d, "integer out of range");
        *(uint32_t *)p = (uint32_t)u;
        return 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if ((rc = get_int(d, j, false, &s, &u)) < 0)
            return rc;
        *(int64_t *)p = s;
        return 0;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if ((rc = get_int(d, j, true, &s, &u)) < 0)
            return rc;
        *(uint64_t *)p = u;
        return 0;
    case PROTOBUF_C_TYPE_FLOAT:
        if ((rc = get_double(d, j, &v)) < 0)
            return rc;
        /* Out of range is what rounds to infinity: the shortest text of FLT_MAX reads as a double
         * slightly above FLT_MAX. */
        if (isfinite(v) && isinf((float)v))
            return fail(d, "number out of range for a float");
        *(float *)p = (float)v;
        return 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        if ((rc = get_double(d, j, &v)) < 0)
            return rc;
        *(double *)p = v;
        return 0;
    case PROTOBUF_C_TYPE_BOOL:
        if (!cJSON_IsBool(j))
            return fail(d, "expected true or false");
        *(protobuf_c_boolean *)p = cJSON_IsTrue(j);
        return 0;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        if (cJSON_IsString(j)) {
            const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value_by_name(ed, j->valuestring);
            if (!ev) {
                char what[160];
                snprintf(what, sizeof(what), "unknown value \"%.60s\" of %s", j->valuestring, ed->name);
                return fail(d, what);
            }
            *(int *)p = ev->value;
            return 0;
        }
        if ((rc = get_int(d, j, false, &s, &u)) < 0)
            return fail(d, "expected an enum name or number");
        if (s < INT32_MIN || s > INT32_MAX)
            return fail(d, "integer out of range");
        *(int *)p = (int)s;
        return 0;
    }
    case PROTOBUF_C_TYPE_STRING:
        if (!cJSON_IsString(j))
            return fail(d, "expected a string");
        if (!utf8_valid(j->valuestring))
            return fail(d, "string is not valid UTF-8");
        *(char **)p = tide_xstrdup(j->valuestring);
        return 0;
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *b = p;
        unsigned char *data;
        size_t len;
        if (!cJSON_IsString(j))
            return fail(d, "expected a base64 string");
        if (tide_base64_decode(j->valuestring, strlen(j->valuestring), &data, &len) < 0)
            return fail(d, "invalid base64");
        b->data = data;
        b->len = len;
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage *m;
        if (!cJSON_IsObject(j))
            return fail(d, "expected an object");
        m = new_message(f->descriptor);
        *(ProtobufCMessage **)p = m; /* owned by the parent from here, also on failure */
        return decode_message_into(d, j, m);
    }
    }
    return fail(d, "unsupported field type");
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* JSON object keys of a map as the key field's type. */
static int decode_map_key(decoder_t *d, const ProtobufCFieldDescriptor *kf, const char *key, void *p)
{
    cJSON tmp;

    if (kf->type == PROTOBUF_C_TYPE_STRING) {
        if (!utf8_valid(key))
            return fail(d, "map key is not valid UTF-8");
        *(char **)p = tide_xstrdup(key);
        return 0;
    }
    if (kf->type == PROTOBUF_C_TYPE_BOOL) {
        if (strcmp(key, "true") != 0 && strcmp(key, "false") != 0)
            return fail(d, "map key must be \"true\" or \"false\"");
        *(protobuf_c_boolean *)p = strcmp(key, "true") == 0;
        return 0;
    }
    /* Integer keys: reuse the string path of the integer decoder. */
    memset(&tmp, 0, sizeof(tmp));
    tmp.type = cJSON_String;
    tmp.valuestring = (char *)key;
    return decode_value(d, kf, &tmp, p);
}

/* Orders map entries by their key (field 0 of the entry, of the type arg describes), for qsort_r. */
static int key_cmp(const void *a, const void *b, void *arg)
{
    const ProtobufCFieldDescriptor *kf = arg;
    const char *pa = (const char *)*(ProtobufCMessage *const *)a + kf->offset;
    const char *pb = (const char *)*(ProtobufCMessage *const *)b + kf->offset;

    switch (kf->type) {
    case PROTOBUF_C_TYPE_STRING:
        return strcmp(*(char *const *)pa, *(char *const *)pb);
    case PROTOBUF_C_TYPE_BOOL:
        return (*(const protobuf_c_boolean *)pa > *(const protobuf_c_boolean *)pb) -
               (*(const protobuf_c_boolean *)pa < *(const protobuf_c_boolean *)pb);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return (*(const int64_t *)pa > *(const int64_t *)pb) - (*(const int64_t *)pa < *(const int64_t *)pb);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return (*(const uint64_t *)pa > *(const uint64_t *)pb) - (*(const uint64_t *)pa < *(const uint64_t *)pb);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return (*(const uint32_t *)pa > *(const uint32_t *)pb) - (*(const uint32_t *)pa < *(const uint32_t *)pb);
    default:
        return (*(const int32_t *)pa > *(const int32_t *)pb) - (*(const int32_t *)pa < *(const int32_t *)pb);
    }
}

/* A map holds each key once: JSON that names one twice ("A" and "A", or 1 and "01") is refused, as
 * protobuf's own JSON parsers do, rather than left to whichever copy a reader keeps. */
static int check_map_keys(decoder_t *d, const ProtobufCFieldDescriptor *f, ProtobufCMessage **entries, size_t n)
{
    const ProtobufCFieldDescriptor *kf = &((const ProtobufCMessageDescriptor *)f->descriptor)->fields[0];
    ProtobufCMessage **sorted;
    int rc = 0;

    if (n < 2)
        return 0;
    sorted = tide_xmalloc(n * sizeof(*sorted));
    memcpy(sorted, entries, n * sizeof(*sorted));
    qsort_r(sorted, n, sizeof(*sorted), key_cmp, (void *)kf);
    for (size_t i = 1; i < n && rc == 0; i++) {
        if (key_cmp(&sorted[i - 1], &sorted[i], (void *)kf) == 0)
            rc = fail(d, "map key given twice");
    }
    free(sorted);
    return rc;
}

static int decode_repeated(decoder_t *d, const ProtobufCMessageDescriptor *md, const ProtobufCFieldDescriptor *f,
                           const cJSON *j, ProtobufCMessage *msg)
{
    size_t n = 0, k = 0, esz = elem_size(f->type), old;
    const cJSON *it;
    char *arr;
    bool is_map = tide_pbjson_field_is_map(md, f);
    int rc = 0;

    if (is_map ? !cJSON_IsObject(j) : !cJSON_IsArray(j))
        return fail(d, is_map ? "expected an object" : "expected an array");
    cJSON_ArrayForEach(it, j)
        n++;
    if (n == 0)
        return 0;
    arr = tide_xcalloc(n, esz);
    TIDE__PB_MEMBER(void *, msg, f->offset) = arr;
    TIDE__PB_MEMBER(size_t, msg, f->quantifier_offset) = n;
    cJSON_ArrayForEach(it, j)
    {
        void *slot = arr + k * esz;
        if (is_map) {
            const ProtobufCMessageDescriptor *ed = f->descriptor;
            ProtobufCMessage *e = new_message(ed);
            *(ProtobufCMessage **)slot = e;
            old = path_push(d, "[\"%s\"]", it->string);
            rc = decode_map_key(d, &ed->fields[0], it->string, (char *)e + ed->fields[0].offset);
            if (rc == 0 && !cJSON_IsNull(it))
                rc = decode_value(d, &ed->fields[1], it, (char *)e + ed->fields[1].offset);
            else if (rc == 0 && ed->fields[1].type == PROTOBUF_C_TYPE_MESSAGE)
                rc = fail(d, "map value must not be null");
        } else {
            old = path_push(d, "[%zu]", k);
            if (cJSON_IsNull(it))
                rc = fail(d, "null is not allowed in a repeated field");
            else
                rc = decode_value(d, f, it, slot);
        }
        path_pop(d, old);
        if (rc < 0)
            return rc;
        k++;
    }
    return is_map ? check_map_keys(d, f, (ProtobufCMessage **)arr, n) : 0;
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *md, const char *key)
{
    char name[256];

    for (unsigned i = 0; i < md->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &md->fields[i];
        if (strcmp(f->name, key) == 0)
            return f;
        tide_pbjson_json_name(f->name, name, sizeof(name));
        if (strcmp(name, key) == 0)
            return f;
    }
    return NULL;
}

static int decode_message_into(decoder_t *d, const cJSON *obj, ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *md = msg->descriptor;
    unsigned char *seen = tide_xcalloc(md->n_fields ? md->n_fields : 1, 1);
    const cJSON *it;
    int rc = 0;

    cJSON_ArrayForEach(it, obj)
    {
        const ProtobufCFieldDescriptor *f = find_field(md, it->string);
        size_t old, idx;
        void *p;

        if (!f) {
            if (d->flags & TIDE_PBJSON_IGNORE_UNKNOWN)
                continue;
            old = path_push(d, "%s%s", d->path_len ? "." : "", it->string);
            rc = fail(d, "no such field");
            path_pop(d, old);
            goto done;
        }
        idx = (size_t)(f - md->fields);
        old = path_push(d, "%s%s", d->path_len ? "." : "", it->string);
        if (seen[idx]) {
            rc = fail(d, "field given twice");
            goto pop;
        }
        seen[idx] = 1;
        if (cJSON_IsNull(it))
            goto pop; /* null: the default, which the message already holds */
        p = (char *)msg + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            rc = decode_repeated(d, md, f, it, msg);
            goto pop;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t *oneof_case = &TIDE__PB_MEMBER(uint32_t, msg, f->quantifier_offset);
            if (*oneof_case != 0) {
                rc = fail(d, "another member of the same oneof is already set");
                goto pop;
            }
            /* Members share storage: clear the union before filling it, and mark the case only
             * after, so a failure leaves a pointer the free routine understands. */
            if (f->type == PROTOBUF_C_TYPE_STRING)
                *(char **)p = NULL;
            rc = decode_value(d, f, it, p);
            *oneof_case = f->id;
            goto pop;
        }
        if (f->type == PROTOBUF_C_TYPE_STRING)
            *(const char **)p = NULL; /* replaces the shared default ("") which is never freed */
        rc = decode_value(d, f, it, p);
        if (f->type == PROTOBUF_C_TYPE_STRING && *(char **)p == NULL)
            *(const char **)p = f->default_value;
        if (rc == 0 && f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            TIDE__PB_MEMBER(protobuf_c_boolean, msg, f->quantifier_offset) = 1;
    pop:
        path_pop(d, old);
        if (rc < 0)
            goto done;
    }
done:
    free(seen);
    return rc;
}

int tide_pbjson_decode(const cJSON *json, const ProtobufCMessageDescriptor *desc, unsigned flags,
                       ProtobufCMessage **out, tide_error_t *err)
{
    decoder_t d = {.flags = flags, .err = err};
    ProtobufCMessage *msg;
    int rc;

    if (!cJSON_IsObject(json))
        return fail(&d, "expected a JSON object");
    msg = new_message(desc);
    rc = decode_message_into(&d, json, msg);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return rc;
    }
    *out = msg;
    return 0;
}

int tide_pbjson_parse(const char *text, size_t len, const ProtobufCMessageDescriptor *desc,
                      unsigned flags, ProtobufCMessage **out, tide_error_t *err)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    int rc;

    if (!j) {
        tide_errprintf(err, "invalid JSON at byte %zu", end && end >= text ? (size_t)(end - text) : (size_t)0);
        return -EINVAL;
    }
    /* Only blanks may follow the document. */
    for (const char *p = end; p && p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            tide_errprintf(err, "invalid JSON at byte %zu: trailing data", (size_t)(p - text));
            cJSON_Delete(j);
            return -EINVAL;
        }
    }
    rc = tide_pbjson_decode(j, desc, flags, out, err);
    cJSON_Delete(j);
    return rc;
}
