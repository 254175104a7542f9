/* sysfilter: cpuosd's seccomp filter (sysfilter.h). */
#include "daemon/sysfilter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
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

/* The kernel's larger surfaces, which libraries probe for (qemu-img
 * tries io_uring at start): ENOSYS, as from a kernel without them. */
static const char *const absent[] = {
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf",
	"perf_event_open", "keyctl", "add_key", "request_key",
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
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	if (!f) {
		snprintf(err, errlen, "cannot make a seccomp filter");
		return -ENOMEM;
	}
	int r = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r == 0)
		r = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
	for (size_t i = 0; r == 0 && i < sizeof(refused) / sizeof(refused[0]); i++)
		r = add(f, SCMP_ACT_KILL_PROCESS, refused[i], 0, NULL);
	for (size_t i = 0; r == 0 && i < sizeof(absent) / sizeof(absent[0]); i++)
		r = add(f, SCMP_ACT_ERRNO(ENOSYS), absent[i], 0, NULL);
#ifndef __SANITIZE_ADDRESS__
	/* LeakSanitizer stops the world at exit with ptrace: allowed in
	 * ASan builds only. */
	if (r == 0)
		r = add(f, SCMP_ACT_KILL_PROCESS, "ptrace", 0, NULL);
#endif
	/* clone: only without a new namespace, one rule per flag (a masked
	 * compare of several bits matches only all of them set); clone3,
	 * whose flags a filter cannot see, answers ENOSYS and glibc falls
	 * back to clone. */
	static const unsigned long ns[] = { CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
					    CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP };
	for (size_t i = 0; r == 0 && i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns[i], ns[i]);
		r = add(f, SCMP_ACT_KILL_PROCESS, "clone", 1, &c);
	}
	if (r == 0)
		r = add(f, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
	/* A terminal's input queue: what the daemon was started from. */
	struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_EQ, TIOCSTI);
	if (r == 0)
		r = add(f, SCMP_ACT_KILL_PROCESS, "ioctl", 1, &sti);
	if (r == 0)
		r = seccomp_load(f);
	seccomp_release(f);
	if (r < 0)
		snprintf(err, errlen, "cannot load cpuosd's seccomp filter: %s", strerror(-r));
	return r;
}
