/*
 * ca: the daemon's own certificate authority, for the egress proxy's
 * terminated TLS (secret.h). Made once, with OpenSSL (an EC P-256 key,
 * ten years), kept in <dir>/ca.pem and <dir>/ca.key (0600) (cpuosd: in
 * its cache, beside the template snapshots that hold it); the guests
 * trust it (sbx_net.c writes it into their CA bundle at first boot). For each host a secret goes to, a leaf
 * certificate is signed on first use and kept in memory for a day.
 */
#ifndef CPUOS_NET_CA_H
#define CPUOS_NET_CA_H

#include <openssl/ssl.h>
#include <stddef.h>

struct ca;

/* Loads the CA from dir, or makes it there: 0 or -errno with a reason. */
int ca_open(const char *dir, struct ca **out, char *err, size_t errlen);
void ca_close(struct ca *ca);
/* The certificate in PEM, and the SHA-256 of its DER in hex. */
const char *ca_pem(const struct ca *ca);
const char *ca_id(const struct ca *ca);
/* A server context that presents a certificate for host (lower case),
 * offering HTTP/1.1 only over ALPN: a new reference (SSL_CTX_free), or
 * NULL. */
SSL_CTX *ca_server_ctx(struct ca *ca, const char *host);

#endif
