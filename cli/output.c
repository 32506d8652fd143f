/* JSON output of tidectl (see output.h). Leaves are printed by cJSON itself, so escaping and the
 * exact float text chosen by tide_pbjson are kept; only the layout is ours. */
#include "output.h"

#include <stdlib.h>
#include <string.h>

#include "pbjson.h"

static void indent(tide_buf_t *out, int depth)
{
    tide_buf_append(out, "\n", 1);
    for (int i = 0; i < depth; i++)
        tide_buf_append(out, "  ", 2);
}

static void leaf(const cJSON *j, tide_buf_t *out)
{
    /* cJSON prints an item with its siblings unless it is detached: print a detached copy. */
    cJSON *copy = cJSON_Duplicate(j, 0);
    char *s = copy ? cJSON_PrintUnformatted(copy) : NULL;

    if (!s) {
        fprintf(stderr, "tidectl: out of memory\n");
        abort();
    }
    tide_buf_append_str(out, s);
    free(s);
    cJSON_Delete(copy);
}

static void pretty(const cJSON *j, tide_buf_t *out, int depth)
{
    const cJSON *it;
    bool obj = cJSON_IsObject(j);

    if (!obj && !cJSON_IsArray(j)) {
        leaf(j, out);
        return;
    }
    if (!j->child) {
        tide_buf_append_str(out, obj ? "{}" : "[]");
        return;
    }
    tide_buf_append_str(out, obj ? "{" : "[");
    cJSON_ArrayForEach(it, j)
    {
        indent(out, depth + 1);
        if (obj) {
            cJSON *key = cJSON_CreateString(it->string);
            leaf(key, out);
            cJSON_Delete(key);
            tide_buf_append_str(out, ": ");
        }
        pretty(it, out, depth + 1);
        if (it->next)
            tide_buf_append(out, ",", 1);
    }
    indent(out, depth);
    tide_buf_append_str(out, obj ? "}" : "]");
}

void tide_cli_json_pretty(const cJSON *j, tide_buf_t *out)
{
    pretty(j, out, 0);
}

void tide_cli_print_json(FILE *f, const ProtobufCMessage *msg)
{
    cJSON *j = tide_pbjson_encode(msg, 0);
    tide_buf_t b = TIDE_BUF_INIT;

    tide_cli_json_pretty(j, &b);
    tide_buf_append(&b, "\n", 1);
    fwrite(b.data, 1, b.len, f);
    tide_buf_free(&b);
    cJSON_Delete(j);
}

void tide_cli_print_json_line(FILE *f, const ProtobufCMessage *msg)
{
    char *s = tide_pbjson_print(msg, 0);

    fprintf(f, "%s\n", s);
    fflush(f);
    free(s);
}
