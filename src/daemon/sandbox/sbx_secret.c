/*
 * sbx_secret: a sandbox's egress secrets. A create names some of its
 * account's secrets; each one's placeholder goes into the sandbox's
 * environment under the secret's name, and the names into its row, so
 * forks, resumes and a restarted daemon give the same ones to the proxy
 * of its network again (sbx__run_vm). The values are read from the store
 * each time: a secret set again or deleted reaches running sandboxes at
 * once (sbx_secrets_changed).
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "daemon/net/net.h"
#include "daemon/net/secret.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PER_SANDBOX 16

int sbx__secret_env(struct sbx_mgr *m, const char *account, const char *names_json,
		    struct store_sbx *row, char *err, size_t errlen)
{
	json_t *names = json_loads(names_json ? names_json : "[]", 0, NULL);
	json_t *env = json_loads(row->env_json ? row->env_json : "{}", 0, NULL);
	int r = -EINVAL;
	size_t n = json_array_size(names);
	if (!json_is_array(names) || n > MAX_PER_SANDBOX || !json_is_object(env)) {
		snprintf(err, errlen, "'secrets' is an array of at most %d secret names",
			 MAX_PER_SANDBOX);
		goto out;
	}
	if (n && !m->cfg.net) {
		snprintf(err, errlen, "this daemon runs without networks (--net off): no secrets");
		goto out;
	}
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v)
	{
		const char *name = json_string_value(v);
		struct store_secret x;
		if (!secret_name_ok(name) || store_secret_get(m->store, account, name, &x) < 0) {
			snprintf(err, errlen, "no secret '%.64s'", name ? name : "(not a string)");
			r = -ENOENT;
			goto out;
		}
		/* The env may hold the very placeholder (a checkpoint's): not
		 * a clash. */
		const char *was = json_string_value(json_object_get(env, name));
		int clash = was && strcmp(was, x.placeholder);
		if (!clash)
			json_object_set_new(env, name, json_string(x.placeholder));
		store_secret_release(&x);
		if (clash) {
			snprintf(err, errlen, "'env' sets %s, which is a secret's name", name);
			goto out;
		}
	}
	char *e = json_dumps(env, JSON_COMPACT | JSON_SORT_KEYS);
	char *s = json_dumps(names, JSON_COMPACT);
	if (!e || !s) {
		free(e);
		free(s);
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto out;
	}
	free(row->env_json);
	free(row->secrets_json);
	row->env_json = e;
	row->secrets_json = s;
	r = 0;
out:
	json_decref(names);
	json_decref(env);
	return r;
}

void sbx__net_secrets(struct sbx_mgr *m, const char *account, const char *names_json, int slot)
{
	json_t *names = json_loads(names_json, 0, NULL);
	if (!m->cfg.net || slot == NET_NO_SLOT || !json_array_size(names)) {
		json_decref(names);
		return;
	}
	json_t *list = json_array();
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v)
	{
		struct store_secret x;
		const char *name = json_string_value(v);
		if (!name || store_secret_get(m->store, account, name, &x) < 0)
			continue; /* deleted since: its placeholder stays one */
		json_t *hosts = json_loads(x.hosts_json, 0, NULL);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:o*, s:b}", "name", x.name,
						      "placeholder", x.placeholder, "value", x.value,
						      "hosts", hosts, "http", x.allow_http));
		store_secret_release(&x);
	}
	char err[256];
	if (net_set_secrets(m->cfg.net, slot, list, NULL, err, sizeof(err)) < 0)
		log_warn("account '%s': its secrets are not in use: %s", account, err);
	json_decref(list);
	json_decref(names);
}

static int holds_secrets_of(const struct sbx *s, const void *account)
{
	return (s->state == SBX_RUNNING || s->state == SBX_SNAPSHOTTING) &&
	       !strcmp(s->account, account);
}

void sbx_secrets_changed(struct sbx_mgr *m, const char *account)
{
	struct sbx **v;
	size_t n = sbx__each(m, holds_secrets_of, account, &v);
	for (size_t i = 0; i < n; i++) {
		struct sbx *s = v[i];
		/* Under its lock the slot stays its own (sbx_net.c). */
		pthread_mutex_lock(&s->mu);
		if (s->secrets_json && strcmp(s->secrets_json, "[]"))
			sbx__net_secrets(m, s->account, s->secrets_json, s->net_slot);
		pthread_mutex_unlock(&s->mu);
	}
	sbx__put_all(v, n);
}
