/*
 * sbx_secret: a sandbox's egress secrets. A create names some of its
 * account's secrets; each one's placeholder goes into the sandbox's
 * environment under the secret's name, and the names into its row, so
 * forks, resumes and a restarted daemon give the same ones to the proxy
 * of its network again (sbx__run_vm). The values are read from the store
 * each time: a secret set again or deleted reaches running sandboxes at
 * once (sbx_secrets_changed). The store and this process hold each value
 * sealed by cpuos-netd, which alone opens it (net/seal.h): a value given
 * to the API is sealed at once (sbx_secret_seal), and one a daemon from
 * before kept plaintext is sealed at the start (sbx__secrets_seal_old).
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/errbuf.h"
#include "common/log.h"
#include "daemon/net/net.h"
#include "daemon/net/rules.h"
#include "daemon/net/seal.h"
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

void sbx__net_secrets(struct sbx_mgr *m, const char *account, const char *names_json,
		      const char *transforms_json, int slot)
{
	if (!m->cfg.net || slot == NET_NO_SLOT)
		return;
	json_t *names = json_loads(names_json ? names_json : "[]", 0, NULL);
	json_t *rules = json_loads(transforms_json ? transforms_json : "[]", 0, NULL);
	if (!names)
		names = json_array();
	rules_secret_names(rules, names); /* the proxy looks their placeholders up */
	json_t *list = json_array();
	size_t i;
	json_t *v;
	json_array_foreach(names, i, v)
	{
		struct store_secret x;
		const char *name = json_string_value(v);
		if (!name || store_secret_get(m->store, account, name, &x) < 0)
			continue; /* deleted since: its placeholder stays one */
		if (!x.sealed) { /* not yet sealed: it waits for that */
			log_warn("secret %s of account %s is not sealed: not used", x.name,
				 account);
			store_secret_release(&x);
			continue;
		}
		json_t *hosts = json_loads(x.hosts_json, 0, NULL);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:o*, s:b}", "name", x.name,
						      "placeholder", x.placeholder, "sealed",
						      x.value, "hosts", hosts, "http",
						      x.allow_http));
		store_secret_release(&x);
	}
	char err[256] = "out of memory";
	if (net_set_secrets(m->cfg.net, slot, account, list, rules, err, sizeof(err)) < 0)
		log_warn("account '%s': its secrets and request transformations are not in use: %s",
			 account, err);
	json_decref(list);
	json_decref(names);
	json_decref(rules);
}

int sbx_secret_seal(struct sbx_mgr *m, const char *account, const char *name,
		    const json_t *hosts, int http, const char *value, char *out, size_t outlen,
		    char *err, size_t errlen)
{
	if (!m->cfg.net)
		return errbuf_set(err, errlen, -ENOTSUP,
				  "this daemon runs without networks (--net off): no secrets");
	return net_seal(m->cfg.net, account, name, hosts, http, value, out, outlen, err, errlen);
}

void sbx__secrets_seal_old(struct sbx_mgr *m)
{
	struct store_secret *xs = NULL;
	size_t n = 0, done = 0;
	if (!m->cfg.net || store_secret_list(m->store, NULL, NULL, &xs, &n) < 0)
		return;
	size_t cap = SEAL_TEXT_MAX(SECRET_MAX_VALUE);
	char *sealed = malloc(cap);
	for (size_t i = 0; sealed && i < n; i++) {
		struct store_secret *x = &xs[i];
		json_t *hosts = json_loads(x->hosts_json, 0, NULL);
		char err[256];
		int r = x->sealed ? 1
				  : sbx_secret_seal(m, x->account, x->name, hosts, x->allow_http,
						    x->value, sealed, cap, err, sizeof(err));
		json_decref(hosts);
		if (r == 0 && (r = store_secret_seal(m->store, x->account, x->name, x->value,
						     sealed)) < 0)
			snprintf(err, sizeof(err), "cannot store it: %s", strerror(-r));
		if (r < 0)
			log_warn("secret %s of account %s: not sealed (%s): not used until "
				 "set again", x->name, x->account, err);
		done += r == 0;
	}
	free(sealed);
	store_secret_free_list(xs, n);
	/* The plaintext overwritten lives on in free pages and the WAL. */
	if (done && store_scrub(m->store) < 0)
		log_warn("the store could not be rewritten: the values sealed now may be left "
			 "plaintext in its free pages");
	if (done)
		log_info("secrets an earlier daemon stored plaintext, sealed now: %zu", done);
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
		if (strcmp(s->secrets_json, "[]") || strcmp(s->transforms_json, "[]"))
			sbx__net_secrets(m, s->account, s->secrets_json, s->transforms_json,
					 s->net_slot);
		pthread_mutex_unlock(&s->mu);
	}
	sbx__put_all(v, n);
}

/* Are the secrets rules names the account's? 0, or -ENOENT with which. */
static int names_known(struct sbx_mgr *m, const char *account, const json_t *rules, char *err,
		       size_t errlen)
{
	json_t *names = json_array();
	rules_secret_names(rules, names);
	size_t i;
	json_t *v;
	int r = 0;
	json_array_foreach(names, i, v)
	{
		struct store_secret x;
		if (store_secret_get(m->store, account, json_string_value(v), &x) < 0) {
			snprintf(err, errlen, "no secret '%s'", json_string_value(v));
			r = -ENOENT;
			break;
		}
		store_secret_release(&x);
	}
	json_decref(names);
	return r;
}

int sbx_set_transforms(struct sbx_mgr *m, const char *id, const json_t *rules, int add,
		       char *err, size_t errlen)
{
	if (!m->cfg.net) {
		snprintf(err, errlen, "this daemon runs without networks (--net off): no request "
				      "transformations");
		return -EINVAL;
	}
	struct sbx *s;
	enum sbx_state now;
	int r = sbx__hold_id(m, id, &s, &now, err, errlen);
	if (r < 0)
		return r;
	/* Held: no pause, fork or kill meanwhile; the lock keeps the
	 * slot ours (as sbx_set_network). */
	pthread_mutex_lock(&s->mu);
	json_t *old = json_loads(s->transforms_json, 0, NULL);
	json_t *next = add ? rules_merge(old, rules) : json_deep_copy(rules);
	char *text = next ? json_dumps(next, JSON_COMPACT) : NULL;
	if (!text) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	} else if (json_array_size(next) > RULES_MAX) {
		snprintf(err, errlen, "a sandbox has at most %d request transformations",
			 RULES_MAX);
		r = -EINVAL;
	} else if ((r = names_known(m, s->account, next, err, errlen)) == 0 &&
		   (r = store_sbx_set_transforms(m->store, id, text)) < 0) {
		snprintf(err, errlen, "cannot record them: %s", strerror(-r));
	}
	if (r == 0) {
		free(s->transforms_json);
		s->transforms_json = text;
		text = NULL;
		if (now == SBX_RUNNING)
			sbx__net_secrets(m, s->account, s->secrets_json, s->transforms_json,
					 s->net_slot);
		log_info("sandbox %s: %zu request transformations", id, json_array_size(next));
	}
	pthread_mutex_unlock(&s->mu);
	free(text);
	json_decref(old);
	json_decref(next);
	sbx__unhold(s);
	sbx_put(s);
	return r;
}
