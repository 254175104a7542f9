/*
 * tplbuild: "cpuos templates build": runs guest/templates/build.sh and turns
 * its output into a progress bar on a terminal, or its phase lines
 * elsewhere. Needs no daemon.
 */
#ifndef CPUOS_CLI_TPLBUILD_H
#define CPUOS_CLI_TPLBUILD_H

#include <jansson.h>

/* Builds template name; returns the script's exit status (128+N when a
 * signal N ended it), or EXIT_API when it could not be started. */
int tpl_build(const char *name);
/* Imports the image at archive (an OCI layout, or a tar of one or of
 * `docker save`) as template name (image.h), as root, into
 * $CPUOS_GUEST_DIR/templates (else ../guest from this binary), the image
 * itself under $CPUOS_CACHE/images; max_mb 0: image.h's default. 0, or
 * EXIT_USAGE for a bad name or image, EXIT_API for the host's failures. */
/* A template's start command and ready check (docs/images.md): cmd (a
 * shell string) or image (the image's ENTRYPOINT and CMD); ready_port or
 * ready_cmd, or neither. */
struct tpl_start {
	const char *cmd;
	int image;
	unsigned ready_port;
	const char *ready_cmd;
};
int tpl_import(const char *name, const char *archive, unsigned long long max_mb,
	       const struct tpl_start *start);
/* Pulls reference from its registry (image.h; insecure: plain HTTP;
 * credentials from $CPUOS_REGISTRY_USERNAME and $CPUOS_REGISTRY_PASSWORD)
 * and imports it as template name, as tpl_import. */
int tpl_pull(const char *name, const char *ref, int insecure, unsigned long long max_mb,
	     const struct tpl_start *start);

/* cpuos templates build NAME -f DOCKERFILE [CONTEXT] (build.c): the
 * Dockerfile's steps in a sandbox, cached per step as checkpoints, the
 * result uploaded as the account's template NAME. build_args: --build-arg
 * K=V (an object); start: the start command and ready check, else CMD with
 * HEALTHCHECK or EXPOSE; no_cache: every step again. An exit code. */
struct cli;
int tpl_dockerbuild(struct cli *c, const char *name, const char *dockerfile, const char *context,
		    json_t *build_args, const struct tpl_start *start, int no_cache);
/* The same build run by the daemon (--remote: POST /v1/templates/NAME/
 * build with the context as a tar), its log shown as it comes. */
int tpl_dockerbuild_remote(struct cli *c, const char *name, const char *dockerfile,
			   const char *context, json_t *build_args, const struct tpl_start *start,
			   int no_cache);

#endif
