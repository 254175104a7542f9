/*
 * loop: a small poll(2) loop for a thread of its own, after Redis's ae:
 * descriptors with a callback each, one-shot timers, and an eventfd by
 * which other threads wake it. What the resolver, the egress proxy and
 * the port URL proxy wait in.
 *
 * Registrations change from any thread. A descriptor taken out is let go
 * (its release callback called, where its owner closes it) by the loop's
 * own thread, between two polls, or by loop_free: a number being polled
 * is never closed under the poll and taken again by another socket.
 * Callbacks run in the loop's thread with no lock of the loop's held, so
 * they may call any loop_ function.
 */
#ifndef CPUOS_LOOP_H
#define CPUOS_LOOP_H

struct loop;

/* fd is ready: revents as poll(2) says (POLLIN, POLLHUP, ...). */
typedef void (*loop_fd_fn)(struct loop *l, int fd, short revents, void *arg);
/* The descriptor is out of the loop for good: close it here if it is the
 * caller's to close. */
typedef void (*loop_release_fn)(int fd, void *arg);
typedef void (*loop_timer_fn)(struct loop *l, void *arg);

/* A new loop: 0 or -errno. */
int loop_new(struct loop **out);
/* Releases every descriptor still in l (their release callbacks) and
 * frees l; loop_run must have returned (or never run). */
void loop_free(struct loop *l);

/* Serves l in the calling thread until loop_stop: 0, or -errno when poll
 * fails for another reason than a signal. */
int loop_run(struct loop *l);
/* Makes loop_run return after its current turn; any thread. */
void loop_stop(struct loop *l);

/* Watches fd for events (POLLIN, POLLOUT), calling fn; release (may be
 * NULL) when it is out again. 0, -EEXIST when fd is in l already, or
 * -ENOMEM (then release is not called). */
int loop_add(struct loop *l, int fd, short events, loop_fd_fn fn, loop_release_fn release,
	     void *arg);
/* Takes fd out: no callback for it starts after this returns (one
 * running may finish), and its release follows in the loop's thread. 0
 * or -ENOENT. */
int loop_del(struct loop *l, int fd);
/* Stops watching fd for ms milliseconds, then watches it again: for a
 * listener out of descriptors, which accepting again at once would only
 * spin on. 0 or -ENOENT. */
int loop_pause(struct loop *l, int fd, int ms);

/* Calls fn(l, arg) once, ms milliseconds from now (by the monotonic
 * clock), in the loop's thread: an id > 0 for loop_cancel, or -ENOMEM. */
long loop_timer(struct loop *l, int ms, loop_timer_fn fn, void *arg);
/* Cancels a timer that has not fired: 0, or -ENOENT. */
int loop_cancel(struct loop *l, long id);

#endif
