/*
 * gw_store: the gateway's own state in SQLite (WAL): its API keys (only the
 * SHA-256 of each is kept) and the map from a conversation, (key id,
 * conversation id), to its cpuos sandbox. One connection behind a mutex,
 * so any thread may call in; the keys subcommand opens the same file from
 * another process while the gateway runs.
 */
#ifndef CPUOS_GW_STORE_H
#define CPUOS_GW_STORE_H

#include <stddef.h>

struct gw_store;

#define GW_KEY_PREFIX	  "cgw_"
#define GW_KEY_SECRET_LEN 68  /* "cgw_" + 64 hex */
#define GW_KEY_ID_LEN	  24  /* "gwk_" + 16 hex + NUL, with room */
#define GW_CONV_MAX	  256 /* bytes of a conversation id */
#define GW_SBX_ID_LEN	  64

struct gw_key {
	char id[GW_KEY_ID_LEN];
	char name[128];
	long long created_at; /* unix seconds */
};

/* Opens (creating it 0600 if needed) the database at path and brings its
 * schema up to date. 0 or -errno with a reason in err. */
int gw_store_open(const char *path, struct gw_store **out, char *err, size_t errlen);
void gw_store_close(struct gw_store *s);

/* Creates a key named name (1..127 printable bytes): its secret is written
 * once into secret[GW_KEY_SECRET_LEN + 1] and never stored. 0, -EINVAL for
 * a bad name, -errno. */
int gw_key_create(struct gw_store *s, const char *name, char *secret, struct gw_key *out);
/* The id of the key whose secret is presented: 0 with id[GW_KEY_ID_LEN]
 * filled, or -ENOENT. Compares hashes, never secrets. */
int gw_key_lookup(struct gw_store *s, const char *secret, char *id);
/* Every key, oldest first; *out is malloc'd (free it). */
int gw_key_list(struct gw_store *s, struct gw_key **out, size_t *n);
/* Deletes a key and its conversations: 0 or -ENOENT. */
int gw_key_delete(struct gw_store *s, const char *id);

/* The sandbox of a conversation: 0 with sbx[GW_SBX_ID_LEN], or -ENOENT. */
int gw_conv_get(struct gw_store *s, const char *key_id, const char *conv, char *sbx);
/* Records (or replaces) the sandbox of a conversation: 0 or -errno. */
int gw_conv_set(struct gw_store *s, const char *key_id, const char *conv, const char *sbx);
/* The sandbox ids of a key's conversations; *out holds n ids of
 * GW_SBX_ID_LEN bytes each, malloc'd (free it). */
int gw_conv_sandboxes(struct gw_store *s, const char *key_id, char (**out)[GW_SBX_ID_LEN],
		      size_t *n);

#endif
