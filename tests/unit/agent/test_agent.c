/*
 * test_agent: cpuos-agent in --listen mode (the protocol on a host Unix
 * socket) against a hostile and a heavy host: bad frames, garbage, reconnects,
 * processes that outlive their connection, the per-connection operation cap.
 * Talks raw bytes, so nothing here trusts the host-side client (agentc).
 */
#include "common/clock.h"
#include "common/proto.h"
#include "tests/lib/rawagent.h"
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
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OP_CAP	     1024 /* MAX_OPS in src/agent/conn.h, the documented cap */

/* --- cases --- */

static void test_hello_ping(void)
{
	struct client c;
	CHECK(cl_open(&c) == 0);
	uint32_t id = next_id++;
	struct pbuf b = {0};
	CHECK(proto_begin(&b, P_HELLO, 0, id) == 0 && proto_put_u32(&b, A_VERSION, 1) == 0 &&
	      proto_end(&b) == 0);
	CHECK(cl_send_buf(&c, &b) == 0);
	pbuf_release(&b);
	struct proto_frame f;
	CHECK(cl_wait_end(&c, id, &f) == P_OK);
	CHECK(attr_u32(&f, A_VERSION) == PROTO_VERSION);
	char agent[64] = "";
	CHECK(proto_get_str(&f, A_AGENT, agent, sizeof(agent)) == 0 &&
	      !strncmp(agent, "cpuos-agent", 11));
	CHECK(cl_ping(&c));
	/* A request on id 0 has nowhere to be answered: ignored, not dropped. */
	CHECK(cl_simple(&c, P_PING, 0) == 0);
	id = next_id++;
	CHECK(cl_simple(&c, P_PING, id) == 0);
	CHECK(cl_recv(&c, &f) == 1 && f.id == id && f.type == P_OK);
	cl_close(&c);
}

static void test_unknown_type(void)
{
	static const uint16_t types[] = {0, P_TRUST + 1, 31, P_OK, P_NOTICE, 0xffff};
	struct client c;
	if (!cl_ready(&c))
		goto out;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint32_t id = next_id++;
		CHECK(raw_request(&c, types[i], id, NULL, 0) == 0);
		if (!CHECK(expect_error(&c, id, ENOSYS, ENOSYS)))
			t_note("type %u", types[i]);
	}
	/* P_DATA for no live operation is dropped silently: the next frame we
	 * get must be the ping's answer. */
	uint32_t data_id = next_id++;
	CHECK(raw_request(&c, P_DATA, data_id, "xyz", 3) == 0);
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(cl_simple(&c, P_PING, id) == 0);
	CHECK(cl_recv(&c, &f) == 1 && f.id == id && f.type == P_OK);
out:
	cl_close(&c);
}

static void test_bad_attrs(void)
{
	struct client c;
	uint8_t pl[64];
	if (!cl_ready(&c))
		goto out;
	/* attribute length running past the payload */
	uint32_t id = next_id++;
	uint32_t n = (uint32_t)put_attr(pl, A_PATH, 100, "/x", 2);
	CHECK(raw_request(&c, P_STAT, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EPROTO, EINVAL));
	/* an attribute header cut short */
	id = next_id++;
	CHECK(raw_request(&c, P_STAT, id, pl, 3) == 0);
	CHECK(expect_error(&c, id, EPROTO, EINVAL));
	/* an exec whose list is broken after a good attribute starts nothing */
	n = (uint32_t)put_attr(pl, A_ARG, 4, "true", 4);
	n += (uint32_t)put_attr(pl + n, A_ARG, 0xfffffff0u, "", 0);
	id = next_id++;
	CHECK(raw_request(&c, P_EXEC, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EPROTO, EINVAL));
	/* an integer of the wrong size */
	n = (uint32_t)put_attr(pl, A_PROC, 2, "\x01\x00", 2);
	id = next_id++;
	CHECK(raw_request(&c, P_WAIT, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EPROTO, EINVAL));
	CHECK(cl_ping(&c));
out:
	cl_close(&c);
}

static void test_bad_strings(void)
{
	struct client c;
	uint8_t pl[PROTO_MAX_STR + 64];
	struct proto_frame f;
	if (!cl_ready(&c))
		goto out;
	/* The good case first, so the errors below are not a broken STAT. */
	uint32_t id = next_id++;
	uint32_t n = (uint32_t)put_attr(pl, A_PATH, 1, "/", 1);
	CHECK(raw_request(&c, P_STAT, id, pl, n) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK && S_ISDIR(attr_u32(&f, A_MODE)));
	/* a NUL byte inside the path: "/etc\0/passwd" must not stat /etc */
	id = next_id++;
	n = (uint32_t)put_attr(pl, A_PATH, 12, "/etc\0/passwd", 12);
	CHECK(raw_request(&c, P_STAT, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EINVAL, EINVAL));
	/* a relative path */
	id = next_id++;
	n = (uint32_t)put_attr(pl, A_PATH, 3, "etc", 3);
	CHECK(raw_request(&c, P_STAT, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EINVAL, EINVAL));
	/* a path over PROTO_MAX_STR */
	id = next_id++;
	memset(pl + 6, 'a', PROTO_MAX_STR + 1);
	pl[6] = '/';
	n = (uint32_t)put_attr(pl, A_PATH, PROTO_MAX_STR + 1, pl + 6, PROTO_MAX_STR + 1);
	CHECK(raw_request(&c, P_STAT, id, pl, n) == 0);
	CHECK(expect_error(&c, id, ENAMETOOLONG, EINVAL));
	CHECK(cl_ping(&c));
out:
	cl_close(&c);
}

/* Sends hdr bytes on a ready connection and checks the agent drops it
 * without an answer, then that a new connection works. */
static void expect_drop(const uint8_t *bytes, size_t n, const char *what)
{
	struct client c;
	if (cl_ready(&c)) {
		CHECK(cl_send(&c, bytes, n) == 0);
		if (!CHECK(cl_dropped_silently(&c)))
			t_note("%s: connection not dropped", what);
	}
	cl_close(&c);
	if (!cl_ready(&c))
		t_note("%s: no working connection afterwards", what);
	cl_close(&c);
}

static void test_oversized(void)
{
	uint8_t h[PROTO_HDR_SIZE];
	put_hdr(h, PROTO_MAX_PAYLOAD + 1, P_PING, 0, next_id++);
	expect_drop(h, sizeof(h), "len = max + 1");
	put_hdr(h, 0xffffffffu, P_FWRITE, 0, next_id++);
	expect_drop(h, sizeof(h), "len = 4 GiB - 1");
}

static void test_reserved_flags(void)
{
	uint8_t h[PROTO_HDR_SIZE];
	put_hdr(h, 0, P_PING, 0x0002, next_id++);
	expect_drop(h, sizeof(h), "flags 0x0002");
	put_hdr(h, 0, P_PING, 0x8000 | PF_EOF, next_id++);
	expect_drop(h, sizeof(h), "flags 0x8001");
}

static void test_truncated(void)
{
	uint8_t buf[PROTO_HDR_SIZE + 10] = {0};
	struct client c;
	/* a payload cut short, then a header cut short */
	for (int round = 0; round < 2; round++) {
		if (cl_ready(&c)) {
			put_hdr(buf, 100, P_STAT, 0, next_id++);
			CHECK(cl_send(&c, buf, round ? 5 : sizeof(buf)) == 0);
		}
		cl_close(&c);
		cl_ready(&c);
		cl_close(&c);
	}
}

/* Fills buf with frames whose contents are random but whose headers are
 * plausible, so payloads reach the dispatcher. With hostile, a few headers
 * carry bad flags and the last frame is often cut; without, the bytes are
 * whole, well-framed frames (returns their length, maybe 0). Requests with
 * effects on the host running this test become STAT: a lucky well-formed
 * EXEC, REMOVE or POWEROFF must not happen here. */
static size_t random_frames(uint8_t *buf, size_t cap, int hostile)
{
	size_t n = (size_t)rand() % cap, off = 0;
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)rand();
	while (off + PROTO_HDR_SIZE <= n) {
		size_t room = hostile ? n - off : n - off - PROTO_HDR_SIZE + 1;
		uint32_t len = (uint32_t)((size_t)rand() % room);
		uint16_t type = (uint16_t)(rand() % 80);
		if (type == P_EXEC || type == P_SIGNAL || type == P_FWRITE || type == P_MKDIR ||
		    type == P_REMOVE || type == P_RENAME || type == P_POWEROFF)
			type = P_STAT;
		uint16_t flags = (uint16_t)(rand() & PF_MASK);
		if (hostile && rand() % 16 == 0)
			flags = (uint16_t)rand();
		put_hdr(buf + off, len, type, flags, (uint32_t)rand() % 8);
		/* Often a well-formed attribute list of random tags. */
		size_t p = off + PROTO_HDR_SIZE, end = p + len < n ? p + len : n;
		while (rand() % 2 && p + 6 <= end) {
			uint16_t tag = (uint16_t)(rand() % 40);
			uint32_t alen = (uint32_t)((size_t)rand() % (end - p - 6 + 1));
			memcpy(buf + p, &tag, 2);
			memcpy(buf + p + 2, &alen, 4);
			p += 6 + alen;
		}
		off += PROTO_HDR_SIZE + len;
	}
	return hostile ? n : off;
}

/* One garbage round on a fresh connection, by mode: 0 random bytes, 1
 * hostile framing, 2 well-framed frames then a ping that must be answered,
 * 3 the same after a hello. Returns 1 when a ping was answered, 0 when none
 * was due, -1 when one was due and not answered, -2 when the agent hung. */
static int garbage_answers; /* frames answering well-framed garbage */

static int garbage_round(int mode)
{
	static uint8_t buf[4096 + PROTO_HDR_SIZE];
	const uint32_t ping_id = 1000; /* out of random_frames' ids */
	struct client c;
	if (cl_open(&c) < 0)
		return -2;
	if (mode == 3)
		cl_hello(&c);
	size_t n;
	if (mode == 0) {
		n = (size_t)rand() % 4096 + 1;
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)rand();
	} else {
		n = random_frames(buf, 4096, mode == 1);
	}
	if (mode >= 2)
		n += put_hdr(buf + n, 0, P_PING, 0, ping_id);
	cl_send(&c, buf, n); /* the agent may drop us midway */
	struct proto_frame f;
	int r, ret = 0;
	while (mode >= 2 && ret == 0) {
		if (cl_recv(&c, &f) != 1)
			ret = -1;
		else if (f.id == ping_id && terminal(f.type))
			ret = f.type == P_OK ? 1 : -1;
		else
			garbage_answers++;
	}
	/* Wait for the agent to finish with us, so rounds do not pile up in
	 * the listen backlog: it drops us at our EOF at the latest. (Answers
	 * it queued before a bad frame or our EOF may be discarded.) */
	shutdown(c.fd, SHUT_WR);
	while ((r = cl_recv(&c, &f)) == 1)
		;
	cl_close(&c);
	return r == -ETIMEDOUT ? -2 : ret;
}

static void test_random_garbage(void)
{
	int due = 0, answered = 0, hung = 0;
	srand(20240611);
	for (int round = 0; round < 200 && !hung; round++) {
		int r = garbage_round(round % 4);
		due += round % 4 >= 2;
		answered += r == 1;
		hung += r == -2;
	}
	CHECK(hung == 0);
	/* Well-framed garbage never costs the connection, so it reached the
	 * handlers and the ping behind it was answered. */
	if (!CHECK(due == 100 && answered == due))
		t_note("%d of %d pings behind well-framed garbage answered", answered, due);
	/* ... and the handlers answered the garbage itself (ENOSYS, EPROTO...). */
	if (!CHECK(garbage_answers > 200))
		t_note("%d answers to well-framed garbage", garbage_answers);
	CHECK(agent_alive());
	struct client c;
	cl_ready(&c);
	cl_close(&c);
}

/* EXEC of `sleep 30`, foreground or background: A_PROC, or 0. */
static uint32_t start_sleep(struct client *c, int background)
{
	struct pbuf b = {0};
	uint32_t id = next_id++;
	int r = proto_begin(&b, P_EXEC, 0, id);
	r = r ? r : proto_put_str(&b, A_ARG, "sleep");
	r = r ? r : proto_put_str(&b, A_ARG, "30");
	if (background)
		r = r ? r : proto_put_u32(&b, A_BACKGROUND, 1);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	struct proto_frame f;
	if (r < 0 || cl_recv(c, &f) != 1 || f.id != id ||
	    f.type != (background ? P_OK : P_STARTED)) {
		t_note("exec of sleep 30 did not start");
		return 0;
	}
	uint32_t pid = attr_u32(&f, A_PID);
	if (pid != 0xffffffffu && nsleepers < 8)
		sleepers[nsleepers++] = (pid_t)pid;
	uint32_t proc = attr_u32(&f, A_PROC);
	return proc == 0xffffffffu ? 0 : proc;
}

/* SIGNAL proc: whether it was answered P_OK. */
static int signal_proc(struct client *c, uint32_t proc, uint32_t sig)
{
	struct pbuf b = {0};
	uint32_t id = next_id++;
	int r = proto_begin(&b, P_SIGNAL, 0, id);
	r = r ? r : proto_put_u32(&b, A_PROC, proc);
	r = r ? r : proto_put_u32(&b, A_SIGNO, sig);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	struct proto_frame f;
	return r == 0 && cl_wait_end(c, id, &f) == P_OK;
}

static int send_wait(struct client *c, uint32_t id, uint32_t proc)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_WAIT, 0, id);
	r = r ? r : proto_put_u32(&b, A_PROC, proc);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* PS: the state of proc (0 when not listed), its pid and command. */
static uint32_t ps_state(struct client *c, uint32_t proc, uint32_t *pid, char *cmd, size_t cmdlen)
{
	uint32_t id = next_id++, state = 0;
	struct proto_frame f = {0};
	if (cl_simple(c, P_PS, id) < 0)
		return 0;
	while (cl_recv(c, &f) == 1 && f.id == id && f.type == P_ENTRY) {
		if (attr_u32(&f, A_PROC) != proc)
			continue;
		state = attr_u32(&f, A_STATE);
		*pid = attr_u32(&f, A_PID);
		if (proto_get_str(&f, A_CMD, cmd, cmdlen) < 0)
			cmd[0] = '\0';
	}
	return f.id == id && f.type == P_OK ? state : 0;
}

static void test_process_outlives_connection(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	uint32_t proc = start_sleep(&c, 0);
	CHECK(proc != 0);
	cl_close(&c); /* the exec operation ends silently; the process lives on */
	if (!cl_ready(&c) || !proc)
		goto out;
	uint32_t pid = 0;
	char cmd[64] = "";
	CHECK(ps_state(&c, proc, &pid, cmd, sizeof(cmd)) == PS_RUNNING);
	CHECK(!strcmp(cmd, "sleep 30"));
	CHECK(pid > 1 && kill((pid_t)pid, 0) == 0); /* --listen: a host process */
	CHECK(signal_proc(&c, proc, SIGKILL));
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(send_wait(&c, id, proc) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_EXIT);
	CHECK(attr_u32(&f, A_SIGNAL) == SIGKILL);
	CHECK(attr_u32(&f, A_EXIT_CODE) == 0xffffffffu);
	/* Waited: collected, no longer listed. */
	CHECK(ps_state(&c, proc, &pid, cmd, sizeof(cmd)) == 0);
out:
	cl_close(&c);
}

static void test_operation_cap(void)
{
	enum { N = OP_CAP + 76 };
	struct client c;
	int64_t start = clock_ms();
	if (!cl_ready(&c))
		goto out;
	uint32_t proc = start_sleep(&c, 1);
	if (!CHECK(proc != 0))
		goto out;
	/* N waits on one process, all sent before reading: each holds an
	 * operation open until the process ends. */
	uint32_t base = next_id;
	next_id += N;
	int sent = 0;
	for (int i = 0; i < N; i++)
		sent += send_wait(&c, base + (uint32_t)i, proc) == 0;
	CHECK(sent == N);
	/* A live id reused is EBUSY, even at the cap. */
	CHECK(send_wait(&c, base, proc) == 0);
	int eagain = 0, wrong = 0, ebusy = 0;
	struct proto_frame f;
	for (int i = 0; i < N - OP_CAP + 1; i++) {
		if (cl_recv(&c, &f) != 1 || f.type != P_ERROR) {
			wrong++;
			break;
		}
		uint32_t e = attr_u32(&f, A_ERRNO);
		if (e == EAGAIN && f.id >= base + OP_CAP && f.id < base + N)
			eagain++;
		else if (e == EBUSY && f.id == base)
			ebusy++;
		else
			wrong++;
	}
	CHECK(eagain == N - OP_CAP);
	CHECK(ebusy == 1);
	CHECK(wrong == 0);
	CHECK(cl_ping(&c)); /* nothing else came before the ping's answer */
	/* Killing the process ends exactly the operations that were held. */
	CHECK(signal_proc(&c, proc, SIGKILL));
	int exits = 0, bad = 0;
	while (exits + bad < OP_CAP && cl_recv(&c, &f) == 1) {
		if (f.type == P_EXIT && f.id >= base && f.id < base + OP_CAP &&
		    attr_u32(&f, A_SIGNAL) == SIGKILL)
			exits++;
		else
			bad++;
	}
	CHECK(exits == OP_CAP);
	CHECK(bad == 0);
	CHECK(cl_ping(&c));
	int64_t ms = clock_ms() - start;
	if (!CHECK(ms < 10000))
		t_note("took %lld ms", (long long)ms);
out:
	cl_close(&c);
}

/* Sends an exec of shell with the given window (0: none) and stdin. */
static int send_exec_window(struct client *c, uint32_t id, const char *shell, uint32_t window,
			    int want_stdin)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_EXEC, 0, id);
	r = r ? r : proto_put_str(&b, A_SHELL, shell);
	if (window)
		r = r ? r : proto_put_u32(&b, A_WINDOW, window);
	if (want_stdin)
		r = r ? r : proto_put_u32(&b, A_STDIN, 1);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

static int send_credit(struct client *c, uint32_t id, uint32_t n)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_CREDIT, 0, id);
	r = r ? r : proto_put_u32(&b, A_CREDIT, n);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* Output bytes of operation id until nothing came for a short while (or its
 * end: *ended). */
static uint64_t drain_output(struct client *c, uint32_t id, int *ended)
{
	struct timeval shortwait = {.tv_usec = 400000}, normal = {.tv_sec = IO_TIMEOUT_S};
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &shortwait, sizeof(shortwait));
	uint64_t n = 0;
	struct proto_frame f;
	while (!*ended && cl_recv(c, &f) == 1) {
		if (f.id == id && f.type == P_STDOUT)
			n += f.len;
		if (f.id == id && terminal(f.type))
			*ended = f.type;
	}
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &normal, sizeof(normal));
	return n;
}

/* The output window: without credit the agent stops at the window (plus at
 * most one chunk), other operations still answer, and credit brings the
 * rest. */
static void test_output_window(void)
{
	enum { WINDOW = 64 * 1024, TOTAL = 3000000 };
	struct client c;
	if (!cl_ready(&c))
		goto out;
	uint32_t id = next_id++;
	CHECK(send_exec_window(&c, id, "head -c 3000000 /dev/zero", WINDOW, 0) == 0);
	int ended = 0;
	uint64_t got = drain_output(&c, id, &ended);
	if (!CHECK(!ended && got >= WINDOW / 2 && got <= WINDOW + PROTO_DATA_CHUNK))
		t_note("got %llu bytes before any credit (window %d), ended %d",
		       (unsigned long long)got, WINDOW, ended);
	CHECK(cl_ping(&c)); /* the channel is not stalled, only the operation */
	CHECK(send_credit(&c, id, 256 * 1024) == 0);
	uint64_t more = drain_output(&c, id, &ended);
	if (!CHECK(!ended && more > 0 && got + more <= WINDOW + 256 * 1024 + PROTO_DATA_CHUNK))
		t_note("got %llu more after 256 KiB of credit", (unsigned long long)more);
	CHECK(send_credit(&c, id, 8u << 20) == 0);
	uint64_t rest = drain_output(&c, id, &ended);
	for (int i = 0; i < 20 && !ended; i++)
		rest += drain_output(&c, id, &ended);
	CHECK(ended == P_EXIT);
	if (!CHECK(got + more + rest == TOTAL))
		t_note("got %llu bytes in all", (unsigned long long)(got + more + rest));
out:
	cl_close(&c);
}

/* The input window: the agent credits stdin bytes back as the process takes
 * them. */
static void test_input_credit(void)
{
	enum { TOTAL = 4 * 64 * 1024 };
	struct client c;
	if (!cl_ready(&c))
		goto out;
	uint32_t id = next_id++;
	CHECK(send_exec_window(&c, id, "wc -c", 0, 1) == 0);
	static uint8_t chunk[64 * 1024];
	struct pbuf b = {0};
	for (int i = 0; i < TOTAL / (int)sizeof(chunk); i++)
		CHECK(proto_raw(&b, P_DATA, 0, id, chunk, sizeof(chunk)) == 0 && cl_send_buf(&c, &b) == 0);
	uint64_t credited = 0;
	struct proto_frame f;
	while (credited < TOTAL && cl_recv(&c, &f) == 1)
		if (f.id == id && f.type == P_CREDIT)
			credited += attr_u32(&f, A_CREDIT);
	if (!CHECK(credited == TOTAL))
		t_note("credited %llu of %d bytes", (unsigned long long)credited, TOTAL);
	CHECK(proto_raw(&b, P_DATA, PF_EOF, id, "", 0) == 0 && cl_send_buf(&c, &b) == 0);
	pbuf_release(&b);
	int t;
	char out[32] = "";
	while ((t = cl_recv(&c, &f)) == 1 && !(f.id == id && terminal(f.type)))
		if (f.id == id && f.type == P_STDOUT && f.len < sizeof(out))
			memcpy(out, f.payload, f.len);
	CHECK(t == 1 && f.type == P_EXIT && atoi(out) == TOTAL);
out:
	cl_close(&c);
}


/* Output of op id until it ends (or max bytes, or a quiet 400 ms when
 * until is given and seen): the bytes in out (NUL-terminated), the end's
 * type in *ended (0 when none yet), its A_EXIT_CODE in pty_code. */
static uint32_t pty_code;
static size_t pty_read(struct client *c, uint32_t id, char *out, size_t max, const char *until,
		       int *ended)
{
	struct timeval shortwait = {.tv_usec = 400000}, normal = {.tv_sec = IO_TIMEOUT_S};
	size_t n = strlen(out);
	struct proto_frame f;
	for (int quiet = 0; !*ended && quiet < 25;) {
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &shortwait, sizeof(shortwait));
		int r = cl_recv(c, &f);
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &normal, sizeof(normal));
		if (r != 1) {
			quiet++;
			if (until && strstr(out, until))
				break;
			continue;
		}
		if (f.id == id && f.type == P_STDERR)
			t_note("stderr on a terminal's operation");
		if (f.id == id && f.type == P_STDOUT && n + f.len < max) {
			memcpy(out + n, f.payload, f.len);
			n += f.len;
			out[n] = '\0';
		}
		if (f.id == id && terminal(f.type)) {
			*ended = f.type;
			pty_code = attr_u32(&f, A_EXIT_CODE);
		}
	}
	return n;
}

static int send_resize(struct client *c, uint32_t id, uint32_t proc, uint32_t rows, uint32_t cols)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_RESIZE, 0, id);
	if (proc)
		r = r ? r : proto_put_u32(&b, A_PROC, proc);
	r = r ? r : proto_put_u32(&b, A_ROWS, rows);
	r = r ? r : proto_put_u32(&b, A_COLS, cols);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* A process on a pseudo-terminal: it is a terminal of the size asked
 * (stdin, stdout and stderr alike, one stream), TERM says so, input is
 * typed into it, a resize reaches the process as SIGWINCH, and its exit
 * comes as an exec's. Bad sizes are refused before anything starts. */
static void test_pty(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	uint32_t id = next_id++;
	struct pbuf b = {0};
	int r = proto_begin(&b, P_EXEC, 0, id);
	r = r ? r : proto_put_str(&b, A_SHELL,
				  "trap 'echo winch $(stty size)' WINCH; stty size; echo term=$TERM; "
				  "test -t 0 && test -t 2 && echo tty-all; read line; echo got=$line; "
				  "sleep 2 & wait; exit 3");
	r = r ? r : proto_put_u32(&b, A_ROWS, 30);
	r = r ? r : proto_put_u32(&b, A_COLS, 100);
	r = r ? r : proto_end(&b);
	CHECK(r == 0 && cl_send_buf(&c, &b) == 0);
	struct proto_frame f;
	uint32_t proc = 0, pty = 0;
	while (cl_recv(&c, &f) == 1 && f.id != id)
		;
	if (CHECK(f.type == P_STARTED)) {
		proc = attr_u32(&f, A_PROC);
		pty = attr_u32(&f, A_PTY);
	}
	CHECK(pty == 1);
	static char out[8192];
	out[0] = '\0';
	int ended = 0;
	pty_read(&c, id, out, sizeof(out), "tty-all", &ended);
	if (!CHECK(strstr(out, "30 100\r\n") && strstr(out, "term=xterm-256color") &&
		   strstr(out, "tty-all")))
		t_note("output: %s", out);
	CHECK(proto_raw(&b, P_DATA, 0, id, "hello\r", 6) == 0 && cl_send_buf(&c, &b) == 0);
	pty_read(&c, id, out, sizeof(out), "got=hello", &ended);
	if (!CHECK(strstr(out, "got=hello")))
		t_note("output: %s", out);
	uint32_t rid = next_id++;
	CHECK(send_resize(&c, rid, proc, 40, 120) == 0);
	pty_read(&c, id, out, sizeof(out), "winch 40 120", &ended);
	if (!CHECK(strstr(out, "winch 40 120")))
		t_note("output: %s", out);
	pty_read(&c, id, out, sizeof(out), NULL, &ended);
	if (!CHECK(ended == P_EXIT && pty_code == 3))
		t_note("ended %d, exit code %u", ended, pty_code);
	/* Refused: a size of 0, one too large, rows without cols, a process
	 * without a terminal, no process at all. */
	uint32_t bad = next_id++;
	CHECK(send_resize(&c, bad, proc ? proc : 1, 0, 80) == 0 && expect_error(&c, bad, EINVAL, 0));
	bad = next_id++;
	CHECK(send_resize(&c, bad, 1, 24, 10001) == 0 && expect_error(&c, bad, EINVAL, 0));
	bad = next_id++;
	CHECK(proto_begin(&b, P_EXEC, 0, bad) == 0 && proto_put_str(&b, A_SHELL, "true") == 0 &&
	      proto_put_u32(&b, A_ROWS, 24) == 0 && proto_end(&b) == 0 && cl_send_buf(&c, &b) == 0);
	CHECK(expect_error(&c, bad, EINVAL, 0));
	uint32_t plain = start_sleep(&c, 0);
	bad = next_id++;
	CHECK(send_resize(&c, bad, plain, 24, 80) == 0 && expect_error(&c, bad, ENOTTY, 0));
	CHECK(signal_proc(&c, plain, SIGKILL));
	bad = next_id++;
	CHECK(send_resize(&c, bad, 0xfffffff0u, 24, 80) == 0 && expect_error(&c, bad, ESRCH, 0));
	pbuf_release(&b);
out:
	cl_close(&c);
}


static int send_watch(struct client *c, uint32_t id, const char *path, int recursive, uint32_t window)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_WATCH, 0, id);
	r = r ? r : proto_put_str(&b, A_PATH, path);
	if (recursive)
		r = r ? r : proto_put_u32(&b, A_RECURSIVE, 1);
	if (window)
		r = r ? r : proto_put_u32(&b, A_WINDOW, window);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* Events of watch id as "KIND PATH[/]" lines (a trailing / for a
 * directory) appended to log, until want is in it or a quiet 400 ms;
 * *ended gets the operation's end. Returns the events read. */
static int watch_read(struct client *c, uint32_t id, char *log, size_t max, const char *want,
		      int *ended)
{
	static const char *const kinds[] = {"?", "create", "write", "remove", "rename", "chmod",
					    "overflow"};
	struct timeval shortwait = {.tv_usec = 400000}, normal = {.tv_sec = IO_TIMEOUT_S};
	struct proto_frame f;
	int n = 0;
	for (;;) {
		if (want && strstr(log, want))
			break;
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &shortwait, sizeof(shortwait));
		int r = cl_recv(c, &f);
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &normal, sizeof(normal));
		if (r != 1)
			break;
		if (f.id != id)
			continue;
		if (terminal(f.type)) {
			*ended = f.type;
			break;
		}
		if (f.type != P_FSEVENT)
			continue;
		char path[4097] = "";
		uint32_t kind = attr_u32(&f, A_FSOP);
		proto_get_str(&f, A_PATH, path, sizeof(path));
		size_t len = strlen(log);
		if (len + strlen(path) + 16 < max)
			snprintf(log + len, max - len, "%s %s%s\n", kind < 7 ? kinds[kind] : "?", path,
				 attr_u32(&f, A_ISDIR) == 1 ? "/" : "");
		n++;
	}
	return n;
}

/* A recursive watch on a host directory: creates (new directories
 * followed), writes, chmods, renames and removes, as paths; an fwrite
 * shows as the create of its file, not its temporary; a flood past the
 * kernel's queue while the host gives no credit is one overflow event;
 * removing the root ends the watch. Bad requests are refused. */
static void test_watch(void)
{
	struct client c;
	char dir[] = "/tmp/cpuos-watch-XXXXXX", path[256], want[512];
	static char log[1 << 16];
	log[0] = '\0';
	if (!CHECK(mkdtemp(dir) != NULL) || !cl_ready(&c))
		return;
	uint32_t id = next_id++;
	int ended = 0;
	struct proto_frame f;
	CHECK(send_watch(&c, id, dir, 1, 0) == 0);
	while (cl_recv(&c, &f) == 1 && f.id != id)
		;
	CHECK(f.type == P_STARTED);
	snprintf(path, sizeof(path), "%s/sub", dir);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(want, sizeof(want), "create %s/sub/", dir);
	watch_read(&c, id, log, sizeof(log), want, &ended);
	snprintf(path, sizeof(path), "%s/sub/f.txt", dir);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1);
	close(fd);
	CHECK(chmod(path, 0600) == 0);
	char to[256];
	snprintf(to, sizeof(to), "%s/g.txt", dir);
	CHECK(rename(path, to) == 0);
	CHECK(unlink(to) == 0);
	snprintf(want, sizeof(want), "remove %s/g.txt", dir);
	watch_read(&c, id, log, sizeof(log), want, &ended);
	static const char *const expect[][2] = {
	    {"create", "sub/f.txt"}, {"write", "sub/f.txt"}, {"chmod", "sub/f.txt"},
	    {"rename", "sub/f.txt"}, {"create", "g.txt"},    {"remove", "g.txt"},
	};
	for (size_t i = 0; i < sizeof(expect) / sizeof(*expect); i++) {
		snprintf(want, sizeof(want), "%s %s/%s\n", expect[i][0], dir, expect[i][1]);
		if (!CHECK(strstr(log, want)))
			t_note("no '%.*s' in:\n%s", (int)strlen(want) - 1, want, log);
	}
	/* An fwrite: only its file, as a create. */
	uint32_t wid = next_id++;
	struct pbuf b = {0};
	snprintf(path, sizeof(path), "%s/api.txt", dir);
	CHECK(proto_begin(&b, P_FWRITE, 0, wid) == 0 && proto_put_str(&b, A_PATH, path) == 0 &&
	      proto_put_u32(&b, A_MODE, 0644) == 0 && proto_end(&b) == 0 && cl_send_buf(&c, &b) == 0);
	CHECK(proto_raw(&b, P_DATA, PF_EOF, wid, "hi", 2) == 0 && cl_send_buf(&c, &b) == 0);
	log[0] = '\0';
	snprintf(want, sizeof(want), "create %s/api.txt", dir);
	watch_read(&c, id, log, sizeof(log), want, &ended);
	if (!CHECK(strstr(log, want) && !strstr(log, ".cpuos-")))
		t_note("events of an fwrite:\n%s", log);
	uint32_t cancel = next_id++;
	CHECK(proto_begin(&b, P_CANCEL, 0, cancel) == 0 && proto_put_u32(&b, A_TARGET, id) == 0 &&
	      proto_end(&b) == 0 && cl_send_buf(&c, &b) == 0);
	watch_read(&c, id, log, sizeof(log), NULL, &ended);
	CHECK(ended == P_ERROR);

	/* A flood without credit: the kernel's queue overflows, the host is told. */
	uint32_t fid = next_id++;
	ended = 0;
	CHECK(send_watch(&c, fid, dir, 0, 64 * 1024) == 0);
	while (cl_recv(&c, &f) == 1 && f.id != fid)
		;
	CHECK(f.type == P_STARTED);
	int made = 0;
	for (int i = 0; i < 20000; i++) {
		snprintf(path, sizeof(path), "%s/n%d", dir, i);
		int k = open(path, O_WRONLY | O_CREAT, 0644);
		made += k >= 0;
		if (k >= 0)
			close(k);
	}
	CHECK(made == 20000);
	log[0] = '\0';
	int got = watch_read(&c, fid, log, sizeof(log), NULL, &ended);
	/* Each event costs at least 64 bytes: past the window by one chunk at most. */
	if (!CHECK(got > 0 && got <= (int)(64 * 1024 + PROTO_DATA_CHUNK) / 64 && !ended))
		t_note("%d events before any credit", got);
	CHECK(send_credit(&c, fid, 64u << 20) == 0);
	log[0] = '\0';
	snprintf(want, sizeof(want), "overflow %s\n", dir);
	watch_read(&c, fid, log, sizeof(log), want, &ended);
	if (!CHECK(strstr(log, want)))
		t_note("no overflow event in %zu bytes of events", strlen(log));
	/* The root removed: the watch ends by itself. */
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
	log[0] = '\0';
	for (int i = 0; i < 50 && !ended; i++)
		watch_read(&c, fid, log, sizeof(log), NULL, &ended);
	CHECK(ended == P_OK);

	/* Refused: a relative path, a missing one. */
	uint32_t bad = next_id++;
	CHECK(send_watch(&c, bad, "tmp", 0, 0) == 0 && expect_error(&c, bad, EINVAL, 0));
	bad = next_id++;
	CHECK(send_watch(&c, bad, "/nonexistent/cpuos", 0, 0) == 0 && expect_error(&c, bad, ENOENT, 0));
	pbuf_release(&b);
	cl_close(&c);
}


/* P_STATS: the host's own figures in --listen mode, each plausible. */
static void test_stats(void)
{
	struct client c;
	if (!cl_ready(&c))
		return;
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(cl_simple(&c, P_STATS, id) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK);
	uint64_t mem_total = 0, mem_avail = 0, disk_total = 0, disk_used = 0, cpu = 0;
	CHECK(proto_get_u64(&f, A_MEM_TOTAL, &mem_total) == 0 && mem_total > (64u << 20));
	CHECK(proto_get_u64(&f, A_MEM_AVAIL, &mem_avail) == 0 && mem_avail <= mem_total);
	CHECK(proto_get_u64(&f, A_DISK_TOTAL, &disk_total) == 0 && disk_total > 0);
	CHECK(proto_get_u64(&f, A_DISK_USED, &disk_used) == 0 && disk_used <= disk_total);
	CHECK(proto_get_u64(&f, A_CPU_NS, &cpu) == 0 && cpu > 0);
	CHECK(attr_u32(&f, A_NCPU) >= 1);
	cl_close(&c);
}

static void test_poweroff(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(cl_simple(&c, P_POWEROFF, id) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK);
	int64_t end = clock_ms() + 5000;
	while (agent_alive() && clock_ms() < end)
		usleep(10000);
	if (!CHECK(!agent_alive())) {
		t_note("the agent did not exit within 5 s of P_POWEROFF");
		goto out;
	}
	CHECK(WIFEXITED(agent_status) && WEXITSTATUS(agent_status) == 0);
	CHECK(access(sock_path, F_OK) < 0); /* it removed its socket */
out:
	cl_close(&c);
}

/* A P_RESTORED; absent parts: time_ns 0 (no A_TIME_NS), nbytes < 0 (no
 * A_BYTES), NULL strings, generation < 0. */
struct restored_req {
	int64_t time_ns;
	int nbytes;
	const char *hostname, *machine_id;
	int64_t generation;
};

static const struct restored_req restored_ok = {
    .time_ns = 1767225600000000000ll, /* 2026-01-01 */
    .nbytes = 64,
    .hostname = "sbx-0123",
    .machine_id = "0123456789abcdef0123456789abcdef",
    .generation = 7,
};

static int send_restored(struct client *c, uint32_t id, const struct restored_req *q)
{
	static uint8_t bytes[8192];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)(i * 131 + 7);
	struct pbuf b = {0};
	int r = proto_begin(&b, P_RESTORED, 0, id);
	if (q->time_ns)
		r = r ? r : proto_put_u64(&b, A_TIME_NS, (uint64_t)q->time_ns);
	if (q->nbytes >= 0)
		r = r ? r : proto_put(&b, A_BYTES, bytes, (size_t)q->nbytes);
	if (q->hostname)
		r = r ? r : proto_put_str(&b, A_HOSTNAME, q->hostname);
	if (q->machine_id)
		r = r ? r : proto_put_str(&b, A_MACHINE_ID, q->machine_id);
	if (q->generation >= 0)
		r = r ? r : proto_put_u32(&b, A_GENERATION, (uint32_t)q->generation);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

/* Sends q and checks it is refused with EINVAL and a message naming attr. */
static void restored_refused(struct client *c, const struct restored_req *q, const char *attr,
			     const char *what)
{
	uint32_t id = next_id++;
	struct proto_frame f;
	char msg[256] = "";
	int t = send_restored(c, id, q) == 0 ? cl_wait_end(c, id, &f) : -1;
	uint32_t e = t == P_ERROR ? attr_u32(&f, A_ERRNO) : 0;
	if (t == P_ERROR && proto_get_str(&f, A_MESSAGE, msg, sizeof(msg)) < 0)
		msg[0] = '\0';
	if (!CHECK(t == P_ERROR && e == EINVAL && strstr(msg, attr)))
		t_note("%s: got type %d errno %u message '%s', wanted EINVAL naming '%s'", what, t,
		       e, msg, attr);
}

static void test_restored(void)
{
	struct client c;
	struct utsname before, after;
	CHECK(uname(&before) == 0);
	if (!cl_ready(&c))
		goto out;
	/* Everything: P_OK with the generation echoed. */
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(send_restored(&c, id, &restored_ok) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK && attr_u32(&f, A_GENERATION) == 7);
	/* Only what is required, at the edges: no generation comes back. */
	struct restored_req q = {.time_ns = 1, .nbytes = 32, .generation = -1};
	id = next_id++;
	CHECK(send_restored(&c, id, &q) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK && attr_u32(&f, A_GENERATION) == 0xffffffffu);
	q = restored_ok;
	q.nbytes = 4096;
	q.hostname = "a23456789-123456789-123456789-123456789-123456789-123456789-123";
	q.generation = 0xffffffffll;
	id = next_id++;
	CHECK(send_restored(&c, id, &q) == 0);
	CHECK(cl_wait_end(&c, id, &f) == P_OK && attr_u32(&f, A_GENERATION) == 0xffffffffu &&
	      proto_get(&f, A_GENERATION, NULL) != NULL);

	static const struct {
		const char *field, *value, *attr;
	} bad[] = {
	    {"time_ns", NULL, "time_ns"},
	    {"bytes", NULL, "bytes"},
	    {"bytes", "31", "bytes"},
	    {"bytes", "4097", "bytes"},
	    {"bytes", "0", "bytes"},
	    {"hostname", "Sandbox", "hostname"},
	    {"hostname", "a23456789-123456789-123456789-123456789-123456789-123456789-1234",
	     "hostname"},
	    {"hostname", "-sbx", "hostname"},
	    {"hostname", "", "hostname"},
	    {"hostname", "sbx.example", "hostname"},
	    {"machine_id", "0123456789abcdef0123456789abcde", "machine_id"},
	    {"machine_id", "0123456789abcdef0123456789abcdeg", "machine_id"},
	    {"machine_id", "0123456789ABCDEF0123456789ABCDEF", "machine_id"},
	    {"machine_id", "0123456789abcdef0123456789abcdef0", "machine_id"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		q = restored_ok;
		if (!strcmp(bad[i].field, "time_ns"))
			q.time_ns = 0;
		else if (!strcmp(bad[i].field, "bytes"))
			q.nbytes = bad[i].value ? atoi(bad[i].value) : -1;
		else if (!strcmp(bad[i].field, "hostname"))
			q.hostname = bad[i].value;
		else
			q.machine_id = bad[i].value;
		char what[128];
		snprintf(what, sizeof(what), "%s %s", bad[i].field,
			 bad[i].value ? bad[i].value : "missing");
		restored_refused(&c, &q, bad[i].attr, what);
	}
	/* A hostname holding a NUL byte, and a generation of the wrong size. */
	uint8_t pl[256];
	uint64_t ns = 1;
	static const uint8_t rnd[32] = {1};
	uint32_t n = (uint32_t)put_attr(pl, A_TIME_NS, 8, &ns, 8);
	n += (uint32_t)put_attr(pl + n, A_BYTES, 32, rnd, 32);
	uint32_t common = n;
	n += (uint32_t)put_attr(pl + n, A_HOSTNAME, 5, "sb\0x1", 5);
	id = next_id++;
	CHECK(raw_request(&c, P_RESTORED, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EINVAL, EINVAL));
	n = common + (uint32_t)put_attr(pl + common, A_GENERATION, 2, "\x01\x00", 2);
	id = next_id++;
	CHECK(raw_request(&c, P_RESTORED, id, pl, n) == 0);
	CHECK(expect_error(&c, id, EPROTO, EPROTO));
	CHECK(cl_ping(&c));
	/* --listen: the host machine was left alone. */
	CHECK(uname(&after) == 0 && !strcmp(before.nodename, after.nodename));
out:
	cl_close(&c);
}


int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
	    {"agent_hello_ping", test_hello_ping},
	    {"agent_unknown_request_type", test_unknown_type},
	    {"agent_malformed_attributes", test_bad_attrs},
	    {"agent_bad_strings_and_paths", test_bad_strings},
	    {"agent_oversized_frame_drops", test_oversized},
	    {"agent_reserved_flags_drop", test_reserved_flags},
	    {"agent_truncated_frame_then_disconnect", test_truncated},
	    {"agent_random_garbage", test_random_garbage},
	    {"agent_process_outlives_connection", test_process_outlives_connection},
	    {"agent_operation_cap", test_operation_cap},
	    {"agent_output_window", test_output_window},
	    {"agent_input_credit", test_input_credit},
	    {"agent_pty", test_pty},
	    {"agent_watch", test_watch},
	    {"agent_stats", test_stats},
	    {"agent_restored", test_restored},
	    {"agent_poweroff_exits_0", test_poweroff},
	    {0, 0},
	};
	signal(SIGPIPE, SIG_IGN);
	/* An agent per case: one a case wrecked or powered off, or a process
	 * it left running, is not the next case's. */
	t_fixture(agent_setup, agent_teardown);
	return t_main(argc, argv, cases);
}
