/*
 * snap: manifests, checksums and copies of snapshot files. A manifest is
 * written last, to a temporary name and renamed, after every file it names
 * is fsync'ed: a snapshot with a manifest is complete, one without is
 * rubbish to remove. A pause lives in a run directory that its jailed QEMU
 * may write: no file there is opened through a symlink (O_NOFOLLOW), and
 * new ones are made with O_EXCL.
 */
#include "runner/snap.h"

#include "common/fs.h"
#include "runner/qemu.h"
#include "runner/qemu_build.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/fs.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const file_keys[SNAP_NFILES] = { "state", "mem", "disk", "pages", "base" };

static int sha256_fd(int fd, char out[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	static char buf[1 << 20];
	static pthread_mutex_t buf_mu = PTHREAD_MUTEX_INITIALIZER;
	int r = 0;
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -ENOMEM;
	}
	/* One buffer for all: checksums are rare and big reads want a big
	 * buffer, not a megabyte of stack per thread. */
	pthread_mutex_lock(&buf_mu);
	for (off_t off = 0;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		off += n;
	}
	pthread_mutex_unlock(&buf_mu);
	unsigned char md[32];
	unsigned len = 0;
	if (r == 0 && (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32))
		r = -EIO;
	EVP_MD_CTX_free(ctx);
	for (unsigned i = 0; r == 0 && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return r;
}

static int sha256_path(const char *path, char out[65], int nofollow)
{
	int fd = nofollow ? fs_open_file(path, O_RDONLY, 0) : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return nofollow ? fd : -errno;
	int r = sha256_fd(fd, out);
	close(fd);
	return r;
}

/* Checksums of the kernel and initramfs by (path, size, mtime): every
 * restore asks, and they change only when rebuilt. */
static struct {
	char path[512];
	long long size, mtime_ns;
	char sha[65];
} sums[8];
static pthread_mutex_t sums_mu = PTHREAD_MUTEX_INITIALIZER;

static int cached_sha(const char *path, char out[65])
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	pthread_mutex_lock(&sums_mu);
	for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++) {
		if (!strcmp(sums[i].path, path) && sums[i].size == st.st_size && sums[i].mtime_ns == mt) {
			memcpy(out, sums[i].sha, 65);
			pthread_mutex_unlock(&sums_mu);
			return 0;
		}
	}
	pthread_mutex_unlock(&sums_mu);
	int r = sha256_path(path, out, 0);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sums_mu);
	static size_t next;
	size_t i = next++ % (sizeof(sums) / sizeof(sums[0]));
	snprintf(sums[i].path, sizeof(sums[i].path), "%s", path);
	sums[i].size = st.st_size;
	sums[i].mtime_ns = mt;
	memcpy(sums[i].sha, out, 65);
	pthread_mutex_unlock(&sums_mu);
	return 0;
}

/* The host CPU as a VM saved with -cpu host sees it: the first
 * processor's vendor, family, model and a checksum of its flags. */
static void host_cpu(char *out, size_t n)
{
	char vendor[32] = "?", family[16] = "?", model[16] = "?", line[4096];
	unsigned char md[32];
	unsigned len = 0;
	int flags = 0;
	FILE *f = fopen("/proc/cpuinfo", "re");
	while (f && fgets(line, sizeof(line), f) && strcmp(line, "\n")) {
		char *v = strchr(line, ':');
		if (!v)
			continue;
		size_t k = strcspn(line, "\t:");
		v += 1 + (v[1] == ' ');
		v[strcspn(v, "\n")] = '\0';
		if (k == 9 && !strncmp(line, "vendor_id", k))
			snprintf(vendor, sizeof(vendor), "%s", v);
		else if (k == 10 && !strncmp(line, "cpu family", k))
			snprintf(family, sizeof(family), "%s", v);
		else if (k == 5 && !strncmp(line, "model", k))
			snprintf(model, sizeof(model), "%s", v);
		else if (k == 5 && !strncmp(line, "flags", k))
			flags = EVP_Digest(v, strlen(v), md, &len, EVP_sha256(), NULL) == 1 && len == 32;
	}
	if (f)
		fclose(f);
	char sum[17] = "?";
	for (unsigned i = 0; flags && i < 8; i++)
		snprintf(sum + 2 * i, 3, "%02x", md[i]);
	snprintf(out, n, "host %s %s/%s %s", vendor, family, model, sum);
}

static char host_cpu_id[96];

static void host_cpu_once(void)
{
	host_cpu(host_cpu_id, sizeof(host_cpu_id));
}

static void cpu_model(struct snap_env *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	if (strcmp(e->accel, "kvm")) {
		snprintf(e->cpu, sizeof(e->cpu), "%s", QEMU_TCG_CPU);
		return;
	}
	pthread_once(&once, host_cpu_once);
	snprintf(e->cpu, sizeof(e->cpu), "%s", host_cpu_id);
}

int snap_env_files(struct snap_env *e, const char *kernel, const char *initrd,
		   const char *template, char *err, size_t errlen)
{
	int r;
	if ((r = cached_sha(kernel, e->kernel_sha)) < 0 || (r = cached_sha(initrd, e->initrd_sha)) < 0) {
		snprintf(err, errlen, "cannot checksum the guest kernel or initramfs: %s", strerror(-r));
		return r;
	}
	/* The image is big and immutable once built (templates are rebuilt
	 * under a new name): checksummed once per daemon, then known by its
	 * real path, size and mtime, which also name it in old manifests. */
	char real[PATH_MAX];
	struct stat st;
	if (!realpath(template, real) || stat(real, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot find template image '%s': %s", template, strerror(errno));
		return r;
	}
	snprintf(e->template_was, sizeof(e->template_was), "%.400s:%lld:%lld", real,
		 (long long)st.st_size, (long long)st.st_mtim.tv_sec);
	char sha[65];
	if ((r = cached_sha(real, sha)) < 0) {
		snprintf(err, errlen, "cannot checksum template image '%s': %s", real, strerror(-r));
		return r;
	}
	snprintf(e->template, sizeof(e->template), "sha256:%s", sha);
	cpu_model(e);
	return 0;
}

static int fsync_path(const char *path, int dir)
{
	int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static json_t *env_json(const struct snap_env *e)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:b}", "qemu", e->qemu,
			 "accel", e->accel, "cpu", e->cpu, "kernel_sha256", e->kernel_sha,
			 "initrd_sha256", e->initrd_sha, "template",
			 e->template[0] ? e->template : e->template_was, "vcpus",
			 (int)e->vcpus, "memory_mb", (int)e->memory_mb, "disk_mb", (int)e->disk_mb,
			 "nic", e->nic);
	if (j && e->trust[0])
		json_object_set_new(j, "egress_ca", json_string(e->trust));
	if (j && e->qemu_build[0])
		json_object_set_new(j, "qemu_build", json_string(e->qemu_build));
	return j;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

char *snap_manifest_json(const struct snap_manifest *m)
{
	json_t *files = json_object();
	for (int i = 0; i < SNAP_NFILES && files; i++) {
		if (!m->files[i].name[0])
			continue;
		json_t *f = json_pack("{s:s, s:I}", "name", m->files[i].name, "size",
				      (json_int_t)m->files[i].size);
		if (f && m->files[i].sha256[0])
			json_object_set_new(f, "sha256", json_string(m->files[i].sha256));
		if (f && m->files[i].encoding[0])
			json_object_set_new(f, "encoding", json_string(m->files[i].encoding));
		json_object_set_new(files, file_keys[i], f);
	}
	json_t *doc = files ? json_pack("{s:i, s:o, s:s, s:b, s:I, s:o}", "format", SNAP_FORMAT,
					"made_with", env_json(&m->env), "ram",
					m->ram_diff ? "diff" : m->ram_in_file ? "file" : "stream",
					"sealed", m->sealed,
					"created_ns", (json_int_t)m->created_ns, "files", files)
			    : NULL;
	if (doc && m->no_config)
		json_object_set_new(doc, "no_config", json_true());
	char *text = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_decref(doc);
	return text;
}

int snap_manifest_write(const char *dir, const struct snap_manifest *m, char *err, size_t errlen)
{
	char path[600], tmp[600];
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, dir);
	snprintf(tmp, sizeof(tmp), "%s/" SNAP_MANIFEST ".tmp", dir);
	unlink(tmp);
	char *text = snap_manifest_json(m);
	int r = 0, fd = text ? fs_open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600) : -ENOMEM;
	if (fd < 0)
		r = fd;
	else if ((r = write_all(fd, text, strlen(text))) == 0 && fsync(fd) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	free(text);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r == 0)
		r = fsync_path(dir, 1);
	if (r < 0)
		snprintf(err, errlen, "cannot write the manifest of '%s': %s", dir, strerror(-r));
	return r;
}

int snap_seal(const char *dir, struct snap_manifest *m, char *err, size_t errlen)
{
	char path[600];
	int r = 0;
	for (int i = 0; i < SNAP_NFILES; i++) {
		if (!m->files[i].name[0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
		int fd = fs_open_file(path, O_RDONLY, 0);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			r = fd < 0 ? fd : -errno;
			snprintf(err, errlen, "snapshot file '%s': %s", path, strerror(-r));
			if (fd >= 0)
				close(fd);
			return r;
		}
		m->files[i].size = st.st_size;
		/* A base is a snapshot's RAM, checksummed when that one was
		 * sealed: a checksum the caller knows is not taken again. */
		if (i != SNAP_BASE || !m->files[i].sha256[0]) {
			m->files[i].sha256[0] = '\0';
			if (i == SNAP_STATE || m->sealed)
				r = sha256_fd(fd, m->files[i].sha256);
		}
		if (r == 0 && fsync(fd) < 0)
			r = -errno;
		close(fd);
		if (r < 0) {
			snprintf(err, errlen, "cannot seal '%s': %s", path, strerror(-r));
			return r;
		}
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	m->created_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
	return snap_manifest_write(dir, m, err, errlen);
}

static int bad(char *err, size_t errlen, const char *dir, const char *what)
{
	snprintf(err, errlen, "snapshot '%s' is damaged: %s", dir, what);
	return -EBADMSG;
}

/* 1 if name may name a snapshot's file: [A-Za-z0-9._-], not first a dot,
 * not the manifest's. A manifest may come from another host. */
static int file_name_ok(const char *name)
{
	size_t n = strlen(name);
	return n > 0 && n < 64 && name[0] != '.' && strcmp(name, SNAP_MANIFEST) &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static int sha_ok(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* Reads manifest doc of the snapshot called what (for errors) into m. */
static int manifest_parse(json_t *doc, const char *what, struct snap_manifest *m, char *err,
			  size_t errlen)
{
	memset(m, 0, sizeof(*m));
	int format = 0, sealed = 0, vcpus = 0, mem = 0, disk = 0, nic = 0, no_config = 0;
	json_int_t created = 0;
	const char *ram = NULL, *qemu = NULL, *accel = NULL, *ksha = NULL, *isha = NULL, *tpl = NULL;
	const char *cpu = "", *trust = "", *build = "";
	json_t *files = NULL;
	if (json_unpack(doc,
			"{s:i, s:{s:s, s:s, s?s, s:s, s:s, s:s, s:i, s:i, s:i, s:b, s?s, s?s}, s:s, "
			"s:b, s:I, s:o, s?b}",
			"format", &format, "made_with", "qemu", &qemu, "accel", &accel, "cpu", &cpu,
			"kernel_sha256", &ksha, "initrd_sha256", &isha, "template", &tpl, "vcpus",
			&vcpus, "memory_mb", &mem, "disk_mb", &disk, "nic", &nic, "egress_ca", &trust,
			"qemu_build", &build, "ram", &ram, "sealed", &sealed, "created_ns", &created,
			"files", &files, "no_config", &no_config) < 0 ||
	    !json_is_object(files))
		return bad(err, errlen, what, "the manifest lacks a field");
	if (trust[0] && !sha_ok(trust))
		return bad(err, errlen, what, "the manifest's egress CA is malformed");
	if (build[0] && !qemu_build_id_ok(build))
		return bad(err, errlen, what, "the manifest's QEMU build is malformed");
	if (format != SNAP_FORMAT) {
		snprintf(err, errlen, "snapshot '%s' has format %d; this cpuos reads %d", what, format,
			 SNAP_FORMAT);
		return -EPROTO;
	}
	if (vcpus < 0 || mem < 0 || disk < 0)
		return bad(err, errlen, what, "the manifest has a negative size");
	snprintf(m->env.qemu, sizeof(m->env.qemu), "%s", qemu);
	snprintf(m->env.qemu_build, sizeof(m->env.qemu_build), "%s", build);
	snprintf(m->env.accel, sizeof(m->env.accel), "%s", accel);
	snprintf(m->env.kernel_sha, sizeof(m->env.kernel_sha), "%s", ksha);
	snprintf(m->env.initrd_sha, sizeof(m->env.initrd_sha), "%s", isha);
	/* A name of the image that fits neither form cannot match. */
	if (!strncmp(tpl, "sha256:", 7))
		snprintf(m->env.template, sizeof(m->env.template), "%s", tpl);
	else
		snprintf(m->env.template_was, sizeof(m->env.template_was), "%s", tpl);
	snprintf(m->env.cpu, sizeof(m->env.cpu), "%s", cpu);
	snprintf(m->env.trust, sizeof(m->env.trust), "%s", trust);
	m->env.vcpus = (unsigned)vcpus;
	m->env.memory_mb = (unsigned)mem;
	m->env.disk_mb = (unsigned)disk;
	m->env.nic = nic;
	m->ram_in_file = !strcmp(ram, "file");
	m->ram_diff = !strcmp(ram, "diff");
	m->no_config = no_config || m->ram_diff;
	m->sealed = sealed;
	m->created_ns = created;
	for (int i = 0; i < SNAP_NFILES; i++) {
		json_t *f = json_object_get(files, file_keys[i]);
		if (!f)
			continue;
		const char *name, *sha = NULL, *enc = NULL;
		json_int_t size;
		if (json_unpack(f, "{s:s, s:I, s?s, s?s}", "name", &name, "size", &size, "sha256", &sha,
				"encoding", &enc) < 0 ||
		    !file_name_ok(name) || size < 0 || (sha && !sha_ok(sha)) ||
		    (enc && strcmp(enc, "zstd")))
			return bad(err, errlen, what, "a file entry is malformed");
		snprintf(m->files[i].encoding, sizeof(m->files[i].encoding), "%s", enc ? enc : "");
		for (int j = 0; j < i; j++)
			if (!strcmp(m->files[j].name, name))
				return bad(err, errlen, what, "two files have one name");
		snprintf(m->files[i].name, sizeof(m->files[i].name), "%s", name);
		snprintf(m->files[i].sha256, sizeof(m->files[i].sha256), "%s", sha ? sha : "");
		m->files[i].size = size;
	}
	if (!m->files[SNAP_STATE].name[0] || !m->files[SNAP_DISK].name[0] ||
	    (m->ram_in_file && !m->files[SNAP_MEM].name[0]) ||
	    (m->ram_diff && (!m->files[SNAP_PAGES].name[0] || !m->files[SNAP_BASE].name[0])))
		return bad(err, errlen, what, "a file is missing from the manifest");
	return 0;
}

int snap_manifest_parse(const char *text, size_t len, const char *what, struct snap_manifest *m,
			char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	if (len > SNAP_MANIFEST_MAX)
		return bad(err, errlen, what, "the manifest is too big");
	json_error_t je;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!doc)
		return bad(err, errlen, what, "the manifest is not JSON");
	int r = manifest_parse(doc, what, m, err, errlen);
	json_decref(doc);
	return r;
}

int snap_load(const char *dir, struct snap_manifest *m, int full, char *err, size_t errlen)
{
	char path[600];
	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, dir);
	json_error_t je;
	/* A manifest is a few hundred bytes; a pause's is in a directory
	 * its jailed QEMU may write, so one of any size is not read. */
	int mfd = fs_open_file(path, O_RDONLY, 0);
	struct stat mst;
	if (mfd >= 0 && (fstat(mfd, &mst) < 0 || mst.st_size > SNAP_MANIFEST_MAX)) {
		close(mfd);
		return bad(err, errlen, dir, "the manifest is too big");
	}
	json_t *doc = mfd >= 0 ? json_loadfd(mfd, 0, &je) : NULL;
	if (mfd >= 0)
		close(mfd);
	if (!doc) {
		if (access(path, F_OK) < 0) {
			snprintf(err, errlen, "no snapshot in '%s' (no manifest)", dir);
			return -ENOENT;
		}
		return bad(err, errlen, dir, "the manifest is not JSON");
	}
	int r = manifest_parse(doc, dir, m, err, errlen);
	json_decref(doc);
	if (r < 0)
		return r;
	for (int i = 0; i < SNAP_NFILES; i++) {
		if (!m->files[i].name[0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
		struct stat st;
		if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != m->files[i].size) {
			char what[128];
			snprintf(what, sizeof(what), "'%s' is %s", m->files[i].name,
				 access(path, F_OK) ? "missing" : "of the wrong size (truncated?)");
			return bad(err, errlen, dir, what);
		}
		if (!m->files[i].sha256[0] || (i != SNAP_STATE && !full))
			continue;
		char sha[65];
		if ((r = sha256_path(path, sha, 1)) < 0) {
			snprintf(err, errlen, "cannot read '%s': %s", path, strerror(-r));
			return r;
		}
		if (strcmp(sha, m->files[i].sha256)) {
			char what[128];
			snprintf(what, sizeof(what), "'%s' does not match its checksum", m->files[i].name);
			return bad(err, errlen, dir, what);
		}
	}
	return 0;
}

int snap_check(const struct snap_manifest *m, const struct snap_env *now, char *err,
	       size_t errlen)
{
	const struct snap_env *e = &m->env;
	const char *what = NULL, *was = "", *is = "";
	char a[32], b[32];
	if (now->qemu[0] && strcmp(e->qemu, now->qemu)) /* "": not known yet */
		what = "QEMU", was = e->qemu, is = now->qemu;
	else if (strcmp(e->accel, now->accel))
		what = "accelerator", was = e->accel, is = now->accel;
	else if (strcmp(e->kernel_sha, now->kernel_sha))
		what = "guest kernel", was = e->kernel_sha, is = now->kernel_sha;
	else if (strcmp(e->initrd_sha, now->initrd_sha))
		what = "agent (initramfs)", was = e->initrd_sha, is = now->initrd_sha;
	else if (e->cpu[0] && strcmp(e->cpu, now->cpu))
		what = "vCPU model", was = e->cpu, is = now->cpu;
	else if (e->template[0] ? strcmp(e->template, now->template)
				: strcmp(e->template_was, now->template_was))
		what = "template image", was = e->template[0] ? e->template : e->template_was,
		is = now->template;
	else if (e->vcpus != now->vcpus || e->memory_mb != now->memory_mb) {
		snprintf(a, sizeof(a), "%u vCPU %u MB", e->vcpus, e->memory_mb);
		snprintf(b, sizeof(b), "%u vCPU %u MB", now->vcpus, now->memory_mb);
		what = "machine size", was = a, is = b;
	} else if (e->nic != now->nic)
		what = "network device", was = e->nic ? "one" : "none", is = now->nic ? "one" : "none";
	else if (e->trust[0] && strcmp(e->trust, now->trust))
		what = "egress CA", was = e->trust, is = now->trust[0] ? now->trust : "none";
	if (!what)
		return 0;
	snprintf(err, errlen, "snapshot made with another %s (%.60s, now %.60s)", what, was, is);
	return -EPROTO;
}

/* Copies the data regions of in to out, leaving holes as holes. */
static int copy_sparse(int in, int out, off_t size)
{
	off_t pos = 0;
	while (pos < size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno; /* only a hole is left */
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		for (off_t o = data; o < hole;) {
			loff_t src = o, dst = o;
			ssize_t n = copy_file_range(in, &src, out, &dst, (size_t)(hole - o), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			o += n;
		}
		pos = hole;
	}
	return 0;
}

int snap_copy(const char *src, const char *dst)
{
	int in = fs_open_file(src, O_RDONLY, 0);
	if (in < 0)
		return in;
	int r = 0;
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	struct stat st;
	if (out < 0 || fstat(in, &st) < 0) {
		r = -errno;
		goto out;
	}
	/* A reflink shares the blocks (XFS, btrfs); ext4 has none. */
	if (ioctl(out, FICLONE, in) == 0)
		goto sync;
	if (ftruncate(out, st.st_size) < 0 || (r = copy_sparse(in, out, st.st_size)) < 0) {
		r = r ? r : -errno;
		goto out;
	}
sync:
	if (fsync(out) < 0)
		r = -errno;
out:
	if (out >= 0)
		close(out);
	if (r < 0 && out >= 0)
		unlink(dst);
	close(in);
	return r;
}

long long snap_file_bytes(const char *path)
{
	struct stat st;
	return lstat(path, &st) < 0 ? 0 : (long long)st.st_blocks * 512;
}

void snap_remove(const char *dir)
{
	static const char *const names[] = { SNAP_MANIFEST, SNAP_MANIFEST ".tmp", "state",
					     "state.tmp", "mem", "disk.qcow2", "pages",
					     "pages.tmp", "base" };
	char path[600];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}
