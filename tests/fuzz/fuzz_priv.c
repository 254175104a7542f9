/*
 * fuzz_priv: libFuzzer target for the privileged helper's parser
 * (priv_decode, src/priv/priv_msg.c), what a compromised daemon could
 * send the root helper. Input: one byte, the descriptors that came with
 * the request (0-2), then the request as it would arrive. Checks: what
 * is accepted is a known type with the descriptors it takes, every
 * number within its range, every string NUL-terminated inside the
 * request's arena, every path of the shape its place allows (a run
 * directory one of the daemon's, what QEMU may write in the snapshots,
 * the checkpoints or its run directory, argv[0] the configured QEMU);
 * what is refused has a reason.
 */
#include "common/netconst.h"
#include "common/proto.h"
#include "priv/priv_msg.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_priv: " __VA_ARGS__);                                        \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

static const struct priv_bounds bounds = {
	.nslots = 64, .jail = 1, .jail_first = 1000, .jail_count = 100,
	.run_parents = { "/s/vms", "/s/snapshots", "/c/snapshots" },
	.rw_dirs = { "/c/snapshots", "/s/snapshots", "/s/checkpoints" },
	.ro_dirs = { "/g", "/c", "/s" },
	.qemu = NULL,
};

static struct priv_req req;

static void check_str(const char *s, const char *what)
{
	if (!s)
		return;
	if (s < req.strs || s >= req.strs + sizeof(req.strs))
		BUG("%s points outside the arena", what);
	if (!memchr(s, 0, (size_t)(req.strs + sizeof(req.strs) - s)))
		BUG("%s is not terminated", what);
}

static int under(const char *p, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(p, dir, n) && p[n] == '/' && p[n + 1] && !strstr(p, "/../") &&
	       !strstr(p, "//") && !strstr(p, "/./");
}

static void check_spawn(void)
{
	if (req.argc < 1 || strcmp(req.argv[0], "qemu-system-x86_64"))
		BUG("spawn of '%s' accepted", req.argc ? req.argv[0] : "(none)");
	if (req.binary)
		BUG("a binary accepted with no QEMU configured");
	int ok = 0;
	for (int i = 0; i < 3; i++)
		if (under(req.run_dir, bounds.run_parents[i]) &&
		    !strchr(req.run_dir + strlen(bounds.run_parents[i]) + 1, '/'))
			ok = 1;
	if (!ok)
		BUG("run directory '%s' accepted", req.run_dir);
	for (int i = 0; i < req.nrw; i++)
		if (!under(req.rw[i], "/c/snapshots") && !under(req.rw[i], "/s/snapshots") &&
		    !under(req.rw[i], "/s/checkpoints") && !under(req.rw[i], req.run_dir))
			BUG("rw '%s' accepted", req.rw[i]);
	for (int i = 0; i < req.nro; i++)
		if ((!under(req.ro[i], "/g") && !under(req.ro[i], "/c") && !under(req.ro[i], "/s")))
			BUG("ro '%s' accepted", req.ro[i]);
	if (req.tap && (req.slot < 0 || strcmp(req.tap, NET_TAP)))
		BUG("tap '%s' accepted", req.tap);
	if (strchr(req.name, '/') || req.name[0] == '.')
		BUG("cgroup name '%s' accepted", req.name);
	if (req.vcpus < 1 || req.vcpus > 256 || req.memory_mb < 16)
		BUG("vcpus %u, memory %u accepted", req.vcpus, req.memory_mb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int nfds = data[0] % 3;
	char err[512] = "";
	int r = priv_decode(data + 1, size - 1, nfds, &bounds, &req, err, sizeof(err));
	if (r < 0) {
		if (r != -EINVAL && r != -EPROTO)
			BUG("refused with %d", r);
		if (!err[0] || !memchr(err, 0, sizeof(err)))
			BUG("refused with no reason");
		return 0;
	}
	int fds = req.type == PR_NS_SOCKET || req.type == PR_NS_RESOLVED || req.type == PR_SPAWN;
	if (req.type < 1 || req.type >= PR_NTYPES)
		BUG("type %u accepted", req.type);
	if (nfds != fds)
		BUG("type %u accepted with %d descriptors", req.type, nfds);
	if (req.slot >= bounds.nslots)
		BUG("slot %d accepted", req.slot);
	if (req.type <= PR_NS_COUNTERS && req.slot < 0)
		BUG("a network request with no slot");
	if (req.nallow > NET_MAX_CIDRS || req.ndeny > NET_MAX_CIDRS || req.naddrs > PRIV_MAX_ADDRS ||
	    req.argc > PRIV_MAX_ARGS || req.nro > JAIL_MAX_PATHS || req.nrw > JAIL_MAX_PATHS)
		BUG("a count past its cap");
	if (req.type == PR_NS_RESOLVED && req.naddrs == 0)
		BUG("no addresses accepted");
	if (req.type == PR_KILL && req.signo != SIGKILL && req.signo != SIGTERM)
		BUG("signal %u accepted", req.signo);
	if ((req.type == PR_KILL || req.type == PR_REAP || req.type == PR_HOLD ||
	     req.type == PR_PAGEMAP || req.type == PR_MEM) && req.pid < 2)
		BUG("pid %d accepted", (int)req.pid);
	if ((req.type == PR_RELEASE || req.type == PR_PAGEMAP || req.type == PR_MEM) &&
	    (req.uid <= bounds.jail_first || req.uid >= bounds.jail_first + bounds.jail_count))
		BUG("uid %u accepted as a jail id", (unsigned)req.uid);
	check_str(req.name, "name");
	check_str(req.run_dir, "run_dir");
	check_str(req.binary, "binary");
	check_str(req.tap, "tap");
	for (int i = 0; i < req.nro; i++)
		check_str(req.ro[i], "ro");
	for (int i = 0; i < req.nrw; i++)
		check_str(req.rw[i], "rw");
	for (int i = 0; i < req.argc; i++)
		check_str(req.argv[i], "arg");
	if (req.type == PR_SPAWN)
		check_spawn();
	return 0;
}
