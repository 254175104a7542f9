/*
 * sbx_impl: what the two halves of the sandbox manager share: the sandbox
 * and operation structs, the caps on what a guest may make us hold, and
 * two small helpers. sbx.c owns lifecycles (pump, kill, expiry),
 * sbx_create.c a create, sbx_restore.c a restart's restore; sbx_op.c the
 * operations HTTP threads run on a sandbox. Included by the sandbox
 * manager's files only.
 */
#ifndef CPUOS_SBX_IMPL_H
#define CPUOS_SBX_IMPL_H

#include "daemon/sandbox/sbx.h"

#include "common/clock.h"
#include "daemon/net/net.h"

struct vm;
struct vm_config;
struct sbx_pools;

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* Credit windows we give the agent (docs/agent-protocol.md). An attach
 * replays up to 2 MiB of kept output before live output, so it gets room
 * for all of it. */
#define SBX_WINDOW (1u << 20)
#define SBX_ATTACH_WINDOW (3u << 20)
/* A watch's: about 2500 events wait for a slow reader, then the guest's
 * kernel queues them, then it says they overflowed. */
#define SBX_WATCH_WINDOW (256u << 10)
/* Host caps on what one guest can make the daemon hold or do. */
#define SBX_MAX_OPS 1024             /* live operations per sandbox (the agent's cap) */
#define SBX_MAX_STREAMS 64           /* live SOP_QUEUE/SOP_NDJSON operations per sandbox */
#define SBX_MAX_ITEMS_BYTES (32u << 20) /* P_ENTRY text per operation */
#define SBX_MAX_SMALL_FRAMES 16      /* frames of a request that answers once */
#define SEND_HIGH (4u << 20)         /* bytes queued to the agent before writers wait */

struct sop {
	enum sop_mode mode;
	uint16_t type; /* the request */
	uint32_t id;   /* agent operation id */
	int live;      /* the agent operation has not ended */
	int done;
	struct sop_state st;
	size_t cap;    /* SOP_COLLECT: bytes kept per stream */
	struct pbuf out[2]; /* COLLECT: tails; QUEUE: bytes; NDJSON: records */
	uint64_t total[2];
	/* SOP_NDJSON: records are [u8 stream][u32 length][bytes]; the last
	 * one grows while frames of its stream follow. An unfinished UTF-8
	 * sequence waits in partial for the next bytes of its stream. */
	size_t last_rec;
	uint8_t partial[2][4];
	size_t npartial[2];
	int exit_sent;
	/* Output credit, at the agent's cost per frame: what we allowed (the
	 * window plus every P_CREDIT sent), what came, and what was consumed
	 * but not yet returned. */
	uint32_t window;
	uint64_t granted, received, unacked;
	/* Input credit: P_DATA bytes sent, and credited back by the agent. */
	uint64_t sent, acked;
	uint64_t frames;
	struct sbx_item *items; /* P_ENTRY's, nitems of them */
	size_t nitems, items_cap, items_bytes;
	struct sbx_item *entry; /* P_OK's of a stat, a context made or restarted */
	char *base;        /* P_LIST: the listed directory */
	int kill_on_start; /* abandoned foreground exec: kill once it has a proc */
	int quiet;         /* the daemon's own (a metrics sample): not the
			    * sandbox's activity */
	int64_t t0;        /* when it began (clock_ms), for an exec's duration */
	struct sbx *owner;
	int abandoned;     /* its owner left: the pump frees it when it ends */
	struct sop_code *code; /* a code call's results (sbx_code.c), else NULL */
};

struct sbx {
	struct sbx_mgr *mgr;
	char id[32];
	char account[128];
	char key_id[32];
	char template[64];
	unsigned vcpus, memory_mb, disk_mb;
	/* Under the manager's lock: */
	enum sbx_state state;
	const char *stored;  /* the store's state of it (sbx__stored_name) */
	int held;            /* sbx__hold is on it */
	long long expires_at; /* running: when its time is up */
	long long paused_at;  /* paused: since when */
	int pause_on_timeout;
	int expiring;        /* a killer thread has it */
	int storing;         /* its pause is being uploaded, under a hold */
	int store_cancel;    /* asks that upload to stop (read atomically) */
	int refs;
	int listed;          /* in the manager's table */
	struct sbx *next;    /* the table's chain */
	/* Under the sandbox's own lock, while it runs: */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned generation;
	int net_slot; /* its VM's network, or NET_NO_SLOT */
	char *env_json;
	/* Who runs a request that names no user, and where one that names no
	 * cwd runs: "user" and the agent's choice, or an imported image's
	 * USER and WORKDIR (sbx__template_defaults). Set once, at its start. */
	char def_user[64], def_cwd[256];
	char *secrets_json; /* the secrets it holds placeholders of */
	char *transforms_json; /* its request transformations (rules.h) */
	struct vm *vm;
	int wakefd;
	pthread_t pump;
	int pumping; /* pump is a thread to join */
	int running; /* accepts operations */
	int stop;    /* the pump must return */
	int nops, nstreams;
	/* Stdin channels: an attach operation per process written to, kept
	 * open because P_DATA must name a live operation. */
	struct ctl {
		uint32_t proc;
		struct sop *op;
	} *ctls;
	size_t nctls;
	/* Under its lock, in any state (sbx_metrics.c): the ring of samples,
	 * and the QEMU CPU time the next one counts from. */
	/* Idle pauses (sbx_idle): its timeout, and what says it is in use:
	 * when it last was (a call, a resume, CPU above SBX_IDLE_CPU_PCT),
	 * and how many calls and streams (operations not quiet, not a stdin
	 * channel) and port connections are open now. Atomic: read under
	 * the manager's lock, which the sandbox's may not be taken under. */
	long long idle_timeout_ms; /* 0: never */
	_Atomic long long active_ms; /* monotonic */
	_Atomic int busy, port_conns;
	_Atomic int cpu_busy; /* its newest sample was over SBX_IDLE_CPU_PCT */
	_Atomic long long sampled_ms; /* monotonic: its newest sample's time */
	struct sbx_sample *samples; /* SBX_SAMPLES, once the first is taken */
	unsigned m_head, m_count;
	int m_pid;
	unsigned long long m_ticks;
	long long m_at; /* monotonic ms of m_ticks */
};

#define MAX_STARTING 64 /* sandboxes booting at once, all accounts */
#define MAX_KILLERS 16  /* expiry kills running at once */
#define SBX_BUCKETS 1024 /* the table's chains */

/* Lock order: a sandbox's lock, then the manager's, then the store's;
 * nothing is taken under the manager's lock but the store's. */
struct sbx_mgr {
	struct sbx_config cfg;
	struct store *store;
	pthread_mutex_t mu;
	pthread_cond_t state_cv; /* any sandbox's state or hold changed */
	struct sbx *table[SBX_BUCKETS]; /* every sandbox not stopped or lost */
	unsigned nsbx;
	pthread_t expiry;
	pthread_t sampler; /* sbx_metrics.c */
	struct hooks *hooks; /* sbx_hooks.c */
	int quit;
	pthread_cond_t quit_cv;
	int killers; /* expiry kill threads alive */
	int tpl_builds; /* template builds running apart (sbx_tpl.c, sbx_build.c) */
	pthread_mutex_t builds_mu;   /* Dockerfile builds (sbx_build.c) */
	struct sbx_dbuild *dbuilds;  /* under builds_mu, the newest first */
	pthread_cond_t killers_cv;
	/* Accounts of the sandboxes still booting: they count against the
	 * quota before the store knows them, so parallel creates cannot
	 * overshoot it. */
	struct sbx_start {
		char account[128];
		unsigned vcpus, memory_mb;
	} starting[MAX_STARTING];
	struct sbx_stats stats; /* under mu */
	struct sbx_pools *pools;
	struct sbx_blob *blob;  /* the object store's worker; NULL: none */
	pthread_mutex_t ckpt_fetch_mu; /* one checkpoint fetched at a time */
	pthread_mutex_t take_mu;       /* one sandbox taken over at a time */
};

/* sbx_state.c: the state table and transitions. */
enum sbx_event {
	SBX_EV_STARTED,  /* creating: its VM runs (the row is inserted) */
	SBX_EV_FAILED,   /* a transition did not happen: back, or gone */
	SBX_EV_ATTACHED, /* restoring: its QEMU was taken over */
	SBX_EV_LOADED,   /* restoring: the store says paused */
	SBX_EV_SEALED,   /* restoring: QEMU gone, but a whole pause on disk */
	SBX_EV_LOST,     /* QEMU gone and no whole pause */
	SBX_EV_PAUSE, SBX_EV_PAUSED,
	SBX_EV_RESUME, SBX_EV_RESUMED,
	SBX_EV_SNAPSHOT, SBX_EV_DONE,
	SBX_EV_KILL,     /* killed, timeout, retention */
	SBX_EV_ENDED,    /* its VM ended by itself */
	SBX_EV_STOPPED,
	SBX_EV_MOVE,     /* paused and stored: let go of, to another node */
	SBX_EV_MOVED,    /* the row names no node now */
	SBX_NEVENTS
};
struct sbx_transition {
	enum sbx_state from;
	enum sbx_event ev;
	enum sbx_state to;
	const char *to_store; /* the stored state it writes; NULL: none */
};
extern const struct sbx_transition sbx__table[];
extern const size_t sbx__ntable;
extern unsigned long sbx__taken[]; /* per row of the table: times taken */
const char *sbx__event_name(enum sbx_event e);
/* The state the store keeps for s ("running", ...), NULL for none. */
const char *sbx__stored_name(enum sbx_state s);
int sbx__transitional(enum sbx_state s);
/* The table's row for (from, ev), or NULL. */
const struct sbx_transition *sbx__lookup(enum sbx_state from, enum sbx_event ev);

/* What the write of a transition records (each field for the stored
 * states store_sbx_move names it for); row for a create's insert. */
struct sbx_facts {
	const struct store_sbx *row;
	long long paused_at, timeout_left_s, expires_at;
	int qemu_pid;
	unsigned generation;
	int net_slot;
	const char *end_reason;
	long long storage_bytes; /* paused: bytes kept, for usage */
	/* The lifecycle event (store_event) the transition records, where the
	 * table alone does not say: a snapshot's "forked" or "checkpointed",
	 * and why ("idle", "timeout"); NULL: the table's, no cause. */
	const char *event, *cause;
};
/* Starts a transition: waits up to timeout_ms for s to be stable and
 * unheld, then takes event ev into the transitional state the table gives,
 * which the caller owns until it fires the event that ends it. 0; -EBUSY
 * (still moving); -EPERM when ev does not apply to the state s settled in
 * (*now, which may be NULL, says which). */
int sbx__begin(struct sbx *s, enum sbx_event ev, int timeout_ms, enum sbx_state *now);
/* sbx_pause with the cause its "paused" event records ("api", "timeout",
 * "idle"). */
int sbx__pause(struct sbx_mgr *m, const char *id, const char *cause, char *err, size_t errlen);
/* Ends the caller's transition of s with ev: the table's next state, after
 * the one store write it names (f: its facts). A state of stopped or lost
 * takes s out of the manager's table. 0; -EPERM (no such transition: a
 * bug, logged); or the store's -errno, when the state is left as it was
 * unless flags has SBX_FIRE_FORCE: what the write would record is already
 * true (QEMU is gone), and a restart reconciles the row. */
#define SBX_FIRE_FORCE 1
int sbx__fire(struct sbx *s, enum sbx_event ev, const struct sbx_facts *f, int flags, char *err,
	      size_t errlen);
/* Keeps transitions off s (running or paused) for a change that is no
 * transition (a policy): waits up to timeout_ms as sbx__begin does. 0,
 * -EBUSY, or -EPERM when s settled in another state (*now). */
int sbx__hold(struct sbx *s, int timeout_ms, enum sbx_state *now);
/* As sbx__hold, but an upload that holds s is waited out, not stopped,
 * unless cancel (sbx__hold cancels it when it waits at all). */
int sbx__hold_as(struct sbx *s, int timeout_ms, int cancel, enum sbx_state *now);
void sbx__unhold(struct sbx *s);
/* sbx_net.c: the sandbox id, found and held (sbx__hold, up to 60 s): 0
 * with *sp (for sbx__unhold, then sbx_put) and its state in *now, or
 * -errno with err: -EBUSY, -ENOENT none, -ESHUTDOWN neither running nor
 * paused. */
int sbx__hold_id(struct sbx_mgr *m, const char *id, struct sbx **sp, enum sbx_state *now,
		 char *err, size_t errlen);
enum sbx_state sbx__state(struct sbx *s);
/* Waits up to timeout_ms for s to be in state want: 0 or -ETIMEDOUT. */
int sbx__wait_state(struct sbx *s, enum sbx_state want, int timeout_ms);

/* Shared by sbx.c (lifecycles), sbx_snap.c (pause, resume, fork,
 * checkpoints) and sbx_pool.c (template snapshots, warm pools). */
/* sbx_limits.c: reserves a start of vcpus and memory_mb for account: its
 * slot (for sbx__unreserve once the store counts it or the start failed),
 * or -EDQUOT over the account's limits, -EAGAIN over the host's memory,
 * with the reason in err. */
int sbx__reserve(struct sbx_mgr *m, const char *account, unsigned vcpus, unsigned memory_mb,
		 char *err, size_t errlen);
void sbx__unreserve(struct sbx_mgr *m, int slot);
/* Whether more_mb of guest memory fits beside the running sandboxes and
 * pools_mb of warm VMs under the overcommit ratio (the pool worker asks,
 * holding its own lock, so m->mu is not taken). */
int sbx__host_fits(struct sbx_mgr *m, unsigned long long pools_mb, unsigned long long more_mb);
/* A /proc/meminfo field ("MemTotal") in MB; 0 when unknown. */
unsigned long long sbx__meminfo_mb(const char *field);
#define SBX_POOL_MEMORY_MB 512 /* each warm VM's */
/* sbx.c: the objects. A new sandbox object for row in state (creating or
 * restoring), in the manager's table: 0 with *out (a reference of the
 * caller's), -EEXIST, -ENOMEM. */
int sbx__new(struct sbx_mgr *m, const struct store_sbx *row, enum sbx_state state,
	     struct sbx **out);
/* Takes s out of the table (it stopped or was lost): its id is free. */
void sbx__forget(struct sbx *s);
/* Sandbox id in any state, with a reference, or NULL. */
struct sbx *sbx__get(struct sbx_mgr *m, const char *id);
/* References to every sandbox want (called under the manager's lock; NULL:
 * all) takes, into *out (malloc'd): their count. sbx__put_all drops them. */
size_t sbx__each(struct sbx_mgr *m, int (*want)(const struct sbx *s, const void *arg),
		 const void *arg, struct sbx ***out);
void sbx__put_all(struct sbx **v, size_t n);
/* sbx_hooks.c: the webhook deliveries' thread; wake: an event was
 * recorded (NULL hooks: nothing). */
int sbx__hooks_start(struct sbx_mgr *m);
void sbx__hooks_stop(struct sbx_mgr *m);
void sbx__hooks_wake(struct sbx_mgr *m);
/* sbx_logs.c: moves the console log of sandbox id out of run_dir before
 * its files go; drops kept logs older than SBX_LOG_KEEP_S. */
void sbx__keep_log(struct sbx_mgr *m, const char *id, const char *run_dir);
void sbx__sweep_logs(struct sbx_mgr *m);
/* sbx_metrics.c: the sampler thread, which ends once m->quit is set. */
int sbx__metrics_start(struct sbx_mgr *m);
void sbx__metrics_join(struct sbx_mgr *m);
/* With s's lock held, as its new QEMU pid starts: the CPU time its first
 * sample counts from. */
void sbx__metrics_baseline(struct sbx *s, int pid);
/* In a transition of the caller's: s's operations go to vm, which has the
 * network of net_slot, and its pump starts. 0, or -errno (vm not taken). */
int sbx__run_vm(struct sbx *s, struct vm *vm, int net_slot);
/* In a transition of the caller's: stops s's pump, ends its operations
 * (ECONNRESET) and hands over its VM (NULL if it has none) and network. */
struct vm *sbx__stop_vm(struct sbx *s, int *net_slot);
void sbx__random_id(char *out, size_t n, const char *prefix);
/* The default user and cwd of template's sandboxes (struct sbx): an
 * imported image's USER (a name; not uid:gid) and WORKDIR, from its
 * description beside the image, else "user" and "". */
void sbx__template_defaults(const struct sbx_mgr *m, const char *template, char *user,
			    size_t ulen, char *cwd, size_t clen);
/* Runs template's start command in vm, a VM just booted, and waits for its
 * ready check (sbx_ready.c): 0 at once for a template without one. */
int sbx__template_start(struct sbx_mgr *m, const char *template, struct vm *vm, char *err,
			size_t errlen);
/* Where template's file with extension ext is: an account's (its id
 * begins SBX_TPL_PREFIX) in the state directory's templates/, a
 * published one in the guest directory's. 0, or -EINVAL for a name that
 * is no file's. */
int sbx__template_file(const struct sbx_mgr *m, const char *template, const char *ext,
		       char *out, size_t n);
/* The guest files of template, for vm_config. */
void sbx__guest_paths(const struct sbx_mgr *m, const char *template, char *kernel, char *initrd,
		      char *image, size_t n);
/* SIGKILLs QEMU pid if it still runs from run_dir, and waits until it is
 * gone (it is not our child when an earlier daemon started it). */
void sbx__kill_qemu(struct sbx_mgr *m, int pid, const char *run_dir);
/* Calls fn for every QEMU whose run directory is prefix<name>, name being
 * one path component: the VMs an earlier daemon left behind. */
void sbx__each_qemu(const char *prefix, void (*fn)(void *arg, int pid, const char *name),
		    void *arg);
/* Makes row a new running sandbox of vm: stored with its usage event,
 * served. 0, or -EIO with the VM and its network gone. */
int sbx__publish(struct sbx_mgr *m, struct store_sbx *row, struct vm *vm, char *err,
		 size_t errlen);

/* sbx_net.c. Starts vc's VM in a network of its own under network_json
 * ("" or NULL: the default; none without networks): 0 with *vm and *slot,
 * or -errno (-EIO when the network could not be made) and no network. */
int sbx__start(struct sbx_mgr *m, struct vm_config *vc, const char *network_json, int *slot,
	       struct vm **vm, char *err, size_t errlen);
/* A running sandbox taken over after a restart keeps its network. */
void sbx__net_keep(struct sbx_mgr *m, const struct store_sbx *row);
/* The proxy of slot gets the values of account's secrets named in
 * names_json (a JSON array) and the request transformations of
 * transforms_json (a JSON array of rules; NULL: none), with the secrets
 * they name: what it puts in requests to their hosts. Errors are
 * logged: the requests then go with the placeholders, and no rules. */
void sbx__net_secrets(struct sbx_mgr *m, const char *account, const char *names_json,
		      const char *transforms_json, int slot);
/* At the start: each secret a daemon from before stored plaintext is
 * sealed (sbx_secret_seal) in the store, which is then scrubbed. */
void sbx__secrets_seal_old(struct sbx_mgr *m);
/* At a create: names_json (a JSON array of the account's secret names,
 * NULL: none) becomes row's secrets_json, and each secret's placeholder
 * goes into row's env under its name. 0, -ENOENT (an unknown secret, or
 * a name the env sets too: -EINVAL) with a reason. */
int sbx__secret_env(struct sbx_mgr *m, const char *account, const char *names_json,
		    struct store_sbx *row, char *err, size_t errlen);
/* Once its VM is gone. NET_NO_SLOT is nothing to do. */
void sbx__net_down(struct sbx_mgr *m, int slot);
/* Set for VMs that serve no sandbox (template builds, fork's copy). */
#define NET_DENY_ALL_TEXT "{\"mode\":\"deny-all\"}"
/* The policy of live slot now network_json: 0 or -EIO. */
int sbx__net_set(struct sbx_mgr *m, int slot, const char *network_json, char *err, size_t errlen);

/* sbx_snap.c: bytes a paused sandbox keeps on disk; removes the
 * snapshots of forks a dead daemon left. */
long long sbx__paused_bytes(const char *run_dir);
void sbx__snap_cleanup(struct sbx_mgr *m);
/* sbx_restore.c: a paused row loaded as a paused sandbox (at the start, or
 * taken over from a node that is down): 0 or -ENOMEM. */
int sbx__load_paused(struct sbx_mgr *m, const struct store_sbx *row);

/* sbx_pool.c: the free warm VMs of each template ("base:2,python:1") and the
 * templates whose snapshot is ready ("base,python"), of the pools' size. */
void sbx__pool_offers(struct sbx_mgr *m, char *warm, size_t wn, char *held, size_t hn);

/* sbx_node.c: what a snapshot made here needs of a host (sbx_offers), 16
 * hex digits, "" when the guest files cannot be read. */
void sbx__compat(struct sbx_mgr *m, char *compat, size_t cn);
/* sbx_node.c: paused s, its pause stored (the row's record names its
 * generation), let go of by this node (move, then moved: out of the table,
 * its files removed), or left as it was (failed). 0, or -errno with a
 * reason: -EBUSY (another transition), -EAGAIN (nothing stored), -ESTALE
 * (the row is not this node's, or changed). */
int sbx__let_go(struct sbx_mgr *m, struct sbx *s, char *err, size_t errlen);
/* sbx_node.c: paused sandboxes that no live node owns (store_sbx_orphans)
 * and that are past this node's retention, taken over here, for the
 * expiry to delete as it does this node's own. */
void sbx__adopt_orphans(struct sbx_mgr *m);

/* sbx_blob.c: pauses kept in the object store (cfg.blob). Starts the
 * worker that uploads each pause in the background and deletes what
 * ended sandboxes left there: 0 or -errno with a reason. */
int sbx__blob_start(struct sbx_mgr *m, char *err, size_t errlen);
/* A sandbox paused: its upload is due. */
void sbx__blob_kick(struct sbx_mgr *m);
void sbx__blob_stop(struct sbx_mgr *m);
/* Uploads the pause of paused sandbox id now, in the caller's thread, unless
 * it is stored already: 0 when it is stored, or -errno with a reason
 * (-EAGAIN: it is not paused, or busy past ten minutes; an upload of it
 * under way is waited for). */
int sbx__blob_store(struct sbx_mgr *m, const char *id, char *err, size_t errlen);
/* Template snapshots shared by nodes (--node with an object store), keyed
 * by what they were made from: the name of their directory dir (a digest
 * of kernel, initramfs, image and CA, and the size) and this node's
 * compat. Fetch: the one stored under dir's key, into dir (which must not
 * exist), checked whole: 0, -ENOENT (none, or no cluster), -errno with a
 * reason. Share: dir, a whole snapshot, stored and recorded unless one is
 * under its key already: 0 (also then, and without a cluster), -errno
 * with a reason. Either stops (-ECANCELED) once *cancel is set. */
int sbx__blob_tsnap_fetch(struct sbx_mgr *m, const char *dir, const int *cancel, char *err,
			  size_t errlen);
int sbx__blob_tsnap_share(struct sbx_mgr *m, const char *dir, const int *cancel, char *err,
			  size_t errlen);
/* In a resume (the caller owns the transition): when row's pause is not
 * whole in its run directory but the object store has it, fetches it
 * there. 0 (also when there is nothing to do), or -errno with a reason. */
int sbx__blob_fetch(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen);
/* In a create from checkpoint c: when the object store has it and this
 * host does not hold it whole, fetches it into this host's checkpoint
 * directory. Sets c->dir to that directory where it is whole now. 0 (also
 * when there is nothing to do), or -errno with a reason. */
int sbx__blob_ckpt(struct sbx_mgr *m, struct store_ckpt *c, char *err, size_t errlen);

/* sbx_pool.c. Runs shell in vm as user (with env, "NAME=value", if not
 * NULL) and waits for its end: 0 when it exited 0, -EIO when not,
 * -errno. */
int sbx__run(struct vm *vm, const char *shell, const char *user, const char *env, int timeout_ms);
/* Starts the builders and fillers (after restore). */
int sbx__pools_start(struct sbx_mgr *m);
void sbx__pools_stop(struct sbx_mgr *m);
void sbx__pools_free(struct sbx_mgr *m); /* once no request can reach m */
/* A warm VM for a create of row's template and size; sets row's id and
 * run_dir: 0 or -ENOENT (none ready). */
int sbx__pool_take(struct sbx_mgr *m, struct store_sbx *row, struct vm **vm);
/* The directory of the template snapshot for row's template and size:
 * 0, or -ENOENT when there is none (yet: asking starts its build). A
 * snapshot that did not restore is dropped with sbx__template_bad. */
int sbx__template_snapshot(struct sbx_mgr *m, const struct store_sbx *row, char *dir, size_t n);
/* At the manager's start: the state directory's templates/ and images/
 * made, builds a stopped daemon left failed. */
void sbx__tpl_start(struct sbx_mgr *m);
/* sbx_build.c: the last daemon's build directories, logs and keys (and
 * the sandboxes those keys made) removed; the builds' records freed. */
void sbx__builds_start(struct sbx_mgr *m);
void sbx__builds_free(struct sbx_mgr *m);
/* A deleted template's snapshots removed, their places free again. */
void sbx__pool_forget(struct sbx_mgr *m, const char *template);
/* sbx_tpl.c: the template a create names, as its sandbox records it:
 * the account's own by name or id, a published one, or an image
 * reference (pulled and imported first if the account has none of it,
 * which takes as long as that takes). 0 with id[idlen], or -ENOENT
 * (none such), -EINVAL (its build failed, or the pull did), -errno. */
int sbx__tpl_resolve(struct sbx_mgr *m, const char *account, const char *template, char *id,
		     size_t idlen, char *err, size_t errlen);
void sbx__template_bad(struct sbx_mgr *m, const char *dir);
unsigned sbx__pool_depth(struct sbx_mgr *m);

/* sbx_code.c, in the pump with the sandbox locked: a code call's P_EVENT
 * bytes; the attributes of its P_STARTED and P_OK; and freeing it all with
 * its sop. */
void sbx__code_event(struct sop *op, const uint8_t *p, size_t n);
void sbx__code_attrs(struct sop *op, const struct proto_frame *f);
void sbx__code_free(struct sop_code *c);
/* sbx_op.c: queues code event i (sop_code_event) on a SOP_NDJSON
 * operation's stream, after the output before it. */
void sbx__queue_event(struct sop *op, uint32_t i);

/* sbx_op.c: a request's frame. sbx_begin starts request type for op and
 * returns the frame to add attributes to, with the sandbox locked, or
 * NULL (not locked) with -errno in *err: -ECONNRESET when the sandbox is
 * not running, -EAGAIN when it has too many operations or streams open.
 * Requests with output get their credit window here. sbx_end seals it,
 * unlocks and wakes the pump: 0 or -errno. sbx_abort drops it unsent and
 * unlocks. */
struct pbuf *sbx_begin(struct sbx *s, uint16_t type, struct sop *op, int *err);
int sbx_end(struct sbx *s, struct sop *op);
void sbx_abort(struct sbx *s, struct sop *op);
/* The listed directory, for P_LIST items' absolute paths, and a code
 * call's context and language, which its answer names: set before the
 * request is sent. 0 or -ENOMEM. */
int sop_set_base(struct sop *op, const char *path);
int sop_code_begin(struct sop *op, const char *context, const char *language);

/* Wakes the sandbox's pump thread (it polls an eventfd). */
static inline void wake(struct sbx *s)
{
	uint64_t one = 1;
	if (write(s->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the pump is awake anyway */
	}
}

#endif
