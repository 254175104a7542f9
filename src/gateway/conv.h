/*
 * conv: one request at a time per conversation. A conversation is (gateway
 * key id, conversation id): another key's same id is another conversation,
 * so no key can even hold up another's. A second request waits for the
 * first, bounded, then gets a refusal.
 */
#ifndef CPUOS_GW_CONV_H
#define CPUOS_GW_CONV_H

#define CONV_MAX 4096 /* conversations held or waited for at once */

struct conv_locks;

int conv_locks_new(struct conv_locks **out);
void conv_locks_free(struct conv_locks *l);

/* Takes the conversation for the calling request: 0; -EBUSY when another
 * request held it for all of wait_ms; -EAGAIN past CONV_MAX; -ENOMEM. */
int conv_take(struct conv_locks *l, const char *key_id, const char *conv, int wait_ms);
/* Gives back what conv_take took. */
void conv_give(struct conv_locks *l, const char *key_id, const char *conv);

#endif
