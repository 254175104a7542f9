/*
 * cpuos-gateway: an OpenAI-compatible server that runs the model's
 * code-interpreter tool calls in cpuos sandboxes. "serve" (the default)
 * reads its options, opens its store and serves until SIGTERM or SIGINT;
 * "keys" creates, lists and deletes its API keys in the same store.
 */
#include "cli/cpuos/http.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/log.h"
#include "gateway/conv.h"
#include "gateway/gateway.h"
#include "gateway/gw_config.h"
#include "gateway/gw_http.h"
#include "gateway/gw_store.h"
#include "gateway/upstream.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define STOP_WAIT_MS 60000 /* for the threads that pause sandboxes */

static int open_store(const struct gw_config *o, struct gw_store **s)
{
	char path[PATH_MAX + 16], err[512];
	if (fs_mkdir_p(o->state_dir, 0700, (uid_t)-1, (gid_t)-1) < 0) {
		fprintf(stderr, "cpuos-gateway: cannot create '%s': %s\n", o->state_dir,
			strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/gateway.db", o->state_dir);
	if (gw_store_open(path, s, err, sizeof(err)) < 0) {
		fprintf(stderr, "cpuos-gateway: %s\n", err);
		return -1;
	}
	return 0;
}

/* keys delete: the key's sandboxes go too, when cpuosd can be reached. */
static void kill_sandboxes(const struct gw_config *o, struct gw_store *s, const char *key_id)
{
	char(*ids)[GW_SBX_ID_LEN] = NULL;
	size_t n = 0;
	char *key = gw_config_secret(o->cpuos_key_file, "CPUOS_API_KEY");
	struct api *a = NULL;
	if (gw_conv_sandboxes(s, key_id, &ids, &n) < 0 || !n || !key ||
	    api_new(o->cpuos_url, key, &a) < 0)
		goto out;
	api_set_timeout(a, 30000);
	for (size_t i = 0; i < n; i++) {
		struct apath p;
		apath_init(&p, "/v1/sandboxes");
		apath_seg(&p, ids[i]);
		if (api_json(a, "DELETE", &p, NULL, NULL) < 0)
			fprintf(stderr, "cpuos-gateway: cannot kill sandbox %s: %s\n", ids[i],
				api_error(a));
	}
out:
	api_free(a);
	free(ids);
	free(key);
}

static int cmd_keys(const struct gw_config *o)
{
	const char *verb = o->nargs > 1 ? o->args[1] : "";
	struct gw_store *s;
	int rc = 1;
	if (strcmp(verb, "create") && strcmp(verb, "list") && strcmp(verb, "delete")) {
		fprintf(stderr, "cpuos-gateway: keys create --name NAME | keys list | keys delete ID\n");
		return 2;
	}
	if ((!strcmp(verb, "delete") && o->nargs != 3) || (strcmp(verb, "delete") && o->nargs != 2)) {
		fprintf(stderr, "cpuos-gateway: keys %s: wrong number of arguments\n", verb);
		return 2;
	}
	if (!strcmp(verb, "create") && !o->name[0]) {
		fprintf(stderr, "cpuos-gateway: keys create needs --name NAME\n");
		return 2;
	}
	if (open_store(o, &s) < 0)
		return 1;
	if (!strcmp(verb, "create")) {
		char secret[GW_KEY_SECRET_LEN + 1];
		struct gw_key k;
		int r = gw_key_create(s, o->name, secret, &k);
		if (r < 0)
			fprintf(stderr, "cpuos-gateway: cannot create key '%s': %s\n", o->name,
				r == -EINVAL ? "a name is 1 to 127 printable characters"
					     : strerror(-r));
		else
			printf("%s\n", secret), rc = 0;
		explicit_bzero(secret, sizeof(secret));
	} else if (!strcmp(verb, "list")) {
		struct gw_key *ks;
		size_t n;
		if (gw_key_list(s, &ks, &n) == 0) {
			for (size_t i = 0; i < n; i++) {
				char t[CLOCK_RFC3339_LEN];
				printf("%s\t%s\t%s\n", ks[i].id, ks[i].name,
				       clock_rfc3339(ks[i].created_at, t, sizeof(t)));
			}
			free(ks);
			rc = 0;
		} else {
			fprintf(stderr, "cpuos-gateway: cannot list keys\n");
		}
	} else {
		const char *id = o->args[2];
		kill_sandboxes(o, s, id);
		int r = gw_key_delete(s, id);
		if (r < 0)
			fprintf(stderr, "cpuos-gateway: cannot delete key '%s': %s\n", id,
				r == -ENOENT ? "no such key" : strerror(-r));
		rc = r < 0;
	}
	gw_store_close(s);
	return rc;
}

static int serve(const struct gw_config *o)
{
	struct gw g = { .cfg = o };
	struct httpd *http = NULL;
	char err[512];
	int rc = 1, busy = 0;
	if (!o->upstream_url[0]) {
		fprintf(stderr, "cpuos-gateway: --upstream-url is needed (an OpenAI-compatible /v1 URL)\n");
		return 2;
	}
	char *up_key = gw_config_secret(o->upstream_key_file, "UPSTREAM_API_KEY");
	char *cpuos_key = gw_config_secret(o->cpuos_key_file, "CPUOS_API_KEY");
	if (!up_key || !cpuos_key)
		goto out;
	g.sbx = (struct sbxc_cfg){ .url = o->cpuos_url, .key = cpuos_key, .template_ = o->template_,
				   .sandbox_timeout_s = o->sandbox_timeout_s,
				   .code_timeout_s = o->code_timeout_s };
	/* Signals become a descriptor read here alone, blocked before any
	 * thread starts (threads inherit the mask). */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
	    workers_init(&g.background, 0, 0, "gateway") < 0) {
		log_error("cannot set up signals, libcurl or threads");
		goto out;
	}
	if (open_store(o, &g.store) < 0 || up_new(o->upstream_url, up_key, o->upstream_timeout_s,
						   &g.up) < 0 || conv_locks_new(&g.locks) < 0)
		goto stop;
	if (gw_http_start(&g, o->listen, &http, err, sizeof(err)) < 0) {
		log_error("%s", err);
		goto stop;
	}
	log_info("serving on %s: upstream %s, cpuosd %s, tool %s, %lld steps at most", o->listen,
		 o->upstream_url, o->cpuos_url, o->tool_name, o->max_steps);
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
		;
	log_info("signal %u: stopping", si.ssi_signo);
	atomic_store(&g.stopping, 1);
	httpd_stop(http);
	/* Streams and pauses still under way end at their next step. */
	busy = workers_drain(&g.background, STOP_WAIT_MS) < 0;
	if (busy)
		log_warn("%u requests still running at exit", workers_count(&g.background));
	rc = busy;
stop:
	if (!busy) { /* else still in use: the exit frees them */
		conv_locks_free(g.locks);
		up_free(g.up);
		gw_store_close(g.store);
		curl_global_cleanup();
		workers_release(&g.background);
	}
	if (sfd >= 0)
		close(sfd);
out:
	if (cpuos_key)
		explicit_bzero(cpuos_key, strlen(cpuos_key));
	if (up_key)
		explicit_bzero(up_key, strlen(up_key));
	free(up_key);
	free(cpuos_key);
	return rc;
}

int main(int argc, char **argv)
{
	struct gw_config o;
	int pr = gw_config_parse(&o, argc, argv);
	if (pr != 0)
		return pr > 0 ? 0 : 2;
	enum log_level level;
	if (log_level_parse(o.log_level, &level) < 0) {
		fprintf(stderr, "cpuos-gateway: invalid --log-level '%s'\n", o.log_level);
		return 2;
	}
	log_set_level(level);
	log_set_tag("gateway");
	signal(SIGPIPE, SIG_IGN); /* a client gone is an EPIPE, not the end */
	const char *cmd = o.nargs ? o.args[0] : "serve";
	if (!strcmp(cmd, "keys"))
		return cmd_keys(&o);
	if (!strcmp(cmd, "serve") && o.nargs <= 1)
		return serve(&o);
	fprintf(stderr, "cpuos-gateway: unknown command '%s' (serve or keys; see --help)\n", cmd);
	return 2;
}
