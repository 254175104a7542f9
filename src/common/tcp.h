/*
 * tcp: what the daemon's two proxies share (the egress proxy in each
 * sandbox's namespace, the port URLs into the guests): waiting on a
 * socket, sending all of a buffer, relaying two connections, a reset.
 */
#ifndef CPUOS_TCP_H
#define CPUOS_TCP_H

#include <stddef.h>
#include <sys/types.h>

/* poll() for ev on fd, retried on EINTR: >0 ready, 0 timed out, <0 error. */
int tcp_wait(int fd, short ev, int ms);
/* The same while the peer of the connected socket peer stays (peer < 0:
 * none): 1 when fd is ready, 0 after ms (< 0: no limit), -ECONNRESET once
 * the peer closed or reset its connection (tcp_peer_gone's sense, without
 * polling for it), -errno. How a server waits on work for a client. */
int tcp_wait_peer(int fd, short ev, int peer, int ms);
/* Reads into buf[0..cap) until done(buf, len, arg) says the bytes are
 * enough (1) or wrong (-1), within ms in all: the bytes read, or -1 when
 * done said wrong, the peer ended or erred, the time ran out or cap was
 * reached first. How both proxies read a request's head. */
ssize_t tcp_read_until(int fd, char *buf, size_t cap, int ms,
		       int (*done)(const char *buf, size_t len, void *arg), void *arg);
/* 0 once all n bytes went, -1 otherwise (never SIGPIPE). */
int tcp_send_all(int fd, const void *p, size_t n);
/* Copies both ways until both sides are done (a half close is passed on),
 * an error on either, or idle_ms without a byte. */
void tcp_relay(int a, int b, int idle_ms);
/* One HTTP request on a connection (its head sent already): the rest of
 * its body (body bytes) goes to the server, all the server sends comes
 * back, until it ends. A byte from the client past the body ends both: a
 * next request, which may be meant for another server than the one this
 * connection was checked for, never reaches this one. upgrade: the
 * request asked for a WebSocket; if the server's answer is 101 with
 * Upgrade: websocket, both ways are relayed as they are from then on. */
void tcp_relay_one(int client, int server, long long body, int upgrade, int idle_ms);
/* A peer that stops reading cannot hold a sender: sends on fd give up
 * after seconds. */
void tcp_send_timeout(int fd, int seconds);
/* Closes fd with a reset: the peer sees a refusal at once, not an end. */
void tcp_reset(int fd);
/* A listening TCP socket on addr ("HOST:PORT", IPv4; port 0 picks one),
 * close-on-exec, SO_REUSEADDR: its descriptor, or -errno with a reason in
 * err. The HTTP servers' listeners (cpuosd, cpuos-gateway). */
int tcp_listen(const char *addr, char *err, size_t errlen);
/* 1 when the peer of the connected socket fd closed or reset it, else 0
 * (also for fd < 0). Never blocks; bytes waiting to be read, such as a
 * pipelined request, are no sign of leaving. How an HTTP server that
 * waits on slow work tells that its client gave up. */
int tcp_peer_gone(int fd);

#endif
