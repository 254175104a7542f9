/*
 * snapblob: snapshot directories (runner/snap.h) to and from an object
 * store (lib/s3.h), so a snapshot outlives the host that made it. Under a
 * prefix, one object per file, named by its kind and not by the name its
 * manifest gives it (prefix/state, prefix/mem, prefix/disk), and
 * prefix/manifest.json last: the manifest sealed, every file's size and
 * SHA-256 in it, so whoever fetches it can trust every byte or refuse it.
 * The row that points at a stored snapshot names the manifest's own
 * SHA-256 too, so a manifest swapped in the store is refused as well.
 */
#ifndef CPUOS_SNAPBLOB_H
#define CPUOS_SNAPBLOB_H

#include <stddef.h>

struct s3;

/* Stores the snapshot in dir under prefix and writes its stored
 * manifest's SHA-256 to manifest_sha. The snapshot must not change while
 * it goes up: a file whose checksum was recorded and differs, or whose
 * size changed, fails it (-EBADMSG). 0 or -errno. */
int snapblob_push(struct s3 *s, const char *dir, const char *prefix, char manifest_sha[65],
		  char *err, size_t errlen);

/* Fetches the snapshot under prefix into dir, which it creates (mode 0700)
 * and which must not exist. With manifest_sha set, the stored manifest
 * must be that one. Each file is bounded by its size in the manifest and
 * checked against its checksum as it arrives; holes are kept where the
 * store's bytes are zero. On any failure dir is removed. 0, -ENOENT (no
 * such snapshot), -EBADMSG (damaged: truncated, altered or swapped, with
 * what differs), or another -errno of the store. */
int snapblob_pull(struct s3 *s, const char *prefix, const char *manifest_sha, const char *dir,
		  char *err, size_t errlen);

/* The SHA-256 of dir's manifest: in a sealed snapshot, which names every
 * file's size and checksum, a key for its content. 0 or -errno. */
int snapblob_content_key(const char *dir, char key[65], char *err, size_t errlen);

/* Removes the snapshot under prefix: its manifest first, so a half-removed
 * snapshot is never taken for a whole one. 0 also when it was not there. */
int snapblob_delete(struct s3 *s, const char *prefix, char *err, size_t errlen);

#endif
