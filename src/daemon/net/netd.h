/*
 * netd: cpuos-netd, the process that holds the network side of the
 * sandboxes, after OpenBSD vmd's split of roles into processes: the
 * guests' resolver (dns.h), the egress proxy with its TLS termination
 * (proxy.h), the egress CA's key (ca.h), and the secrets the proxy puts
 * in requests with the key that seals them for the store (seal.h): cpuosd
 * keeps only sealed values and hands a value it is given to netd to seal.
 * All of them parse what guests send; none of them needs the store, the
 * API keys or the sandboxes' agents, which stay in cpuosd.
 *
 * cpuosd starts it while root, before it drops root itself: a fork that
 * executes the daemon's binary again ("cpuos-netd --netd"), with a socket
 * to cpuosd at NETD_FD and one to the privileged helper at NETD_PRIV_FD
 * (for the two requests it makes: a socket to dial from a sandbox's
 * namespace, and the addresses a name resolved to; the helper refuses any
 * other from it). netd reads its configuration, loads the CA and the
 * sealing key as root (the CA's directory is root's, closed to cpuosd),
 * becomes a uid of its own (the last of the daemon's block), starts the
 * resolver and proxy, loads the daemon's seccomp filter (sysfilter.h) and
 * answers READY with the CA's certificate. Then it serves one request at
 * a time (netd_msg.h) until cpuosd closes the socket. A request it cannot
 * decode ends it; cpuosd, whose calls then fail, shuts down as when its
 * helper is gone.
 */
#ifndef CPUOS_NET_NETD_H
#define CPUOS_NET_NETD_H

#include <stddef.h>
#include <sys/types.h>

struct netd;

struct netd_config {
	int nslots;                 /* the range's slots */
	const char *ca_dir;         /* the egress CA's directory (ca.h) */
	const char *dns_upstream;   /* NULL: the host's resolver */
	const char *trust_pem;      /* --egress-trust's text, NULL: the host's roots */
	uid_t uid;                  /* what netd becomes; 0: it stays as started */
	int priv_sock;              /* its end of a socket the helper serves, or -1 */
	const char *exe;            /* the binary (NULL: this process's own) */
	unsigned timeout_ms;        /* per request (0: PRIV_TIMEOUT_MS) */
};

/* cpuosd's side. Starts netd and waits for READY: 0 with *out, or -errno
 * with its reason. */
int netd_start(const struct netd_config *c, struct netd **out, char *err, size_t errlen);
/* Closes the socket (netd ends) and reaps it. */
void netd_close(struct netd *d);
pid_t netd_pid(const struct netd *d);
/* The egress CA's certificate (PEM) and its SHA-256 (hex), as READY said. */
const char *netd_ca_pem(const struct netd *d);
const char *netd_ca_id(const struct netd *d);

/* The requests: each 0, or -errno with netd's reason in err. A netd that
 * is gone or does not answer in time makes this process end (SIGTERM),
 * as a helper that is gone does. */
/* Serves slot: its namespace nsfd, the resolver's UDP and the proxy's
 * listening TCP socket made there, under policy (JSON text). The three
 * descriptors are given up here, whatever the outcome. */
int netd_attach(struct netd *d, int slot, int nsfd, int dns_fd, int proxy_fd,
		const char *policy, char *err, size_t errlen);
int netd_policy(struct netd *d, int slot, const char *policy, char *err, size_t errlen);
int netd_cut(struct netd *d, int slot, char *err, size_t errlen);
/* The secrets and request transformations of slot, as net_set_secrets
 * takes them: a JSON object {"secrets": [...], "rules": [...]}. */
int netd_secrets(struct netd *d, int slot, const char *json, char *err, size_t errlen);
int netd_detach(struct netd *d, int slot, char *err, size_t errlen);
/* A secret's value sealed (seal.h) to what it is bound to: json is
 * {"account", "name", "hosts", "http", "value"}; the sealed text into
 * out[outlen] (SEAL_TEXT_MAX of the value's size is enough). */
int netd_seal(struct netd *d, const char *json, char *out, size_t outlen, char *err,
	      size_t errlen);

/* First in cpuosd's main(): when this process is netd (netd_start
 * executed it so), it serves and never returns; else it returns. */
void netd_main(int argc, char **argv);

#endif
