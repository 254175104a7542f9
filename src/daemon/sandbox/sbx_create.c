/*
 * sbx_create: a new sandbox, from a template (a warm VM, its snapshot, or
 * a boot) or from a checkpoint, published into the manager's table and the
 * store; the ids and tokens it is given. The objects and the pump are in
 * sbx.c.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/crash.h"
#include "common/log.h"
#include "daemon/net/net.h"
#include "runner/qemu.h"
#include "runner/vm.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void sbx__random_id(char *out, size_t n, const char *prefix)
{
	uint8_t b[8];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		for (size_t i = 0; i < sizeof(b); i++) /* never in practice */
			b[i] = (uint8_t)(rand() ^ (int)time(NULL));
	snprintf(out, n, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2], b[3], b[4],
		 b[5], b[6], b[7]);
}

/* 128 random bits in hex: every new sandbox's traffic token. */
static void random_token(char *out, size_t n)
{
	char a[17], b[17];
	sbx__random_id(a, sizeof(a), "");
	sbx__random_id(b, sizeof(b), "");
	snprintf(out, n, "%s%s", a, b);
}

/* The environment of a new sandbox of template: the image's ENV (the
 * template's NAME.json beside its image, written by an import) under the
 * create's own (a JSON object), as a JSON object's text; NULL: no memory. */
int sbx__template_file(const struct sbx_mgr *m, const char *template, const char *ext,
		       char *out, size_t n)
{
	if (!template[0] || strchr(template, '/') || template[0] == '.')
		return -EINVAL;
	int mine = !strncmp(template, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX));
	int w = snprintf(out, n, "%s/templates/%s.%s", mine ? m->cfg.state_dir : m->cfg.guest_dir,
			 template, ext);
	return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

static char *template_env(const struct sbx_mgr *m, const char *template, const char *own)
{
	char path[600] = "";
	sbx__template_file(m, template, "json", path, sizeof(path));
	json_t *desc = access(path, R_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
	json_t *env = json_object(), *mine = own ? json_loads(own, 0, NULL) : NULL;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(desc, "env"), i, v) {
		const char *kv = json_string_value(v), *eq = kv ? strchr(kv, '=') : NULL;
		if (!eq || eq == kv || eq - kv > 255)
			continue;
		char name[256];
		snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
		json_object_set_new(env, name, json_string(eq + 1));
	}
	if (json_is_object(mine))
		json_object_update(env, mine);
	char *text = json_dumps(env, JSON_COMPACT);
	json_decref(env);
	json_decref(mine);
	json_decref(desc);
	return text;
}

void sbx__template_defaults(const struct sbx_mgr *m, const char *template, char *user,
			    size_t ulen, char *cwd, size_t clen)
{
	snprintf(user, ulen, "user");
	*cwd = '\0';
	char path[600];
	if (sbx__template_file(m, template, "json", path, sizeof(path)) < 0)
		return;
	json_t *desc = access(path, R_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
	const char *u = json_string_value(json_object_get(desc, "user"));
	const char *w = json_string_value(json_object_get(desc, "workdir"));
	/* A name the agent can look up; "1000" or "app:app" stays "user". */
	if (u && *u && strlen(u) < ulen && strspn(u, "abcdefghijklmnopqrstuvwxyz0123456789_-.") == strlen(u) &&
	    !(u[0] >= '0' && u[0] <= '9'))
		snprintf(user, ulen, "%s", u);
	if (w && w[0] == '/' && strlen(w) < clen)
		snprintf(cwd, clen, "%s", w);
	json_decref(desc);
}

void sbx__guest_paths(const struct sbx_mgr *m, const char *template, char *kernel, char *initrd,
		      char *image, size_t n)
{
	snprintf(kernel, n, "%s/bzImage", m->cfg.guest_dir);
	snprintf(initrd, n, "%s/initramfs.cpio", m->cfg.guest_dir);
	if (sbx__template_file(m, template, "erofs", image, n) < 0)
		snprintf(image, n, "%s/templates/-", m->cfg.guest_dir);
}

int sbx__publish(struct sbx_mgr *m, struct store_sbx *row, struct vm *vm, char *err,
		 size_t errlen)
{
	snprintf(row->state, sizeof(row->state), "running");
	row->qemu_pid = vm_pid(vm);
	random_token(row->traffic_token, sizeof(row->traffic_token));
	struct sbx *s;
	int r = sbx__new(m, row, SBX_CREATING, &s);
	if (r < 0) {
		snprintf(err, errlen, "cannot make sandbox %s: %s", row->id, strerror(-r));
		vm_free(vm, 0);
		sbx__net_down(m, row->net_slot);
		return -EIO;
	}
	/* Its VM first, so the moment it is running it serves. */
	if ((r = sbx__run_vm(s, vm, row->net_slot)) == 0) {
		crash_point("create.before_store");
		struct sbx_facts f = { .row = row };
		char e2[256];
		r = sbx__fire(s, SBX_EV_STARTED, &f, 0, e2, sizeof(e2));
		if (r < 0) {
			int slot;
			vm = sbx__stop_vm(s, &slot);
			row->net_slot = slot;
		} else {
			vm = NULL;
		}
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot record sandbox: %s", strerror(-r));
		if (vm)
			vm_free(vm, 0);
		sbx__net_down(m, row->net_slot);
		char e2[256];
		sbx__fire(s, SBX_EV_FAILED, NULL, 0, e2, sizeof(e2));
		sbx_put(s);
		return -EIO;
	}
	sbx_put(s);
	return 0;
}

/* The body of sbx_create once a quota slot is held: a claim from the warm
 * pool, a restore of a checkpoint or of the template's snapshot, or a
 * cold boot, whichever comes first. row's identity is filled already. */
static int boot(struct sbx_mgr *m, const struct sbx_params *p, const struct store_ckpt *ck,
		struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	double t0 = clock_ms_f();
	struct vm *vm = NULL;
	int how = 0; /* 0 cold, 1 restored, 2 pool */
	int r = 0;
	row->net_slot = NET_NO_SLOT;
	if (!ck && sbx__pool_take(m, row, &vm) == 0) {
		how = 2;
	} else {
		char kernel[512], initrd[512], image[512], run[sizeof(row->run_dir)];
		sbx__guest_paths(m, row->template, kernel, initrd, image, sizeof(image));
		sbx__random_id(row->id, sizeof(row->id), "sbx_");
		snprintf(run, sizeof(run), "%s/vms/%s", c->state_dir, row->id);
		char snap[512];
		const char *restore = ck ? ck->dir : NULL;
		if (!restore && sbx__template_snapshot(m, row, snap, sizeof(snap)) == 0)
			restore = snap;
		struct vm_config vc = {
			.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
			.vcpus = row->vcpus,
			.memory_mb = row->memory_mb, .disk_mb = row->disk_mb, .kernel = kernel,
			.initrd = initrd, .template = image, .run_dir = run, .cache_dir = c->cache_dir,
			.hostname = row->id + 4, .restore = restore, .new_identity = 1,
		};
		r = sbx__start(m, &vc, row->network_json, &row->net_slot, &vm, err, errlen);
		if (r < 0 && restore && !ck) {
			/* A template snapshot that does not restore must not stop
			 * creates; one that is damaged or foreign is rebuilt. */
			log_warn("template snapshot %s: %s; booting instead", restore, err);
			if (r == -EBADMSG || r == -EPROTO || r == -ENOENT)
				sbx__template_bad(m, restore);
			vc.restore = NULL;
			r = sbx__start(m, &vc, row->network_json, &row->net_slot, &vm, err, errlen);
		}
		if (r < 0) {
			log_error("sandbox %s did not start: %s", row->id, err);
			return -EIO;
		}
		how = vc.restore != NULL;
		snprintf(row->run_dir, sizeof(row->run_dir), "%s", run);
		/* Booted: the template's server is not up yet (a snapshot has it). */
		if (!how && !ck && (r = sbx__template_start(m, row->template, vm, err, errlen)) < 0) {
			log_error("sandbox %s did not start: %s", row->id, err);
			vm_free(vm, 0);
			sbx__net_down(m, row->net_slot);
			return -EIO;
		}
	}
	/* The user's own bound on the guest's processes, on the cgroup that
	 * holds all the agent starts (docs/agent-protocol.md, Limits); the
	 * guest's RAM keeps it through pauses and forks. It only ever
	 * lowers the agent's own, which leaves the agent room to fork. */
	if (p->max_processes) {
		char cmd[200];
		snprintf(cmd, sizeof(cmd),
			 "f=/sys/fs/cgroup/cpuos/pids.max; c=$(cat $f); "
			 "if [ \"$c\" = max ] || [ %u -lt \"$c\" ]; then echo %u > $f; fi",
			 p->max_processes, p->max_processes);
		if ((r = sbx__run(vm, cmd, "root", NULL, 30000)) < 0) {
			snprintf(err, errlen, "cannot set the guest's process limit: %s", strerror(-r));
			vm_free(vm, 0);
			sbx__net_down(m, row->net_slot);
			return -EIO;
		}
	}
	row->created_at = (long long)time(NULL);
	row->expires_at = row->created_at + p->timeout_s;
	if ((r = sbx__publish(m, row, vm, err, errlen)) < 0)
		return r;
	double ms = clock_ms_f() - t0;
	pthread_mutex_lock(&m->mu);
	m->stats.creates++;
	m->stats.create_ms += ms;
	if (how == 0)
		m->stats.cold_boots++;
	else if (how == 1)
		m->stats.restores++;
	else
		m->stats.pool_claims++;
	pthread_mutex_unlock(&m->mu);
	log_info("sandbox %s started for '%s' (%s, %s) in %.0f ms", row->id, row->account,
		 row->template, how == 2 ? "warm pool" : how ? "restored" : "booted", ms);
	return 0;
}

int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen)
{
	struct store_ckpt ck;
	memset(row, 0, sizeof(*row));
	/* A node being drained takes no new sandboxes. */
	const char *node = store_node_name(m->store);
	struct store_node me;
	if (node[0] && store_node_get(m->store, node, &me) == 0 && strcmp(me.state, "ready")) {
		snprintf(err, errlen, "node '%s' is %s: it takes no new sandboxes", node, me.state);
		return -EAGAIN;
	}
	if (p->checkpoint) {
		if (store_ckpt_get(m->store, account, p->checkpoint, &ck) < 0) {
			snprintf(err, errlen, "no checkpoint '%s'", p->checkpoint);
			return -ENXIO;
		}
		if (sbx__blob_ckpt(m, &ck, err, errlen) < 0) {
			log_error("checkpoint %s: %s", ck.id, err);
			store_ckpt_release(&ck);
			return -EIO; /* the store's or its copy's fault, not the caller's */
		}
		snprintf(row->template, sizeof(row->template), "%s", ck.template);
		row->vcpus = ck.vcpus;
		row->memory_mb = ck.memory_mb;
		row->disk_mb = ck.disk_mb;
		snprintf(row->parent, sizeof(row->parent), "%s", ck.id);
	} else {
		int r = sbx__tpl_resolve(m, account, p->template, row->template, sizeof(row->template),
					 err, errlen);
		if (r < 0)
			return r == -ENOENT || r == -EINVAL ? r : -EIO;
		row->vcpus = p->vcpus;
		row->memory_mb = p->memory_mb;
		row->disk_mb = p->disk_mb;
	}
	char kernel[512], initrd[512], image[512];
	sbx__guest_paths(m, row->template, kernel, initrd, image, sizeof(image));
	if (!row->template[0] || strchr(row->template, '/') || access(image, R_OK) < 0) {
		snprintf(err, errlen, "unknown template '%s'", row->template);
		if (p->checkpoint)
			store_ckpt_release(&ck);
		return -ENOENT;
	}
	snprintf(row->account, sizeof(row->account), "%s", account);
	snprintf(row->key_id, sizeof(row->key_id), "%s", p->key_id ? p->key_id : "");
	snprintf(row->on_timeout, sizeof(row->on_timeout), "%s", p->kill_on_timeout ? "kill" : "pause");
	row->idle_timeout_s = p->idle_timeout_s;
	row->is_public = p->is_public;
	/* A checkpoint's own environment comes with it; the create's wins,
	 * over an imported image's ENV (its template's description). */
	row->env_json = p->checkpoint ? strdup(p->env_json ? p->env_json : ck.env_json ? ck.env_json : "{}")
				      : template_env(m, row->template, p->env_json);
	row->metadata_json = strdup(p->metadata_json ? p->metadata_json : "{}");
	row->network_json = strdup(p->network_json ? p->network_json : "");
	int r = -ENOMEM;
	if (!row->env_json || !row->metadata_json || !row->network_json)
		goto out;
	if ((r = sbx__secret_env(m, account, p->secrets_json, row, err, errlen)) < 0)
		goto out;
	int slot = sbx__reserve(m, account, row->vcpus, row->memory_mb, err, errlen);
	if (slot < 0) {
		r = slot;
		goto out;
	}
	r = boot(m, p, p->checkpoint ? &ck : NULL, row, err, errlen);
	sbx__unreserve(m, slot);
out:
	if (r < 0)
		store_sbx_release(row);
	if (p->checkpoint)
		store_ckpt_release(&ck);
	return r;
}
