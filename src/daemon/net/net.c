/*
 * net: namespaces, links and rules through iproute2 and nft, each run
 * with a script on stdin: a handful of execs per sandbox, every rule set
 * one atomic nft transaction. See net.h for the layout.
 */
#include "daemon/net/net.h"

#include "common/log.h"
#include "common/spawn.h"
#include "common/tcp.h"
#include "daemon/net/ca.h"
#include "daemon/net/dns.h"
#include "daemon/net/net_impl.h"
#include "daemon/net/policy.h"
#include "daemon/net/proxy.h"
#include "daemon/net/secret.h"
#include "runner/qemu.h"
#include "runner/vm.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <poll.h>
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
/* The namespace's counters: egress refused, and egress let through. */
#define REFUSED "refused"
#define SENT "sent"

struct net {
	char tag[8];        /* 4 hex digits */
	uint32_t base;      /* the range's first address, host order */
	int nslots, next;
	unsigned marks;
	pthread_mutex_t mu;
	uint8_t *used;      /* one byte per slot */
	struct dns *dns;
	struct proxy *proxy;
	struct ca *ca;
};

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

int net__run(char *const *argv, const char *netns, const char *script, char *err, size_t errlen)
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
	}
out:
	if (in >= 0)
		close(in);
	close(out);
	return r;
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
	inet_pton(AF_INET, QEMU_GATEWAY_IP, &sa.sin_addr);
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

int net__socket_in(int nsfd, int type, int port, char *err, size_t errlen)
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

int net__dial(int nsfd, const struct sockaddr_in *dst, int ms)
{
	char err[128];
	int fd = net__socket_in(nsfd, SOCK_STREAM, -1, err, sizeof(err));
	if (fd < 0)
		return fd;
	int e = 0;
	socklen_t el = sizeof(e);
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
		e = errno;
		if (e == EINPROGRESS) {
			int w = tcp_wait(fd, POLLOUT, ms);
			e = w == 0 ? ETIMEDOUT
			    : w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 ? EIO
			    : e;
		}
	}
	if (e) {
		close(fd);
		return -e;
	}
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

static void ns_name(const struct net *n, int slot, char *out, size_t len)
{
	snprintf(out, len, "cpuos-%s-%d", n->tag, slot);
}

void net_ns_path(const struct net *n, int slot, char *out, size_t len)
{
	char name[32];
	ns_name(n, slot, name, sizeof(name));
	snprintf(out, len, NS_DIR "/%s", name);
}

int net_ns_open(const struct net *n, int slot)
{
	char path[64];
	net_ns_path(n, slot, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? fd : -ENETUNREACH;
}

int net_dial_guest(int nsfd, unsigned port, int ms)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, QEMU_GUEST_IP, &dst.sin_addr);
	return net__dial(nsfd, &dst, ms);
}

/* The host end of slot's veth: "cv" + tag + slot, within IFNAMSIZ. */
static void veth_name(const struct net *n, int slot, char *out, size_t len)
{
	snprintf(out, len, "cv%.4s%x", n->tag, (unsigned)slot & 0xffffff);
}

static void slot_addr(const struct net *n, int slot, int host, char *out, size_t len)
{
	struct in_addr a = { .s_addr = htonl(n->base + (uint32_t)slot * 4 + (host ? 1 : 2)) };
	inet_ntop(AF_INET, &a, out, (socklen_t)len);
}

/* The host's table: forwarding for the namespaces, nothing else. Other
 * tables may drop more; none of ours accepts for them. */
static int host_table(struct net *n, const char *range, char *err, size_t errlen)
{
	char script[2048];
	snprintf(script, sizeof(script),
		 "table inet cpuos_%1$s\n"
		 "delete table inet cpuos_%1$s\n"
		 "table inet cpuos_%1$s {\n"
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
		 n->tag, range);
	char *argv[] = { "nft", "-f", "-", NULL };
	return net__run(argv, NULL, script, err, errlen);
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

int net_open(const char *range, const char *state_dir, const char *ca_dir,
	     const char *dns_upstream, const char *egress_trust, struct net **out, char *err,
	     size_t errlen)
{
	struct net_cidr c;
	if (net_cidr_parse(range, &c) < 0 || c.family != AF_INET || c.prefix < 16 || c.prefix > 24) {
		snprintf(err, errlen, "--net-range '%s' is not an IPv4 range of /16 to /24", range);
		return -EINVAL;
	}
	struct net *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	uint8_t md[SHA256_DIGEST_LENGTH];
	SHA256((const uint8_t *)state_dir, strlen(state_dir), md);
	snprintf(n->tag, sizeof(n->tag), "%02x%02x", md[0], md[1]);
	memcpy(&n->base, c.addr, 4);
	n->base = ntohl(n->base);
	n->nslots = 1 << (32 - c.prefix - 2);
	n->used = calloc((size_t)n->nslots, 1);
	pthread_mutex_init(&n->mu, NULL);
	int r = -ENOMEM;
	if (!n->used)
		goto fail;
	mkdir(NS_DIR, 0755);
	/* Forwarding is a host-wide switch; the host table decides what
	 * it forwards for us. */
	if ((r = write_file("/proc/sys/net/ipv4/ip_forward", "1\n")) < 0) {
		snprintf(err, errlen, "cannot turn on IPv4 forwarding: %s (run as root)", strerror(-r));
		goto fail;
	}
	if ((r = host_table(n, range, err, errlen)) < 0 ||
	    (r = ca_open(ca_dir, &n->ca, err, errlen)) < 0 ||
	    (r = dns_open(dns_upstream, n->nslots, &n->dns, err, errlen)) < 0 ||
	    (r = proxy_open(n->dns, n->nslots, n->ca, egress_trust, &n->proxy, err, errlen)) < 0)
		goto fail;
	*out = n;
	return 0;
fail:
	net_close(n);
	return r;
}

void net_close(struct net *n)
{
	if (!n)
		return;
	proxy_close(n->proxy);
	dns_close(n->dns);
	ca_close(n->ca);
	pthread_mutex_destroy(&n->mu);
	free(n->used);
	free(n);
}

/* Round the range, so a slot just let go rests while the kernel clears
 * what its namespace left. */
static int take_slot(struct net *n)
{
	pthread_mutex_lock(&n->mu);
	int slot = -1;
	for (int k = 0; k < n->nslots && slot < 0; k++) {
		int i = (n->next + k) % n->nslots;
		if (!n->used[i])
			n->used[slot = i] = 1;
	}
	if (slot >= 0)
		n->next = (slot + 1) % n->nslots;
	pthread_mutex_unlock(&n->mu);
	return slot;
}

static void put_slot(struct net *n, int slot)
{
	pthread_mutex_lock(&n->mu);
	if (slot >= 0 && slot < n->nslots)
		n->used[slot] = 0;
	pthread_mutex_unlock(&n->mu);
}

/* The policy as the resolver keeps it. */
static char *policy_text(const struct net_policy *p)
{
	json_t *j = net_policy_json(p);
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return t;
}

/* Our sockets in the namespace: the resolver's and the proxy's. */
static int serve(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	char path[64], *text = policy_text(p);
	net_ns_path(n, slot, path, sizeof(path));
	int r = text ? dns_attach(n->dns, slot, path, text, err, errlen) : -ENOMEM;
	free(text);
	if (r == 0 && (r = proxy_attach(n->proxy, slot, path, err, errlen)) < 0)
		dns_detach(n->dns, slot);
	return r;
}

int net_keep(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	if (slot < 0 || slot >= n->nslots)
		return -EINVAL;
	pthread_mutex_lock(&n->mu);
	n->used[slot] = 1;
	pthread_mutex_unlock(&n->mu);
	return serve(n, slot, p, err, errlen);
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
	       "add rule inet cpuos forward iifname \"" VM_TAP "\" jump egress\n"
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

/* The namespace's table. The guest's packets meet it in forward (to the
 * world), input (to our resolver and proxy in the namespace, nothing
 * else) and prerouting (web ports of resolved names go to the proxy);
 * what is refused is counted, and answered with a reset or an ICMP error
 * so the guest sees a refusal, not a hang. */
static void put_table(struct buf *b, const struct net_policy *p, unsigned mark)
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
	       "    iifname \"" VM_TAP "\" ip daddr " QEMU_GATEWAY_IP " udp dport 53 accept\n"
	       "    iifname \"" VM_TAP "\" tcp dport " PROXY_PORT_S " ct status dnat accept\n"
	       "    iifname \"" VM_TAP "\" jump refuse\n"
	       "  }\n"
	       "  chain prerouting {\n"
	       "    type nat hook prerouting priority dstnat; policy accept;\n"
	       "    iifname \"" VM_TAP "\" ip daddr @allow accept\n" /* CIDRs go straight */
	       "    iifname \"" VM_TAP "\" ip daddr @resolved tcp dport { 80, 443 } counter name " SENT
	       " redirect to :" PROXY_PORT_S "\n"
	       "  }\n"
	       "  chain postrouting {\n"
	       "    type nat hook postrouting priority srcnat; policy accept;\n"
	       "    oifname \"eth0\" masquerade\n"
	       "  }\n"
	       "}\n");
	put_set(b, "always", net_always_denied, NULL, 0);
	put_set(b, "private", net_private_ranges, NULL, 0);
	put_policy(b, p, mark);
}

static void remove_ns(struct net *n, int slot);

/* A new mark for a policy (1..; 0 is no mark's). */
static unsigned next_mark(struct net *n)
{
	pthread_mutex_lock(&n->mu);
	unsigned m = ++n->marks ? n->marks : ++n->marks;
	pthread_mutex_unlock(&n->mu);
	return m;
}

static int nft_in(struct net *n, int slot, struct buf *b, char *err, size_t errlen)
{
	if (b->oom) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	char path[64];
	net_ns_path(n, slot, path, sizeof(path));
	char *argv[] = { "nft", "-f", "-", NULL };
	return net__run(argv, path, b->s, err, errlen);
}

int net_create(struct net *n, const struct net_policy *p, int *slotp, char *err, size_t errlen)
{
	int slot = take_slot(n);
	if (slot < 0) {
		snprintf(err, errlen, "no network left: all %d slots of the range are taken", n->nslots);
		return -ENOSPC;
	}
	char name[32], path[64], veth[16], host[16], inside[16], script[1024];
	ns_name(n, slot, name, sizeof(name));
	net_ns_path(n, slot, path, sizeof(path));
	veth_name(n, slot, veth, sizeof(veth));
	slot_addr(n, slot, 1, host, sizeof(host));
	slot_addr(n, slot, 0, inside, sizeof(inside));
	remove_ns(n, slot); /* left by a daemon that died mid-way */
	snprintf(script, sizeof(script),
		 "netns add %1$s\n"
		 "link add %2$s type veth peer name eth0 netns %1$s\n"
		 "addr add %3$s/30 dev %2$s\n"
		 "link set %2$s up\n",
		 name, veth, host);
	char *ip[] = { "ip", "-batch", "-", NULL };
	int r = net__run(ip, NULL, script, err, errlen);
	if (r < 0)
		goto fail;
	/* Inside: the TAP keeps one MAC everywhere, so a restored guest's
	 * ARP cache stays right. */
	snprintf(script, sizeof(script),
		 "link set lo up\n"
		 "addr add %1$s/30 dev eth0\n"
		 "link set eth0 up\n"
		 "route add default via %2$s\n"
		 "tuntap add dev " VM_TAP " mode tap vnet_hdr\n"
		 "link set " VM_TAP " address " QEMU_GATEWAY_MAC "\n"
		 "addr add " QEMU_GATEWAY_IP "/%3$d dev " VM_TAP "\n"
		 "link set " VM_TAP " up\n",
		 inside, host, QEMU_GUEST_PREFIX);
	char *sysctl[] = { "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
			   "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", NULL };
	if ((r = net__run(ip, path, script, err, errlen)) < 0 ||
	    (r = net__run(sysctl, path, NULL, err, errlen)) < 0)
		goto fail;
	struct buf b = { 0 };
	put_table(&b, p, next_mark(n));
	r = nft_in(n, slot, &b, err, errlen);
	free(b.s);
	if (r < 0 || (r = serve(n, slot, p, err, errlen)) < 0)
		goto fail;
	*slotp = slot;
	return 0;
fail:
	net_destroy(n, slot);
	return r;
}

int net_apply(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen)
{
	/* The resolver first: an answer under the old policy that lands
	 * after the set's flush is taken back (dns.c). */
	char *text = policy_text(p);
	if (!text)
		return -ENOMEM;
	dns_set_policy(n->dns, slot, text);
	free(text);
	struct buf b = { 0 };
	put_policy(&b, p, next_mark(n));
	int r = nft_in(n, slot, &b, err, errlen);
	free(b.s);
	proxy_cut(n->proxy, slot); /* its connections are asked again */
	return r;
}

/* The kernel tears a namespace down later, in the background, once its
 * last user is gone: the veth goes first, by hand, so its name is free at
 * once for the slot's next namespace. */
static void remove_ns(struct net *n, int slot)
{
	char name[32], veth[16], path[64], script[128], err[256];
	ns_name(n, slot, name, sizeof(name));
	veth_name(n, slot, veth, sizeof(veth));
	net_ns_path(n, slot, path, sizeof(path));
	if (access(path, F_OK) < 0)
		return;
	char sys[64];
	snprintf(sys, sizeof(sys), "/sys/class/net/%s", veth);
	snprintf(script, sizeof(script), "%s%s%snetns delete %s\n",
		 access(sys, F_OK) == 0 ? "link delete " : "", access(sys, F_OK) == 0 ? veth : "",
		 access(sys, F_OK) == 0 ? "\n" : "", name);
	char *argv[] = { "ip", "-batch", "-", NULL };
	if (net__run(argv, NULL, script, err, sizeof(err)) < 0)
		log_warn("network %s: %s", name, err);
}

int net_set_secrets(struct net *n, int slot, const json_t *secrets, char *err, size_t errlen)
{
	struct secret_set *set = NULL;
	int r = json_array_size(secrets) ? secret_set_parse(secrets, &set, err, errlen) : 0;
	if (r < 0)
		set = NULL; /* none then: never the old values */
	proxy_set_secrets(n->proxy, slot, set);
	dns_set_secrets(n->dns, slot, set != NULL);
	return r;
}

const char *net_ca_pem(const struct net *n)
{
	return ca_pem(n->ca);
}

const char *net_ca_id(const struct net *n)
{
	return ca_id(n->ca);
}

void net_destroy(struct net *n, int slot)
{
	proxy_detach(n->proxy, slot);
	dns_detach(n->dns, slot);
	remove_ns(n, slot);
	put_slot(n, slot);
}

void net_sweep(struct net *n)
{
	char prefix[32];
	int len = snprintf(prefix, sizeof(prefix), "cpuos-%s-", n->tag);
	DIR *d = opendir(NS_DIR);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)len))
			continue;
		int slot = atoi(e->d_name + len);
		pthread_mutex_lock(&n->mu);
		int kept = slot >= 0 && slot < n->nslots && n->used[slot];
		pthread_mutex_unlock(&n->mu);
		if (!kept)
			net_destroy(n, slot);
	}
	if (d)
		closedir(d);
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

int net_counters(struct net *n, int slot, struct net_counters *c)
{
	char path[64], out[4096];
	net_ns_path(n, slot, path, sizeof(path));
	int fd = memfd_create("cpuos-net-counters", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	char *argv[] = { "nft", "list", "counters", "table", "inet", "cpuos", NULL };
	struct spawn_opts o = { .argv = argv, .fd = { -1, fd, -1 }, .netns = path };
	pid_t pid;
	int r = spawn(&o, &pid), st = 0;
	if (r == 0) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		ssize_t got = pread(fd, out, sizeof(out) - 1, 0);
		out[got > 0 ? got : 0] = '\0';
		r = WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -EIO;
		c->refused_packets = packets_of(out, REFUSED);
		c->allowed_flows = packets_of(out, SENT);
	}
	close(fd);
	return r;
}
