/*
 * cmd_shell: cpuos shell, an interactive terminal in a sandbox. It starts a
 * background process on a pseudo-terminal the size of ours (docs/api.md,
 * Terminals), puts our terminal in raw mode, and then three things run at
 * once: the main thread reads the process's NDJSON stream and writes its
 * bytes to stdout; a second thread reads our stdin and posts each read as
 * keystrokes; a SIGWINCH, through a pipe that thread also polls, posts the
 * new size. The process's exit ends the command with its status, and the
 * terminal is restored however we leave.
 */
#include "cli/cpuos/cmd_shell.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#define EXIT_CPUOS 125
#define KEYS_CHUNK 4096

/* The user's login shell when the image has bash, else sh: whatever image
 * the sandbox runs, something answers. */
#define DEFAULT_SHELL "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"

static const char shell_usage[] =
    "usage: cpuos shell [options] SANDBOX [--] [COMMAND [ARG...]]\n"
    "Opens an interactive terminal in SANDBOX: a login shell (bash, else sh), or\n"
    "COMMAND, on a pseudo-terminal the size of this one, which follows resizes.\n"
    "Exits with the shell's exit status. Leaving without exiting the shell (the\n"
    "connection lost) leaves it running: see cpuos exec and the process API.\n"
    "\n"
    "  -e, --env K=V           environment variable (repeatable)\n"
    "  -w, --cwd DIR           working directory\n"
    "  -u, --user USER         user or root (default user)\n";

static struct termios saved;
static int raw_on;
static int winch_pipe[2] = {-1, -1};

static void restore_tty(void)
{
	if (raw_on)
		tcsetattr(0, TCSADRAIN, &saved);
	raw_on = 0;
}

static void on_winch(int sig)
{
	(void)sig;
	int e = errno;
	if (write(winch_pipe[1], "w", 1) < 0) {
		/* full: a resize is already pending, which is enough */
	}
	errno = e;
}

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
	pending_signal = sig;
}

/* Our terminal's size, or 24x80 when stdin is not one. */
static void term_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;
	*rows = 24;
	*cols = 80;
	if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

struct shell_run {
	struct api *keys_api; /* the input thread's handle */
	struct api *sig_api;  /* the main thread's second handle, for signals */
	struct apath proc;    /* /v1/sandboxes/ID/processes/PID */
	int done, status;
	char error[256];
};

static void write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

/* Decodes standard base64 into out (room for n / 4 * 3): the length, or
 * -1 when it is not base64. */
static int unbase64(const char *in, size_t n, unsigned char *out)
{
	if (n % 4)
		return -1;
	int len = n ? EVP_DecodeBlock(out, (const unsigned char *)in, (int)n) : 0;
	if (len < 0)
		return -1;
	return len - (n > 0 && in[n - 1] == '=') - (n > 1 && in[n - 2] == '=');
}

static int shell_line(void *arg, const char *line, size_t n)
{
	struct shell_run *run = arg;
	json_t *j = json_loadb(line, n, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *data = json_object_get(j, "data_base64");
	int r = 0;
	if (type && !strcmp(type, "pty") && json_is_string(data)) {
		size_t len = json_string_length(data);
		unsigned char *buf = malloc(len / 4 * 3 + 3);
		int k = buf ? unbase64(json_string_value(data), len, buf) : -1;
		if (k >= 0)
			write_all(1, buf, (size_t)k);
		free(buf);
		if (k < 0) {
			snprintf(run->error, sizeof(run->error), "bad base64 in the terminal's stream");
			r = -EIO;
		}
	} else if (type && !strcmp(type, "exit")) {
		json_t *sig = json_object_get(j, "signal"), *code = json_object_get(j, "exit_code");
		run->done = 1;
		run->status = json_is_integer(code)  ? (int)(json_integer_value(code) & 0xff)
			      : json_is_integer(sig) ? 128 + (int)(json_integer_value(sig) & 0x7f)
						     : EXIT_CPUOS;
		r = 1;
	} else if (!type) {
		snprintf(run->error, sizeof(run->error), "unexpected line in the terminal's stream: %.*s",
			 (int)(n > 80 ? 80 : n), line);
		r = -EIO;
	} /* other types: a newer daemon's */
	json_decref(j);
	return r;
}

/* SIGTERM and SIGHUP (our terminal gone) go on to the shell, as a terminal
 * would pass them; in raw mode ^C is a keystroke, not a signal. */
static int shell_tick(void *arg)
{
	struct shell_run *run = arg;
	int sig = pending_signal;
	if (!sig)
		return 0;
	pending_signal = 0;
	struct apath p = run->proc;
	apath_add(&p, "/signal");
	json_t *body = json_pack("{si}", "signal", sig);
	api_json(run->sig_api, "POST", &p, body, NULL); /* best effort: it may have exited */
	json_decref(body);
	return 0;
}

static void post_size(struct shell_run *run)
{
	unsigned rows, cols;
	term_size(&rows, &cols);
	struct apath p = run->proc;
	apath_add(&p, "/resize");
	json_t *body = json_pack("{sisi}", "rows", rows, "cols", cols);
	api_json(run->keys_api, "POST", &p, body, NULL); /* it may have exited */
	json_decref(body);
}

/* The input thread: keystrokes and resizes, until stdin ends or a post
 * fails (the process is gone). Not joined: it may sit in poll forever
 * while the main thread reports the exit. */
static void *pump_keys(void *arg)
{
	struct shell_run *run = arg;
	static char buf[KEYS_CHUNK];
	struct apath keys = run->proc;
	apath_add(&keys, "/stdin");
	struct pollfd pfd[2] = {{.fd = 0, .events = POLLIN}, {.fd = winch_pipe[0], .events = POLLIN}};
	int in_open = 1;
	for (;;) {
		if (poll(pfd + !in_open, 2 - !in_open, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents) {
			char drain[64];
			while (read(winch_pipe[0], drain, sizeof(drain)) > 0)
				;
			post_size(run);
		}
		if (!in_open || !pfd[0].revents)
			continue;
		ssize_t n = read(0, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			in_open = 0; /* stdin ended (a pipe): the shell lives on until it exits */
			pfd[0].revents = 0;
			continue;
		}
		if (api_post_raw(run->keys_api, &keys, buf, (size_t)n) < 0)
			break;
	}
	return NULL;
}

static int shell_parse(int argc, char **argv, json_t *body, int *ret)
{
	static const struct option opts[] = {
	    {"env", required_argument, 0, 'e'},	 {"cwd", required_argument, 0, 'w'},
	    {"user", required_argument, 0, 'u'}, {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	json_t *env = json_object_get(body, "env");
	int o;
	*ret = EXIT_USAGE;
	optind = 0;
	while ((o = getopt_long(argc, argv, "+e:w:u:h", opts, NULL)) != -1) {
		switch (o) {
		case 'e':
			if (cli_kv(env, optarg, "--env") < 0)
				return -EINVAL;
			break;
		case 'w':
			json_object_set_new(body, "cwd", json_string(optarg));
			break;
		case 'u':
			json_object_set_new(body, "user", json_string(optarg));
			break;
		case 'h':
			fputs(shell_usage, stdout);
			*ret = 0;
			return -EINVAL;
		default:
			fputs(shell_usage, stderr);
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		*ret = cli_usage_err("shell", "no sandbox given");
		return -EINVAL;
	}
	int sbx_at = optind++;
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind < argc) {
		json_t *args = json_array();
		for (int i = optind; i < argc; i++)
			json_array_append_new(args, json_string(argv[i]));
		json_object_set_new(body, "argv", args);
	} else {
		json_object_set_new(body, "cmd", json_string(DEFAULT_SHELL));
	}
	if (!json_object_size(env))
		json_object_del(body, "env");
	unsigned rows, cols;
	term_size(&rows, &cols);
	json_object_set_new(body, "pty", json_pack("{sisi}", "rows", rows, "cols", cols));
	json_object_set_new(body, "background", json_true());
	return sbx_at;
}

int cmd_shell(struct cli *c, int argc, char **argv)
{
	json_t *body = json_pack("{s{}}", "env"), *proc = NULL;
	struct shell_run run = {.status = EXIT_CPUOS};
	int ret = EXIT_CPUOS, sbx_at, started = 0;
	struct api *a;
	struct apath p;
	pthread_t t;

	if (!body) {
		cli_err("out of memory");
		return EXIT_CPUOS;
	}
	if ((sbx_at = shell_parse(argc, argv, body, &ret)) < 0)
		goto out;
	ret = EXIT_CPUOS;
	if (!(a = cli_api(c)))
		goto out;
	if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		cli_err("cannot make a pipe: %s", strerror(errno));
		goto out;
	}
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, argv[sbx_at]);
	run.proc = p;
	apath_add(&p, "/exec");
	if (api_json(a, "POST", &p, body, &proc) < 0) {
		cli_api_fail(a);
		goto out;
	}
	json_t *pid = json_object_get(proc, "pid");
	if (!json_is_integer(pid) || !json_is_true(json_object_get(proc, "pty"))) {
		cli_err("unexpected answer from cpuosd at %s: no process on a terminal", api_url(a));
		goto out;
	}
	char pid_s[32];
	snprintf(pid_s, sizeof(pid_s), "%lld", (long long)json_integer_value(pid));
	apath_add(&run.proc, "/processes");
	apath_seg(&run.proc, pid_s);
	if (api_dup(a, &run.keys_api) < 0 || api_dup(a, &run.sig_api) < 0) {
		cli_err("cannot set up libcurl");
		goto out;
	}

	struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (isatty(0) && tcgetattr(0, &saved) == 0) {
		struct termios raw = saved;
		cfmakeraw(&raw);
		if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
			raw_on = 1;
			atexit(restore_tty);
		}
	}
	if (pthread_create(&t, NULL, pump_keys, &run) != 0) {
		cli_err("cannot start the input thread");
		goto out;
	}
	pthread_detach(t);
	started = 1;
	/* A resize between our size at the exec and the thread's start. */
	on_winch(SIGWINCH);

	p = run.proc;
	apath_add(&p, "/stream");
	int r = api_lines(a, &p, shell_line, shell_tick, &run);
	restore_tty();
	if (run.done)
		ret = run.status;
	else if (run.error[0])
		cli_err("%s", run.error);
	else if (r < 0)
		cli_api_fail(a);
	else
		cli_err("the terminal's stream of process %s ended before its exit", pid_s);
out:
	restore_tty();
	json_decref(proc);
	json_decref(body);
	if (started) {
		/* The input thread may be inside libcurl: leave without tearing
		 * anything down under it. */
		fflush(stdout);
		_exit(ret);
	}
	api_free(run.keys_api);
	api_free(run.sig_api);
	return ret;
}
