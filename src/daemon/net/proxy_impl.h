/*
 * proxy_impl: what proxy.c lends proxy_tls.c (the connections to a host
 * a secret is bound to, whose TLS ends in the proxy). Included by those
 * two only, and by the fuzz target of proxy__head (fuzz_proxy_head.c).
 */
#ifndef CPUOS_NET_PROXY_IMPL_H
#define CPUOS_NET_PROXY_IMPL_H

#include <openssl/ssl.h>
#include <stddef.h>

#define HEAD_MAX (16 << 10)   /* bytes read before the name must be known */
#define HEAD_MS 10000         /* and the time they may take */
#define IDLE_MS (15 * 60 * 1000) /* a connection quiet this long is ended */

struct ca;
struct http1_head;
struct secret_set;

/* The head to send for request h, one request per connection: its first
 * line, its headers less Connection and HTTP2-Settings (and Expect with
 * tls: the proxy reads the body itself), with the placeholders of secrets
 * that go to host (secret_swap; tls: over TLS whose server was checked)
 * replaced when swap, else left (what was found is logged either way),
 * and then Connection: close (Upgrade for a WebSocket). malloc'd, *n
 * bytes; free it with proxy__wipe. */
char *proxy__head(const struct http1_head *h, const struct secret_set *sec, const char *host,
		  int swap, int tls, size_t *n);

/* The secrets of slot now, held (NULL: none); proxy__put lets go. */
struct proxy;
struct secret_set *proxy__secrets(struct proxy *p, int slot);
void proxy__put(struct proxy *p, struct secret_set *s);
/* Zeroes buf's n bytes (it may hold values), then frees it. */
void proxy__wipe(char *buf, size_t n);

/* A connection to host, a secret's, whose ClientHello (hello, len) was
 * read already: the guest's TLS ends here under a certificate of ca's,
 * a session verified by client goes out on fd out, and one request goes
 * through with the secrets slot of p holds once its head is in put in
 * (proxy__head), then the answer back. 0 once the guest's TLS was up
 * (what was refused from then on was answered with an HTTP error, and
 * logged), -1 before. */
int proxy__tls_swap(int guest, int out, const char *host, const unsigned char *hello, size_t len,
		    struct proxy *p, int slot, struct ca *ca, SSL_CTX *client);

#endif
