/*
 * sbx: the sandboxes. Each is one object from its create to its end,
 * paused or not, moved through the states below by one table (sbx_state.c,
 * docs/architecture.md "Sandbox states"). A running sandbox owns one VM and
 * one pump thread that alone touches the VM's sockets; HTTP threads hand it
 * agent requests under the sandbox's mutex and wait on its condition
 * variable for the frames, which the pump decodes into a struct sop
 * (sandbox operation). The store records every change of state the table
 * names, each as one conditional write.
 */
#ifndef CPUOS_SBX_H
#define CPUOS_SBX_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"
#include "runner/qemu.h"
#include "daemon/store/store.h"

struct qemu_build;

struct priv;
struct s3_conf;

struct sbx_config {
	const char *state_dir; /* vms/<id>/ run directories live here */
	const char *guest_dir; /* bzImage, initramfs.cpio, templates/NAME.erofs */
	const char *cache_dir; /* writable layer bases */
	const char *qemu;      /* NULL: qemu-system-x86_64 */
	const struct qemu_build *qemu_build; /* the kept build VMs run on
					      * (qemu_build.h); NULL: qemu as it is */
	enum qemu_accel accel;
	int max_sandboxes;     /* running, per account */
	unsigned account_vcpus; /* vCPUs of an account's running sandboxes; 0: no limit */
	unsigned long long account_memory_mb; /* their guest memory; 0: no limit */
	double overcommit;     /* guest memory of every sandbox and warm VM, at most
				* this times the host's RAM; 0: no limit */
	size_t max_output;     /* bytes of each stream kept by a foreground exec */
	long long paused_retention_s; /* a paused sandbox is deleted after this */
	int template_snapshots; /* boot each template once, create by restoring */
	unsigned pool_python, pool_other; /* warm VMs kept per template */
	unsigned long long pool_max_mb; /* memory the pools may hold in all */
	struct net *net;       /* networks (net.h); NULL: no VM gets a NIC */
	const char *net_default; /* the policy of a sandbox that names none (JSON) */
	struct priv *priv;     /* the helper that jails QEMUs (priv.h); NULL: not jailed */
	struct priv *importer; /* the helper that imports images, jailing or not;
				* NULL: imports here, if root */
	unsigned long long image_max_bytes;      /* an image, unpacked (0: 4 GiB) */
	unsigned long long template_quota_bytes; /* an account's templates (0: no limit) */
	const char *insecure_registries; /* host[:port],...: plain HTTP allowed */
	int images_off;        /* no template from an image here (the HTTP fuzzer's:
				* no pull, no import): 501, and a reference is
				* an unknown template */
	const struct s3_conf *blob; /* an object store that keeps every pause
				     * (lib/s3.h); NULL: pauses are local only */
	const char *builder;     /* the cpuos CLI that runs Dockerfile builds
				  * (sbx_build.c); NULL: none here */
	const char *builder_url; /* where it reaches this daemon's API */
	const char *node;        /* this node's name; "" outside a cluster */
};

struct sbx_params {
	const char *template;
	long long timeout_s;
	unsigned vcpus, memory_mb, disk_mb;
	unsigned max_processes; /* in the guest, all its processes together; 0: the agent's */
	const char *env_json, *metadata_json; /* JSON objects of strings */
	int kill_on_timeout;  /* else the sandbox pauses when its time is up */
	long long idle_timeout_s; /* pause after that long idle (SBX_IDLE_CPU_PCT); 0: never */
	const char *checkpoint; /* restore this checkpoint (id or name) */
	const char *key_id;   /* the key that creates it, for usage */
	const char *network_json; /* egress policy (sbx_network_text); NULL: the default */
	int is_public;        /* its port URLs need no token */
	const char *secrets_json; /* names of the account's secrets it gets
				   * placeholders of (a JSON array); NULL: none */
};

struct sbx_mgr;
struct sbx;
struct net;

/* ---- templates an account makes from images (sbx_tpl.c) ---- */
/* The ids of an account's templates begin so; a published one's never. */
#define SBX_TPL_PREFIX "tpl_"

struct sbx_tpl_req {
	const char *name;     /* the account's name for it */
	const char *image;    /* a reference to pull, or NULL: archive_fd */
	int archive_fd;       /* an uploaded archive (taken over, closed), or -1 */
	const char *username, *password; /* the registry's; NULL: anonymous */
	const char *start_cmd; /* its start command (a shell line), or NULL */
	int start_image;       /* or the image's ENTRYPOINT and CMD */
	unsigned ready_port;   /* ready once this port answers, */
	const char *ready_cmd; /* or once this exits 0; neither: once started */
};

/* A template name an account may take: as a published one's, and not
 * beginning with SBX_TPL_PREFIX. */
int sbx_tpl_name_ok(const char *name);
/* Begins the build of template q->name for account; with wait, to its end.
 * 0 with *out (state "building", or with wait "ready"), or -EINVAL (a bad
 * name or request; with wait, also a bad image), -EEXIST (the name is
 * taken), -EDQUOT (over the account's quota), -EFBIG, -ENOENT, -EACCES
 * (the registry's), -EPERM (no importing here), -errno; err says why. */
int sbx_tpl_create(struct sbx_mgr *m, const char *account, const struct sbx_tpl_req *q, int wait,
		   struct store_tpl *out, char *err, size_t errlen);
/* The account's template by name or id: 0 with *out, or -ENOENT. */
int sbx_tpl_get(struct sbx_mgr *m, const char *account, const char *name, struct store_tpl *out);
/* Where the file of template id (an account's) with extension ext is. */
int sbx_tpl_file(struct sbx_mgr *m, const char *id, const char *ext, char *out, size_t n);
/* The largest image, unpacked or as an archive. */
unsigned long long sbx_tpl_max_bytes(struct sbx_mgr *m);
/* A file with no name, for an upload's archive: its descriptor, or -errno. */
int sbx_tpl_upload_fd(struct sbx_mgr *m);
/* Deletes it: 0, -ENOENT, -EBUSY (a sandbox or checkpoint has it, or it
 * is still being built). */
int sbx_tpl_delete(struct sbx_mgr *m, const char *account, const char *name, char *err,
		   size_t errlen);

/* ---- Dockerfile builds the node runs (sbx_build.c) ---- */
/* POST /v1/templates/{name}/build: the CLI's build (`cpuos templates
 * build NAME -f DOCKERFILE -`), run here as a client of this daemon's API
 * with a key of the account's that lives as long as the build, its
 * context archive on its stdin and its output kept as the build's log. */
struct sbx_build_req {
	const char *name;       /* the template it makes */
	const char *dockerfile; /* a path in the context (NULL: "Dockerfile") */
	int context_fd;         /* the context archive (taken over, closed) */
	int no_cache;
	const char *const *build_args; /* "K=V" each */
	size_t nbuild_args;
	const char *start_cmd, *ready_cmd;
	unsigned ready_port;
};
struct sbx_build_info {
	char id[24];          /* "bld_" + 16 hex */
	char name[64];
	char state[16];       /* "building", "ready", "failed", "cancelled" */
	int exit_code;        /* the builder's, once ended */
	long long started_ms, ended_ms; /* wall clock; ended 0 while building */
	long long log_bytes;  /* of its log, so far */
	char error[512];      /* the builder's last error line, if it failed */
};
/* Starts it: 0 with *out, or -EINVAL (a bad request), -EBUSY (a build of
 * that name runs), -EAGAIN (the account's or the node's limit of builds at
 * once), -EPERM (no builds here: no builder, or no TCP listener), -EACCES
 * (the administrator's socket: no account), -ESHUTDOWN, -errno. */
int sbx_build_start(struct sbx_mgr *m, const char *account, const struct sbx_build_req *q,
		    struct sbx_build_info *out, char *err, size_t errlen);
/* The same refusals, before a context is received: 0 if it may start now. */
int sbx_build_check(struct sbx_mgr *m, const char *account, const char *name, char *err,
		    size_t errlen);
/* The newest build of the account's template name: 0 with *out (and the
 * path of its log in log[loglen], if log), or -ENOENT. */
int sbx_build_get(struct sbx_mgr *m, const char *account, const char *name,
		  struct sbx_build_info *out, char *log, size_t loglen);
/* Whether build id still runs (its log may grow). */
int sbx_build_running(struct sbx_mgr *m, const char *id);
/* Cancels the build of name that runs: 0, -ENOENT (none runs). */
int sbx_build_cancel(struct sbx_mgr *m, const char *account, const char *name);

/* A sandbox's state. Stable: running, paused, stopped, lost (what the
 * store and the API show). Transitional: owned by the one thread that
 * entered it, until it fires the event that ends it; the store keeps
 * the stable state it came from meanwhile. */
enum sbx_state {
	SBX_CREATING,     /* booting, restoring or claimed from a pool; not stored yet */
	SBX_RESTORING,    /* found in the store at start, not settled yet */
	SBX_RUNNING,
	SBX_PAUSING,
	SBX_PAUSED,       /* QEMU gone, memory, processes and disk on disk */
	SBX_RESUMING,
	SBX_SNAPSHOTTING, /* running; its state is being copied (fork, checkpoint) */
	SBX_STOPPING,
	SBX_STOPPED,      /* killed, timeout, retention, or its VM ended */
	SBX_LOST,         /* its QEMU went away and left no whole pause */
	SBX_MOVING,       /* paused, its pause stored; being let go of to another node */
	SBX_MOVED,        /* another node's now (or any node's): out of this one */
	SBX_NSTATES
};
const char *sbx_state_name(enum sbx_state s);

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

/* Starts a sandbox for account: 0 with row filled (release it), or -errno:
 * -ENOENT unknown template or secret, -EINVAL bad secrets (too many, a
 * name env sets too, no networks), -ENXIO unknown checkpoint, -EDQUOT
 * over the account's limit, -EIO the VM did not start (reason in err). */
int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen);
/* Pauses a running sandbox (no QEMU, no RAM; all on disk and fsync'ed):
 * 0, also when already paused; -ENOENT unknown, -ESHUTDOWN stopped, -EBUSY
 * another transition holds it, -EIO (it runs on; reason in err). */
int sbx_pause(struct sbx_mgr *m, const char *id, char *err, size_t errlen);
/* Resumes a paused sandbox with its id, processes, files and the time its
 * timeout had left: 0, also when running; -ENOENT, -ESHUTDOWN, -EBUSY,
 * -EDQUOT, -EIO (it stays paused; reason in err). */
int sbx_resume(struct sbx_mgr *m, const char *id, char *err, size_t errlen);
/* N new sandboxes with the memory, processes and files of running sandbox
 * id, which stands still only while its state is copied. rows gets count
 * entries (release each). 0 or -errno as sbx_create. */
int sbx_fork(struct sbx_mgr *m, const char *id, unsigned count, struct store_sbx *rows,
	     char *err, size_t errlen);
/* Keeps running sandbox id's whole state as checkpoint name of its
 * account: 0 with out filled (release it), -EEXIST name taken, -errno. */
int sbx_checkpoint(struct sbx_mgr *m, const char *id, const char *name, struct store_ckpt *out,
		   char *err, size_t errlen);
/* Deletes a checkpoint and its files (sandboxes made from it live on). */
int sbx_ckpt_delete(struct sbx_mgr *m, const struct store_ckpt *c);

/* The one way to a sandbox that runs, for every caller (the API, port
 * URLs): sandbox id, if account may see it (NULL: any account), waited for
 * while another transition is under way, resumed first when it is paused
 * and SBX_RESUME is given. 0 with *out referenced (sbx_put it), or -errno
 * with a reason in err: -ENOENT no such sandbox (or another account's),
 * -ESHUTDOWN stopped or lost (err says so and why), -EAGAIN paused and
 * not to be resumed, -EBUSY a transition did not end in time, or
 * sbx_resume's. */
#define SBX_RESUME 1
int sbx_acquire(struct sbx_mgr *m, const char *id, const char *account, int flags,
		struct sbx **out, char *err, size_t errlen);
/* The running sandbox id, if account may see it (NULL: any account), with
 * a reference; NULL otherwise. Never waits. */
struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account);
void sbx_put(struct sbx *s);
/* Stops a sandbox and records why ("killed", "timeout"): 0, -ENOENT when
 * it stopped already (or never was here), -EBUSY when it is busy or has
 * just moved to another node (try again). */
int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason);
/* Networks (sbx_net.c). A policy from the API, checked, in the compact
 * form the store keeps: malloc'd, or NULL with the reason in err (-EINVAL:
 * not a valid policy, or networking is off and it asks for any). */
char *sbx_network_text(struct sbx_mgr *m, const json_t *policy, char *err, size_t errlen);
/* The policy a sandbox runs under (its own, or the daemon's default when
 * network_json is ""), as an object; NULL without networks. */
json_t *sbx_network_json(struct sbx_mgr *m, const char *network_json);
/* Changes the policy of sandbox id (running: at once; paused: from its
 * resume): 0, -ENOENT, -ESHUTDOWN (stopped), -EBUSY, -EIO. */
int sbx_set_network(struct sbx_mgr *m, const char *id, const char *network_text, char *err,
		    size_t errlen);
/* Replaces (add: merges into, rules.h's rules_merge) the request
 * transformations of sandbox id with rules, as rules_check made them
 * (running: at once; paused: from its resume): 0, -ENOENT (no sandbox, or
 * a secret a value names is not the account's), -ESHUTDOWN (stopped),
 * -EBUSY, -EINVAL (too many, or no networks), -errno. */
int sbx_set_transforms(struct sbx_mgr *m, const char *id, const json_t *rules, int add,
		       char *err, size_t errlen);
/* The egress counters of a running sandbox (net.h): 0 or -errno. */
struct net_counters;
int sbx_net_counters(struct sbx_mgr *m, const char *id, struct net_counters *c);
/* account's secrets changed (set or deleted): its running sandboxes'
 * proxies get the new values, or lose them, at once. */
void sbx_secrets_changed(struct sbx_mgr *m, const char *account);
/* Secret name's value sealed for the store by cpuos-netd (net_seal), bound
 * to account, name, hosts (a JSON array, as secret_hosts_ok gives it) and
 * http: the sealed text into out[outlen] (SEAL_TEXT_MAX of the value's
 * size), or -errno with a reason: -ENOTSUP without networks. */
int sbx_secret_seal(struct sbx_mgr *m, const char *account, const char *name,
		    const json_t *hosts, int http, const char *value, char *out, size_t outlen,
		    char *err, size_t errlen);

/* Port URLs: a connection to port of sandbox id for a client that shows
 * token (NULL: none), which a public sandbox does not need; a paused one
 * is resumed. fd NULL: the token is only checked. 0 with *fd, or -errno
 * with a reason: -ENOENT, -EACCES (token), -ESHUTDOWN (stopped),
 * -ENETUNREACH (no network), -ECONNREFUSED (nothing listens), -ETIMEDOUT,
 * or sbx_resume's. */
int sbx_port_dial(struct sbx_mgr *m, const char *id, const char *token, unsigned port, int *fd,
		  char *err, size_t errlen);
/* The connection sbx_port_dial gave for sandbox id is closed. */
void sbx_port_hangup(struct sbx_mgr *m, const char *id);

/* Whether paused row's pause is also in the object store (sbx_config's
 * blob), at the generation it is paused at: it then resumes even when the
 * copy on this host's disk is gone. */
int sbx_pause_stored(const struct store_sbx *row);
/* -EREMOTE, with a reason naming the node, when row is a live (running or
 * paused) sandbox of another node's, which only that node can act on;
 * else 0. A paused one whose node was declared down or let go of it, and
 * whose pause is in the object store, is taken over instead: it is this
 * node's from then on, loaded paused (its pause fetched at its resume), and
 * the answer is 0. -EBUSY when it is moving, or its node is down with its
 * pause not stored (it waits for that node). */
int sbx_elsewhere(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen);
/* Sandbox id, paused, let go of by its node (store_sbx_let_go) or of a node
 * declared down, its pause stored, taken by this node and loaded paused:
 * 0 (also when it is this node's already), or -errno with a reason
 * (-ESTALE: it cannot be: its node lives, nothing is stored, this node is
 * drained; -EXDEV: this node cannot restore its pause). */
int sbx_take(struct sbx_mgr *m, const char *id, char *err, size_t errlen);
/* What this node offers placement (store_node_offers): compat, a digest of
 * what a snapshot made here needs of the host that restores it (the
 * accelerator, the vCPU model, the kernel, the initramfs and the egress CA;
 * not QEMU's version, known only from a running QEMU); its free warm VMs and
 * held template snapshots of the default size. */
void sbx_offers(struct sbx_mgr *m, char *compat, size_t cn, char *warm, size_t wn, char *held,
		size_t hn);
/* This node's sandbox id, paused first when it runs (*was_running), its
 * pause put in the object store now, then let go of: its row names no
 * node, it leaves this node, and any node may take it. 0, or -errno with
 * a reason: -ENOENT (not here), -ENOTSUP (no object store, no node),
 * -EBUSY (another transition kept it; it stays here), the pause's or the
 * upload's error. */
int sbx_move(struct sbx_mgr *m, const char *id, int *was_running, char *err, size_t errlen);

/* The environment every command of the sandbox gets (JSON object). */
const char *sbx_env_json(const struct sbx *s);

/* One agent operation seen from an HTTP thread (a "sop"). The pump fills
 * it in under the sandbox lock; its owner learns how it stands from
 * sbx_wait and, once it ended, reads what it gathered. */
enum sop_mode {
	SOP_COLLECT, /* keep the tail of stdout/stderr (foreground exec) */
	SOP_QUEUE,   /* queue P_DATA bytes for a reader (file download), or an
		      * exec's stdout (an archive); its stderr is dropped */
	SOP_NDJSON,  /* queue output and exit as NDJSON lines (process stream, code) */
	SOP_DISCARD, /* keep nothing but the end (a process's stdin channel) */
};

struct sop;

/* How an operation stands: a copy taken under the lock. */
struct sop_state {
	uint16_t end;   /* P_OK, P_ERROR or P_EXIT once it ended; 0 before */
	int started;    /* P_STARTED (or first data) came */
	int err;        /* errno of P_ERROR (ECONNRESET: the VM went away) */
	int local;      /* the end is the daemon's (a reset, a cap), not the agent's word */
	char msg[256];
	uint32_t proc, pid;
	int exit_code, signal, timed_out; /* -1 when not given */
	int pty; /* the process runs on a terminal: its output is bytes */
	struct sbx_guest_stats { /* P_STATS's answer */
		unsigned long long mem_total, mem_avail, disk_total, disk_used, net_rx, net_tx;
	} stats;
};

/* A new operation; cap is the bytes of each stream SOP_COLLECT keeps. */
struct sop *sop_new(enum sop_mode mode, size_t cap);
/* Frees op, or leaves that to the pump if the agent operation is live
 * (after asking the agent to cancel it; a foreground exec's process is
 * killed: nobody is left to hear how it ends). */
void sop_free(struct sbx *s, struct sop *op);

/* What a caller asks of a running sandbox's agent, typed; sbx_request makes
 * the agent's frame of it (docs/agent-protocol.md), so no caller writes
 * one. Each kind reads only the fields named beside it. */
enum sbx_kind {
	SBX_EXEC,        /* cmd (a shell command) or argv; env; cwd; user; timeout_ms;
			  * with_stdin (stdin will come); background (its stdin open
			  * for later, unless no_stdin); rows and cols (not 0: on a
			  * terminal of that size) */
	SBX_ATTACH,      /* proc: a background process's output and end */
	SBX_WAIT,        /* proc */
	SBX_SIGNAL,      /* proc, signo */
	SBX_RESIZE,      /* proc, rows, cols: its terminal's new size */
	SBX_PS,
	SBX_STAT,        /* path */
	SBX_LIST,        /* path, depth (1: the directory itself) */
	SBX_READ,        /* path */
	SBX_WRITE,       /* path, mode, user; the bytes follow with sbx_data */
	SBX_MKDIR,       /* path, mode, parents, user */
	SBX_RENAME,      /* path, path2 */
	SBX_REMOVE,      /* path, recursive */
	SBX_CODE,        /* context, language (NULL: the context's), code, timeout_ms,
			  * formats; user */
	SBX_CTX_NEW,     /* context (NULL: a new id), language, cwd, user */
	SBX_CTX_LIST,
	SBX_CTX_RESTART, /* context */
	SBX_CTX_DELETE,  /* context */
	SBX_WATCH,       /* path, recursive: file system events (SOP_NDJSON) */
	SBX_STATS,       /* the guest's memory, disk and network use (sop_state.stats) */
};
struct sbx_request {
	enum sbx_kind kind;
	const char *cmd;
	const char *const *argv;
	size_t argc;
	const char *const *env; /* "NAME=value", over the sandbox's own */
	size_t nenv;
	const char *cwd, *user, *path, *path2, *context, *language, *code, *formats;
	uint64_t timeout_ms; /* 0: none */
	uint32_t proc, signo, mode, depth, rows, cols;
	int with_stdin, background, no_stdin, parents, recursive;
};
/* Sends req on op, which gets its credit window: 0, or -ECONNRESET (not
 * running), -EAGAIN (too many operations or streams open), -E2BIG (too
 * large for one frame), -EINVAL (a field the kind needs is missing),
 * -ENOMEM. */
int sbx_request(struct sbx *s, struct sop *op, const struct sbx_request *req);
/* Sends raw bytes on op (stdin, file content) within the operation's input
 * credit, waiting up to timeout_ms for the agent to take earlier bytes.
 * 0, -ETIMEDOUT, or -errno once the operation ended. */
int sbx_data(struct sbx *s, struct sop *op, uint16_t flags, const void *p, size_t n,
	     int timeout_ms);
/* Waits until op ended (or started, with want_start) or timeout_ms passes;
 * fills *st either way. 0 or -ETIMEDOUT. */
int sbx_wait(struct sbx *s, struct sop *op, int want_start, int timeout_ms, struct sop_state *st);
/* Writes to the stdin of process proc (PF_EOF closes it), waiting up to
 * timeout_ms for credit: 0, -ESRCH when it is gone, -ETIMEDOUT, -errno. */
int sbx_stdin(struct sbx *s, uint32_t proc, uint16_t flags, const void *p, size_t n,
	      int timeout_ms);
/* A sandbox's resources at one moment (sbx_metrics.c): CPU from its QEMU's
 * time on the host over the interval before, as a share of its vCPUs;
 * the rest as its guest counts it (guest 0: the agent did not answer, and
 * they are 0). */
#define SBX_METRICS_MS 5000
/* A sandbox with an idle timeout pauses once, for that long, no call or
 * stream of the API and no port connection was open and its CPU stayed
 * under this (a share of its vCPUs, by the samples). */
#define SBX_IDLE_CPU_PCT 10.0
#define SBX_SAMPLES 120 /* ten minutes of them */
struct sbx_sample {
	long long at_ms; /* realtime */
	double cpu_pct;  /* 0..100 */
	unsigned ncpu;
	int guest;
	unsigned long long mem_used, mem_total, disk_used, disk_total, net_rx, net_tx;
};
/* The newest samples of sandbox id (in any state; a paused one keeps those
 * it had) if account may see it (NULL: any), at most max, oldest first:
 * their count, or -ENOENT. */
int sbx_metrics(struct sbx_mgr *m, const char *id, const char *account, struct sbx_sample *out,
		size_t max);
/* Where the console log of sandbox row is (sbx_logs.c): its run
 * directory's while it runs or is paused (1: it may grow), else the copy
 * kept once it stopped (0: it will not; it may be gone, after SBX_LOG_KEEP_S
 * or for a sandbox that never ran here). */
#define SBX_LOG_KEEP_S (7 * 86400)
int sbx_log_path(struct sbx_mgr *m, const struct store_sbx *row, char *out, size_t n);
/* Lifecycle events are kept this long, webhooks' delivery attempts too. */
#define SBX_EVENT_KEEP_S (7 * 86400)
/* The webhooks changed (one was added): deliveries look again now. */
void sbx_hooks_changed(struct sbx_mgr *m);
/* Counters for GET /metrics, since the daemon started. Latencies are sums
 * in milliseconds over the counts beside them. */
struct sbx_stats {
	unsigned long long creates, cold_boots, restores, pauses, resumes, forks, pool_claims;
	double create_ms, pause_ms, resume_ms, fork_ms;
	unsigned pool_depth; /* restored VMs waiting in warm pools */
	unsigned live;       /* VMs this daemon runs now */
};
void sbx_mgr_stats(struct sbx_mgr *m, struct sbx_stats *out);

/* Moves a sandbox's expiry: 0 or -ENOENT when it is not running. */
int sbx_set_expiry(struct sbx_mgr *m, const char *id, long long expires_at);

/* Takes up to n bytes of a SOP_QUEUE operation's bytes (a download),
 * waiting up to timeout_ms for some. Returns the count, 0 at the end,
 * -ETIMEDOUT, or -EPIPE when the agent ended the operation with an error
 * (the stream is incomplete). */
ssize_t sbx_read(struct sbx *s, struct sop *op, void *buf, size_t n, int timeout_ms);

/* A SOP_NDJSON operation's stream, a chunk at a time, in the order the
 * agent sent it: output (UTF-8 text, invalid bytes as U+FFFD, never cut
 * inside a character), a code call's events, and once, its end. */
enum sop_chunk_kind { SOP_CHUNK_OUT, SOP_CHUNK_EVENT, SOP_CHUNK_END, SOP_CHUNK_FSEVENT };
struct sbx_code_event;
struct sop_chunk {
	enum sop_chunk_kind kind;
	int stream;                         /* OUT: 0 stdout, 1 stderr */
	int pty;                            /* OUT: a terminal's bytes, not text */
	size_t len;                         /* OUT: bytes of text put in buf (a
					     * terminal's: the bytes as they came) */
	const struct sbx_code_event *event; /* EVENT: valid until sop_free */
	int fs_op, is_dir;                  /* FSEVENT: enum proto_fs_op, and
					     * its path in buf (len bytes, NUL
					     * after them; max at least 4097) */
	struct sop_state st;                /* END: how it ended */
	int64_t duration_ms;                /* END: since the request */
};
/* The next chunk of op, waiting up to timeout_ms for one: 1 with *c (an
 * OUT's text in buf, at most max bytes; max at least 64), 0 after the END
 * was given (a command's exit, a code call's end) or when the stream ended
 * without one, -ETIMEDOUT, or -EPIPE when the agent ended it with an error
 * (the stream is incomplete). */
int sop_next(struct sbx *s, struct sop *op, struct sop_chunk *c, char *buf, size_t max,
	     int timeout_ms);

/* What the agent said of a file (stat, a listing), a process (ps) or a
 * code context, typed; strings are as the guest sent them (not checked as
 * UTF-8), owned by the operation. */
struct sbx_file {
	const char *path;   /* a listing's: under the listed directory, absolute */
	const char *name;   /* its last component */
	const char *target; /* a symbolic link's, else NULL */
	uint32_t mode, uid, gid;
	uint64_t size, mtime_ns;
};
struct sbx_proc {
	uint32_t proc, pid; /* the agent's process number, the guest's pid */
	const char *cmd;
	int exited, timed_out, pty;
	int exit_code, signal; /* -1: none */
};
enum sbx_ctx_state { SBX_CTX_IDLE, SBX_CTX_BUSY, SBX_CTX_EXITED };
struct sbx_ctx {
	const char *id, *language, *user, *cwd;
	enum sbx_ctx_state state;
	long long pid;      /* its kernel's process number, -1 when none */
};
enum sbx_item_kind { SBX_ITEM_FILE, SBX_ITEM_PROC, SBX_ITEM_CTX };
struct sbx_item {
	enum sbx_item_kind kind;
	union {
		struct sbx_file file;
		struct sbx_proc proc;
		struct sbx_ctx ctx;
	};
};

/* What an ended operation gathered; valid only after sbx_wait reported its
 * end, owned by op. The items of a listing, ps or context list, in the
 * order they came; the item of a stat or of a context made or restarted
 * (NULL when none); the kept tail of a stream (SOP_COLLECT), with whether
 * older bytes were cut and how many bytes there were in all. */
size_t sop_nitems(struct sop *op);
const struct sbx_item *sop_item(struct sop *op, size_t i);
const struct sbx_item *sop_entry(struct sop *op);
const struct pbuf *sop_output(struct sop *op, int stream, int *cut);

/* Code calls (sbx_code.c, docs/api.md "Code"). Once one ended: the
 * execution as the API answers it, without stdout and stderr (sop_output
 * has those), a new reference; NULL before. */
#define CTX_ID_MAX 64
enum sbx_code_field { SBX_TEXT, SBX_HTML, SBX_MARKDOWN, SBX_SVG, SBX_LATEX, SBX_JAVASCRIPT,
		      SBX_PNG, SBX_JPEG, SBX_PDF, SBX_NFIELDS };
extern const char *const sbx_code_field_names[SBX_NFIELDS]; /* the kernel's and the API's */
/* A result (what display() or the last line showed, a figure) or an error
 * a kernel reported, checked: only the fields docs/api.md names, binary
 * ones (png, jpeg, pdf) valid base64. */
struct sbx_code_event {
	int is_error;
	int is_main;                     /* a result: the value of the cell's last line */
	const char *field[SBX_NFIELDS];  /* a result's; NULL: absent */
	json_t *json;                    /* a result's "json" value as the kernel gave it; NULL */
	const char *name, *value, *traceback; /* an error's; NULL: absent */
};
/* How a code call went, once it ended (NULL before, or for another kind of
 * operation); with SOP_COLLECT its events stay for sop_code_event. */
struct sbx_code_info {
	const char *context, *language;
	long long count;  /* execution_count; -1: the kernel gave none */
	int timed_out, restarted, died, truncated; /* truncated: events were dropped (caps) */
	const char *restart_reason, *died_msg;
	int64_t duration_ms;
	size_t nevents;
};
const struct sbx_code_info *sop_code(struct sop *op);
const struct sbx_code_event *sop_code_event(struct sop *op, size_t i);

#endif
