/*
 * priv_net: the networks' requests, in the helper: namespaces, links and
 * rules through iproute2 and nft, each run with a script on stdin (a
 * handful of execs per sandbox, every rule set one atomic nft
 * transaction), and sockets made inside a namespace. The names and
 * addresses are worked out here from the slot, never taken from the
 * request. See net.h for the layout.
 */
#include "priv/priv_impl.h"

#include "common/log.h"
#include "common/cidr.h"
#include "common/netconst.h"
#include "common/netpolicy.h"
#include "common/spawn.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_DIR "/run/netns"
/* The namespace's counters: egress refused, egress let through, and
 * frames from the guest dropped for a source not its own (counted as
 * refused too). */
#define REFUSED "refused"
#define SENT "sent"
#define FORGED "forged"

/* A script as stdin: a memfd, so its size is not bound by a pipe. */
static int script_fd(const char *text)
{
	int fd = memfd_create("cpuos-net", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return -EIO;
	}
	return fd;
}

/* argv in netns (NULL: ours) with script on stdin (NULL: none); what it
 * printed into text (NULL: not wanted). 0, or -EIO with its first line. */
static int run_out(char *const *argv, const char *netns, const char *script, char *text,
		   size_t textlen, char *err, size_t errlen)
{
	int in = script ? script_fd(script) : -1;
	int out = memfd_create("cpuos-net-err", MFD_CLOEXEC);
	if ((script && in < 0) || out < 0) {
		snprintf(err, errlen, "cannot make a memfd: %s", strerror(errno));
		if (in >= 0)
			close(in);
		if (out >= 0)
			close(out);
		return -EIO;
	}
	struct spawn_opts o = { .argv = argv, .fd = { in, out, out }, .netns = netns };
	pid_t pid;
	int r = spawn(&o, &pid), st = 0;
	if (r < 0) {
		snprintf(err, errlen, "cannot run '%s': %s", argv[0], strerror(-r));
		goto out;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		char msg[256] = "";
		ssize_t n = pread(out, msg, sizeof(msg) - 1, 0);
		msg[n > 0 ? n : 0] = '\0';
		msg[strcspn(msg, "\n")] = '\0';
		snprintf(err, errlen, "%s failed: %s", argv[0], msg[0] ? msg : "no reason given");
		r = -EIO;
	} else if (text) {
		ssize_t n = pread(out, text, textlen - 1, 0);
		text[n > 0 ? n : 0] = '\0';
	}
out:
	if (in >= 0)
		close(in);
	close(out);
	return r;
}

static int run(char *const *argv, const char *netns, const char *script, char *err, size_t errlen)
{
	return run_out(argv, netns, script, NULL, 0, err, errlen);
}

struct in_ns {
	int nsfd, type, port, fd, err;
};

/* A thread of its own enters the namespace: setns changes only the calling
 * thread, and a socket belongs to the namespace it was made in. */
static void *socket_in_ns(void *arg)
{
	struct in_ns *a = arg;
	if (setns(a->nsfd, CLONE_NEWNET) < 0) {
		a->err = errno;
		return NULL;
	}
	int fd = socket(AF_INET, a->type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)a->port) };
	inet_pton(AF_INET, NET_GATEWAY_IP, &sa.sin_addr);
	if (fd < 0 ||
	    (a->port >= 0 &&
	     (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	      bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	      (a->type == SOCK_STREAM && listen(fd, 64) < 0)))) {
		a->err = errno;
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	a->fd = fd;
	return NULL;
}

static int socket_in(int nsfd, int type, int port, char *err, size_t errlen)
{
	struct in_ns a = { .nsfd = nsfd, .type = type, .port = port, .fd = -1, .err = EAGAIN };
	pthread_t t;
	if (pthread_create(&t, NULL, socket_in_ns, &a) == 0)
		pthread_join(t, NULL);
	if (a.fd < 0)
		snprintf(err, errlen, "cannot make a socket in a sandbox's namespace: %s",
			 strerror(a.err));
	return a.fd >= 0 ? a.fd : -a.err;
}


void priv_ns_path(const char *tag, int slot, char *out, size_t len)
{
	snprintf(out, len, NS_DIR "/cpuos-%s-%d", tag, slot);
}

/* The host end of slot's veth: "cv" + tag + slot, within IFNAMSIZ. */
static void veth_name(const struct privd *d, int slot, char *out, size_t len)
{
	snprintf(out, len, "cv%.4s%x", d->tag, (unsigned)slot & 0xffffff);
}

static void slot_addr(const struct privd *d, int slot, int host, char *out, size_t len)
{
	struct in_addr a = { .s_addr = htonl(d->base + (uint32_t)slot * 4 + (host ? 1 : 2)) };
	inet_ntop(AF_INET, &a, out, (socklen_t)len);
}

/* The host's table: forwarding for the namespaces, nothing else. Other
 * tables may drop more; none of ours accepts for them. Before anything
 * else sees it (raw, ahead of conntrack), a packet from a namespace must
 * come from an address routed back through its own link (a strict
 * reverse-path check: only the namespace's own address passes), and is
 * IPv4; a namespace's guard (put_guard) should already have made sure of
 * both, this holds if it did not. */
static int host_table(struct privd *d, const char *range, char *err, size_t errlen)
{
	char script[2048];
	snprintf(script, sizeof(script),
		 "table inet cpuos_%1$s\n"
		 "delete table inet cpuos_%1$s\n"
		 "table inet cpuos_%1$s {\n"
		 "  chain spoof {\n"
		 "    type filter hook prerouting priority raw; policy accept;\n"
		 "    iifname \"cv%1$s*\" fib saddr . iif oif missing drop\n"
		 "    iifname \"cv%1$s*\" meta nfproto ipv6 drop\n"
		 "  }\n"
		 "  chain refuse {\n"
		 "    meta l4proto tcp reject with tcp reset\n"
		 "    reject with icmpx admin-prohibited\n"
		 "  }\n"
		 "  chain input {\n"
		 "    type filter hook input priority 0; policy accept;\n"
		 "    iifname \"cv%1$s*\" jump refuse\n"
		 "  }\n"
		 "  chain forward {\n"
		 "    type filter hook forward priority 0; policy accept;\n"
		 "    iifname \"cv%1$s*\" oifname \"cv*\" jump refuse\n"
		 "    oifname \"cv%1$s*\" ct state established,related accept\n"
		 "    oifname \"cv%1$s*\" counter drop\n"
		 "  }\n"
		 "  chain postrouting {\n"
		 "    type nat hook postrouting priority srcnat; policy accept;\n"
		 "    ip saddr %2$s oifname != \"cv*\" masquerade\n"
		 "  }\n"
		 "}\n",
		 d->tag, range);
	char *argv[] = { "nft", "-f", "-", NULL };
	return run(argv, NULL, script, err, errlen);
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, text, strlen(text));
	close(fd);
	return w == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* Appends to a growing script; *len < 0 once it ran out of memory. */
struct buf {
	char *s;
	size_t len, cap;
	int oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct buf *b, const char *fmt, ...)
{
	for (;;) {
		if (b->oom)
			return;
		va_list ap;
		va_start(ap, fmt);
		int w = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (w >= 0 && b->s && b->len + (size_t)w < b->cap) {
			b->len += (size_t)w;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->len + (size_t)w + 1)
			cap *= 2;
		char *s = realloc(b->s, cap);
		if (!s) {
			b->oom = 1;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
}

/* Empties set and fills it with the IPv4 entries of list and cidrs. */
static void put_set(struct buf *b, const char *set, const char *const *list,
		    const struct net_cidr *cidrs, size_t ncidrs)
{
	char text[64];
	put(b, "flush set inet cpuos %s\n", set);
	for (size_t i = 0; list && list[i]; i++)
		if (!strchr(list[i], ':'))
			put(b, "add element inet cpuos %s { %s }\n", set, list[i]);
	for (size_t i = 0; i < ncidrs; i++)
		if (cidrs[i].family == AF_INET) {
			net_cidr_format(&cidrs[i], text, sizeof(text));
			put(b, "add element inet cpuos %s { %s }\n", set, text);
		}
}

/* The policy's part of the namespace's table, replaced whole: the sets
 * it fills, the egress chain and forward's first rule. The order is the
 * policy's (policy.h): what no policy reaches, then deniedCIDRs, then
 * allowedCIDRs, then private ranges, then the mode. Names' addresses go
 * only through the proxy (prerouting), web ports only. IPv6 is off: the
 * namespace has none.
 *
 * Each policy has a mark, set on the flows it lets out; forward passes
 * established traffic only under the current mark, so a flow the old
 * policy let out meets the new one with its next packet out (and is
 * reset if it may not go on) and gets no more replies until then. */
static void put_policy(struct buf *b, const struct net_policy *p, unsigned mark)
{
	put_set(b, "allow", NULL, p->allow, p->nallow);
	put_set(b, "deny", NULL, p->deny, p->ndeny);
	put(b, "flush set inet cpuos resolved\n" /* names the old policy allowed */
	       "flush chain inet cpuos forward\n"
	       "add rule inet cpuos forward ct state established,related ct mark %1$u accept\n"
	       "add rule inet cpuos forward iifname \"" NET_TAP "\" jump egress\n"
	       "flush chain inet cpuos egress\n"
	       "add rule inet cpuos egress meta nfproto ipv6 jump refuse\n"
	       "add rule inet cpuos egress ip daddr @always jump refuse\n"
	       "add rule inet cpuos egress ip daddr @deny jump refuse\n"
	       "add rule inet cpuos egress ip daddr @allow counter name " SENT " ct mark set %1$u accept\n"
	       "add rule inet cpuos egress ip daddr @private jump refuse\n",
	    mark);
	if (p->mode == NET_ALLOW_ALL)
		put(b, "add rule inet cpuos egress counter name " SENT " ct mark set %u accept\n", mark);
	put(b, "add rule inet cpuos egress jump refuse\n");
}

/* The namespace's guard against forged sources, declared so that it can
 * be laid again over a namespace that has it (its counter kept) or over
 * one made before it existed. A frame from the guest enters the namespace
 * only from the guest's own address: IPv4 from NET_GUEST_IP, ARP for it
 * (or from no address, as a probe is), nothing else, at the TAP's ingress
 * before any other hook (conntrack, the resolver, the proxy, the reject
 * rules) sees it; otherwise an answer, a reset or an ICMP error quoting
 * the guest's payload would go wherever the guest said it came from. And
 * nothing leaves toward the uplink but from the namespace's own address
 * (inside), which masquerade gives what it forwards: checked after the
 * source NAT, it holds even for what the namespace answers itself. */
static void put_guard(struct buf *b, const char *inside)
{
	put(b, "table netdev cpuos_guard {\n"
	       "  counter " FORGED " { }\n"
	       "  chain ingress {\n"
	       "    type filter hook ingress device \"" NET_TAP "\" priority -500; policy drop;\n"
	       "  }\n"
	       "}\n"
	       "flush chain netdev cpuos_guard ingress\n"
	       "add rule netdev cpuos_guard ingress ip saddr " NET_GUEST_IP " accept\n"
	       "add rule netdev cpuos_guard ingress arp saddr ip { 0.0.0.0, " NET_GUEST_IP " } accept\n"
	       "add rule netdev cpuos_guard ingress counter name " FORGED "\n"
	       "table inet cpuos {\n"
	       "  chain leave {\n"
	       "    type filter hook postrouting priority srcnat + 10; policy accept;\n"
	       "  }\n"
	       "}\n"
	       "flush chain inet cpuos leave\n"
	       "add rule inet cpuos leave oifname \"eth0\" ip saddr != %s drop\n"
	       "add rule inet cpuos leave oifname \"eth0\" meta nfproto ipv6 drop\n",
	    inside);
}

/* The namespace's table. The guest's packets meet it in forward (to the
 * world), input (to our resolver and proxy in the namespace, nothing
 * else) and prerouting (web ports of resolved names go to the proxy);
 * what is refused is counted, and answered with a reset or an ICMP error
 * so the guest sees a refusal, not a hang (the guest only: its packets
 * have passed the guard). */
static void put_table(struct buf *b, const struct net_policy *p, unsigned mark,
		      const char *inside)
{
	put(b, "table inet cpuos {\n"
	       "  counter " REFUSED " { }\n"
	       "  counter " SENT " { }\n"
	       "  set always { type ipv4_addr; flags interval; auto-merge; }\n"
	       "  set private { type ipv4_addr; flags interval; auto-merge; }\n"
	       "  set allow { type ipv4_addr; flags interval; auto-merge; }\n"
	       "  set deny { type ipv4_addr; flags interval; auto-merge; }\n"
	       "  set resolved { type ipv4_addr; flags timeout; size 65536; }\n"
	       "  chain refuse {\n"
	       "    counter name " REFUSED "\n"
	       "    meta l4proto tcp reject with tcp reset\n"
	       "    reject with icmpx admin-prohibited\n"
	       "  }\n"
	       "  chain egress { }\n"
	       "  chain forward {\n"
	       "    type filter hook forward priority 0; policy drop;\n"
	       "  }\n"
	       "  chain input {\n"
	       "    type filter hook input priority 0; policy drop;\n"
	       "    iif lo accept\n"
	       "    ct state established,related accept\n"
	       "    iifname \"" NET_TAP "\" ip daddr " NET_GATEWAY_IP " udp dport 53 accept\n"
	       "    iifname \"" NET_TAP "\" tcp dport " NET_PROXY_PORT_S " ct status dnat accept\n"
	       "    iifname \"" NET_TAP "\" jump refuse\n"
	       "  }\n"
	       "  chain prerouting {\n"
	       "    type nat hook prerouting priority dstnat; policy accept;\n"
	       "    iifname \"" NET_TAP "\" ip daddr @allow accept\n" /* CIDRs go straight */
	       "    iifname \"" NET_TAP "\" ip daddr @resolved tcp dport { 80, 443 } counter name " SENT
	       " redirect to :" NET_PROXY_PORT_S "\n"
	       "  }\n"
	       "  chain postrouting {\n"
	       "    type nat hook postrouting priority srcnat; policy accept;\n"
	       "    oifname \"eth0\" masquerade\n"
	       "  }\n"
	       "}\n");
	put_guard(b, inside);
	put_set(b, "always", net_always_denied, NULL, 0);
	put_set(b, "private", net_private_ranges, NULL, 0);
	put_policy(b, p, mark);
}

/* The request's policy: only what the rules need, the CIDRs. */
static void req_policy(const struct priv_req *r, struct net_policy *p)
{
	*p = (struct net_policy){ .mode = (enum net_mode)r->mode,
				  .allow = (struct net_cidr *)r->allow, .nallow = r->nallow,
				  .deny = (struct net_cidr *)r->deny, .ndeny = r->ndeny };
}

static int nft_in(const struct privd *d, int slot, struct buf *b, char *err, size_t errlen)
{
	if (b->oom) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	char path[64];
	priv_ns_path(d->tag, slot, path, sizeof(path));
	char *argv[] = { "nft", "-f", "-", NULL };
	return run(argv, path, b->s, err, errlen);
}

/* The kernel tears a namespace down later, in the background, once its
 * last user is gone: the veth goes first, by hand, so its name is free at
 * once for the slot's next namespace. */
static int remove_ns(const struct privd *d, int slot, char *err, size_t errlen)
{
	char path[64], veth[16], sys[64], script[128];
	priv_ns_path(d->tag, slot, path, sizeof(path));
	veth_name(d, slot, veth, sizeof(veth));
	if (access(path, F_OK) < 0)
		return 0;
	snprintf(sys, sizeof(sys), "/sys/class/net/%s", veth);
	int has_veth = access(sys, F_OK) == 0;
	snprintf(script, sizeof(script), "%s%s%snetns delete %s\n", has_veth ? "link delete " : "",
		 has_veth ? veth : "", has_veth ? "\n" : "", strrchr(path, '/') + 1);
	char *argv[] = { "ip", "-batch", "-", NULL };
	return run(argv, NULL, script, err, errlen);
}

static int create_ns(const struct privd *d, const struct priv_req *r, char *err, size_t errlen)
{
	char path[64], veth[16], host[16], inside[16], script[1024];
	const char *name = path + sizeof(NS_DIR);
	priv_ns_path(d->tag, r->slot, path, sizeof(path));
	veth_name(d, r->slot, veth, sizeof(veth));
	slot_addr(d, r->slot, 1, host, sizeof(host));
	slot_addr(d, r->slot, 0, inside, sizeof(inside));
	char e2[64];
	remove_ns(d, r->slot, e2, sizeof(e2)); /* left by a daemon that died mid-way */
	snprintf(script, sizeof(script),
		 "netns add %1$s\n"
		 "link add %2$s type veth peer name eth0 netns %1$s\n"
		 "addr add %3$s/30 dev %2$s\n"
		 "link set %2$s up\n",
		 name, veth, host);
	char *ip[] = { "ip", "-batch", "-", NULL };
	int rc = run(ip, NULL, script, err, errlen);
	if (rc < 0)
		return rc;
	/* Inside: the TAP keeps one MAC everywhere, so a restored guest's
	 * ARP cache stays right. */
	snprintf(script, sizeof(script),
		 "link set lo up\n"
		 "addr add %1$s/30 dev eth0\n"
		 "link set eth0 up\n"
		 "route add default via %2$s\n"
		 "tuntap add dev " NET_TAP " mode tap vnet_hdr\n"
		 "link set " NET_TAP " address " NET_GATEWAY_MAC "\n"
		 "addr add " NET_GATEWAY_IP "/%3$d dev " NET_TAP "\n"
		 "link set " NET_TAP " up\n",
		 inside, host, NET_GUEST_PREFIX);
	char *sysctl[] = { "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
			   "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", NULL };
	if ((rc = run(ip, path, script, err, errlen)) < 0 ||
	    (rc = run(sysctl, path, NULL, err, errlen)) < 0)
		return rc;
	struct net_policy p;
	req_policy(r, &p);
	struct buf b = { 0 };
	put_table(&b, &p, r->mark, inside);
	rc = nft_in(d, r->slot, &b, err, errlen);
	free(b.s);
	return rc;
}

/* nsfd is the namespace of slot now, not one the slot had before or a
 * namespace of anyone else's. */
static int is_slot_ns(const struct privd *d, int slot, int nsfd)
{
	char path[64];
	struct stat a, b;
	priv_ns_path(d->tag, slot, path, sizeof(path));
	return fstat(nsfd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

static int resolved(const struct priv_req *r, int nsfd, char *err, size_t errlen)
{
	char script[PRIV_MAX_ADDRS * 80], ns[32];
	size_t len = 0;
	for (size_t i = 0; i < r->naddrs; i++) {
		char text[INET_ADDRSTRLEN], ttl[24] = "";
		inet_ntop(AF_INET, r->addrs[i].ip, text, sizeof(text));
		if (r->add)
			snprintf(ttl, sizeof(ttl), " timeout %us", (unsigned)r->addrs[i].ttl_s);
		len += (size_t)snprintf(script + len, sizeof(script) - len,
					"%s element inet cpuos resolved { %s%s }\n",
					r->add ? "add" : "delete", text, ttl);
	}
	snprintf(ns, sizeof(ns), "/proc/self/fd/%d", nsfd); /* the child's copy */
	char *argv[] = { "nft", "-f", "-", NULL };
	return run(argv, ns, script, err, errlen);
}

/* The packets of counter name in nft's listing: "counter NAME {\n packets N". */
static uint64_t packets_of(const char *listing, const char *name)
{
	char key[64];
	snprintf(key, sizeof(key), "counter %s {", name);
	const char *at = strstr(listing, key);
	at = at ? strstr(at, "packets ") : NULL;
	return at ? strtoull(at + 8, NULL, 10) : 0;
}

static int counters(const struct privd *d, int slot, struct pbuf *out, char *err,
		    size_t errlen)
{
	char path[64], text[4096];
	priv_ns_path(d->tag, slot, path, sizeof(path));
	char *argv[] = { "nft", "list", "counters", NULL }; /* the guard's too */
	int r = run_out(argv, path, NULL, text, sizeof(text), err, errlen);
	if (r == 0 && (proto_put_u64(out, T_REFUSED,
				     packets_of(text, REFUSED) + packets_of(text, FORGED)) < 0 ||
		       proto_put_u64(out, T_SENT, packets_of(text, SENT)) < 0))
		r = -ENOMEM;
	return r;
}

/* Lays the guard over the namespaces an earlier helper of this tag left,
 * made by a version without it perhaps: their sandboxes are taken over,
 * and would otherwise go unguarded until their next pause. A namespace
 * that cannot take it has no TAP and so no guest; the daemon sweeps it. */
static void guard_left(const struct privd *d)
{
	char prefix[32];
	int len = snprintf(prefix, sizeof(prefix), "cpuos-%s-", d->tag);
	DIR *dir = opendir(NS_DIR);
	struct dirent *e;
	while (dir && (e = readdir(dir))) {
		char *end;
		if (strncmp(e->d_name, prefix, (size_t)len))
			continue;
		long slot = strtol(e->d_name + len, &end, 10);
		if (*end || end == e->d_name + len || slot < 0 || slot >= d->b.nslots)
			continue;
		char inside[INET_ADDRSTRLEN], err[256];
		slot_addr(d, (int)slot, 0, inside, sizeof(inside));
		struct buf b = { 0 };
		put_guard(&b, inside);
		if (nft_in(d, (int)slot, &b, err, sizeof(err)) < 0)
			log_warn("network %ld: cannot guard it: %s", slot, err);
		free(b.s);
	}
	if (dir)
		closedir(dir);
}

int privd_net_open(struct privd *d, const char *range, const char *tag, char *err,
		   size_t errlen)
{
	struct net_cidr c;
	if (net_cidr_parse(range, &c) < 0 || c.family != AF_INET || c.prefix < 16 || c.prefix > 24) {
		snprintf(err, errlen, "--net-range '%s' is not an IPv4 range of /16 to /24", range);
		return -EINVAL;
	}
	snprintf(d->tag, sizeof(d->tag), "%.4s", tag);
	snprintf(d->range, sizeof(d->range), "%s", range);
	memcpy(&d->base, c.addr, 4);
	d->base = ntohl(d->base);
	d->b.nslots = 1 << (32 - c.prefix - 2);
	mkdir(NS_DIR, 0755);
	/* Forwarding is a host-wide switch; the host table decides what
	 * it forwards for us. */
	int r = write_file("/proc/sys/net/ipv4/ip_forward", "1\n");
	if (r < 0) {
		snprintf(err, errlen, "cannot turn on IPv4 forwarding: %s (run as root)", strerror(-r));
		return r;
	}
	if ((r = host_table(d, range, err, errlen)) < 0)
		return r;
	guard_left(d);
	return 0;
}

int privd_net(struct privd *d, const struct priv_req *r, int fd, struct privd_reply *out,
	      char *err, size_t errlen)
{
	struct net_policy p;
	struct buf b = { 0 };
	int rc;
	char path[64];
	switch (r->type) {
	case PR_NS_CREATE:
		if ((rc = create_ns(d, r, err, errlen)) < 0) {
			char e2[64];
			remove_ns(d, r->slot, e2, sizeof(e2));
		}
		return rc;
	case PR_NS_POLICY:
		req_policy(r, &p);
		put_policy(&b, &p, r->mark);
		rc = nft_in(d, r->slot, &b, err, errlen);
		free(b.s);
		return rc;
	case PR_NS_DESTROY:
		return remove_ns(d, r->slot, err, errlen);
	case PR_NS_OPEN:
		priv_ns_path(d->tag, r->slot, path, sizeof(path));
		if ((out->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			snprintf(err, errlen, "no network %d", r->slot);
			return -ENETUNREACH;
		}
		return 0;
	case PR_NS_SOCKET:
		if (!is_slot_ns(d, r->slot, fd))
			break;
		rc = r->kind == PRIV_SOCK_DNS ? socket_in(fd, SOCK_DGRAM, 53, err, errlen)
		     : r->kind == PRIV_SOCK_PROXY ? socket_in(fd, SOCK_STREAM, NET_PROXY_PORT, err, errlen)
						  : socket_in(fd, SOCK_STREAM, -1, err, errlen);
		if (rc < 0)
			return rc;
		out->fd = rc;
		return 0;
	case PR_NS_RESOLVED:
		if (!is_slot_ns(d, r->slot, fd))
			break;
		return resolved(r, fd, err, errlen);
	case PR_NS_COUNTERS:
		return counters(d, r->slot, out->out, err, errlen);
	}
	snprintf(err, errlen, "that is not the namespace of network %d", r->slot);
	return -EINVAL;
}
