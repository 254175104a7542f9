/*
 * net: the slots of the range, the policies' marks, and what serves each
 * namespace. What needs root (the namespaces, their links and nftables
 * rules, sockets made inside them) is the privileged helper's
 * (src/priv/priv_net.c); the resolver and proxy that serve them, the
 * egress CA and the secrets are cpuos-netd's (netd.h), given each
 * namespace's sockets and told its policy and secrets. See net.h for the
 * layout.
 */
#include "daemon/net/net.h"

#include "common/errbuf.h"
#include "common/log.h"
#include "common/netconst.h"
#include "common/tcp.h"
#include "daemon/net/net_impl.h"
#include "daemon/net/netd.h"
#include "daemon/net/policy.h"
#include "priv/priv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS_DIR "/run/netns"

struct net {
	char tag[8];        /* 4 hex digits */
	struct priv *priv;  /* what makes namespaces and their rules */
	int nslots, next;
	unsigned marks;
	pthread_mutex_t mu;
	uint8_t *used;      /* one byte per slot */
	struct netd *netd;  /* the resolver, the proxy, the CA: cpuos-netd */
};

int net__dial(struct priv *priv, int slot, int nsfd, const struct sockaddr_in *dst, int ms)
{
	char err[128];
	int fd = priv_ns_socket(priv, slot, nsfd, PRIV_SOCK_DIAL, err, sizeof(err));
	if (fd < 0)
		return fd;
	int e = 0;
	socklen_t el = sizeof(e);
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
		e = errno;
		if (e == EINPROGRESS) {
			int w = tcp_wait(fd, POLLOUT, ms);
			e = w == 0 ? ETIMEDOUT
			    : w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 ? EIO
			    : e;
		}
	}
	if (e) {
		close(fd);
		return -e;
	}
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

void net_ns_path(const struct net *n, int slot, char *out, size_t len)
{
	priv_ns_path(n->tag, slot, out, len);
}

int net_ns_open(const struct net *n, int slot)
{
	int fd = priv_ns_open(n->priv, slot);
	return fd >= 0 ? fd : -ENETUNREACH;
}

int net_dial_guest(const struct net *n, int slot, int nsfd, unsigned port, int ms)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, NET_GUEST_IP, &dst.sin_addr);
	return net__dial(n->priv, slot, nsfd, &dst, ms);
}

void net_tag(const char *state_dir, char out[8])
{
	uint8_t md[SHA256_DIGEST_LENGTH];
	SHA256((const uint8_t *)state_dir, strlen(state_dir), md);
	snprintf(out, 8, "%02x%02x", md[0], md[1]);
}

int net_slots(const char *range, char *err, size_t errlen)
{
	struct net_cidr c;
	if (net_cidr_parse(range, &c) < 0 || c.family != AF_INET || c.prefix < 16 || c.prefix > 24) {
		snprintf(err, errlen, "--net-range '%s' is not an IPv4 range of /16 to /24", range);
		return -EINVAL;
	}
	return 1 << (32 - c.prefix - 2);
}

int net_open(const char *range, const char *state_dir, struct netd *netd, struct priv *priv,
	     struct net **out, char *err, size_t errlen)
{
	int nslots = net_slots(range, err, errlen);
	if (nslots < 0)
		return nslots;
	struct net *n = calloc(1, sizeof(*n));
	if (!n || !(n->used = calloc((size_t)nslots, 1))) {
		free(n);
		return -ENOMEM;
	}
	net_tag(state_dir, n->tag);
	n->priv = priv;
	n->netd = netd;
	n->nslots = nslots;
	pthread_mutex_init(&n->mu, NULL);
	*out = n;
	return 0;
}

void net_close(struct net *n)
{
	if (!n)
		return;
	pthread_mutex_destroy(&n->mu);
	free(n->used);
	free(n);
}

/* Round the range, so a slot just let go rests while the kernel clears
 * what its namespace left. */
static int take_slot(struct net *n)
{
	pthread_mutex_lock(&n->mu);
	int slot = -1;
	for (int k = 0; k < n->nslots && slot < 0; k++) {
		int i = (n->next + k) % n->nslots;
		if (!n->used[i])
			n->used[slot = i] = 1;
	}
	if (slot >= 0)
		n->next = (slot + 1) % n->nslots;
	pthread_mutex_unlock(&n->mu);
	return slot;
}

static void put_slot(struct net *n, int slot)
{
	pthread_mutex_lock(&n->mu);
	if (slot >= 0 && slot < n->nslots)
		n->used[slot] = 0;
	pthread_mutex_unlock(&n->mu);
}

/* The policy as the resolver keeps it. */
static char *policy_text(const struct net_policy *p)
{
	json_t *j = net_policy_json(p);
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return t;
}

/* The sockets netd serves the namespace on: the resolver's and the
 * proxy's, made there by the helper. */
static int serve(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	char *text = policy_text(p);
	int nsfd = priv_ns_open(n->priv, slot), dfd = -1, pfd = -1, r;
	if (!text || nsfd < 0) {
		snprintf(err, errlen, "network %d is gone", slot);
		r = -ENETUNREACH;
		goto fail;
	}
	if ((dfd = priv_ns_socket(n->priv, slot, nsfd, PRIV_SOCK_DNS, err, errlen)) < 0 ||
	    (pfd = priv_ns_socket(n->priv, slot, nsfd, PRIV_SOCK_PROXY, err, errlen)) < 0) {
		r = dfd < 0 ? dfd : pfd;
		goto fail;
	}
	r = netd_attach(n->netd, slot, nsfd, dfd, pfd, text, err, errlen);
	nsfd = dfd = pfd = -1; /* netd's now, or closed */
fail:
	free(text);
	if (nsfd >= 0)
		close(nsfd);
	if (dfd >= 0)
		close(dfd);
	if (pfd >= 0)
		close(pfd);
	return r;
}

int net_keep(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	if (slot < 0 || slot >= n->nslots)
		return -EINVAL;
	pthread_mutex_lock(&n->mu);
	n->used[slot] = 1;
	pthread_mutex_unlock(&n->mu);
	return serve(n, slot, p, err, errlen);
}

/* A new mark for a policy (1..; 0 is no mark's). */
static unsigned next_mark(struct net *n)
{
	pthread_mutex_lock(&n->mu);
	unsigned m = ++n->marks ? n->marks : ++n->marks;
	pthread_mutex_unlock(&n->mu);
	return m;
}

int net_create(struct net *n, const struct net_policy *p, int *slotp, char *err, size_t errlen)
{
	int slot = take_slot(n);
	if (slot < 0) {
		snprintf(err, errlen, "no network left: all %d slots of the range are taken", n->nslots);
		return -ENOSPC;
	}
	int r = priv_ns_create(n->priv, slot, p, next_mark(n), err, errlen);
	if (r < 0 || (r = serve(n, slot, p, err, errlen)) < 0)
		goto fail;
	*slotp = slot;
	return 0;
fail:
	net_destroy(n, slot);
	return r;
}

int net_apply(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	/* The resolver first: an answer under the old policy that lands
	 * after the set's flush is taken back (dns.c). */
	char *text = policy_text(p);
	if (!text)
		return -ENOMEM;
	int r = netd_policy(n->netd, slot, text, err, errlen);
	free(text);
	if (r == 0)
		r = priv_ns_policy(n->priv, slot, p, next_mark(n), err, errlen);
	char cerr[256];
	netd_cut(n->netd, slot, cerr, sizeof(cerr)); /* its connections are asked again */
	return r;
}

int net_set_secrets(struct net *n, int slot, const char *account, const json_t *secrets,
		    const json_t *rules, char *err, size_t errlen)
{
	json_t *j = json_pack("{s:s}", "account", account);
	if (j && secrets)
		json_object_set(j, "secrets", (json_t *)secrets);
	if (j && rules)
		json_object_set(j, "rules", (json_t *)rules);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return -ENOMEM;
	int r = netd_secrets(n->netd, slot, text, err, errlen);
	free(text);
	return r;
}

int net_seal(struct net *n, const char *account, const char *name, const json_t *hosts, int http,
	     const char *value, char *out, size_t outlen, char *err, size_t errlen)
{
	json_t *j = json_pack("{s:s, s:s, s:O, s:b, s:s}", "account", account, "name", name,
			      "hosts", hosts, "http", http, "value", value);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	int r = netd_seal(n->netd, text, out, outlen, err, errlen);
	/* The value goes no further in this process's memory. */
	explicit_bzero(text, strlen(text));
	free(text);
	return r;
}

const char *net_ca_pem(const struct net *n)
{
	return netd_ca_pem(n->netd);
}

const char *net_ca_id(const struct net *n)
{
	return netd_ca_id(n->netd);
}

void net_destroy(struct net *n, int slot)
{
	char err[256];
	if (netd_detach(n->netd, slot, err, sizeof(err)) < 0)
		log_warn("network %d: %s", slot, err);
	if (priv_ns_destroy(n->priv, slot, err, sizeof(err)) < 0)
		log_warn("network %d: %s", slot, err);
	put_slot(n, slot);
}

void net_sweep(struct net *n)
{
	char prefix[32];
	int len = snprintf(prefix, sizeof(prefix), "cpuos-%s-", n->tag);
	DIR *d = opendir(NS_DIR);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)len))
			continue;
		int slot = atoi(e->d_name + len);
		pthread_mutex_lock(&n->mu);
		int kept = slot >= 0 && slot < n->nslots && n->used[slot];
		pthread_mutex_unlock(&n->mu);
		if (!kept)
			net_destroy(n, slot);
	}
	if (d)
		closedir(d);
}

int net_counters(struct net *n, int slot, struct net_counters *c)
{
	uint64_t refused = 0, sent = 0;
	int r = priv_ns_counters(n->priv, slot, &refused, &sent);
	c->refused_packets = refused;
	c->allowed_flows = sent;
	return r;
}
