/*
 * test_priv: the privileged helper. What its parser refuses (the fuzz
 * target checks it accepts nothing out of shape; this names what must be
 * refused), then a real helper started as cpuosd starts it (this binary
 * executed again): a jailed process spawned, watched, killed and reaped
 * through it; what it will not do for the daemon (a signal to a process
 * that is not a jail's, a path with a link in the daemon's directories);
 * a request the daemon would never send (a shell for QEMU, a broken
 * frame) ending the helper and, by SIGTERM, the daemon; a helper that
 * does not answer in time killed; and the walk that makes the daemon's
 * tree its own at the drop. Needs root.
 */
#include "common/launch.h"
#include "common/proto.h"
#include "jail/jail.h"
#include "priv/priv.h"
#include "priv/priv_msg.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <limits.h>
#include <unistd.h>

static struct priv_req req;

static const struct priv_bounds bounds = {
	.nslots = 4, .jail = 1, .jail_first = 1000, .jail_count = 10,
	.run_parents = { "/s/vms", "/s/snapshots", "/c/snapshots" },
	.rw_dirs = { "/c/snapshots", "/s/snapshots", "/s/checkpoints" },
	.ro_dirs = { "/g", "/c", "/s" },
	.qemu = "/usr/bin/qemu-system-x86_64",
};

/* A request of (tag, value) pairs, built as the client builds them. */
static int decode(uint16_t type, int nfds, const char *const *strs, char *err)
{
	struct pbuf b = { 0 };
	proto_begin(&b, type, 0, 1);
	for (int i = 0; strs[i]; i += 2) {
		uint16_t tag = (uint16_t)atoi(strs[i]);
		if (tag == T_SLOT || tag == T_VCPUS || tag == T_MEMORY || tag == T_PID ||
		    tag == T_UID || tag == T_SIGNO || tag == T_KIND)
			proto_put_u32(&b, tag, (uint32_t)atoi(strs[i + 1]));
		else
			proto_put_str(&b, tag, strs[i + 1]);
	}
	proto_end(&b);
	err[0] = '\0';
	int r = priv_decode(b.data, b.len, nfds, &bounds, &req, err, 512);
	pbuf_release(&b);
	return r;
}

#define S(x) #x
#define SPAWN_BASE S(9), "sbx_1-00", S(10), "1", S(11), "512"

static void test_decode_refuses(void)
{
	char err[512];
	const char *ok[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18), "/usr/bin/qemu-system-x86_64",
			     S(16), "/s/snapshots/fork-1/mem", NULL };
	CHECK(decode(PR_SPAWN, 1, ok, err) == 0);
	CHECK(req.argc == 1 && req.argv[1] == NULL && req.nrw == 1);
	const char *ckp[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18), "/usr/bin/qemu-system-x86_64",
			      S(16), "/s/checkpoints/ckp_1/mem", NULL };
	CHECK(decode(PR_SPAWN, 1, ckp, err) == 0);
	CHECK(decode(PR_SPAWN, 0, ok, err) == -EINVAL); /* no log descriptor */
	const char *sh[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18), "/bin/sh", NULL };
	CHECK(decode(PR_SPAWN, 1, sh, err) == -EINVAL && strstr(err, "not the QEMU configured"));
	const char *etc[] = { SPAWN_BASE, S(13), "/etc", S(18), "/usr/bin/qemu-system-x86_64", NULL };
	CHECK(decode(PR_SPAWN, 1, etc, err) == -EINVAL && strstr(err, "run directory"));
	const char *up[] = { SPAWN_BASE, S(13), "/s/vms/..", S(18), "/usr/bin/qemu-system-x86_64",
			     NULL };
	CHECK(decode(PR_SPAWN, 1, up, err) == -EINVAL);
	const char *deep[] = { SPAWN_BASE, S(13), "/s/vms/a/b", S(18),
			       "/usr/bin/qemu-system-x86_64", NULL };
	CHECK(decode(PR_SPAWN, 1, deep, err) == -EINVAL);
	const char *shadow[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				 "/usr/bin/qemu-system-x86_64", S(16), "/etc/shadow", NULL };
	CHECK(decode(PR_SPAWN, 1, shadow, err) == -EINVAL && strstr(err, "/etc/shadow"));
	const char *climb[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				"/usr/bin/qemu-system-x86_64", S(16), "/c/../etc/passwd", NULL };
	CHECK(decode(PR_SPAWN, 1, climb, err) == -EINVAL);
	/* a snapshot's RAM mapped read-only: a snapshot's or a checkpoint's */
	const char *ram[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18), "/usr/bin/qemu-system-x86_64",
			      S(42), "/c/snapshots/python-1/mem", NULL };
	CHECK(decode(PR_SPAWN, 1, ram, err) == 0 && !strcmp(req.ram_ro, "/c/snapshots/python-1/mem"));
	const char *ram_etc[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				  "/usr/bin/qemu-system-x86_64", S(42), "/g/bzImage", NULL };
	CHECK(decode(PR_SPAWN, 1, ram_etc, err) == -EINVAL && strstr(err, "/g/bzImage"));
	/* or the base a pause of its own run directory linked (ramdiff.h) */
	const char *ram_base[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				   "/usr/bin/qemu-system-x86_64", S(42), "/s/vms/sbx_1/base", NULL };
	CHECK(decode(PR_SPAWN, 1, ram_base, err) == 0 && !strcmp(req.ram_ro, "/s/vms/sbx_1/base"));
	const char *ram_other[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				    "/usr/bin/qemu-system-x86_64", S(42), "/s/vms/sbx_2/base", NULL };
	CHECK(decode(PR_SPAWN, 1, ram_other, err) == -EINVAL && strstr(err, "sbx_2"));
	const char *ram_state[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
				    "/usr/bin/qemu-system-x86_64", S(42), "/s/vms/sbx_1/state", NULL };
	CHECK(decode(PR_SPAWN, 1, ram_state, err) == -EINVAL);
	/* a jailed QEMU's memory: by pid, as a kill is */
	const char *mem[] = { S(19), "1234", S(20), "1003", NULL };
	CHECK(decode(PR_MEM, 0, mem, err) == 0 && req.pid == 1234 && req.uid == 1003);
	CHECK(decode(PR_PAGEMAP, 0, mem, err) == 0 && req.pid == 1234);
	const char *pid1[] = { S(19), "1", S(20), "1003", NULL };
	CHECK(decode(PR_MEM, 0, pid1, err) == -EINVAL);
	const char *no_uid[] = { S(19), "1234", NULL };
	CHECK(decode(PR_MEM, 0, no_uid, err) == -EINVAL);
	const char *mem_root[] = { S(19), "1234", S(20), "0", NULL };
	CHECK(decode(PR_PAGEMAP, 0, mem_root, err) == -EINVAL && strstr(err, "jail id"));
	const char *cg[] = { S(9), "../../x", S(10), "1", S(11), "512", S(13), "/s/vms/sbx_1",
			     S(18), "/usr/bin/qemu-system-x86_64", NULL };
	CHECK(decode(PR_SPAWN, 1, cg, err) == -EINVAL && strstr(err, "cgroup"));
	const char *tap[] = { SPAWN_BASE, S(13), "/s/vms/sbx_1", S(18),
			      "/usr/bin/qemu-system-x86_64", S(17), "eth0", S(1), "2", NULL };
	CHECK(decode(PR_SPAWN, 1, tap, err) == -EINVAL && strstr(err, "TAP"));
	/* Signals: SIGKILL and SIGTERM only, never to pid 1. */
	const char *stop[] = { S(19), "4242", S(21), "19", NULL };
	CHECK(decode(PR_KILL, 0, stop, err) == -EINVAL);
	const char *init[] = { S(19), "1", S(21), "9", NULL };
	CHECK(decode(PR_KILL, 0, init, err) == -EINVAL);
	const char *kill9[] = { S(19), "4242", S(21), "9", NULL };
	CHECK(decode(PR_KILL, 0, kill9, err) == 0);
	/* Ids: only the jail's. */
	const char *root[] = { S(20), "0", S(9), "x", NULL };
	CHECK(decode(PR_RELEASE, 0, root, err) == -EINVAL && strstr(err, "jail id"));
	const char *past[] = { S(20), "1010", S(9), "x", NULL };
	CHECK(decode(PR_RELEASE, 0, past, err) == -EINVAL);
	/* Slots: within the range; an attribute the type does not take. */
	const char *slot9[] = { S(1), "9", NULL };
	CHECK(decode(PR_NS_OPEN, 0, slot9, err) == -EINVAL && strstr(err, "slot"));
	const char *extra[] = { S(1), "1", S(19), "5", NULL };
	CHECK(decode(PR_NS_OPEN, 0, extra, err) == -EINVAL);
	const char *twice[] = { S(1), "1", S(1), "2", NULL };
	CHECK(decode(PR_NS_OPEN, 0, twice, err) == -EINVAL && strstr(err, "twice"));
	const char *none[] = { NULL };
	CHECK(decode(PR_OK, 0, none, err) == -EINVAL && strstr(err, "unknown"));
	CHECK(decode(99, 0, none, err) == -EINVAL);
	CHECK(decode(PR_CONFIG, 0, none, err) == -EINVAL); /* read at start only */
}

static char dir[64];

static int read_file(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(out, 1, cap - 1, f);
	out[n] = '\0';
	fclose(f);
	return (int)n;
}

static const char *field(const char *status, const char *name)
{
	const char *at = strstr(status, name);
	return at ? at + strlen(name) : "";
}

/* A directory of the daemon's shape in /tmp and a helper's configuration
 * for it: 0, or -1 when not root (then the case fails). */
static char sdir[128], cdir[128], rdir[160], ldir[160], jdir[160];

static int setup_dirs(struct priv_config *c)
{
	if (!CHECK(geteuid() == 0)) {
		t_note("test_priv: the helper's jail needs root");
		return -1;
	}
	snprintf(dir, sizeof(dir), "/tmp/cpuos-test-priv-%d", (int)getpid());
	snprintf(sdir, sizeof(sdir), "%s/sdir", dir);
	snprintf(cdir, sizeof(cdir), "%s/cdir", dir);
	snprintf(rdir, sizeof(rdir), "%s/vms/t1", sdir);
	snprintf(ldir, sizeof(ldir), "%s/ldir", dir);
	snprintf(jdir, sizeof(jdir), "%s/jail", sdir);
	mkdir(dir, 0755);
	mkdir(sdir, 0755);
	mkdir(cdir, 0755);
	char vms[160];
	snprintf(vms, sizeof(vms), "%s/vms", sdir);
	mkdir(vms, 0700);
	mkdir(rdir, 0700);
	*c = (struct priv_config){
		.jail = 1, .jail_first = 1800000000, .jail_count = 16, .jail_root = jdir,
		.jail_locks = ldir, .state_dir = sdir, .cache_dir = cdir,
		.qemu = "/usr/bin/sleep",
	};
	return 0;
}

static void remove_dirs(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		t_note("could not remove %s", dir);
}

static void test_helper(void)
{
	struct priv_config c;
	if (setup_dirs(&c) < 0)
		return;
	struct priv *p = NULL;
	char err[512] = "", buf[4096], path[64];
	if (!CHECK(priv_start(&c, &p, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	pid_t helper = priv_pid(p);
	/* ps shows what it is; it is this binary executed again, not a
	 * fork's copy of this process. */
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)helper);
	int n = read_file(path, buf, sizeof(buf));
	CHECK(n > 0 && !strcmp(buf, "cpuosd: priv") &&
	      n > (int)strlen(buf) + 1 && !strcmp(buf + strlen(buf) + 1, "--priv-helper"));
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)helper);
	char exe[256] = "", self[256] = "";
	CHECK(readlink(path, exe, sizeof(exe) - 1) > 0 &&
	      readlink("/proc/self/exe", self, sizeof(self) - 1) > 0 && !strcmp(exe, self));
	CHECK(strstr(priv_describe(p), "ids 1800000001-1800000015") != NULL);

	struct jail_spec s = { .name = "t1", .vcpus = 1, .memory_mb = 64, .run_dir = rdir,
			       .own_netns = 1 };
	char *argv[] = { "/usr/bin/sleep", "30", NULL };
	pid_t pid = 0;
	uid_t uid = 0;
	int pidfd = -1, st = 0;
	CHECK(priv_spawn(p, &s, -1, argv, 2, &pid, &uid, &pidfd, err, sizeof(err)) == 0);
	if (!CHECK(pid > 0 && pidfd >= 0)) {
		t_note("%s", err);
		priv_close(p);
		return;
	}
	CHECK(uid > 1800000000 && uid < 1800000016);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	for (int i = 0; i < 100; i++) { /* until the exec */
		read_file(path, buf, sizeof(buf));
		if (strstr(buf, "Name:\tsleep"))
			break;
		usleep(10000);
	}
	char want[64];
	snprintf(want, sizeof(want), "\t%u\t", (unsigned)uid);
	CHECK(!strncmp(field(buf, "Uid:"), want, strlen(want)));
	CHECK(!strncmp(field(buf, "CapEff:\t"), "0000000000000000", 16));
	CHECK(!strncmp(field(buf, "NoNewPrivs:\t"), "1", 1));
	CHECK(priv_reap(p, pid, &st) == 0); /* running */

	/* Not a jail's process: this one runs as root. */
	CHECK(priv_kill(p, getpid(), SIGKILL) == -EPERM);
	CHECK(priv_hold(p, getpid(), &uid) < 0);
	/* A link in the daemon's directories is not followed, even to a
	 * file a jail could read: a rdir directory that is one, a RAM file
	 * that is one. */
	pid_t p2;
	uid_t u2;
	int fd2;
	char link[200], target[200];
	snprintf(link, sizeof(link), "%s/vms/t2", sdir);
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	mkdir(target, 0700);
	CHECK(symlink(target, link) == 0);
	struct jail_spec linked = s;
	linked.run_dir = link;
	linked.name = "t2";
	CHECK(priv_spawn(p, &linked, -1, argv, 2, &p2, &u2, &fd2, err, sizeof(err)) == -ELOOP);
	CHECK(strstr(err, "t2") != NULL);
	char mem[200];
	snprintf(mem, sizeof(mem), "%s/mem", rdir);
	CHECK(symlink("/etc/passwd", mem) == 0);
	linked = s;
	linked.rw[0] = mem;
	CHECK(priv_spawn(p, &linked, -1, argv, 2, &p2, &u2, &fd2, err, sizeof(err)) == -ELOOP);
	/* ... and what is read through one (a template's image links into
	 * the cache of builds) must be a file of root's, open to all: not a
	 * file of anyone else's, not a directory. */
	char ro[200], other[200];
	snprintf(ro, sizeof(ro), "%s/kernel", sdir);
	snprintf(other, sizeof(other), "%s/users-file", dir);
	int ofd = open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(ofd >= 0 && fchown(ofd, 12345, 12345) == 0);
	if (ofd >= 0)
		close(ofd);
	const char *targets[] = { other, "/" };
	for (int i = 0; i < 2; i++) {
		unlink(ro);
		CHECK(symlink(targets[i], ro) == 0);
		linked = s;
		linked.ro[0] = ro;
		err[0] = '\0';
		CHECK(priv_spawn(p, &linked, -1, argv, 2, &p2, &u2, &fd2, err, sizeof(err)) < 0);
		CHECK(strstr(err, "kernel") != NULL);
	}
	/* The same calls as the runner's launch ops. */
	const struct launch_ops *ops = priv_launch_ops(p);
	CHECK(priv_launch_ops(NULL) == NULL);
	CHECK(ops && ops->jails && ops->ctx == p && ops->hold && ops->release);
	CHECK(ops->signal(ops->ctx, getpid(), SIGKILL) == -EPERM);

	CHECK(priv_kill(p, pid, SIGKILL) == 0);
	struct pollfd pf = { .fd = pidfd, .events = POLLIN };
	CHECK(poll(&pf, 1, 5000) == 1);
	int reaped = 0;
	for (int i = 0; i < 100 && (reaped = ops->reap(ops->ctx, pid, &st)) == 0; i++)
		usleep(10000);
	CHECK(reaped == 1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(priv_reap(p, pid, &st) == -ECHILD); /* once */
	CHECK(priv_release(p, uid, "t1") == 0);
	close(pidfd);
	priv_close(p);
	CHECK(kill(helper, 0) < 0 && errno == ESRCH); /* gone with its socket */
	remove_dirs();
}

/* SIGTERM to this process (the helper's or the client's own, on a
 * helper gone): blocked, so it can be waited for here. */
static int got_sigterm(int ms)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	return sigtimedwait(&set, NULL, &ts) == SIGTERM;
}

static void block_sigterm(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

/* The daemon's end of the helper's socket: the one SOCK_SEQPACKET here. */
static int helper_socket(void)
{
	for (int fd = 3; fd < 256; fd++) {
		int type = 0;
		socklen_t len = sizeof(type);
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET)
			return fd;
	}
	return -1;
}

/* What a daemon that is no longer itself could send: a request out of
 * bounds (a shell for QEMU), or bytes that are no frame. Either ends the
 * helper, which sends the daemon SIGTERM; the client then refuses every
 * call. */
static void test_helper_refuses(void)
{
	struct priv_config c;
	if (setup_dirs(&c) < 0)
		return;
	block_sigterm();
	for (int round = 0; round < 2; round++) {
		struct priv *p = NULL;
		char err[512] = "";
		if (!CHECK(priv_start(&c, &p, err, sizeof(err)) == 0)) {
			t_note("%s", err);
			break;
		}
		pid_t helper = priv_pid(p);
		struct jail_spec s = { .name = "t1", .vcpus = 1, .memory_mb = 64, .run_dir = rdir,
				       .own_netns = 1 };
		char *sh[] = { "/bin/sh", "-c", "id", NULL };
		pid_t pid;
		uid_t uid;
		int pidfd;
		if (round == 0) {
			CHECK(priv_spawn(p, &s, -1, sh, 2, &pid, &uid, &pidfd, err, sizeof(err)) ==
			      -EPIPE);
		} else {
			static const char junk[] = "not a frame of the helper's protocol";
			int fd = helper_socket();
			CHECK(fd >= 0 && send(fd, junk, sizeof(junk), 0) == (ssize_t)sizeof(junk));
		}
		CHECK(got_sigterm(5000));
		int st = -1;
		CHECK(waitpid(helper, &st, 0) == helper && WIFEXITED(st) && WEXITSTATUS(st) == 3);
		/* Nothing more goes through; the client says it once, with
		 * its own SIGTERM. */
		CHECK(priv_reap(p, 4242, &st) == -EPIPE);
		got_sigterm(0);
		CHECK(priv_spawn(p, &s, -1, sh, 2, &pid, &uid, &pidfd, err, sizeof(err)) == -EPIPE);
		CHECK(!got_sigterm(0));
		priv_close(p);
	}
	remove_dirs();
}

/* cpuos-netd's socket to the helper: what it may ask is a dial socket and
 * resolved addresses; anything else ends the helper and the daemon. Its
 * socket closing ends nothing. */
static void test_helper_netd(void)
{
	struct priv_config c;
	if (setup_dirs(&c) < 0)
		return;
	block_sigterm();
	for (int round = 0; round < 2; round++) {
		int sv[2];
		if (!CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0))
			break;
		c.netd_sock = sv[1];
		struct priv *p = NULL, *n = NULL;
		char err[512] = "";
		int ok = CHECK(priv_start(&c, &p, err, sizeof(err)) == 0);
		close(sv[1]);
		if (!ok || !CHECK(priv_attach(sv[0], 0, &n) == 0)) {
			t_note("%s", err);
			close(sv[0]);
			priv_close(p);
			break;
		}
		pid_t helper = priv_pid(p);
		int st = -1;
		if (round == 0) {
			/* gone (priv_close closes its socket): the daemon is
			 * served on */
			priv_close(n);
			CHECK(priv_reap(p, 4242, &st) == -ECHILD);
			CHECK(!got_sigterm(0));
			priv_close(p);
			CHECK(kill(helper, 0) < 0 && errno == ESRCH);
			continue;
		}
		/* a reap is the daemon's to ask, not netd's */
		CHECK(priv_reap(n, 4242, &st) == -EPIPE);
		CHECK(got_sigterm(5000));
		CHECK(waitpid(helper, &st, 0) == helper && WIFEXITED(st) && WEXITSTATUS(st) == 3);
		priv_close(n);
		priv_close(p);
	}
	remove_dirs();
}

/* A helper that does not answer in its time (stopped here) is killed,
 * and the daemon ends. */
static void test_helper_timeout(void)
{
	struct priv_config c;
	if (setup_dirs(&c) < 0)
		return;
	c.timeout_ms = 300;
	block_sigterm();
	struct priv *p = NULL;
	char err[512] = "";
	if (!CHECK(priv_start(&c, &p, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		remove_dirs();
		return;
	}
	pid_t helper = priv_pid(p);
	int st = -1;
	CHECK(priv_reap(p, 4242, &st) < 0); /* answered: not its child */
	CHECK(kill(helper, SIGSTOP) == 0);
	err[0] = '\0';
	CHECK(priv_kill(p, 4242, SIGKILL) == -EPIPE);
	CHECK(got_sigterm(1000));
	CHECK(waitpid(helper, &st, 0) == helper && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	priv_close(p);
	remove_dirs();
}

/* The daemon's own tree becomes its own at the drop, but nothing a jail
 * could link into it does: a symlink and a hard link to a root file
 * outside stay root's; a jail id's file becomes the group's. */
static void test_drop_walk(void)
{
	if (!CHECK(geteuid() == 0)) {
		t_note("test_priv: the drop needs root");
		return;
	}
	char top[64], state[96], path[160], outside[96];
	snprintf(top, sizeof(top), "/tmp/cpuos-test-drop-%d", (int)getpid());
	snprintf(state, sizeof(state), "%s/state", top);
	snprintf(outside, sizeof(outside), "%s/outside", top);
	mkdir(top, 0755);
	mkdir(state, 0755);
	snprintf(path, sizeof(path), "%s/sub", state);
	mkdir(path, 0755);
	const uid_t uid = 1800000000;
	const char *files[] = { "a", "sub/b", "jail" };
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", state, files[i]);
		FILE *f = fopen(path, "w");
		if (f)
			fclose(f);
	}
	snprintf(path, sizeof(path), "%s/jail", state);
	CHECK(chown(path, uid + 3, uid + 3) == 0 && chmod(path, 0600) == 0);
	FILE *f = fopen(outside, "w");
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/sym", state);
	CHECK(symlink(outside, path) == 0);
	snprintf(path, sizeof(path), "%s/hard", state);
	CHECK(link(outside, path) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		const char *dirs[] = { state, NULL };
		char err[256];
		_exit(priv_drop(uid, 16, dirs, err, sizeof(err)) == 0 && getuid() == uid &&
		      geteuid() == uid && getgid() == uid ? 0 : 1);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct stat s1;
	CHECK(stat(state, &s1) == 0 && s1.st_uid == uid);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", state, files[i]);
		CHECK(stat(path, &s1) == 0 && s1.st_uid == uid && s1.st_gid == uid);
	}
	snprintf(path, sizeof(path), "%s/jail", state);
	CHECK(stat(path, &s1) == 0 && s1.st_uid == uid + 3 && s1.st_gid == uid &&
	      (s1.st_mode & 0777) == 0660);
	CHECK(stat(outside, &s1) == 0 && s1.st_uid == 0 && s1.st_gid == 0); /* through neither link */
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
	if (system(cmd) != 0)
		t_note("could not remove %s", top);
}

/* A kept QEMU build is accepted as a spawn's binary only in the kept
 * builds' directory, named by a build id, and root's all the way down:
 * the daemon without root writes beside it. */
static void test_kept_build(void)
{
	char tmp[] = "/tmp/cpuos-kept-XXXXXX", builds[64], bin[160], other[160], cmd[300];
	char got[PATH_MAX], want[100];
	CHECK(mkdtemp(tmp) != NULL);
	snprintf(builds, sizeof(builds), "%s/qemu", tmp);
	snprintf(want, sizeof(want), "%s/0123456789abcdef", builds);
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; mkdir -p qemu/0123456789abcdef/bin qemu/0123456789ABCDEF/bin; "
		 "chmod -R 0755 qemu; touch qemu/0123456789abcdef/bin/qemu-system-x86_64 "
		 "qemu/0123456789ABCDEF/bin/qemu-system-x86_64",
		 tmp);
	CHECK(system(cmd) == 0);
	struct priv_bounds b = bounds;
	b.qemu_builds = builds;
	snprintf(bin, sizeof(bin), "%s/0123456789abcdef/bin/qemu-system-x86_64", builds);
	/* root's only: a test run without root sees its own files refused */
	if (getuid() == 0)
		CHECK(priv_kept_build(&b, bin, got) && !strcmp(got, want));
	else
		CHECK(!priv_kept_build(&b, bin, got));
	snprintf(other, sizeof(other), "%s/0123456789ABCDEF/bin/qemu-system-x86_64", builds);
	CHECK(!priv_kept_build(&b, other, got)); /* not an id */
	snprintf(other, sizeof(other), "%s/0123456789abcdef/bin/../bin/qemu-system-x86_64", builds);
	CHECK(!priv_kept_build(&b, other, got));
	snprintf(other, sizeof(other), "%s/0123456789abcdef/bin/sh", builds);
	CHECK(!priv_kept_build(&b, other, got));
	CHECK(!priv_kept_build(&bounds, bin, got)); /* no kept builds configured */
	snprintf(cmd, sizeof(cmd), "chmod g+w %s/0123456789abcdef", builds);
	CHECK(system(cmd) == 0);
	CHECK(!priv_kept_build(&b, bin, got)); /* another may write it */
	snprintf(cmd, sizeof(cmd), "chmod g-w %s/0123456789abcdef && cd %s/0123456789abcdef/bin && "
		 "mv qemu-system-x86_64 q && ln -s q qemu-system-x86_64", builds, builds);
	CHECK(system(cmd) == 0);
	CHECK(!priv_kept_build(&b, bin, got)); /* a link */
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
	priv_helper_main(argc, argv); /* the helper's start: this binary again */
	static const struct t_case cases[] = {
		{ "priv_decode_refuses", test_decode_refuses },
		{ "priv_kept_build", test_kept_build },
		{ "priv_helper", test_helper },
		{ "priv_helper_refuses", test_helper_refuses },
		{ "priv_helper_timeout", test_helper_timeout },
		{ "priv_helper_netd", test_helper_netd },
		{ "priv_drop_walk", test_drop_walk },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
