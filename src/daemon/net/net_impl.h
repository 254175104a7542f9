/*
 * net_impl: what net.c lends dns.c. Included by those two only.
 */
#ifndef CPUOS_NET_IMPL_H
#define CPUOS_NET_IMPL_H

#include <stddef.h>

/* Runs argv (in the namespace at netns, or ours when NULL) with script on
 * stdin: 0, or -EIO with the first line it printed in err. */
int net__run(char *const *argv, const char *netns, const char *script, char *err, size_t errlen);
/* A socket of ours inside the namespace nsfd (an open /run/netns file),
 * non-blocking: bound to the gateway address and port (SOCK_DGRAM, or
 * SOCK_STREAM and listening), or with port < 0 unbound, to connect from
 * there. Its descriptor, or -errno with a reason in err. */
int net__socket_in(int nsfd, int type, int port, char *err, size_t errlen);

/* A TCP connection to dst made from inside the namespace nsfd, within ms:
 * its blocking descriptor, or -errno (-ECONNREFUSED, -ETIMEDOUT, ...). */
struct sockaddr_in;
int net__dial(int nsfd, const struct sockaddr_in *dst, int ms);

#endif
