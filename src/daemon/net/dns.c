/*
 * dns: packets parsed and built with ldns; nothing here reads DNS wire
 * format by hand. See dns.h for what is answered how.
 */
#include "daemon/net/dns.h"

#include "common/clock.h"
#include "common/log.h"
#include "daemon/net/policy.h"
#include "lib/loop.h"
#include "lib/workers.h"
#include "priv/priv.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <ldns/ldns.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUERY 512     /* a query larger than this is no stub's */
#define MAX_ANSWER 1232   /* the EDNS size that does not fragment; larger is truncated */
#define MIN_KEEP_S 300    /* an answer's addresses stay allowed at least this long */
#define MAX_KEEP_S 86400
#define DNS_SEEN 256      /* answers kept per sandbox for the proxy */
#define SLOT_WORKERS 4    /* queries answered at once per sandbox */
#define DETACH_WAIT_MS 1000 /* an attach waits this long for its slot's last release */

/* What the resolver answered, for the proxy's check. */
struct seen {
	char name[254];
	uint32_t addr; /* network order */
	time_t until;
};

struct slot {
	struct dns *d;
	int fd;           /* -1: unused */
	int nsfd;         /* the namespace, held open */
	int dead;         /* detached: the loop's release closes fd */
	char *policy;
	int secrets;      /* the sandbox has egress secrets (dns_set_secrets) */
	struct seen *seen; /* DNS_SEEN entries, the oldest replaced first */
	unsigned nseen;
	unsigned gen;     /* which sandbox: a slot is used again */
	unsigned pgen;    /* which policy: answers under an older one are void */
	int workers;
};

struct dns {
	struct priv *priv; /* what adds to a namespace's "resolved" set */
	pthread_mutex_t mu;
	pthread_cond_t released; /* a detached slot's socket was closed */
	struct slot *slots;
	int nslots;
	struct loop *loop;         /* the reader's: the slots' sockets */
	struct workers workers;    /* a thread per query */
	pthread_t reader;
	char upstream[64];
	uint16_t port;
};

/* Well-known DNS over HTTPS endpoints: a lookup that would step around
 * this resolver. Refused unless a policy names one exactly. */
static const char *const doh_names[] = {
	"dns.google", "dns.google.com", "cloudflare-dns.com", "mozilla.cloudflare-dns.com",
	"one.one.one.one", "1dot1dot1dot1.cloudflare-dns.com", "dns.quad9.net", "dns9.quad9.net",
	"dns11.quad9.net", "doh.opendns.com", "dns.nextdns.io", "dns.adguard-dns.com",
	"doh.cleanbrowsing.org", "dns.mullvad.net", NULL,
};

/* --- answering --------------------------------------------------------- */

struct query {
	struct dns *d;
	int slot;
	unsigned gen, pgen;
	int fd;                 /* dups of the slot's socket and namespace: a slot */
	int nsfd;               /* given to another sandbox meanwhile is not ours */
	struct sockaddr_in from;
	uint8_t buf[MAX_QUERY];
	size_t len;
	char *policy;
	int secrets;
};

static int doh_name(const char *name)
{
	for (const char *const *p = doh_names; *p; p++)
		if (!strcmp(*p, name))
			return 1;
	return 0;
}

/* Does policy let the guest look up name? */
static int name_allowed(const struct net_policy *p, const char *name)
{
	if (!net_policy_host_allowed(p, name))
		return 0;
	if (p->mode == NET_ALLOW_ALL || !doh_name(name))
		return 1;
	for (size_t i = 0; i < p->nhosts; i++)
		if (!strcmp(p->hosts[i], name))
			return 1;
	return 0;
}

static ldns_resolver *resolver(struct dns *d)
{
	ldns_resolver *res = NULL;
	if (!d->upstream[0]) {
		if (ldns_resolver_new_frm_file(&res, NULL) != LDNS_STATUS_OK)
			return NULL;
	} else {
		ldns_rdf *ns = ldns_rdf_new_frm_str(LDNS_RDF_TYPE_A, d->upstream);
		res = ns ? ldns_resolver_new() : NULL;
		if (res && ldns_resolver_push_nameserver(res, ns) != LDNS_STATUS_OK) {
			ldns_resolver_deep_free(res);
			res = NULL;
		}
		ldns_rdf_deep_free(ns);
		if (res)
			ldns_resolver_set_port(res, d->port);
	}
	if (res) {
		ldns_resolver_set_timeout(res, (struct timeval){ .tv_sec = 2 });
		ldns_resolver_set_retry(res, 2);
		ldns_resolver_set_recursive(res, true);
	}
	return res;
}

/* Is q's answer still for the sandbox and the policy it was asked under? */
static int current(struct query *q)
{
	struct slot *s = &q->d->slots[q->slot];
	return s->seen && !s->dead && s->gen == q->gen && s->pgen == q->pgen;
}

static void remember(struct query *q, const char *name, const uint8_t *addr, uint32_t ttl)
{
	pthread_mutex_lock(&q->d->mu);
	struct slot *s = &q->d->slots[q->slot];
	if (current(q)) {
		struct seen *e = &s->seen[s->nseen++ % DNS_SEEN];
		snprintf(e->name, sizeof(e->name), "%s", name);
		memcpy(&e->addr, addr, 4);
		e->until = time(NULL) + ttl;
	}
	pthread_mutex_unlock(&q->d->mu);
}

/* The answer's allowed A records go to the namespace's "resolved" set,
 * and are remembered for the proxy. */
static void allow_addrs(struct query *q, const char *name, const ldns_rr_list *rrs)
{
	struct priv_addr addrs[PRIV_MAX_ADDRS];
	size_t n = 0;
	for (size_t i = 0; i < ldns_rr_list_rr_count(rrs) && n < PRIV_MAX_ADDRS; i++) {
		ldns_rr *rr = ldns_rr_list_rr(rrs, i);
		ldns_rdf *a = ldns_rr_get_type(rr) == LDNS_RR_TYPE_A ? ldns_rr_rdf(rr, 0) : NULL;
		if (!a || ldns_rdf_size(a) != 4)
			continue;
		uint32_t ttl = ldns_rr_ttl(rr);
		ttl = ttl < MIN_KEEP_S ? MIN_KEEP_S : ttl > MAX_KEEP_S ? MAX_KEEP_S : ttl;
		remember(q, name, ldns_rdf_data(a), ttl);
		memcpy(addrs[n].ip, ldns_rdf_data(a), 4);
		addrs[n++].ttl_s = ttl;
	}
	char err[256];
	pthread_mutex_lock(&q->d->mu);
	int now = current(q);
	pthread_mutex_unlock(&q->d->mu);
	if (!n || !now)
		return;
	if (priv_ns_resolved(q->d->priv, q->slot, q->nsfd, 1, addrs, n, err, sizeof(err)) < 0)
		log_warn("dns: cannot allow the addresses of an answer: %s", err);
	/* A policy that came meanwhile flushed the set before or after us:
	 * if before, what we added goes again. */
	pthread_mutex_lock(&q->d->mu);
	now = current(q);
	pthread_mutex_unlock(&q->d->mu);
	if (!now)
		priv_ns_resolved(q->d->priv, q->slot, q->nsfd, 0, addrs, n, err, sizeof(err));
}

enum dns_verdict dns_query_read(const uint8_t *buf, size_t len, const struct net_policy *p,
				struct dns_query *q)
{
	*q = (struct dns_query){ 0 };
	ldns_pkt *pkt = NULL;
	/* One question, a query (not an answer or an update): anything else
	 * is not worth an answer. */
	if (ldns_wire2pkt(&pkt, buf, len) != LDNS_STATUS_OK || ldns_pkt_qr(pkt) ||
	    ldns_pkt_get_opcode(pkt) != LDNS_PACKET_QUERY || ldns_pkt_qdcount(pkt) != 1 ||
	    !ldns_rr_list_rr(ldns_pkt_question(pkt), 0)) {
		ldns_pkt_free(pkt);
		return DNS_DROP;
	}
	ldns_rr *qrr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
	q->pkt = pkt;
	q->type = (uint16_t)ldns_rr_get_type(qrr);
	q->cls = (uint16_t)ldns_rr_get_class(qrr);
	q->name = ldns_rdf2str(ldns_rr_owner(qrr));
	size_t n = q->name ? strlen(q->name) : 0;
	if (n && q->name[n - 1] == '.')
		q->name[--n] = '\0';
	for (size_t i = 0; i < n; i++) /* names are the same in any case */
		q->name[i] = (char)tolower((unsigned char)q->name[i]);
	if (!q->name || !name_allowed(p, q->name))
		return DNS_REFUSE;
	if (q->type == LDNS_RR_TYPE_AAAA || q->cls != LDNS_RR_CLASS_IN)
		return DNS_EMPTY; /* no IPv6 here: an empty answer sends the guest to IPv4 */
	return DNS_ASK;
}

void dns_query_release(struct dns_query *q)
{
	ldns_pkt_free(q->pkt);
	free(q->name);
	*q = (struct dns_query){ 0 };
}

/* The answer to send query dq, read as v: rcode alone (with the
 * question), or the upstream's answer less what the policy refuses. */
static ldns_pkt *answer(struct query *q, const struct dns_query *dq, enum dns_verdict v,
			const struct net_policy *p)
{
	ldns_rr *qrr = ldns_rr_list_rr(ldns_pkt_question(dq->pkt), 0);
	ldns_pkt *out = ldns_pkt_new();
	if (!out)
		return NULL;
	ldns_pkt_set_id(out, ldns_pkt_id(dq->pkt));
	ldns_pkt_set_qr(out, true);
	ldns_pkt_set_rd(out, ldns_pkt_rd(dq->pkt));
	ldns_pkt_set_ra(out, true);
	ldns_pkt_push_rr(out, LDNS_SECTION_QUESTION, ldns_rr_clone(qrr));
	if (v == DNS_REFUSE)
		ldns_pkt_set_rcode(out, LDNS_RCODE_REFUSED);
	if (v != DNS_ASK)
		return out;
	ldns_rr_type type = ldns_rr_get_type(qrr);
	ldns_resolver *res = resolver(q->d);
	ldns_pkt *up = NULL;
	if (!res || ldns_resolver_send(&up, res, ldns_rr_owner(qrr), type, LDNS_RR_CLASS_IN,
				       LDNS_RD) != LDNS_STATUS_OK || !up) {
		ldns_pkt_set_rcode(out, LDNS_RCODE_SERVFAIL);
		if (res)
			ldns_resolver_deep_free(res);
		return out;
	}
	ldns_resolver_deep_free(res);
	ldns_pkt_set_rcode(out, ldns_pkt_get_rcode(up));
	ldns_rr_list *kept = ldns_rr_list_new();
	ldns_rr_list *ans = ldns_pkt_answer(up);
	for (size_t i = 0; kept && i < ldns_rr_list_rr_count(ans); i++) {
		ldns_rr *rr = ldns_rr_list_rr(ans, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		ldns_rdf *a = t == LDNS_RR_TYPE_A ? ldns_rr_rdf(rr, 0) : NULL;
		if (t == LDNS_RR_TYPE_AAAA)
			continue;
		if (t == LDNS_RR_TYPE_A &&
		    (!a || ldns_rdf_size(a) != 4 ||
		     !net_policy_resolved_allowed(p, AF_INET, ldns_rdf_data(a))))
			continue; /* rebinding: the name may not point there */
		ldns_rr *c = ldns_rr_clone(rr);
		if (c) {
			ldns_rr_list_push_rr(kept, c);
			ldns_pkt_push_rr(out, LDNS_SECTION_ANSWER, ldns_rr_clone(c));
		}
	}
	/* allow-all needs no list, but in a sandbox with secrets: their
	 * hosts' connections must meet the proxy, and so do the others', so
	 * that a placeholder sent in plain HTTP to a host it is not bound to
	 * is seen (and logged). */
	if (kept && (p->mode != NET_ALLOW_ALL || q->secrets))
		allow_addrs(q, dq->name, kept);
	ldns_rr_list_deep_free(kept);
	ldns_pkt_free(up);
	return out;
}

static void answer_main(void *arg)
{
	struct query *q = arg;
	struct dns_query dq = { 0 };
	enum dns_verdict v;
	struct net_policy p = { 0 };
	json_t *pj = json_loads(q->policy, 0, NULL);
	char err[256];
	if (pj && net_policy_parse(pj, &p, err, sizeof(err)) == 0 &&
	    (v = dns_query_read(q->buf, q->len, &p, &dq)) != DNS_DROP) {
		ldns_pkt *out = answer(q, &dq, v, &p);
		uint8_t *wire = NULL;
		size_t size = 0;
		if (out && ldns_pkt2wire(&wire, out, &size) == LDNS_STATUS_OK && size > MAX_ANSWER) {
			/* Too big for UDP: the header and question, truncated. */
			free(wire);
			wire = NULL;
			ldns_rr_list_deep_free(ldns_pkt_answer(out));
			ldns_pkt_set_answer(out, ldns_rr_list_new());
			ldns_pkt_set_ancount(out, 0);
			ldns_pkt_set_tc(out, true);
			if (ldns_pkt2wire(&wire, out, &size) != LDNS_STATUS_OK)
				size = 0;
		}
		if (wire && size)
			sendto(q->fd, wire, size, 0, (struct sockaddr *)&q->from, sizeof(q->from));
		free(wire);
		ldns_pkt_free(out);
	}
	dns_query_release(&dq);
	net_policy_free(&p);
	json_decref(pj);
	close(q->fd);
	close(q->nsfd);
	free(q->policy);
	pthread_mutex_lock(&q->d->mu);
	if (q->d->slots[q->slot].gen == q->gen)
		q->d->slots[q->slot].workers--;
	pthread_mutex_unlock(&q->d->mu);
	free(q);
}

/* --- the reader ---------------------------------------------------------- */

/* Reads one datagram from slot i (locked) and hands it to a worker. */
static void take_query(struct dns *d, int i)
{
	struct slot *s = &d->slots[i];
	struct query *q = calloc(1, sizeof(*q));
	if (!q)
		return;
	socklen_t fl = sizeof(q->from);
	ssize_t n = recvfrom(s->fd, q->buf, sizeof(q->buf), MSG_TRUNC, (struct sockaddr *)&q->from, &fl);
	if (n <= 0 || (size_t)n > sizeof(q->buf) || s->workers >= SLOT_WORKERS) {
		free(q); /* nothing, oversized, or too many at once: dropped */
		return;
	}
	q->d = d;
	q->slot = i;
	q->gen = s->gen;
	q->pgen = s->pgen;
	q->len = (size_t)n;
	q->policy = strdup(s->policy ? s->policy : "");
	q->secrets = s->secrets;
	q->fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 3);
	q->nsfd = fcntl(s->nsfd, F_DUPFD_CLOEXEC, 3);
	/* past DNS_MAX_WORKERS at once, dropped as well */
	if (!q->policy || q->fd < 0 || q->nsfd < 0 || workers_spawn(&d->workers, answer_main, q)) {
		if (q->fd >= 0)
			close(q->fd);
		if (q->nsfd >= 0)
			close(q->nsfd);
		free(q->policy);
		free(q);
	} else {
		s->workers++;
	}
}

/* A slot's socket is readable (the loop's thread). */
static void on_query(struct loop *l, int fd, short revents, void *arg)
{
	(void)l, (void)revents;
	struct slot *s = arg;
	struct dns *d = s->d;
	pthread_mutex_lock(&d->mu);
	if (s->fd == fd && !s->dead)
		take_query(d, (int)(s - d->slots));
	pthread_mutex_unlock(&d->mu);
}

/* A detached slot's socket is out of the loop: closed here only, so one
 * polled is never another's. */
static void on_release(int fd, void *arg)
{
	struct slot *s = arg;
	struct dns *d = s->d;
	pthread_mutex_lock(&d->mu);
	if (s->fd == fd) {
		close(s->fd);
		close(s->nsfd);
		free(s->policy);
		free(s->seen);
		*s = (struct slot){ .d = d, .fd = -1, .nsfd = -1, .gen = s->gen + 1 };
	}
	pthread_cond_broadcast(&d->released);
	pthread_mutex_unlock(&d->mu);
}

static void *reader_main(void *arg)
{
	struct dns *d = arg;
	int r = loop_run(d->loop);
	if (r < 0)
		log_error("dns: the reader stopped: %s", strerror(-r));
	return NULL;
}

int dns_open(const char *upstream, int nslots, struct priv *priv, struct dns **out, char *err,
	     size_t errlen)
{
	struct dns *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->priv = priv;
	pthread_mutex_init(&d->mu, NULL);
	clock_cond_init(&d->released);
	d->nslots = nslots;
	d->port = 53;
	d->slots = calloc((size_t)nslots, sizeof(*d->slots));
	int r = -ENOMEM;
	if (!d->slots || workers_init(&d->workers, DNS_MAX_WORKERS, 0, NULL) < 0)
		goto fail_workers;
	if ((r = loop_new(&d->loop)) < 0)
		goto fail;
	for (int i = 0; i < nslots; i++)
		d->slots[i] = (struct slot){ .d = d, .fd = -1, .nsfd = -1 };
	if (upstream && *upstream) {
		char host[64];
		const char *colon = strchr(upstream, ':');
		snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - upstream) : 63, upstream);
		struct in_addr a;
		int port = colon ? atoi(colon + 1) : 53;
		if (inet_pton(AF_INET, host, &a) != 1 || port < 1 || port > 65535) {
			snprintf(err, errlen, "--dns-upstream '%s' is not ADDR or ADDR:PORT (IPv4)", upstream);
			r = -EINVAL;
			goto fail;
		}
		snprintf(d->upstream, sizeof(d->upstream), "%s", host);
		d->port = (uint16_t)port;
	}
	if (pthread_create(&d->reader, NULL, reader_main, d) != 0) {
		r = -EAGAIN;
		goto fail;
	}
	*out = d;
	return 0;
fail:
	loop_free(d->loop);
	workers_release(&d->workers);
fail_workers:
	free(d->slots);
	pthread_cond_destroy(&d->released);
	pthread_mutex_destroy(&d->mu);
	free(d);
	return r;
}

void dns_close(struct dns *d)
{
	if (!d)
		return;
	loop_stop(d->loop);
	pthread_join(d->reader, NULL);
	/* Workers hold only their own descriptors, d->mu and d->slots: wait
	 * them out; then the loop lets go of the slots' sockets. */
	workers_drain(&d->workers, -1);
	workers_release(&d->workers);
	loop_free(d->loop); /* which releases every slot still attached */
	free(d->slots);
	pthread_cond_destroy(&d->released);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

int dns_attach(struct dns *d, int slot, int nsfd, int fd, const char *policy, char *err,
	       size_t errlen)
{
	if (slot < 0 || slot >= d->nslots) {
		close(fd);
		close(nsfd);
		return -EINVAL;
	}
	char *p = strdup(policy);
	struct seen *seen = calloc(DNS_SEEN, sizeof(*seen));
	struct timespec until;
	clock_deadline(&until, DETACH_WAIT_MS);
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[slot];
	/* Detached, but the loop has not released it yet: it will soon. */
	while (s->fd >= 0 && s->dead &&
	       pthread_cond_timedwait(&d->released, &d->mu, &until) != ETIMEDOUT)
		;
	int busy = s->fd >= 0, r = busy ? -EBUSY : !p || !seen ? -ENOMEM : 0;
	/* Watched from now on: the loop looks the slot up under d->mu. */
	if (!r)
		r = loop_add(d->loop, fd, POLLIN, on_query, on_release, s);
	if (!r) {
		s->fd = fd;
		s->nsfd = nsfd;
		s->dead = 0;
		s->policy = p;
		s->secrets = 0;
		s->seen = seen;
		s->nseen = 0;
		s->workers = 0;
		s->gen++;
	}
	pthread_mutex_unlock(&d->mu);
	if (r) {
		close(fd);
		close(nsfd);
		free(p);
		free(seen);
		if (busy)
			snprintf(err, errlen, "DNS slot %d is still in use", slot);
		else
			snprintf(err, errlen, "out of memory");
		return r;
	}
	return 0;
}

void dns_set_policy(struct dns *d, int slot, const char *policy)
{
	char *p = strdup(policy);
	if (!p || slot < 0 || slot >= d->nslots) {
		free(p);
		return;
	}
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[slot];
	if (s->fd >= 0 && !s->dead) {
		free(s->policy);
		s->policy = p;
		p = NULL;
		s->pgen++; /* answers under the old policy no longer count */
		memset(s->seen, 0, DNS_SEEN * sizeof(*s->seen));
	}
	pthread_mutex_unlock(&d->mu);
	free(p);
}

void dns_set_secrets(struct dns *d, int slot, int on)
{
	if (slot < 0 || slot >= d->nslots)
		return;
	pthread_mutex_lock(&d->mu);
	if (d->slots[slot].fd >= 0 && !d->slots[slot].dead)
		d->slots[slot].secrets = on;
	pthread_mutex_unlock(&d->mu);
}

int dns_check(struct dns *d, int slot, const char *name, uint32_t addr)
{
	if (slot < 0 || slot >= d->nslots)
		return 0;
	char *text = NULL;
	int seen = 0;
	time_t now = time(NULL);
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[slot];
	if (s->fd >= 0 && !s->dead && s->seen) {
		for (unsigned i = 0; i < DNS_SEEN && !seen; i++)
			seen = s->seen[i].until > now && s->seen[i].addr == addr &&
			       !strcmp(s->seen[i].name, name);
		text = strdup(s->policy);
	}
	pthread_mutex_unlock(&d->mu);
	/* The policy may have changed since the answer: it is asked again. */
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	struct net_policy p = { 0 };
	char err[256];
	int ok = 0;
	if (j && net_policy_parse(j, &p, err, sizeof(err)) == 0)
		ok = (seen && name_allowed(&p, name) && net_policy_resolved_allowed(&p, AF_INET, &addr)
			      ? DNS_NAMED
			      : 0) |
		     (net_policy_addr_allowed(&p, AF_INET, &addr) ? DNS_ADDR : 0);
	net_policy_free(&p);
	json_decref(j);
	free(text);
	return ok;
}

void dns_detach(struct dns *d, int slot)
{
	if (slot < 0 || slot >= d->nslots)
		return;
	pthread_mutex_lock(&d->mu);
	int fd = d->slots[slot].fd >= 0 && !d->slots[slot].dead ? d->slots[slot].fd : -1;
	if (fd >= 0)
		d->slots[slot].dead = 1;
	/* Under d->mu, so the release (which takes it) comes after. */
	if (fd >= 0)
		loop_del(d->loop, fd);
	pthread_mutex_unlock(&d->mu);
}
