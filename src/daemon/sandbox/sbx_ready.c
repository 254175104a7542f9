/*
 * sbx_ready: a template's start command and ready check (E2B's
 * setStartCmd with its ready check), as an image import recorded them in
 * the template's description ("start": {"cmd"} or {"argv"}; "ready":
 * {"port"} or {"cmd"}). The start command runs in the background in every
 * VM the template boots, as the image's user, in its WORKDIR, with its ENV;
 * the boot counts as done once the check passes. A template snapshot is
 * taken after that, so sandboxes restored from it start with the server
 * already up. A port is ready when the guest's /proc/net/tcp or tcp6 lists
 * it listening (read through the agent: no shell, no tool in the image);
 * a command when it exits 0.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/log.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READY_MS      120000 /* under TCG a server takes a while */
#define READY_POLL_MS 250
#define PROC_NET_MAX  (256 * 1024)

struct started {
	int done, err;
};

static void started_cb(void *arg, const struct proto_frame *f)
{
	struct started *w = arg;
	if (f->type != P_STARTED && f->type != P_OK && f->type != P_ERROR && f->type != P_EXIT)
		return;
	if (f->type == P_ERROR || f->type == P_EXIT)
		w->err = -ECHILD; /* it did not start, or ended at once */
	w->done = 1;
}

static int start(struct vm *vm, json_t *how, json_t *env, const char *user, const char *cwd)
{
	struct started w = { 0 };
	uint32_t id;
	struct pbuf *b = agentc_begin(vm_agent(vm), P_EXEC, started_cb, &w, &id);
	if (!b)
		return -ENOTCONN;
	int e = 0;
	const char *cmd = json_string_value(json_object_get(how, "cmd"));
	size_t i;
	json_t *v;
	if (cmd)
		e = proto_put_str(b, A_SHELL, cmd);
	json_array_foreach(json_object_get(how, "argv"), i, v) {
		if (!e && json_is_string(v))
			e = proto_put_str(b, A_ARG, json_string_value(v));
	}
	json_array_foreach(env, i, v) {
		if (!e && json_is_string(v) && strchr(json_string_value(v), '='))
			e = proto_put_str(b, A_ENV, json_string_value(v));
	}
	if (!e && *cwd)
		e = proto_put_str(b, A_CWD, cwd);
	if (!e)
		e = proto_put_str(b, A_USER, user);
	if (!e)
		e = proto_put_u32(b, A_STDIN, 1);
	if (!e)
		e = proto_put_u32(b, A_BACKGROUND, 1);
	if (e) {
		agentc_abort(vm_agent(vm));
		return -ENOMEM;
	}
	int r = agentc_end(vm_agent(vm));
	if (r == 0)
		r = vm_run(vm, &w.done, 30000);
	if (!w.done)
		agentc_forget(vm_agent(vm), id); /* w is this frame's */
	return r < 0 ? r : w.done ? w.err : -ETIMEDOUT;
}

struct fread_wait {
	int done, err;
	char *p;
	size_t len;
};

static void fread_cb(void *arg, const struct proto_frame *f)
{
	struct fread_wait *w = arg;
	if (f->type == P_DATA) {
		if (w->len + f->len > PROC_NET_MAX) {
			w->err = -EFBIG;
			return;
		}
		char *q = realloc(w->p, w->len + f->len + 1);
		if (!q) {
			w->err = -ENOMEM;
			return;
		}
		memcpy(q + w->len, f->payload, f->len);
		w->p = q;
		w->len += f->len;
		w->p[w->len] = '\0';
	} else if (f->type == P_OK || f->type == P_ERROR) {
		if (f->type == P_ERROR && !w->err)
			w->err = -EIO;
		w->done = 1;
	}
}

/* Whether the guest's path (/proc/net/tcp or tcp6) lists port listening. */
static int listening(struct vm *vm, const char *path, unsigned port)
{
	struct fread_wait w = { 0 };
	uint32_t id;
	struct pbuf *b = agentc_begin(vm_agent(vm), P_FREAD, fread_cb, &w, &id);
	if (!b)
		return -ENOTCONN;
	if (proto_put_str(b, A_PATH, path) < 0) {
		agentc_abort(vm_agent(vm));
		return -ENOMEM;
	}
	int r = agentc_end(vm_agent(vm));
	if (r == 0)
		r = vm_run(vm, &w.done, 10000);
	if (!w.done) {
		agentc_forget(vm_agent(vm), id); /* w is this frame's */
		r = r < 0 ? r : -ETIMEDOUT;
	}
	int found = 0;
	/* "  0: 00000000:1F90 00000000:0000 0A ..." : local address:port, state 0A (LISTEN). */
	for (char *line = w.p, *end; r == 0 && w.err == 0 && line && *line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		char local[80], remote[80], st[8];
		unsigned p;
		if (sscanf(line, " %*[0-9]: %79s %79s %7s", local, remote, st) == 3 && !strcmp(st, "0A")) {
			char *colon = strrchr(local, ':');
			if (colon && sscanf(colon + 1, "%x", &p) == 1 && p == port)
				found = 1;
		}
	}
	free(w.p);
	return r < 0 ? r : w.err < 0 && w.err != -EIO ? w.err : found;
}

int sbx__template_start(struct sbx_mgr *m, const char *template, struct vm *vm, char *err,
			size_t errlen)
{
	char path[600], user[64], cwd[256];
	if (sbx__template_file(m, template, "json", path, sizeof(path)) < 0)
		return 0;
	json_t *desc = access(path, R_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
	json_t *how = json_object_get(desc, "start"), *ready = json_object_get(desc, "ready");
	if (!json_is_object(how)) {
		json_decref(desc);
		return 0;
	}
	sbx__template_defaults(m, template, user, sizeof(user), cwd, sizeof(cwd));
	double t0 = clock_ms_f();
	int r = start(vm, how, json_object_get(desc, "env"), user, cwd);
	if (r < 0) {
		snprintf(err, errlen, "the template's start command did not start (%s)", strerror(-r));
		goto out;
	}
	json_int_t port = json_integer_value(json_object_get(ready, "port"));
	const char *cmd = json_string_value(json_object_get(ready, "cmd"));
	int ok = !port && !cmd; /* no check: started is ready */
	while (!ok && clock_ms_f() - t0 < READY_MS) {
		if (port > 0 && port < 65536) {
			if ((r = listening(vm, "/proc/net/tcp", (unsigned)port)) == 0)
				r = listening(vm, "/proc/net/tcp6", (unsigned)port);
			ok = r == 1;
		} else if (cmd) {
			r = sbx__run(vm, cmd, user, NULL, 10000); /* -EIO: it exited non-zero */
			ok = r == 0;
		}
		if (r < 0 && r != -EIO && r != -ENOENT && r != -ETIMEDOUT)
			break; /* the agent is gone */
		if (!ok) {
			struct timespec ts = { 0, READY_POLL_MS * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	if (!ok && r < 0 && r != -EIO && r != -ENOENT && r != -ETIMEDOUT) {
		snprintf(err, errlen, "the template's ready check could not run (%s)", strerror(-r));
	} else if (!ok) {
		r = -ETIMEDOUT;
		if (port)
			snprintf(err, errlen, "nothing listened on port %lld in %d s (the template's ready check)",
				 (long long)port, READY_MS / 1000);
		else
			snprintf(err, errlen, "the template's ready check '%.200s' did not pass in %d s", cmd,
				 READY_MS / 1000);
	} else {
		r = 0;
		log_info("template %s: start command ready in %.0f ms", template, clock_ms_f() - t0);
	}
out:
	json_decref(desc);
	return r;
}
