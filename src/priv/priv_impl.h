/*
 * priv_impl: the helper's own state and handlers, shared by
 * priv_server.c (the loop, the jail's requests) and priv_net.c (the
 * networks'). Included by src/priv/ only.
 */
#ifndef CPUOS_PRIV_IMPL_H
#define CPUOS_PRIV_IMPL_H

#include "common/proto.h"
#include "priv/priv_msg.h"

#include <stdint.h>
#include <sys/types.h>

struct cgroups;
struct jail;

struct privd {
	struct priv_bounds b;
	char tag[8], range[64]; /* networks: names' tag, the range */
	uint32_t base;          /* its first address, host order */
	struct cgroups *cg;
	struct jail *jail;
	char dirs[5][4200];     /* what b's paths point to */
	char state_dir[4200];   /* imports go to its templates/ */
	pid_t daemon;           /* the parent it serves */
};

/* An answer being built: PR_OK's attributes go into out, a descriptor
 * to send with it into *fd. */
struct privd_reply {
	struct pbuf *out;
	int fd;
};

/* The host's part of the networks, at start (forwarding, the host's
 * table, /run/netns): 0 or -errno with err. */
int privd_net_open(struct privd *d, const char *range, const char *tag, char *err,
		   size_t errlen);
/* A network request (PR_NS_*): 0 or -errno with err. */
int privd_net(struct privd *d, const struct priv_req *r, int fd, struct privd_reply *out,
	      char *err, size_t errlen);

#endif
