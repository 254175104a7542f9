/*
 * fuzz_netd: libFuzzer target for what cpuos-netd believes of cpuosd's
 * requests (netd_decode, src/daemon/net/netd_msg.c): a compromised cpuosd
 * could send anything. Input: one byte, the descriptors that came with
 * the request (0-4), then the request as it would arrive. Checks: what is
 * accepted is a request type (never the configuration or an answer) with
 * the descriptors it takes, its slot within the range, its body present
 * exactly when the type has one and of a size netd reads; what is refused
 * has a reason.
 */
#include "common/proto.h"
#include "daemon/net/netd_msg.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOTS 64

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_netd: " __VA_ARGS__);                                        \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int nfds = data[0] % (NETD_MAX_FDS + 1);
	struct netd_req r;
	char err[256] = "";
	int rc = netd_decode(data + 1, size - 1, nfds, NSLOTS, &r, err, sizeof(err));
	if (rc < 0) {
		if (rc != -EINVAL && rc != -EPROTO)
			BUG("refused with %d", rc);
		if (!err[0])
			BUG("refused without a reason");
		return 0;
	}
	static const int fds_of[ND_NTYPES] = { [ND_ATTACH] = 4, [ND_POLICY] = 1, [ND_SECRETS] = 1,
						[ND_SEAL] = 1 };
	if (r.type == 0 || r.type >= ND_NTYPES || r.type == ND_CONFIG)
		BUG("took type %u", r.type);
	if (nfds != fds_of[r.type])
		BUG("type %u with %d descriptors", r.type, nfds);
	if (r.type == ND_SEAL ? r.slot != -1 : r.slot < 0 || r.slot >= NSLOTS)
		BUG("slot %d", r.slot);
	int has_body = r.type == ND_ATTACH || r.type == ND_POLICY || r.type == ND_SECRETS ||
		       r.type == ND_SEAL;
	if (has_body != (r.body != 0) || r.body > NETD_MAX_BODY)
		BUG("type %u with a body of %u", r.type, r.body);
	return 0;
}
