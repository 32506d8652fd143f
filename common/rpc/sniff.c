/* Connection sniffing (see sniff.h). The preface wins while the bytes are a prefix of it ("PRI "
 * would otherwise look like an HTTP/1 method); a decision is final once returned. */
#include "sniff.h"

#include <string.h>

tide_sniff_t tide_sniff(const uint8_t *data, size_t len)
{
    size_t n = len < TIDE_H2_PREFACE_LEN ? len : TIDE_H2_PREFACE_LEN;
    size_t i;

    if (len == 0)
        return TIDE_SNIFF_NEED_MORE;
    if (memcmp(data, TIDE_H2_PREFACE, n) == 0)
        return len >= TIDE_H2_PREFACE_LEN ? TIDE_SNIFF_HTTP2 : TIDE_SNIFF_NEED_MORE;
    for (i = 0; i < len && i <= TIDE_SNIFF_MAX_METHOD; i++) {
        uint8_t c = data[i];
        if (c == ' ')
            return i > 0 ? TIDE_SNIFF_HTTP1 : TIDE_SNIFF_GARBAGE;
        if (!((c >= 'A' && c <= 'Z') || c == '-' || c == '_'))
            return TIDE_SNIFF_GARBAGE;
    }
    return i > TIDE_SNIFF_MAX_METHOD ? TIDE_SNIFF_GARBAGE : TIDE_SNIFF_NEED_MORE;
}
