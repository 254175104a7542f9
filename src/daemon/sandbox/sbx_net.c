/*
 * sbx_net: a sandbox's network. Each VM gets a namespace as it starts and
 * loses it when QEMU is gone (a paused sandbox holds none: its policy is
 * in its row and applies again at the resume). The policy is kept as the
 * API spells it, compact; "" stands for the daemon's default, so a change
 * of the default reaches those sandboxes at their next start.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "daemon/net/net.h"
#include "daemon/net/policy.h"
#include "priv/priv.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses text ("" or NULL: the default) into p. */
static int policy_of(struct sbx_mgr *m, const char *text, struct net_policy *p, char *err,
		     size_t errlen)
{
	const char *t = text && *text ? text : m->cfg.net_default;
	json_error_t je;
	json_t *j = json_loads(t ? t : "{\"mode\":\"deny-all\"}", 0, &je);
	if (!j) {
		snprintf(err, errlen, "network policy is not JSON: %s", je.text);
		return -EINVAL;
	}
	int r = net_policy_parse(j, p, err, errlen);
	json_decref(j);
	return r;
}

char *sbx_network_text(struct sbx_mgr *m, const json_t *policy, char *err, size_t errlen)
{
	struct net_policy p;
	if (net_policy_parse(policy, &p, err, errlen) < 0)
		return NULL;
	char *text = NULL;
	if (!m->cfg.net && p.mode != NET_DENY_ALL) {
		snprintf(err, errlen, "this daemon runs without networks (--net off): only "
				      "deny-all can be had");
	} else {
		json_t *j = net_policy_json(&p);
		text = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!text)
			snprintf(err, errlen, "out of memory");
	}
	net_policy_free(&p);
	return text;
}

json_t *sbx_network_json(struct sbx_mgr *m, const char *network_json)
{
	struct net_policy p;
	char err[256];
	if (!m->cfg.net || policy_of(m, network_json, &p, err, sizeof(err)) < 0)
		return NULL;
	json_t *j = net_policy_json(&p);
	net_policy_free(&p);
	return j;
}

/* A booted guest trusts the egress CA from now on (snapshots of it too):
 * in the system bundles, which curl, OpenSSL, Python (Debian's certifi
 * too) and Node (Debian's, built to use it) read, and as a file
 * update-ca-certificates keeps; the agent writes them (P_TRUST), so an
 * image without a shell trusts it too. */
struct trust_wait {
	int done, err;
};

static void trust_cb(void *arg, const struct proto_frame *f)
{
	struct trust_wait *w = arg;
	if (f->type != P_OK && f->type != P_ERROR)
		return;
	uint32_t e = EIO;
	if (f->type == P_ERROR && proto_check_attrs(f) == 0)
		proto_get_u32(f, A_ERRNO, &e);
	w->err = f->type == P_OK ? 0 : -(int)(e && e < 4096 ? e : EIO);
	w->done = 1;
}

static int trust_ca(struct sbx_mgr *m, struct vm *vm)
{
	const char *pem = net_ca_pem(m->cfg.net);
	struct trust_wait w = { 0 };
	uint32_t id;
	struct pbuf *b = agentc_begin(vm_agent(vm), P_TRUST, trust_cb, &w, &id);
	if (!b)
		return -ENOTCONN;
	if (proto_put(b, A_BYTES, pem, (uint32_t)strlen(pem)) < 0) {
		agentc_abort(vm_agent(vm));
		return -ENOMEM;
	}
	int r = agentc_end(vm_agent(vm));
	if (r == 0)
		r = vm_run(vm, &w.done, 60000);
	if (!w.done)
		agentc_forget(vm_agent(vm), id); /* w is this frame's */
	return r < 0 ? r : w.err;
}

int sbx__start(struct sbx_mgr *m, struct vm_config *vc, const char *network_json, int *slot,
	       struct vm **vm, char *err, size_t errlen)
{
	*slot = NET_NO_SLOT;
	char ns[128];
	if (m->cfg.net) {
		struct net_policy p;
		int r = policy_of(m, network_json, &p, err, errlen);
		if (r == 0)
			r = net_create(m->cfg.net, &p, slot, err, errlen);
		net_policy_free(&p);
		if (r < 0)
			return -EIO; /* not the VM's: no snapshot is to blame */
		net_ns_path(m->cfg.net, *slot, ns, sizeof(ns));
		vc->netns = ns;
	}
	vc->launch = priv_launch_ops(m->cfg.priv); /* NULL: not jailed, started here */
	vc->net_slot = *slot;
	vc->trust = m->cfg.net ? net_ca_id(m->cfg.net) : NULL; /* trust_ca's, or the snapshot's */
	int r = vm_start(vc, vm, err, errlen);
	vc->netns = NULL; /* ns goes with this frame */
	if (r == 0 && m->cfg.net && !vc->restore && (r = trust_ca(m, *vm)) < 0) {
		snprintf(err, errlen, "cannot add the egress CA to the guest's roots: %s",
			 strerror(-r));
		vm_free(*vm, 0);
		*vm = NULL;
		r = -EIO;
	}
	if (r < 0) {
		sbx__net_down(m, *slot);
		*slot = NET_NO_SLOT;
	}
	return r;
}

void sbx__net_keep(struct sbx_mgr *m, const struct store_sbx *row)
{
	if (!m->cfg.net || row->net_slot == NET_NO_SLOT)
		return;
	struct net_policy p;
	char err[256];
	int r = policy_of(m, row->network_json, &p, err, sizeof(err));
	if (r == 0)
		r = net_keep(m->cfg.net, row->net_slot, &p, err, sizeof(err));
	net_policy_free(&p);
	if (r < 0)
		log_warn("sandbox %s: its network lost its resolver: %s", row->id, err);
}

void sbx__net_down(struct sbx_mgr *m, int slot)
{
	if (m->cfg.net && slot != NET_NO_SLOT)
		net_destroy(m->cfg.net, slot);
}

int sbx__net_set(struct sbx_mgr *m, int slot, const char *network_json, char *err, size_t errlen)
{
	if (!m->cfg.net || slot == NET_NO_SLOT)
		return 0;
	struct net_policy p;
	int r = policy_of(m, network_json, &p, err, errlen);
	if (r == 0 && (r = net_apply(m->cfg.net, slot, &p, err, errlen)) < 0)
		r = -EIO;
	net_policy_free(&p);
	return r;
}

int sbx__hold_id(struct sbx_mgr *m, const char *id, struct sbx **sp, enum sbx_state *now,
		 char *err, size_t errlen)
{
	struct sbx *s = sbx__get(m, id);
	*now = SBX_STOPPED;
	int r = s ? sbx__hold(s, 60000, now) : -EPERM;
	if (r == -EBUSY) {
		snprintf(err, errlen, "sandbox '%s' is busy", id);
	} else if (r < 0) {
		struct store_sbx row;
		if (store_sbx_get(m->store, id, &row) < 0) {
			snprintf(err, errlen, "no sandbox '%s'", id);
			r = -ENOENT;
		} else {
			snprintf(err, errlen, "sandbox '%s' is %s", id, row.state);
			store_sbx_release(&row);
			r = -ESHUTDOWN;
		}
	}
	if (r < 0) {
		sbx_put(s);
		return r;
	}
	*sp = s;
	return 0;
}

int sbx_set_network(struct sbx_mgr *m, const char *id, const char *network_text, char *err,
		    size_t errlen)
{
	struct sbx *s;
	enum sbx_state now;
	int r = sbx__hold_id(m, id, &s, &now, err, errlen);
	if (r < 0)
		return r;
	/* The hold keeps pause, fork and kill away, the lock a VM that ends
	 * by itself (pump_ended): the slot stays ours. Paused, it applies at
	 * the resume. */
	if (now == SBX_RUNNING) {
		pthread_mutex_lock(&s->mu);
		r = sbx__net_set(m, s->net_slot, network_text, err, errlen);
		pthread_mutex_unlock(&s->mu);
	}
	if (r == 0 && (r = store_sbx_set_policy(m->store, id, network_text)) < 0)
		snprintf(err, errlen, "cannot record the policy: %s", strerror(-r));
	if (r == 0)
		log_info("sandbox %s: network policy now %s", id, network_text);
	sbx__unhold(s);
	sbx_put(s);
	return r;
}

int sbx_net_counters(struct sbx_mgr *m, const char *id, struct net_counters *c)
{
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s)
		return -ENOENT;
	pthread_mutex_lock(&s->mu);
	int r = s->net_slot == NET_NO_SLOT ? -ENOENT : net_counters(m->cfg.net, s->net_slot, c);
	pthread_mutex_unlock(&s->mu);
	sbx_put(s);
	return r;
}

/* The token's check costs the same wherever it differs. */
static int token_ok(const struct store_sbx *row, const char *token)
{
	if (row->is_public)
		return 1;
	size_t n = strlen(row->traffic_token);
	return token && n && strlen(token) == n && !CRYPTO_memcmp(token, row->traffic_token, n);
}

int sbx_port_dial(struct sbx_mgr *m, const char *id, const char *token, unsigned port, int *fd,
		  char *err, size_t errlen)
{
	struct store_sbx row;
	if (store_sbx_get(m->store, id, &row) < 0) {
		snprintf(err, errlen, "no sandbox '%s'", id);
		return -ENOENT;
	}
	int ok = token_ok(&row, token), stopped = !strcmp(row.state, "stopped") ||
						   !strcmp(row.state, "lost");
	store_sbx_release(&row);
	if (!ok) {
		snprintf(err, errlen, "sandbox '%s' is not public: its traffic token is needed", id);
		return -EACCES;
	}
	if (!fd)
		return 0;
	if (stopped) {
		snprintf(err, errlen, "sandbox '%s' is stopped", id);
		return -ESHUTDOWN;
	}
	if (!m->cfg.net) {
		snprintf(err, errlen, "this daemon runs without networks (--net off)");
		return -ENETUNREACH;
	}
	/* A paused sandbox resumes for its first request; the others a
	 * browser sends alongside wait for that resume. */
	struct sbx *s;
	int r = sbx_acquire(m, id, NULL, SBX_RESUME, &s, err, errlen);
	if (r < 0)
		return r;
	/* Opened under the lock: a slot let go and taken by another sandbox
	 * meanwhile would be that one's network. */
	pthread_mutex_lock(&s->mu);
	int slot = s->net_slot;
	int nsfd = slot == NET_NO_SLOT ? -ENETUNREACH : net_ns_open(m->cfg.net, slot);
	pthread_mutex_unlock(&s->mu);
	r = nsfd < 0 ? nsfd : net_dial_guest(m->cfg.net, slot, nsfd, port, 5000);
	if (nsfd >= 0)
		close(nsfd);
	if (r >= 0) /* open until sbx_port_hangup: it is in use meanwhile */
		atomic_fetch_add(&s->port_conns, 1);
	sbx_put(s);
	if (r == -ECONNREFUSED)
		snprintf(err, errlen,
			 "nothing listens on port %u in sandbox '%s' (a server must listen on "
			 "0.0.0.0, not 127.0.0.1)", port, id);
	else if (r == -ETIMEDOUT)
		snprintf(err, errlen, "port %u of sandbox '%s' did not answer in 5 s", port, id);
	else if (r < 0)
		snprintf(err, errlen, "cannot reach port %u of sandbox '%s': %s", port, id,
			 strerror(-r));
	if (r < 0)
		return r;
	*fd = r;
	return 0;
}

void sbx_port_hangup(struct sbx_mgr *m, const char *id)
{
	struct sbx *s = sbx__get(m, id);
	if (!s)
		return;
	/* Never below 0: a count of another object of the same id (it moved
	 * away and back meanwhile) must not keep this one awake for ever. */
	int n = atomic_load(&s->port_conns);
	while (n > 0 && !atomic_compare_exchange_weak(&s->port_conns, &n, n - 1))
		;
	atomic_store(&s->active_ms, clock_ms());
	sbx_put(s);
}
