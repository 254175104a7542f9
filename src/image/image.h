/*
 * image: templates from OCI images. An image arrives as an OCI image layout
 * (a directory, or a tar of one) or as a `docker save` tar; its manifest,
 * config and layers are checked against their digests and sizes, its
 * layers applied in order (whiteouts included) to an empty tree, the
 * guest's needs added beside the image's own files (a `user` account when
 * it has none, /work, /tmp), and the tree made into an erofs image as the
 * built-in templates are.
 *
 * Everything in an image is hostile. Nothing of it is run. Entries are
 * created with *at() calls below a directory descriptor. A parent is
 * opened with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, so an entry that
 * would go through a symlink (`evil -> /etc` then `evil/passwd`), or above
 * the root (`../x`), is refused rather than followed. Device nodes are
 * refused too. Sizes are counted against a limit before a byte is
 * written, so a 10 GB sparse file or a decompression bomb stops at the
 * limit. image_import runs the whole unpack in a child in user, mount,
 * network and IPC namespaces of its own: the image's owners (0-65535) map
 * to IMAGE_ID_BASE.., and it has no capability over anything of the host.
 *
 * Errors are -EINVAL (the image is malformed, lies or is hostile: an API
 * says 422), -EFBIG (over a limit: 413), -EPERM (not root), or another
 * -errno of the host, each with one readable line in err.
 */
#ifndef CPUOS_IMAGE_H
#define CPUOS_IMAGE_H

#include <jansson.h>
#include <stddef.h>

/* The host ids an import's user namespace maps 0-65535 to: none of the
 * host's users, nor the jails' (from 1900000000 up, 65536 per daemon). */
#define IMAGE_ID_BASE  2000000000u
#define IMAGE_ID_COUNT 65536u

struct image_limits {
	unsigned long long max_bytes; /* unpacked, and the archive's blobs: 0 is 4 GiB */
	unsigned long max_entries;    /* files, directories and links: 0 is 1,000,000 */
	unsigned timeout_s;           /* the whole import (image_import): 0 is 1800 */
	int as_caller;                /* entries are the caller's, whoever the archive
				       * says owns them (a build's context) */
};

/* What an unpack used, so far. */
struct image_usage {
	unsigned long long bytes;
	unsigned long entries;
};

/* Applies one layer (a tar, plain, gzip or zstd) read from layerfd (rewound
 * as needed) to the tree at rootfd: its whiteouts first, then its entries. */
int image_layer_apply(int rootfd, int layerfd, const struct image_limits *lim,
		      struct image_usage *used, char *err, size_t errlen);

/* Reads the image at srcfd: a directory (an OCI layout) or a file (a tar
 * of an OCI layout, or `docker save`'s, plain or gzip), staging what a tar
 * holds in stagefd's directory; checks it and applies its layers to
 * rootfd. *config gets the template's description: "env", "workdir",
 * "user", "entrypoint", "cmd", "labels", "digest", "layers", "format". */
int image_unpack(int srcfd, int stagefd, int rootfd, const struct image_limits *lim,
		 json_t **config, char *err, size_t errlen);

/* Adds what a sandbox needs to an unpacked tree: /work, /tmp, /run and a
 * `user` account (the first free uid from 1000, its home) when the image
 * has none. Notes in config what it added and what the image has
 * ("has_sh", "has_python3"). */
int image_guest_needs(int rootfd, json_t *config, char *err, size_t errlen);

/* The whole import, as root: the image at srcfd (an OCI layout's
 * directory or an archive, open) unpacked in a child in namespaces of its
 * own (above), in a work directory "ID.work" made in dirfd (and removed),
 * made into an erofs image "ID.erofs" in dirfd with its description
 * "ID.json" (each written whole, then renamed into place). id: letters,
 * digits, '.', '_', '-', not a dot first, at most 120. Every name is
 * taken beneath dirfd, no symlink followed. */
int image_import_at(int srcfd, int dirfd, const char *id, const struct image_limits *lim,
		    char *err, size_t errlen);
/* The same for the image at the path archive. */
int image_import(const char *archive, int dirfd, const char *id, const struct image_limits *lim,
		 char *err, size_t errlen);
/* image_import_at in a process of its own that no one waits for (its
 * parent gone at once), keeping none of the caller's descriptors but
 * srcfd and dirfd: *resultfd is a pipe that gives its one line when it
 * ends, for image_import_result. Returns at once: 0, or -errno. */
int image_import_start(int srcfd, int dirfd, const char *id, const struct image_limits *lim,
		       int *resultfd, char *err, size_t errlen);
/* Reads what an import started so says (blocking till it ends): 0, or
 * its -errno with its line in err (-EIO if it died without one). */
int image_import_result(int resultfd, char *err, size_t errlen);

/* Pulling from a registry (pull.c): https unless insecure (a plain-HTTP
 * registry, as a local one is); credentials for Basic, or for a Bearer
 * token's realm (NULL username: anonymous); max_bytes bounds the blobs (0:
 * 4 GiB). */
struct image_pull_opts {
	int insecure;
	int public_only; /* refuse the host's own and private addresses (a pull
			  * an account asked for: not the host's services) */
	const int *cancel; /* set (read atomically): the pull stops; NULL: never */
	const char *username, *password;
	unsigned long long max_bytes;
};

/* The linux/amd64 image of reference ([HOST/]NAME[:TAG][@sha256:...],
 * Docker Hub's where HOST is absent) into a new OCI layout at layout, each
 * blob checked against its digest and size as it arrives; through the
 * host's network. 0, or -EINVAL (a bad reference, a blob or manifest that
 * lies), -ENOENT (no such image), -EACCES (refused), -EFBIG, -EIO. */
int image_pull(const char *reference, const char *layout, const struct image_pull_opts *o,
	       char *err, size_t errlen);

/* Removes the tree name at dirfd (a file or a directory and what is in
 * it), never following a symlink: 0 or -errno. */
int image_remove_tree(int dirfd, const char *name);

/* A template's start command and ready check (E2B's setStartCmd), into
 * its description d: cmd, a shell command, or (cmd NULL, from_image) the
 * image's ENTRYPOINT and CMD as an argv; ready by a port that answers
 * (ready_port), or a command that exits 0 (ready_cmd), or neither
 * (started is ready). 0, or -EINVAL with a line in err. */
int image_set_start(json_t *d, const char *cmd, int from_image, unsigned ready_port,
		    const char *ready_cmd, char *err, size_t errlen);

#endif
