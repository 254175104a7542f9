/* netd_msg: the requests netd takes (netd_msg.h). */
#include "daemon/net/netd_msg.h"

#include "common/errbuf.h"
#include "common/proto.h"

#include <errno.h>
#include <stdio.h>

#define BIT(t) (1u << (t))

/* Per type: the tags it takes, those it must have, its descriptors. */
static const struct {
	uint32_t takes, needs;
	int fds;
} shape[ND_NTYPES] = {
	[ND_ATTACH] = { BIT(NT_SLOT) | BIT(NT_BODY), BIT(NT_SLOT) | BIT(NT_BODY), 4 },
	[ND_POLICY] = { BIT(NT_SLOT) | BIT(NT_BODY), BIT(NT_SLOT) | BIT(NT_BODY), 1 },
	[ND_CUT] = { BIT(NT_SLOT), BIT(NT_SLOT), 0 },
	[ND_SECRETS] = { BIT(NT_SLOT) | BIT(NT_BODY), BIT(NT_SLOT) | BIT(NT_BODY), 1 },
	[ND_DETACH] = { BIT(NT_SLOT), BIT(NT_SLOT), 0 },
	[ND_SEAL] = { BIT(NT_BODY), BIT(NT_BODY), 1 },
};

int netd_decode(const uint8_t *buf, size_t n, int nfds, int nslots, struct netd_req *r,
		char *err, size_t errlen)
{
	struct proto_frame f;
	*r = (struct netd_req){ .slot = -1 };
	if (n < PROTO_HDR_SIZE || n > NETD_MAX_MSG || proto_parse(buf, n, &f) != (ssize_t)n ||
	    f.flags || proto_check_attrs(&f) < 0) {
		snprintf(err, errlen, "not a frame");
		return -EPROTO;
	}
	r->type = f.type;
	r->id = f.id;
	if (f.type == 0 || f.type >= ND_NTYPES || f.type == ND_CONFIG)
		return errbuf_set(err, errlen, -EINVAL, "unknown request %u", f.type);
	if (nfds != shape[f.type].fds)
		return errbuf_set(err, errlen, -EINVAL, "request %u takes %d descriptors, not %d", f.type,
			   shape[f.type].fds, nfds);
	uint32_t seen = 0;
	size_t off = 0;
	struct proto_attr a;
	while (proto_next(&f, &off, &a) == 1) {
		uint32_t bit = a.tag < NT_NTAGS ? BIT(a.tag) : 0;
		if (!(shape[f.type].takes & bit))
			return errbuf_set(err, errlen, -EINVAL, "request %u takes no attribute %u", f.type, a.tag);
		if (seen & bit)
			return errbuf_set(err, errlen, -EINVAL, "attribute %u twice", a.tag);
		seen |= bit;
		if (a.len != 4)
			return errbuf_set(err, errlen, -EINVAL, "attribute %u: %u bytes, not 4", a.tag, a.len);
		uint32_t v = (uint32_t)a.val[0] | (uint32_t)a.val[1] << 8 |
			     (uint32_t)a.val[2] << 16 | (uint32_t)a.val[3] << 24;
		if (a.tag == NT_SLOT) {
			if (v >= (uint32_t)nslots)
				return errbuf_set(err, errlen, -EINVAL, "slot %u is not one of the %d", v, nslots);
			r->slot = (int)v;
		} else {
			if (v == 0 || v > NETD_MAX_BODY)
				return errbuf_set(err, errlen, -EINVAL, "a body of %u bytes", v);
			r->body = v;
		}
	}
	if ((seen & shape[f.type].needs) != shape[f.type].needs)
		return errbuf_set(err, errlen, -EINVAL, "request %u lacks an attribute", f.type);
	return 0;
}
