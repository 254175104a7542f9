/*
 * unixsock: connecting to a Unix stream socket that may not exist yet (QEMU
 * creates its sockets a moment after it starts), and messages with
 * descriptors beside them (SCM_RIGHTS), as the helper and cpuos-netd
 * speak over SOCK_SEQPACKET pairs.
 */
#ifndef CPUOS_UNIXSOCK_H
#define CPUOS_UNIXSOCK_H

/* Connects to the socket at path, for up to timeout_ms: while it is
 * missing, waiting for its directory to change (inotify), while it
 * refuses, asking again every 5 ms. Returns a blocking, close-on-exec
 * descriptor, or -errno (-ENOTSOCK for anything else at path, a symlink
 * included: it is not followed). */
int unix_connect(const char *path, int timeout_ms);

#include <stddef.h>
#include <sys/types.h>

#define UNIX_MAX_FDS 4 /* beside one message */

/* One message of n bytes with nfds descriptors (at most UNIX_MAX_FDS) on
 * sock: 0 or -errno (-EIO: sent short). */
int unix_send_fds(int sock, const void *p, size_t n, const int *fds, int nfds);
/* One message from sock into buf[cap] and the descriptors that came with
 * it, close-on-exec, up to max into fds (*nfds of them; the rest closed):
 * its size, 0 at the end, -EMSGSIZE when it was cut short (buf and fds
 * hold what came), or -errno. */
ssize_t unix_recv_fds(int sock, void *buf, size_t cap, int *fds, int max, int *nfds);

#endif
