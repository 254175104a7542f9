/*
 * net_impl: what net.c lends the proxy. Included by net.c and proxy.c only.
 */
#ifndef CPUOS_NET_IMPL_H
#define CPUOS_NET_IMPL_H

#include <stddef.h>

struct priv;
struct sockaddr_in;

/* A TCP connection to dst made from inside the namespace nsfd (of slot),
 * within ms: its blocking descriptor, or -errno (-ECONNREFUSED,
 * -ETIMEDOUT, ...). */
int net__dial(struct priv *priv, int slot, int nsfd, const struct sockaddr_in *dst, int ms);

#endif
