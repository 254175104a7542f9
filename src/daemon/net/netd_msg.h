/*
 * netd_msg: what cpuosd and cpuos-netd (netd.h) say to each other. A
 * message is one proto.h frame over a SOCK_SEQPACKET socket pair: its type
 * one of enum netd_type, its attributes of enum netd_tag, and with it the
 * descriptors its type takes. Texts too long for a frame (a policy, a
 * sandbox's secrets, a value to seal) come in a body: a memfd the sender
 * wrote, whose size the frame gives. netd_decode is all netd believes of a request: the
 * type known, each attribute one the type takes, once, of its size, the
 * slot in range, the descriptors counted. Pure, so it is fuzzed
 * (tests/fuzz/fuzz_netd.c).
 */
#ifndef CPUOS_NET_NETD_MSG_H
#define CPUOS_NET_NETD_MSG_H

#include <stddef.h>
#include <stdint.h>

#define NETD_MAX_MSG (16u * 1024)      /* a frame, whole */
#define NETD_MAX_BODY (4u << 20)       /* a body: secrets, a policy */
#define NETD_MAX_FDS 4                 /* UNIX_MAX_FDS (unixsock.h) */
#define NETD_FD 3                      /* netd's end to cpuosd, after its exec */
#define NETD_PRIV_FD 4                 /* its end to the helper */
#define NETD_ARG "--netd"              /* its argv[1] */

enum netd_type {
	ND_CONFIG = 1,  /* first, from cpuosd: the configuration; fd: --egress-trust's text */
	ND_ATTACH = 2,  /* slot; fds: namespace, resolver socket, proxy socket, body: policy */
	ND_POLICY = 3,  /* slot; fd: body: the policy, for the resolver */
	ND_CUT = 4,     /* slot: the proxy's connections end (its policy changed) */
	ND_SECRETS = 5, /* slot; fd: body: {"secrets": [...], "rules": [...]} */
	ND_DETACH = 6,  /* slot */
	ND_SEAL = 7,    /* fd: body: {"account", "name", "hosts", "http", "value"} (netd.c) */
	ND_NTYPES,
	ND_OK = 64,
	ND_ERROR = 65,  /* errno, message */
	ND_READY = 66,  /* the answer to ND_CONFIG: the CA's certificate and id */
	ND_SEALED = 67, /* the answer to ND_SEAL: the sealed text (seal.h) */
};

enum netd_tag {
	NT_SLOT = 1,      /* u32 */
	NT_BODY = 2,      /* u32: the body's size */
	NT_NSLOTS = 3,    /* u32 */
	NT_CA_DIR = 4,    /* str */
	NT_UPSTREAM = 5,  /* str: the resolver's upstream */
	NT_UID = 6,       /* u32: the uid netd becomes (0: it stays) */
	NT_LOG_LEVEL = 7, /* u32 */
	NT_PEM = 8,       /* str: the CA's certificate */
	NT_CA_ID = 9,     /* str */
	NT_ERRNO = 10,    /* u32 */
	NT_MESSAGE = 11,  /* str */
	NT_SEALED = 12,   /* bytes: a sealed text, longer than a str may be */
	NT_NTAGS,
};

struct netd_req {
	uint16_t type;
	uint32_t id;
	int slot;        /* -1: none */
	uint32_t body;   /* its size; 0: none */
};

/* The request in buf[0..n), which came with nfds descriptors, for a netd
 * of nslots: 0 with r, or -EINVAL (-EPROTO for a broken frame) with a
 * reason in err. ND_CONFIG is not a request: it is refused here. */
int netd_decode(const uint8_t *buf, size_t n, int nfds, int nslots, struct netd_req *r,
		char *err, size_t errlen);

#endif
