/* The fake /proc and /sys tree of tests (fake_tree.h). Test-only: failures end the test through
 * CMocka. */
#define _XOPEN_SOURCE 700
#include "fake_tree.h"

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

void tide_fake_tree_mkdirs(const char *path)
{
    char buf[512];

    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
}

int tide_fake_tree_init(tide_fake_tree_t *f, const char *name)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->root, sizeof(f->root), "/tmp/tide-%.32s-XXXXXX", name);
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->proc, sizeof(f->proc), "%s/proc", f->root);
    snprintf(f->sys, sizeof(f->sys), "%s/sys", f->root);
    tide_fake_tree_mkdirs(f->proc);
    tide_fake_tree_mkdirs(f->sys);
    return 0;
}

void tide_fake_tree_put(const tide_fake_tree_t *f, const char *rel, const char *fmt, ...)
{
    char path[512], dir[512];
    va_list ap;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", f->root, rel);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    tide_fake_tree_mkdirs(dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    va_start(ap, fmt);
    vfprintf(fp, fmt, ap);
    va_end(ap);
    assert_int_equal(fclose(fp), 0);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tide_fake_tree_rm(const char *path)
{
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
