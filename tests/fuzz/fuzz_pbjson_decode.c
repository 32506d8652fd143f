/* libFuzzer target for common/pbjson's JSON -> protobuf decoder (tidectl reads job spec files with
 * it): the input is JSON text decoded as a tide.v1.JobSpec or tide.v1.Job. Checks the decoder's
 * promises: on failure -EINVAL, an error text and nothing allocated (LeakSanitizer); on success a
 * message that packs, unpacks and packs to the same bytes, and whose JSON (tide_pbjson_encode, with
 * the flags the selector picks) decodes to a message that packs to those bytes again, also from its
 * printed text (tide_pbjson_print).
 *
 * Input: [selector][JSON text]. Selector bit 0: Job instead of JobSpec; bit 1: IGNORE_UNKNOWN when
 * decoding; bits 2-3: EMIT_DEFAULTS and PROTO_NAMES when encoding again; bit 4: decode through
 * tide_pbjson_decode of a tree parsed here instead of tide_pbjson_parse. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pbjson.h"
#include "tide/v1/types.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    uint8_t *buf;

    *len = protobuf_c_message_get_packed_size(m);
    buf = malloc(*len ? *len : 1);
    if (protobuf_c_message_pack(m, buf) != *len)
        abort();
    return buf;
}

static void same_bytes(const ProtobufCMessage *m, const uint8_t *want, size_t want_len)
{
    size_t len;
    uint8_t *got = pack(m, &len);

    if (len != want_len || memcmp(got, want, len) != 0)
        abort();
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *desc;
    ProtobufCMessage *m = (ProtobufCMessage *)&desc, *m2 = NULL, *m3 = NULL;
    tide_error_t err = {{0}};
    unsigned dflags, eflags;
    uint8_t *bytes;
    size_t len;
    cJSON *tree;
    char *text;
    int rc;

    if (size < 1)
        return 0;
    desc = (data[0] & 1) ? &tide__v1__job__descriptor : &tide__v1__job_spec__descriptor;
    dflags = (data[0] & 2) ? TIDE_PBJSON_IGNORE_UNKNOWN : 0;
    eflags = ((data[0] & 4) ? TIDE_PBJSON_EMIT_DEFAULTS : 0) | ((data[0] & 8) ? TIDE_PBJSON_PROTO_NAMES : 0);
    if (data[0] & 0x10) {
        cJSON *j = cJSON_ParseWithLength((const char *)data + 1, size - 1);

        if (!j)
            return 0;
        rc = tide_pbjson_decode(j, desc, dflags, &m, &err);
        cJSON_Delete(j);
    } else {
        rc = tide_pbjson_parse((const char *)data + 1, size - 1, desc, dflags, &m, &err);
    }
    if (rc < 0) {
        /* *out untouched, an error text */
        if (rc != -EINVAL || m != (ProtobufCMessage *)&desc || !err.text[0])
            abort();
        return 0;
    }
    if (rc != 0 || !m || m->descriptor != desc || !protobuf_c_message_check(m))
        abort();
    bytes = pack(m, &len);

    /* the wire form reads back to the same bytes */
    m2 = protobuf_c_message_unpack(desc, NULL, len, bytes);
    if (!m2)
        abort();
    same_bytes(m2, bytes, len);
    protobuf_c_message_free_unpacked(m2, NULL);

    /* JSON out and in again: the same message */
    tree = tide_pbjson_encode(m, eflags);
    if (tide_pbjson_decode(tree, desc, 0, &m2, &err) != 0)
        abort();
    same_bytes(m2, bytes, len);
    text = tide_pbjson_print(m2, eflags);
    if (tide_pbjson_parse(text, strlen(text), desc, 0, &m3, &err) != 0)
        abort();
    same_bytes(m3, bytes, len);

    free(text);
    cJSON_Delete(tree);
    protobuf_c_message_free_unpacked(m3, NULL);
    protobuf_c_message_free_unpacked(m2, NULL);
    protobuf_c_message_free_unpacked(m, NULL);
    free(bytes);
    return 0;
}
