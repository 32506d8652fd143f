/* The users file parsed into an immutable table: identities by name and their tokens by SHA-256 digest
 * (uthash, O(1) per lookup). Parsing is strict — an unknown field, a duplicate name or token, a bad value is
 * an error naming its place — so a typo never silently widens what someone may do. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <openssl/sha.h>
#include <uthash.h>

#include "users.h"
#include "xmalloc.h"

typedef struct token_entry {
    uint8_t digest[SHA256_DIGEST_LENGTH];
    const tide_user_t *user;
    int64_t expires_ms; /* 0: never */
    bool revoked;
    UT_hash_handle hh;
} token_entry_t;

typedef struct user_entry {
    tide_user_t user;
    UT_hash_handle hh;
} user_entry_t;

struct tide_users {
    user_entry_t *by_name;
    token_entry_t *by_digest;
    size_t n;
};

static const char *const class_names[4] = {"LOW", "NORMAL", "HIGH", "CRITICAL"};

const char *tide_role_name(tide_role_t role)
{
    switch (role) {
    case TIDE_ROLE_ADMIN:
        return "admin";
    case TIDE_ROLE_USER:
        return "user";
    case TIDE_ROLE_WORKER:
        return "worker";
    case TIDE_ROLE_READ_ONLY:
        return "read-only";
    default:
        return "none";
    }
}

int tide_role_parse(const char *s, tide_role_t *out)
{
    if (!s)
        return -EINVAL;
    if (!strcmp(s, "admin"))
        *out = TIDE_ROLE_ADMIN;
    else if (!strcmp(s, "user"))
        *out = TIDE_ROLE_USER;
    else if (!strcmp(s, "worker"))
        *out = TIDE_ROLE_WORKER;
    else if (!strcmp(s, "read-only") || !strcmp(s, "readonly"))
        *out = TIDE_ROLE_READ_ONLY;
    else
        return -EINVAL;
    return 0;
}

void tide_token_digest_hex(const char *token, char out[65])
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    static const char hex[] = "0123456789abcdef";

    SHA256((const unsigned char *)token, strlen(token), d);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}

bool tide_user_name_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > TIDE_USER_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._@-", s[i]))
            return false;
    return true;
}

static int hex_digest(const char *s, uint8_t out[SHA256_DIGEST_LENGTH])
{
    if (strlen(s) != 2 * SHA256_DIGEST_LENGTH)
        return -EINVAL;
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = (char)tolower((unsigned char)s[2 * i + k]);
            int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (x < 0)
                return -EINVAL;
            v = v * 16 + x;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

/* "2027-01-31T00:00:00Z" (UTC only) into Unix ms. */
static int parse_time(const char *s, int64_t *ms)
{
    struct tm tm;
    const char *end;

    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || strcmp(end, "Z") != 0)
        return -EINVAL;
    *ms = (int64_t)timegm(&tm) * 1000;
    return 0;
}

static void user_free(tide_user_t *u)
{
    free(u->name);
    free(u->unix_user);
    for (size_t i = 0; i < u->n_pools; i++)
        free(u->pools[i].name);
    free(u->pools);
}

void tide_users_free(tide_users_t *u)
{
    user_entry_t *e, *etmp;
    token_entry_t *t, *ttmp;

    if (!u)
        return;
    HASH_ITER(hh, u->by_digest, t, ttmp)
    {
        HASH_DEL(u->by_digest, t);
        free(t);
    }
    HASH_ITER(hh, u->by_name, e, etmp)
    {
        HASH_DEL(u->by_name, e);
        user_free(&e->user);
        free(e);
    }
    free(u);
}

size_t tide_users_count(const tide_users_t *u)
{
    return u ? u->n : 0;
}

static bool known_key(const char *key, const char *const *keys)
{
    for (; *keys; keys++)
        if (!strcmp(key, *keys))
            return true;
    return false;
}

/* A non-negative integer field (absent: dflt). */
static int int_field(const cJSON *obj, const char *key, int32_t dflt, int32_t *out, const char *where,
                     tide_error_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    *out = dflt;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
        v->valuedouble != (double)(int64_t)v->valuedouble) {
        tide_errprintf(err, "%s.%s: must be a whole number >= 0", where, key);
        return -EINVAL;
    }
    *out = (int32_t)v->valuedouble;
    return 0;
}

static int parse_pools(const cJSON *arr, tide_user_t *u, const char *where, tide_error_t *err)
{
    static const char *const keys[] = {"name", "max_gpus", NULL};
    size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
    const cJSON *p;

    if (!cJSON_IsArray(arr)) {
        tide_errprintf(err, "%s.pools: must be a list of pool names or {\"name\", \"max_gpus\"} objects", where);
        return -EINVAL;
    }
    u->pools = tide_xcalloc(n + 1, sizeof(*u->pools));
    cJSON_ArrayForEach(p, arr)
    {
        const char *name = NULL;
        int32_t max = -1;
        if (cJSON_IsString(p)) {
            name = p->valuestring;
        } else if (cJSON_IsObject(p)) {
            const cJSON *f;
            char w[128];
            cJSON_ArrayForEach(f, p) if (!known_key(f->string, keys))
            {
                tide_errprintf(err, "%s.pools[%zu]: unknown field \"%.40s\"", where, i, f->string);
                return -EINVAL;
            }
            f = cJSON_GetObjectItemCaseSensitive(p, "name");
            name = cJSON_IsString(f) ? f->valuestring : NULL;
            snprintf(w, sizeof(w), "%s.pools[%zu]", where, i);
            if (int_field(p, "max_gpus", -1, &max, w, err) < 0)
                return -EINVAL;
        }
        if (!name || !name[0] || strlen(name) > 63) {
            tide_errprintf(err, "%s.pools[%zu]: must be a pool name (1-63 characters)", where, i);
            return -EINVAL;
        }
        for (size_t k = 0; k < u->n_pools; k++)
            if (!strcmp(u->pools[k].name, name)) {
                tide_errprintf(err, "%s.pools[%zu]: pool \"%s\" is listed twice", where, i, name);
                return -EINVAL;
            }
        u->pools[u->n_pools].name = tide_xstrdup(name);
        u->pools[u->n_pools].max_gpus = max;
        u->n_pools++;
        i++;
    }
    if (n == 0) {
        tide_errprintf(err, "%s.pools: must not be empty (leave it out for any pool)", where);
        return -EINVAL;
    }
    return 0;
}

static int parse_classes(const cJSON *arr, tide_user_t *u, const char *where, tide_error_t *err)
{
    const cJSON *c;
    size_t i = 0;

    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        tide_errprintf(err, "%s.priority_classes: must be a non-empty list of LOW, NORMAL, HIGH, CRITICAL", where);
        return -EINVAL;
    }
    u->classes = 0;
    cJSON_ArrayForEach(c, arr)
    {
        int k;
        for (k = 0; k < 4; k++)
            if (cJSON_IsString(c) && !strcasecmp(c->valuestring, class_names[k]))
                break;
        if (k == 4) {
            tide_errprintf(err, "%s.priority_classes[%zu]: must be LOW, NORMAL, HIGH or CRITICAL", where, i);
            return -EINVAL;
        }
        u->classes |= 1u << k;
        i++;
    }
    return 0;
}

static int parse_tokens(tide_users_t *t, const cJSON *arr, const tide_user_t *u, const char *where,
                        tide_error_t *err)
{
    static const char *const keys[] = {"sha256", "expires", "revoked", "comment", NULL};
    const cJSON *tok;
    size_t i = 0;

    if (!cJSON_IsArray(arr)) {
        tide_errprintf(err, "%s.tokens: must be a list of {\"sha256\": ...} objects", where);
        return -EINVAL;
    }
    cJSON_ArrayForEach(tok, arr)
    {
        const cJSON *f;
        token_entry_t *e, *dup = NULL;
        if (!cJSON_IsObject(tok)) {
            tide_errprintf(err, "%s.tokens[%zu]: must be an object with \"sha256\"", where, i);
            return -EINVAL;
        }
        cJSON_ArrayForEach(f, tok) if (!known_key(f->string, keys))
        {
            tide_errprintf(err, "%s.tokens[%zu]: unknown field \"%.40s\"", where, i, f->string);
            return -EINVAL;
        }
        e = tide_xcalloc(1, sizeof(*e));
        e->user = u;
        f = cJSON_GetObjectItemCaseSensitive(tok, "sha256");
        if (!cJSON_IsString(f) || hex_digest(f->valuestring, e->digest) < 0) {
            free(e);
            tide_errprintf(err, "%s.tokens[%zu].sha256: must be 64 hex digits (tidectl token create prints it)",
                           where, i);
            return -EINVAL;
        }
        f = cJSON_GetObjectItemCaseSensitive(tok, "expires");
        if (f && (!cJSON_IsString(f) || parse_time(f->valuestring, &e->expires_ms) < 0)) {
            free(e);
            tide_errprintf(err, "%s.tokens[%zu].expires: must be a UTC time like \"2027-01-31T00:00:00Z\"", where, i);
            return -EINVAL;
        }
        f = cJSON_GetObjectItemCaseSensitive(tok, "revoked");
        if (f && !cJSON_IsBool(f)) {
            free(e);
            tide_errprintf(err, "%s.tokens[%zu].revoked: must be true or false", where, i);
            return -EINVAL;
        }
        e->revoked = f && cJSON_IsTrue(f);
        HASH_FIND(hh, t->by_digest, e->digest, sizeof(e->digest), dup);
        if (dup) {
            tide_errprintf(err, "%s.tokens[%zu]: the same token is already %s's", where, i, dup->user->name);
            free(e);
            return -EINVAL;
        }
        HASH_ADD(hh, t->by_digest, digest, sizeof(e->digest), e);
        i++;
    }
    return 0;
}

static int parse_user(tide_users_t *t, const cJSON *obj, size_t idx, tide_error_t *err)
{
    static const char *const keys[] = {"name",     "role",            "unix_user",  "tokens",  "pools",
                                       "max_gpus", "max_queued_jobs", "rate_limit", "comment", "priority_classes",
                                       NULL};
    user_entry_t *e = tide_xcalloc(1, sizeof(*e)), *dup = NULL;
    tide_user_t *u = &e->user;
    const cJSON *f;
    char where[96];
    int rc = -EINVAL;

    snprintf(where, sizeof(where), "users[%zu]", idx);
    u->classes = TIDE_USER_CLASSES_ALL;
    if (!cJSON_IsObject(obj)) {
        tide_errprintf(err, "%s: must be an object", where);
        goto fail;
    }
    cJSON_ArrayForEach(f, obj) if (!known_key(f->string, keys))
    {
        tide_errprintf(err, "%s: unknown field \"%.40s\"", where, f->string);
        goto fail;
    }
    f = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (!cJSON_IsString(f) || !tide_user_name_valid(f->valuestring)) {
        tide_errprintf(err, "%s.name: must be 1-%d letters, digits or ._@-", where, TIDE_USER_NAME_MAX);
        goto fail;
    }
    u->name = tide_xstrdup(f->valuestring);
    snprintf(where, sizeof(where), "users[%zu] (%s)", idx, u->name);
    HASH_FIND_STR(t->by_name, u->name, dup);
    if (dup || !strcmp(u->name, TIDE_ADMIN_IDENTITY)) {
        tide_errprintf(err, "%s.name: %s", where,
                       dup ? "is listed twice" : "\"admin\" is the scheduler's own token's identity");
        goto fail;
    }
    f = cJSON_GetObjectItemCaseSensitive(obj, "role");
    if (!cJSON_IsString(f) || tide_role_parse(f->valuestring, &u->role) < 0) {
        tide_errprintf(err, "%s.role: must be admin, user, worker or read-only", where);
        goto fail;
    }
    f = cJSON_GetObjectItemCaseSensitive(obj, "unix_user");
    if (f && (!cJSON_IsString(f) || (f->valuestring[0] && !tide_user_name_valid(f->valuestring)))) {
        tide_errprintf(err, "%s.unix_user: must be an account name", where);
        goto fail;
    }
    u->unix_user = tide_xstrdup(f ? f->valuestring : "");
    f = cJSON_GetObjectItemCaseSensitive(obj, "pools");
    if (f && parse_pools(f, u, where, err) < 0)
        goto fail;
    f = cJSON_GetObjectItemCaseSensitive(obj, "priority_classes");
    if (f && parse_classes(f, u, where, err) < 0)
        goto fail;
    if (int_field(obj, "max_gpus", -1, &u->max_gpus, where, err) < 0 ||
        int_field(obj, "max_queued_jobs", -1, &u->max_queued_jobs, where, err) < 0)
        goto fail;
    f = cJSON_GetObjectItemCaseSensitive(obj, "rate_limit");
    if (f && (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 1e6)) {
        tide_errprintf(err, "%s.rate_limit: must be calls per second, 0 to 1000000", where);
        goto fail;
    }
    u->rate_limit = f ? f->valuedouble : 0;
    f = cJSON_GetObjectItemCaseSensitive(obj, "tokens");
    if (!f) {
        tide_errprintf(err, "%s.tokens: required (a list of {\"sha256\": ...})", where);
        goto fail;
    }
    HASH_ADD_KEYPTR(hh, t->by_name, u->name, strlen(u->name), e);
    t->n++;
    if (parse_tokens(t, f, u, where, err) < 0)
        return -EINVAL; /* e is in the table: freed with it */
    return 0;
fail:
    user_free(u);
    free(e);
    return rc;
}

int tide_users_parse(const char *text, size_t len, tide_users_t **out, tide_error_t *err)
{
    tide_users_t *t = tide_xcalloc(1, sizeof(*t));
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *users, *f;
    size_t i = 0;
    int rc = -EINVAL;

    *out = NULL;
    if (!root || !cJSON_IsObject(root)) {
        tide_errprintf(err, "not a JSON object (near byte %zu)",
                       root ? (size_t)0 : (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
        goto done;
    }
    cJSON_ArrayForEach(f, root) if (strcmp(f->string, "users") != 0)
    {
        tide_errprintf(err, "unknown field \"%.40s\" (the file has one field, \"users\")", f->string);
        goto done;
    }
    users = cJSON_GetObjectItemCaseSensitive(root, "users");
    if (!cJSON_IsArray(users)) {
        tide_errprintf(err, "users: required, a list of identities");
        goto done;
    }
    cJSON_ArrayForEach(f, users)
    {
        if (parse_user(t, f, i++, err) < 0)
            goto done;
    }
    *out = t;
    t = NULL;
    rc = 0;
done:
    cJSON_Delete(root);
    tide_users_free(t);
    return rc;
}

int tide_users_load(const char *path, tide_users_t **out, tide_error_t *err)
{
    FILE *f = fopen(path, "re");
    char *buf = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    if (!f) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", path, strerror(-rc));
        return rc;
    }
    buf = tide_xmalloc(TIDE_USERS_FILE_MAX + 1);
    n = fread(buf, 1, TIDE_USERS_FILE_MAX + 1, f);
    if (ferror(f)) {
        rc = -EIO;
        tide_errprintf(err, "%s: read error", path);
    } else if (n > TIDE_USERS_FILE_MAX) {
        rc = -EFBIG;
        tide_errprintf(err, "%s: larger than %u bytes", path, TIDE_USERS_FILE_MAX);
    } else {
        tide_error_t perr;
        tide_error_clear(&perr);
        rc = tide_users_parse(buf, n, out, &perr);
        if (rc < 0)
            tide_errprintf(err, "%s: %s", path, perr.text);
    }
    fclose(f);
    free(buf);
    return rc;
}

tide_auth_result_t tide_users_authenticate(const tide_users_t *u, const char *token, int64_t now_ms,
                                           const tide_user_t **user, int64_t *expired_ms)
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    token_entry_t *e = NULL;

    *user = NULL;
    if (!u || !token)
        return TIDE_AUTH_UNKNOWN;
    SHA256((const unsigned char *)token, strlen(token), d);
    HASH_FIND(hh, u->by_digest, d, sizeof(d), e);
    if (!e)
        return TIDE_AUTH_UNKNOWN;
    *user = e->user;
    if (e->revoked)
        return TIDE_AUTH_REVOKED;
    if (e->expires_ms && now_ms >= e->expires_ms) {
        if (expired_ms)
            *expired_ms = e->expires_ms;
        return TIDE_AUTH_EXPIRED;
    }
    return TIDE_AUTH_OK;
}

const tide_user_t *tide_users_find(const tide_users_t *u, const char *name)
{
    user_entry_t *e = NULL;

    if (!u || !name)
        return NULL;
    HASH_FIND_STR(u->by_name, name, e);
    return e ? &e->user : NULL;
}

bool tide_user_pool_allowed(const tide_user_t *user, const char *pool, int32_t *limit)
{
    *limit = -1;
    if (user->n_pools == 0)
        return true;
    for (size_t i = 0; i < user->n_pools; i++)
        if (pool && !strcmp(user->pools[i].name, pool)) {
            *limit = user->pools[i].max_gpus;
            return true;
        }
    return false;
}
