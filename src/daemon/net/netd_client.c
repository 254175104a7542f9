/*
 * netd_client: cpuosd's side of cpuos-netd (netd.h): its start (a fork and
 * an exec of this binary, the configuration as the first message), and
 * one call per request, a frame out and a frame back under a mutex and
 * within a timeout, as the helper's (priv_client.c).
 */
#include "daemon/net/netd.h"

#include "common/log.h"
#include "common/proto.h"
#include "common/unixsock.h"
#include "daemon/net/netd_msg.h"
#include "priv/priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct netd {
	int sock, timeout_ms, gone;
	pid_t pid;
	uint32_t next_id;
	pthread_mutex_t mu;
	char pem[PROTO_MAX_STR + 1], ca_id[80];
};

/* A body: text in a memfd of its own, at offset 0. Its descriptor or -errno. */
static int body_fd(const char *text, size_t len)
{
	int fd = memfd_create("cpuos-netd-body", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w <= 0) {
			int e = w < 0 ? -errno : -EIO;
			close(fd);
			return e;
		}
		off += (size_t)w;
	}
	return fd;
}

/* The answer to id, waited for within the timeout: 0 (ND_OK, ND_READY
 * with the CA's certificate kept, or ND_SEALED with its text in
 * out[outlen]), or -errno with err. */
static int recv_answer(struct netd *d, uint32_t id, char *out, size_t outlen, char *err,
		       size_t errlen)
{
	static __thread uint8_t buf[NETD_MAX_MSG];
	struct pollfd pf = { .fd = d->sock, .events = POLLIN };
	int ready;
	while ((ready = poll(&pf, 1, d->timeout_ms)) < 0 && errno == EINTR)
		;
	ssize_t n = ready == 1 ? recv(d->sock, buf, sizeof(buf), 0) : ready == 0 ? -ETIMEDOUT : -errno;
	if (n < 0 && n != -ETIMEDOUT)
		n = -errno;
	struct proto_frame f;
	if (n <= 0 || proto_parse(buf, (size_t)n, &f) != n || proto_check_attrs(&f) < 0 ||
	    f.id != id ||
	    (f.type != ND_OK && f.type != ND_ERROR && f.type != ND_READY && f.type != ND_SEALED)) {
		if (n == -ETIMEDOUT)
			snprintf(err, errlen, "cpuos-netd did not answer in %d ms", d->timeout_ms);
		else
			snprintf(err, errlen, "cpuos-netd is gone or broken (%s)",
				 n < 0 ? strerror((int)-n) : n == 0 ? "it ended" : "a bad answer");
		return -EPIPE;
	}
	if (f.type == ND_ERROR) {
		uint32_t e = EIO;
		proto_get_u32(&f, NT_ERRNO, &e);
		if (proto_get_str(&f, NT_MESSAGE, err, errlen) < 0)
			snprintf(err, errlen, "%s", strerror((int)e));
		return -(int)(e && e < 4096 ? e : EIO);
	}
	if (f.type == ND_READY &&
	    (proto_get_str(&f, NT_PEM, d->pem, sizeof(d->pem)) < 0 ||
	     proto_get_str(&f, NT_CA_ID, d->ca_id, sizeof(d->ca_id)) < 0)) {
		snprintf(err, errlen, "cpuos-netd sent no CA");
		return -EPIPE;
	}
	if ((f.type == ND_SEALED) != (out != NULL)) {
		snprintf(err, errlen, "cpuos-netd answered with what was not asked");
		return -EPIPE;
	}
	if (out) {
		uint32_t len = 0;
		const uint8_t *v = proto_get(&f, NT_SEALED, &len);
		if (!v || len >= outlen || memchr(v, '\0', len)) {
			snprintf(err, errlen, "cpuos-netd sent no sealed text that fits");
			return -EPIPE;
		}
		memcpy(out, v, len);
		out[len] = '\0';
	}
	return 0;
}

/* One request: type for slot (-1: none), with fds (given up here) and a
 * body; 0 (with ND_SEALED's text in out[outlen]) or -errno with err. */
static int call(struct netd *d, uint16_t type, int slot, int *fds, int nfds, const char *body,
		char *out, size_t outlen, char *err, size_t errlen)
{
	int all[NETD_MAX_FDS], n = 0, r = 0;
	for (int i = 0; i < nfds; i++)
		all[n++] = fds[i];
	size_t blen = body ? strlen(body) : 0;
	if (body && (blen == 0 || blen > NETD_MAX_BODY)) {
		snprintf(err, errlen, "a text of %zu bytes for cpuos-netd", blen);
		r = -E2BIG;
	} else if (body && (all[n] = body_fd(body, blen)) < 0) {
		r = all[n];
		snprintf(err, errlen, "cannot write a body for cpuos-netd: %s", strerror(-r));
	} else if (body) {
		n++;
	}
	struct pbuf b = { 0 };
	pthread_mutex_lock(&d->mu);
	uint32_t id = ++d->next_id ? d->next_id : ++d->next_id;
	if (r == 0 && (proto_begin(&b, type, 0, id) < 0 ||
		       (slot >= 0 && proto_put_u32(&b, NT_SLOT, (uint32_t)slot) < 0) ||
		       (body && proto_put_u32(&b, NT_BODY, (uint32_t)blen) < 0) || proto_end(&b) < 0))
		r = -ENOMEM;
	if (r == 0 && (r = unix_send_fds(d->sock, b.data, b.len, all, n)) < 0)
		snprintf(err, errlen, "cpuos-netd is gone (%s)", strerror(-r));
	if (r == 0)
		r = recv_answer(d, id, out, outlen, err, errlen);
	if (r == -EPIPE && d->pid > 0 && strstr(err, "did not answer"))
		kill(d->pid, SIGKILL); /* a late answer would be read as the next call's */
	pthread_mutex_unlock(&d->mu);
	pbuf_release(&b);
	for (int i = 0; i < n; i++)
		close(all[i]);
	if (r == -EPIPE && !__atomic_exchange_n(&d->gone, 1, __ATOMIC_RELAXED)) {
		/* Without it no sandbox has a network: the daemon ends (its
		 * VMs run on) for its supervisor to start it anew. */
		log_error("%s: shutting down", err);
		kill(getpid(), SIGTERM);
	}
	return r;
}

int netd_attach(struct netd *d, int slot, int nsfd, int dns_fd, int proxy_fd,
		const char *policy, char *err, size_t errlen)
{
	int fds[] = { nsfd, dns_fd, proxy_fd };
	return call(d, ND_ATTACH, slot, fds, 3, policy, NULL, 0, err, errlen);
}

int netd_policy(struct netd *d, int slot, const char *policy, char *err, size_t errlen)
{
	return call(d, ND_POLICY, slot, NULL, 0, policy, NULL, 0, err, errlen);
}

int netd_cut(struct netd *d, int slot, char *err, size_t errlen)
{
	return call(d, ND_CUT, slot, NULL, 0, NULL, NULL, 0, err, errlen);
}

int netd_secrets(struct netd *d, int slot, const char *json, char *err, size_t errlen)
{
	return call(d, ND_SECRETS, slot, NULL, 0, json, NULL, 0, err, errlen);
}

int netd_seal(struct netd *d, const char *json, char *out, size_t outlen, char *err,
	      size_t errlen)
{
	return call(d, ND_SEAL, -1, NULL, 0, json, out, outlen, err, errlen);
}

int netd_detach(struct netd *d, int slot, char *err, size_t errlen)
{
	return call(d, ND_DETACH, slot, NULL, 0, NULL, NULL, 0, err, errlen);
}

/* In the child of the fork: the binary again, with the socket to cpuosd
 * at NETD_FD, the helper's at NETD_PRIV_FD, nothing else of cpuosd's.
 * Never returns. */
static void exec_netd(const struct netd_config *c, int sock)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Both moved above the two places first, so neither is overwritten
	 * by the other's dup2. */
	int a = fcntl(sock, F_DUPFD, 10);
	int b = c->priv_sock >= 0 ? fcntl(c->priv_sock, F_DUPFD, 10) : -1;
	if (a < 0 || dup2(a, NETD_FD) < 0 || (b >= 0 && dup2(b, NETD_PRIV_FD) < 0))
		_exit(127);
	close_range(NETD_PRIV_FD + (b >= 0), ~0u, 0);
	char *argv[] = { "cpuos-netd", NETD_ARG, NULL };
	execv(c->exe ? c->exe : "/proc/self/exe", argv);
	fprintf(stderr, "cpuosd: cannot execute cpuos-netd: %s\n", strerror(errno));
	_exit(127);
}

int netd_start(const struct netd_config *c, struct netd **out, char *err, size_t errlen)
{
	struct netd *d = calloc(1, sizeof(*d));
	int sv[2], tfd = -1;
	if (!d || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(err, errlen, "cannot make cpuos-netd's socket: %s", strerror(errno));
		free(d);
		return -EIO;
	}
	d->timeout_ms = (int)(c->timeout_ms ? c->timeout_ms : PRIV_TIMEOUT_MS);
	pthread_mutex_init(&d->mu, NULL);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		exec_netd(c, sv[1]);
	close(sv[1]);
	d->sock = sv[0];
	d->pid = pid;
	struct pbuf b = { 0 };
	size_t tlen = c->trust_pem ? strlen(c->trust_pem) : 0;
	int r = pid < 0 ? -errno : 0;
	if (r == 0 && tlen && (tfd = body_fd(c->trust_pem, tlen)) < 0)
		r = tfd;
	if (r == 0 && (proto_begin(&b, ND_CONFIG, 0, 0) < 0 ||
		       proto_put_u32(&b, NT_NSLOTS, (uint32_t)c->nslots) < 0 ||
		       proto_put_str(&b, NT_CA_DIR, c->ca_dir) < 0 ||
		       (c->dns_upstream && proto_put_str(&b, NT_UPSTREAM, c->dns_upstream) < 0) ||
		       proto_put_u32(&b, NT_UID, (uint32_t)c->uid) < 0 ||
		       proto_put_u32(&b, NT_LOG_LEVEL, (uint32_t)log_get_level()) < 0 ||
		       (tlen && proto_put_u32(&b, NT_BODY, (uint32_t)tlen) < 0) || proto_end(&b) < 0))
		r = -ENOMEM;
	if (r == 0)
		r = unix_send_fds(d->sock, b.data, b.len, &tfd, tfd >= 0);
	pbuf_release(&b);
	if (tfd >= 0)
		close(tfd);
	if (r < 0)
		snprintf(err, errlen, "cannot start cpuos-netd: %s", strerror(-r));
	/* READY comes after the CA, the resolver and the proxy. */
	if (r == 0 && (r = recv_answer(d, 0, NULL, 0, err, errlen)) == 0 && !d->pem[0]) {
		snprintf(err, errlen, "cpuos-netd did not say it was ready");
		r = -EPROTO;
	}
	if (r < 0) {
		d->gone = 1;
		netd_close(d);
		return r;
	}
	*out = d;
	return 0;
}

void netd_close(struct netd *d)
{
	if (!d)
		return;
	close(d->sock); /* netd's loop ends at the EOF */
	if (d->pid > 0)
		while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR)
			;
	pthread_mutex_destroy(&d->mu);
	free(d);
}

pid_t netd_pid(const struct netd *d)
{
	return d->pid;
}

const char *netd_ca_pem(const struct netd *d)
{
	return d->pem;
}

const char *netd_ca_id(const struct netd *d)
{
	return d->ca_id;
}
