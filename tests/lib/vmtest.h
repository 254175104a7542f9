/*
 * vmtest: helpers for tests and benchmarks that drive real microVMs through
 * the runner: locating the built guest, booting, and running commands and
 * file operations synchronously while collecting their frames.
 */
#ifndef CPUOS_VMTEST_H
#define CPUOS_VMTEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"
#include "runner/vm.h"

struct cmd {
	const char *shell;   /* /bin/sh -c STRING, or */
	const char *const *argv;
	const char *user;
	const void *stdin_data; /* fed then closed, when stdin_len or stdin_eof */
	size_t stdin_len;
	int stdin_eof;
	uint64_t timeout_ms;
	int background;
};

struct result {
	int done;
	int exit_code;  /* -1 unless it exited */
	int signal;     /* 0 unless a signal killed it */
	int timed_out;
	int error;      /* errno of a P_ERROR, 0 otherwise */
	char message[256];
	uint32_t proc, pid;
	struct pbuf out, err;
	int entries;    /* P_ENTRY frames seen */
};

/* Boots template (base, python, node) with the guest from $CPUOS_GUEST_DIR
 * or build/guest, run directories under $CPUOS_RUN_DIR; extra_args (or
 * NULL) go to QEMU. NULL with a note on failure. */
struct vm *vt_boot(const char *template, unsigned vcpus, unsigned memory_mb,
		   const char *const *extra_args);
/* The same, or a restore from the snapshot directory restore (in place
 * when run_dir is that directory; run_dir NULL: a new one), failing with
 * the runner's reason in err. */
struct vm *vt_start(const char *template, unsigned vcpus, unsigned memory_mb,
		    const char *const *extra_args, const char *restore, const char *run_dir,
		    char *err, size_t errlen);
/* A new run directory name under $CPUOS_RUN_DIR. */
void vt_new_run_dir(char *out, size_t n);
void vt_result_free(struct result *r);
/* Sends an exec; the result fills in as vm_pump runs. 0 or -errno. */
int vt_exec_start(struct vm *vm, const struct cmd *c, struct result *r);
/* Runs an exec to its end (or timeout_ms): 0 or -errno. */
int vt_exec(struct vm *vm, const struct cmd *c, struct result *r, int timeout_ms);
/* A request with only a proc id or a path, run to its end. */
int vt_simple(struct vm *vm, uint16_t type, uint32_t proc, const char *path, struct result *r,
	      int timeout_ms);
/* The frame callback behind the helpers: collects into a struct result. */
void vt_collect(void *arg, const struct proto_frame *f);

#endif
