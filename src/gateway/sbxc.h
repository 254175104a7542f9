/*
 * sbxc: one request's hold on its conversation's cpuos sandbox, over
 * cpuosd's HTTP API (the CLI's client, src/cli/cpuos/http.c). The sandbox
 * is made lazily, at the first tool call, so a conversation that never
 * runs code costs nothing; one that cpuosd no longer has (stopped, expired,
 * removed) is replaced. After the request a used sandbox is paused, or
 * killed when the request had no conversation.
 */
#ifndef CPUOS_GW_SBXC_H
#define CPUOS_GW_SBXC_H

#include <jansson.h>
#include <stddef.h>

struct gw_store;
struct sbxc;

struct sbxc_cfg {
	const char *url;       /* cpuosd: http://HOST:PORT or unix:///PATH */
	const char *key;       /* "" on the Unix socket */
	const char *template_;
	long long sandbox_timeout_s, code_timeout_s;
};

/* A hold for the conversation (key_id, conv) of store; conv "" for a
 * request without one (its sandbox lives for the request only). Nothing
 * is asked of cpuosd yet. 0 or -ENOMEM. */
int sbxc_new(const struct sbxc_cfg *cfg, struct gw_store *store, const char *key_id,
	     const char *conv, struct sbxc **out);

/* Runs code in the sandbox's default python context: 0 with *exec (the
 * execution object; the caller frees it); -EINVAL when cpuosd refused the
 * code or the call (a reason for the model in err); -EIO when cpuosd
 * failed or cannot be reached (a reason for the caller in err). */
int sbxc_run(struct sbxc *c, const char *code, json_t **exec, char *err, size_t errlen);

/* Writes n bytes to the file path in the sandbox: 0, -EINVAL (cpuosd
 * refused the path: reason in err), -EIO (as for sbxc_run). */
int sbxc_write(struct sbxc *c, const char *path, const void *p, size_t n, char *err,
	       size_t errlen);

/* The sandbox's id, "" while it has none. */
const char *sbxc_id(const struct sbxc *c);

/* Ends the hold: a sandbox the request used is paused (killed without a
 * conversation). Frees c; NULL is fine. */
void sbxc_done(struct sbxc *c);

#endif
