/*
 * sysfilter: cpuosd's own seccomp filter (libseccomp), loaded once root is
 * dropped and before any thread, so that every thread and every program
 * the daemon runs (mkfs.ext4, qemu-img) has it. It kills the process on
 * the calls a daemon that parses hostile HTTP, JSON, DNS and TLS never
 * makes and an attacker who took it over would reach the kernel through:
 * namespaces and mounts, ptrace and other processes' memory, modules,
 * kexec, the clock, handles to files by inode, a terminal's input queue;
 * and any call of another architecture (i386 or x32 numbers). The larger
 * surfaces libraries probe for (io_uring, userfaultfd, bpf, perf,
 * keyrings) answer ENOSYS, as on a kernel without them. clone3 answers
 * ENOSYS too (its flags are behind a pointer, out of a filter's sight),
 * so glibc falls back to clone, whose flags are checked: no new
 * namespace.
 *
 * It is a list of what is refused, not of what is allowed: the programs
 * the daemon runs inherit it, and what they call is theirs to change.
 * docs/architecture.md, "Who holds what", says what it leaves.
 */
#ifndef CPUOS_SYSFILTER_H
#define CPUOS_SYSFILTER_H

#include <stddef.h>

/* Loads the filter into this process (all its threads): 0, or -errno
 * with a reason. */
int sysfilter_load(char *err, size_t errlen);

#endif
