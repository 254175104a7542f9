/*
 * test_api: the API's handlers, requests in and typed calls out. Real HTTP
 * (the daemon's http layer on src/lib/httpd, over a Unix socket and
 * loopback TCP) and a real store, over a fake sandbox layer (fake_sbx.h)
 * that records what the handlers ask of it: each case checks that a
 * request becomes the typed call it should, or a 4xx with a JSON body and
 * no call at all.
 */
#include "daemon/api/api.h"

#include "common/proto.h"
#include "daemon/http/http.h"
#include "daemon/store/store.h"
#include "tests/lib/tap.h"
#include "tests/unit/daemon/api/fake_sbx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct env {
	char dir[48], sock[96], tcp[32];
	int port;
	struct store *store;
	struct http *http;
	struct api_ctx api;
	char key[STORE_KEY_SECRET_LEN + 1];
};

static struct env E;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int setup(void)
{
	char err[256];
	memset(&E, 0, sizeof(E));
	memset(&fake, 0, sizeof(fake));
	fake.st = (struct sop_state){ .end = P_EXIT, .started = 1, .exit_code = 0, .signal = -1 };
	snprintf(fake.out[0], sizeof(fake.out[0]), "hello\n");
	snprintf(E.dir, sizeof(E.dir), "/tmp/cpuos-test-api-XXXXXX");
	if (!mkdtemp(E.dir))
		return -1;
	char db[128];
	snprintf(db, sizeof(db), "%s/cpuos.db", E.dir);
	snprintf(E.sock, sizeof(E.sock), "%s/api.sock", E.dir);
	E.port = free_port();
	snprintf(E.tcp, sizeof(E.tcp), "127.0.0.1:%d", E.port);
	if (store_open(db, &E.store, err, sizeof(err)) < 0) {
		t_note("store: %s", err);
		return -1;
	}
	struct store_key k;
	store_key_create(E.store, "alice", "alice", E.key, &k);
	E.api = (struct api_ctx){
		.store = E.store, .sbx = (struct sbx_mgr *)&E, .guest_dir = E.dir,
		.max_json_bytes = 1 << 20, .max_file_bytes = 1 << 20, .max_output_bytes = 1 << 16,
		.conn_timeout_s = 30, .max_conns_per_ip = 16, .answer_ms = 5000,
	};
	if (http_start(&E.api, E.tcp, E.sock, &E.http, err, sizeof(err)) < 0) {
		t_note("http: %s", err);
		return -1;
	}
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(path);
	return 0;
}

static void teardown(void)
{
	if (E.http)
		http_stop(E.http);
	if (E.store)
		store_close(E.store);
	if (E.dir[0])
		nftw(E.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

struct resp {
	int status;
	char body[8192];
	json_t *json;
};

/* One request, on the Unix socket (the administrator) or, with key, on
 * TCP: the status and body; status 0 when nothing came. */
static void call(struct resp *r, const char *method, const char *path, const char *body,
		 const char *key)
{
	memset(r, 0, sizeof(*r));
	int fd;
	if (key) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)E.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			close(fd);
			fd = -1;
		}
	} else {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", E.sock);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0)
		return;
	char head[1024];
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s%s%s"
			 "%sContent-Length: %zu\r\n\r\n",
			 method, path, key ? "Authorization: Bearer " : "", key ? key : "",
			 key ? "\r\n" : "", body ? "Content-Type: application/json\r\n" : "",
			 body ? strlen(body) : 0);
	if (write(fd, head, (size_t)n) != n ||
	    (body && write(fd, body, strlen(body)) != (ssize_t)strlen(body))) {
		close(fd);
		return;
	}
	char buf[16384];
	size_t got = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0)
			break;
		ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	buf[got] = '\0';
	if (sscanf(buf, "HTTP/1.1 %d", &r->status) != 1)
		return;
	const char *b = strstr(buf, "\r\n\r\n");
	if (b) {
		snprintf(r->body, sizeof(r->body), "%s", b + 4);
		r->json = json_loads(r->body, 0, NULL);
	}
}

static void done(struct resp *r)
{
	json_decref(r->json);
	r->json = NULL;
}

/* An error answer: status, a JSON body {"error": {"code", "message"}} whose
 * message holds want. */
static int is_error(struct resp *r, int status, const char *want)
{
	json_t *e = json_object_get(r->json, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	int ok = r->status == status && json_is_string(json_object_get(e, "code")) && msg &&
		 (!want || strstr(msg, want));
	if (!ok)
		t_note("wanted %d '%s', got %d %s", status, want ? want : "", r->status, r->body);
	return ok;
}

static void test_exec_is_a_typed_request(void)
{
	struct resp r;
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec",
	     "{\"cmd\": \"ls -l\", \"env\": {\"A\": \"1\"}, \"cwd\": \"/work\", \"user\": \"root\","
	     " \"timeout\": \"5s\"}",
	     NULL);
	CHECK(r.status == 200);
	CHECK(json_integer_value(json_object_get(r.json, "exit_code")) == 0);
	CHECK(!strcmp(json_string_value(json_object_get(r.json, "stdout")) ?: "", "hello\n"));
	CHECK(fake.requests == 1 && fake.req.kind == SBX_EXEC);
	CHECK(fake.req.cmd && !strcmp(fake.req.cmd, "ls -l") && fake.req.argc == 0);
	CHECK(fake.req.nenv == 1 && !strcmp(fake.req.env[0], "A=1"));
	CHECK(fake.req.cwd && !strcmp(fake.req.cwd, "/work"));
	CHECK(fake.req.user && !strcmp(fake.req.user, "root"));
	CHECK(fake.req.timeout_ms == 5000 && !fake.req.with_stdin && !fake.req.background);
	CHECK(!strcmp(fake.acquired_id, "sbx_1") && (fake.acquired_flags & SBX_RESUME));
	done(&r);

	call(&r, "POST", "/v1/sandboxes/sbx_1/exec",
	     "{\"argv\": [\"python3\", \"-c\", \"print(1)\"], \"stdin\": \"in\"}", NULL);
	CHECK(r.status == 200 && fake.requests == 2);
	CHECK(!fake.req.cmd && fake.req.argc == 3 && !strcmp(fake.req.argv[2], "print(1)"));
	CHECK(fake.req.with_stdin && fake.ndata == 2 && !memcmp(fake.data, "in", 2));
	/* None named: the sandbox's default ("user", or its image's USER) */
	CHECK(fake.req.user == NULL);
	done(&r);
}

static void test_bad_exec_asks_nothing(void)
{
	static const char *const bad[][2] = {
		{ "{\"cmd\": \"ls\", \"argv\": [\"ls\"]}", "either" },
		{ "{\"argv\": [1]}", "either" },
		{ "{\"argv\": []}", "either" },
		{ "{\"cmd\": \"ls\", \"timeout\": \"25h\"}", "timeout" },
		{ "{\"cmd\": \"ls\", \"env\": [\"A=1\"]}", "env" },
		{ "{\"cmd\": \"ls\", \"env\": {\"\": \"1\"}}", "env" },
		{ "{\"cmd\": \"ls\", \"stdin\": \"a\", \"stdin_base64\": \"YQ==\"}", "stdin" },
		{ "{\"cmd\": \"ls\", \"stdin_base64\": \"not base64!\"}", "stdin_base64" },
		{ "{\"cmd\": \"ls\", \"background\": true, \"stream\": true}", "stream" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct resp r;
		call(&r, "POST", "/v1/sandboxes/sbx_1/exec", bad[i][0], NULL);
		if (!CHECK(is_error(&r, 422, bad[i][1])))
			t_note("for %s", bad[i][0]);
		done(&r);
	}
	struct resp r;
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{\"cmd\": \"ls\", \"cwd\": \"work\"}", NULL);
	CHECK(is_error(&r, 400, "cwd")); /* a path, as the file calls' */
	done(&r);
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{not json", NULL);
	CHECK(r.status == 400 && json_is_object(r.json));
	done(&r);
	CHECK(fake.requests == 0 && fake.acquires == 0);
}

static void test_files_are_typed_requests(void)
{
	struct resp r;
	call(&r, "GET", "/v1/sandboxes/sbx_1/files/stat?path=/work/a.txt", NULL, NULL);
	fake.st.end = P_OK;
	CHECK(fake.req.kind == SBX_STAT && fake.req.path && !strcmp(fake.req.path, "/work/a.txt"));
	done(&r);
	fake.st.end = P_OK;
	call(&r, "POST", "/v1/sandboxes/sbx_1/files/mkdir", "{\"path\": \"/work/d\", \"mode\": \"0700\"}",
	     NULL);
	CHECK(r.status == 201);
	/* the mkdir, then the stat of what it made */
	CHECK(fake.requests == 3 && fake.req.kind == SBX_STAT && !strcmp(fake.req.path, "/work/d"));
	done(&r);
	call(&r, "POST", "/v1/sandboxes/sbx_1/files/rename", "{\"from\": \"/work/a\", \"to\": \"/work/b\"}",
	     NULL);
	CHECK(r.status == 200 && fake.requests == 5);
	done(&r);
	call(&r, "DELETE", "/v1/sandboxes/sbx_1/files?path=/work/b&recursive=true", NULL, NULL);
	CHECK(r.status == 204 && fake.req.kind == SBX_REMOVE && fake.req.recursive &&
	      !strcmp(fake.req.path, "/work/b"));
	done(&r);
	call(&r, "GET", "/v1/sandboxes/sbx_1/files/list?path=/work&depth=3", NULL, NULL);
	CHECK(r.status == 200 && fake.req.kind == SBX_LIST && fake.req.depth == 3 &&
	      json_is_array(json_object_get(r.json, "entries")));
	done(&r);
	unsigned before = fake.requests;
	static const char *const bad[] = {
		"/v1/sandboxes/sbx_1/files/stat?path=work",
		"/v1/sandboxes/sbx_1/files/stat?path=/work/../etc",
		"/v1/sandboxes/sbx_1/files/stat",
		"/v1/sandboxes/sbx_1/files/list?path=/work&depth=17",
		"/v1/sandboxes/sbx_1/files/stat?path=/work%00x",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		call(&r, "GET", bad[i], NULL, NULL);
		if (!CHECK(is_error(&r, 400, NULL)))
			t_note("for %s", bad[i]);
		done(&r);
	}
	CHECK(fake.requests == before);
}

static void test_code_is_a_typed_request(void)
{
	struct resp r;
	fake.st.end = P_OK;
	call(&r, "POST", "/v1/sandboxes/sbx_1/code",
	     "{\"code\": \"1 + 1\", \"language\": \"python\", \"timeout\": \"10s\"}", NULL);
	CHECK(r.status == 200);
	CHECK(fake.req.kind == SBX_CODE && !strcmp(fake.req.code, "1 + 1"));
	CHECK(fake.req.context && !strcmp(fake.req.context, "default"));
	CHECK(fake.req.language && !strcmp(fake.req.language, "python"));
	CHECK(fake.req.timeout_ms == 10000 && !strcmp(fake.req.formats, "png"));
	done(&r);
	call(&r, "POST", "/v1/sandboxes/sbx_1/code", "{\"code\": \"ls\", \"language\": \"bash\"}",
	     NULL);
	CHECK(r.status == 200 && !strcmp(fake.req.context, "bash"));
	done(&r);
	unsigned before = fake.requests;
	call(&r, "POST", "/v1/sandboxes/sbx_1/code", "{\"code\": \"1\", \"language\": \"cobol\"}",
	     NULL);
	CHECK(is_error(&r, 422, "language"));
	done(&r);
	call(&r, "POST", "/v1/sandboxes/sbx_1/code", "{\"language\": \"python\"}", NULL);
	CHECK(is_error(&r, 422, "code"));
	done(&r);
	CHECK(fake.requests == before);
}

static void test_processes_are_typed_requests(void)
{
	struct resp r;
	fake.st.end = P_OK;
	call(&r, "POST", "/v1/sandboxes/sbx_1/processes/7/signal", "{\"signal\": \"SIGTERM\"}", NULL);
	CHECK(fake.req.kind == SBX_SIGNAL && fake.req.proc == 7 && fake.req.signo == SIGTERM);
	done(&r);
	unsigned before = fake.requests;
	call(&r, "POST", "/v1/sandboxes/sbx_1/processes/7/signal", "{\"signal\": \"SIGNOPE\"}", NULL);
	CHECK(is_error(&r, 422, NULL));
	done(&r);
	call(&r, "GET", "/v1/sandboxes/sbx_1/processes/x", NULL, NULL);
	CHECK(is_error(&r, 404, NULL));
	done(&r);
	CHECK(fake.requests == before);
}

/* What sbx_acquire says becomes the status the API documents. */
static void test_acquire_errors_map(void)
{
	static const struct { int err, status; } map[] = {
		{ -ENOENT, 404 }, { -ESHUTDOWN, 409 }, { -EDQUOT, 429 }, { -EBUSY, 503 }, { -EIO, 503 },
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		fake.acquire_err = map[i].err;
		struct resp r;
		call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{\"cmd\": \"ls\"}", NULL);
		if (!CHECK(is_error(&r, map[i].status, "fake")))
			t_note("for %s", strerror(-map[i].err));
		done(&r);
	}
	CHECK(fake.requests == 0);
}

/* A key's requests name its account; the socket's, any. */
static void test_accounts(void)
{
	struct resp r;
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{\"cmd\": \"ls\"}", E.key);
	CHECK(r.status == 200 && !strcmp(fake.acquired_account, "alice"));
	done(&r);
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{\"cmd\": \"ls\"}", NULL);
	CHECK(r.status == 200 && !strcmp(fake.acquired_account, ""));
	done(&r);
	unsigned before = fake.acquires;
	call(&r, "POST", "/v1/sandboxes/sbx_1/exec", "{\"cmd\": \"ls\"}", "cpuos_nope");
	CHECK(is_error(&r, 401, NULL) && fake.acquires == before);
	done(&r);
	call(&r, "POST", "/v1/keys", "{\"name\": \"bob\"}", E.key); /* the socket's only */
	CHECK(is_error(&r, 404, NULL));
	done(&r);
}

static void test_create_is_typed(void)
{
	struct resp r;
	call(&r, "POST", "/v1/sandboxes",
	     "{\"template\": \"python\", \"vcpus\": 2, \"memory_mb\": 1024, \"timeout\": \"10m\","
	     " \"env\": {\"K\": \"V\"}, \"metadata\": {\"m\": \"1\"}, \"on_timeout\": \"kill\","
	     " \"public\": true, \"network\": {\"mode\": \"deny-all\"}}",
	     E.key);
	CHECK(r.status == 201 && !strcmp(json_string_value(json_object_get(r.json, "id")) ?: "", "sbx_made"));
	CHECK(fake.creates == 1 && !strcmp(fake.create.template, "python"));
	CHECK(fake.create.vcpus == 2 && fake.create.memory_mb == 1024 && fake.create.timeout_s == 600);
	CHECK(fake.create.kill_on_timeout && fake.create.is_public);
	CHECK(fake.create.env_json && strstr(fake.create.env_json, "\"K\""));
	CHECK(fake.create.network_json && strstr(fake.create.network_json, "deny-all"));
	done(&r);
	static const char *const bad[][2] = {
		{ "{\"template\": \"python\", \"vcpus\": 0}", "vcpus" },
		{ "{\"template\": \"python\", \"vcpus\": 17}", "vcpus" },
		{ "{\"template\": \"python\", \"memory_mb\": 64}", "memory_mb" },
		{ "{\"template\": \"python\", \"on_timeout\": \"sleep\"}", "on_timeout" },
		{ "{\"vcpus\": 1}", "template" },
		{ "{\"template\": \"python\", \"timeout\": -5}", "timeout" },
		{ "{\"template\": \"python\", \"metadata\": {\"m\": 1}}", "metadata" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		call(&r, "POST", "/v1/sandboxes", bad[i][0], E.key);
		if (!CHECK(is_error(&r, 422, bad[i][1])))
			t_note("for %s", bad[i][0]);
		done(&r);
	}
	CHECK(fake.creates == 1);
	fake.create_err = -EDQUOT;
	call(&r, "POST", "/v1/sandboxes", "{\"template\": \"python\"}", E.key);
	CHECK(is_error(&r, 429, "fake"));
	done(&r);
}

/* A secret's value goes to be sealed, and only what comes back is stored;
 * a daemon that cannot seal (no networks) says so and stores nothing. */
static void test_a_secret_is_stored_sealed(void)
{
	struct resp r;
	call(&r, "PUT", "/v1/secrets/API_KEY",
	     "{\"value\": \"sk-0123456789\", \"hosts\": [\"API.test\"]}", E.key);
	CHECK(r.status == 201 && fake.seals == 1 && !strstr(r.body, "sk-0123"));
	done(&r);
	struct store_secret x;
	CHECK(store_secret_get(E.store, "alice", "API_KEY", &x) == 0 && x.sealed &&
	      !strcmp(x.value, "sealed1:13") && !strcmp(x.hosts_json, "[\"api.test\"]"));
	store_secret_release(&x);
	fake.seal_err = -ENOTSUP;
	call(&r, "PUT", "/v1/secrets/OTHER", "{\"value\": \"v\", \"hosts\": [\"a.test\"]}", E.key);
	CHECK(is_error(&r, 409, "fake"));
	done(&r);
	fake.seal_err = -EPIPE;
	call(&r, "PUT", "/v1/secrets/OTHER", "{\"value\": \"v\", \"hosts\": [\"a.test\"]}", E.key);
	CHECK(is_error(&r, 503, "cannot seal it"));
	done(&r);
	CHECK(store_secret_get(E.store, "alice", "OTHER", &x) == -ENOENT);
	/* a value that is no value is not sent to be sealed */
	fake.seal_err = 0;
	call(&r, "PUT", "/v1/secrets/OTHER", "{\"value\": \"a\\nb\", \"hosts\": [\"a.test\"]}",
	     E.key);
	CHECK(is_error(&r, 422, "printable") && fake.seals == 3);
	done(&r);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	t_fixture(setup, teardown);
	static const struct t_case cases[] = {
		{ "api_exec_is_a_typed_request", test_exec_is_a_typed_request },
		{ "api_bad_exec_asks_nothing", test_bad_exec_asks_nothing },
		{ "api_files_are_typed_requests", test_files_are_typed_requests },
		{ "api_code_is_a_typed_request", test_code_is_a_typed_request },
		{ "api_processes_are_typed_requests", test_processes_are_typed_requests },
		{ "api_acquire_errors_map", test_acquire_errors_map },
		{ "api_accounts", test_accounts },
		{ "api_create_is_typed", test_create_is_typed },
		{ "api_a_secret_is_stored_sealed", test_a_secret_is_stored_sealed },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
