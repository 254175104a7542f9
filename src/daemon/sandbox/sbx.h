/*
 * sbx: live sandboxes. Each running sandbox owns one VM and one pump thread
 * that alone touches the VM's sockets; HTTP threads hand it agent requests
 * under the sandbox's mutex and wait on its condition variable for the
 * frames, which the pump decodes into a struct sop (sandbox operation).
 * Lifecycle: running -> stopped (killed, timeout, poweroff, panic, crashed)
 * or lost (gone across a daemon restart); the store records every change.
 */
#ifndef CPUOS_SBX_H
#define CPUOS_SBX_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"
#include "runner/qemu.h"
#include "daemon/store/store.h"

struct sbx_config {
	const char *state_dir; /* vms/<id>/ run directories live here */
	const char *guest_dir; /* bzImage, initramfs.cpio, templates/NAME.erofs */
	const char *cache_dir; /* writable layer bases */
	const char *qemu;      /* NULL: qemu-system-x86_64 */
	enum qemu_accel accel;
	int max_sandboxes;     /* running, per account */
	size_t max_output;     /* bytes of each stream kept by a foreground exec */
};

struct sbx_params {
	const char *template;
	long long timeout_s;
	unsigned vcpus, memory_mb, disk_mb;
	const char *env_json, *metadata_json; /* JSON objects of strings */
};

struct sbx_mgr;
struct sbx;

int sbx_mgr_new(const struct sbx_config *cfg, struct store *store, struct sbx_mgr **out);
/* Re-attaches every sandbox the store says is running whose QEMU still
 * runs; marks the others lost. */
void sbx_mgr_restore(struct sbx_mgr *m);
/* Stops pump threads and the expiry thread and lets go of every VM (they
 * keep running; the next daemon re-attaches them). Requests still in
 * flight end with 503; sandboxes they hold stay valid until released. */
void sbx_mgr_stop(struct sbx_mgr *m);
/* Stops if needed, then frees: only once no request can reach m. */
void sbx_mgr_free(struct sbx_mgr *m);

/* Boots a sandbox for account: 0 with row filled (release it), or -errno:
 * -ENOENT unknown template, -EDQUOT over the account's limit, -EIO the VM
 * did not start (reason in err). */
int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen);
/* The running sandbox id, if account may see it (NULL: any account), with
 * a reference; NULL otherwise. */
struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account);
void sbx_put(struct sbx *s);
/* Stops a sandbox and records why ("killed", "timeout"). */
int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason);
/* The environment every command of the sandbox gets (JSON object). */
const char *sbx_env_json(const struct sbx *s);

/* One agent operation seen from an HTTP thread. The pump fills it in under
 * the sandbox lock; the owner reads it after sbx_wait. */
enum sop_mode {
	SOP_COLLECT, /* keep the tail of stdout/stderr (foreground exec) */
	SOP_QUEUE,   /* queue P_DATA bytes for a reader (file download) */
	SOP_NDJSON,  /* queue output and exit as NDJSON lines (process stream) */
	SOP_DISCARD, /* keep nothing but the end (a process's stdin channel) */
};

struct sop {
	enum sop_mode mode;
	uint16_t type;  /* the request */
	uint32_t id;    /* agent operation id */
	int live;       /* the agent operation has not ended */
	int started, done, eof;
	uint16_t end;   /* P_OK, P_ERROR or P_EXIT */
	int err;        /* errno from P_ERROR (ECONNRESET: the VM went away) */
	char msg[256];
	uint32_t proc, pid;
	int exit_code, signal, timed_out; /* -1 when not given */
	size_t cap;     /* SOP_COLLECT: bytes kept per stream */
	struct pbuf out[2];
	uint64_t total[2];
	uint8_t partial[2][4]; /* SOP_NDJSON: an unfinished UTF-8 sequence */
	size_t npartial[2];
	int stalled;    /* counted in the sandbox's backpressure */
	json_t *items;  /* P_ENTRY items as JSON (list, ps) */
	json_t *ok;     /* P_OK attributes as JSON (stat) */
	struct sbx *owner;
	int abandoned;  /* its owner left: the pump frees it when it ends */
};

struct sop *sop_new(enum sop_mode mode);
/* Frees op, or leaves that to the pump if the agent operation is live
 * (after asking the agent to cancel it). */
void sop_free(struct sbx *s, struct sop *op);

/* Starts request type for op: returns the frame to add attributes to, with
 * the sandbox locked, or NULL (not locked) if the sandbox is not running.
 * sbx_end seals it, unlocks and wakes the pump: 0 or -errno. */
struct pbuf *sbx_begin(struct sbx *s, uint16_t type, struct sop *op);
int sbx_end(struct sbx *s, struct sop *op);
/* Drops the request begun by sbx_begin unsent (an attribute did not fit)
 * and unlocks. */
void sbx_abort(struct sbx *s, struct sop *op);
/* Sends raw bytes on op (stdin, file content), waiting while the channel's
 * queue is long so memory stays bounded. 0 or -errno. */
int sbx_data(struct sbx *s, struct sop *op, uint16_t flags, const void *p, size_t n);
/* Waits until op is done (started too, if want_start and it started) or
 * timeout_ms passes (-1: forever). 0 or -ETIMEDOUT. */
int sbx_wait(struct sbx *s, struct sop *op, int want_start, int timeout_ms);
/* Writes to the stdin of process proc (PF_EOF closes it): 0, -ESRCH when it
 * is gone, -errno. */
int sbx_stdin(struct sbx *s, uint32_t proc, uint16_t flags, const void *p, size_t n);
/* Moves a sandbox's expiry: 0 or -ENOENT when it is not running. */
int sbx_set_expiry(struct sbx_mgr *m, const char *id, long long expires_at);

/* Takes up to n queued bytes of op (SOP_QUEUE/SOP_NDJSON), waiting for some
 * unless it is done. Returns the count, 0 at the end, -ETIMEDOUT. */
ssize_t sbx_read(struct sbx *s, struct sop *op, void *buf, size_t n, int timeout_ms);

#endif
