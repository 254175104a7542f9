/* Unit tests for the gateway's store (keys kept as hashes, conversations
 * per key) and its conversations' locks. */
#include "gateway/conv.h"
#include "gateway/gw_store.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static struct gw_store *open_fresh(void)
{
	char path[128], err[256];
	snprintf(dir, sizeof(dir), "/tmp/test_gateway_store.XXXXXX");
	if (!CHECK(mkdtemp(dir)))
		return NULL;
	snprintf(path, sizeof(path), "%s/gateway.db", dir);
	struct gw_store *s;
	if (!CHECK(gw_store_open(path, &s, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return NULL;
	}
	return s;
}

static void close_fresh(struct gw_store *s)
{
	char cmd[128];
	gw_store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

static void test_keys(void)
{
	struct gw_store *s = open_fresh();
	if (!s)
		return;
	char a[GW_KEY_SECRET_LEN + 1], b[GW_KEY_SECRET_LEN + 1], id[GW_KEY_ID_LEN];
	struct gw_key ka, kb;
	CHECK(gw_key_create(s, "alice", a, &ka) == 0);
	CHECK(gw_key_create(s, "bob", b, &kb) == 0);
	CHECK(strlen(a) == GW_KEY_SECRET_LEN && !strncmp(a, "cgw_", 4) && strcmp(a, b));
	CHECK(!strncmp(ka.id, "gwk_", 4) && strcmp(ka.id, kb.id));
	CHECK(gw_key_lookup(s, a, id) == 0 && !strcmp(id, ka.id));
	CHECK(gw_key_lookup(s, b, id) == 0 && !strcmp(id, kb.id));
	a[10] ^= 1;
	CHECK(gw_key_lookup(s, a, id) == -ENOENT);
	CHECK(gw_key_lookup(s, "", id) == -ENOENT);
	CHECK(gw_key_create(s, "", a, NULL) == -EINVAL);
	CHECK(gw_key_create(s, "tab\there", a, NULL) == -EINVAL);
	struct gw_key *ks;
	size_t n;
	CHECK(gw_key_list(s, &ks, &n) == 0 && n == 2);
	if (n == 2)
		CHECK(!strcmp(ks[0].name, "alice") && !strcmp(ks[1].name, "bob"));
	free(ks);
	CHECK(gw_key_delete(s, ka.id) == 0);
	CHECK(gw_key_delete(s, ka.id) == -ENOENT);
	CHECK(gw_key_lookup(s, b, id) == 0);
	close_fresh(s);
}

static void test_conversations(void)
{
	struct gw_store *s = open_fresh();
	if (!s)
		return;
	char a[GW_KEY_SECRET_LEN + 1], b[GW_KEY_SECRET_LEN + 1], sbx[GW_SBX_ID_LEN];
	struct gw_key ka, kb;
	CHECK(gw_key_create(s, "alice", a, &ka) == 0 && gw_key_create(s, "bob", b, &kb) == 0);
	CHECK(gw_conv_get(s, ka.id, "c1", sbx) == -ENOENT);
	CHECK(gw_conv_set(s, ka.id, "c1", "sbx_1") == 0);
	CHECK(gw_conv_get(s, ka.id, "c1", sbx) == 0 && !strcmp(sbx, "sbx_1"));
	/* the same conversation id under another key is another conversation */
	CHECK(gw_conv_get(s, kb.id, "c1", sbx) == -ENOENT);
	CHECK(gw_conv_set(s, kb.id, "c1", "sbx_2") == 0);
	CHECK(gw_conv_get(s, ka.id, "c1", sbx) == 0 && !strcmp(sbx, "sbx_1"));
	CHECK(gw_conv_set(s, ka.id, "c1", "sbx_3") == 0); /* replaced */
	CHECK(gw_conv_get(s, ka.id, "c1", sbx) == 0 && !strcmp(sbx, "sbx_3"));
	CHECK(gw_conv_set(s, ka.id, "it's \"quoted\"; DROP TABLE keys", "sbx_4") == 0);
	char(*ids)[GW_SBX_ID_LEN];
	size_t n;
	CHECK(gw_conv_sandboxes(s, ka.id, &ids, &n) == 0 && n == 2);
	free(ids);
	/* a deleted key takes its conversations along; an unknown key has none */
	CHECK(gw_key_delete(s, ka.id) == 0);
	CHECK(gw_conv_get(s, ka.id, "c1", sbx) == -ENOENT);
	CHECK(gw_conv_set(s, ka.id, "c1", "sbx_5") < 0);
	CHECK(gw_conv_get(s, kb.id, "c1", sbx) == 0 && !strcmp(sbx, "sbx_2"));
	close_fresh(s);
}

struct waiter {
	struct conv_locks *l;
	int r;
};

static void *take_later(void *arg)
{
	struct waiter *w = arg;
	w->r = conv_take(w->l, "gwk_a", "c", 5000);
	if (w->r == 0)
		conv_give(w->l, "gwk_a", "c");
	return NULL;
}

static void test_locks(void)
{
	struct conv_locks *l;
	if (!CHECK(conv_locks_new(&l) == 0))
		return;
	CHECK(conv_take(l, "gwk_a", "c", 0) == 0);
	CHECK(conv_take(l, "gwk_a", "c", 50) == -EBUSY);   /* held: waits, then refuses */
	CHECK(conv_take(l, "gwk_b", "c", 0) == 0);         /* another key's: free */
	CHECK(conv_take(l, "gwk_a", "d", 0) == 0);
	/* a waiter gets it once it is given */
	struct waiter w = { .l = l, .r = -1 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, take_later, &w) == 0);
	usleep(100 * 1000);
	conv_give(l, "gwk_a", "c");
	pthread_join(t, NULL);
	CHECK(w.r == 0);
	CHECK(conv_take(l, "gwk_a", "c", 0) == 0);
	conv_give(l, "gwk_a", "c");
	conv_give(l, "gwk_b", "c");
	conv_give(l, "gwk_a", "d");
	conv_give(l, "gwk_a", "never-taken"); /* harmless */
	char big[GW_CONV_MAX + 2];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(conv_take(l, "gwk_a", big, 0) == -EINVAL);
	conv_locks_free(l);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "gateway_keys", test_keys },
		{ "gateway_conversations", test_conversations },
		{ "gateway_locks", test_locks },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
