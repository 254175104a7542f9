/* sysfilter: cpuosd's seccomp filter (sysfilter.h). */
#include "daemon/sysfilter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

/* What kills the daemon. By name, resolved by libseccomp for this
 * architecture; a name this libseccomp does not know is skipped. */
static const char *const refused[] = {
	/* namespaces, mounts, roots */
	"unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "open_tree",
	"move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	/* other processes' memory and registers (ptrace: see below) */
	"process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"fanotify_init",
	/* the machine's */
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "syslog", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtimex", "sethostname", "setdomainname", "quotactl", "quotactl_fd",
	"iopl", "ioperm", "vhangup", "uselib", "lookup_dcookie", "nfsservctl", "personality",
	/* files by handle, past every directory's permissions */
	"open_by_handle_at", "name_to_handle_at",
};

/* What answers ENOSYS, as on a kernel without it, also under
 * CPUOS_SYSFILTER_LOG: probed by libraries that then fall back (glibc
 * from clone3 to clone) or do without (qemu-img without io_uring). */
static const char *const absent[] = {
	"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	"bpf", "perf_event_open", "add_key", "request_key", "keyctl",
};

/* What the daemon, cpuos-netd and the programs the daemon runs
 * (mkfs.ext4, qemu-img) call: nothing else is allowed, and a call named
 * nowhere answers ENOSYS too. Found by running the end-to-end suite with
 * the filter's default set to log (CPUOS_SYSFILTER_LOG=1, sysfilter.h;
 * tests/e2e/syscalls.sh). */
static const char *const allowed[] = {
	/* files */
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
	"preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range",
	"lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
	"faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd",
	"chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
	"renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat",
	"chown", "fchown", "lchown", "fchownat", "umask", "truncate", "ftruncate", "fallocate",
	"fsync", "fdatasync", "syncfs", "sync_file_range", "fadvise64", "readahead", "flock",
	"fcntl", "dup", "dup2", "dup3", "pipe", "pipe2", "sendfile", "splice", "tee",
	"copy_file_range", "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat",
	"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
	"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
	"memfd_create", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	/* memory */
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mlock",
	"munlock", "mlock2", "get_mempolicy", "set_mempolicy", "membarrier",
	/* waiting, time, signals */
	"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
	"epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd",
	"signalfd4", "timerfd_create", "timerfd_settime", "timerfd_gettime", "futex",
	"futex_waitv", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
	"gettimeofday", "time", "alarm", "getitimer", "setitimer", "timer_create",
	"timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete", "rt_sigaction",
	"rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
	"rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "pause", "restart_syscall",
	"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal",
	/* processes and threads (clone and ioctl: below, by their arguments) */
	"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
	"set_tid_address", "set_robust_list", "get_robust_list", "rseq", "arch_prctl", "prctl",
	"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
	"sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min", "getcpu",
	"getpriority", "setpriority", "ioprio_get", "ioprio_set", "getrlimit", "setrlimit",
	"prlimit64", "getrusage", "times", "sysinfo", "uname", "getrandom", "capget",
	/* ids: the daemon's own, which it may only give up */
	"getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
	"getresgid", "getgroups", "getpgid", "getpgrp", "getsid", "setsid", "setpgid",
	/* sockets */
	"socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "shutdown",
	"getsockname", "getpeername", "setsockopt", "getsockopt", "sendto", "recvfrom",
	"sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
};

static int add(scmp_filter_ctx f, uint32_t action, const char *name, unsigned n,
	       const struct scmp_arg_cmp *cmp)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0;
	int r = seccomp_rule_add_array(f, action, nr, n, cmp);
	/* A pseudo-call of libseccomp's with no number here. */
	return r == -EDOM || r == -EFAULT ? 0 : r;
}

int sysfilter_load(char *err, size_t errlen)
{
	/* Of another architecture (i386 or x32 numbers through int 0x80 or
	 * the x32 bit): killed, since nothing is checked there. */
	const char *log = getenv("CPUOS_SYSFILTER_LOG");
	uint32_t other = log && !strcmp(log, "1") ? SCMP_ACT_LOG : SCMP_ACT_ERRNO(ENOSYS);
	scmp_filter_ctx f = seccomp_init(other);
	if (!f) {
		snprintf(err, errlen, "cannot make a seccomp filter");
		return -ENOMEM;
	}
	int r = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r == 0)
		r = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
	for (size_t i = 0; r == 0 && i < sizeof(refused) / sizeof(refused[0]); i++)
		r = add(f, SCMP_ACT_KILL_PROCESS, refused[i], 0, NULL);
	/* (libseccomp refuses a rule whose action is the default's) */
	for (size_t i = 0; r == 0 && other == SCMP_ACT_LOG && i < sizeof(absent) / sizeof(absent[0]); i++)
		r = add(f, SCMP_ACT_ERRNO(ENOSYS), absent[i], 0, NULL);
	for (size_t i = 0; r == 0 && i < sizeof(allowed) / sizeof(allowed[0]); i++)
		r = add(f, SCMP_ACT_ALLOW, allowed[i], 0, NULL);
	/* LeakSanitizer stops the world at exit with ptrace: allowed in
	 * ASan builds only. */
#ifdef __SANITIZE_ADDRESS__
	if (r == 0)
		r = add(f, SCMP_ACT_ALLOW, "ptrace", 0, NULL);
#else
	if (r == 0)
		r = add(f, SCMP_ACT_KILL_PROCESS, "ptrace", 0, NULL);
#endif
	/* clone: only without a new namespace, one rule per flag (a masked
	 * compare of several bits matches only all of them set); clone3,
	 * whose flags a filter cannot see, is absent (above). */
	static const unsigned long ns[] = { CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
					    CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP };
	unsigned long any_ns = 0;
	for (size_t i = 0; r == 0 && i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns[i], ns[i]);
		r = add(f, SCMP_ACT_KILL_PROCESS, "clone", 1, &c);
		any_ns |= ns[i];
	}
	struct scmp_arg_cmp no_ns = SCMP_A0(SCMP_CMP_MASKED_EQ, any_ns, 0);
	if (r == 0)
		r = add(f, SCMP_ACT_ALLOW, "clone", 1, &no_ns);
	/* A terminal's input queue: what the daemon was started from. */
	struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_EQ, TIOCSTI);
	struct scmp_arg_cmp not_sti = SCMP_A1(SCMP_CMP_NE, TIOCSTI);
	if (r == 0)
		r = add(f, SCMP_ACT_KILL_PROCESS, "ioctl", 1, &sti);
	if (r == 0)
		r = add(f, SCMP_ACT_ALLOW, "ioctl", 1, &not_sti);
	if (r == 0)
		r = seccomp_load(f);
	seccomp_release(f);
	if (r < 0)
		snprintf(err, errlen, "cannot load cpuosd's seccomp filter: %s", strerror(-r));
	return r;
}
