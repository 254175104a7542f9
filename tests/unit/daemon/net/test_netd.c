/*
 * test_netd: what cpuos-netd takes from cpuosd (netd_msg.h): each request
 * in its shape, and what netd_decode refuses (the fuzz target checks it
 * accepts nothing out of shape; this names what must be refused). The
 * process itself is driven by tests/e2e (test_privsep.py, test_network.py,
 * test_secrets.py).
 */
#include "common/proto.h"
#include "daemon/net/netd_msg.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <string.h>

static struct netd_req req;
static char err[256];

/* A request of type with (tag, value) pairs of u32s, built as netd_client
 * builds them, decoded as netd decodes it for 8 slots. */
static int decode(uint16_t type, int nfds, const uint32_t *kv, int n)
{
	struct pbuf b = { 0 };
	proto_begin(&b, type, 0, 7);
	for (int i = 0; i < n; i += 2)
		proto_put_u32(&b, (uint16_t)kv[i], kv[i + 1]);
	proto_end(&b);
	err[0] = '\0';
	int r = netd_decode(b.data, b.len, nfds, 8, &req, err, sizeof(err));
	pbuf_release(&b);
	return r;
}

static void test_decode_takes_its_requests(void)
{
	const uint32_t attach[] = { NT_SLOT, 3, NT_BODY, 120 };
	CHECK(decode(ND_ATTACH, 4, attach, 4) == 0);
	CHECK(req.type == ND_ATTACH && req.id == 7 && req.slot == 3 && req.body == 120);
	CHECK(decode(ND_POLICY, 1, attach, 4) == 0 && req.slot == 3);
	CHECK(decode(ND_SECRETS, 1, attach, 4) == 0 && req.body == 120);
	const uint32_t slot[] = { NT_SLOT, 7 };
	CHECK(decode(ND_CUT, 0, slot, 2) == 0 && req.slot == 7 && req.body == 0);
	CHECK(decode(ND_DETACH, 0, slot, 2) == 0);
	/* a value to seal: a body, no slot */
	const uint32_t body[] = { NT_BODY, 64 };
	CHECK(decode(ND_SEAL, 1, body, 2) == 0 && req.slot == -1 && req.body == 64);
}

static void test_decode_refuses(void)
{
	const uint32_t attach[] = { NT_SLOT, 3, NT_BODY, 120 };
	/* descriptors: each type its own count */
	CHECK(decode(ND_ATTACH, 3, attach, 4) == -EINVAL && strstr(err, "descriptors"));
	CHECK(decode(ND_CUT, 1, attach, 2) == -EINVAL);
	/* slots of the range only; a body of a size */
	const uint32_t past[] = { NT_SLOT, 8 };
	CHECK(decode(ND_DETACH, 0, past, 2) == -EINVAL && strstr(err, "slot 8"));
	const uint32_t empty[] = { NT_SLOT, 1, NT_BODY, 0 };
	CHECK(decode(ND_POLICY, 1, empty, 4) == -EINVAL);
	const uint32_t huge[] = { NT_SLOT, 1, NT_BODY, NETD_MAX_BODY + 1 };
	CHECK(decode(ND_SECRETS, 1, huge, 4) == -EINVAL);
	/* what a type lacks, takes not, or has twice */
	const uint32_t noslot[] = { NT_BODY, 10 };
	CHECK(decode(ND_POLICY, 1, noslot, 2) == -EINVAL && strstr(err, "lacks"));
	const uint32_t extra[] = { NT_SLOT, 1, NT_UID, 0 };
	CHECK(decode(ND_CUT, 0, extra, 4) == -EINVAL && strstr(err, "takes no"));
	CHECK(decode(ND_SEAL, 1, attach, 4) == -EINVAL && strstr(err, "takes no"));
	CHECK(decode(ND_SEAL, 0, noslot, 2) == -EINVAL && strstr(err, "descriptors"));
	CHECK(decode(ND_SEAL, 1, NULL, 0) == -EINVAL && strstr(err, "lacks"));
	const uint32_t twice[] = { NT_SLOT, 1, NT_SLOT, 2 };
	CHECK(decode(ND_DETACH, 0, twice, 4) == -EINVAL && strstr(err, "twice"));
	/* the configuration comes once, first, and is no request; answers and
	 * unknown types are none either */
	CHECK(decode(ND_CONFIG, 0, NULL, 0) == -EINVAL && strstr(err, "unknown"));
	CHECK(decode(ND_OK, 0, NULL, 0) == -EINVAL);
	CHECK(decode(ND_SEALED, 0, NULL, 0) == -EINVAL);
	CHECK(decode(99, 0, NULL, 0) == -EINVAL);
	/* a string where a number goes */
	struct pbuf b = { 0 };
	proto_begin(&b, ND_CUT, 0, 1);
	proto_put_str(&b, NT_SLOT, "1");
	proto_end(&b);
	CHECK(netd_decode(b.data, b.len, 0, 8, &req, err, sizeof(err)) == -EINVAL);
	/* not a frame at all */
	CHECK(netd_decode(b.data, b.len - 1, 0, 8, &req, err, sizeof(err)) == -EPROTO);
	CHECK(netd_decode((const uint8_t *)"junk", 4, 0, 8, &req, err, sizeof(err)) == -EPROTO);
	pbuf_release(&b);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "netd_decode_takes_its_requests", test_decode_takes_its_requests },
		{ "netd_decode_refuses", test_decode_refuses },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
