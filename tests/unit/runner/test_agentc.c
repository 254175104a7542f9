/*
 * agentc's handshake against a scripted agent on a real unix socket: a new
 * connection may first read what the agent queued for an earlier host (its
 * frames, a half frame QEMU kept from the old socket), and must skip to the
 * answer to its own P_HELLO.
 */
#include "common/proto.h"
#include "runner/agentc.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char sock_path[108];

static int listen_at(void)
{
	snprintf(sock_path, sizeof(sock_path), "/tmp/cpuos-test-agentc-%d.sock", (int)getpid());
	unlink(sock_path);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Reads one whole frame into b (the fake agent's side, blocking). */
static int read_frame(int fd, struct pbuf *b, struct proto_frame *f)
{
	b->len = 0;
	for (;;) {
		ssize_t m = proto_parse(b->data, b->len, f);
		if (m != 0)
			return m > 0 ? 0 : -1;
		if (pbuf_reserve(b, 4096) < 0)
			return -1;
		ssize_t n = read(fd, b->data + b->len, 4096);
		if (n <= 0)
			return -1;
		b->len += (size_t)n;
	}
}

static int put_ok(struct pbuf *b, uint32_t id, const char *agent)
{
	if (proto_begin(b, P_OK, 0, id) < 0 || proto_put_u32(b, A_VERSION, PROTO_VERSION) < 0 ||
	    proto_put_str(b, A_AGENT, agent) < 0)
		return -1;
	return proto_end(b);
}

static int put_refusal(struct pbuf *b, uint32_t id)
{
	if (proto_begin(b, P_ERROR, 0, id) < 0 || proto_put_u32(b, A_ERRNO, EBUSY) < 0 ||
	    proto_put_str(b, A_MESSAGE, "refused by the fake") < 0)
		return -1;
	return proto_end(b);
}

/* What the fake agent sends ahead of its answer to P_HELLO, and how. */
enum junk { JUNK_NONE, JUNK_OLD_SESSION, JUNK_DRIP, JUNK_THEN_ERROR };

/* The fake agent: answers P_HELLO after the junk (or refuses it), then a P_PING. */
static void fake_agent(int lfd, enum junk junk)
{
	int fd = accept(lfd, NULL, NULL);
	struct pbuf in = { 0 }, out = { 0 };
	struct proto_frame f;
	if (fd < 0 || read_frame(fd, &in, &f) < 0 || f.type != P_HELLO)
		_exit(2);
	uint32_t hello = f.id;
	if (junk != JUNK_NONE) {
		/* The old session's output, on the id this host will use next. */
		static const char text[] = "old output";
		if (proto_raw(&out, P_STDOUT, 0, hello + 1, text, sizeof(text) - 1) < 0 ||
		    put_ok(&out, hello - 1, "an old answer") < 0)
			_exit(2);
		/* The head of a frame whose rest QEMU dropped with the old socket:
		 * its length would swallow what follows. */
		uint8_t half[20] = { 0xe8, 0x03, 0, 0, P_STDOUT, 0, 0, 0, 7 };
		if (pbuf_append(&out, half, sizeof(half)) < 0)
			_exit(2);
	}
	int refuse = junk == JUNK_THEN_ERROR;
	if ((refuse ? put_refusal(&out, hello) : put_ok(&out, hello, "fake")) < 0)
		_exit(2);
	/* Byte by byte: the answer's header is split over many reads. */
	size_t step = junk == JUNK_DRIP ? 1 : out.len;
	for (size_t o = 0; o < out.len; o += step) {
		size_t n = out.len - o < step ? out.len - o : step;
		if (write(fd, out.data + o, n) != (ssize_t)n)
			_exit(2);
		if (junk == JUNK_DRIP)
			usleep(200);
	}
	if (!refuse) {
		out.len = 0;
		if (read_frame(fd, &in, &f) < 0 || f.type != P_PING ||
		    proto_begin(&out, P_OK, 0, f.id) < 0 || proto_end(&out) < 0 ||
		    write(fd, out.data, out.len) != (ssize_t)out.len)
			_exit(3);
	}
	/* Until the host hangs up: an EOF would end its wait for the answer. */
	char c;
	while (read(fd, &c, 1) > 0)
		;
	_exit(0);
}

struct ping {
	int done;
	uint16_t type;
};

static void ping_cb(void *arg, const struct proto_frame *f)
{
	struct ping *p = arg;
	p->done = 1;
	p->type = f->type;
}

static void handshake(enum junk junk)
{
	int lfd = listen_at();
	if (!CHECK(lfd >= 0))
		return;
	pid_t pid = fork();
	if (pid == 0)
		fake_agent(lfd, junk);
	close(lfd);
	struct agentc *c = NULL;
	char err[256] = "";
	int r = agentc_connect(sock_path, 5000, &c, err, sizeof(err));
	if (junk == JUNK_THEN_ERROR) /* the agent's refusal, not a timeout */
		CHECK(r == -EBUSY && strstr(err, "refused by the fake"));
	else if (!CHECK(r == 0))
		t_note("connect: %s", err);
	if (c) {
		CHECK(agentc_ready(c) && !strcmp(agentc_version(c), "fake"));
		struct ping p = { 0 };
		CHECK(agentc_begin(c, P_PING, ping_cb, &p, NULL) && agentc_end(c) == 0);
		if (!CHECK(agentc_wait(c, &p.done, 5000) == 0 && p.type == P_OK))
			t_note("ping: done %d, type %u", p.done, p.type);
		agentc_close(c);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	if (!CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		t_note("fake agent: status %#x", st);
	unlink(sock_path);
}

static void test_plain(void)
{
	handshake(JUNK_NONE);
}

static void test_old_session(void)
{
	handshake(JUNK_OLD_SESSION);
}

static void test_drip(void)
{
	handshake(JUNK_DRIP);
}

static void test_refused(void)
{
	handshake(JUNK_THEN_ERROR);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	static const struct t_case cases[] = {
		{ "agentc_hello_plain", test_plain },
		{ "agentc_hello_after_old_session", test_old_session },
		{ "agentc_hello_dripped", test_drip },
		{ "agentc_hello_refused", test_refused },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
