/*
 * unixsock: connecting to a Unix stream socket that may not exist yet (QEMU
 * creates its sockets a moment after it starts).
 */
#ifndef CPUOS_UNIXSOCK_H
#define CPUOS_UNIXSOCK_H

/* Connects to the socket at path, for up to timeout_ms: while it is
 * missing, waiting for its directory to change (inotify), while it
 * refuses, asking again every 5 ms. Returns a blocking, close-on-exec
 * descriptor, or -errno (-ENOTSOCK for anything else at path, a symlink
 * included: it is not followed). */
int unix_connect(const char *path, int timeout_ms);

#endif
