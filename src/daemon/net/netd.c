/*
 * netd: cpuos-netd's own side (netd.h): its start, and a loop that turns
 * each request (netd_msg.h) into a call of the resolver or the proxy.
 */
#include "daemon/net/netd.h"

#include "common/errbuf.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/unixsock.h"
#include "daemon/net/ca.h"
#include "daemon/net/dns.h"
#include "daemon/net/netd_msg.h"
#include "daemon/net/proxy.h"
#include "daemon/net/rules.h"
#include "daemon/net/seal.h"
#include "daemon/net/secret.h"
#include "daemon/sysfilter.h"
#include "priv/priv.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

struct server {
	int sock, nslots;
	struct ca *ca;
	struct dns *dns;
	struct proxy *proxy;
	struct priv *priv;
	struct seal *seal;
};

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A body of exactly size bytes from fd (a memfd cpuosd wrote: a regular
 * file, never a pipe that could hold netd), NUL-terminated: or NULL. */
static char *read_body(int fd, uint32_t size)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != (off_t)size)
		return NULL;
	char *b = malloc((size_t)size + 1);
	size_t got = 0;
	while (b && got < size) {
		ssize_t n = pread(fd, b + got, size - got, (off_t)got);
		if (n <= 0) {
			free(b);
			return NULL;
		}
		got += (size_t)n;
	}
	if (b)
		b[size] = '\0';
	return b;
}

/* The answer to request id: ND_ERROR with msg when rc < 0, else ND_READY
 * when pem is given, ND_SEALED when sealed is, ND_OK. */
static int answer(int sock, uint32_t id, int rc, const char *msg, const char *pem,
		  const char *ca_id, const char *sealed)
{
	struct pbuf b = { 0 };
	int r = proto_begin(&b, rc < 0 ? ND_ERROR : pem ? ND_READY : sealed ? ND_SEALED : ND_OK, 0,
			    id);
	if (r == 0 && rc < 0)
		r = proto_put_u32(&b, NT_ERRNO, (uint32_t)-rc) < 0 ||
				    proto_put_str(&b, NT_MESSAGE, msg[0] ? msg : strerror(-rc)) < 0
			    ? -ENOMEM
			    : 0;
	if (r == 0 && rc >= 0 && pem)
		r = proto_put_str(&b, NT_PEM, pem) < 0 || proto_put_str(&b, NT_CA_ID, ca_id) < 0
			    ? -ENOMEM
			    : 0;
	if (r == 0 && rc >= 0 && sealed)
		r = proto_put(&b, NT_SEALED, sealed, strlen(sealed));
	if (r == 0)
		r = proto_end(&b);
	ssize_t w = -1, len = (ssize_t)b.len;
	if (r == 0)
		while ((w = send(sock, b.data, b.len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
			;
	pbuf_release(&b);
	return r == 0 && w == len ? 0 : -EPIPE;
}

/* What a secret's value is bound to when sealed (seal.h): its account,
 * name, hosts (as secret_hosts_ok spells them) and whether it may go in
 * plain HTTP. A malloc'd text, or NULL. */
static char *bound_to(const char *account, const char *name, const json_t *hosts, int http)
{
	json_t *j = json_pack("{s:i, s:s, s:s, s:O, s:b}", "v", 1, "account", account, "name", name,
			      "hosts", hosts, "http", http);
	char *t = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	return t;
}

static int account_ok(const char *a)
{
	return a && a[0] && strlen(a) < 128;
}

/* ND_SEAL: {"account", "name", "hosts", "http", "value"} checked as the
 * API checks a secret, and the value sealed to the rest: 0 with *sealed,
 * or -errno with a reason. */
static int seal_value(struct server *s, const char *text, char **sealed, char *err,
		      size_t errlen)
{
	json_t *j = json_loads(text, 0, NULL), *hosts = NULL;
	const char *account = json_string_value(json_object_get(j, "account"));
	const char *name = json_string_value(json_object_get(j, "name"));
	const char *value = json_string_value(json_object_get(j, "value"));
	const json_t *http = json_object_get(j, "http");
	int r;
	if (!account_ok(account) || !secret_name_ok(name) || !json_is_boolean(http))
		r = errbuf_set(err, errlen, -EINVAL, "seal: no account, name or http");
	else if ((r = secret_value_ok(value, err, errlen)) == 0 &&
		 (r = secret_hosts_ok(json_object_get(j, "hosts"), &hosts, err, errlen)) == 0) {
		char *aad = bound_to(account, name, hosts, json_is_true(http));
		*sealed = aad ? seal_wrap(s->seal, aad, value, strlen(value)) : NULL;
		free(aad);
		if (!*sealed)
			r = errbuf_set(err, errlen, -ENOMEM, "seal: out of memory");
	}
	json_decref(hosts);
	json_decref(j);
	return r;
}

/* Each secret's value opened from its "sealed" text into "value"; one that
 * does not open (sealed with another key, or bound to other hosts than
 * those cpuosd now gives) is dropped, and said so. */
static void open_values(struct server *s, const char *account, json_t *secrets)
{
	for (size_t i = 0; i < json_array_size(secrets);) {
		json_t *e = json_array_get(secrets, i), *hosts = NULL;
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *sealed = json_string_value(json_object_get(e, "sealed"));
		char err[256], *aad = NULL, *value = NULL;
		size_t n = 0;
		int http = json_is_true(json_object_get(e, "http"));
		if (account_ok(account) && secret_name_ok(name) && sealed &&
		    secret_hosts_ok(json_object_get(e, "hosts"), &hosts, err, sizeof(err)) == 0 &&
		    (aad = bound_to(account, name, hosts, http)))
			value = seal_unwrap(s->seal, aad, sealed, &n);
		free(aad);
		json_decref(hosts);
		if (value) {
			json_object_set_new(e, "value", json_string(value));
			explicit_bzero(value, n);
			free(value);
			i++;
			continue;
		}
		log_warn("secret %.64s of account %.128s is not used: its value does not open with "
			 "this host's key (sealed with another, or its hosts changed since); "
			 "set it again",
			 secret_name_ok(name) ? name : "?", account_ok(account) ? account : "?");
		json_array_remove(secrets, i);
	}
}

/* {"account", "secrets": [...], "rules": [...]}: the values sealed, as
 * sbx_secret.c sends them; then as secret_set_parse and rules_parse take
 * them. */
static int set_secrets(struct server *s, int slot, const char *text, char *err, size_t errlen)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	json_t *secrets = json_object_get(j, "secrets"), *rules = json_object_get(j, "rules");
	struct secret_set *set = NULL;
	int r = 0;
	if (!json_is_object(j) || (secrets && !json_is_array(secrets)) ||
	    (rules && !json_is_array(rules))) {
		snprintf(err, errlen, "secrets: not an object of two arrays");
		r = -EINVAL;
	} else if (json_array_size(secrets) || json_array_size(rules)) {
		json_t *none = json_array();
		open_values(s, json_string_value(json_object_get(j, "account")), secrets);
		r = secret_set_parse(secrets ? secrets : none, &set, err, errlen);
		json_decref(none);
		if (r == 0 && json_array_size(rules) &&
		    (r = rules_parse(rules, &set->rules, err, errlen)) < 0)
			secret_set_free(set);
	}
	json_decref(j);
	if (r < 0)
		set = NULL; /* none then: never the old values */
	proxy_set_secrets(s->proxy, slot, set);
	dns_set_secrets(s->dns, slot, set != NULL);
	return r;
}

/* One request: 0 (with *sealed for ND_SEAL), or -errno with a reason. */
static int handle(struct server *s, const struct netd_req *q, int *fds, char **sealed, char *err,
		  size_t errlen)
{
	char *body = NULL;
	int r = 0;
	if (q->body) {
		int bfd = fds[q->type == ND_ATTACH ? 3 : 0];
		if (!(body = read_body(bfd, q->body))) {
			snprintf(err, errlen, "a body that is not %u bytes of a file", q->body);
			return -EINVAL;
		}
	}
	switch (q->type) {
	case ND_ATTACH: {
		int nsfd2 = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
		if (nsfd2 < 0) {
			r = -errno;
			break;
		}
		/* Each takes its socket and a namespace descriptor of its own,
		 * whatever the outcome. */
		r = dns_attach(s->dns, q->slot, nsfd2, fds[1], body, err, errlen);
		fds[1] = -1;
		if (r < 0)
			break;
		r = proxy_attach(s->proxy, q->slot, fds[0], fds[2], err, errlen);
		fds[0] = fds[2] = -1;
		if (r < 0)
			dns_detach(s->dns, q->slot);
		break;
	}
	case ND_POLICY:
		dns_set_policy(s->dns, q->slot, body);
		break;
	case ND_CUT:
		proxy_cut(s->proxy, q->slot);
		break;
	case ND_SECRETS:
		r = set_secrets(s, q->slot, body, err, errlen);
		break;
	case ND_DETACH:
		proxy_detach(s->proxy, q->slot);
		dns_detach(s->dns, q->slot);
		break;
	case ND_SEAL:
		r = seal_value(s, body, sealed, err, errlen);
		break;
	}
	if (body)
		explicit_bzero(body, q->body); /* a value, maybe */
	free(body);
	return r;
}

static void serve(struct server *s)
{
	static uint8_t buf[NETD_MAX_MSG + 1];
	for (;;) {
		int fds[NETD_MAX_FDS], nfds;
		ssize_t n = unix_recv_fds(s->sock, buf, sizeof(buf), fds, NETD_MAX_FDS, &nfds);
		if (n == 0 || (n < 0 && n != -EMSGSIZE))
			return; /* cpuosd is gone or stopping */
		struct netd_req q;
		char err[512] = "";
		int r = n < 0 ? -EMSGSIZE
			: netd_decode(buf, (size_t)n, nfds, s->nslots, &q, err, sizeof(err));
		if (r < 0) {
			log_error("a request cpuosd would never send (%s): ending", err[0] ? err : "too long");
			_exit(3);
		}
		char *sealed = NULL;
		r = handle(s, &q, fds, &sealed, err, sizeof(err));
		close_all(fds, nfds);
		int w = answer(s->sock, q.id, r, err, NULL, NULL, sealed);
		free(sealed);
		if (w < 0)
			return;
	}
}

/* The CA's directory and files root's, closed to others: before netd,
 * cpuosd owned them. Opened with no link followed: one cpuosd planted
 * must not get a host file chowned. Missing: ca_open makes them. */
static void own_ca_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (fchown(dfd, 0, 0) < 0 || fchmod(dfd, 0700) < 0)
		log_warn("cannot make %s root's: %s", dir, strerror(errno));
	const char *files[] = { "ca.pem", "ca.key", "lock", SEAL_KEY_FILE };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int fd = openat(dfd, files[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    (fchown(fd, 0, 0) < 0 || fchmod(fd, 0600) < 0))
			log_warn("cannot make %s/%s root's: %s", dir, files[i], strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	close(dfd);
}

/* The configuration (ND_CONFIG) into s and the strings' room: 0 or -1. */
static int start(struct server *s, char *err, size_t errlen, char **pem_out, char **id_out)
{
	static uint8_t buf[NETD_MAX_MSG + 1];
	int fds[NETD_MAX_FDS], nfds;
	ssize_t n = unix_recv_fds(s->sock, buf, sizeof(buf), fds, NETD_MAX_FDS, &nfds);
	struct proto_frame f;
	char ca_dir[4096] = "", upstream[256] = "";
	uint32_t nslots = 0, uid = 0, level = LOG_INFO, body = 0;
	if (n <= 0 || proto_parse(buf, (size_t)n, &f) != n || f.type != ND_CONFIG ||
	    proto_check_attrs(&f) < 0 || proto_get_u32(&f, NT_NSLOTS, &nslots) < 0 ||
	    nslots == 0 || nslots > (1u << 14) ||
	    proto_get_str(&f, NT_CA_DIR, ca_dir, sizeof(ca_dir)) < 0 ||
	    proto_get_u32(&f, NT_UID, &uid) < 0 || proto_get_u32(&f, NT_LOG_LEVEL, &level) < 0 ||
	    level > LOG_DEBUG || nfds > 1) {
		close_all(fds, nfds);
		snprintf(err, errlen, "no configuration from cpuosd on descriptor %d", NETD_FD);
		return -EPROTO;
	}
	log_set_level((enum log_level)level);
	int has_upstream = proto_get_str(&f, NT_UPSTREAM, upstream, sizeof(upstream)) == 0;
	char *trust = NULL;
	if (proto_get_u32(&f, NT_BODY, &body) == 0 &&
	    (nfds != 1 || body > NETD_MAX_BODY || !(trust = read_body(fds[0], body)))) {
		close_all(fds, nfds);
		snprintf(err, errlen, "--egress-trust's text did not come whole");
		return -EPROTO;
	}
	close_all(fds, nfds);
	s->nslots = (int)nslots;
	own_ca_dir(ca_dir);
	int r = ca_open(ca_dir, &s->ca, err, errlen);
	if (r == 0)
		r = seal_load(ca_dir, &s->seal, err, errlen);
	if (r == 0 && uid) {
		const char *none[] = { NULL };
		r = priv_drop((uid_t)uid, 0, none, err, errlen);
	}
	if (r == 0 && (r = priv_attach(NETD_PRIV_FD, 0, &s->priv)) < 0)
		snprintf(err, errlen, "no helper on descriptor %d", NETD_PRIV_FD);
	if (r == 0)
		r = dns_open(has_upstream ? upstream : NULL, s->nslots, s->priv, &s->dns, err, errlen);
	if (r == 0)
		r = proxy_open(s->dns, s->nslots, s->ca, trust, s->priv, &s->proxy, err, errlen);
	free(trust);
	if (r == 0)
		r = sysfilter_load(err, errlen);
	if (r == 0) {
		*pem_out = (char *)ca_pem(s->ca);
		*id_out = (char *)ca_id(s->ca);
	}
	return r;
}

void netd_main(int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], NETD_ARG))
		return;
	log_set_tag("cpuos-netd");
	prctl(PR_SET_NAME, "cpuos-netd");
	signal(SIGPIPE, SIG_IGN);
	/* SIGTERM stays blocked as cpuosd blocked it (the mask survives
	 * exec): netd ends when cpuosd closes its socket, last. */
	struct server s = { .sock = NETD_FD };
	char err[512] = "", *pem = NULL, *id = NULL;
	int r = start(&s, err, sizeof(err), &pem, &id);
	if (answer(s.sock, 0, r, err, r == 0 ? pem : NULL, id, NULL) < 0 || r < 0)
		_exit(1);
	serve(&s);
	/* What cpuosd's close leaves: the resolver's and proxy's threads end
	 * with the process. */
	_exit(0);
}
