/* Small file-system helpers shared by the worker's checkpoint copies (flush_copy.c, ckpt_store.c and the
 * tiers): the hex of a SHA-256 digest, fsync of a directory, removal of a tree without following links, and
 * the calling thread's id for temporary names. Blocking; thread-safe; no global state. */
#ifndef TIDE_WORKER_FSUTIL_H
#define TIDE_WORKER_FSUTIL_H

#include <stdint.h>

/* The 32-byte digest d as 64 lowercase hex digits and a NUL in hex[65]. */
void tide_fs_hex32(const uint8_t *d, char *hex);
/* fsync of a directory (so a rename or a new entry in it is durable). 0 or -errno. */
int tide_fs_sync_dir(const char *path);
/* Removes path, a file or a whole directory tree, never following links (every entry is removed relative
 * to a descriptor of its directory opened with O_NOFOLLOW, so a link swapped in meanwhile is never
 * followed out of the tree); best effort (what cannot be removed stays). Only path's own parents are
 * resolved by name: they must be directories the caller trusts. */
void tide_fs_remove_tree(const char *path);
/* Opens path (relative to dirfd, or AT_FDCWD) for reading only if it is a regular file: O_NONBLOCK, so a
 * FIFO or a device swapped in by a rank's account can never block the opening thread, then fstat. Returns
 * the descriptor, or -errno (-EINVAL: not a regular file). */
int tide_fs_open_regular(int dirfd, const char *path);
/* mkdir -p: creates path and its missing parents with mode. 0 (also when it exists) or -errno. */
int tide_fs_mkdir_p(const char *path, unsigned mode);
/* The calling thread's kernel id (unique among the process's live threads): for temporary file names. */
long tide_fs_thread_id(void);

#endif
