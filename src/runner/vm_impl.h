/*
 * vm_impl: what vm.c (start, pump, stop, attach) and vm_snap.c (pause,
 * snapshots, restores) share: the VM struct and the helpers each lends the
 * other. Included by those two files only.
 */
#ifndef CPUOS_VM_IMPL_H
#define CPUOS_VM_IMPL_H

#include "runner/console.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <stdint.h>

struct vm {
	char run_dir[256];
	pid_t pid;
	struct qmp *qmp;
	struct agentc *agent;
	struct console con;
	enum vm_state state;
	int stopping;  /* the host asked it to stop */
	/* A lost agent connection is made anew, with a backoff: a guest that
	 * breaks it on purpose costs us a connect now and then, no more. */
	int64_t reconnect_at; /* when to try; INT64_MAX: never */
	int backoff_ms;
	unsigned reconnects;
	int notice;    /* PN_POWEROFF / PN_REBOOT seen */
	int pausing;   /* vm_pause made QEMU quit */
	int ram_shared; /* RAM is a file of its own (a pause leaves it there) */
	/* Else the snapshot RAM file it maps copy-on-write ("" when not
	 * known), and whether QEMU opened that read-only (rom=off): then a
	 * pause saves only the pages the guest wrote over it (ramdiff.h). */
	char ram_base[300];
	char ram_base_sha[65]; /* its checksum where its snapshot said, else "" */
	int ram_readonly;
	int no_config;  /* QEMU writes states without a configuration section */
	struct snap_env env; /* what a snapshot of it depends on */
	char reason[256];
	struct vm_timings t;
	/* What started its QEMU or holds its id, and signals it. */
	const struct launch_ops *launch;
	int child;           /* QEMU is the launch ops' child, reaped through
			      * them; else taken over, only watched */
	uid_t jail_uid;      /* its jail id, held until QEMU is gone; 0: none */
	char cgroup[128];    /* its cgroup leaf */
	int pidfd;           /* readable once QEMU exited; -1: none (a kernel
			      * without pidfds) */
};


/* vm.c */
/* Reaps QEMU if it exited; waits up to wait_ms for it. 1 if it is gone. */
int vm__reap(struct vm *vm, int wait_ms);
/* SIGKILL to QEMU (through the launch ops that hold it). */
void vm__kill(struct vm *vm);
/* Sets the guest clock from the host's (fire and forget). */
void vm__send_time(struct vm *vm);

/* vm_snap.c */
/* How long a save or load may take. */
int vm__migrate_ms(const struct vm *vm);
/* Reads cfg->restore's manifest and lays out the files (see vm_snap.c);
 * mem gets the RAM file QEMU maps. */
int vm__prepare_restore(struct vm *vm, const struct vm_config *cfg, struct snap_manifest *m,
			char *mem, size_t memlen, char *err, size_t errlen);
/* A restore that maps a snapshot's RAM file read-only: the file linked
 * into the run directory as JAIL_RAM_BASE, and mem (memlen bytes) and
 * ram_base made that link, so the VM's pauses save the pages written
 * over that very file whatever becomes of the snapshot; where no link
 * can be made (another file system) both stay the snapshot's. */
void vm__link_base(struct vm *vm, char *mem, size_t memlen);
/* A snapshot of written pages in dir: its pages into the QEMU just
 * started on its base, before the device state (virtio reads its rings
 * from RAM as it loads). 0 or -errno. */
int vm__load_pages(struct vm *vm, const char *dir, char *err, size_t errlen);
/* Connects the agent of a restored guest, again until it answers. */
int vm__connect_restored(struct vm *vm, const char *path, char *err, size_t errlen);
/* P_RESTORED, first after a restore. */
int vm__send_restored(struct vm *vm, const struct vm_config *cfg);
/* A pause sealed in the run directory is dropped: the guest runs again. */
void vm__drop_pause(struct vm *vm);
/* vm_attach: a VM stopped by a cut-short save goes on (-EAGAIN: it
 * waits for a resume's state); what it was made with, read back from
 * QEMU's command line. */
int vm__go_on(struct vm *vm, char *err, size_t errlen);
int vm__env_from_cmdline(struct vm *vm, char *err, size_t errlen);

#endif
