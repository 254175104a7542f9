/* Unit tests for the QEMU command line and the QMP client. */
#include "runner/migrate.h"
#include "runner/qemu.h"
#include "runner/qemu_build.h"
#include "runner/qmp.h"
#include "runner/snap.h"
#include "common/fs.h"
#include "common/netconst.h"
#include "common/unixsock.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static struct qemu_config base_config(void)
{
	return (struct qemu_config){
		.binary = "qemu-system-x86_64", .accel = QEMU_ACCEL_TCG, .vcpus = 2,
		.memory_mb = 512, .kernel = "/k/bzImage", .initrd = "/k/initramfs.cpio",
		.template = "/t/python.erofs", .scratch = "/r/scratch.qcow2", .run_dir = "/r",
		.hostname = "sbx1",
	};
}

/* The value following option opt, the n-th time it appears (0-based). */
static const char *opt_value(char **argv, const char *opt, int n)
{
	for (char **p = argv; *p; p++)
		if (!strcmp(*p, opt) && p[1] && n-- == 0)
			return p[1];
	return NULL;
}

static int has_value(char **argv, const char *opt, const char *needle)
{
	const char *v;
	for (int i = 0; (v = opt_value(argv, opt, i)); i++)
		if (strstr(v, needle))
			return 1;
	return 0;
}

static void test_tcg_cmdline(void)
{
	struct qemu_config c = base_config();
	char **argv;
	if (!CHECK(qemu_argv(&c, &argv) == 0))
		return;
	CHECK(!strcmp(argv[0], "qemu-system-x86_64"));
	CHECK(has_value(argv, "-M", "microvm,acpi=off"));
	CHECK(has_value(argv, "-accel", "tcg,thread=multi,tb-size="));
	CHECK(has_value(argv, "-cpu", "max"));
	CHECK(!strcmp(opt_value(argv, "-smp", 0), "2"));
	CHECK(!strcmp(opt_value(argv, "-m", 0), "512"));
	CHECK(!strcmp(opt_value(argv, "-kernel", 0), "/k/bzImage"));
	CHECK(!strcmp(opt_value(argv, "-initrd", 0), "/k/initramfs.cpio"));
	CHECK(has_value(argv, "-append", "panic=-1"));
	CHECK(has_value(argv, "-append", "reboot=t"));
	CHECK(has_value(argv, "-append", "cpuos.hostname=sbx1"));
	CHECK(has_value(argv, "-chardev", "path=/r/qmp.sock,server=on,wait=off"));
	CHECK(has_value(argv, "-chardev", "path=/r/agent.sock"));
	CHECK(has_value(argv, "-device", "virtserialport,chardev=agent,name=cpuos.agent"));
	CHECK(has_value(argv, "-blockdev", "filename=/t/python.erofs,read-only=on"));
	CHECK(has_value(argv, "-blockdev", "driver=qcow2"));
	CHECK(has_value(argv, "-device", "serial=root"));
	CHECK(has_value(argv, "-device", "serial=scratch"));
	CHECK(has_value(argv, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,"));
	int nodefaults = 0, noreboot = 0;
	for (char **p = argv; *p; p++) {
		nodefaults += !strcmp(*p, "-nodefaults");
		noreboot += !strcmp(*p, "-no-reboot");
	}
	CHECK(nodefaults == 1 && noreboot == 1);
	qemu_argv_free(argv);
}

static void test_kvm_cmdline(void)
{
	struct qemu_config c = base_config();
	c.accel = QEMU_ACCEL_KVM;
	char **argv;
	if (!CHECK(qemu_argv(&c, &argv) == 0))
		return;
	CHECK(!strcmp(opt_value(argv, "-accel", 0), "kvm"));
	CHECK(!strcmp(opt_value(argv, "-cpu", 0), "host"));
	qemu_argv_free(argv);
}

/* No NIC unless a TAP is named; with one, the guest learns its address. */
static void test_nic(void)
{
	struct qemu_config c = base_config();
	char **argv;
	if (!CHECK(qemu_argv(&c, &argv) == 0))
		return;
	CHECK(!opt_value(argv, "-netdev", 0) && !has_value(argv, "-device", "virtio-net"));
	CHECK(!has_value(argv, "-append", "cpuos.net="));
	qemu_argv_free(argv);
	c.tap = "tap0";
	if (!CHECK(qemu_argv(&c, &argv) == 0))
		return;
	CHECK(has_value(argv, "-netdev", "tap,id=net,ifname=tap0,script=no,downscript=no,vhost=off"));
	CHECK(has_value(argv, "-device", "virtio-net-device,netdev=net,mac=" NET_GUEST_MAC));
	CHECK(has_value(argv, "-append", "cpuos.net=" NET_GUEST_IP "/30," NET_GATEWAY_IP));
	qemu_argv_free(argv);
	c.tap = "tap0,script=/evil"; /* would inject an option */
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
}

/* A daemon finds a left-behind VM's run directory in its command line. */
static void test_run_dir_of(void)
{
	struct qemu_config c = base_config();
	c.run_dir = "/s/snapshots/fork-1";
	c.mem_path = "/s/vms/sbx_2/mem"; /* another directory, named first */
	char **argv, line[4096] = "", dir[64];
	if (!CHECK(qemu_argv(&c, &argv) == 0))
		return;
	for (char **p = argv; *p; p++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s ", *p);
	qemu_argv_free(argv);
	CHECK(qemu_run_dir_of(line, dir, sizeof(dir)) == 0 && !strcmp(dir, "/s/snapshots/fork-1"));
	CHECK(qemu_run_dir_of(line, dir, 8) == -ENOENT); /* too long to hold */
	CHECK(qemu_run_dir_of("qemu-system-x86_64 -m 512", dir, sizeof(dir)) == -ENOENT);
	CHECK(qemu_run_dir_of("x socket,id=qmp,path=/a b/qmp.sock,server=on", dir, sizeof(dir)) ==
	      -ENOENT);
}

static void test_bad_configs(void)
{
	char **argv = NULL;
	struct qemu_config c = base_config();
	c.template = "/t/a,b.erofs"; /* would inject a QEMU option */
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c = base_config();
	c.vcpus = 0;
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c.vcpus = 1000;
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c = base_config();
	c.memory_mb = 1;
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c = base_config();
	c.accel = QEMU_ACCEL_AUTO; /* must be resolved first */
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c = base_config();
	c.hostname = "a b";
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	c = base_config();
	c.kernel = NULL;
	CHECK(qemu_argv(&c, &argv) == -EINVAL);
	CHECK(argv == NULL);
}

static void test_accel(void)
{
	enum qemu_accel a;
	CHECK(qemu_accel_parse("kvm", &a) == 0 && a == QEMU_ACCEL_KVM);
	CHECK(qemu_accel_parse("tcg", &a) == 0 && a == QEMU_ACCEL_TCG);
	CHECK(qemu_accel_parse("auto", &a) == 0 && a == QEMU_ACCEL_AUTO);
	CHECK(qemu_accel_parse("xen", &a) == -EINVAL);
	a = qemu_accel_probe();
	CHECK(a == QEMU_ACCEL_KVM || a == QEMU_ACCEL_TCG);
	t_note("auto picks %s on this host", qemu_accel_name(a));
}

/* QMP: a forked peer plays QEMU from a script. "> line" is sent, "< text"
 * waits for a line holding text (the peer exits 1 on anything else), and
 * "flood" sends 4 MiB without a newline, "close" hangs up. */
static pid_t peer_run(int fd, const char *const *script)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int fl = 0;
	ioctl(fd, FIONBIO, &fl);
	char line[4096];
	for (; *script; script++) {
		const char *s = *script;
		if (s[0] == '>') {
			dprintf(fd, "%s\n", s + 2);
		} else if (s[0] == '<') {
			size_t n = 0;
			while (n < sizeof(line) - 1 && read(fd, line + n, 1) == 1 && line[n] != '\n')
				n++;
			line[n] = '\0';
			if (!strstr(line, s + 2))
				_exit(1);
		} else if (!strcmp(s, "flood")) {
			memset(line, 'x', sizeof(line));
			for (int i = 0; i < 1024; i++) /* 4 MiB with no newline */
				if (write(fd, line, sizeof(line)) < 0)
					_exit(0);
		} else {
			close(fd);
			_exit(0);
		}
	}
	sleep(5); /* stay connected until killed */
	_exit(0);
}

static int peer_done(pid_t pid)
{
	int st;
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	return (WIFEXITED(st) && WEXITSTATUS(st) == 0) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
}

static void test_qmp_session(void)
{
	static const char *const script[] = {
		"> {\"QMP\": {\"version\": {}, \"capabilities\": []}}",
		"< \"execute\":\"qmp_capabilities\"",
		"> {\"return\": {}, \"id\": 1}",
		"< \"execute\":\"query-status\"",
		/* an event and a stale reply before the real one */
		"> {\"event\": \"SHUTDOWN\", \"data\": {\"guest\": true, \"reason\": \"guest-reset\"}}",
		"> {\"return\": {\"status\": \"stale\"}, \"id\": 1}",
		"> {\"return\": {\"status\": \"running\"}, \"id\": 2}",
		"< \"execute\":\"nope\"",
		"> {\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope has not been found\"}, \"id\": 3}",
		"< \"execute\":\"query-status\"", /* left unanswered: a timeout */
		"< \"execute\":\"query-status\"",
		"> this is not json",
		"close",
		NULL,
	};
	int sv[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0))
		return;
	pid_t peer = peer_run(sv[1], script);
	close(sv[1]);
	struct qmp *q;
	char err[256] = "";
	if (!CHECK(qmp_open_fd(sv[0], 2000, &q, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		peer_done(peer);
		return;
	}
	json_t *ret = NULL;
	CHECK(qmp_command(q, "query-status", NULL, 2000, &ret, err, sizeof(err)) == 0);
	CHECK(ret && json_string_value(json_object_get(ret, "status")) &&
	      !strcmp(json_string_value(json_object_get(ret, "status")), "running"));
	json_decref(ret);
	CHECK(qmp_shutdown_reason(q) && !strcmp(qmp_shutdown_reason(q), "guest-reset"));

	CHECK(qmp_command(q, "nope", NULL, 2000, NULL, err, sizeof(err)) == -EREMOTEIO);
	CHECK(strstr(err, "has not been found") != NULL);
	CHECK(qmp_command(q, "query-status", NULL, 100, NULL, err, sizeof(err)) == -ETIMEDOUT);
	CHECK(qmp_command(q, "query-status", NULL, 2000, NULL, err, sizeof(err)) == -EPROTO);
	usleep(100000);
	CHECK(qmp_poll_events(q) == -EPIPE); /* QEMU gone */
	qmp_close(q);
	CHECK(peer_done(peer));
}

static void test_qmp_no_greeting(void)
{
	static const char *const script[] = { "> {\"return\": {}, \"id\": 1}", NULL };
	int sv[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0))
		return;
	pid_t peer = peer_run(sv[1], script);
	close(sv[1]);
	struct qmp *q = NULL;
	char err[256];
	CHECK(qmp_open_fd(sv[0], 200, &q, err, sizeof(err)) < 0);
	CHECK(strstr(err, "greeting") != NULL);
	peer_done(peer);
}

static void test_qmp_line_cap(void)
{
	static const char *const script[] = {
		"> {\"QMP\": {}}", "< qmp_capabilities", "> {\"return\": {}, \"id\": 1}", "flood", NULL,
	};
	int sv[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0))
		return;
	pid_t peer = peer_run(sv[1], script);
	close(sv[1]);
	struct qmp *q;
	char err[256];
	if (!CHECK(qmp_open_fd(sv[0], 2000, &q, err, sizeof(err)) == 0)) {
		peer_done(peer);
		return;
	}
	/* A line that never ends must not grow memory without bound. */
	int r = 0;
	for (int i = 0; i < 1000 && r == 0; i++) {
		usleep(2000);
		r = qmp_poll_events(q);
	}
	CHECK(r == -EMSGSIZE);
	qmp_close(q);
	peer_done(peer);
}

/* A save and a load end when QEMU's MIGRATION event says so, and are
 * never polled: a save that completes (and returns once QEMU left
 * finish-migrate), a load that fails (its reason asked for then), a save
 * that times out and is cancelled. */
static void test_migrate_events(void)
{
#define MIG(s) "> {\"event\": \"MIGRATION\", \"data\": {\"status\": \"" s "\"}}"
#define STATUS(s, id) "> {\"return\": {\"status\": \"" s "\"}, \"id\": " #id "}"
	static const char *const script[] = {
		"> {\"QMP\": {\"version\": {}, \"capabilities\": []}}",
		"< \"execute\":\"qmp_capabilities\"", "> {\"return\": {}, \"id\": 1}",
		/* a save, finished a moment after it said completed */
		"< \"execute\":\"stop\"", "> {\"return\": {}, \"id\": 2}",
		"< {\"capability\":\"events\",\"state\":true}", "> {\"return\": {}, \"id\": 3}",
		"< \"execute\":\"getfd\"", "> {\"return\": {}, \"id\": 4}",
		"< \"execute\":\"migrate\"", MIG("setup"), "> {\"return\": {}, \"id\": 5}",
		MIG("active"), MIG("completed"),
		"< \"execute\":\"query-status\"", STATUS("finish-migrate", 6),
		"< \"execute\":\"query-status\"", STATUS("postmigrate", 7),
		/* a load that fails */
		"< {\"capability\":\"events\",\"state\":true}", "> {\"return\": {}, \"id\": 8}",
		"< \"execute\":\"getfd\"", "> {\"return\": {}, \"id\": 9}",
		"< \"execute\":\"migrate-incoming\"", "> {\"return\": {}, \"id\": 10}", MIG("failed"),
		"< \"execute\":\"query-migrate\"",
		"> {\"return\": {\"status\": \"failed\", \"error-desc\": \"bad section\"}, \"id\": 11}",
		/* a save that never ends, cancelled */
		"< \"execute\":\"stop\"", "> {\"return\": {}, \"id\": 12}",
		"< \"execute\":\"migrate-set-capabilities\"", "> {\"return\": {}, \"id\": 13}",
		"< \"execute\":\"getfd\"", "> {\"return\": {}, \"id\": 14}",
		"< \"execute\":\"migrate\"", "> {\"return\": {}, \"id\": 15}", MIG("active"),
		"< \"execute\":\"migrate_cancel\"", "> {\"return\": {}, \"id\": 16}",
		MIG("cancelling"), MIG("cancelled"),
		"< \"execute\":\"query-status\"", STATUS("paused", 17),
		NULL,
	};
#undef MIG
#undef STATUS
	char dir[64], path[128], err[256] = "";
	snprintf(dir, sizeof(dir), "/tmp/cpuos-migrate-test-%d", (int)getpid());
	if (!CHECK(mkdir(dir, 0700) == 0))
		return;
	int sv[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0))
		return;
	pid_t peer = peer_run(sv[1], script);
	close(sv[1]);
	struct qmp *q;
	if (!CHECK(qmp_open_fd(sv[0], 2000, &q, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		peer_done(peer);
		return;
	}
	snprintf(path, sizeof(path), "%s/state", dir);
	CHECK(migrate_save(q, path, 1, 5000, err, sizeof(err)) == 0);
	CHECK(!strcmp(qmp_migration_status(q), "completed"));
	int r = migrate_load(q, path, 1, 5000, err, sizeof(err));
	CHECK(r == -EIO && !strcmp(err, "migration failed: bad section"));
	unlink(path);
	r = migrate_save(q, path, 1, 300, err, sizeof(err));
	CHECK(r == -ETIMEDOUT && !strcmp(err, "migration still 'active' after 300 ms"));
	/* the cancel's end was waited for: the next answer is the next command's */
	json_t *ret = NULL;
	CHECK(qmp_command(q, "query-status", NULL, 2000, &ret, err, sizeof(err)) == 0);
	CHECK(!strcmp(qmp_migration_status(q), "cancelled"));
	json_decref(ret);
	qmp_close(q);
	CHECK(peer_done(peer));
	unlink(path);
	rmdir(dir);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* m sealed in dir as a snapshot of two small files, state and layer. */
static int seal_small(const char *dir, struct snap_manifest *m)
{
	char err[256];
	snprintf(m->files[SNAP_STATE].name, sizeof(m->files[0].name), "state");
	snprintf(m->files[SNAP_DISK].name, sizeof(m->files[0].name), "disk.qcow2");
	put_file(dir, "state", "device state");
	put_file(dir, "disk.qcow2", "layer");
	return snap_seal(dir, m, err, sizeof(err));
}

/* dir's manifest with made_with's key set to value, as a forger would
 * write it, or without the key (value NULL), as a cpuos before did. */
static int edit_made_with(const char *dir, const char *key, const char *value)
{
	char mpath[300];
	snprintf(mpath, sizeof(mpath), "%s/" SNAP_MANIFEST, dir);
	json_t *doc = json_load_file(mpath, 0, NULL);
	json_t *with = json_object_get(doc, "made_with");
	int r = with && (value ? json_object_set_new(with, key, json_string(value))
			       : json_object_del(with, key)) == 0 &&
			json_dump_file(doc, mpath, 0) == 0
		? 0
		: -1;
	json_decref(doc);
	return r;
}

/* A run directory is its jailed QEMU's to write: whatever it puts in a
 * file's place, the runner (root) follows no symlink there. */
static void test_run_dir_symlinks(void)
{
	char dir[128], path[256], secret[256], link[256], err[256], line[64];
	char cmd[200];
	snprintf(dir, sizeof(dir), "/tmp/cpuos-symlink-test-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0 && mkdir(dir, 0700) == 0);
	snprintf(secret, sizeof(secret), "%s/secret", dir);
	put_file(dir, "secret", "top secret\n");
	/* a socket in place of the agent's, and a link to it */
	int ls = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.80s/real.sock", dir);
	CHECK(bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(ls, 4) == 0);
	snprintf(link, sizeof(link), "%s/agent.sock", dir);
	CHECK(symlink(sa.sun_path, link) == 0);
	int fd = unix_connect(sa.sun_path, 0);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK(unix_connect(link, 0) == -ENOTSOCK);
	CHECK(unix_connect(secret, 0) == -ENOTSOCK);
	/* QEMU's log read back for an error message */
	snprintf(link, sizeof(link), "%s/qemu.log", dir);
	CHECK(symlink(secret, link) == 0);
	CHECK(fs_last_line(link, line, sizeof(line)) == -ELOOP && line[0] == '\0');
	/* a pause sealed there: a file that is a link is refused, and a
	 * manifest's temporary name taken by a link is not written through */
	struct snap_manifest m;
	memset(&m, 0, sizeof(m));
	snprintf(m.files[SNAP_STATE].name, sizeof(m.files[0].name), "state");
	snprintf(m.files[SNAP_DISK].name, sizeof(m.files[0].name), "disk.qcow2");
	put_file(dir, "state", "device state");
	snprintf(link, sizeof(link), "%s/disk.qcow2", dir);
	CHECK(symlink(secret, link) == 0);
	CHECK(snap_seal(dir, &m, err, sizeof(err)) == -ELOOP);
	unlink(link);
	put_file(dir, "disk.qcow2", "layer");
	snprintf(link, sizeof(link), "%s/manifest.json.tmp", dir);
	CHECK(symlink(secret, link) == 0);
	CHECK(snap_seal(dir, &m, err, sizeof(err)) == 0);
	CHECK(fs_last_line(secret, line, sizeof(line)) == 0 && !strcmp(line, "top secret"));
	/* and loaded back, a link in a file's place is damage */
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	snprintf(path, sizeof(path), "%s/state", dir);
	unlink(path);
	CHECK(symlink(secret, path) == 0);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == -EBADMSG);
	close(ls);
	CHECK(system(cmd) == 0);
}

/* A snapshot names its template image by content, so the same image at
 * another path (another host's cache) restores it and another image does
 * not; manifests of a cpuos before, which named it by path, size and
 * mtime, still restore where that is still true. The vCPU model is
 * compared when the manifest has one. */
static void test_snap_names_image_by_content(void)
{
	char dir[] = "/tmp/cpuos-snapenv-XXXXXX", p[5][256], err[256], cmd[300];
	CHECK(mkdtemp(dir) != NULL);
	static const char *const names[] = { "vmlinuz", "initrd", "a.erofs", "b.erofs", "c.erofs" };
	static const char *const texts[] = { "kernel", "initrd", "image", "image", "another" };
	for (int i = 0; i < 5; i++) {
		put_file(dir, names[i], texts[i]);
		snprintf(p[i], sizeof(p[i]), "%s/%s", dir, names[i]);
	}
	struct snap_env a = { .accel = "tcg" }, b = a, c = a, k = { .accel = "kvm" };
	CHECK(snap_env_files(&a, p[0], p[1], p[2], err, sizeof(err)) == 0);
	CHECK(snap_env_files(&b, p[0], p[1], p[3], err, sizeof(err)) == 0);
	CHECK(snap_env_files(&c, p[0], p[1], p[4], err, sizeof(err)) == 0);
	CHECK(snap_env_files(&k, p[0], p[1], p[2], err, sizeof(err)) == 0);
	/* sha256("image") */
	CHECK(!strcmp(a.template, "sha256:"
				  "6105d6cc76af400325e94d588ce511be5bfdbb73b437dc51eca43917d7a43e3d"));
	CHECK(!strcmp(a.template, b.template) && strcmp(a.template, c.template));
	CHECK(strcmp(a.template_was, b.template_was) && strstr(a.template_was, "/a.erofs:5:"));
	CHECK(!strcmp(a.cpu, QEMU_TCG_CPU) && !strncmp(k.cpu, "host ", 5));

	struct snap_manifest m;
	memset(&m, 0, sizeof(m));
	m.env = a;
	CHECK(seal_small(dir, &m) == 0);
	memset(&m, 0, sizeof(m));
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	CHECK(!strcmp(m.env.cpu, QEMU_TCG_CPU) && !strcmp(m.env.template, a.template));
	CHECK(snap_check(&m, &b, err, sizeof(err)) == 0);
	CHECK(snap_check(&m, &c, err, sizeof(err)) == -EPROTO && strstr(err, "template image"));
	struct snap_env o = b; /* the same but for the CPU (another host's, under KVM) */
	snprintf(o.cpu, sizeof(o.cpu), "%s", k.cpu);
	CHECK(snap_check(&m, &o, err, sizeof(err)) == -EPROTO && strstr(err, "vCPU model"));

	/* The manifest as a cpuos before wrote it: the image by path, no cpu. */
	CHECK(edit_made_with(dir, "cpu", NULL) == 0 &&
	      edit_made_with(dir, "template", a.template_was) == 0);
	memset(&m, 0, sizeof(m));
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	CHECK(!m.env.cpu[0] && !m.env.template[0]);
	CHECK(snap_check(&m, &a, err, sizeof(err)) == 0);
	CHECK(snap_check(&m, &b, err, sizeof(err)) == -EPROTO && strstr(err, "template image"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

/* A guest trusts the egress CA it was booted with: its snapshot records
 * that CA and restores only where the proxy signs with the same one; a
 * manifest of a cpuos before (no CA named) restores under any. A forged
 * CA id is refused as the manifest's fault. */
static void test_snap_names_egress_ca(void)
{
	char dir[] = "/tmp/cpuos-snapca-XXXXXX", p[3][256], err[256], cmd[300];
	CHECK(mkdtemp(dir) != NULL);
	static const char *const names[] = { "vmlinuz", "initrd", "a.erofs" };
	for (int i = 0; i < 3; i++) {
		put_file(dir, names[i], names[i]);
		snprintf(p[i], sizeof(p[i]), "%s/%s", dir, names[i]);
	}
	struct snap_env a = { .accel = "tcg", .nic = 1 };
	CHECK(snap_env_files(&a, p[0], p[1], p[2], err, sizeof(err)) == 0);
	struct snap_env same = a, other = a, none = a;
	memset(a.trust, 'a', 64);
	memset(same.trust, 'a', 64);
	memset(other.trust, 'b', 64);
	none.trust[0] = '\0';

	struct snap_manifest m;
	memset(&m, 0, sizeof(m));
	m.env = a;
	CHECK(seal_small(dir, &m) == 0);
	memset(&m, 0, sizeof(m));
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	CHECK(!strcmp(m.env.trust, a.trust));
	CHECK(snap_check(&m, &same, err, sizeof(err)) == 0);
	CHECK(snap_check(&m, &other, err, sizeof(err)) == -EPROTO && strstr(err, "egress CA"));
	CHECK(snap_check(&m, &none, err, sizeof(err)) == -EPROTO && strstr(err, "egress CA"));

	CHECK(edit_made_with(dir, "egress_ca", "../../etc") == 0);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == -EBADMSG && strstr(err, "egress CA"));
	/* as a cpuos before wrote it: no CA named, none compared */
	CHECK(edit_made_with(dir, "egress_ca", NULL) == 0);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0 && !m.env.trust[0]);
	CHECK(snap_check(&m, &other, err, sizeof(err)) == 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

/* A snapshot's RAM shared by many VMs is opened read-only where asked
 * (rom=off); a VM's own RAM file never is. */
static void test_mem_readonly(void)
{
	struct qemu_config c = base_config();
	c.mem_path = "/c/snapshots/python/mem";
	c.mem_readonly = 1;
	char **argv;
	CHECK(qemu_argv(&c, &argv) == 0);
	CHECK(has_value(argv, "-object", "mem-path=/c/snapshots/python/mem,share=off,readonly=on,rom=off"));
	qemu_argv_free(argv);
	c.mem_shared = 1; /* its own: written through */
	CHECK(qemu_argv(&c, &argv) == 0);
	CHECK(has_value(argv, "-object", "share=on") && !has_value(argv, "-object", "readonly"));
	qemu_argv_free(argv);
	c.mem_shared = 0, c.mem_readonly = 0; /* a QEMU before 8.2 */
	CHECK(qemu_argv(&c, &argv) == 0);
	CHECK(has_value(argv, "-object", "share=off") && !has_value(argv, "-object", "rom=off"));
	qemu_argv_free(argv);
}

/* A fake install prefix: the real QEMU binary (which answers --version),
 * an accelerator module, firmware with a link, and what is not kept. */
static void fake_prefix(const char *dir, const char *rom)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd),
		 "set -e; q=$(command -v qemu-system-x86_64); cd '%s'; "
		 "mkdir -p bin lib/x86_64-linux-gnu/qemu share/qemu/keymaps; "
		 "cp \"$q\" bin/qemu-system-x86_64; "
		 "echo tcg > lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so; "
		 "echo gui > lib/x86_64-linux-gnu/qemu/ui-gtk.so; "
		 "echo '%s' > share/qemu/qboot.rom; ln -sf qboot.rom share/qemu/bios-microvm.bin; "
		 "echo us > share/qemu/keymaps/en-us",
		 dir, rom);
	CHECK(system(cmd) == 0);
}

static int count_entries(const char *dir)
{
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq", dir);
	for (int n = 0; n < 5; n++) {
		char c2[420];
		snprintf(c2, sizeof(c2), "%s %d", cmd, n);
		if (system(c2) == 0)
			return n;
	}
	return -1;
}

/* A build is kept once by content, whole, with what QEMU finds beside
 * its binary and nothing else; another firmware is another build; a
 * kept build is found by id, by version and by its binary's path. */
static void test_qemu_build_keep(void)
{
	char dir[] = "/tmp/cpuos-qbuild-XXXXXX", pa[300], pb[300], builds[300], bin[400];
	char err[512], path[PATH_MAX + 64], cmd[400];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(pa, sizeof(pa), "%s/a", dir);
	snprintf(pb, sizeof(pb), "%s/b", dir);
	snprintf(builds, sizeof(builds), "%s/builds", dir);
	CHECK(mkdir(pa, 0755) == 0 && mkdir(pb, 0755) == 0);
	fake_prefix(pa, "qboot one");
	fake_prefix(pb, "qboot two");

	struct qemu_build a, a2, b, f;
	snprintf(bin, sizeof(bin), "%s/bin/qemu-system-x86_64", pa);
	CHECK(qemu_build_keep(builds, bin, &a, err, sizeof(err)) == 0);
	t_note("kept %s (%s)", a.id, a.version);
	CHECK(qemu_build_id_ok(a.id) && a.major >= 7 && strstr(a.version, " Debian ") &&
	      !strchr(a.version, '(')); /* as QMP's query-version says it */
	snprintf(path, sizeof(path), "%s/%s/" QEMU_BUILD_BIN, builds, a.id);
	CHECK(!strcmp(a.binary, path) && access(path, X_OK) == 0);
	static const char *const kept[] = { "lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so",
					    "share/qemu/qboot.rom", "share/qemu/bios-microvm.bin",
					    "version" };
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", a.dir, kept[i]);
		CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
	}
	snprintf(path, sizeof(path), "%s/lib/x86_64-linux-gnu/qemu/ui-gtk.so", a.dir);
	CHECK(access(path, F_OK) < 0);
	snprintf(path, sizeof(path), "%s/share/qemu/keymaps", a.dir);
	CHECK(access(path, F_OK) < 0);

	/* kept already: read, nothing written (the directory unchanged) */
	struct stat before, after;
	CHECK(stat(builds, &before) == 0);
	usleep(20000);
	CHECK(qemu_build_keep(builds, bin, &a2, err, sizeof(err)) == 0 && !strcmp(a.id, a2.id));
	CHECK(stat(builds, &after) == 0 && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec &&
	      before.st_mtim.tv_sec == after.st_mtim.tv_sec);
	CHECK(count_entries(builds) == 1); /* no temporary left */
	snprintf(bin, sizeof(bin), "%s/bin/qemu-system-x86_64", pb);
	CHECK(qemu_build_keep(builds, bin, &b, err, sizeof(err)) == 0 && strcmp(a.id, b.id));
	CHECK(count_entries(builds) == 2);

	CHECK(qemu_build_find(builds, b.id, NULL, &f) == 0 && !strcmp(f.dir, b.dir));
	CHECK(qemu_build_find(builds, "", a.version, &f) == 0 && !strcmp(f.version, a.version));
	CHECK(qemu_build_find(builds, "0123456789abcdef", a.version, &f) == -ENOENT);
	CHECK(qemu_build_find(builds, "../../etc/passwd", NULL, &f) == -ENOENT);
	CHECK(qemu_build_find(builds, "", "6.2.0", &f) == -ENOENT);
	CHECK(qemu_build_beside(&a, b.id, NULL, &f) == 0 && !strcmp(f.dir, b.dir));
	CHECK(qemu_build_beside(&b, "", a.version, &f) == 0 && !strcmp(f.version, a.version));
	CHECK(qemu_build_beside(&a, "0123456789abcdef", NULL, &f) == -ENOENT);

	/* a wrapper script is run as it is, not kept */
	snprintf(path, sizeof(path), "%s/wrapper", dir);
	put_file(dir, "wrapper", "#!/bin/sh\nexec qemu-system-x86_64 \"$@\"\n");
	chmod(path, 0755);
	CHECK(qemu_build_keep(builds, path, &f, err, sizeof(err)) == -ENOEXEC && strstr(err, "ELF"));
	CHECK(qemu_build_keep(builds, "/nonexistent/qemu", &f, err, sizeof(err)) < 0 &&
	      strstr(err, "/nonexistent/qemu"));

	struct qemu_build v = { 0 };
	v.major = 7, v.minor = 2;
	CHECK(!qemu_build_has_rom_off(&v));
	v.major = 8, v.minor = 2;
	CHECK(qemu_build_has_rom_off(&v));
	v.major = 10, v.minor = 0;
	CHECK(qemu_build_has_rom_off(&v));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

/* A manifest names the build that made it; a forged one is refused, and
 * one without (a cpuos before) reads. */
static void test_snap_names_qemu_build(void)
{
	char dir[] = "/tmp/cpuos-snapqb-XXXXXX", err[256], cmd[300];
	CHECK(mkdtemp(dir) != NULL);
	struct snap_manifest m;
	memset(&m, 0, sizeof(m));
	snprintf(m.env.accel, sizeof(m.env.accel), "tcg");
	snprintf(m.env.qemu, sizeof(m.env.qemu), "10.0.2 (Debian)");
	snprintf(m.env.qemu_build, sizeof(m.env.qemu_build), "0123456789abcdef");
	CHECK(seal_small(dir, &m) == 0);
	memset(&m, 0, sizeof(m));
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	CHECK(!strcmp(m.env.qemu_build, "0123456789abcdef"));
	CHECK(edit_made_with(dir, "qemu_build", "../x") == 0);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == -EBADMSG && strstr(err, "QEMU build"));
	CHECK(edit_made_with(dir, "qemu_build", NULL) == 0);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0 && !m.env.qemu_build[0]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "qemu_tcg_cmdline", test_tcg_cmdline },
		{ "qemu_kvm_cmdline", test_kvm_cmdline },
		{ "qemu_bad_configs", test_bad_configs },
		{ "qemu_nic", test_nic },
		{ "qemu_mem_readonly", test_mem_readonly },
		{ "qemu_run_dir_of", test_run_dir_of },
		{ "qemu_accel", test_accel },
		{ "qmp_session", test_qmp_session },
		{ "qmp_no_greeting", test_qmp_no_greeting },
		{ "qmp_line_cap", test_qmp_line_cap },
		{ "migrate_events", test_migrate_events },
		{ "run_dir_symlinks", test_run_dir_symlinks },
		{ "snap_names_image_by_content", test_snap_names_image_by_content },
		{ "snap_names_egress_ca", test_snap_names_egress_ca },
		{ "snap_names_qemu_build", test_snap_names_qemu_build },
		{ "qemu_build_keep", test_qemu_build_keep },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
