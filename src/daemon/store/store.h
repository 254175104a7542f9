/*
 * store: the daemon's state: accounts, API keys (only their SHA-256 is
 * kept), sandboxes, checkpoints, secrets and usage. Everything the daemon
 * must remember across a restart lives here. This header is the whole of
 * it the daemon sees, and what a second back end implements: no SQL, no
 * SQLite type, opaque struct store; a state change is a conditional move
 * (store_sbx_move), never a blind write. Two back ends, one set of
 * queries (store*.c, on lib/sql): a SQLite file in WAL mode, or
 * PostgreSQL when store_open is given its URL; one connection behind a
 * mutex, so any thread may call in. The queries keep to SQL both speak
 * (lib/sql turns ?N into $N); usage's aggregate and the key list's order
 * are spelled per back end, as noted where they are.
 */
#ifndef CPUOS_STORE_H
#define CPUOS_STORE_H

#include <stddef.h>

struct store;

/* Opens (creating if needed) the database at path, sets WAL and creates the
 * schema; or, when path is a PostgreSQL URL (lib/sql.h), connects and
 * creates or migrates the schema there. 0 or -errno with a reason in err. */
int store_open(const char *path, struct store **out, char *err, size_t errlen);
void store_close(struct store *s);
/* Rewrites the database (VACUUM) and empties its WAL, so no free page or
 * old frame still holds what was overwritten (PostgreSQL: VACUUM FULL of
 * the tables that held secrets and keys): 0 or -EIO. */
int store_scrub(struct store *s);

/* ---- API keys ---- */
/* The account of the Unix socket (the administrator): no key may have it,
 * or that key would see every sandbox made on the socket. */
#define STORE_ADMIN_ACCOUNT "admin"

#define STORE_KEY_SECRET_LEN 70 /* "cpuos_" + 64 hex, NUL included below */

struct store_key {
	char id[32];       /* "key_" + 16 hex */
	char name[128];
	char account[128];
	long long created_at; /* unix seconds */
};

/* Creates a key named name for account (created if new). The secret is
 * written once into secret[STORE_KEY_SECRET_LEN + 1] and never stored.
 * 0 or -errno (-EINVAL for an empty or over-long name/account, -EPERM for
 * the reserved STORE_ADMIN_ACCOUNT). */
int store_key_create(struct store *s, const char *name, const char *account, char *secret,
		     struct store_key *out);
/* Finds the account of a presented secret: 0 with account filled, or
 * -ENOENT (also for a key of the reserved account, made before it was
 * reserved). Compares hashes, never secrets. */
int store_key_lookup(struct store *s, const char *secret, char *account, size_t accountlen);
/* The same, also writing the key's id into key_id[idlen] (32 bytes always
 * hold one; -ERANGE if idlen is too small); key_id may be NULL. */
int store_key_lookup_id(struct store *s, const char *secret, char *account, size_t accountlen,
			char *key_id, size_t idlen);
/* All keys, oldest first; *out is malloc'd (free it). */
int store_key_list(struct store *s, struct store_key **out, size_t *n);
int store_key_delete(struct store *s, const char *id); /* -ENOENT if unknown */

/* ---- sandboxes ---- */
struct store_sbx {
	char id[32];         /* "sbx_" + 16 hex */
	char account[128];
	char template[64];
	char state[16];      /* "running", "paused", "stopped", "lost" */
	char end_reason[32]; /* "" while running */
	unsigned vcpus, memory_mb, disk_mb;
	long long created_at, expires_at; /* unix seconds */
	char *metadata_json; /* a JSON object of strings; malloc'd, owned */
	char *env_json;      /* likewise */
	char run_dir[256];
	int qemu_pid;
	char on_timeout[8];  /* "pause" (default) or "kill" */
	long long timeout_left_s; /* paused: seconds its timeout had left */
	long long paused_at; /* unix seconds; 0 unless paused */
	char parent[32];     /* forked from (sbx_...) or made from (ckp_...) */
	char key_id[32];     /* the key that created it; "" on the socket */
	unsigned generation; /* restores so far (fork, resume) */
	char *network_json;  /* egress policy, compact JSON; "" = the default; owned */
	int net_slot;        /* host network slot while it runs, else -1 */
	int is_public;       /* its port URLs need no token */
	char traffic_token[40]; /* what its port URLs need (32 hex); "" = none */
	char *secrets_json;  /* names of the secrets it holds placeholders of,
			      * a JSON array; NULL = "[]"; owned */
	char *transforms_json; /* request transformations (rules.h), a JSON
				* array; NULL = "[]"; owned */
	char stored[104];    /* the pause in the object store: "<generation>
			      * <SHA-256 of its manifest>[ <compat>]" (what
			      * restores it, as store_node's); "" = none */
	char node[64];       /* the node that owns it; "" on a single host
			      * (written by the store, not taken from here) */
	long long idle_timeout_s; /* pauses itself after that long idle; 0 never */
};

/* Frees the strings inside (not the struct). */
void store_sbx_release(struct store_sbx *x);
void store_sbx_free_list(struct store_sbx *xs, size_t n);

struct store_usage_event;
/* Inserts a new sandbox, owned by this store's node, and, in the same
 * transaction, usage (NULL: none): 0, -EEXIST, -EINVAL, -ESTALE (the node
 * was declared down), -errno. */
int store_sbx_insert(struct store *s, const struct store_sbx *x,
		     const struct store_usage_event *usage);
/* 0 with *out filled (release it), or -ENOENT. */
int store_sbx_get(struct store *s, const char *id, struct store_sbx *out);
int store_sbx_set_expiry(struct store *s, const char *id, long long expires_at);
/* The egress policy (network_json, as store_sbx's): 0, -ENOENT, -errno. */
int store_sbx_set_policy(struct store *s, const char *id, const char *network_json);
/* The request transformations (transforms_json): 0, -ENOENT, -errno. */
int store_sbx_set_transforms(struct store *s, const char *id, const char *transforms_json);

/* A sandbox's move from one stored state to another (sbx_state.c names
 * each), with what goes with the new state and the usage event that
 * records it, as one transaction whose UPDATE holds only while the row is
 * still in state from: the write of a transition that lost a race finds
 * nothing to change. */
struct store_sbx_move {
	const char *id;
	const char *from, *to;  /* "running", "paused", "stopped", "lost" */
	const char *end_reason; /* to stopped or lost */
	long long paused_at, timeout_left_s; /* to paused */
	long long expires_at;   /* to running */
	int qemu_pid;           /* to running */
	unsigned generation;    /* to running */
	int net_slot;           /* to running; -1 for none */
	const struct store_usage_event *usage; /* NULL: none */
};
/* 0, -ESTALE when the row is not in state from (nothing written), -ENOENT
 * when there is no such sandbox, -EINVAL, -errno. */
int store_sbx_move(struct store *s, const struct store_sbx_move *mv);

struct store_kv {
	const char *key, *value;
};

/* Lists sandboxes, newest first (created_at, then id). account NULL means
 * every account; state NULL any state; every metadata pair in meta must
 * match exactly. limit 1..100. cursor is NULL or a next_cursor from an
 * earlier call (an invalid one is -EINVAL). On return next_cursor holds the
 * cursor for the following page, or "" when this was the last.
 * *out is malloc'd: free with store_sbx_free_list. */
int store_sbx_list(struct store *s, const char *account, const char *state,
		   const struct store_kv *meta, size_t nmeta, size_t limit, const char *cursor,
		   struct store_sbx **out, size_t *n, char *next_cursor, size_t cursorlen);
/* Every paused sandbox (retention expiry); *out as for store_sbx_list. */
int store_sbx_paused(struct store *s, struct store_sbx **out, size_t *n);

/* The pause of sandbox id at generation is in the object store as stored
 * (store_sbx's form): 0, or -ESTALE when the row is no longer paused at
 * that generation (nothing written), -ENOENT, -EINVAL. */
int store_sbx_set_stored(struct store *s, const char *id, unsigned generation, const char *stored);
/* Splits a stored record (store_sbx's form) into its generation, the
 * SHA-256 of its manifest and its compat ("" when it names none): 0 or
 * -EINVAL. */
int store_stored_split(const char *stored, unsigned *generation, char sha[65], char compat[24]);
/* Forgets the stored pause of id if it is still was: 0, -ESTALE. */
int store_sbx_clear_stored(struct store *s, const char *id, const char *was);
/* Paused sandboxes, their pauses stored, that no live node owns (let go
 * of, or of a node declared down), paused at or before paused_before
 * (seconds): what a node takes over to end by the retention. At most 100,
 * the oldest first; *out as for store_sbx_list. */
int store_sbx_orphans(struct store *s, long long paused_before, struct store_sbx **out,
		      size_t *n);
/* Ended sandboxes (stopped, lost) whose stored pause is still to delete. */
int store_sbx_stored_ended(struct store *s, struct store_sbx **out, size_t *n);

/* ---- checkpoints: a sandbox's whole state, kept under a name ---- */
struct store_ckpt {
	char id[32];         /* "ckp_" + 16 hex */
	char name[128];
	char account[128];
	char sbx_id[32];     /* taken from */
	char template[64];
	unsigned vcpus, memory_mb, disk_mb;
	char *env_json;      /* malloc'd, owned */
	char dir[256];       /* the snapshot directory */
	long long size_bytes, created_at;
	char stored[136];    /* in the object store: "<key> <SHA-256 of its
			      * stored manifest>"; "" = not yet */
};
void store_ckpt_release(struct store_ckpt *c);
void store_ckpt_free_list(struct store_ckpt *cs, size_t n);
/* Records it as this store's node's: 0, -EEXIST (the account has a
 * checkpoint of that name), -ESTALE (the node was declared down), -errno. */
int store_ckpt_insert(struct store *s, const struct store_ckpt *c);
/* By id, or by name within account: 0 with *out filled, or -ENOENT. */
int store_ckpt_get(struct store *s, const char *account, const char *id_or_name,
		   struct store_ckpt *out);
/* What checkpoint id_or_name of account needs of a host that restores it:
 * the compat of the node that made it ("" unknown). 0, -ENOENT (no such
 * checkpoint, or made on a single host), -EIO. */
int store_ckpt_compat(struct store *s, const char *account, const char *id_or_name,
		      char compat[24]);
/* account NULL: every account; newest first. */
int store_ckpt_list(struct store *s, const char *account, struct store_ckpt **out, size_t *n);
/* Deletes checkpoint id; one that was stored goes, in the same
 * transaction, to the trash, until its objects are deleted too. 0 or
 * -ENOENT if unknown. */
int store_ckpt_delete(struct store *s, const char *id);
/* This node's checkpoints not yet in the object store, oldest first. */
int store_ckpt_unstored(struct store *s, struct store_ckpt **out, size_t *n);
/* Checkpoint id is in the object store as stored: 0, or -ENOENT when it
 * is gone or was stored already (nothing written), -EINVAL. */
int store_ckpt_set_stored(struct store *s, const char *id, const char *stored);
/* The stored forms of deleted checkpoints whose objects are still to
 * delete: *out is an array of n malloc'd strings, then itself malloc'd. */
int store_ckpt_trash(struct store *s, char ***out, size_t *n);
/* Their objects are gone: forgets stored. 0 or -ENOENT. */
int store_ckpt_trash_done(struct store *s, const char *stored);

/* ---- secrets: values for the egress proxy to put in requests ---- */
struct store_secret {
	char account[128];
	char name[65];        /* an environment variable's name */
	char placeholder[64]; /* what sandboxes see instead of the value */
	char *value;          /* sealed (net/seal.h); malloc'd, owned */
	char *hosts_json;     /* the names it may go to, a JSON array; owned */
	int allow_http;       /* in plain HTTP too, not only over checked TLS */
	int sealed;           /* 0: value is plaintext, from a daemon before */
	long long created_at, updated_at;
};
void store_secret_release(struct store_secret *x);
void store_secret_free_list(struct store_secret *xs, size_t n);
/* Creates (with x's placeholder) or replaces the value, hosts and
 * allow_http of an existing one (which keeps its placeholder and
 * created_at); x->updated_at is now. *created (may be NULL): which. */
int store_secret_put(struct store *s, const struct store_secret *x, int *created);
/* The account's secrets by name (name NULL: all of them; account NULL:
 * every account's). */
int store_secret_list(struct store *s, const char *account, const char *name,
		      struct store_secret **out, size_t *n);
/* One by name: 0 with *out (release it), -ENOENT, -errno. */
int store_secret_get(struct store *s, const char *account, const char *name,
		     struct store_secret *out);
int store_secret_delete(struct store *s, const char *account, const char *name); /* -ENOENT */
/* A plaintext value (was) replaced by its sealed text: 0, or -ENOENT when
 * the secret is gone, sealed or set again since. */
int store_secret_seal(struct store *s, const char *account, const char *name, const char *was,
		      const char *sealed);

/* ---- usage: one event per state change, integrated by queries ---- */
struct store_usage_event {
	const char *sbx_id, *account, *key_id;
	const char *state;   /* "running", "paused" or "stopped" */
	unsigned vcpus, memory_mb;
	long long storage_bytes; /* paused: bytes kept on disk */
	long long at_ms;     /* unix milliseconds */
};
int store_usage_add(struct store *s, const struct store_usage_event *e);

struct store_usage {
	double running_s;        /* sandbox-seconds running */
	double vcpu_s;           /* running seconds x vCPUs */
	double gib_s;            /* running seconds x GiB of memory */
	double paused_gib_s;     /* paused seconds x GiB kept on disk */
	unsigned sandboxes;      /* that ran or were paused in the window */
};
/* Usage of account (NULL: all) in [from_ms, to_ms), optionally of one key
 * (key_id NULL: all keys). An open interval (still running) counts up to
 * min(to_ms, now_ms). 0 or -errno. */
int store_usage_query(struct store *s, const char *account, const char *key_id,
		      long long from_ms, long long to_ms, long long now_ms,
		      struct store_usage *out);

/* How many sandboxes of account (NULL: every account) are in each state
 * (GET /metrics). */
struct store_sbx_counts {
	unsigned running, paused, stopped, lost;
};
int store_sbx_count_by_state(struct store *s, const char *account, struct store_sbx_counts *out);

/* Running sandboxes of account. */
int store_sbx_count_running(struct store *s, const char *account);
/* What the running sandboxes of account hold, on every node (its quota),
 * or (account NULL) those of every account on this store's node (its
 * host's memory). */
struct store_sbx_sum {
	unsigned n;
	unsigned long long vcpus, memory_mb;
};
int store_sbx_sum_running(struct store *s, const char *account, struct store_sbx_sum *out);
/* Every sandbox in state "running", any account (the daemon re-attaches
 * them at start); *out as for store_sbx_list. */
int store_sbx_running(struct store *s, struct store_sbx **out, size_t *n);

/* Claims the database for this process: alone (a single host's daemon),
 * or shared with others that claim it shared (nodes); claimed again on a
 * new connection after a break, and if that cannot be, the store does
 * nothing more. 0, -EBUSY when another holds it the other way, -EIO. A
 * SQLite file is a host's own: always 0. */
int store_claim(struct store *s, int shared);

/* ---- nodes: daemons that share one database (cpuosd --node) ---- */
struct store_node {
	char name[64];      /* [A-Za-z0-9._-], 1..63 */
	char url[256];      /* where an API reaches it */
	char ports_url[256]; /* where an API reaches its port URLs' proxy ("": none) */
	char state[12];     /* "ready", "draining" (ready, and drained), "down" */
	int drained;        /* takes no new sandboxes, whatever its state */
	long long epoch;    /* its incarnation */
	long long lease_until_ms, joined_at;
	unsigned vcpus;
	unsigned long long memory_mb;
	/* What placement weighs: the snapshots it restores ("" unknown: any),
	 * its free warm-pool VMs by template ("base:2,python:1") and the
	 * template snapshots it holds ("base,python"), of the default size. */
	char compat[24];
	char warm[256], held[256];
	long long disk_free_mb; /* for sandboxes, at its last renewal; -1: unsaid */
};
/* Node n->name joins (made, or back): one more epoch, ready, its lease
 * until n->lease_until_ms; the rows of the sandboxes it owns are taken at
 * that epoch; and from now on this store writes as that node at that
 * epoch (every change to a sandbox's row holds only while the row is its
 * own at it). 0 with the epoch in *epoch, -EINVAL, -errno. */
int store_node_join(struct store *s, const struct store_node *n, long long *epoch);
/* What this store's node offers now (store_node's compat, warm, held and
 * disk_free_mb): 0, -ESTALE (fenced), -EINVAL, -EIO. */
int store_node_offers(struct store *s, const char *compat, const char *warm, const char *held,
		      long long disk_free_mb);
/* The name this store writes as ("" if none). */
const char *store_node_name(struct store *s);
/* Renews this store's node's lease: 0, or -ESTALE when the node was
 * declared down or joined again elsewhere since (it is fenced: it must
 * stop what it runs), -errno. */
int store_node_renew(struct store *s, long long lease_until_ms);
/* Node name: 0 with *out, -ENOENT. */
int store_node_get(struct store *s, const char *name, struct store_node *out);
/* Drains node name (drain 1: it takes no new sandboxes, also after a
 * restart or after being declared down) or makes it ready again (0): 0,
 * -ENOENT. */
int store_node_drain(struct store *s, const char *name, int drain);
/* This store's node takes paused sandbox id, whose pause is in the object
 * store as stored, from the node that owned it, which was declared down or
 * let go of it (store_sbx_let_go): it is this node's from now on, at its
 * epoch, its run directory run_dir (its pause is fetched there). 0,
 * -ESTALE when any of that does not hold (or there is no such sandbox;
 * nothing written), -EINVAL. */
int store_sbx_take(struct store *s, const char *id, const char *stored, const char *run_dir);
/* This store's node lets go of its paused sandbox id, whose pause is in
 * the object store as stored: the row names no node (''), so any node may
 * take it (store_sbx_take). 0, -ESTALE when the row is not that (nothing
 * written), -EINVAL (no node, no record). */
int store_sbx_let_go(struct store *s, const char *id, const char *stored);
/* A template snapshot in the object store, by the key of what it was made
 * from (its directory's name and the compat of the node that made it). */
struct store_tsnap {
	char key[128];
	char prefix[192];  /* its objects */
	char stored[65];   /* the SHA-256 of its stored manifest */
	char node[64];     /* that stored it */
};
/* The template snapshot stored under key: 0 with *out, -ENOENT, -EIO. */
int store_tsnap_get(struct store *s, const char *key, struct store_tsnap *out);
/* Records t as stored by this store's node, unless one is stored under its
 * key already (the first wins): 0, -EEXIST, -EINVAL, -EIO. */
int store_tsnap_put(struct store *s, const struct store_tsnap *t);
/* Every node, by name; *out malloc'd. */
int store_node_list(struct store *s, struct store_node **out, size_t *n);
/* Declares down each node whose lease ran out before now_ms: its epoch
 * moves on, so it writes nothing more; its running sandboxes are lost
 * (their usage ends at now_ms); its paused ones stay its own. Each node in
 * a transaction of its own. The number declared down, or -errno. */
int store_nodes_reap(struct store *s, long long now_ms);

/* ---- placement (cpuos-api; store_place.c) ---- */
/* A node that may take a sandbox (ready, not drained, leased), with what
 * it holds: its running sandboxes and the live reservations on it. */
struct store_load {
	char name[64];
	char url[256];
	unsigned vcpus;                 /* its CPUs */
	unsigned long long memory_mb;   /* the guest memory it may hold (0: no limit) */
	unsigned running;
	unsigned long long held_vcpus, held_memory_mb;
	char compat[24], warm[256], held[256]; /* as in store_node */
	long long disk_free_mb;                /* as in store_node */
	unsigned starting;                     /* its live reservations: creates under way */
	unsigned long long starting_disk_mb;   /* the disk they hold */
};
/* What a sandbox of memory_mb and disk_mb may write on its node's disk:
 * its writable layer full and a pause of its memory. */
unsigned long long store_disk_need(unsigned memory_mb, unsigned disk_mb);
/* Whether node l has room for one more sandbox of memory_mb and disk_mb:
 * its memory (if it has a limit), and its free disk (if it said) less
 * what its creates under way hold. What store_reserve checks again in
 * its transaction. */
int store_load_room(const struct store_load *l, unsigned memory_mb, unsigned disk_mb);
/* The nodes that may take a sandbox at now_ms, by name, or (sample > 0)
 * that many of them drawn at random, whose loads alone are summed; *out
 * malloc'd. */
int store_node_loads(struct store *s, long long now_ms, unsigned sample, struct store_load **out,
		     size_t *n);
/* An account's limits across every node; 0: none. */
struct store_quota {
	unsigned max_sandboxes, vcpus;
	unsigned long long memory_mb;
};
/* What a placement holds until its node has made the sandbox. */
struct store_rsv {
	char id[32];
	char account[128];
	char node[64];
	unsigned vcpus, memory_mb;
	unsigned long long disk_mb; /* what it may write on its node's disk */
	long long until_ms;         /* dropped after, if never released */
	unsigned max_starting;      /* the node's creates under way, with this
				     * one, at most (0: any number) */
};
/* Writes reservation x, in one transaction holding its account and its
 * node, if the account's running sandboxes and reservations with x stay
 * within q, and the node's within its memory, its free disk (less what
 * its other reservations hold) and x->max_starting: 0; -EDQUOT (the
 * account), -EAGAIN (the node is full or busy), -ESTALE (the node takes no sandboxes now:
 * down, drained or its lease ran out by now_ms), -EEXIST (its id is
 * taken), -EINVAL, -EIO; why in
 * err. Reservations past their until_ms are dropped on the way. */
int store_reserve(struct store *s, const struct store_rsv *x, const struct store_quota *q,
		  long long now_ms, char *err, size_t errlen);
/* Drops reservation id (none: 0): 0 or -errno. */
int store_unreserve(struct store *s, const char *id);

/* ---- a whole store into another ---- */
/* ---- lifecycle events and webhooks (store_events.c) ---- */
struct store_event {
	long long seq;   /* set by the store, increasing */
	long long at_ms; /* unix ms */
	char account[128];
	char sbx_id[32];
	char type[16];   /* created, paused, resumed, forked, checkpointed, timeout,
			  * killed, stopped, lost */
	char cause[32];  /* why, where there is more to say ("idle", "panic"); may be "" */
};
/* Records e (its seq ignored) as this store's node's: 0, -EINVAL, -EIO. */
int store_event_add(struct store *s, const struct store_event *e);
/* Events after seq `after` of account and sandbox (NULL: any), oldest first,
 * at most limit (1..1000); *out malloc'd. */
int store_event_list(struct store *s, const char *account, const char *sbx_id, long long after,
		     size_t limit, struct store_event **out, size_t *n);
/* Drops events and delivery attempts from before before_ms. */
int store_event_prune(struct store *s, long long before_ms);

struct store_webhook {
	char id[32];      /* "whk_" + 16 hex */
	char account[128];
	char url[1024];
	char types[512];  /* a JSON array of event types; [] for every one */
	char secret[80];  /* HMAC-SHA256 key of its signatures */
	long long created_ms;
};
int store_webhook_add(struct store *s, const struct store_webhook *w);
/* Webhooks of account (NULL: every one), oldest first; *out malloc'd. */
int store_webhook_list(struct store *s, const char *account, struct store_webhook **out, size_t *n);
/* 0, or -ENOENT. Its cursors and delivery log go with it. */
int store_webhook_delete(struct store *s, const char *id);
/* What this node has yet to deliver to w: its events of w's account since
 * w was made, past its cursor, oldest first, at most limit; *out malloc'd. */
int store_webhook_pending(struct store *s, const struct store_webhook *w, size_t limit,
			  struct store_event **out, size_t *n);
/* Logs attempt (from 1; 0: none, an event it does not want, not logged) to
 * deliver event seq to webhook id (status: the HTTP status, 0 when there
 * was none, error the reason); a 2xx moves this node's cursor past seq. */
int store_webhook_done(struct store *s, const char *id, long long seq, int attempt, int status,
		       const char *error, long long at_ms);
struct store_delivery {
	long long event_seq, at_ms;
	int attempt, status;
	char error[256];
};
/* The newest attempts to deliver to webhook id, at most limit (1..1000). */
int store_delivery_list(struct store *s, const char *id, size_t limit, struct store_delivery **out,
			size_t *n);

struct store_copied {
	long long accounts, keys, sandboxes, checkpoints, usage_events, secrets, webhooks;
};
/* Copies every row of from into to, which must hold nothing yet (-EEXIST),
 * in one transaction on each (a daemon writing to from waits meanwhile):
 * how a single host's SQLite state moves to PostgreSQL. With node (not
 * NULL or ""), its sandboxes become that node's. 0 with the counts in
 * *out, or -errno with a reason in err. */
int store_copy(struct store *from, struct store *to, const char *node, struct store_copied *out,
	       char *err, size_t errlen);

/* ---- templates an account imported or pulled (store_tpl.c) ---- */
struct store_tpl {
	char id[32];         /* "tpl_" + 16 hex: its files' name, its sandboxes' template */
	char account[128];
	char name[64];       /* the account's name for it */
	char source[512];    /* the image reference pulled, or "upload" */
	char state[16];      /* "building", "ready", "failed" */
	char error[512];     /* why it failed */
	long long size_bytes; /* its erofs image */
	long long created_ms;
	char node[64];       /* the node that holds its files ("" on a single host) */
};

/* Records a build begun (state "building"); a failed one of that name in
 * that account gives way. 0, -EEXIST (the name is taken), -EINVAL, -EIO. */
int store_tpl_insert(struct store *s, const struct store_tpl *t);
/* A build's end: state "ready" with its size, or "failed" with error.
 * -ENOENT when it is not building (deleted meanwhile). */
int store_tpl_finish(struct store *s, const char *id, const char *state, const char *error,
		     long long size_bytes);
/* At a start: builds this node's last daemon left unfinished are failed. */
int store_tpl_fail_building(struct store *s, const char *error);
/* How many of an account's templates are being built, or -EIO. */
int store_tpl_building(struct store *s, const char *account);
/* One by id; by an account's name for it; an account's pulled from
 * source (a ready one first, then one building, then the newest failed).
 * 0 or -ENOENT, -EIO. */
int store_tpl_get(struct store *s, const char *id, struct store_tpl *out);
int store_tpl_by_name(struct store *s, const char *account, const char *name,
		      struct store_tpl *out);
int store_tpl_by_source(struct store *s, const char *account, const char *source,
			struct store_tpl *out);
/* An account's, by name; *out malloc'd. */
int store_tpl_list(struct store *s, const char *account, struct store_tpl **out, size_t *n);
/* The bytes of an account's ready templates. */
int store_tpl_usage(struct store *s, const char *account, long long *bytes);
/* 1 if a sandbox not stopped, or a checkpoint, has template id; 0 if
 * none; -EIO. */
int store_tpl_in_use(struct store *s, const char *id);
int store_tpl_delete(struct store *s, const char *id);

#endif
