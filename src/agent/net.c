/*
 * net: interface setup with the classic ioctls; a handful of calls needs
 * no netlink.
 */
#include "agent/net.h"

#include "agent/init.h"
#include "agent/sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int if_up(int s, const char *name)
{
	struct ifreq ifr = { 0 };
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	return ioctl(s, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

static int set_addr(int s, const char *name, unsigned long req, struct in_addr a)
{
	struct ifreq ifr = { 0 };
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	sin->sin_family = AF_INET;
	sin->sin_addr = a;
	return ioctl(s, req, &ifr) < 0 ? -errno : 0;
}

static int default_route(int s, struct in_addr gw)
{
	struct rtentry rt = { 0 };
	struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst;
	struct sockaddr_in *mask = (struct sockaddr_in *)&rt.rt_genmask;
	struct sockaddr_in *via = (struct sockaddr_in *)&rt.rt_gateway;
	dst->sin_family = mask->sin_family = via->sin_family = AF_INET;
	via->sin_addr = gw;
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	return ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST ? -errno : 0;
}

/* IPv6 off on the NIC, before it is up: the sandbox's network has none,
 * and the link-local address, router solicitations and multicast reports
 * it would send are dropped at the host's end and counted as refused (a
 * source not the guest's own). lo keeps ::1, which programs listening on
 * "localhost" may want. */
static void eth_no_ipv6(void)
{
	int fd = open("/proc/sys/net/ipv6/conf/eth0/disable_ipv6", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1\n", 2) != 2)
		sys_log("cannot turn IPv6 off on eth0: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The resolver is the gateway: the host answers there, by policy. */
static void write_resolv(const char *gw)
{
	int fd = open("/etc/resolv.conf.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "nameserver %s\noptions timeout:2 attempts:2\n", gw);
	int ok = write(fd, buf, (size_t)n) == n;
	close(fd);
	/* A template may ship resolv.conf as a symlink (systemd's): replaced. */
	if (!ok || rename("/etc/resolv.conf.tmp", "/etc/resolv.conf") < 0) {
		unlink("/etc/resolv.conf.tmp");
		sys_log("cannot write /etc/resolv.conf: %s", strerror(errno));
	}
}

void net_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return;
	/* IFF_UP alone is enough: Linux adds 127.0.0.1/8 to lo by itself. */
	int r = if_up(s, "lo");
	if (r < 0)
		sys_log("cannot bring up 'lo': %s", strerror(-r));
	char v[64], *slash, *comma;
	struct in_addr addr, gw, mask;
	if (init_cmdline("cpuos.net", v, sizeof(v)) < 0)
		goto out; /* no NIC */
	slash = strchr(v, '/');
	comma = strchr(v, ',');
	if (!slash || !comma || comma < slash) {
		sys_log("bad cpuos.net '%s'", v);
		goto out;
	}
	*slash = *comma = '\0';
	int prefix = atoi(slash + 1);
	if (inet_pton(AF_INET, v, &addr) != 1 || inet_pton(AF_INET, comma + 1, &gw) != 1 ||
	    prefix < 1 || prefix > 32) {
		sys_log("bad cpuos.net address");
		goto out;
	}
	mask.s_addr = htonl(~0u << (32 - prefix));
	eth_no_ipv6();
	if ((r = set_addr(s, "eth0", SIOCSIFADDR, addr)) < 0 ||
	    (r = set_addr(s, "eth0", SIOCSIFNETMASK, mask)) < 0 || (r = if_up(s, "eth0")) < 0 ||
	    (r = default_route(s, gw)) < 0) {
		sys_log("cannot set up eth0: %s", strerror(-r));
		goto out;
	}
	write_resolv(comma + 1);
out:
	close(s);
}
