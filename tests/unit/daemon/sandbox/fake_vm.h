/*
 * fake_vm: the runner's vm.h, faked for the sandbox layer's unit tests
 * (linked instead of src/runner/vm.c and vm_snap.c). A "VM" is cpuos-agent
 * in --listen mode ($CPUOS_AGENT, else build/guest/cpuos-agent) on
 * <run_dir>/agent.sock, so operations reach a real agent; pausing writes a
 * real manifest (snap_seal) and ends the agent, as QEMU ends; the test
 * makes the next start, pause or snapshot fail, or a VM end by itself.
 */
#ifndef CPUOS_TESTS_FAKE_VM_H
#define CPUOS_TESTS_FAKE_VM_H

#include "runner/vm.h"

struct fake_vm_ctl {
	int fail_start;    /* the next vm_start fails with this -errno */
	int fail_pause;    /* the next vm_pause fails (-EIO) ... */
	int pause_kills;   /* ... with QEMU gone after it, not running on */
	int fail_snapshot; /* the next vm_snapshot fails (-EIO) */
	unsigned starts, attaches, pauses, snapshots, stops, frees, detaches;
};
extern struct fake_vm_ctl fake_vm;

/* The VM running from run_dir ends by itself in state st (VM_POWEROFF,
 * VM_PANIC...), as its pump will see: 0, or -ENOENT when none runs there. */
int fake_vm_end(const char *run_dir, enum vm_state st);
/* The pid of the agent process standing for the VM of run_dir, or -1. */
int fake_vm_pid(const char *run_dir);
/* Seals run_dir as a whole pause would (a state file, a manifest): 0 or -errno. */
int fake_vm_seal(const char *run_dir);

#endif
