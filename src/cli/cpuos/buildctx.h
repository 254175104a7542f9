/*
 * buildctx: a Dockerfile build's context and temporary trees (buildctx.c);
 * tpl_dockerbuild_remote is declared in tplbuild.h.
 */
#ifndef CPUOS_CLI_BUILDCTX_H
#define CPUOS_CLI_BUILDCTX_H

#include <stddef.h>
#include <stdio.h>

/* A new directory under $TMPDIR (else /tmp) named for what, into dir:
 * 0, or -1 after saying why. */
int bctx_temp_dir(const char *what, char *dir, size_t n);
/* Removes the tree at dir, saying so if it cannot. */
void bctx_remove_dir(const char *dir);
/* The archive at fd (plain or compressed) into the empty directory dir, as
 * an image's layer is; at most $CPUOS_BUILD_MAX_MB (the daemon's) else
 * 4 GB. what: for errors. 0, or -1 after saying why. */
int bctx_unpack(int fd, const char *dir, const char *what);
/* A context that is an archive (a file, or "-": stdin), unpacked into a new
 * directory, into dir: 0, or -1 after saying why. */
int bctx_unpack_context(const char *archive, char *dir, size_t n);
/* The regular file rel beneath the directory ctx, never through a symlink
 * nor out of it, as a stream; NULL with errno. */
FILE *bctx_open(const char *ctx, const char *rel);

#endif
