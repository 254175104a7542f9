/*
 * sbx_tpl: templates an account makes through the API from an image (an
 * uploaded archive, or a reference pulled from a registry), and the
 * template a create names, resolved.
 *
 * A build runs apart from the request that asked for it (sbx_tpl_create
 * says "building"; GET /v1/templates/{name} follows it), in three steps:
 * the pull, here, through the host's network into a layout in the state
 * directory's images/; the import, by the root helper (priv_import: the
 * image's files keep their owners, so it needs root) in namespaces of its
 * own, into the state directory's templates/ as ID.erofs and ID.json; then
 * the start command written into ID.json, and the size counted against the
 * account's quota. A sandbox of it records the id (SBX_TPL_PREFIX...) as
 * its template; that is how sbx__template_file finds its files, and how a
 * create from another account is refused: ids are checked against their
 * owner here, before anything starts.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "common/log.h"
#include "image/image.h"
#include "priv/priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_STEP_MS 200
#define BUILD_WAIT_S 1800 /* the import's own limit (image.h) */
#define MAX_BUILDS 2      /* an account's builds at once */

struct build {
	struct sbx_mgr *m;
	struct store_tpl t;
	int srcfd;                 /* an upload's archive, or -1: pull t.source */
	char *username, *password; /* the registry's, or NULL */
	char *start_cmd, *ready_cmd;
	int start_image;
	unsigned ready_port;
};

static void build_free(struct build *b)
{
	if (b->srcfd >= 0)
		close(b->srcfd);
	if (b->password)
		explicit_bzero(b->password, strlen(b->password));
	free(b->username);
	free(b->password);
	free(b->start_cmd);
	free(b->ready_cmd);
	free(b);
}

int sbx_tpl_name_ok(const char *n)
{
	size_t len = strlen(n);
	if (!len || len > 63 || !((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9')) ||
	    !strncmp(n, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)))
		return 0;
	return strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

/* A template the host's administrator published (guest/templates/). */
static int published(const struct sbx_mgr *m, const char *name)
{
	char path[600];
	if (!name[0] || strchr(name, '/') || name[0] == '.' ||
	    !strncmp(name, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)))
		return 0;
	snprintf(path, sizeof(path), "%s/templates/%s.erofs", m->cfg.guest_dir, name);
	return access(path, R_OK) == 0;
}

/* The registry of a reference: its first component when that names a
 * host (a dot, a port or localhost), else Docker Hub's. */
static void registry_of(const char *ref, char *out, size_t n)
{
	const char *slash = strchr(ref, '/');
	size_t len = slash ? (size_t)(slash - ref) : 0;
	if (len && (memchr(ref, '.', len) || memchr(ref, ':', len) ||
		    (len == 9 && !strncmp(ref, "localhost", 9))))
		snprintf(out, n, "%.*s", (int)len, ref);
	else
		snprintf(out, n, "registry-1.docker.io");
}

/* Whether the administrator let ref's registry speak plain HTTP
 * (--insecure-registry: a comma-separated list of host[:port]). */
static int insecure(const struct sbx_mgr *m, const char *ref)
{
	const char *l = m->cfg.insecure_registries;
	char host[256];
	registry_of(ref, host, sizeof(host));
	size_t hl = strlen(host);
	while (l && *l) {
		size_t n = strcspn(l, ",");
		if (n == hl && !strncmp(l, host, n))
			return 1;
		l += n + (l[n] == ',');
	}
	return 0;
}

static void tpl_path(const struct sbx_mgr *m, const char *id, const char *ext, char *out, size_t n)
{
	snprintf(out, n, "%s/templates/%s.%s", m->cfg.state_dir, id, ext);
}

static void remove_files(const struct sbx_mgr *m, const char *id)
{
	char path[600];
	tpl_path(m, id, "erofs", path, sizeof(path));
	unlink(path);
	tpl_path(m, id, "json", path, sizeof(path));
	unlink(path);
}

/* The import of what srcfd holds, by the helper (or here, as root). */
static int import(struct sbx_mgr *m, int srcfd, const char *id, char *err, size_t errlen)
{
	int rfd = -1, r;
	if (m->cfg.importer) {
		r = priv_import(m->cfg.importer, srcfd, id, m->cfg.image_max_bytes, &rfd, err, errlen);
	} else if (geteuid() == 0) {
		char dir[600];
		snprintf(dir, sizeof(dir), "%s/templates", m->cfg.state_dir);
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct image_limits lim = { .max_bytes = m->cfg.image_max_bytes };
		r = dfd < 0 ? errbuf_set(err, errlen, -errno, "cannot open '%s': %s", dir, strerror(errno))
			    : image_import_start(srcfd, dfd, id, &lim, &rfd, err, errlen);
		if (dfd >= 0)
			close(dfd);
	} else {
		return errbuf_set(err, errlen, -EPERM, "importing images needs cpuosd started as root");
	}
	/* Its end, or the daemon's: an import left running ends by itself,
	 * and the next daemon sweeps what it made (sbx__tpl_start). */
	while (r == 0) {
		struct pollfd pf = { .fd = rfd, .events = POLLIN };
		int n = poll(&pf, 1, 1000);
		if (n > 0) {
			r = image_import_result(rfd, err, errlen);
			break;
		}
		if (n < 0 && errno != EINTR)
			r = errbuf_set(err, errlen, -errno, "cannot wait for the import: %s", strerror(errno));
		else if (__atomic_load_n(&m->quit, __ATOMIC_RELAXED))
			r = errbuf_set(err, errlen, -ECANCELED, "the daemon stopped during the import");
	}
	if (rfd >= 0)
		close(rfd);
	return r;
}

/* The start command and ready check into the description it made. */
static int add_start(const struct build *b, char *err, size_t errlen)
{
	if (!b->start_cmd && !b->start_image)
		return 0;
	char path[600], tmp[640];
	tpl_path(b->m, b->t.id, "json", path, sizeof(path));
	json_t *d = json_load_file(path, 0, NULL);
	int r = !json_is_object(d) ? errbuf_set(err, errlen, -EIO, "cannot read '%s'", path)
		: image_set_start(d, b->start_cmd, b->start_image, b->ready_port, b->ready_cmd, err,
				  errlen);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (r == 0 && (json_dump_file(d, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) < 0 ||
		       chmod(tmp, 0644) < 0 || rename(tmp, path) < 0)) {
		r = errbuf_set(err, errlen, -EIO, "cannot write '%s'", path);
		unlink(tmp);
	}
	json_decref(d);
	return r;
}

static int build_run(struct build *b, long long *size, char *err, size_t errlen)
{
	struct sbx_mgr *m = b->m;
	char layout[600] = "";
	int srcfd = b->srcfd, r = 0;
	double t0 = clock_ms_f();
	if (srcfd < 0) {
		snprintf(layout, sizeof(layout), "%s/images/%s", m->cfg.state_dir, b->t.id);
		int admins = insecure(m, b->t.source);
		struct image_pull_opts o = { .insecure = admins, .public_only = !admins, .cancel = &m->quit,
					     .username = b->username, .password = b->password,
					     .max_bytes = m->cfg.image_max_bytes };
		r = image_pull(b->t.source, layout, &o, err, errlen);
		if (r == 0 && (srcfd = open(layout, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
			r = errbuf_set(err, errlen, -errno, "cannot open '%s': %s", layout, strerror(errno));
		if (r == 0)
			log_info("template %s (%s): pulled %s in %.0f ms", b->t.name, b->t.id,
				 b->t.source, clock_ms_f() - t0);
	}
	if (r == 0)
		r = import(m, srcfd, b->t.id, err, errlen);
	if (srcfd >= 0 && srcfd != b->srcfd)
		close(srcfd);
	if (layout[0])
		image_remove_tree(AT_FDCWD, layout);
	if (r == 0)
		r = add_start(b, err, errlen);
	char path[600];
	struct stat st;
	tpl_path(m, b->t.id, "erofs", path, sizeof(path));
	if (r == 0 && stat(path, &st) < 0)
		r = errbuf_set(err, errlen, -EIO, "the import left no image");
	long long used = 0;
	if (r == 0 && m->cfg.template_quota_bytes && store_tpl_usage(m->store, b->t.account, &used) == 0 &&
	    (unsigned long long)(used + st.st_size) > m->cfg.template_quota_bytes)
		r = errbuf_set(err, errlen, -EDQUOT,
			       "the image makes %lld MB, and the account's templates would hold "
			       "%lld MB, over its quota of %llu MB", (long long)st.st_size >> 20,
			       (used + st.st_size) >> 20, m->cfg.template_quota_bytes >> 20);
	if (r < 0) {
		remove_files(m, b->t.id);
		return r;
	}
	*size = st.st_size;
	log_info("template %s (%s) for '%s': built in %.0f ms, %lld MB", b->t.name, b->t.id,
		 b->t.account, clock_ms_f() - t0, (long long)st.st_size >> 20);
	return 0;
}

/* A build to its end, its row finished. */
static int build_finish(struct build *b, char *err, size_t errlen)
{
	long long size = 0;
	int r = build_run(b, &size, err, errlen);
	if (r < 0)
		log_warn("template %s (%s) for '%s' failed: %s", b->t.name, b->t.id, b->t.account, err);
	if (store_tpl_finish(b->m->store, b->t.id, r < 0 ? "failed" : "ready", r < 0 ? err : "",
			     size) < 0 && r == 0) {
		/* deleted while it was built */
		remove_files(b->m, b->t.id);
		r = errbuf_set(err, errlen, -ENOENT, "template '%s' was deleted", b->t.name);
	}
	return r;
}

static void *build_main(void *arg)
{
	struct build *b = arg;
	char err[700];
	log_set_tag("template");
	build_finish(b, err, sizeof(err));
	pthread_mutex_lock(&b->m->mu);
	b->m->tpl_builds--;
	pthread_cond_broadcast(&b->m->killers_cv);
	pthread_mutex_unlock(&b->m->mu);
	build_free(b);
	return NULL;
}

int sbx_tpl_create(struct sbx_mgr *m, const char *account, const struct sbx_tpl_req *q, int wait,
		   struct store_tpl *out, char *err, size_t errlen)
{
	int srcfd = q->archive_fd;
	int r = 0;
	if (!sbx_tpl_name_ok(q->name))
		r = errbuf_set(err, errlen, -EINVAL,
			       "invalid template name '%.80s': lower-case letters, digits, '.', '_' "
			       "and '-', at most 63, not beginning with '" SBX_TPL_PREFIX "'",
			       q->name);
	else if (published(m, q->name))
		r = errbuf_set(err, errlen, -EEXIST, "'%s' is a published template's name", q->name);
	else if ((srcfd < 0) == !q->image)
		r = errbuf_set(err, errlen, -EINVAL, "give an image reference or an archive, one of them");
	else if (q->image && (!*q->image || strlen(q->image) >= sizeof(out->source) ||
			      !strcmp(q->image, "upload")))
		r = errbuf_set(err, errlen, -EINVAL, "invalid image reference");
	else if ((q->ready_port || q->ready_cmd) && !q->start_cmd && !q->start_image)
		r = errbuf_set(err, errlen, -EINVAL, "a ready check needs a start command");
	else if (m->cfg.images_off || (!m->cfg.importer && geteuid() != 0))
		r = errbuf_set(err, errlen, -EPERM, "importing images needs cpuosd started as root");
	else if (store_tpl_building(m->store, account) >= MAX_BUILDS)
		r = errbuf_set(err, errlen, -EAGAIN, "the account has %d templates being built: "
			       "try again when one ended", MAX_BUILDS);
	long long used = 0;
	if (r == 0 && m->cfg.template_quota_bytes && store_tpl_usage(m->store, account, &used) == 0 &&
	    (unsigned long long)used >= m->cfg.template_quota_bytes)
		r = errbuf_set(err, errlen, -EDQUOT, "the account's templates hold %lld MB, its quota",
			       used >> 20);
	struct build *b = r == 0 ? calloc(1, sizeof(*b)) : NULL;
	if (r == 0 && !b)
		r = errbuf_set(err, errlen, -ENOMEM, "out of memory");
	if (r < 0) {
		if (srcfd >= 0)
			close(srcfd);
		return r;
	}
	*b = (struct build){ .m = m, .srcfd = srcfd, .start_image = q->start_image,
			     .ready_port = q->ready_port };
	b->username = q->username ? strdup(q->username) : NULL;
	b->password = q->password ? strdup(q->password) : NULL;
	b->start_cmd = q->start_cmd ? strdup(q->start_cmd) : NULL;
	b->ready_cmd = q->ready_cmd ? strdup(q->ready_cmd) : NULL;
	struct store_tpl *t = &b->t;
	sbx__random_id(t->id, sizeof(t->id), SBX_TPL_PREFIX);
	snprintf(t->account, sizeof(t->account), "%s", account);
	snprintf(t->name, sizeof(t->name), "%s", q->name);
	snprintf(t->source, sizeof(t->source), "%s", q->image ? q->image : "upload");
	snprintf(t->state, sizeof(t->state), "building");
	t->created_ms = (long long)time(NULL) * 1000;
	r = store_tpl_insert(m->store, t);
	if (r < 0) {
		errbuf_set(err, errlen, r, r == -EEXIST ? "template '%s' exists" : "cannot record '%s'",
			   q->name);
		build_free(b);
		return r;
	}
	*out = *t;
	if (wait) {
		r = build_finish(b, err, errlen);
		store_tpl_get(m->store, t->id, out); /* as it ended */
		build_free(b);
		return r;
	}
	pthread_t th;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&m->mu);
	m->tpl_builds++;
	pthread_mutex_unlock(&m->mu);
	if (pthread_create(&th, &a, build_main, b) != 0) {
		pthread_mutex_lock(&m->mu);
		m->tpl_builds--;
		pthread_mutex_unlock(&m->mu);
		store_tpl_finish(m->store, t->id, "failed", "no thread for the build", 0);
		build_free(b);
		pthread_attr_destroy(&a);
		return errbuf_set(err, errlen, -EAGAIN, "no thread for the build");
	}
	pthread_attr_destroy(&a);
	return 0;
}

/* The account's template by name or id: 0 with *t, or -ENOENT. */
static int find(struct sbx_mgr *m, const char *account, const char *name, struct store_tpl *t)
{
	if (!strncmp(name, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)))
		return store_tpl_get(m->store, name, t) == 0 && !strcmp(t->account, account) ? 0 : -ENOENT;
	return store_tpl_by_name(m->store, account, name, t) == 0 ? 0 : -ENOENT;
}

int sbx_tpl_get(struct sbx_mgr *m, const char *account, const char *name, struct store_tpl *out)
{
	return find(m, account, name, out);
}

int sbx_tpl_delete(struct sbx_mgr *m, const char *account, const char *name, char *err,
		   size_t errlen)
{
	struct store_tpl t;
	if (find(m, account, name, &t) < 0)
		return errbuf_set(err, errlen, -ENOENT, "no template '%.80s'", name);
	if (!strcmp(t.state, "building"))
		return errbuf_set(err, errlen, -EBUSY, "template '%s' is still being built", t.name);
	int u = store_tpl_in_use(m->store, t.id);
	if (u != 0)
		return errbuf_set(err, errlen, u < 0 ? u : -EBUSY,
				  u < 0 ? "cannot tell whether '%s' is in use"
					: "template '%s' is in use by a sandbox or a checkpoint",
				  t.name);
	int r = store_tpl_delete(m->store, t.id);
	if (r < 0)
		return errbuf_set(err, errlen, r, "cannot delete '%s'", t.name);
	sbx__pool_forget(m, t.id);
	remove_files(m, t.id);
	log_info("template %s (%s) of '%s' deleted", t.name, t.id, account);
	return 0;
}

/* The state of build id once it is not "building": 0 with *t. */
static int wait_built(struct sbx_mgr *m, const char *id, struct store_tpl *t)
{
	for (long long waited = 0; waited < BUILD_WAIT_S * 1000LL; waited += WAIT_STEP_MS) {
		if (store_tpl_get(m->store, id, t) < 0)
			return -ENOENT;
		if (strcmp(t->state, "building"))
			return 0;
		struct timespec ts = { 0, WAIT_STEP_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

/* Whether a name a create gives looks like an image reference. */
static int is_ref(const char *s)
{
	return strpbrk(s, ":/@") && !strchr(s, ' ') && strlen(s) < 500;
}

/* The account's name for an image it pulls by reference on a create:
 * the reference in the letters names take, and a part of its hash when
 * that is taken by another image. */
static void name_of_ref(const char *ref, int salt, char *out, size_t n)
{
	char s[64];
	size_t j = 0;
	for (const char *p = ref; *p && j < 48; p++) {
		char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
		s[j++] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'
				 ? c : '-';
	}
	s[j] = '\0';
	while (j && s[0] != 0 && !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		memmove(s, s + 1, j--);
	if (!salt) {
		snprintf(out, n, "%s", j ? s : "image");
		return;
	}
	uint32_t h = 2166136261u;
	for (const char *p = ref; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	snprintf(out, n, "%s-%08x", j ? s : "image", h);
}

int sbx__tpl_resolve(struct sbx_mgr *m, const char *account, const char *template, char *id,
		     size_t idlen, char *err, size_t errlen)
{
	struct store_tpl t;
	int r = find(m, account, template, &t);
	if (r < 0 && published(m, template)) {
		snprintf(id, idlen, "%s", template);
		return 0;
	}
	if (r < 0 && is_ref(template) && !m->cfg.images_off) {
		/* An image by reference: the account's pull of it, or one now
		 * (again, if the last one failed). */
		r = store_tpl_by_source(m->store, account, template, &t);
		if (r == 0 && !strcmp(t.state, "failed"))
			r = -ENOENT;
		for (int salt = 0; r < 0 && salt < 2; salt++) {
			struct sbx_tpl_req q = { .archive_fd = -1, .image = template };
			char name[64];
			name_of_ref(template, salt, name, sizeof(name));
			q.name = name;
			r = sbx_tpl_create(m, account, &q, 1, &t, err, errlen);
			if (r == -EEXIST && store_tpl_by_source(m->store, account, template, &t) == 0)
				r = 0; /* another create pulls it: waited for below */
			else if (r < 0 && r != -EEXIST)
				return r == -ENOENT || r == -EACCES || r == -EDQUOT ? -EINVAL : r;
		}
	}
	if (r < 0) {
		snprintf(err, errlen, "unknown template '%.200s'", template);
		return -ENOENT;
	}
	if (!strcmp(t.state, "building") && wait_built(m, t.id, &t) < 0)
		return errbuf_set(err, errlen, -EIO, "template '%s' is still being built", t.name);
	if (strcmp(t.state, "ready"))
		return errbuf_set(err, errlen, -EINVAL, "template '%s' failed to build: %s", t.name,
				  t.error);
	snprintf(id, idlen, "%s", t.id);
	return 0;
}

/* What no ready template of this node's owns in templates/: a build the
 * last daemon left (its import ended after it, or its row failed). */
static void sweep(struct sbx_mgr *m, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char id[64];
		size_t n = strcspn(e->d_name, ".");
		if (strncmp(e->d_name, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)) || n >= sizeof(id) ||
		    strstr(e->d_name, ".work"))
			continue; /* a running import's work is its own (and it removes it) */
		snprintf(id, sizeof(id), "%.*s", (int)n, e->d_name);
		struct store_tpl t;
		if (store_tpl_get(m->store, id, &t) == 0 && !strcmp(t.state, "ready"))
			continue;
		unlinkat(dirfd(d), e->d_name, 0);
		log_info("template files %s removed: no template of this node's has them", e->d_name);
	}
	if (d)
		closedir(d);
}

void sbx__tpl_start(struct sbx_mgr *m)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/templates", m->cfg.state_dir);
	fs_mkdir_p(dir, 0755, (uid_t)-1, (gid_t)-1);
	chmod(dir, 0755);
	/* Builds the last daemon left: their pulls and imports are gone. */
	store_tpl_fail_building(m->store, "the daemon restarted during the build");
	sweep(m, dir);
	/* Pulls it left (the uploads were unnamed files, gone with it). */
	snprintf(dir, sizeof(dir), "%s/images", m->cfg.state_dir);
	image_remove_tree(AT_FDCWD, dir);
	fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1);
}

int sbx_tpl_file(struct sbx_mgr *m, const char *id, const char *ext, char *out, size_t n)
{
	if (strncmp(id, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)))
		return -EINVAL;
	return sbx__template_file(m, id, ext, out, n);
}

unsigned long long sbx_tpl_max_bytes(struct sbx_mgr *m)
{
	return m->cfg.image_max_bytes ? m->cfg.image_max_bytes : 4ULL << 30;
}

int sbx_tpl_upload_fd(struct sbx_mgr *m)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/images", m->cfg.state_dir);
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}
