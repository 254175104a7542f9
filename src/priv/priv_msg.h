/*
 * priv_msg: the helper's messages. A request is one proto.h frame: its
 * type one of enum priv_type, its attributes of enum priv_tag, and with
 * it at most one descriptor (SCM_RIGHTS). The answer is PR_OK with what
 * the request asked for (and a descriptor), or PR_ERROR with an errno and
 * a line. priv_decode is all the helper believes of a request: the type
 * known, every attribute one the type takes, of its size, once (only
 * paths and arguments repeat), every number in its range, every path of
 * the shape its place allows. Pure, so it is fuzzed (tests/fuzz/fuzz_priv.c).
 * Included by src/priv/ and the fuzz target only.
 */
#ifndef CPUOS_PRIV_MSG_H
#define CPUOS_PRIV_MSG_H

#include "common/cidr.h"
#include "common/jail_spec.h"
#include "common/netpolicy.h"
#include "priv/priv.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PRIV_MAX_MSG (64u * 1024) /* a request or answer, whole */
#define PRIV_MAX_ARGS 256         /* QEMU's argv */
#define PRIV_FD 3                  /* the helper's end of the socket, after its exec */
#define PRIV_NETD_FD 4             /* its end of cpuos-netd's, if any */
#define PRIV_HELPER_ARG "--priv-helper" /* its argv[1] */

enum priv_type {
	PR_NS_CREATE = 1,
	PR_NS_POLICY = 2,
	PR_NS_DESTROY = 3,
	PR_NS_OPEN = 4,
	PR_NS_SOCKET = 5,
	PR_NS_RESOLVED = 6,
	PR_NS_COUNTERS = 7,
	PR_SPAWN = 8,
	PR_REAP = 9,
	PR_KILL = 10,
	PR_HOLD = 11,
	PR_RELEASE = 12,
	PR_PAGEMAP = 13, /* a jailed QEMU's /proc/PID/pagemap, opened for reading */
	PR_MEM = 14,     /* its /proc/PID/mem, for reading and writing */
	PR_IMPORT = 15,  /* a template from the image at the descriptor (image.h) */
	PR_NTYPES,
	PR_OK = 64,
	PR_ERROR = 65,
	PR_CONFIG = 66, /* the daemon's first message, read at start, never a request */
};

enum priv_tag {
	T_SLOT = 1,    /* u32 */
	T_MARK = 2,    /* u32 */
	T_MODE = 3,    /* u32: enum net_mode */
	T_ALLOW = 4,   /* raw: cidrs, PRIV_CIDR_SIZE each */
	T_DENY = 5,    /* raw: cidrs */
	T_KIND = 6,    /* u32: enum priv_sock */
	T_ADD = 7,     /* u32 bool */
	T_ADDRS = 8,   /* raw: 4 address bytes and a u32 ttl each */
	T_NAME = 9,    /* str: a cgroup leaf */
	T_VCPUS = 10,  /* u32 */
	T_MEMORY = 11, /* u32: MiB */
	T_KVM = 12,    /* u32 bool */
	T_RUN_DIR = 13, /* str */
	T_BINARY = 14, /* str */
	T_RO = 15,     /* str, repeated */
	T_RW = 16,     /* str, repeated */
	T_TAP = 17,    /* str */
	T_ARG = 18,    /* str, repeated: argv */
	T_PID = 19,    /* u32 */
	T_UID = 20,    /* u32 */
	T_SIGNO = 21,  /* u32 */
	T_STATUS = 22, /* u32: a wait status */
	T_EXITED = 23, /* u32 bool */
	T_REFUSED = 24, /* u64 */
	T_SENT = 25,   /* u64 */
	T_ERRNO = 26,  /* u32 */
	T_MESSAGE = 27, /* str */
	/* PR_CONFIG's: struct priv_config, and the log level (u32). */
	T_NET_RANGE = 28, T_NET_TAG = 29, T_JAIL = 30, T_CGROUPS = 31, T_JAIL_FIRST = 32,
	T_JAIL_COUNT = 33, T_JAIL_ROOT = 34, T_JAIL_LOCKS = 35, T_STATE_DIR = 36,
	T_CACHE_DIR = 37, T_GUEST_DIR = 38, T_QEMU = 39, T_LOG_LEVEL = 40, T_NETD = 41,
	T_RAM_RO = 42,  /* str: PR_SPAWN's jail_spec.ram_ro */
	T_MAX_BYTES = 43, /* u64: PR_IMPORT's bound on what the image unpacks to */
	T_NTAGS,
};

/* A CIDR on the wire: family (4 or 6), prefix, 16 address bytes. */
#define PRIV_CIDR_SIZE 18

/* What requests are checked against: the helper's configuration. */
struct priv_bounds {
	int nslots;              /* 0: no networks */
	int jail;
	unsigned jail_first, jail_count;
	const char *run_parents[3]; /* where run directories are made */
	const char *rw_dirs[3];     /* snapshot RAM files a QEMU may open for writing */
	const char *ro_dirs[3];     /* what it may read is under */
	const char *qemu;
	const char *qemu_builds;    /* kept QEMU builds (qemu_build.h): root's */
};

struct priv_req {
	uint16_t type;
	uint32_t id;
	int slot;                /* -1: none given */
	unsigned mark, mode, kind, add, vcpus, memory_mb, kvm, signo;
	unsigned long long max_bytes;
	pid_t pid;
	uid_t uid;
	struct net_cidr allow[NET_MAX_CIDRS], deny[NET_MAX_CIDRS];
	size_t nallow, ndeny;
	struct priv_addr addrs[PRIV_MAX_ADDRS];
	size_t naddrs;
	const char *name, *run_dir, *binary, *tap, *ram_ro;
	const char *ro[JAIL_MAX_PATHS], *rw[JAIL_MAX_PATHS];
	int nro, nrw, argc;
	const char *argv[PRIV_MAX_ARGS + 1];
	/* The strings above, each NUL-terminated: no more than the
	 * message's bytes, and a NUL for each of at most n/6 attributes. */
	char strs[PRIV_MAX_MSG + PRIV_MAX_MSG / 6 + 1];
};

/* The request in buf[0..n), which came with nfds descriptors: 0 with r
 * filled, or -EINVAL (-EPROTO for a broken frame) with a reason in err. */
/* The kept build's directory when binary is the QEMU of one of b's kept
 * builds (root's all the way down, written by no one else), else NULL;
 * dir: PATH_MAX bytes. */
const char *priv_kept_build(const struct priv_bounds *b, const char *binary, char *dir);

int priv_decode(const uint8_t *buf, size_t n, int nfds, const struct priv_bounds *b,
		struct priv_req *r, char *err, size_t errlen);

/* The policy's CIDRs on the wire, into a frame being built. */
struct pbuf;
int priv_put_cidrs(struct pbuf *b, uint16_t tag, const struct net_cidr *c, size_t n);

#endif
