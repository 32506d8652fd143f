/* -o json output: one indented JSON document for a unary response, one compact line per message for
 * streams. Values follow the proto3 JSON mapping (tide_pbjson). */
#ifndef TIDE_CLI_OUTPUT_H
#define TIDE_CLI_OUTPUT_H

#include <stdio.h>

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

#include "buf.h"

/* Appends j as JSON indented by two spaces per level (as Python's json.dumps(indent=2)), no final
 * newline. */
void tide_cli_json_pretty(const cJSON *j, tide_buf_t *out);

/* Writes msg (borrowed) to f as an indented document plus a newline. */
void tide_cli_print_json(FILE *f, const ProtobufCMessage *msg);

/* Writes msg to f as one compact line and flushes f (streams are read line by line as they come). */
void tide_cli_print_json_line(FILE *f, const ProtobufCMessage *msg);

#endif
