/*
 * sbxc: see sbxc.h. A sandbox id from the store is tried as it is: a paused
 * one resumes on the call itself, and only a 404 (gone) or a 409 on a
 * sandbox that is no longer running or paused makes a new one, once.
 */
#include "gateway/sbxc.h"

#include "cli/cpuos/http.h"
#include "common/log.h"
#include "gateway/gw_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How long each call to cpuosd may take, beyond the code's own timeout:
 * a create or resume boots or restores a VM (slow under TCG). */
#define CREATE_MS (300 * 1000L)
#define SLACK_MS  (180 * 1000L)
#define PAUSE_MS  (180 * 1000L)
#define SHORT_MS  (30 * 1000L)

struct sbxc {
	const struct sbxc_cfg *cfg;
	struct gw_store *store;
	struct api *api;
	char key_id[GW_KEY_ID_LEN];
	char conv[GW_CONV_MAX + 1];
	char id[GW_SBX_ID_LEN];
	int used;
};

int sbxc_new(const struct sbxc_cfg *cfg, struct gw_store *store, const char *key_id,
	     const char *conv, struct sbxc **out)
{
	struct sbxc *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = cfg;
	c->store = store;
	snprintf(c->key_id, sizeof(c->key_id), "%s", key_id);
	snprintf(c->conv, sizeof(c->conv), "%s", conv);
	if (conv[0] && gw_conv_get(store, key_id, conv, c->id) < 0)
		c->id[0] = '\0';
	*out = c;
	return 0;
}

const char *sbxc_id(const struct sbxc *c)
{
	return c->id;
}

static int api(struct sbxc *c, char *err, size_t errlen)
{
	if (c->api)
		return 0;
	int r = api_new(c->cfg->url, c->cfg->key, &c->api);
	if (r < 0)
		snprintf(err, errlen, "cannot use cpuosd at '%s': %s", c->cfg->url,
			 r == -EINVAL ? "not http://HOST:PORT or unix:///PATH" : strerror(-r));
	return r < 0 ? -EIO : 0;
}

/* A new sandbox for the conversation, recorded in the store. */
static int create(struct sbxc *c, char *err, size_t errlen)
{
	struct apath p;
	json_t *resp = NULL;
	json_t *body = json_pack("{s:s, s:I, s:{s:s, s:s}}", "template", c->cfg->template_,
				 "timeout", (json_int_t)c->cfg->sandbox_timeout_s, "metadata",
				 "cpuos-gateway-key", c->key_id, "cpuos-gateway-conversation",
				 c->conv);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return -EIO;
	}
	apath_init(&p, "/v1/sandboxes");
	api_set_timeout(c->api, CREATE_MS);
	int r = api_json(c->api, "POST", &p, body, &resp);
	json_decref(body);
	const char *id = json_string_value(json_object_get(resp, "id"));
	if (r < 0 || !id || strlen(id) >= sizeof(c->id)) {
		snprintf(err, errlen, "cannot create a sandbox: %s",
			 r < 0 ? api_error(c->api) : "cpuosd's answer has no id");
		json_decref(resp);
		return -EIO;
	}
	snprintf(c->id, sizeof(c->id), "%s", id);
	json_decref(resp);
	c->used = 1;
	log_info("sandbox %s created for %s%s%s", c->id, c->key_id,
		 c->conv[0] ? ", conversation " : " (a request without a conversation)", c->conv);
	if (c->conv[0] && gw_conv_set(c->store, c->key_id, c->conv, c->id) < 0)
		log_warn("cannot record sandbox %s of a conversation of %s", c->id, c->key_id);
	return 0;
}

/* After a 404 or 409 on c->id: 1 when the sandbox is gone for good (a new
 * one is due), 0 when it is there (a 409 for another reason). */
static int gone(struct sbxc *c)
{
	if (api_status(c->api) == 404)
		return 1;
	if (api_status(c->api) != 409)
		return 0;
	struct apath p;
	json_t *resp = NULL;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, c->id);
	api_set_timeout(c->api, SHORT_MS);
	int r = api_json(c->api, "GET", &p, NULL, &resp);
	const char *state = json_string_value(json_object_get(resp, "state"));
	int g = (r < 0 && api_status(c->api) == 404) ||
		(state && strcmp(state, "running") && strcmp(state, "paused"));
	json_decref(resp);
	return g;
}

/* What a call that failed with r (api_*'s code) and status st means:
 * -EINVAL for the model (cpuosd refused the call), -EIO for the caller
 * (cpuosd failed, is overloaded or cannot be reached). */
static int refusal(int r, long st)
{
	return r == -EPROTO && st >= 400 && st < 500 && st != 429 && st != 408 ? -EINVAL : -EIO;
}

/* Runs one call on the sandbox (made first if there is none), replacing a
 * sandbox that is gone, once. call returns api_*'s codes. */
static int with_sandbox(struct sbxc *c, int (*call)(struct sbxc *c, void *arg), void *arg,
			const char *what, char *err, size_t errlen)
{
	if (api(c, err, errlen) < 0)
		return -EIO;
	for (int attempt = 0;; attempt++) {
		int fresh = !c->id[0];
		if (fresh && create(c, err, errlen) < 0)
			return -EIO;
		int r = call(c, arg);
		if (r == 0) {
			c->used = 1;
			return 0;
		}
		long st = api_status(c->api);
		snprintf(err, errlen, "%s: %s", what, api_error(c->api)); /* before gone() asks */
		if (r == -EPROTO && !fresh && attempt == 0 && gone(c)) {
			log_info("sandbox %s is gone: a new one for its conversation", c->id);
			c->id[0] = '\0';
			continue;
		}
		return refusal(r, st);
	}
}

struct run_arg {
	const char *code;
	json_t *exec;
};

static int run_call(struct sbxc *c, void *arg)
{
	struct run_arg *a = arg;
	struct apath p;
	json_t *body = json_pack("{s:s, s:I}", "code", a->code, "timeout",
				 (json_int_t)c->cfg->code_timeout_s);
	if (!body)
		return -ENOMEM;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, c->id);
	apath_add(&p, "/code");
	api_set_timeout(c->api, c->cfg->code_timeout_s * 1000L + SLACK_MS);
	int r = api_json(c->api, "POST", &p, body, &a->exec);
	json_decref(body);
	if (r == 0 && !json_is_object(a->exec)) {
		json_decref(a->exec);
		a->exec = NULL;
		r = -EIO;
	}
	return r;
}

int sbxc_run(struct sbxc *c, const char *code, json_t **exec, char *err, size_t errlen)
{
	struct run_arg a = { .code = code };
	int r = with_sandbox(c, run_call, &a, "cannot run the code", err, errlen);
	*exec = a.exec;
	return r;
}

struct write_arg {
	const char *path;
	int fd;
};

static int write_call(struct sbxc *c, void *arg)
{
	struct write_arg *a = arg;
	struct apath p;
	json_t *resp = NULL;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, c->id);
	apath_add(&p, "/files");
	apath_query(&p, "path", a->path);
	api_set_timeout(c->api, CREATE_MS);
	if (lseek(a->fd, 0, SEEK_SET) < 0)
		return -EIO;
	int r = api_upload(c->api, "PUT", &p, a->fd, &resp);
	json_decref(resp);
	return r;
}

int sbxc_write(struct sbxc *c, const char *path, const void *p, size_t n, char *err,
	       size_t errlen)
{
	/* A memory file: the CLI's client streams an upload from a
	 * descriptor, and a regular file's length goes as Content-Length. */
	struct write_arg a = { .path = path, .fd = memfd_create("upload", MFD_CLOEXEC) };
	if (a.fd < 0 || write(a.fd, p, n) != (ssize_t)n) {
		snprintf(err, errlen, "cannot buffer the upload: %s", strerror(errno));
		if (a.fd >= 0)
			close(a.fd);
		return -EIO;
	}
	int r = with_sandbox(c, write_call, &a, "cannot write the file", err, errlen);
	close(a.fd);
	return r;
}

void sbxc_done(struct sbxc *c)
{
	if (!c)
		return;
	if (c->used && c->id[0] && c->api) {
		struct apath p;
		json_t *resp = NULL;
		apath_init(&p, "/v1/sandboxes");
		apath_seg(&p, c->id);
		if (c->conv[0])
			apath_add(&p, "/pause");
		api_set_timeout(c->api, c->conv[0] ? PAUSE_MS : SHORT_MS);
		if (api_json(c->api, c->conv[0] ? "POST" : "DELETE", &p, NULL, &resp) < 0)
			log_warn("cannot %s sandbox %s: %s", c->conv[0] ? "pause" : "kill", c->id,
				 api_error(c->api));
		json_decref(resp);
	}
	api_free(c->api);
	free(c);
}
