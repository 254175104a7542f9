/*
 * priv_client: the daemon's side of the helper (priv.h): its start (a
 * fork and an exec of the binary, then the configuration as the first
 * message), and one call per request, each a frame out and a frame back
 * on the SOCK_SEQPACKET socket, under a mutex and within a timeout.
 */
#include "priv/priv_impl.h"

#include "common/jail_spec.h"
#include "common/launch.h"
#include "common/log.h"
#include "common/unixsock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define REPLY_MAX 2048 /* an answer: a few numbers, or an errno and a line */

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

struct priv {
	int sock;
	pid_t pid;
	int jail, timeout_ms;
	uint32_t next_id;
	int gone; /* said once */
	pthread_mutex_t mu;
	char what[512];
	struct launch_ops launch; /* the runner's way to jailed QEMUs */
};

/* One message and the descriptor that came with it (-1: none). */
static ssize_t recv_one(int sock, void *buf, size_t cap, int *fd)
{
	int nfds;
	ssize_t n = unix_recv_fds(sock, buf, cap, fd, 1, &nfds);
	if (!nfds)
		*fd = -1;
	return n;
}

/* The calls below as launch ops (launch.h): ctx is the struct priv. */
static int launch_spawn(void *ctx, const struct launch_spec *s, pid_t *pid, uid_t *uid,
			int *pidfd, char *err, size_t errlen)
{
	return priv_spawn(ctx, s->jail, s->net_slot, s->argv, s->logfd, pid, uid, pidfd, err,
			  errlen);
}

static int launch_signal(void *ctx, pid_t pid, int sig)
{
	return priv_kill(ctx, pid, sig);
}

static int launch_reap(void *ctx, pid_t pid, int *status)
{
	return priv_reap(ctx, pid, status);
}

static int launch_hold(void *ctx, pid_t pid, uid_t *uid)
{
	return priv_hold(ctx, pid, uid);
}

static int launch_release(void *ctx, uid_t uid, const char *name)
{
	return priv_release(ctx, uid, name);
}

static int launch_mem_open(void *ctx, pid_t pid, uid_t uid, int which, int *fd, char *err,
			   size_t errlen)
{
	return priv_mem_open(ctx, pid, uid, which == LAUNCH_MEM, fd, err, errlen);
}

/* The configuration as the helper's first message (PR_CONFIG). */
static int put_config(struct pbuf *b, const struct priv_config *c)
{
	const struct {
		uint16_t tag;
		const char *s;
	} strs[] = {
		{ T_NET_RANGE, c->net_range }, { T_NET_TAG, c->net_tag },
		{ T_JAIL_ROOT, c->jail_root }, { T_JAIL_LOCKS, c->jail_locks },
		{ T_STATE_DIR, c->state_dir }, { T_CACHE_DIR, c->cache_dir },
		{ T_GUEST_DIR, c->guest_dir }, { T_QEMU, c->qemu },
	};
	const struct {
		uint16_t tag;
		uint32_t v;
	} nums[] = {
		{ T_JAIL, (uint32_t)c->jail }, { T_CGROUPS, (uint32_t)c->cgroups },
		{ T_JAIL_FIRST, c->jail_first }, { T_JAIL_COUNT, c->jail_count },
		{ T_LOG_LEVEL, (uint32_t)log_get_level() }, { T_NETD, c->netd_sock > 2 },
	};
	int r = proto_begin(b, PR_CONFIG, 0, 0);
	for (size_t i = 0; r == 0 && i < sizeof(strs) / sizeof(strs[0]); i++)
		if (strs[i].s)
			r = proto_put_str(b, strs[i].tag, strs[i].s);
	for (size_t i = 0; r == 0 && i < sizeof(nums) / sizeof(nums[0]); i++)
		r = proto_put_u32(b, nums[i].tag, nums[i].v);
	return r == 0 && b->len <= PRIV_MAX_MSG ? proto_end(b) : -E2BIG;
}

/* In the child of the fork: the binary again, with the socket at PRIV_FD
 * and no other descriptor of the daemon's. Never returns. */
static void exec_helper(const struct priv_config *c, int sock)
{
	/* If the daemon dies without closing, so does the helper (kept
	 * across the exec: the binary is not set-id). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Both moved above their places first, so neither dup2 overwrites
	 * the other. */
	int a = fcntl(sock, F_DUPFD, 10);
	int b = c->netd_sock > 2 ? fcntl(c->netd_sock, F_DUPFD, 10) : -1;
	if (a < 0 || dup2(a, PRIV_FD) < 0 || (b >= 0 && dup2(b, PRIV_NETD_FD) < 0))
		_exit(127);
	close_range(b >= 0 ? PRIV_NETD_FD + 1 : PRIV_FD + 1, ~0u, 0);
	char *argv[] = { "cpuosd: priv", PRIV_HELPER_ARG, NULL };
	execv(c->exe ? c->exe : "/proc/self/exe", argv);
	fprintf(stderr, "cpuosd: cannot execute the helper '%s': %s\n",
		c->exe ? c->exe : "/proc/self/exe", strerror(errno));
	_exit(127);
}

int priv_start(const struct priv_config *c, struct priv **out, char *err, size_t errlen)
{
	struct priv *p = calloc(1, sizeof(*p));
	struct pbuf cfg = { 0 };
	int sv[2];
	if (!p || put_config(&cfg, c) < 0) {
		snprintf(err, errlen, "the helper's configuration does not fit a message");
		pbuf_release(&cfg);
		free(p);
		return -E2BIG;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(err, errlen, "cannot make the helper's socket: %s", strerror(errno));
		pbuf_release(&cfg);
		free(p);
		return -EIO;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		exec_helper(c, sv[1]);
	close(sv[1]);
	p->sock = sv[0];
	p->pid = pid;
	p->jail = c->jail;
	p->timeout_ms = (int)(c->timeout_ms ? c->timeout_ms : PRIV_TIMEOUT_MS);
	p->launch = (struct launch_ops){ .spawn = launch_spawn, .signal = launch_signal,
					 .reap = launch_reap, .hold = launch_hold,
					 .release = launch_release, .mem_open = launch_mem_open,
					 .ctx = p, .jails = 1 };
	pthread_mutex_init(&p->mu, NULL);
	int fd;
	ssize_t n = -1;
	struct pollfd pf = { .fd = p->sock, .events = POLLIN };
	if (pid > 0 && unix_send_fds(p->sock, cfg.data, cfg.len, NULL, 0) == 0 && poll(&pf, 1, 60000) == 1)
		n = recv_one(p->sock, p->what, sizeof(p->what) - 1, &fd);
	pbuf_release(&cfg);
	p->what[n > 0 ? n : 0] = '\0';
	if (n <= 0 || p->what[0] != '+') {
		snprintf(err, errlen, "%s", n > 0 ? p->what + 1 : "the helper did not start");
		priv_close(p);
		return -EIO;
	}
	memmove(p->what, p->what + 1, strlen(p->what));
	*out = p;
	return 0;
}

int priv_attach(int sock, unsigned timeout_ms, struct priv **out)
{
	struct priv *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->sock = sock;
	p->timeout_ms = (int)(timeout_ms ? timeout_ms : PRIV_TIMEOUT_MS);
	pthread_mutex_init(&p->mu, NULL);
	*out = p;
	return 0;
}

void priv_close(struct priv *p)
{
	if (!p)
		return;
	close(p->sock); /* the helper's loop ends at the EOF */
	if (p->pid > 0)
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	pthread_mutex_destroy(&p->mu);
	free(p);
}

const char *priv_describe(const struct priv *p)
{
	return p->what;
}

pid_t priv_pid(const struct priv *p)
{
	return p->pid;
}

int priv_jailed(const struct priv *p)
{
	return p && p->jail;
}

/* Sends the request in b (begun with id 0) with fd, and waits for its
 * answer: 0 with the PR_OK frame in reply (and *fd_out if asked for), or
 * -errno with the helper's line in err. */
static int call(struct priv *p, struct pbuf *b, int fd, int *fd_out, uint8_t *reply,
		struct proto_frame *f, char *err, size_t errlen)
{
	int got = -1, r = proto_end(b);
	if (r < 0) {
		pbuf_release(b);
		snprintf(err, errlen, "a request too large for the helper");
		return r;
	}
	if (b->len > PRIV_MAX_MSG) {
		pbuf_release(b);
		snprintf(err, errlen, "a request of %zu bytes, over the helper's %u", b->len,
			 PRIV_MAX_MSG);
		return -E2BIG;
	}
	pthread_mutex_lock(&p->mu);
	uint32_t id = ++p->next_id ? p->next_id : ++p->next_id;
	put_le32(b->data + 8, id);
	r = unix_send_fds(p->sock, b->data, b->len, &fd, fd >= 0);
	struct pollfd pf = { .fd = p->sock, .events = POLLIN };
	int ready = 0;
	while (r == 0 && (ready = poll(&pf, 1, p->timeout_ms)) < 0 && errno == EINTR)
		;
	ssize_t n = r < 0 ? r : ready == 1 ? recv_one(p->sock, reply, REPLY_MAX, &got)
		    : ready == 0 ? -ETIMEDOUT : -errno;
	/* A helper that took too long is stuck, or a request it is still
	 * on would be answered to the next call: it ends here. */
	if (n == -ETIMEDOUT && p->pid > 0)
		kill(p->pid, SIGKILL);
	pthread_mutex_unlock(&p->mu);
	pbuf_release(b);
	if (n <= 0 || proto_parse(reply, (size_t)n, f) != n || f->id != id ||
	    proto_check_attrs(f) < 0 || (f->type != PR_OK && f->type != PR_ERROR)) {
		if (n == -ETIMEDOUT)
			snprintf(err, errlen, "the privileged helper did not answer in %d ms",
				 p->timeout_ms);
		else
			snprintf(err, errlen, "the privileged helper is gone or broken (%s)",
				 n < 0 ? strerror((int)-n) : "a bad answer");
		/* Without it nothing can start or stop: the daemon ends (its
		 * VMs run on) for its supervisor to start it anew. */
		if (!__atomic_exchange_n(&p->gone, 1, __ATOMIC_RELAXED)) {
			log_error("%s: shutting down", err);
			kill(getpid(), SIGTERM);
		}
		r = -EPIPE;
	} else if (f->type == PR_ERROR) {
		uint32_t e = EIO;
		proto_get_u32(f, T_ERRNO, &e);
		if (proto_get_str(f, T_MESSAGE, err, errlen) < 0)
			snprintf(err, errlen, "%s", strerror((int)e));
		r = -(int)(e && e < 4096 ? e : EIO);
	}
	if (r == 0 && fd_out && got < 0) {
		snprintf(err, errlen, "the helper sent no descriptor");
		r = -EPIPE;
	}
	if (r == 0 && fd_out)
		*fd_out = got;
	else if (got >= 0)
		close(got);
	return r;
}

/* A request of just a slot. */
static int slot_call(struct priv *p, uint16_t type, int slot, int fd, int *fd_out,
		     uint8_t *reply, struct proto_frame *f, char *err, size_t errlen)
{
	struct pbuf b = { 0 };
	if (proto_begin(&b, type, 0, 0) < 0 || proto_put_u32(&b, T_SLOT, (uint32_t)slot) < 0) {
		pbuf_release(&b);
		return -ENOMEM;
	}
	return call(p, &b, fd, fd_out, reply, f, err, errlen);
}

static int policy_call(struct priv *p, uint16_t type, int slot, const struct net_policy *pol,
		       unsigned mark, char *err, size_t errlen)
{
	struct pbuf b = { 0 };
	if (proto_begin(&b, type, 0, 0) < 0 || proto_put_u32(&b, T_SLOT, (uint32_t)slot) < 0 ||
	    proto_put_u32(&b, T_MARK, mark) < 0 || proto_put_u32(&b, T_MODE, pol->mode) < 0 ||
	    (pol->nallow && priv_put_cidrs(&b, T_ALLOW, pol->allow, pol->nallow) < 0) ||
	    (pol->ndeny && priv_put_cidrs(&b, T_DENY, pol->deny, pol->ndeny) < 0)) {
		pbuf_release(&b);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	return call(p, &b, -1, NULL, reply, &f, err, errlen);
}

int priv_ns_create(struct priv *p, int slot, const struct net_policy *pol, unsigned mark,
		   char *err, size_t errlen)
{
	return policy_call(p, PR_NS_CREATE, slot, pol, mark, err, errlen);
}

int priv_ns_policy(struct priv *p, int slot, const struct net_policy *pol, unsigned mark,
		   char *err, size_t errlen)
{
	return policy_call(p, PR_NS_POLICY, slot, pol, mark, err, errlen);
}

int priv_ns_destroy(struct priv *p, int slot, char *err, size_t errlen)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	return slot_call(p, PR_NS_DESTROY, slot, -1, NULL, reply, &f, err, errlen);
}

int priv_ns_open(struct priv *p, int slot)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	char err[256];
	int fd, r = slot_call(p, PR_NS_OPEN, slot, -1, &fd, reply, &f, err, sizeof(err));
	return r < 0 ? r : fd;
}

int priv_ns_socket(struct priv *p, int slot, int nsfd, enum priv_sock kind, char *err,
		   size_t errlen)
{
	struct pbuf b = { 0 };
	if (proto_begin(&b, PR_NS_SOCKET, 0, 0) < 0 ||
	    proto_put_u32(&b, T_SLOT, (uint32_t)slot) < 0 || proto_put_u32(&b, T_KIND, kind) < 0) {
		pbuf_release(&b);
		return -ENOMEM;
	}
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	int fd, r = call(p, &b, nsfd, &fd, reply, &f, err, errlen);
	return r < 0 ? r : fd;
}

int priv_ns_resolved(struct priv *p, int slot, int nsfd, int add, const struct priv_addr *a,
		     size_t n, char *err, size_t errlen)
{
	uint8_t v[PRIV_MAX_ADDRS * 8];
	if (n == 0 || n > PRIV_MAX_ADDRS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		memcpy(v + i * 8, a[i].ip, 4);
		put_le32(v + i * 8 + 4, a[i].ttl_s);
	}
	struct pbuf b = { 0 };
	if (proto_begin(&b, PR_NS_RESOLVED, 0, 0) < 0 ||
	    proto_put_u32(&b, T_SLOT, (uint32_t)slot) < 0 || proto_put_u32(&b, T_ADD, !!add) < 0 ||
	    proto_put(&b, T_ADDRS, v, n * 8) < 0) {
		pbuf_release(&b);
		return -ENOMEM;
	}
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	return call(p, &b, nsfd, NULL, reply, &f, err, errlen);
}

int priv_ns_counters(struct priv *p, int slot, uint64_t *refused, uint64_t *sent)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	char err[256];
	int r = slot_call(p, PR_NS_COUNTERS, slot, -1, NULL, reply, &f, err, sizeof(err));
	if (r == 0 && (proto_get_u64(&f, T_REFUSED, refused) < 0 ||
		       proto_get_u64(&f, T_SENT, sent) < 0))
		r = -EPROTO;
	return r;
}

static int put_strs(struct pbuf *b, uint16_t tag, const char *const *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] && proto_put_str(b, tag, s[i]) < 0)
			return -ENOMEM;
	return 0;
}

int priv_spawn(struct priv *p, const struct jail_spec *s, int slot, char *const *argv,
	       int logfd, pid_t *pid, uid_t *uid, int *pidfd, char *err, size_t errlen)
{
	size_t argc = 0;
	while (argv[argc])
		argc++;
	struct pbuf b = { 0 };
	if (proto_begin(&b, PR_SPAWN, 0, 0) < 0 || proto_put_str(&b, T_NAME, s->name) < 0 ||
	    proto_put_u32(&b, T_VCPUS, s->vcpus) < 0 ||
	    proto_put_u32(&b, T_MEMORY, s->memory_mb) < 0 ||
	    proto_put_u32(&b, T_KVM, !!s->kvm) < 0 || proto_put_str(&b, T_RUN_DIR, s->run_dir) < 0 ||
	    (s->binary && proto_put_str(&b, T_BINARY, s->binary) < 0) ||
	    (s->tap && proto_put_str(&b, T_TAP, s->tap) < 0) ||
	    (s->ram_ro && proto_put_str(&b, T_RAM_RO, s->ram_ro) < 0) ||
	    (slot >= 0 && proto_put_u32(&b, T_SLOT, (uint32_t)slot) < 0) ||
	    put_strs(&b, T_RO, s->ro, JAIL_MAX_PATHS) < 0 ||
	    put_strs(&b, T_RW, s->rw, JAIL_MAX_PATHS) < 0 ||
	    put_strs(&b, T_ARG, (const char *const *)argv, argc) < 0) {
		pbuf_release(&b);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	uint32_t v, u;
	int r = call(p, &b, logfd, pidfd, reply, &f, err, errlen);
	if (r == 0 && (proto_get_u32(&f, T_PID, &v) < 0 || proto_get_u32(&f, T_UID, &u) < 0)) {
		close(*pidfd);
		snprintf(err, errlen, "the helper's answer lacks the pid");
		return -EPROTO;
	}
	if (r == 0) {
		*pid = (pid_t)v;
		*uid = u;
	}
	return r;
}

static int pid_call(struct priv *p, uint16_t type, pid_t pid, int sig, uint8_t *reply,
		    struct proto_frame *f)
{
	struct pbuf b = { 0 };
	char err[256];
	if (proto_begin(&b, type, 0, 0) < 0 || proto_put_u32(&b, T_PID, (uint32_t)pid) < 0 ||
	    (sig && proto_put_u32(&b, T_SIGNO, (uint32_t)sig) < 0)) {
		pbuf_release(&b);
		return -ENOMEM;
	}
	return call(p, &b, -1, NULL, reply, f, err, sizeof(err));
}

int priv_reap(struct priv *p, pid_t pid, int *status)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	uint32_t exited = 0, st = 0;
	int r = pid_call(p, PR_REAP, pid, 0, reply, &f);
	if (r == 0 && (proto_get_u32(&f, T_EXITED, &exited) < 0 ||
		       proto_get_u32(&f, T_STATUS, &st) < 0))
		r = -EPROTO;
	if (r < 0)
		return r;
	*status = (int)st;
	return exited ? 1 : 0;
}

int priv_kill(struct priv *p, pid_t pid, int sig)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	return pid_call(p, PR_KILL, pid, sig, reply, &f);
}

int priv_hold(struct priv *p, pid_t pid, uid_t *uid)
{
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	uint32_t u;
	int r = pid_call(p, PR_HOLD, pid, 0, reply, &f);
	if (r == 0 && proto_get_u32(&f, T_UID, &u) < 0)
		r = -EPROTO;
	if (r == 0)
		*uid = u;
	return r;
}

int priv_release(struct priv *p, uid_t uid, const char *name)
{
	struct pbuf b = { 0 };
	char err[256];
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	if (proto_begin(&b, PR_RELEASE, 0, 0) < 0 || proto_put_u32(&b, T_UID, uid) < 0 ||
	    proto_put_str(&b, T_NAME, name) < 0) {
		pbuf_release(&b);
		return -ENOMEM;
	}
	return call(p, &b, -1, NULL, reply, &f, err, sizeof(err));
}

int priv_mem_open(struct priv *p, pid_t pid, uid_t uid, int mem, int *fd, char *err,
		  size_t errlen)
{
	struct pbuf b = { 0 };
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	if (proto_begin(&b, mem ? PR_MEM : PR_PAGEMAP, 0, 0) < 0 ||
	    proto_put_u32(&b, T_PID, (uint32_t)pid) < 0 || proto_put_u32(&b, T_UID, uid) < 0) {
		pbuf_release(&b);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*fd = -1;
	int r = call(p, &b, -1, fd, reply, &f, err, errlen);
	if (r == 0 && *fd < 0) {
		snprintf(err, errlen, "the helper's answer lacks the descriptor");
		r = -EPROTO;
	}
	return r;
}

const struct launch_ops *priv_launch_ops(struct priv *p)
{
	return p ? &p->launch : NULL;
}

int priv_import(struct priv *p, int srcfd, const char *id, unsigned long long max_bytes,
		int *resultfd, char *err, size_t errlen)
{
	struct pbuf b = { 0 };
	uint8_t reply[REPLY_MAX];
	struct proto_frame f;
	if (proto_begin(&b, PR_IMPORT, 0, 0) < 0 || proto_put_str(&b, T_NAME, id) < 0 ||
	    proto_put_u64(&b, T_MAX_BYTES, max_bytes) < 0) {
		pbuf_release(&b);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*resultfd = -1;
	int r = call(p, &b, srcfd, resultfd, reply, &f, err, errlen);
	if (r == 0 && *resultfd < 0) {
		snprintf(err, errlen, "the helper's answer lacks the descriptor");
		r = -EPROTO;
	}
	return r;
}
