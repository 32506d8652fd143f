/* Protobuf-c messages <-> JSON (cJSON trees) following the proto3 JSON mapping ("ProtoJSON format"):
 * lowerCamelCase names as protoc derives json_name, 64-bit integers as decimal strings, enums by name,
 * bytes as base64, maps as objects, fields equal to their default omitted. Works from the message
 * descriptor alone, so it handles every generated message. */
#ifndef TIDE_PBJSON_H
#define TIDE_PBJSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

#include "error.h"

typedef enum tide_pbjson_flags {
    TIDE_PBJSON_DEFAULT = 0,
    /* Encode: also print scalars, repeated fields and maps equal to their default (0, "", false, [],
     * {}). Unset message fields and unset oneof members stay omitted, as in protoc's option. */
    TIDE_PBJSON_EMIT_DEFAULTS = 1 << 0,
    /* Encode: use the .proto field names ("min_workers") instead of lowerCamelCase. */
    TIDE_PBJSON_PROTO_NAMES = 1 << 1,
    /* Decode: skip object keys that name no field instead of failing. */
    TIDE_PBJSON_IGNORE_UNKNOWN = 1 << 2,
} tide_pbjson_flags_t;

/* Converts msg (borrowed) to a new cJSON object. Strings that are not valid UTF-8 are repaired with
 * U+FFFD. float and double values are cJSON_Raw items holding the shortest text that reads back to the
 * same value (cJSON's number printer rounds). Never NULL (out of memory aborts); caller frees with
 * cJSON_Delete. */
cJSON *tide_pbjson_encode(const ProtobufCMessage *msg, unsigned flags);

/* tide_pbjson_encode printed as one compact line of JSON. Caller frees with free(). */
char *tide_pbjson_print(const ProtobufCMessage *msg, unsigned flags);

/* Builds a new message of type desc from json (borrowed). Accepts json_name and .proto names,
 * integers as numbers or strings (64-bit ones beyond 2^53 only as strings), enums by name or number,
 * "NaN"/"Infinity"/"-Infinity", standard or URL-safe base64 with or without padding, null as "default",
 * and the raw number items tide_pbjson_encode writes for floats. Refuses strings that are not valid
 * UTF-8 and a map key given twice. Returns 0 and *out (caller frees with protobuf_c_message_free_unpacked(*out, NULL)), or -EINVAL with
 * err naming the field path ("spec.minWorkers: expected an integer") and nothing allocated. */
int tide_pbjson_decode(const cJSON *json, const ProtobufCMessageDescriptor *desc, unsigned flags,
                       ProtobufCMessage **out, tide_error_t *err);

/* tide_pbjson_decode from text (len bytes, need not be NUL-terminated). Same return convention; a
 * syntax error is -EINVAL with the byte offset in err. */
int tide_pbjson_parse(const char *text, size_t len, const ProtobufCMessageDescriptor *desc,
                      unsigned flags, ProtobufCMessage **out, tide_error_t *err);

/* protoc's json_name for a .proto field name: underscores dropped, the letter after each one upper-
 * cased ("min_workers" -> "minWorkers"). Writes at most size bytes including the NUL into out (which
 * may be NULL when size is 0) and returns the full length, as snprintf does. */
size_t tide_pbjson_json_name(const char *proto_name, char *out, size_t size);

/* True when field of parent is a map: protobuf-c keeps no map flag, so this checks what protoc
 * generates for `map<K, V> f`: a repeated field of a message nested in parent and named as protoc names
 * map entries ("env" -> "EnvEntry"), with exactly key = 1 and value = 2, key of a legal key type.
 * The one shape it cannot tell apart (the wire format cannot either): a hand-written nested message
 * named that way, with those two fields, used as a repeated field; it is then printed as an object. */
bool tide_pbjson_field_is_map(const ProtobufCMessageDescriptor *parent,
                              const ProtobufCFieldDescriptor *field);

#endif
