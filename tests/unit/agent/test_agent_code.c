/*
 * test_agent_code: code contexts of cpuos-agent in --listen mode, with the host's python3 and
 * bash as kernels: state between calls, results and errors as event lines, timeouts that
 * interrupt and then kill, dead kernels started anew, contexts, the caps, credit for events,
 * and bad requests. Talks raw frames (tests/lib/rawagent).
 */
#include "common/clock.h"
#include "common/proto.h"
#include "tests/lib/rawagent.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CTX 16 /* src/agent/code.h */

/* What one call brought back. */
struct call {
	int end;      /* P_OK or P_ERROR, <= 0 when the agent did not answer */
	uint32_t err; /* P_ERROR's errno */
	int started, restarted, timed_out, died;
	char out[8192], errout[8192], events[65536];
	size_t nout, nerr, nev;
	uint64_t event_cost; /* what the events cost against the window */
};

static void append(char *dst, size_t cap, size_t *n, const uint8_t *p, size_t k)
{
	size_t room = cap - 1 - *n;
	if (k > room)
		k = room;
	memcpy(dst + *n, p, k);
	*n += k;
	dst[*n] = '\0';
}

/* Sends a P_CODE (lang and env may be NULL, timeout 0: none): 0 or -errno. */
/* A P_CODE; uncounted: with A_UNCOUNTED 1, a call that is no cell. */
static int send_code_as(struct client *c, uint32_t id, const char *ctx, const char *lang,
			const char *code, uint64_t timeout_ms, uint32_t window, const char *env,
			int uncounted)
{
	struct pbuf b = {0};
	int r = proto_begin(&b, P_CODE, 0, id);
	r = r ? r : proto_put_str(&b, A_CONTEXT, ctx);
	r = r ? r : proto_put(&b, A_CODE, code, strlen(code));
	if (!r && lang)
		r = proto_put_str(&b, A_LANGUAGE, lang);
	if (!r && timeout_ms)
		r = proto_put_u64(&b, A_TIMEOUT_MS, timeout_ms);
	if (!r && window)
		r = proto_put_u32(&b, A_WINDOW, window);
	if (!r && env)
		r = proto_put_str(&b, A_ENV, env);
	if (!r && uncounted)
		r = proto_put_u32(&b, A_UNCOUNTED, 1);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	return r;
}

static int send_code(struct client *c, uint32_t id, const char *ctx, const char *lang,
		     const char *code, uint64_t timeout_ms, uint32_t window, const char *env)
{
	return send_code_as(c, id, ctx, lang, code, timeout_ms, window, env, 0);
}

/* Reads operation id's frames up to its end into *k. */
static void collect(struct client *c, uint32_t id, struct call *k)
{
	struct proto_frame f;
	for (;;) {
		int r = cl_recv(c, &f);
		if (r <= 0) {
			k->end = r;
			return;
		}
		if (f.id != id)
			continue;
		if (f.type == P_STDOUT)
			append(k->out, sizeof(k->out), &k->nout, f.payload, f.len);
		else if (f.type == P_STDERR)
			append(k->errout, sizeof(k->errout), &k->nerr, f.payload, f.len);
		else if (f.type == P_EVENT) {
			append(k->events, sizeof(k->events), &k->nev, f.payload, f.len);
			k->event_cost += proto_cost(f.len);
		} else if (f.type == P_STARTED) {
			k->started = 1;
			k->restarted = attr_u32(&f, A_RESTARTED) == 1;
		} else if (terminal(f.type)) {
			k->end = f.type;
			k->err = f.type == P_ERROR ? attr_u32(&f, A_ERRNO) : 0;
			k->timed_out = attr_u32(&f, A_TIMED_OUT) == 1;
			k->died = attr_u32(&f, A_DIED) == 1;
			return;
		}
	}
}

static struct call *code(struct client *c, const char *ctx, const char *lang, const char *src,
			 uint64_t timeout_ms)
{
	static struct call k;
	memset(&k, 0, sizeof(k));
	uint32_t id = next_id++;
	if (send_code(c, id, ctx, lang, src, timeout_ms, 0, NULL) < 0) {
		k.end = -EPIPE;
		return &k;
	}
	collect(c, id, &k);
	return &k;
}

/* Whether a call ended well with this text in its events. */
static int ok_with(const struct call *k, const char *event)
{
	if (k->end == P_OK && strstr(k->events, event))
		return 1;
	t_note("end %d errno %u, events: %.300s", k->end, k->err, k->events);
	return 0;
}

/* A context request (create, restart, delete: A_CONTEXT and maybe A_LANGUAGE): its end type,
 * errno in *err. */
static int ctx_request(struct client *c, uint16_t type, const char *ctx, const char *lang,
		       uint32_t *err)
{
	struct pbuf b = {0};
	uint32_t id = next_id++;
	int r = proto_begin(&b, type, 0, id);
	r = r ? r : proto_put_str(&b, A_CONTEXT, ctx);
	if (!r && lang)
		r = proto_put_str(&b, A_LANGUAGE, lang);
	r = r ? r : proto_end(&b);
	r = r ? r : cl_send_buf(c, &b);
	pbuf_release(&b);
	struct proto_frame f;
	int t = r ? r : cl_wait_end(c, id, &f);
	*err = t == P_ERROR ? attr_u32(&f, A_ERRNO) : 0;
	return t;
}

/* How many contexts P_CTX_LIST lists, and the state of name (0 when not listed). */
static int list_ctx(struct client *c, const char *name, uint32_t *state)
{
	uint32_t id = next_id++;
	*state = 0;
	if (cl_simple(c, P_CTX_LIST, id) < 0)
		return -1;
	int n = 0;
	struct proto_frame f;
	for (;;) {
		if (cl_recv(c, &f) != 1)
			return -1;
		if (f.id != id)
			continue;
		if (f.type != P_ENTRY)
			return f.type == P_OK ? n : -1;
		n++;
		char got[80];
		if (proto_check_attrs(&f) == 0 && proto_get_str(&f, A_CONTEXT, got, sizeof(got)) == 0 &&
		    !strcmp(got, name))
			*state = attr_u32(&f, A_STATE);
	}
}

/* --- cases --- */

static void test_python_state_and_results(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	struct call *k = code(&c, "py", "python", "x = 41\nprint('hi')", 0);
	CHECK(k->started && !k->restarted && ok_with(k, "\"type\": \"end\""));
	CHECK(!strcmp(k->out, "hi\n"));
	CHECK(ok_with(code(&c, "py", NULL, "x + 1", 0), "{\"type\": \"result\", \"is_main_result\": true, \"text\": \"42\"}"));
	k = code(&c, "py", NULL, "def f():\n    raise ValueError('bad')\nf()", 0);
	CHECK(ok_with(k, "\"name\": \"ValueError\", \"value\": \"bad\""));
	CHECK(ok_with(k, "<cell 3>") && !strstr(k->events, "kernel.py"));
	CHECK(ok_with(code(&c, "py", NULL, "display(x, 'y')", 0), "\"is_main_result\": false, \"text\": \"'y'\""));
	/* Notebook lines, when the cell is not Python as it is; a string keeps its own. */
	k = code(&c, "py", NULL, "%matplotlib inline\n!echo from $0\ns = '''\n!text\n'''\n_exit_code", 0);
	CHECK(ok_with(k, "\"text\": \"0\"") && !strcmp(k->out, "from /bin/sh\n"));
	CHECK(ok_with(code(&c, "py", NULL, "s", 0), "!text"));
	/* Each call ends its events with the execution count. */
	CHECK(ok_with(code(&c, "py", NULL, "x", 0), "\"execution_count\": 7}"));
	/* A call that is no cell (the host warming the kernel) shows its value but counts
	 * nothing and leaves no `_`; in bash too. */
	static struct call w;
	uint32_t id = next_id++;
	if (CHECK(send_code_as(&c, id, "py", NULL, "99", 0, 0, NULL, 1) == 0)) {
		collect(&c, id, &w);
		CHECK(ok_with(&w, "\"text\": \"99\"") && ok_with(&w, "\"execution_count\": 7}"));
	}
	CHECK(ok_with(code(&c, "py", NULL, "_", 0), "\"text\": \"41\""));
	CHECK(ok_with(code(&c, "py", NULL, "x", 0), "\"execution_count\": 9}"));
	id = next_id++;
	memset(&w, 0, sizeof(w));
	if (CHECK(send_code_as(&c, id, "sh", "bash", "true", 0, 0, NULL, 1) == 0)) {
		collect(&c, id, &w);
		CHECK(ok_with(&w, "\"execution_count\": 0}"));
	}
	CHECK(ok_with(code(&c, "sh", NULL, "true", 0), "\"execution_count\": 1}"));
out:
	cl_close(&c);
}

static void test_timeout_interrupts_then_kills(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	CHECK(code(&c, "slow", "python", "kept = 'yes'", 0)->end == P_OK);
	struct call *k = code(&c, "slow", NULL, "while True:\n    pass", 300);
	CHECK(k->timed_out && !k->died && ok_with(k, "KeyboardInterrupt"));
	CHECK(ok_with(code(&c, "slow", NULL, "kept", 0), "\"text\": \"'yes'\""));
	/* A kernel that ignores the interrupt is killed CODE_GRACE_MS later. */
	int64_t t0 = clock_ms();
	k = code(&c, "slow", NULL, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 300);
	int64_t took = clock_ms() - t0;
	CHECK(k->end == P_OK && k->timed_out && k->died);
	if (!CHECK(took >= 2000 && took < 10000))
		t_note("the kill came after %lld ms", (long long)took);
	/* The next call has a new kernel, and says so. */
	k = code(&c, "slow", NULL, "kept", 0);
	CHECK(k->restarted && ok_with(k, "NameError"));
out:
	cl_close(&c);
}

static void test_bash(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	struct call *k = code(&c, "sh", "bash", "V=7; cd /tmp; echo set", 0);
	CHECK(k->end == P_OK && !strcmp(k->out, "set\n"));
	k = code(&c, "sh", NULL, "echo $V $(pwd); false", 0);
	CHECK(!strcmp(k->out, "7 /tmp\n") && ok_with(k, "\"name\": \"ExitStatus\", \"value\": \"1\""));
	k = code(&c, "sh", NULL, "f() { while true; do :; done; }; f; echo after", 300);
	CHECK(k->timed_out && !k->died && !strstr(k->out, "after") && ok_with(k, "\"value\": \"130\""));
	k = code(&c, "sh", NULL, "sleep 30; echo after", 300);
	CHECK(k->timed_out && !k->died && !strstr(k->out, "after"));
	CHECK(!strcmp(code(&c, "sh", NULL, "echo $V", 0)->out, "7\n"));
	/* exit ends the shell: the call ends as a dead kernel's, the next one gets a new shell. */
	k = code(&c, "sh", NULL, "exit 3", 0);
	CHECK(k->end == P_OK && k->died);
	k = code(&c, "sh", NULL, "echo \"[$V]\"", 0);
	CHECK(k->restarted && !strcmp(k->out, "[]\n"));
out:
	cl_close(&c);
}

static void test_contexts(void)
{
	struct client c;
	uint32_t err, state;
	if (!cl_ready(&c))
		goto out;
	CHECK(ctx_request(&c, P_CTX_CREATE, "made", "bash", &err) == P_OK);
	CHECK(ctx_request(&c, P_CTX_CREATE, "made", "bash", &err) == P_ERROR && err == EEXIST);
	CHECK(list_ctx(&c, "made", &state) >= 1 && state == CS_IDLE);
	CHECK(code(&c, "made", NULL, "W=1", 0)->end == P_OK);
	CHECK(ctx_request(&c, P_CTX_RESTART, "made", NULL, &err) == P_OK);
	CHECK(!strcmp(code(&c, "made", NULL, "echo \"[$W]\"", 0)->out, "[]\n"));
	/* Two contexts never share state. */
	CHECK(code(&c, "other", "bash", "W=2", 0)->end == P_OK);
	CHECK(!strcmp(code(&c, "made", NULL, "echo \"[$W]\"", 0)->out, "[]\n"));
	CHECK(ctx_request(&c, P_CTX_DELETE, "made", NULL, &err) == P_OK);
	CHECK(ctx_request(&c, P_CTX_DELETE, "made", NULL, &err) == P_ERROR && err == ENOENT);
	CHECK(ctx_request(&c, P_CTX_RESTART, "made", NULL, &err) == P_ERROR && err == ENOENT);
	/* At most MAX_CTX. */
	int have = list_ctx(&c, "", &state), made = 0;
	char name[32];
	for (int i = have; i < MAX_CTX; i++) {
		snprintf(name, sizeof(name), "cap%d", i);
		made += ctx_request(&c, P_CTX_CREATE, name, "bash", &err) == P_OK;
	}
	CHECK(have > 0 && made == MAX_CTX - have);
	CHECK(ctx_request(&c, P_CTX_CREATE, "one-too-many", "bash", &err) == P_ERROR && err == EAGAIN);
	CHECK(code(&c, "new-one", "bash", "true", 0)->err == EAGAIN);
	for (int i = have; i < MAX_CTX; i++) {
		snprintf(name, sizeof(name), "cap%d", i);
		ctx_request(&c, P_CTX_DELETE, name, NULL, &err);
	}
out:
	cl_close(&c);
}

static void test_busy_and_cancel(void)
{
	struct client c;
	uint32_t err, state;
	if (!cl_ready(&c))
		goto out;
	uint32_t id = next_id++;
	CHECK(send_code(&c, id, "busy", "bash", "sleep 30", 0, 0, NULL) == 0);
	usleep(300000);
	CHECK(list_ctx(&c, "busy", &state) >= 1 && state == CS_BUSY);
	CHECK(code(&c, "busy", NULL, "true", 0)->err == EBUSY);
	/* A cancel interrupts the call: the context is free again soon. */
	uint8_t pl[16];
	uint32_t cancel = next_id++;
	CHECK(raw_request(&c, P_CANCEL, cancel, pl, (uint32_t)put_attr(pl, A_TARGET, 4, &id, 4)) == 0);
	CHECK(expect_error(&c, id, ECANCELED, ECANCELED));
	int64_t end = clock_ms() + 5000;
	struct call *k;
	while ((k = code(&c, "busy", NULL, "echo free", 0))->err == EBUSY && clock_ms() < end)
		usleep(100000);
	CHECK(!strcmp(k->out, "free\n"));
	/* A connection that goes away leaves the call running, unheard; it ends on its own. */
	CHECK(send_code(&c, next_id++, "busy", NULL, "sleep 1; echo late", 0, 0, NULL) == 0);
	usleep(200000);
	cl_close(&c);
	if (!cl_ready(&c))
		goto out;
	CHECK(code(&c, "busy", NULL, "true", 0)->err == EBUSY);
	usleep(1500000);
	CHECK(!strcmp(code(&c, "busy", NULL, "echo next", 0)->out, "next\n"));
	ctx_request(&c, P_CTX_DELETE, "busy", NULL, &err);
out:
	cl_close(&c);
}

static void test_events_wait_for_credit(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	/* 1 MiB of results against a 64 KiB window nobody credits: the agent stops short. */
	uint32_t id = next_id++;
	CHECK(send_code(&c, id, "credit", "python", "for i in range(16):\n    display('z' * 65536)", 0,
			PROTO_MIN_WINDOW, NULL) == 0);
	uint64_t cost = 0;
	struct proto_frame f;
	int r;
	while ((r = cl_recv(&c, &f)) == 1)
		if (f.id == id && f.type == P_EVENT)
			cost += proto_cost(f.len);
	CHECK(r == -ETIMEDOUT);
	if (!CHECK(cost > 0 && cost <= PROTO_MIN_WINDOW + PROTO_DATA_CHUNK))
		t_note("%llu bytes of events past a %u window", (unsigned long long)cost, PROTO_MIN_WINDOW);
	/* Credit lets the rest through, to the end. */
	uint8_t pl[16];
	uint32_t more = 4u << 20;
	uint8_t hdr[PROTO_HDR_SIZE];
	uint32_t n = (uint32_t)put_attr(pl, A_CREDIT, 4, &more, 4);
	put_hdr(hdr, n, P_CREDIT, 0, id);
	CHECK(cl_send(&c, hdr, sizeof(hdr)) == 0 && cl_send(&c, pl, n) == 0);
	struct call k = {0};
	collect(&c, id, &k);
	CHECK(k.end == P_OK && cost + k.event_cost > 16 * 65536);
out:
	cl_close(&c);
}

static void test_restore_reseeds(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	/* Without a restore a seeded generator goes on where it was... */
	CHECK(code(&c, "rnd", "python", "import random; random.seed(5); a = random.random()", 0)->end == P_OK);
	/* The draw is the events' first line (the end line that follows counts calls). */
	struct call *k = code(&c, "rnd", NULL, "b = random.random(); b", 0);
	char second[128];
	snprintf(second, sizeof(second), "%.*s", (int)strcspn(k->events, "\n"), k->events);
	CHECK(code(&c, "rnd", NULL, "random.seed(5); a = random.random()", 0)->end == P_OK);
	k = code(&c, "rnd", NULL, "b = random.random(); b", 0);
	CHECK(strlen(second) > 20 && !strncmp(k->events, second, strlen(second)));
	/* ...and after one it draws anew: every copy of the memory would draw the same. */
	CHECK(code(&c, "rnd", NULL, "random.seed(5); a = random.random()", 0)->end == P_OK);
	uint8_t pl[128];
	uint64_t ns = 1;
	static const uint8_t rnd[32] = {1};
	uint32_t n = (uint32_t)put_attr(pl, A_TIME_NS, 8, &ns, 8);
	n += (uint32_t)put_attr(pl + n, A_BYTES, 32, rnd, 32);
	uint32_t id = next_id++;
	struct proto_frame f;
	CHECK(raw_request(&c, P_RESTORED, id, pl, n) == 0 && cl_wait_end(&c, id, &f) == P_OK);
	k = code(&c, "rnd", NULL, "b = random.random(); b", 0);
	CHECK(k->end == P_OK && strncmp(k->events, second, strlen(second)) != 0);
out:
	cl_close(&c);
}

static void test_bad_requests(void)
{
	struct client c;
	if (!cl_ready(&c))
		goto out;
	CHECK(code(&c, "no spaces", "python", "1", 0)->err == EINVAL);
	CHECK(code(&c, "", "python", "1", 0)->err == EINVAL);
	CHECK(code(&c, "lang", "cobol", "1", 0)->err == EINVAL);
	CHECK(code(&c, "lang", "bash", "true", 0)->end == P_OK);
	CHECK(code(&c, "lang", "python", "1", 0)->err == EINVAL); /* a bash context */
	uint32_t id = next_id++;
	CHECK(send_code(&c, id, "lang", NULL, "true", 0, 0, "NOEQUALS") == 0);
	CHECK(expect_error(&c, id, EINVAL, EINVAL));
	/* Code with a NUL, no code, no context: refused before anything runs. */
	uint8_t pl[64];
	uint32_t n = (uint32_t)put_attr(pl, A_CONTEXT, 4, "lang", 4);
	n += (uint32_t)put_attr(pl + n, A_CODE, 3, "a\0b", 3);
	id = next_id++;
	CHECK(raw_request(&c, P_CODE, id, pl, n) == 0 && expect_error(&c, id, EINVAL, EINVAL));
	id = next_id++;
	CHECK(raw_request(&c, P_CODE, id, pl, (uint32_t)put_attr(pl, A_CONTEXT, 4, "lang", 4)) == 0 &&
	      expect_error(&c, id, EINVAL, EINVAL));
	id = next_id++;
	CHECK(raw_request(&c, P_CODE, id, pl, (uint32_t)put_attr(pl, A_CODE, 1, "1", 1)) == 0 &&
	      expect_error(&c, id, EINVAL, EINVAL));
	n = (uint32_t)put_attr(pl, A_CONTEXT, 4, "lang", 4);
	n += (uint32_t)put_attr(pl + n, A_CODE, 4, "true", 4);
	n += (uint32_t)put_attr(pl + n, A_FORMATS, 3, "gif", 3);
	id = next_id++;
	CHECK(raw_request(&c, P_CODE, id, pl, n) == 0 && expect_error(&c, id, EINVAL, EINVAL));
	CHECK(cl_ping(&c));
out:
	cl_close(&c);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
	    {"code_python_state_and_results", test_python_state_and_results},
	    {"code_timeout_interrupts_then_kills", test_timeout_interrupts_then_kills},
	    {"code_bash", test_bash},
	    {"code_contexts", test_contexts},
	    {"code_busy_and_cancel", test_busy_and_cancel},
	    {"code_events_wait_for_credit", test_events_wait_for_credit},
	    {"code_restore_reseeds", test_restore_reseeds},
	    {"code_bad_requests", test_bad_requests},
	    {0, 0},
	};
	signal(SIGPIPE, SIG_IGN);
	/* Not a skip: a test that cannot run fails (tests/run.sh). */
	if (access("/usr/bin/python3", X_OK) < 0 && access("/usr/local/bin/python3", X_OK) < 0) {
		printf("not ok - test_agent_code needs python3 on the host\n0 passed, 1 failed\n");
		return 1;
	}
	/* An agent per case, with its kernels: no context outlives its case. */
	t_fixture(agent_setup, agent_teardown);
	return t_main(argc, argv, cases);
}
