/* What protoc knows about a field but protobuf-c 1.4 descriptors do not keep: the json_name and whether a
 * repeated message field is a map. Both are re-derived with protoc's own rules, so they agree with
 * every other protobuf implementation for any .proto that protoc accepts. */
#include "pbjson.h"

#include <string.h>

size_t tide_pbjson_json_name(const char *proto_name, char *out, size_t size)
{
    size_t n = 0;
    bool upper = false;

    for (const char *p = proto_name; *p; p++) {
        char c = *p;
        if (c == '_') {
            upper = true;
            continue;
        }
        if (upper && c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        upper = false;
        if (n + 1 < size)
            out[n] = c;
        n++;
    }
    if (size > 0)
        out[n < size ? n : size - 1] = '\0';
    return n;
}

/* protoc's MapEntryName: "env" -> "EnvEntry", "gpu_labels" -> "GpuLabelsEntry". */
static bool is_entry_name(const char *field, const char *entry)
{
    bool cap = true;
    const char *e = entry;

    for (const char *p = field; *p; p++) {
        char c = *p;
        if (c == '_') {
            cap = true;
            continue;
        }
        if (cap && c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        cap = false;
        if (*e++ != c)
            return false;
    }
    return strcmp(e, "Entry") == 0;
}

static bool legal_key_type(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_ENUM:
    case PROTOBUF_C_TYPE_MESSAGE:
        return false;
    default:
        return true;
    }
}

bool tide_pbjson_field_is_map(const ProtobufCMessageDescriptor *parent,
                              const ProtobufCFieldDescriptor *field)
{
    const ProtobufCMessageDescriptor *entry = field->descriptor;
    size_t plen;

    if (field->label != PROTOBUF_C_LABEL_REPEATED || field->type != PROTOBUF_C_TYPE_MESSAGE || !entry)
        return false;
    if (entry->n_fields != 2 || entry->fields[0].id != 1 || entry->fields[1].id != 2 ||
        strcmp(entry->fields[0].name, "key") != 0 || strcmp(entry->fields[1].name, "value") != 0 ||
        entry->fields[0].label == PROTOBUF_C_LABEL_REPEATED ||
        entry->fields[1].label == PROTOBUF_C_LABEL_REPEATED ||
        !legal_key_type(entry->fields[0].type))
        return false;
    if (!is_entry_name(field->name, entry->short_name))
        return false;
    /* Nested directly in parent: "tide.v1.JobSpec" + "." + "EnvEntry". */
    plen = strlen(parent->name);
    return strncmp(entry->name, parent->name, plen) == 0 && entry->name[plen] == '.' &&
           strcmp(entry->name + plen + 1, entry->short_name) == 0;
}
