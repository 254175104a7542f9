/*
 * build: cpuos templates build NAME -f Dockerfile [CONTEXT], a client of
 * the API as any user is. Each step that changes files (RUN, COPY, ADD,
 * WORKDIR) runs in a cpuos sandbox of the account's, under the daemon's
 * egress policy, and the sandbox is checkpointed after it under a name
 * that is the hash of everything up to it (the FROM, each instruction as
 * expanded, the bytes COPY sent): a later build whose prefix is the same
 * starts from the checkpoint of its last unchanged step. At the end the
 * sandbox's root (one file system: its overlay, not /proc, /sys, /dev) is
 * exported as one layer, put in an OCI layout with the config the
 * Dockerfile gave, and uploaded as template NAME (POST /v1/templates),
 * which the daemon imports as any image. The template's label
 * cpuos.build.key is the last step's hash: a build that changes nothing
 * keeps the template it made. A context that is an archive, the temporary
 * trees and --remote are buildctx.c's; the Dockerfile's text dockerfile.c's.
 */
#include "cli/cpuos/tplbuild.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/buildctx.h"
#include "cli/cpuos/cmd_files.h"
#include "cli/cpuos/dockerfile.h"
#include "cli/cpuos/http.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DOCKERFILE (1 << 20)
#define MAX_STEPS 256
#define KEY_HEX 24 /* of the step hash, in checkpoint names */

struct build {
	struct api *a;
	const char *name, *context;
	struct df_instr steps[MAX_STEPS];
	int nsteps;
	json_t *build_args; /* --build-arg */
	/* the state the steps so far made */
	json_t *env, *args, *labels, *cmd, *entrypoint;
	char from[512], workdir[4096], user[256], health[4096];
	int user_given; /* by USER or the base: else the template's default user is cpuos's */
	unsigned expose;
	unsigned char key[32];
	char sbx[64]; /* the build sandbox, once made */
	unsigned disk_mb;
};

static void hex(const unsigned char *k, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", k[i]);
}

/* key = sha256(key, what, more[n]) */
static void chain(unsigned char *key, const char *what, const void *more, size_t n)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	EVP_DigestUpdate(c, key, 32);
	EVP_DigestUpdate(c, what, strlen(what) + 1);
	if (n)
		EVP_DigestUpdate(c, more, n);
	EVP_DigestFinal_ex(c, key, NULL);
	EVP_MD_CTX_free(c);
}

/* ---- the sandbox ---- */

struct stream {
	int done, status;
};

static int on_line(void *arg, const char *line, size_t n)
{
	struct stream *st = arg;
	json_t *j = json_loadb(line, n, JSON_ALLOW_NUL, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *data = json_object_get(j, "data");
	int r = 0;
	if (type && (!strcmp(type, "stdout") || !strcmp(type, "stderr"))) {
		fwrite(json_string_value(data), 1, json_string_length(data), stderr);
	} else if (type && !strcmp(type, "exit")) {
		json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
		st->done = 1;
		st->status = json_is_integer(sig) ? 128 + (int)json_integer_value(sig)
			     : json_is_integer(code) ? (int)json_integer_value(code) : -1;
		r = 1;
	}
	json_decref(j);
	return r;
}

/* argv in the build sandbox with env (a JSON object, NULL: none), cwd and
 * user, its output to stderr: its exit status, or -1 after saying why. */
static int run(struct build *b, json_t *argv, const char *cwd, const char *user, const json_t *envs)
{
	json_t *env = envs ? json_deep_copy(envs) : json_object();
	json_t *body = json_pack("{s:O,s:o,s:s,s:s,s:b,s:i}", "argv", argv, "env", env, "cwd", cwd,
				 "user", user, "background", 1, "timeout", 3600), *proc = NULL;
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, b->sbx);
	struct apath base = p;
	apath_add(&p, "/exec");
	int r = api_json(b->a, "POST", &p, body, &proc);
	json_decref(body);
	if (r < 0)
		return cli_api_fail(b->a), -1;
	char pid[32];
	snprintf(pid, sizeof(pid), "%lld", (long long)json_integer_value(json_object_get(proc, "pid")));
	json_decref(proc);
	apath_add(&base, "/processes");
	apath_seg(&base, pid);
	p = base;
	apath_add(&p, "/stdin");
	apath_query(&p, "eof", "true");
	api_post_raw(b->a, &p, NULL, 0);
	p = base;
	apath_add(&p, "/stream");
	struct stream st = { 0 };
	r = api_lines(b->a, &p, on_line, NULL, &st);
	if (!st.done) {
		if (r < 0)
			cli_api_fail(b->a);
		else
			cli_err("the output of a build step ended before its exit");
		return -1;
	}
	return st.status;
}

static int checkpoint_exists(struct build *b, const char *name)
{
	struct apath p;
	apath_init(&p, "/v1/checkpoints");
	apath_seg(&p, name);
	json_t *o = NULL;
	int r = api_json(b->a, "GET", &p, NULL, &o);
	json_decref(o);
	return r == 0;
}

static int start(struct build *b, const char *checkpoint)
{
	json_t *body = json_pack("{s:s,s:i,s:i}", "timeout", "6h", "memory_mb", 512, "disk_mb",
				 (int)b->disk_mb), *o = NULL;
	json_object_set_new(body, checkpoint ? "checkpoint" : "template",
			    json_string(checkpoint ? checkpoint : b->from));
	json_object_set_new(body, "metadata", json_pack("{s:s}", "cpuos.build", b->name));
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	int r = api_json(b->a, "POST", &p, body, &o);
	json_decref(body);
	if (r < 0)
		return cli_api_fail(b->a), -1;
	snprintf(b->sbx, sizeof(b->sbx), "%s", json_string_value(json_object_get(o, "id")) ?: "");
	json_decref(o);
	return 0;
}

static void stop(struct build *b)
{
	if (!b->sbx[0])
		return;
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, b->sbx);
	api_json(b->a, "DELETE", &p, NULL, NULL);
	b->sbx[0] = '\0';
}

static int save(struct build *b, const char *name)
{
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, b->sbx);
	apath_add(&p, "/checkpoints");
	json_t *body = json_pack("{s:s}", "name", name);
	int r = api_json(b->a, "POST", &p, body, NULL);
	json_decref(body);
	if (r < 0 && api_status(b->a) != 409)
		return cli_api_fail(b->a), -1;
	return 0;
}

/* ---- COPY and ADD ---- */

/* A tar of the context's src (a file or a directory's contents) as name
 * (a file's new name, or NULL: as it is), owners numeric: its pid, with
 * its output on *fd. Entries sorted and mtimes kept, so the same files
 * give the same bytes (the cache key). */
static pid_t tar_of(const char *dir, const char *what, const char *rename_to, const char *owner,
		    int *fd)
{
	char ownopt[64], grpopt[64], xf[PATH_MAX + 32];
	const char *colon = owner ? strchr(owner, ':') : NULL;
	snprintf(ownopt, sizeof(ownopt), "--owner=%.*s", colon ? (int)(colon - owner) : 30,
		 owner ? owner : "0");
	snprintf(grpopt, sizeof(grpopt), "--group=%s", colon ? colon + 1 : owner ? owner : "0");
	snprintf(xf, sizeof(xf), "--transform=s,^%s$,%s,", what, rename_to ? rename_to : what);
	char *argv[16];
	int n = 0;
	argv[n++] = "tar";
	argv[n++] = "-C";
	argv[n++] = (char *)dir;
	argv[n++] = "--sort=name";
	argv[n++] = "--numeric-owner";
	argv[n++] = ownopt;
	argv[n++] = grpopt;
	if (rename_to)
		argv[n++] = xf;
	argv[n++] = "-cf";
	argv[n++] = "-";
	argv[n++] = "--";
	argv[n++] = (char *)what;
	argv[n] = NULL;
	return cli_tar_start(argv, 0, fd);
}

/* A source of a COPY: where it is and what tar takes. */
struct src {
	char dir[PATH_MAX], what[PATH_MAX];
	int is_dir;
};

/* src, relative to the context, stays inside it (no "..", no absolute
 * path, no symlink that leads out: resolved and compared). */
static int resolve_src(const struct build *b, const char *rel, struct src *s)
{
	char ctx[PATH_MAX], full[PATH_MAX * 2], real[PATH_MAX];
	if (!realpath(b->context, ctx))
		return cli_err("cannot read the context '%s': %s", b->context, strerror(errno)), -1;
	snprintf(full, sizeof(full), "%s/%s", ctx, rel);
	if (!realpath(full, real))
		return cli_err("COPY: '%s' is not in the context: %s", rel, strerror(errno)), -1;
	size_t cl = strlen(ctx);
	if (strncmp(real, ctx, cl) || (real[cl] && real[cl] != '/'))
		return cli_err("COPY: '%s' is outside the context", rel), -1;
	struct stat st;
	if (stat(real, &st) < 0)
		return -1;
	s->is_dir = S_ISDIR(st.st_mode);
	if (s->is_dir) {
		snprintf(s->dir, sizeof(s->dir), "%s", real);
		snprintf(s->what, sizeof(s->what), ".");
	} else {
		char *slash = strrchr(real, '/');
		snprintf(s->dir, sizeof(s->dir), "%.*s", (int)(slash - real), real);
		if (!s->dir[0])
			snprintf(s->dir, sizeof(s->dir), "/");
		snprintf(s->what, sizeof(s->what), "%s", slash + 1);
	}
	return 0;
}

/* The bytes a COPY would send, hashed into key. */
static int hash_src(const struct src *s, const char *rename_to, const char *owner, EVP_MD_CTX *c)
{
	int fd;
	pid_t pid = tar_of(s->dir, s->what, rename_to, owner, &fd);
	if (pid < 0)
		return -1;
	char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		EVP_DigestUpdate(c, buf, (size_t)n);
	close(fd);
	return cli_tar_end(pid);
}

/* COPY/ADD [--chown=UID:GID] SRC... DEST: parsed into srcs, dest and
 * owner; the key gets the bytes. */
static int copy_plan(struct build *b, const char *args, struct src **srcs, int *nsrc, char *dest,
		     size_t dn, char *owner, size_t on)
{
	json_t *list = NULL;
	*owner = '\0';
	while (!strncmp(args, "--", 2)) {
		size_t k = strcspn(args, " \t");
		if (!strncmp(args, "--chown=", 8)) {
			snprintf(owner, on, "%.*s", (int)(k - 8), args + 8);
			if (strspn(owner, "0123456789:") != strlen(owner) || !*owner)
				return cli_err("COPY --chown takes numeric ids (UID[:GID]), not '%s'", owner), -1;
		} else {
			return cli_err("COPY: option '%.*s' is not supported", (int)k, args), -1;
		}
		args += k;
		while (*args == ' ' || *args == '\t')
			args++;
	}
	if (args[0] == '[') {
		list = json_loads(args, 0, NULL);
	} else {
		list = json_array();
		char tmp[8192];
		snprintf(tmp, sizeof(tmp), "%s", args);
		for (char *w = strtok(tmp, " \t"); w; w = strtok(NULL, " \t"))
			json_array_append_new(list, json_string(w));
	}
	size_t n = json_array_size(list);
	if (n < 2) {
		json_decref(list);
		return cli_err("COPY needs a source and a destination"), -1;
	}
	char exp[PATH_MAX];
	if (df_expand(b->env, b->args, json_string_value(json_array_get(list, n - 1)), exp, sizeof(exp)) < 0) {
		json_decref(list);
		return cli_err("COPY: the destination is too long"), -1;
	}
	int w = exp[0] != '/' ? snprintf(dest, dn, "%s/%s", strcmp(b->workdir, "/") ? b->workdir : "", exp)
			      : snprintf(dest, dn, "%s", exp);
	if (w < 0 || (size_t)w >= dn) {
		json_decref(list);
		return cli_err("COPY: the destination is too long"), -1;
	}
	*srcs = calloc(n - 1, sizeof(**srcs));
	*nsrc = (int)n - 1;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	int r = *srcs ? 0 : -1;
	for (size_t i = 0; r == 0 && i + 1 < n; i++) {
		const char *rel = json_string_value(json_array_get(list, i));
		char e2[PATH_MAX];
		if (!rel || df_expand(b->env, b->args, rel, e2, sizeof(e2)) < 0 || resolve_src(b, e2, &(*srcs)[i]) < 0) {
			r = -1;
			break;
		}
		EVP_DigestUpdate(c, e2, strlen(e2) + 1);
		r = hash_src(&(*srcs)[i], NULL, owner[0] ? owner : NULL, c);
		if (r < 0)
			cli_err("COPY: cannot read '%s'", e2);
	}
	unsigned char h[32];
	EVP_DigestFinal_ex(c, h, NULL);
	EVP_MD_CTX_free(c);
	json_decref(list);
	if (r == 0) {
		char what[PATH_MAX + 64];
		snprintf(what, sizeof(what), "COPY %s %s", dest, owner);
		chain(b->key, what, h, sizeof(h));
	}
	return r;
}

/* Sends each source to dest in the sandbox: a directory's contents into
 * dest, a file to dest (dest/NAME when dest ends in '/', or there are
 * several). An ADD of a local tar (plain or compressed) is unpacked. */
static int copy_do(struct build *b, struct src *srcs, int nsrc, const char *dest, const char *owner,
		   int add)
{
	size_t dl = strlen(dest);
	int into = nsrc > 1 || (dl && dest[dl - 1] == '/');
	for (int i = 0; i < nsrc; i++) {
		struct src *s = &srcs[i];
		char dir[PATH_MAX], name[PATH_MAX];
		const char *rename_to = NULL;
		if (s->is_dir || into) {
			snprintf(dir, sizeof(dir), "%s", dest);
		} else {
			const char *slash = strrchr(dest, '/');
			snprintf(dir, sizeof(dir), "%.*s", (int)(slash - dest), dest);
			snprintf(name, sizeof(name), "%s", slash + 1);
			rename_to = name;
		}
		if (!dir[0])
			snprintf(dir, sizeof(dir), "/");
		int fd;
		pid_t pid;
		const char *ext = strrchr(s->what, '.');
		int archive = add && !s->is_dir && ext &&
			      (strstr(s->what, ".tar") || !strcmp(ext, ".tgz"));
		char unpacked[PATH_MAX];
		if (archive) {
			/* ADD unpacks a local archive (plain, gzip or zstd)
			 * here, and sends what it holds */
			char file[PATH_MAX * 2];
			snprintf(file, sizeof(file), "%s/%s", s->dir, s->what);
			int afd = open(file, O_RDONLY | O_CLOEXEC);
			if (afd < 0)
				return cli_err("ADD: cannot read '%s': %s", s->what,
					       strerror(errno)), -1;
			if (bctx_temp_dir("add", unpacked, sizeof(unpacked)) < 0) {
				close(afd);
				return -1;
			}
			pid = bctx_unpack(afd, unpacked, s->what);
			close(afd);
			pid = pid < 0 ? -1 : tar_of(unpacked, ".", NULL, owner[0] ? owner : NULL, &fd);
		} else {
			pid = tar_of(s->dir, s->what, rename_to, owner[0] ? owner : NULL, &fd);
		}
		int r = -1, t = -1;
		if (pid >= 0) {
			struct apath p;
			apath_init(&p, "/v1/sandboxes");
			apath_seg(&p, b->sbx);
			apath_add(&p, "/files/archive");
			apath_query(&p, "path", dir);
			apath_query(&p, "user", "root");
			r = api_upload(b->a, "PUT", &p, fd, NULL);
			close(fd);
			t = cli_tar_end(pid);
		}
		if (archive)
			bctx_remove_dir(unpacked);
		if (pid < 0)
			return -1;
		if (r < 0)
			return cli_api_fail(b->a), -1;
		if (t < 0)
			return -1;
	}
	return 0;
}

/* ---- the export ---- */

struct layer {
	int fd;
	EVP_MD_CTX *c;
	unsigned long long size;
};

static int layer_sink(void *arg, const char *p, size_t n)
{
	struct layer *l = arg;
	EVP_DigestUpdate(l->c, p, n);
	l->size += n;
	while (n) {
		ssize_t w = write(l->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int write_blob(const char *blobs, const char *text, char *digest, size_t *size)
{
	unsigned char h[32];
	char hx[65], path[PATH_MAX + 80];
	EVP_Digest(text, strlen(text), h, NULL, EVP_sha256(), NULL);
	hex(h, 32, hx);
	snprintf(path, sizeof(path), "%s/%s", blobs, hx);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		return -1;
	snprintf(digest, 80, "sha256:%s", hx);
	*size = strlen(text);
	return 0;
}

/* The sandbox's root as one layer, in an OCI layout at dir, with the
 * config the Dockerfile made. */
static int export(struct build *b, const char *dir)
{
	char blobs[PATH_MAX], path[PATH_MAX + 80];
	snprintf(blobs, sizeof(blobs), "%s/blobs/sha256", dir);
	snprintf(path, sizeof(path), "%s/blobs", dir);
	if (mkdir(path, 0755) < 0 || mkdir(blobs, 0755) < 0)
		return cli_err("cannot make '%s': %s", blobs, strerror(errno)), -1;
	snprintf(path, sizeof(path), "%s/layer.tmp", blobs);
	struct layer l = { .fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
			   .c = EVP_MD_CTX_new() };
	if (l.fd < 0)
		return cli_err("cannot write '%s': %s", path, strerror(errno)), -1;
	EVP_DigestInit_ex(l.c, EVP_sha256(), NULL);
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, b->sbx);
	apath_add(&p, "/files/archive");
	apath_query(&p, "path", "/");
	apath_query(&p, "one_file_system", "true");
	long long t0 = clock_ms();
	int r = api_download(b->a, &p, layer_sink, &l);
	close(l.fd);
	unsigned char h[32];
	char lhex[65], ldigest[80], to[PATH_MAX + 80];
	EVP_DigestFinal_ex(l.c, h, NULL);
	EVP_MD_CTX_free(l.c);
	if (r < 0)
		return cli_api_fail(b->a), -1;
	hex(h, 32, lhex);
	snprintf(ldigest, sizeof(ldigest), "sha256:%s", lhex);
	snprintf(to, sizeof(to), "%s/%s", blobs, lhex);
	if (rename(path, to) < 0)
		return cli_err("cannot rename '%s': %s", path, strerror(errno)), -1;
	fprintf(stderr, "#  exported the root: %llu MB in %.1f s\n", l.size >> 20,
		(double)(clock_ms() - t0) / 1000);
	json_t *envs = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(b->env, k, v) {
		char kv[8448];
		snprintf(kv, sizeof(kv), "%s=%s", k, json_string_value(v));
		json_array_append_new(envs, json_string(kv));
	}
	char keyhex[65];
	hex(b->key, 32, keyhex);
	json_object_set_new(b->labels, "cpuos.build.key", json_string(keyhex));
	json_t *cfg = json_pack("{s:s,s:s,s:{s:o,s:s,s:s,s:O,s:O,s:O},s:{s:s,s:[s]}}", "architecture",
				"amd64", "os", "linux", "config", "Env", envs, "WorkingDir", b->workdir,
				"User", b->user_given ? b->user : "", "Cmd", b->cmd ? b->cmd : json_null(), "Entrypoint",
				b->entrypoint ? b->entrypoint : json_null(), "Labels", b->labels,
				"rootfs", "type", "layers", "diff_ids", ldigest);
	char *text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	char cdigest[80], mdigest[80];
	size_t csize, msize;
	r = text ? write_blob(blobs, text, cdigest, &csize) : -1;
	free(text);
	json_t *man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:[{s:s,s:s,s:I}]}", "schemaVersion", 2,
				"mediaType", "application/vnd.oci.image.manifest.v1+json", "config",
				"mediaType", "application/vnd.oci.image.config.v1+json", "digest",
				cdigest, "size", (json_int_t)csize, "layers", "mediaType",
				"application/vnd.oci.image.layer.v1.tar", "digest", ldigest, "size",
				(json_int_t)l.size);
	text = r == 0 ? json_dumps(man, JSON_COMPACT) : NULL;
	json_decref(man);
	r = text ? write_blob(blobs, text, mdigest, &msize) : -1;
	free(text);
	if (r < 0)
		return cli_err("cannot write the image's blobs in '%s'", blobs), -1;
	json_t *index = json_pack("{s:i,s:[{s:s,s:s,s:I,s:{s:s,s:s}}]}", "schemaVersion", 2,
				  "manifests", "mediaType", "application/vnd.oci.image.manifest.v1+json",
				  "digest", mdigest, "size", (json_int_t)msize, "platform", "os",
				  "linux", "architecture", "amd64");
	snprintf(path, sizeof(path), "%s/index.json", dir);
	r = json_dump_file(index, path, JSON_COMPACT);
	json_decref(index);
	snprintf(path, sizeof(path), "%s/oci-layout", dir);
	FILE *f = fopen(path, "w");
	if (r < 0 || !f || fputs("{\"imageLayoutVersion\":\"1.0.0\"}", f) < 0 || fclose(f) != 0)
		return cli_err("cannot write the image layout in '%s'", dir), -1;
	return 0;
}

/* The layout at dir as template b->name: the old one of that name
 * deleted first (refused while a sandbox has it). */
static int upload(struct build *b, const char *dir, const struct tpl_start *st)
{
	struct apath p;
	apath_init(&p, "/v1/templates");
	apath_seg(&p, b->name);
	json_t *old = NULL;
	if (api_json(b->a, "GET", &p, NULL, &old) == 0 && !json_is_true(json_object_get(old, "public")) &&
	    api_json(b->a, "DELETE", &p, NULL, NULL) < 0) {
		json_decref(old);
		return cli_api_fail(b->a), -1;
	}
	json_decref(old);
	apath_init(&p, "/v1/templates");
	apath_query(&p, "name", b->name);
	apath_query(&p, "wait", "true");
	char port[16];
	if (st->cmd)
		apath_query(&p, "start_cmd", st->cmd);
	else if (st->image)
		apath_query(&p, "start_image", "true");
	if (st->ready_port) {
		snprintf(port, sizeof(port), "%u", st->ready_port);
		apath_query(&p, "ready_port", port);
	} else if (st->ready_cmd) {
		apath_query(&p, "ready_cmd", st->ready_cmd);
	}
	int fd;
	pid_t pid = tar_of(dir, ".", NULL, NULL, &fd);
	if (pid < 0)
		return -1;
	json_t *resp = NULL;
	int r = api_upload(b->a, "POST", &p, fd, &resp);
	close(fd);
	cli_tar_end(pid);
	if (r < 0)
		return cli_api_fail(b->a), -1;
	fprintf(stderr, "#  template %s: %s, %lld MB\n", b->name,
		json_string_value(json_object_get(resp, "id")) ?: "?",
		(long long)json_integer_value(json_object_get(resp, "size_bytes")) >> 20);
	json_decref(resp);
	return 0;
}

/* Whether template name is the one a build of key made. */
static int up_to_date(struct build *b)
{
	struct apath p;
	apath_init(&p, "/v1/templates");
	apath_seg(&p, b->name);
	json_t *t = NULL;
	char keyhex[65];
	hex(b->key, 32, keyhex);
	int same = api_json(b->a, "GET", &p, NULL, &t) == 0 &&
		   !strcmp(json_string_value(json_object_get(t, "state")) ?: "", "ready") &&
		   !strcmp(json_string_value(json_object_get(json_object_get(
				   json_object_get(t, "image"), "labels"), "cpuos.build.key")) ?: "",
			   keyhex);
	json_decref(t);
	return same;
}

/* The template FROM names, as GET /v1/templates shows it: by its name or
 * id, or the account's pulled from that reference; NULL when there is
 * none yet (a reference the first sandbox pulls). */
static json_t *find_base(struct build *b)
{
	struct apath p;
	apath_init(&p, "/v1/templates");
	apath_seg(&p, b->from);
	json_t *t = NULL, *list = NULL, *found = NULL;
	if (api_json(b->a, "GET", &p, NULL, &t) == 0)
		return t;
	apath_init(&p, "/v1/templates");
	if (api_json(b->a, "GET", &p, NULL, &list) == 0) {
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(list, "templates"), i, v) {
			if (!found && !strcmp(json_string_value(json_object_get(v, "source")) ?: "", b->from) &&
			    json_is_true(json_object_get(v, "ready")))
				found = json_incref(v);
		}
	}
	json_decref(list);
	return found;
}

/* ---- the steps ---- */

/* The state an instruction sets, and its part of the key; 1 if it changes
 * files (a step to run), 0 if not, -1 on an error said. */
static int plan(struct build *b, int i, char *exp, size_t en)
{
	struct df_instr *in = &b->steps[i];
	if (strcmp(in->kw, "RUN") && df_expand(b->env, b->args, in->args, exp, en) < 0)
		return cli_err("Dockerfile line %d: an expansion too long", in->line), -1;
	if (!strcmp(in->kw, "RUN")) { /* its shell expands */
		if (strlen(in->args) >= en)
			return cli_err("Dockerfile line %d: RUN over %zu bytes", in->line, en - 1), -1;
		memcpy(exp, in->args, strlen(in->args) + 1);
	}
	char what[16 + 16384];
	snprintf(what, sizeof(what), "%s %s", in->kw, exp);
	if (!strcmp(in->kw, "ARG")) {
		char k[256];
		const char *eq = strchr(exp, '=');
		snprintf(k, sizeof(k), "%.*s", (int)(eq ? eq - exp : (long)strlen(exp)), exp);
		json_t *given = json_object_get(b->build_args, k);
		json_object_set_new(b->args, k, json_string(given ? json_string_value(given)
							      : eq ? eq + 1 : ""));
		snprintf(what, sizeof(what), "ARG %s=%s", k, json_string_value(json_object_get(b->args, k)));
	} else if (!strcmp(in->kw, "ENV") || !strcmp(in->kw, "LABEL")) {
		if (df_pairs(exp, !strcmp(in->kw, "ENV") ? b->env : b->labels) < 0)
			return cli_err("Dockerfile line %d: %s needs KEY=VALUE", in->line, in->kw), -1;
	} else if (!strcmp(in->kw, "WORKDIR")) {
		if (exp[0] == '/')
			snprintf(b->workdir, sizeof(b->workdir), "%s", exp);
		else {
			char w[sizeof(b->workdir) + 16384];
			snprintf(w, sizeof(w), "%s/%s", strcmp(b->workdir, "/") ? b->workdir : "", exp);
			if (strlen(w) >= sizeof(b->workdir))
				return cli_err("Dockerfile line %d: WORKDIR too long", in->line), -1;
			memcpy(b->workdir, w, strlen(w) + 1);
		}
		chain(b->key, what, NULL, 0);
		return 1;
	} else if (!strcmp(in->kw, "USER")) {
		snprintf(b->user, sizeof(b->user), "%s", exp);
		b->user_given = 1;
	} else if (!strcmp(in->kw, "CMD") || !strcmp(in->kw, "ENTRYPOINT")) {
		json_t **to = !strcmp(in->kw, "CMD") ? &b->cmd : &b->entrypoint;
		json_decref(*to);
		*to = df_argv(exp);
	} else if (!strcmp(in->kw, "EXPOSE")) {
		if (!b->expose)
			b->expose = (unsigned)strtoul(exp, NULL, 10);
	} else if (!strcmp(in->kw, "HEALTHCHECK")) {
		const char *c = strstr(exp, "CMD ");
		if (c && c[4] != '[')
			snprintf(b->health, sizeof(b->health), "%s", c + 4);
		else if (strcmp(exp, "NONE"))
			return cli_err("Dockerfile line %d: HEALTHCHECK takes CMD and a shell command", in->line), -1;
	} else if (!strcmp(in->kw, "RUN") || !strcmp(in->kw, "COPY") || !strcmp(in->kw, "ADD")) {
		if (!strcmp(in->kw, "RUN")) {
			/* what it runs with is part of what it is */
			char *e = json_dumps(b->env, JSON_COMPACT | JSON_SORT_KEYS),
			     *a = json_dumps(b->args, JSON_COMPACT | JSON_SORT_KEYS);
			char ctx[8192];
			snprintf(ctx, sizeof(ctx), "%s|%s|%s|%s", e ? e : "", a ? a : "", b->user,
				 b->workdir);
			free(e);
			free(a);
			chain(b->key, what, ctx, strlen(ctx));
		}
		return 1; /* COPY's key is its bytes: copy_plan */
	} else if (!strcmp(in->kw, "MAINTAINER") || !strcmp(in->kw, "STOPSIGNAL")) {
		/* kept by no template */
	} else {
		return cli_err("Dockerfile line %d: %s is not supported (FROM, RUN, COPY, ADD, ENV, ARG, "
			       "WORKDIR, USER, CMD, ENTRYPOINT, EXPOSE, LABEL, HEALTHCHECK)",
			       in->line, in->kw), -1;
	}
	chain(b->key, what, NULL, 0);
	return 0;
}

/* What a step runs with: the state when it came. */
struct at {
	char cwd[4096], user[256];
	json_t *env; /* ENV over ARG */
};

static int do_step(struct build *b, int i, const char *exp, const struct at *at)
{
	struct df_instr *in = &b->steps[i];
	if (!strcmp(in->kw, "WORKDIR")) {
		json_t *argv = json_pack("[sss]", "mkdir", "-p", at->cwd);
		int r = run(b, argv, "/", "root", NULL);
		json_decref(argv);
		return r == 0 ? 0 : (cli_err("WORKDIR %s: mkdir exited %d", at->cwd, r), -1);
	}
	if (!strcmp(in->kw, "RUN")) {
		json_t *argv = df_argv(exp);
		int r = run(b, argv, at->cwd, at->user, at->env);
		json_decref(argv);
		if (r != 0)
			cli_err("Dockerfile line %d: RUN exited %d", in->line, r);
		return r == 0 ? 0 : -1;
	}
	return 0;
}

int tpl_dockerbuild(struct cli *c, const char *name, const char *dockerfile, const char *context,
		    json_t *build_args, const struct tpl_start *start_in, int no_cache)
{
	struct build *b = calloc(1, sizeof(*b));
	char *text = NULL, layout[PATH_MAX - 64], ctxdir[PATH_MAX - 64] = "";
	int ret = EXIT_API, made_layout = 0;
	if (!b)
		return cli_err("out of memory"), EXIT_API;
	/* A context that is an archive ("-": stdin, as the daemon's builds
	 * give theirs) is unpacked first; -f names a file in it then. */
	struct stat cst;
	if (!strcmp(context, "-") || (stat(context, &cst) == 0 && S_ISREG(cst.st_mode))) {
		if (bctx_unpack_context(context, ctxdir, sizeof(ctxdir)) < 0) {
			free(b);
			return EXIT_USAGE;
		}
		context = ctxdir;
	}
	b->name = name;
	b->context = context;
	b->build_args = build_args;
	b->disk_mb = 8192;
	b->env = json_object();
	b->args = json_object();
	b->labels = json_object();
	snprintf(b->workdir, sizeof(b->workdir), "/");
	snprintf(b->user, sizeof(b->user), "root");
	FILE *f = ctxdir[0] ? bctx_open(ctxdir, dockerfile) : fopen(dockerfile, "r");
	if (!f) {
		cli_err("cannot read '%s': %s", dockerfile, strerror(errno));
		ret = EXIT_USAGE;
		goto out;
	}
	text = calloc(1, MAX_DOCKERFILE + 1);
	size_t n = text ? fread(text, 1, MAX_DOCKERFILE + 1, f) : 0;
	fclose(f);
	if (!text || n > MAX_DOCKERFILE) {
		cli_err("'%s' is over 1 MB", dockerfile);
		ret = EXIT_USAGE;
		goto out;
	}
	text[n] = '\0';
	if (df_parse(text, b->steps, MAX_STEPS, &b->nsteps) < 0) {
		ret = EXIT_USAGE;
		goto out;
	}
	/* ARGs before FROM, then FROM: the template (a name, an id, an image
	 * reference) the first step starts from. */
	int i = 0;
	char exp[16384];
	for (; i < b->nsteps && !strcmp(b->steps[i].kw, "ARG"); i++)
		if (plan(b, i, exp, sizeof(exp)) < 0)
			goto out;
	if (i == b->nsteps || strcmp(b->steps[i].kw, "FROM")) {
		cli_err("the Dockerfile must begin with FROM");
		ret = EXIT_USAGE;
		goto out;
	}
	if (df_expand(b->env, b->args, b->steps[i].args, exp, sizeof(exp)) < 0)
		goto out;
	exp[strcspn(exp, " \t")] = '\0'; /* "AS stage" */
	if (strlen(exp) >= sizeof(b->from)) {
		cli_err("FROM: '%.64s...' is too long", exp);
		goto out;
	}
	memcpy(b->from, exp, strlen(exp) + 1);
	for (int k = i + 1; k < b->nsteps; k++)
		if (!strcmp(b->steps[k].kw, "FROM")) {
			cli_err("Dockerfile line %d: one stage only (a second FROM)", b->steps[k].line);
			ret = EXIT_USAGE;
			goto out;
		}
	if (!(b->a = cli_api(c)))
		goto out;
	api_set_timeout(b->a, 0);
	/* The base's own config, which the new image extends, and what it
	 * is (its id, digest and size: a base made again is another base). */
	json_t *base = find_base(b);
	char what[1024] = "";
	if (base) {
		json_t *img = json_object_get(base, "image");
		snprintf(what, sizeof(what), "%s %s %lld %lld",
			 json_string_value(json_object_get(base, "id")) ?: "",
			 json_string_value(json_object_get(img, "digest")) ?: "",
			 (long long)json_integer_value(json_object_get(base, "size_bytes")),
			 (long long)json_integer_value(json_object_get(base, "created_ms")));
		const char *u = json_string_value(json_object_get(img, "user"));
		if (u && *u) {
			snprintf(b->user, sizeof(b->user), "%s", u);
			b->user_given = 1;
		}
		size_t k;
		json_t *v;
		json_array_foreach(json_object_get(img, "env"), k, v) {
			const char *kv = json_string_value(v), *eq = kv ? strchr(kv, '=') : NULL;
			if (eq) {
				char key[256];
				snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
				json_object_set_new(b->env, key, json_string(eq + 1));
			}
		}
		const char *w = json_string_value(json_object_get(img, "workdir"));
		if (w && *w)
			snprintf(b->workdir, sizeof(b->workdir), "%s", w);
		if (json_is_array(json_object_get(img, "cmd")))
			b->cmd = json_deep_copy(json_object_get(img, "cmd"));
		if (json_is_array(json_object_get(img, "entrypoint")))
			b->entrypoint = json_deep_copy(json_object_get(img, "entrypoint"));
	}
	json_decref(base);
	chain(b->key, "FROM", b->from, strlen(b->from));
	chain(b->key, "BASE", what, strlen(what));
	/* Plan every step (the keys), then start from the last one cached. */
	struct step {
		int fs;
		struct at at;
		char key[32 + 2 * KEY_HEX];
		struct src *srcs;
		int nsrc;
		char dest[PATH_MAX], owner[64], exp[16384];
	} *steps = calloc((size_t)b->nsteps, sizeof(*steps));
	if (!steps)
		goto out;
	int last_cached = -1;
	for (int k = i + 1; k < b->nsteps; k++) {
		struct step *s = &steps[k];
		int fs = plan(b, k, s->exp, sizeof(s->exp));
		if (fs < 0) {
			ret = EXIT_USAGE;
			goto out_steps;
		}
		if (fs && (!strcmp(b->steps[k].kw, "COPY") || !strcmp(b->steps[k].kw, "ADD")) &&
		    copy_plan(b, b->steps[k].args, &s->srcs, &s->nsrc, s->dest, sizeof(s->dest),
			      s->owner, sizeof(s->owner)) < 0) {
			ret = EXIT_USAGE;
			goto out_steps;
		}
		s->fs = fs;
		snprintf(s->at.cwd, sizeof(s->at.cwd), "%s", b->workdir);
		snprintf(s->at.user, sizeof(s->at.user), "%s", b->user);
		s->at.env = json_deep_copy(b->args);
		json_object_update(s->at.env, b->env);
		char kh[2 * KEY_HEX + 1];
		hex(b->key, KEY_HEX, kh);
		snprintf(s->key, sizeof(s->key), "build-%s", kh);
		if (fs && !no_cache && checkpoint_exists(b, s->key))
			last_cached = k;
	}
	struct tpl_start st = *start_in;
	if (!st.cmd && !st.image && (b->cmd || b->entrypoint) && (st.ready_port || st.ready_cmd ||
								  b->expose || b->health[0]))
		st.image = 1; /* CMD is the server every sandbox runs */
	if (st.image && !st.ready_port && !st.ready_cmd) {
		if (b->health[0])
			st.ready_cmd = b->health;
		else
			st.ready_port = b->expose;
	}
	if (!no_cache && up_to_date(b)) {
		fprintf(stderr, "#  template %s is up to date (every step cached)\n", name);
		ret = 0;
		goto out_steps;
	}
	long long t0 = clock_ms();
	fprintf(stderr, "#  FROM %s\n", last_cached >= 0 ? steps[last_cached].key : b->from);
	if (start(b, last_cached >= 0 ? steps[last_cached].key : NULL) < 0)
		goto out_steps;
	int total = b->nsteps - i - 1;
	for (int k = i + 1; k < b->nsteps; k++) {
		struct step *s = &steps[k];
		struct df_instr *in = &b->steps[k];
		int cached = k <= last_cached;
		fprintf(stderr, "#%d/%d %s %.200s%s\n", k - i, total, in->kw, in->args,
			cached ? (s->fs ? "  CACHED" : "") : "");
		if (cached || !s->fs)
			continue;
		long long s0 = clock_ms();
		int r = !strcmp(in->kw, "COPY") || !strcmp(in->kw, "ADD")
				? copy_do(b, s->srcs, s->nsrc, s->dest, s->owner, !strcmp(in->kw, "ADD"))
				: do_step(b, k, s->exp, &s->at);
		if (r < 0)
			goto out_steps;
		if (save(b, s->key) < 0)
			goto out_steps;
		fprintf(stderr, "#  done in %.1f s\n", (double)(clock_ms() - s0) / 1000);
	}
	if (bctx_temp_dir("build", layout, sizeof(layout)) < 0)
		goto out_steps;
	made_layout = 1;
	if (export(b, layout) < 0 || upload(b, layout, &st) < 0)
		goto out_steps;
	fprintf(stderr, "#  built %s in %.1f s\n", name, (double)(clock_ms() - t0) / 1000);
	ret = 0;
out_steps:
	for (int k = 0; k < b->nsteps; k++) {
		free(steps[k].srcs);
		json_decref(steps[k].at.env);
	}
	free(steps);
out:
	if (b->a)
		stop(b);
	if (made_layout)
		bctx_remove_dir(layout);
	if (ctxdir[0])
		bctx_remove_dir(ctxdir);
	for (int k = 0; k < b->nsteps; k++)
		free(b->steps[k].args);
	json_decref(b->env);
	json_decref(b->args);
	json_decref(b->labels);
	json_decref(b->cmd);
	json_decref(b->entrypoint);
	free(text);
	free(b);
	return ret;
}
