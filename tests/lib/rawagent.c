/*
 * rawagent: cpuos-agent in --listen mode for the tests that talk to it in raw
 * frames (test_agent, test_agent_code): the agent process, a client that
 * trusts nothing of the host-side runner, and hand-made frames.
 */
#include "tests/lib/rawagent.h"

#include "common/clock.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

pid_t agent_pid = -1;
int agent_status = -1; /* wait status once reaped */
char sock_path[108], log_path[128];
uint32_t next_id = 100;
pid_t sleepers[8]; /* host pids of our `sleep`s, killed at the end */
int nsleepers;

/* --- the agent process --- */

static const char *agent_path(void)
{
	const char *p = getenv("CPUOS_AGENT");
	return p && *p ? p : "build/guest/cpuos-agent";
}

/* Whether the agent still runs; reaps it (agent_status) when it does not. */
int agent_alive(void)
{
	if (agent_pid <= 0)
		return 0;
	int st;
	if (waitpid(agent_pid, &st, WNOHANG) == agent_pid) {
		agent_status = st;
		agent_pid = -1;
		return 0;
	}
	return 1;
}

void agent_kill(void)
{
	if (agent_alive()) {
		kill(agent_pid, SIGKILL);
		waitpid(agent_pid, &agent_status, 0);
		agent_pid = -1;
	}
	/* A killed agent cannot stop its children: do it for it. */
	for (int i = 0; i < nsleepers; i++)
		kill(sleepers[i], SIGKILL);
	unlink(sock_path);
	/* The agent's run directory beside its socket, with the code kernels' scripts. */
	char path[160];
	static const char *const files[] = {"kernel.py", "kernel.sh", "kernel.py.tmp", "kernel.sh.tmp"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s.d/%s", sock_path, files[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s.d", sock_path);
	rmdir(path);
}

/* Starts the agent, its stderr into log_path (bad-frame lines are expected
 * and would drown the test output): 0 or -1 with a reason in err. */
int agent_start(char *err, size_t errlen)
{
	const char *path = agent_path();
	if (access(path, X_OK) < 0) {
		snprintf(err, errlen, "cannot run agent '%s': %s (run make, or set CPUOS_AGENT)",
			 path, strerror(errno));
		return -1;
	}
	snprintf(sock_path, sizeof(sock_path), "/tmp/cpuos-agent-test-%d.sock", (int)getpid());
	snprintf(log_path, sizeof(log_path), "/tmp/cpuos-agent-test-%d.log", (int)getpid());
	agent_pid = fork();
	if (agent_pid < 0) {
		snprintf(err, errlen, "cannot fork: %s", strerror(errno));
		return -1;
	}
	if (agent_pid == 0) {
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(path, path, "--listen", sock_path, (char *)NULL);
		dprintf(2, "cannot exec '%s': %s\n", path, strerror(errno));
		_exit(127);
	}
	struct stat st;
	int64_t end = clock_ms() + 5000;
	while (stat(sock_path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		if (!agent_alive() || clock_ms() > end) {
			snprintf(err, errlen, "agent '%s' is not listening on '%s' (see %s)", path,
				 sock_path, log_path);
			agent_kill();
			return -1;
		}
		usleep(10000);
	}
	return 0;
}

int agent_setup(void)
{
	char err[512];
	if (agent_start(err, sizeof(err)) < 0) {
		t_note("%s", err);
		return -1;
	}
	return 0;
}

void agent_teardown(void)
{
	agent_kill();
	if (agent_status != -1 && WIFSIGNALED(agent_status) && WTERMSIG(agent_status) != SIGKILL) {
		t_note("the agent died of signal %d", WTERMSIG(agent_status));
		CHECK(0);
	}
	if (t_failed())
		t_note("agent log: %s", log_path);
	else
		unlink(log_path);
}

/* --- a raw client --- */

int cl_open(struct client *c)
{
	memset(c, 0, sizeof(*c));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	/* No retry: the agent was listening before the first case, so a
	 * refusal means it is gone. */
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(c->fd);
		c->fd = -1;
		return -e;
	}
	struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

void cl_close(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	pbuf_release(&c->in);
}

int cl_send(struct client *c, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Sends a frame built in b (then emptied). */
int cl_send_buf(struct client *c, struct pbuf *b)
{
	int r = cl_send(c, b->data, b->len);
	b->len = b->mark = 0;
	return r;
}

/* Next frame from the agent, valid until the next call: 1, 0 at EOF (the
 * agent dropped us), -ETIMEDOUT, or -errno (-ECONNRESET also means dropped). */
int cl_recv(struct client *c, struct proto_frame *f)
{
	pbuf_consume(&c->in, c->used);
	c->used = 0;
	for (;;) {
		ssize_t m = proto_parse(c->in.data, c->in.len, f);
		if (m < 0)
			return (int)m; /* the agent sent us a bad frame */
		if (m > 0) {
			c->used = (size_t)m;
			return 1;
		}
		if (pbuf_reserve(&c->in, 64 * 1024) < 0)
			return -ENOMEM;
		ssize_t n = recv(c->fd, c->in.data + c->in.len, 64 * 1024, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		if (n == 0)
			return 0;
		c->in.len += (size_t)n;
	}
}

int terminal(uint16_t type)
{
	return type == P_OK || type == P_ERROR || type == P_EXIT;
}

/* Reads until the terminal frame of operation id, which it returns in f:
 * its type, or <= 0 as cl_recv. Frames of other operations are skipped. */
int cl_wait_end(struct client *c, uint32_t id, struct proto_frame *f)
{
	for (;;) {
		int r = cl_recv(c, f);
		if (r <= 0)
			return r;
		if (f->id == id && terminal(f->type))
			return f->type;
	}
}

uint32_t attr_u32(const struct proto_frame *f, uint16_t tag)
{
	uint32_t v = 0xffffffffu;
	if (proto_check_attrs(f) < 0 || proto_get_u32(f, tag, &v) < 0)
		return 0xffffffffu;
	return v;
}

/* A request with no attributes. */
int cl_simple(struct client *c, uint16_t type, uint32_t id)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, type, 0, id);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* PING: whether it came back P_OK on its id. */
int cl_ping(struct client *c)
{
	uint32_t id = next_id++;
	struct proto_frame f;
	return cl_simple(c, P_PING, id) == 0 && cl_wait_end(c, id, &f) == P_OK;
}

/* HELLO: whether the agent answered P_OK with our protocol version. */
int cl_hello(struct client *c)
{
	struct pbuf b = {0};
	uint32_t id = next_id++;
	struct proto_frame f;
	int r = proto_begin(&b, P_HELLO, 0, id);
	r = r ? r : proto_put_u32(&b, A_VERSION, PROTO_VERSION);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r == 0 && cl_wait_end(c, id, &f) == P_OK && attr_u32(&f, A_VERSION) == PROTO_VERSION;
}

/* A fresh connection that said hello and got a ping answered. */
int cl_ready(struct client *c)
{
	int r = cl_open(c);
	if (!CHECK(r == 0)) {
		t_note("cannot connect to '%s': %s", sock_path, strerror(-r));
		return 0;
	}
	return CHECK(cl_hello(c)) && CHECK(cl_ping(c));
}

/* Whether the agent dropped the connection without answering anything. */
int cl_dropped_silently(struct client *c)
{
	struct proto_frame f;
	int frames = 0, r;
	while ((r = cl_recv(c, &f)) == 1)
		frames++;
	if (frames)
		t_note("got %d frame(s) before the drop", frames);
	return frames == 0 && (r == 0 || r == -ECONNRESET);
}

size_t put_hdr(uint8_t *p, uint32_t len, uint16_t type, uint16_t flags, uint32_t id)
{
	memcpy(p, &len, 4); /* x86 is little-endian, as the wire */
	memcpy(p + 4, &type, 2);
	memcpy(p + 6, &flags, 2);
	memcpy(p + 8, &id, 4);
	return PROTO_HDR_SIZE;
}

size_t put_attr(uint8_t *p, uint16_t tag, uint32_t len, const void *v, uint32_t vlen)
{
	memcpy(p, &tag, 2);
	memcpy(p + 2, &len, 4);
	memcpy(p + 6, v, vlen);
	return 6 + vlen;
}

/* Sends a frame with a hand-made payload (n bytes of pl): 0 or -EPIPE. */
int raw_request(struct client *c, uint16_t type, uint32_t id, const void *pl, uint32_t n)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	put_hdr(hdr, n, type, 0, id);
	if (cl_send(c, hdr, sizeof(hdr)) < 0 || (n && cl_send(c, pl, n) < 0))
		return -EPIPE;
	return 0;
}

int expect_error(struct client *c, uint32_t id, uint32_t err1, uint32_t err2)
{
	struct proto_frame f;
	int t = cl_wait_end(c, id, &f);
	uint32_t e = t == P_ERROR ? attr_u32(&f, A_ERRNO) : 0;
	if (t != P_ERROR || (e != err1 && e != err2)) {
		t_note("id %u: got type %d errno %u, wanted P_ERROR errno %u", id, t, e, err1);
		return 0;
	}
	return 1;
}
