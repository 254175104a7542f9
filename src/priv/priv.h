/*
 * priv: the helper that holds what cpuosd needs root for, after OpenBSD
 * vmd's priv process. cpuosd starts it first thing, before any thread or
 * socket of its own: a fork that executes the daemon's binary again, so
 * the helper is a fresh image (its own address layout, none of the
 * daemon's memory) that reads its configuration from the socket; from
 * then on every network namespace, nftables rule,
 * socket made inside a namespace, jailed QEMU, cgroup and signal to a
 * jailed QEMU is a request to it: one of a fixed set of typed messages
 * (proto.h frames over a SOCK_SEQPACKET socketpair), each checked for
 * size, count and range before it is acted on (priv_msg.c), and anything
 * else refused. A request that is not one of them, or out of its bounds,
 * is one the daemon would never send: the helper takes it as proof that
 * the daemon is compromised, and ends, and ends the daemon (SIGTERM: its
 * VMs run on for the next daemon). It shows in ps as "cpuosd: priv".
 *
 * The calls below are the daemon's side: each sends one request and waits
 * for its answer (one at a time: a mutex), and returns 0 or -errno with
 * the helper's reason in err.
 */
#ifndef CPUOS_PRIV_H
#define CPUOS_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct jail_spec;
struct launch_ops;
struct net_policy;

/* What the helper is given at its start, and trusts: it is the daemon's
 * configuration, sent before any request could have come. */
struct priv_config {
	/* Networks (net.h): the range and the tag of this daemon's names,
	 * or net_range NULL for none. */
	const char *net_range, *net_tag;
	/* QEMU's jail (jail.h), or jail 0 for none. */
	int jail, cgroups;
	unsigned jail_first, jail_count;
	const char *jail_root, *jail_locks;
	/* Where the paths a spawn names may be: run directories are in
	 * state_dir's vms/ and snapshots/ or cache_dir's snapshots/; what
	 * QEMU writes besides (a snapshot's RAM file) in the snapshots/ of
	 * either; what it reads in those three; the binary is qemu (NULL:
	 * one in PATH). */
	const char *state_dir, *cache_dir, *guest_dir, *qemu;
	/* The binary that becomes the helper: one whose main() calls
	 * priv_helper_main first (NULL: this process's own). */
	const char *exe;
	/* How long a request may take before the daemon takes the helper
	 * for stuck, kills it and ends (0: PRIV_TIMEOUT_MS). */
	unsigned timeout_ms;
	/* The helper's end of a socket to cpuos-netd (netd.h), above 2, or
	 * 0 for none: served too, for two requests only (a socket to dial
	 * from a namespace, the addresses a name resolved to). */
	int netd_sock;
};
#define PRIV_TIMEOUT_MS 30000

struct priv;

/* Starts the helper and waits for it to be ready (the host's table set
 * up, the cgroups found): 0, or -errno with its reason. Before any
 * thread, while this process is root. */
int priv_start(const struct priv_config *c, struct priv **out, char *err, size_t errlen);
/* First in main() of a program that starts a helper: when this process
 * is one (priv_start executed it so), it serves its daemon and never
 * returns; else it returns at once. */
void priv_helper_main(int argc, char **argv);
/* A client of a helper another process started, on sock (cpuos-netd's
 * end of the helper's second socket): calls only. 0 with *out, or
 * -ENOMEM. */
int priv_attach(int sock, unsigned timeout_ms, struct priv **out);
/* Ends the helper (it exits when its socket closes) and reaps it. */
void priv_close(struct priv *p);
/* "networks 10.77.0.0/16, ids 1900000001-1900065535, cgroups v1: ...". */
const char *priv_describe(const struct priv *p);
pid_t priv_pid(const struct priv *p);
int priv_jailed(const struct priv *p);

/* The daemon's side, once the helper runs and before any thread: what
 * root made in dirs (NULL-terminated) becomes uid's, and what the jail
 * ids (uid+1 .. uid+jail_count-1) made there uid's group's; then the
 * process becomes uid and gid uid, with no supplementary groups, no
 * capabilities and umask 007. 0 or -EPERM with a reason. */
int priv_drop(uid_t uid, unsigned jail_count, const char *const *dirs, char *err,
	      size_t errlen);

/* Networks. A namespace per slot (net.h names them), made with its TAP,
 * veth and the table of policy pol under mark. */
int priv_ns_create(struct priv *p, int slot, const struct net_policy *pol, unsigned mark,
		   char *err, size_t errlen);
/* The policy part of a live namespace's table, replaced in one go. */
int priv_ns_policy(struct priv *p, int slot, const struct net_policy *pol, unsigned mark,
		   char *err, size_t errlen);
/* Where slot's namespace is (tag: the daemon's, net.h). */
void priv_ns_path(const char *tag, int slot, char *out, size_t len);
int priv_ns_destroy(struct priv *p, int slot, char *err, size_t errlen);
/* The namespace of slot, open: its descriptor, or -errno. */
int priv_ns_open(struct priv *p, int slot);

/* A socket made in the namespace nsfd (of slot, as priv_ns_open gave
 * it), non-blocking: the resolver's (UDP, the gateway's port 53), the
 * proxy's (TCP, listening on the gateway's NET_PROXY_PORT), or an unbound TCP
 * one to connect from there. Its descriptor, or -errno. */
enum priv_sock { PRIV_SOCK_DNS = 1, PRIV_SOCK_PROXY = 2, PRIV_SOCK_DIAL = 3 };
int priv_ns_socket(struct priv *p, int slot, int nsfd, enum priv_sock kind, char *err,
		   size_t errlen);

/* Addresses a resolver answer gave, added to (or taken from) the
 * namespace's "resolved" set, each for its ttl seconds. */
#define PRIV_MAX_ADDRS 64
struct priv_addr {
	uint8_t ip[4];
	uint32_t ttl_s;
};
int priv_ns_resolved(struct priv *p, int slot, int nsfd, int add, const struct priv_addr *a,
		     size_t n, char *err, size_t errlen);
int priv_ns_counters(struct priv *p, int slot, uint64_t *refused, uint64_t *sent);

/* A jailed QEMU: the jail spec s (its netns a slot's, or none: an empty
 * one), argv (argv[0] must be the configured QEMU), its output to logfd.
 * *pid, its *uid, and *pidfd, which turns readable when it exits. */
int priv_spawn(struct priv *p, const struct jail_spec *s, int slot, char *const *argv,
	       int logfd, pid_t *pid, uid_t *uid, int *pidfd, char *err, size_t errlen);
/* An exited QEMU the helper spawned: 1 with its wait status, 0 while it
 * runs, -ECHILD if it is not the helper's child. */
int priv_reap(struct priv *p, pid_t pid, int *status);
/* SIGKILL or SIGTERM to a process that runs as a jail id. */
int priv_kill(struct priv *p, pid_t pid, int sig);
/* A jailed QEMU found running (after a restart): its id is held. */
int priv_hold(struct priv *p, pid_t pid, uid_t *uid);
/* Its QEMU gone: the id is free again, the cgroup name removed. */
int priv_release(struct priv *p, uid_t uid, const char *name);
/* A jailed QEMU's /proc/PID/mem (mem, read and write) or pagemap, of a
 * pid that still runs as jail id uid (held since its spawn or hold: a
 * pid used again is refused): 0 with *fd, or -errno with the helper's
 * reason. */
int priv_mem_open(struct priv *p, pid_t pid, uid_t uid, int mem, int *fd, char *err,
		  size_t errlen);

/* A template from the image at srcfd (a directory or an archive the
 * daemon opened), unpacked to at most max_bytes, into the state
 * directory's templates/ as ID.erofs and ID.json (image_import_at): it
 * runs apart, and *resultfd gives its line when it ends
 * (image_import_result). */
int priv_import(struct priv *p, int srcfd, const char *id, unsigned long long max_bytes,
		int *resultfd, char *err, size_t errlen);

/* The calls above as the runner's launch ops (launch.h), for a helper
 * with a jail (priv_jailed): each QEMU they start is jailed, signalled,
 * reaped and its id held and released by the helper. They live as long
 * as p; NULL for a NULL p (no helper: the runner starts QEMU itself). */
const struct launch_ops *priv_launch_ops(struct priv *p);

#endif
