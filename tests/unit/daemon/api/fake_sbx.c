/* fake_sbx: see fake_sbx.h. */
#include "tests/unit/daemon/api/fake_sbx.h"

#include "daemon/net/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fake_sbx fake;

struct sbx {
	char id[64];
};

struct sop {
	enum sop_mode mode;
	struct pbuf out[2];
	int sent;
};

static struct sbx the_sandbox = { "sbx_fake" };

/* Copies s into the next free string slot of the record: its copy. */
static const char *keep(char (*slots)[512], size_t nslots, size_t *used, const char *s)
{
	if (!s || *used >= nslots)
		return NULL;
	snprintf(slots[*used], 512, "%s", s);
	return slots[(*used)++];
}

int sbx_acquire(struct sbx_mgr *m, const char *id, const char *account, int flags,
		struct sbx **out, char *err, size_t errlen)
{
	(void)m;
	fake.acquires++;
	snprintf(fake.acquired_id, sizeof(fake.acquired_id), "%s", id);
	snprintf(fake.acquired_account, sizeof(fake.acquired_account), "%s", account ? account : "");
	fake.acquired_flags = flags;
	*out = NULL;
	if (fake.acquire_err) {
		snprintf(err, errlen, "fake: %s", strerror(-fake.acquire_err));
		return fake.acquire_err;
	}
	*out = &the_sandbox;
	return 0;
}

struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account)
{
	(void)m;
	(void)id;
	(void)account;
	return fake.acquire_err ? NULL : &the_sandbox;
}

void sbx_put(struct sbx *s)
{
	(void)s;
}

const char *sbx_env_json(const struct sbx *s)
{
	(void)s;
	return "{}";
}

int sbx_request(struct sbx *s, struct sop *op, const struct sbx_request *q)
{
	(void)s;
	fake.requests++;
	fake.req = *q;
	size_t used = 0, n = sizeof(fake.strs) / sizeof(fake.strs[0]);
	static const char *argv[8], *env[8];
	fake.req.cmd = keep(fake.strs, n, &used, q->cmd);
	for (size_t i = 0; i < q->argc && i < 8; i++)
		argv[i] = keep(fake.strs, n, &used, q->argv[i]);
	for (size_t i = 0; i < q->nenv && i < 8; i++)
		env[i] = keep(fake.strs, n, &used, q->env[i]);
	fake.req.argv = argv;
	fake.req.env = env;
	fake.req.cwd = keep(fake.strs, n, &used, q->cwd);
	fake.req.user = keep(fake.strs, n, &used, q->user);
	fake.req.path = keep(fake.strs, n, &used, q->path);
	fake.req.path2 = keep(fake.strs, n, &used, q->path2);
	fake.req.context = keep(fake.strs, n, &used, q->context);
	fake.req.language = keep(fake.strs, n, &used, q->language);
	fake.req.code = keep(fake.strs, n, &used, q->code);
	fake.req.formats = keep(fake.strs, n, &used, q->formats);
	op->sent = 1;
	for (int i = 0; i < 2; i++)
		pbuf_append(&op->out[i], fake.out[i], strlen(fake.out[i]));
	return 0;
}

struct sop *sop_new(enum sop_mode mode, size_t cap)
{
	(void)cap;
	struct sop *op = calloc(1, sizeof(*op));
	if (op)
		op->mode = mode;
	return op;
}

void sop_free(struct sbx *s, struct sop *op)
{
	(void)s;
	if (!op)
		return;
	pbuf_release(&op->out[0]);
	pbuf_release(&op->out[1]);
	free(op);
}

int sbx_wait(struct sbx *s, struct sop *op, int want_start, int timeout_ms, struct sop_state *st)
{
	(void)s;
	(void)op;
	(void)want_start;
	(void)timeout_ms;
	*st = fake.st;
	return 0;
}

int sbx_data(struct sbx *s, struct sop *op, uint16_t flags, const void *p, size_t n,
	     int timeout_ms)
{
	(void)s;
	(void)op;
	(void)flags;
	(void)timeout_ms;
	size_t k = n < sizeof(fake.data) - fake.ndata ? n : sizeof(fake.data) - fake.ndata;
	memcpy(fake.data + fake.ndata, p, k);
	fake.ndata += k;
	return 0;
}

int sbx_stdin(struct sbx *s, uint32_t proc, uint16_t flags, const void *p, size_t n,
	      int timeout_ms)
{
	(void)proc;
	return sbx_data(s, NULL, flags, p, n, timeout_ms);
}

ssize_t sbx_read(struct sbx *s, struct sop *op, void *buf, size_t n, int timeout_ms)
{
	(void)s;
	(void)timeout_ms;
	size_t k = op->out[0].len < n ? op->out[0].len : n;
	memcpy(buf, op->out[0].data, k);
	pbuf_consume(&op->out[0], k);
	return (ssize_t)k;
}

const struct pbuf *sop_output(struct sop *op, int stream, int *cut)
{
	*cut = 0;
	return &op->out[stream];
}

size_t sop_nitems(struct sop *op)
{
	(void)op;
	return 0;
}

const struct sbx_item *sop_item(struct sop *op, size_t i)
{
	(void)op;
	(void)i;
	return NULL;
}

const struct sbx_item *sop_entry(struct sop *op)
{
	static struct sbx_item e = { .kind = SBX_ITEM_FILE,
				     .file = { .mode = 0100644, .size = 3, .mtime_ns = 1 } };
	(void)op;
	return &e;
}

const struct sbx_code_info *sop_code(struct sop *op)
{
	static struct sbx_code_info ci;
	(void)op;
	ci = (struct sbx_code_info){ .context = fake.req.context ? fake.req.context : "",
				     .language = fake.req.language ? fake.req.language : "",
				     .count = 1, .restart_reason = "", .died_msg = "" };
	return &ci;
}

const struct sbx_code_event *sop_code_event(struct sop *op, size_t i)
{
	(void)op;
	(void)i;
	return NULL;
}

int sop_next(struct sbx *s, struct sop *op, struct sop_chunk *c, char *buf, size_t max,
	     int timeout_ms)
{
	(void)s;
	(void)op;
	(void)c;
	(void)buf;
	(void)max;
	(void)timeout_ms;
	return 0;
}

int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen)
{
	(void)m;
	fake.creates++;
	fake.create = *p;
	size_t used = 0, n = sizeof(fake.create_strs) / sizeof(fake.create_strs[0]);
	fake.create.template = keep(fake.create_strs, n, &used, p->template);
	fake.create.env_json = keep(fake.create_strs, n, &used, p->env_json);
	fake.create.metadata_json = keep(fake.create_strs, n, &used, p->metadata_json);
	fake.create.network_json = keep(fake.create_strs, n, &used, p->network_json);
	fake.create.secrets_json = keep(fake.create_strs, n, &used, p->secrets_json);
	fake.create.checkpoint = keep(fake.create_strs, n, &used, p->checkpoint);
	memset(row, 0, sizeof(*row));
	if (fake.create_err) {
		snprintf(err, errlen, "fake: %s", strerror(-fake.create_err));
		return fake.create_err;
	}
	snprintf(row->id, sizeof(row->id), "sbx_made");
	snprintf(row->account, sizeof(row->account), "%s", account);
	snprintf(row->template, sizeof(row->template), "%s", p->template ? p->template : "");
	snprintf(row->state, sizeof(row->state), "running");
	row->vcpus = p->vcpus;
	row->memory_mb = p->memory_mb;
	row->disk_mb = p->disk_mb;
	row->metadata_json = strdup(p->metadata_json ? p->metadata_json : "{}");
	row->env_json = strdup("{}");
	row->network_json = strdup("");
	row->secrets_json = strdup("[]");
	return 0;
}

int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason)
{
	(void)m;
	fake.kills++;
	snprintf(fake.killed, sizeof(fake.killed), "%s", id);
	snprintf(fake.kill_reason, sizeof(fake.kill_reason), "%s", reason);
	return 0;
}

/* What the API reaches but these cases do not look into. */
int sbx_pause(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	(void)m;
	(void)id;
	snprintf(err, errlen, "fake");
	return -EIO;
}

int sbx_resume(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	return sbx_pause(m, id, err, errlen);
}

int sbx_fork(struct sbx_mgr *m, const char *id, unsigned count, struct store_sbx *rows,
	     char *err, size_t errlen)
{
	(void)count;
	(void)rows;
	return sbx_pause(m, id, err, errlen);
}

int sbx_checkpoint(struct sbx_mgr *m, const char *id, const char *name, struct store_ckpt *out,
		   char *err, size_t errlen)
{
	(void)name;
	(void)out;
	return sbx_pause(m, id, err, errlen);
}

int sbx_ckpt_delete(struct sbx_mgr *m, const struct store_ckpt *c)
{
	(void)m;
	(void)c;
	return -EIO;
}

int sbx_set_expiry(struct sbx_mgr *m, const char *id, long long expires_at)
{
	(void)m;
	(void)id;
	(void)expires_at;
	return 0;
}

char *sbx_network_text(struct sbx_mgr *m, const json_t *policy, char *err, size_t errlen)
{
	(void)m;
	char *t = json_dumps(policy, JSON_COMPACT);
	if (!t)
		snprintf(err, errlen, "not a policy");
	return t;
}

json_t *sbx_network_json(struct sbx_mgr *m, const char *network_json)
{
	(void)m;
	(void)network_json;
	return NULL;
}

/* As sbx_blob.c's: the record names the row's generation. */
int sbx_pause_stored(const struct store_sbx *row)
{
	return row->stored[0] && strtoul(row->stored, NULL, 10) == row->generation;
}

/* As sbx.c's, for a store whose node is the fake's: one node only. */
int sbx_elsewhere(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen)
{
	(void)m;
	(void)row;
	(void)err;
	(void)errlen;
	return 0;
}

/* One node only: nothing moves between nodes. */
int sbx_take(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	(void)m;
	snprintf(err, errlen, "sandbox '%s' cannot be taken here: there is one node", id);
	return -ESTALE;
}

int sbx_move(struct sbx_mgr *m, const char *id, int *was_running, char *err, size_t errlen)
{
	(void)m;
	*was_running = 0;
	snprintf(err, errlen, "sandbox '%s' cannot move: there is one node", id);
	return -ENOTSUP;
}

int sbx_set_network(struct sbx_mgr *m, const char *id, const char *network_text, char *err,
		    size_t errlen)
{
	(void)network_text;
	return sbx_pause(m, id, err, errlen);
}

int sbx_set_transforms(struct sbx_mgr *m, const char *id, const json_t *rules, int add,
		       char *err, size_t errlen)
{
	(void)rules;
	(void)add;
	return sbx_pause(m, id, err, errlen);
}

int sbx_net_counters(struct sbx_mgr *m, const char *id, struct net_counters *c)
{
	(void)m;
	(void)id;
	(void)c;
	return -ENOENT;
}

int sbx_log_path(struct sbx_mgr *m, const struct store_sbx *row, char *out, size_t n)
{
	(void)m;
	snprintf(out, n, "%s/console.log", row->run_dir);
	return !strcmp(row->state, "running");
}

void sbx_hooks_changed(struct sbx_mgr *m)
{
	(void)m;
}

/* No samples: the sampler is the sandbox layer's (test_sbx, e2e). */
int sbx_metrics(struct sbx_mgr *m, const char *id, const char *account, struct sbx_sample *out,
		size_t max)
{
	(void)m;
	(void)id;
	(void)account;
	(void)out;
	(void)max;
	return 0;
}

void sbx_secrets_changed(struct sbx_mgr *m, const char *account)
{
	(void)m;
	(void)account;
}

/* "sealed1:" and the value's length: never the value, as cpuos-netd's. */
int sbx_secret_seal(struct sbx_mgr *m, const char *account, const char *name,
		    const json_t *hosts, int http, const char *value, char *out, size_t outlen,
		    char *err, size_t errlen)
{
	(void)m, (void)account, (void)name, (void)hosts, (void)http;
	fake.seals++;
	if (fake.seal_err) {
		snprintf(err, errlen, "fake: %s", strerror(-fake.seal_err));
		return fake.seal_err;
	}
	snprintf(out, outlen, "sealed1:%zu", strlen(value));
	return 0;
}

void sbx_mgr_stats(struct sbx_mgr *m, struct sbx_stats *out)
{
	(void)m;
	memset(out, 0, sizeof(*out));
}

const char *const sbx_code_field_names[SBX_NFIELDS] = {
	"text", "html", "markdown", "svg", "latex", "javascript", "png", "jpeg", "pdf",
};

/* Templates from images: none here (the e2e tests make them). */
int sbx_tpl_name_ok(const char *name)
{
	return name && *name && strlen(name) < 64 && strncmp(name, SBX_TPL_PREFIX, 4);
}

int sbx_tpl_create(struct sbx_mgr *m, const char *account, const struct sbx_tpl_req *q, int wait,
		   struct store_tpl *out, char *err, size_t errlen)
{
	(void)m;
	(void)account;
	(void)wait;
	(void)out;
	if (q->archive_fd >= 0)
		close(q->archive_fd);
	snprintf(err, errlen, "no importing in the fake");
	return -EPERM;
}

int sbx_tpl_get(struct sbx_mgr *m, const char *account, const char *name, struct store_tpl *out)
{
	(void)m;
	(void)account;
	(void)name;
	(void)out;
	return -ENOENT;
}

int sbx_tpl_delete(struct sbx_mgr *m, const char *account, const char *name, char *err,
		   size_t errlen)
{
	(void)m;
	(void)account;
	snprintf(err, errlen, "no template '%s'", name);
	return -ENOENT;
}

int sbx_tpl_file(struct sbx_mgr *m, const char *id, const char *ext, char *out, size_t n)
{
	(void)m;
	(void)id;
	(void)ext;
	(void)out;
	(void)n;
	return -EINVAL;
}

unsigned long long sbx_tpl_max_bytes(struct sbx_mgr *m)
{
	(void)m;
	return 1ULL << 20;
}

int sbx_tpl_upload_fd(struct sbx_mgr *m)
{
	(void)m;
	return -ENOSYS;
}

/* Dockerfile builds: none here (the e2e tests run them). */
int sbx_build_start(struct sbx_mgr *m, const char *account, const struct sbx_build_req *q,
		    struct sbx_build_info *out, char *err, size_t errlen)
{
	(void)m;
	(void)account;
	(void)out;
	if (q->context_fd >= 0)
		close(q->context_fd);
	snprintf(err, errlen, "no builds in the fake");
	return -EPERM;
}

int sbx_build_check(struct sbx_mgr *m, const char *account, const char *name, char *err,
		    size_t errlen)
{
	(void)m;
	(void)account;
	(void)name;
	snprintf(err, errlen, "no builds in the fake");
	return -EPERM;
}

int sbx_build_get(struct sbx_mgr *m, const char *account, const char *name,
		  struct sbx_build_info *out, char *log, size_t loglen)
{
	(void)m;
	(void)account;
	(void)name;
	(void)out;
	(void)log;
	(void)loglen;
	return -ENOENT;
}

int sbx_build_running(struct sbx_mgr *m, const char *id)
{
	(void)m;
	(void)id;
	return 0;
}

int sbx_build_cancel(struct sbx_mgr *m, const char *account, const char *name)
{
	(void)m;
	(void)account;
	(void)name;
	return -ENOENT;
}
