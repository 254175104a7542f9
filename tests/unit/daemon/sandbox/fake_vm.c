/* fake_vm: see fake_vm.h. */
#include "tests/unit/daemon/sandbox/fake_vm.h"

#include "common/clock.h"
#include "common/fs.h"
#include "runner/agentc.h"
#include "runner/snap.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct fake_vm_ctl fake_vm;

struct vm {
	pid_t pid; /* the agent: what QEMU would be */
	char run_dir[256], sock[320];
	struct agentc *agent;
	int endfd;         /* the test ends the VM through it */
	enum vm_state state;
	enum vm_state end_as;
	struct vm *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct vm *live;

static void enlist(struct vm *vm)
{
	pthread_mutex_lock(&mu);
	vm->next = live;
	live = vm;
	pthread_mutex_unlock(&mu);
}

static void delist(struct vm *vm)
{
	pthread_mutex_lock(&mu);
	for (struct vm **pp = &live; *pp; pp = &(*pp)->next)
		if (*pp == vm) {
			*pp = vm->next;
			break;
		}
	pthread_mutex_unlock(&mu);
}

static const char *agent_path(void)
{
	const char *p = getenv("CPUOS_AGENT");
	return p && *p ? p : "build/guest/cpuos-agent";
}

/* Waits up to ms for pid to end and reaps it: 1 when it did. */
static int reap(pid_t pid, int ms)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, ms);
		close(fd);
	}
	return waitpid(pid, NULL, WNOHANG) == pid || (kill(pid, 0) < 0 && errno == ESRCH);
}

static void end_agent(struct vm *vm)
{
	if (vm->agent) {
		agentc_close(vm->agent);
		vm->agent = NULL;
	}
	if (vm->pid > 0) {
		kill(vm->pid, SIGKILL);
		reap(vm->pid, 5000);
		vm->pid = -1;
	}
}

static int connect_agent(struct vm *vm, char *err, size_t errlen)
{
	int r = agentc_connect(vm->sock, 5000, &vm->agent, err, errlen);
	if (r == 0 && vm->endfd < 0 && (vm->endfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		r = -errno;
	return r;
}

int vm_start(const struct vm_config *cfg, struct vm **out, char *err, size_t errlen)
{
	if (fake_vm.fail_start) {
		int r = fake_vm.fail_start;
		fake_vm.fail_start = 0;
		snprintf(err, errlen, "the fake VM did not start: %s", strerror(-r));
		return r;
	}
	struct snap_manifest m;
	if (cfg->restore && snap_load(cfg->restore, &m, 0, err, errlen) < 0)
		return -EBADMSG;
	struct vm *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->endfd = -1;
	snprintf(vm->run_dir, sizeof(vm->run_dir), "%s", cfg->run_dir);
	snprintf(vm->sock, sizeof(vm->sock), "%s/agent.sock", cfg->run_dir);
	fs_mkdir_p(cfg->run_dir, 0700, (uid_t)-1, (gid_t)-1);
	unlink(vm->sock);
	char log[400];
	snprintf(log, sizeof(log), "%s/agent.log", cfg->run_dir);
	vm->pid = fork();
	if (vm->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		setpgid(0, 0);
		execl(agent_path(), agent_path(), "--listen", vm->sock, (char *)NULL);
		_exit(127);
	}
	int r = vm->pid < 0 ? -errno : connect_agent(vm, err, errlen);
	if (r < 0) {
		end_agent(vm);
		free(vm);
		return r;
	}
	vm->state = VM_RUNNING;
	fake_vm.starts++;
	enlist(vm);
	*out = vm;
	return 0;
}

int vm_attach(const char *run_dir, pid_t pid, const struct launch_ops *launch, struct vm **out,
	      char *err, size_t errlen)
{
	(void)launch;
	struct vm *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->endfd = -1;
	vm->pid = pid;
	snprintf(vm->run_dir, sizeof(vm->run_dir), "%s", run_dir);
	snprintf(vm->sock, sizeof(vm->sock), "%s/agent.sock", run_dir);
	int r = connect_agent(vm, err, errlen);
	if (r < 0) {
		free(vm);
		return r;
	}
	vm->state = VM_RUNNING;
	fake_vm.attaches++;
	enlist(vm);
	*out = vm;
	return 0;
}

int vm_pollfds(struct vm *vm, struct pollfd *fds)
{
	int n = 0;
	if (vm->agent)
		fds[n++] = (struct pollfd){ .fd = agentc_fd(vm->agent), .events = agentc_events(vm->agent) };
	fds[n++] = (struct pollfd){ .fd = vm->endfd, .events = POLLIN };
	return n;
}

int vm_timeout(const struct vm *vm)
{
	(void)vm;
	return -1;
}

int vm_handle(struct vm *vm, const struct pollfd *fds, int n)
{
	for (int i = 0; i < n; i++) {
		if (!fds[i].revents)
			continue;
		if (fds[i].fd == vm->endfd) {
			vm->state = vm->end_as;
			end_agent(vm);
			return -ESHUTDOWN;
		}
		if (vm->agent && fds[i].fd == agentc_fd(vm->agent) &&
		    agentc_io(vm->agent, fds[i].revents) < 0) {
			vm->state = VM_CRASHED;
			end_agent(vm);
			return -ESHUTDOWN;
		}
	}
	return vm->state == VM_RUNNING ? 0 : -ESHUTDOWN;
}

int vm_wait(struct vm *vm, int timeout_ms)
{
	return vm->pid <= 0 || reap(vm->pid, timeout_ms);
}

void vm_drop_agent(struct vm *vm)
{
	if (vm->agent) {
		agentc_close(vm->agent);
		vm->agent = NULL;
	}
}

int vm_run(struct vm *vm, const int *done, int timeout_ms)
{
	if (!vm->agent)
		return -ESHUTDOWN;
	return agentc_wait(vm->agent, done, timeout_ms);
}

int vm_stop(struct vm *vm, int grace_ms)
{
	(void)grace_ms;
	end_agent(vm);
	if (vm->state == VM_RUNNING)
		vm->state = VM_STOPPED;
	fake_vm.stops++;
	return 0;
}

int fake_vm_seal(const char *run_dir)
{
	char path[400], err[256];
	snprintf(path, sizeof(path), "%s/state", run_dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "fake device state\n", 18) != 18) {
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	close(fd);
	snprintf(path, sizeof(path), "%s/disk.qcow2", run_dir);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return -errno;
	close(fd);
	struct snap_manifest m = { .env = { .vcpus = 1, .memory_mb = 512 } };
	snprintf(m.files[SNAP_STATE].name, sizeof(m.files[SNAP_STATE].name), "state");
	snprintf(m.files[SNAP_DISK].name, sizeof(m.files[SNAP_DISK].name), "disk.qcow2");
	return snap_seal(run_dir, &m, err, sizeof(err));
}

int vm_pause(struct vm *vm, char *err, size_t errlen)
{
	if (fake_vm.fail_pause) {
		fake_vm.fail_pause = 0;
		snprintf(err, errlen, "the fake VM did not pause");
		if (fake_vm.pause_kills) {
			fake_vm.pause_kills = 0;
			end_agent(vm);
			vm->state = VM_CRASHED;
		} else if (!vm->agent) { /* it runs on: as vm.c, it talks to the agent again */
			char e2[256];
			connect_agent(vm, e2, sizeof(e2));
		}
		return -EIO;
	}
	int r = fake_vm_seal(vm->run_dir);
	if (r < 0) {
		snprintf(err, errlen, "cannot seal '%s': %s", vm->run_dir, strerror(-r));
		return r;
	}
	end_agent(vm);
	vm->state = VM_PAUSED;
	fake_vm.pauses++;
	return 0;
}

int vm_snapshot(struct vm *vm, const char *dir, int sealed, char *err, size_t errlen)
{
	(void)vm;
	(void)sealed;
	if (fake_vm.fail_snapshot) {
		fake_vm.fail_snapshot = 0;
		snprintf(err, errlen, "the fake VM took no snapshot");
		return -EIO;
	}
	fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1);
	int r = fake_vm_seal(dir);
	if (r < 0)
		snprintf(err, errlen, "cannot seal '%s': %s", dir, strerror(-r));
	else
		fake_vm.snapshots++;
	return r;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(path);
	return 0;
}

void vm_remove_files(const char *run_dir)
{
	nftw(run_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void vm_free(struct vm *vm, int keep)
{
	if (!vm)
		return;
	delist(vm);
	end_agent(vm);
	if (vm->endfd >= 0)
		close(vm->endfd);
	if (!keep)
		vm_remove_files(vm->run_dir);
	fake_vm.frees++;
	free(vm);
}

void vm_detach(struct vm *vm)
{
	if (!vm)
		return;
	delist(vm);
	if (vm->agent)
		agentc_close(vm->agent);
	if (vm->endfd >= 0)
		close(vm->endfd);
	fake_vm.detaches++;
	free(vm); /* the agent runs on, for a vm_attach */
}

struct agentc *vm_agent(struct vm *vm)
{
	return vm->agent;
}

enum vm_state vm_state(const struct vm *vm)
{
	return vm->state;
}

const char *vm_state_name(enum vm_state s)
{
	static const char *const names[] = { "booting", "running", "stopped", "poweroff",
					     "reboot",  "panic",   "crashed", "paused" };
	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

const char *vm_reason(const struct vm *vm)
{
	(void)vm;
	return "";
}

pid_t vm_pid(const struct vm *vm)
{
	return vm->pid;
}

const char *vm_run_dir(const struct vm *vm)
{
	return vm->run_dir;
}

int fake_vm_end(const char *run_dir, enum vm_state st)
{
	pthread_mutex_lock(&mu);
	struct vm *vm = live;
	while (vm && strcmp(vm->run_dir, run_dir))
		vm = vm->next;
	int r = vm ? 0 : -ENOENT;
	if (vm) {
		uint64_t one = 1;
		vm->end_as = st;
		if (write(vm->endfd, &one, sizeof(one)) != sizeof(one))
			r = -EIO;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

int fake_vm_pid(const char *run_dir)
{
	pthread_mutex_lock(&mu);
	struct vm *vm = live;
	while (vm && strcmp(vm->run_dir, run_dir))
		vm = vm->next;
	int pid = vm ? vm->pid : -1;
	pthread_mutex_unlock(&mu);
	return pid;
}
