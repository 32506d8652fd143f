/* Message -> cJSON by walking the descriptor (proto3 JSON mapping, see pbjson.h). The input message is
 * only read; every string that reaches the tree is valid UTF-8, so the printed JSON always is. */
#include "base64.h"
#include "pbjson.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbjson_private.h"
#include "xmalloc.h"

cJSON *tide__pbjson_check(cJSON *j)
{
    if (!j) {
        fprintf(stderr, "tide: out of memory building JSON\n");
        abort();
    }
    return j;
}

#define CK tide__pbjson_check

size_t tide__pbjson_utf8_seq(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        len = 2, cp = p[0] & 0x1F;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        len = 3, cp = p[0] & 0x0F;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        len = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* A JSON string for s: as is when valid UTF-8, else with each bad byte replaced by U+FFFD. */
static cJSON *make_string(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, step;
    char *fixed, *o;
    cJSON *j;

    while (i < n && (step = tide__pbjson_utf8_seq(p + i, n - i)) > 0)
        i += step;
    if (i == n)
        return CK(cJSON_CreateString(s));
    fixed = o = tide_xmalloc(n * 3 + 1);
    for (i = 0; i < n;) {
        step = tide__pbjson_utf8_seq(p + i, n - i);
        if (step == 0) {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(o, p + i, step);
            o += step;
            i += step;
        }
    }
    *o = '\0';
    j = CK(cJSON_CreateString(fixed));
    free(fixed);
    return j;
}

/* Floats as the shortest decimal that reads back to the same value, as protoc's runtimes print them:
 * a float from 6 significant digits up (0.1f is 0.1, not the double nearest to it, 0.10000000149011612;
 * FLT_MIN's neighbour 1e-45f is 1.4013e-45 as C++ and Python print it), a double from 1 digit up.
 * cJSON's own number printer accepts 15 digits when they are merely within an epsilon, so the text goes
 * in as a raw item. */
static cJSON *make_float(double v, bool single)
{
    char buf[40];

    if (isnan(v))
        return CK(cJSON_CreateString("NaN"));
    if (isinf(v))
        return CK(cJSON_CreateString(v > 0 ? "Infinity" : "-Infinity"));
    for (int prec = single ? 6 : 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    return CK(cJSON_CreateRaw(buf));
}

static cJSON *make_int64(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return CK(cJSON_CreateString(buf));
}

static cJSON *make_uint64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return CK(cJSON_CreateString(buf));
}

static cJSON *encode_message(const ProtobufCMessage *msg, unsigned flags);

/* One value of field f stored at p (a member, or an element of a repeated array). */
static cJSON *encode_value(const ProtobufCFieldDescriptor *f, const void *p, unsigned flags)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return CK(cJSON_CreateNumber(*(const int32_t *)p));
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return CK(cJSON_CreateNumber(*(const uint32_t *)p));
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return make_int64(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return make_uint64(*(const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return make_float(*(const float *)p, true);
    case PROTOBUF_C_TYPE_DOUBLE:
        return make_float(*(const double *)p, false);
    case PROTOBUF_C_TYPE_BOOL:
        return CK(cJSON_CreateBool(*(const protobuf_c_boolean *)p));
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        return ev ? CK(cJSON_CreateString(ev->name)) : CK(cJSON_CreateNumber(v));
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return make_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        char *text = tide_base64_encode(b->data, b->data ? b->len : 0);
        cJSON *j = CK(cJSON_CreateString(text));
        free(text);
        return j;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        return m ? encode_message(m, flags) : CK(cJSON_CreateObject());
    }
    }
    return CK(cJSON_CreateNull());
}

/* A map key as JSON object keys are written: the decimal, "true"/"false", or the string. */
static char *map_key(const ProtobufCFieldDescriptor *kf, const void *p)
{
    switch (kf->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return tide_xasprintf("%" PRId32, *(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return tide_xasprintf("%" PRIu32, *(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return tide_xasprintf("%" PRId64, *(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return tide_xasprintf("%" PRIu64, *(const uint64_t *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return tide_xstrdup(*(const protobuf_c_boolean *)p ? "true" : "false");
    default: {
        const char *s = *(char *const *)p;
        return tide_xstrdup(s ? s : "");
    }
    }
}

static cJSON *encode_map(const ProtobufCFieldDescriptor *f, size_t n, ProtobufCMessage *const *entries,
                         unsigned flags)
{
    const ProtobufCMessageDescriptor *ed = f->descriptor;
    const ProtobufCFieldDescriptor *kf = &ed->fields[0], *vf = &ed->fields[1];
    cJSON *obj = CK(cJSON_CreateObject());

    for (size_t i = 0; i < n; i++) {
        const ProtobufCMessage *e = entries[i];
        char *key;
        cJSON *val, *fixed_key;

        if (!e)
            continue;
        key = map_key(kf, (const char *)e + kf->offset);
        /* The key must be valid UTF-8 too: repair it the same way as values. */
        fixed_key = make_string(key);
        val = encode_value(vf, (const char *)e + vf->offset, flags);
        /* On the wire a later entry with the same key wins. */
        if (cJSON_GetObjectItemCaseSensitive(obj, fixed_key->valuestring))
            cJSON_ReplaceItemInObjectCaseSensitive(obj, fixed_key->valuestring, val);
        else
            cJSON_AddItemToObject(obj, fixed_key->valuestring, val);
        cJSON_Delete(fixed_key);
        free(key);
    }
    return obj;
}

static bool is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return *(const uint32_t *)p == 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return *(const uint64_t *)p == 0;
    /* By value, as protobuf-c decides what to pack: -0.0 is the default and is not sent either. */
    case PROTOBUF_C_TYPE_FLOAT:
        return *(const float *)p == 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return *(const double *)p == 0;
    case PROTOBUF_C_TYPE_BOOL:
        return !*(const protobuf_c_boolean *)p;
    case PROTOBUF_C_TYPE_ENUM:
        return *(const int *)p == 0;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return !s || !*s;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(ProtobufCMessage *const *)p == NULL;
    }
    return true;
}

/* Whether a singular field is present, and whether to print it. */
static bool should_emit(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f, const void *p,
                        unsigned flags)
{
    bool emit_defaults = flags & TIDE_PBJSON_EMIT_DEFAULTS;

    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return TIDE__PB_MEMBER(uint32_t, msg, f->quantifier_offset) == f->id;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(ProtobufCMessage *const *)p != NULL;
    switch (f->label) {
    case PROTOBUF_C_LABEL_REQUIRED:
        return true;
    case PROTOBUF_C_LABEL_OPTIONAL:
        /* proto2: a has_ flag, or for strings a pointer other than NULL and the default. */
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            const char *s = *(char *const *)p;
            return (s && s != f->default_value) || emit_defaults;
        }
        return TIDE__PB_MEMBER(protobuf_c_boolean, msg, f->quantifier_offset) || emit_defaults;
    default:
        return emit_defaults || !is_default(f, p);
    }
}

static cJSON *encode_message(const ProtobufCMessage *msg, unsigned flags)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    cJSON *obj = CK(cJSON_CreateObject());
    char name[256];

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = (const char *)msg + f->offset;
        cJSON *val;

        if (flags & TIDE_PBJSON_PROTO_NAMES)
            snprintf(name, sizeof(name), "%s", f->name);
        else
            tide_pbjson_json_name(f->name, name, sizeof(name));

        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = TIDE__PB_MEMBER(size_t, msg, f->quantifier_offset);
            const char *arr = *(const char *const *)p;
            size_t elem = 0;

            if (n == 0 && !(flags & TIDE_PBJSON_EMIT_DEFAULTS))
                continue;
            if (tide_pbjson_field_is_map(d, f)) {
                val = encode_map(f, arr ? n : 0, (ProtobufCMessage *const *)arr, flags);
                cJSON_AddItemToObject(obj, name, val);
                continue;
            }
            switch (f->type) {
            case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
            case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
                elem = 8;
                break;
            case PROTOBUF_C_TYPE_BOOL:
                elem = sizeof(protobuf_c_boolean);
                break;
            case PROTOBUF_C_TYPE_ENUM:
                elem = sizeof(int);
                break;
            case PROTOBUF_C_TYPE_STRING:
            case PROTOBUF_C_TYPE_MESSAGE:
                elem = sizeof(void *);
                break;
            case PROTOBUF_C_TYPE_BYTES:
                elem = sizeof(ProtobufCBinaryData);
                break;
            default:
                elem = 4;
                break;
            }
            val = CK(cJSON_CreateArray());
            for (size_t k = 0; arr && k < n; k++)
                cJSON_AddItemToArray(val, encode_value(f, arr + k * elem, flags));
            cJSON_AddItemToObject(obj, name, val);
            continue;
        }
        if (!should_emit(msg, f, p, flags))
            continue;
        cJSON_AddItemToObject(obj, name, encode_value(f, p, flags));
    }
    return obj;
}

cJSON *tide_pbjson_encode(const ProtobufCMessage *msg, unsigned flags)
{
    return encode_message(msg, flags);
}

char *tide_pbjson_print(const ProtobufCMessage *msg, unsigned flags)
{
    cJSON *j = encode_message(msg, flags);
    char *s = cJSON_PrintUnformatted(j);

    cJSON_Delete(j);
    if (!s) {
        fprintf(stderr, "tide: out of memory printing JSON\n");
        abort();
    }
    return s;
}
