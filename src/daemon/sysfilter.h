/*
 * sysfilter: cpuosd's own seccomp filter (libseccomp), loaded once root is
 * dropped and before any thread, so that every thread and every program
 * the daemon runs (mkfs.ext4, qemu-img) has it; cpuos-netd loads it too.
 * It allows the calls they make, by name, and answers ENOSYS to every
 * other, as a kernel without them would: libraries that probe for io_uring,
 * userfaultfd, bpf, perf or the keyrings do without, and clone3 (whose
 * flags are behind a pointer, out of a filter's sight) sends glibc back to
 * clone, whose flags are checked. It kills the process on the calls a
 * daemon that parses hostile HTTP, JSON, DNS and TLS never makes and an
 * attacker who took it over would reach the kernel through: namespaces
 * and mounts (clone with a namespace flag too), ptrace and other
 * processes' memory, modules, kexec, the clock, handles to files by inode,
 * a terminal's input queue (ioctl TIOCSTI); and any call of another
 * architecture (i386 or x32 numbers).
 *
 * With CPUOS_SYSFILTER_LOG=1 in its environment a call the list does not
 * name is allowed and logged by the kernel (audit type 1326, in dmesg):
 * how the list is checked against what the daemon does
 * (tests/e2e/syscalls.sh). docs/architecture.md, "Who holds what", says
 * what it leaves.
 */
#ifndef CPUOS_SYSFILTER_H
#define CPUOS_SYSFILTER_H

#include <stddef.h>

/* Loads the filter into this process (all its threads): 0, or -errno
 * with a reason. */
int sysfilter_load(char *err, size_t errlen);

#endif
