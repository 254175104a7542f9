/*
 * priv_msg: decoding and checking the helper's requests (priv_msg.h).
 * What needs the host (does the path exist, does the pid run as a jail
 * id) is the handler's to check; everything a request says by itself is
 * checked here.
 */
#include "priv/priv_msg.h"

#include "common/proto.h"
#include "common/netconst.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define BIT(t) (1ull << (t))

/* Per type: the tags it takes, those it must have, the descriptors that
 * come with it. */
static const struct {
	uint64_t takes, needs;
	int fds;
} shape[PR_NTYPES] = {
	[PR_NS_CREATE] = { BIT(T_SLOT) | BIT(T_MARK) | BIT(T_MODE) | BIT(T_ALLOW) | BIT(T_DENY),
			   BIT(T_SLOT) | BIT(T_MARK) | BIT(T_MODE), 0 },
	[PR_NS_POLICY] = { BIT(T_SLOT) | BIT(T_MARK) | BIT(T_MODE) | BIT(T_ALLOW) | BIT(T_DENY),
			   BIT(T_SLOT) | BIT(T_MARK) | BIT(T_MODE), 0 },
	[PR_NS_DESTROY] = { BIT(T_SLOT), BIT(T_SLOT), 0 },
	[PR_NS_OPEN] = { BIT(T_SLOT), BIT(T_SLOT), 0 },
	[PR_NS_SOCKET] = { BIT(T_SLOT) | BIT(T_KIND), BIT(T_SLOT) | BIT(T_KIND), 1 },
	[PR_NS_RESOLVED] = { BIT(T_SLOT) | BIT(T_ADD) | BIT(T_ADDRS),
			     BIT(T_SLOT) | BIT(T_ADD) | BIT(T_ADDRS), 1 },
	[PR_NS_COUNTERS] = { BIT(T_SLOT), BIT(T_SLOT), 0 },
	[PR_SPAWN] = { BIT(T_NAME) | BIT(T_VCPUS) | BIT(T_MEMORY) | BIT(T_RUN_DIR) | BIT(T_ARG) |
			       BIT(T_SLOT) | BIT(T_KVM) | BIT(T_BINARY) | BIT(T_RO) | BIT(T_RW) |
			       BIT(T_TAP) | BIT(T_RAM_RO),
		       BIT(T_NAME) | BIT(T_VCPUS) | BIT(T_MEMORY) | BIT(T_RUN_DIR) | BIT(T_ARG), 1 },
	[PR_REAP] = { BIT(T_PID), BIT(T_PID), 0 },
	[PR_KILL] = { BIT(T_PID) | BIT(T_SIGNO), BIT(T_PID) | BIT(T_SIGNO), 0 },
	[PR_HOLD] = { BIT(T_PID), BIT(T_PID), 0 },
	[PR_RELEASE] = { BIT(T_UID) | BIT(T_NAME), BIT(T_UID) | BIT(T_NAME), 0 },
	[PR_PAGEMAP] = { BIT(T_PID) | BIT(T_UID), BIT(T_PID) | BIT(T_UID), 0 },
	[PR_MEM] = { BIT(T_PID) | BIT(T_UID), BIT(T_PID) | BIT(T_UID), 0 },
	[PR_IMPORT] = { BIT(T_NAME) | BIT(T_MAX_BYTES), BIT(T_NAME) | BIT(T_MAX_BYTES), 1 },
};

static int bad(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A cgroup leaf or run directory's last component: letters, digits and
 * "._-", not a dot first. */
static int is_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 120 || s[0] == '.')
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* Absolute, and no "." or ".." component or empty one on the way. */
static int is_clean_path(const char *s)
{
	if (s[0] != '/' || s[1] == '\0')
		return 0;
	for (const char *p = s; *p;) {
		const char *c = ++p;
		p += strcspn(p, "/");
		size_t n = (size_t)(p - c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
	}
	return 1;
}

/* path is a clean path under dir. */
static int is_under(const char *path, const char *dir)
{
	size_t n = dir ? strlen(dir) : 0;
	return n && is_clean_path(path) && !strncmp(path, dir, n) && path[n] == '/' && path[n + 1];
}

static int get_cidrs(const struct proto_attr *a, struct net_cidr *out, size_t *n)
{
	if (a->len % PRIV_CIDR_SIZE || a->len / PRIV_CIDR_SIZE > NET_MAX_CIDRS)
		return -1;
	*n = a->len / PRIV_CIDR_SIZE;
	for (size_t i = 0; i < *n; i++) {
		const uint8_t *v = a->val + i * PRIV_CIDR_SIZE;
		struct net_cidr *c = &out[i];
		unsigned bits = v[0] == 4 ? 32 : v[0] == 6 ? 128 : 0;
		if (!bits || v[1] > bits)
			return -1;
		c->family = v[0] == 4 ? AF_INET : AF_INET6;
		c->prefix = v[1];
		memcpy(c->addr, v + 2, 16);
		/* Host bits clear, and nothing past an IPv4 address. */
		for (unsigned b = c->prefix; b < 128; b++)
			if (c->addr[b / 8] & (0x80 >> (b % 8)))
				return -1;
	}
	return 0;
}

static int get_addrs(const struct proto_attr *a, struct priv_req *r)
{
	if (a->len == 0 || a->len % 8 || a->len / 8 > PRIV_MAX_ADDRS)
		return -1;
	r->naddrs = a->len / 8;
	for (size_t i = 0; i < r->naddrs; i++) {
		memcpy(r->addrs[i].ip, a->val + i * 8, 4);
		r->addrs[i].ttl_s = le32(a->val + i * 8 + 4);
		if (r->addrs[i].ttl_s == 0 || r->addrs[i].ttl_s > 86400)
			return -1;
	}
	return 0;
}

static const char *keep_str(struct priv_req *r, size_t *used, const struct proto_attr *a)
{
	if (proto_check_str(a) < 0 || *used + a->len + 1 > sizeof(r->strs))
		return NULL;
	char *s = r->strs + *used;
	memcpy(s, a->val, a->len);
	s[a->len] = '\0';
	*used += a->len + 1;
	return s;
}

/* One attribute into r: 0, or -1 when its size or value is wrong. */
static int take(struct priv_req *r, size_t *used, const struct proto_attr *a)
{
	uint32_t v = a->len == 4 ? le32(a->val) : 0;
	int u32 = a->len == 4;
	const char *s;
	switch (a->tag) {
	case T_SLOT: r->slot = (int)v; return u32 && v <= 0xffffff ? 0 : -1;
	case T_MARK: r->mark = v; return u32 && v ? 0 : -1;
	case T_MODE: r->mode = v; return u32 && v <= NET_CUSTOM ? 0 : -1;
	case T_KIND: r->kind = v; return u32 && v >= PRIV_SOCK_DNS && v <= PRIV_SOCK_DIAL ? 0 : -1;
	case T_ADD: r->add = v; return u32 && v <= 1 ? 0 : -1;
	case T_KVM: r->kvm = v; return u32 && v <= 1 ? 0 : -1;
	case T_VCPUS: r->vcpus = v; return u32 && v >= 1 && v <= 256 ? 0 : -1;
	case T_MEMORY: r->memory_mb = v; return u32 && v >= 16 && v <= (1u << 22) ? 0 : -1;
	case T_PID: r->pid = (pid_t)v; return u32 && v >= 2 && v <= (1u << 22) ? 0 : -1;
	case T_UID: r->uid = v; return u32 ? 0 : -1;
	case T_SIGNO: r->signo = v; return u32 && (v == SIGKILL || v == SIGTERM) ? 0 : -1;
	case T_ALLOW: return get_cidrs(a, r->allow, &r->nallow);
	case T_DENY: return get_cidrs(a, r->deny, &r->ndeny);
	case T_ADDRS: return get_addrs(a, r);
	case T_MAX_BYTES:
		if (a->len != 8)
			return -1;
		r->max_bytes = (unsigned long long)le32(a->val) |
			       (unsigned long long)le32(a->val + 4) << 32;
		return r->max_bytes >= (1ull << 20) && r->max_bytes <= (1ull << 40) ? 0 : -1;
	default: break;
	}
	if (!(s = keep_str(r, used, a)))
		return -1;
	switch (a->tag) {
	case T_NAME: r->name = s; return 0;
	case T_RUN_DIR: r->run_dir = s; return 0;
	case T_BINARY: r->binary = s; return 0;
	case T_TAP: r->tap = s; return 0;
	case T_RAM_RO: r->ram_ro = s; return 0;
	case T_RO: return r->nro < JAIL_MAX_PATHS ? (r->ro[r->nro++] = s, 0) : -1;
	case T_RW: return r->nrw < JAIL_MAX_PATHS ? (r->rw[r->nrw++] = s, 0) : -1;
	case T_ARG: return r->argc < PRIV_MAX_ARGS ? (r->argv[r->argc++] = s, 0) : -1;
	}
	return -1;
}

/* path is a directory of its own in one of dirs: a name under it. */
static int in_one_of(const char *path, const char *const *dirs, size_t n, int direct)
{
	for (size_t i = 0; i < n; i++)
		if (is_under(path, dirs[i]) &&
		    (!direct || is_name(path + strlen(dirs[i]) + 1)))
			return 1;
	return 0;
}

const char *priv_kept_build(const struct priv_bounds *b, const char *binary, char *dir)
{
	if (!binary || !is_under(binary, b->qemu_builds))
		return NULL;
	const char *id = binary + strlen(b->qemu_builds) + 1;
	for (int i = 0; i < QEMU_BUILD_ID_LEN; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return NULL;
	if (strcmp(id + QEMU_BUILD_ID_LEN, "/" QEMU_BUILD_BIN))
		return NULL;
	/* The daemon without root writes beside the cache: the build must
	 * be root's, from the kept builds' directory down to the binary. */
	snprintf(dir, PATH_MAX, "%.*s", (int)(id - binary) + QEMU_BUILD_ID_LEN, binary);
	char path[PATH_MAX + 8];
	const char *steps[] = { b->qemu_builds, dir, "bin", QEMU_BUILD_BIN };
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		struct stat st;
		if (i < 2)
			snprintf(path, sizeof(path), "%s", steps[i]);
		else
			snprintf(path, sizeof(path), "%s/%s", dir, steps[i]);
		if (lstat(path, &st) < 0 || st.st_uid != 0 || (st.st_mode & 022) ||
		    (i < 3 ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
			return NULL;
	}
	return dir;
}

/* What a spawn's paths may be: its run directory one of the daemon's,
 * what it writes there or in the snapshots, its binary the configured
 * QEMU. */
static int check_spawn(const struct priv_req *r, const struct priv_bounds *b, char *err,
		       size_t errlen)
{
	if (!b->jail)
		return bad(err, errlen, "no jail here");
	if (!is_name(r->name))
		return bad(err, errlen, "bad cgroup name");
	if (!in_one_of(r->run_dir, b->run_parents, 3, 1))
		return bad(err, errlen, "'%s' is not a run directory of this daemon's", r->run_dir);
	for (int i = 0; i < r->nro; i++)
		if (!in_one_of(r->ro[i], b->ro_dirs, 3, 0))
			return bad(err, errlen, "'%s' is not the guest's, the cache's or the state's",
				   r->ro[i]);
	for (int i = 0; i < r->nrw; i++)
		if (!in_one_of(r->rw[i], b->rw_dirs, 3, 0) && !is_under(r->rw[i], r->run_dir))
			return bad(err, errlen, "'%s' is not a snapshot's, a checkpoint's or "
				   "the run directory's", r->rw[i]);
	/* A snapshot's RAM, or its link in the run directory (the base,
	 * jail_spec.h). */
	char base[PATH_MAX];
	snprintf(base, sizeof(base), "%s/" JAIL_RAM_BASE, r->run_dir);
	if (r->ram_ro && !in_one_of(r->ram_ro, b->rw_dirs, 3, 0) && strcmp(r->ram_ro, base))
		return bad(err, errlen, "'%s' is not a snapshot's, a checkpoint's or the run "
			   "directory's base", r->ram_ro);
	const char *qemu = b->qemu ? b->qemu : "qemu-system-x86_64";
	char dir[PATH_MAX];
	if (r->binary && priv_kept_build(b, r->binary, dir))
		qemu = r->binary;
	else if (r->binary && (!b->qemu || strcmp(r->binary, b->qemu)))
		return bad(err, errlen, "'%s' is not the QEMU configured or a build kept",
			   r->binary);
	if (strcmp(r->argv[0], qemu))
		return bad(err, errlen, "'%s' is not the QEMU configured", r->argv[0]);
	if (r->tap && (r->slot < 0 || strcmp(r->tap, NET_TAP)))
		return bad(err, errlen, "a TAP is '" NET_TAP "' of a slot's namespace");
	return 0;
}

int priv_decode(const uint8_t *buf, size_t n, int nfds, const struct priv_bounds *b,
		struct priv_req *r, char *err, size_t errlen)
{
	struct proto_frame f;
	if (n < PROTO_HDR_SIZE || n > PRIV_MAX_MSG || proto_parse(buf, n, &f) != (ssize_t)n || f.flags ||
	    proto_check_attrs(&f) < 0) {
		snprintf(err, errlen, "not a frame");
		return -EPROTO;
	}
	memset(r, 0, offsetof(struct priv_req, strs));
	r->type = f.type;
	r->id = f.id;
	r->slot = -1;
	if (f.type == 0 || f.type >= PR_NTYPES)
		return bad(err, errlen, "unknown request %u", f.type);
	if (nfds != shape[f.type].fds)
		return bad(err, errlen, "request %u takes %d descriptors, not %d", f.type,
			   shape[f.type].fds, nfds);
	uint64_t seen = 0;
	size_t off = 0, used = 0;
	struct proto_attr a;
	while (proto_next(&f, &off, &a) == 1) {
		uint64_t bit = a.tag < T_NTAGS ? BIT(a.tag) : 0;
		int repeats = a.tag == T_RO || a.tag == T_RW || a.tag == T_ARG;
		if (!(shape[f.type].takes & bit))
			return bad(err, errlen, "request %u takes no attribute %u", f.type, a.tag);
		if ((seen & bit) && !repeats)
			return bad(err, errlen, "attribute %u twice", a.tag);
		seen |= bit;
		if (take(r, &used, &a) < 0)
			return bad(err, errlen, "attribute %u: bad size or value", a.tag);
	}
	if ((seen & shape[f.type].needs) != shape[f.type].needs)
		return bad(err, errlen, "request %u lacks an attribute", f.type);
	if (r->slot >= 0 && r->slot >= b->nslots)
		return bad(err, errlen, "slot %d is not one of the %d", r->slot, b->nslots);
	if (f.type <= PR_NS_COUNTERS && b->nslots == 0)
		return bad(err, errlen, "no networks here");
	if ((f.type == PR_RELEASE || f.type == PR_PAGEMAP || f.type == PR_MEM) &&
	    (!b->jail || r->uid <= b->jail_first || r->uid - b->jail_first >= b->jail_count))
		return bad(err, errlen, "uid %u is not a jail id", (unsigned)r->uid);
	if (f.type == PR_RELEASE && !is_name(r->name))
		return bad(err, errlen, "bad cgroup name");
	if (f.type == PR_IMPORT && !is_name(r->name))
		return bad(err, errlen, "bad import name");
	if (f.type == PR_SPAWN)
		return check_spawn(r, b, err, errlen);
	return 0;
}

int priv_put_cidrs(struct pbuf *b, uint16_t tag, const struct net_cidr *c, size_t n)
{
	if (n > NET_MAX_CIDRS)
		return -E2BIG;
	uint8_t v[NET_MAX_CIDRS * PRIV_CIDR_SIZE];
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = v + i * PRIV_CIDR_SIZE;
		p[0] = c[i].family == AF_INET ? 4 : 6;
		p[1] = (uint8_t)c[i].prefix;
		memset(p + 2, 0, 16);
		memcpy(p + 2, c[i].addr, c[i].family == AF_INET ? 4 : 16);
	}
	return proto_put(b, tag, v, n * PRIV_CIDR_SIZE);
}
