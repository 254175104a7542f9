/*
 * proxy: TCP to ports 80 and 443 of an address the resolver opened for an
 * allowed name (custom policies) does not go out directly: the namespace
 * redirects it to a socket of ours there, which reads the name the guest
 * asks for (the TLS SNI, with OpenSSL; the HTTP Host) before anything goes
 * out, and passes the connection on only when the policy allows that name
 * and this sandbox's resolver answered that very name with that address.
 * Otherwise the guest's connection is reset. So a name that shares an
 * address with others (a CDN) opens only itself, and a Host or SNI that
 * differs from the name looked up gets nowhere. (An address the policy
 * allows as such, as allow-all does, passes any name.)
 *
 * Egress secrets (secret.h): in a sandbox that has some, every name its
 * resolver answers comes here, under allow-all too. A request to a name
 * a secret is bound to, looked up by this sandbox's resolver, gets the
 * secrets' placeholders in its headers replaced by their values: in
 * plain HTTP as it passes; over TLS by ending the guest's TLS here,
 * under a certificate of the daemon's CA (ca.h), and making our own to
 * the server, whose certificate must name the host (proxy_tls.c). A
 * placeholder in plain HTTP to another host is left, and logged; TLS to
 * another host passes untouched, unread.
 *
 * One thread accepts on every namespace's socket; each connection has a
 * thread of its own (at most PROXY_SLOT_CONNS per sandbox and
 * PROXY_MAX_CONNS in all; past that, reset). Connections go out from the
 * sandbox's own namespace, so the host's rules for it hold for them too,
 * and end with the sandbox, a change of its policy, or 15 idle minutes.
 */
#ifndef CPUOS_NET_PROXY_H
#define CPUOS_NET_PROXY_H

#include <stddef.h>

#define PROXY_MAX_CONNS 256  /* in all */
#define PROXY_SLOT_CONNS 32  /* per sandbox */

struct ca;
struct dns;
struct proxy;
struct secret_set;

/* The policies and the names' answers are dns's (dns_check); ca signs
 * what the guests see of hosts a secret goes to, whose own certificates
 * are checked against trust_pem (certificates, PEM text, read before the
 * daemon gave up root; NULL: the host's roots). */
struct priv;
int proxy_open(struct dns *dns, int nslots, struct ca *ca, const char *trust_pem,
	       struct priv *priv, struct proxy **out, char *err, size_t errlen);
void proxy_close(struct proxy *p);
/* Serves slot on fd, a TCP socket listening in its namespace nsfd (where
 * its connections go out from); both are the proxy's from here on. */
int proxy_attach(struct proxy *p, int slot, int nsfd, int fd, char *err, size_t errlen);
void proxy_detach(struct proxy *p, int slot);
/* Ends slot's connections now (its policy changed: they are asked again). */
void proxy_cut(struct proxy *p, int slot);
/* The secrets slot's requests may carry from now on (NULL: none); the
 * proxy owns s. Detaching drops them. */
void proxy_set_secrets(struct proxy *p, int slot, struct secret_set *s);

/* The name a connection's first bytes ask for: 1 with it in out, 0 when
 * more bytes are needed, -1 when they name none (not TLS or HTTP, no SNI
 * or Host, or one that is "." or ends in ".."). The name is lower case,
 * without its final dot. tls: the bytes are a TLS ClientHello, else an
 * HTTP request. Exposed for the unit and fuzz tests. */
int proxy_name(int tls, const unsigned char *buf, size_t len, char *out, size_t n);

#endif
