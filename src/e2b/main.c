/*
 * cpuos-e2b's main: reads its options and its secret (made on the first
 * run), then serves E2B's two planes on one listener until SIGTERM or
 * SIGINT (e2b.h).
 */
#include "common/fs.h"
#include "common/log.h"
#include "e2b/config.h"
#include "e2b/e2b.h"
#include "e2b/e2b_http.h"
#include "e2b/token.h"
#include "lib/httpd.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define STOP_WAIT_MS 10000 /* for the threads that relay streams */

/* The secret that seals access tokens: <state-dir>/secret, 32 random
 * bytes made 0600 on the first run. Tokens handed out live as long as it
 * does. 0, or -1 after saying why. */
static int load_secret(const char *dir, unsigned char secret[32])
{
	char path[1100];
	struct stat st;
	if (fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1) < 0) {
		log_error("cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/secret", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) {
		if (getrandom(secret, 32, 0) != 32) {
			log_error("no random bytes: %s", strerror(errno));
			return -1;
		}
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 || write(fd, secret, 32) != 32 || fsync(fd) < 0) {
			log_error("cannot write '%s': %s", path, strerror(errno));
			if (fd >= 0)
				close(fd), unlink(path);
			return -1;
		}
		close(fd);
		return 0;
	}
	if (fd < 0 || fstat(fd, &st) < 0 || read(fd, secret, 32) != 32) {
		log_error("cannot read '%s': %s", path, fd < 0 ? strerror(errno) : "not 32 bytes");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	if (!S_ISREG(st.st_mode) || st.st_mode & 077 || st.st_uid != geteuid()) {
		log_error("'%s' must be a file of this user's that only it may read", path);
		return -1;
	}
	return 0;
}

atomic_int e2b_stopping;

static int serve(const struct e2b_config *o)
{
	/* Static: a stream's thread that outlives the drain still finds it. */
	static struct e2b g;
	g.cfg = o;
	struct httpd *http = NULL;
	char err[512];
	int rc = 1, busy = 0;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
	    workers_init(&g.pumps, 0, 0, "e2b") < 0 || tokens_new(&g.tokens) < 0) {
		log_error("cannot set up signals, libcurl or threads");
		goto out;
	}
	if (load_secret(o->state_dir, g.secret) < 0)
		goto stop;
	if (e2b_http_start(&g, &http, err, sizeof(err)) < 0) {
		log_error("%s", err);
		goto stop;
	}
	log_info("serving on %s: cpuosd %s%s%s", o->listen, o->cpuos_url,
		 o->domain[0] ? ", sandboxes at <port>-<id>." : "", o->domain);
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
		;
	log_info("signal %u: stopping", si.ssi_signo);
	atomic_store(&e2b_stopping, 1);
	httpd_stop(http);
	busy = workers_drain(&g.pumps, STOP_WAIT_MS) < 0;
	if (busy)
		log_warn("%u streams still running at exit", workers_count(&g.pumps));
	rc = busy;
stop:
	if (busy) /* threads still run on what the frees below would take */
		_exit(rc);
	if (!busy) {
		tokens_free(g.tokens);
		workers_release(&g.pumps);
		curl_global_cleanup();
	}
out:
	explicit_bzero(g.secret, sizeof(g.secret));
	if (sfd >= 0)
		close(sfd);
	return rc;
}

int main(int argc, char **argv)
{
	struct e2b_config o;
	int pr = e2b_config_parse(&o, argc, argv);
	if (pr != 0)
		return pr > 0 ? 0 : 2;
	enum log_level level;
	if (log_level_parse(o.log_level, &level) < 0) {
		fprintf(stderr, "cpuos-e2b: invalid --log-level '%s'\n", o.log_level);
		return 2;
	}
	if (strncmp(o.cpuos_url, "http://", 7)) {
		fprintf(stderr, "cpuos-e2b: --cpuos-url must be http://HOST:PORT (cpuosd's TCP API: "
				"its sandboxes are the keys' accounts')\n");
		return 2;
	}
	log_set_level(level);
	log_set_tag("e2b");
	signal(SIGPIPE, SIG_IGN);
	return serve(&o);
}
