/* A throwaway directory tree standing in for /proc and /sys in tests of code that reads them (the
 * cpu telemetry backend, the node's I/O figures): make it, write files into it, remove it. */
#ifndef TIDE_TEST_FAKE_TREE_H
#define TIDE_TEST_FAKE_TREE_H

typedef struct tide_fake_tree {
    char root[64];
    char proc[96]; /* root/proc */
    char sys[96];  /* root/sys */
} tide_fake_tree_t;

/* Makes /tmp/tide-NAME-XXXXXX with proc/ and sys/ in it. Returns 0, or -1 (nothing left behind). */
int tide_fake_tree_init(tide_fake_tree_t *f, const char *name);
/* Writes root/rel (making its directories) with printf-style content; fails the test on error. */
void tide_fake_tree_put(const tide_fake_tree_t *f, const char *rel, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Removes path and everything under it. Returns 0 or -1. */
int tide_fake_tree_rm(const char *path);
/* Makes path and its parents (existing ones are fine). */
void tide_fake_tree_mkdirs(const char *path);

#endif
