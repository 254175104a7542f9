/*
 * test_sbx: the sandbox layer's state machine, every transition of its
 * table, on a real store (SQLite in a temporary directory) and fake VMs
 * whose agent is a real cpuos-agent in --listen mode (fake_vm.h): create,
 * pause, resume, snapshot, kill, a VM that ends by itself, a daemon's
 * restart in each of the states it can find, failures of each step, lost
 * races in the store, holds, and the table in docs/architecture.md.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/fs.h"
#include "common/log.h"
#include "common/proto.h"
#include "daemon/store/store.h"
#include "tests/lib/tap.h"
#include "tests/unit/daemon/sandbox/fake_vm.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 10000 /* any one wait in these cases */

struct env {
	char dir[64], db[128], guest[128], state[128];
	struct store *store;
	struct sbx_mgr *m;
};

static int mgr_open(struct env *e)
{
	struct sbx_config c = {
		.state_dir = e->state, .guest_dir = e->guest, .cache_dir = e->dir,
		.max_sandboxes = 20, .max_output = 1 << 16, .paused_retention_s = 3600,
	};
	return sbx_mgr_new(&c, e->store, &e->m);
}

/* A store, a manager and a guest directory with template "base". */
static int env_open(struct env *e)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/cpuos-test-sbx-XXXXXX");
	if (!CHECK(mkdtemp(e->dir) != NULL))
		return -1;
	snprintf(e->db, sizeof(e->db), "%s/cpuos.db", e->dir);
	snprintf(e->guest, sizeof(e->guest), "%s/guest", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	char tpl[200], err[256];
	snprintf(tpl, sizeof(tpl), "%s/templates", e->guest);
	fs_mkdir_p(tpl, 0700, (uid_t)-1, (gid_t)-1);
	fs_mkdir_p(e->state, 0700, (uid_t)-1, (gid_t)-1);
	snprintf(tpl, sizeof(tpl), "%s/templates/base.erofs", e->guest);
	int fd = open(tpl, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
	if (!CHECK(store_open(e->db, &e->store, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return -1;
	}
	if (!CHECK(mgr_open(e) == 0))
		return -1;
	memset(&fake_vm, 0, sizeof(fake_vm));
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(path);
	return 0;
}

static void env_close(struct env *e)
{
	sbx_mgr_free(e->m);
	store_close(e->store);
	nftw(e->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	/* Agents a detached manager left running. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* A new sandbox of template base for account: its id in id[32]. */
static int create(struct env *e, const char *account, char *id)
{
	struct sbx_params p = { .template = "base", .timeout_s = 300, .vcpus = 1,
				.memory_mb = 512, .disk_mb = 2048 };
	struct store_sbx row;
	char err[256];
	int r = sbx_create(e->m, account, &p, &row, err, sizeof(err));
	if (r == 0) {
		snprintf(id, 32, "%s", row.id);
		store_sbx_release(&row);
	} else {
		t_note("create: %s", err);
	}
	return r;
}

/* The store's state of id ("" when it has no row). */
static const char *stored(struct env *e, const char *id)
{
	static char st[16];
	struct store_sbx row;
	st[0] = '\0';
	if (store_sbx_get(e->store, id, &row) == 0) {
		snprintf(st, sizeof(st), "%s", row.state);
		store_sbx_release(&row);
	}
	return st;
}

static const char *run_dir(struct env *e, const char *id)
{
	static char dir[256];
	struct store_sbx row;
	dir[0] = '\0';
	if (store_sbx_get(e->store, id, &row) == 0) {
		snprintf(dir, sizeof(dir), "%s", row.run_dir);
		store_sbx_release(&row);
	}
	return dir;
}

/* The state of id's object, SBX_NSTATES when it has none. */
static enum sbx_state state_of(struct env *e, const char *id)
{
	struct sbx *s = sbx__get(e->m, id);
	enum sbx_state st = s ? sbx__state(s) : SBX_NSTATES;
	sbx_put(s);
	return st;
}

/* Runs shell in sandbox id (resumed if paused) through the agent: 1 when
 * it printed want and exited 0. */
static int exec_ok(struct env *e, const char *id, const char *shell, const char *want)
{
	struct sbx *s;
	char err[256];
	if (sbx_acquire(e->m, id, NULL, SBX_RESUME, &s, err, sizeof(err)) < 0) {
		t_note("acquire %s: %s", id, err);
		return 0;
	}
	struct sop *op = sop_new(SOP_COLLECT, 4096);
	struct sbx_request q = { .kind = SBX_EXEC, .cmd = shell, .user = "root" };
	int ok = 0;
	if (op && sbx_request(s, op, &q) == 0) {
		struct sop_state st;
		int cut;
		if (sbx_wait(s, op, 0, MS, &st) == 0 && st.end == P_EXIT && st.exit_code == 0) {
			const struct pbuf *out = sop_output(op, 0, &cut);
			ok = out->len == strlen(want) && !memcmp(out->data, want, out->len);
			if (!ok)
				t_note("exec '%s' printed '%.*s'", shell, (int)out->len, (char *)out->data);
		} else {
			t_note("exec '%s' ended with %u, exit %d", shell, st.end, st.exit_code);
		}
	}
	sop_free(s, op);
	sbx_put(s);
	return ok;
}

static int pause_ok(struct env *e, const char *id)
{
	char err[256];
	int r = sbx_pause(e->m, id, err, sizeof(err));
	if (r < 0)
		t_note("pause: %s", err);
	return r == 0;
}

/* ---- the table ---- */

static void test_table_is_whole(void)
{
	/* one row per (state, event); every transitional state has a way
	 * out to a stable one and every row is reached from somewhere */
	for (size_t i = 0; i < sbx__ntable; i++)
		for (size_t j = i + 1; j < sbx__ntable; j++)
			CHECK(sbx__table[i].from != sbx__table[j].from ||
			      sbx__table[i].ev != sbx__table[j].ev);
	for (int st = 0; st < SBX_NSTATES; st++) {
		int in = st == SBX_CREATING || st == SBX_RESTORING, out = 0;
		for (size_t i = 0; i < sbx__ntable; i++) {
			in |= (int)sbx__table[i].to == st;
			out |= (int)sbx__table[i].from == st && !sbx__transitional(sbx__table[i].to);
		}
		CHECK(in);
		if (sbx__transitional((enum sbx_state)st) && !CHECK(out))
			t_note("%s has no way out", sbx_state_name((enum sbx_state)st));
	}
	/* what it writes is the stable state it reaches */
	for (size_t i = 0; i < sbx__ntable; i++)
		CHECK(!sbx__table[i].to_store ||
		      !strcmp(sbx__table[i].to_store, sbx__stored_name(sbx__table[i].to)));
	CHECK(sbx__lookup(SBX_PAUSED, SBX_EV_PAUSE) == NULL);
}

/* docs/architecture.md's table, "| from | event | to | writes |" rows under
 * "## Sandbox states", is this one. */
static void test_table_is_documented(void)
{
	FILE *f = fopen("docs/architecture.md", "re");
	if (!CHECK(f != NULL)) {
		t_note("run from the repository's root");
		return;
	}
	char line[512];
	int in = 0, rows = 0;
	unsigned found[64] = { 0 };
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "## ", 3))
			in = !strncmp(line, "## Sandbox states", 17);
		char a[32], b[32], c[32];
		if (!in || sscanf(line, "| %31[a-z] | %31[a-z] | %31[a-z] |", a, b, c) != 3 ||
		    !strcmp(a, "from")) /* the header */
			continue;
		int hit = 0;
		for (size_t i = 0; i < sbx__ntable; i++)
			if (!strcmp(a, sbx_state_name(sbx__table[i].from)) &&
			    !strcmp(b, sbx__event_name(sbx__table[i].ev)) &&
			    !strcmp(c, sbx_state_name(sbx__table[i].to))) {
				found[i]++;
				hit = 1;
			}
		if (!CHECK(hit))
			t_note("documented but not in sbx_state.c: %s %s %s", a, b, c);
		rows++;
	}
	fclose(f);
	for (size_t i = 0; i < sbx__ntable; i++)
		if (!CHECK(found[i] == 1))
			t_note("in sbx_state.c but documented %u times: %s %s %s", found[i],
			       sbx_state_name(sbx__table[i].from), sbx__event_name(sbx__table[i].ev),
			       sbx_state_name(sbx__table[i].to));
	CHECK((size_t)rows == sbx__ntable);
}

/* ---- each transition ---- */

/* creating -started-> running: stored, metered, serving. */
static void test_create(void)
{
	struct env e;
	char id[32];
	if (env_open(&e) < 0)
		return;
	if (CHECK(create(&e, "alice", id) == 0)) {
		CHECK(state_of(&e, id) == SBX_RUNNING);
		CHECK(!strcmp(stored(&e, id), "running"));
		CHECK(exec_ok(&e, id, "echo hi", "hi\n"));
		struct store_usage u;
		CHECK(store_usage_query(e.store, "alice", NULL, 0, (long long)time(NULL) * 1000 + 1000,
					(long long)time(NULL) * 1000 + 1000, &u) == 0 &&
		      u.sandboxes == 1);
	}
	env_close(&e);
}

/* creating -failed-> stopped: a VM that does not start leaves nothing; a
 * row that cannot be written takes its VM with it. */
static void test_create_fails(void)
{
	struct env e;
	char id[32];
	if (env_open(&e) < 0)
		return;
	fake_vm.fail_start = -EIO;
	CHECK(create(&e, "alice", id) == -EIO);
	struct store_sbx *rows;
	size_t n;
	char next[128];
	CHECK(store_sbx_list(e.store, NULL, NULL, NULL, 0, 10, NULL, &rows, &n, next,
			     sizeof(next)) == 0 && n == 0);
	store_sbx_free_list(rows, n);

	/* the id is taken in the store: the insert fails */
	struct store_sbx row = { .id = "sbx_taken", .account = "alice", .template = "base",
				 .state = "stopped", .vcpus = 1, .memory_mb = 512 };
	CHECK(store_sbx_insert(e.store, &row, NULL) == 0);
	snprintf(row.run_dir, sizeof(row.run_dir), "%s/vms/sbx_taken", e.state);
	struct vm_config vc = { .run_dir = row.run_dir };
	struct vm *vm;
	char err[256];
	if (CHECK(vm_start(&vc, &vm, err, sizeof(err)) == 0)) {
		row.net_slot = NET_NO_SLOT;
		unsigned frees = fake_vm.frees;
		CHECK(sbx__publish(e.m, &row, vm, err, sizeof(err)) == -EIO);
		CHECK(fake_vm.frees == frees + 1);
		CHECK(state_of(&e, "sbx_taken") == SBX_NSTATES);
		CHECK(!strcmp(stored(&e, "sbx_taken"), "stopped"));
	}
	env_close(&e);
}

/* running -pause-> pausing -paused-> paused -resume-> resuming -resumed->
 * running, with the guest's files in between. */
static void test_pause_resume(void)
{
	struct env e;
	char id[32];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	CHECK(pause_ok(&e, id));
	CHECK(state_of(&e, id) == SBX_PAUSED);
	CHECK(!strcmp(stored(&e, id), "paused"));
	CHECK(pause_ok(&e, id)); /* paused already: nothing to do */
	struct store_sbx row;
	if (CHECK(store_sbx_get(e.store, id, &row) == 0)) {
		CHECK(row.qemu_pid == 0 && row.net_slot == NET_NO_SLOT && row.paused_at > 0 &&
		      row.timeout_left_s > 0 && row.generation == 0);
		store_sbx_release(&row);
	}
	struct sbx *s;
	char err[256];
	CHECK(sbx_acquire(e.m, id, NULL, 0, &s, err, sizeof(err)) == -EAGAIN);
	CHECK(exec_ok(&e, id, "echo back", "back\n")); /* resumed by the touch */
	CHECK(state_of(&e, id) == SBX_RUNNING);
	if (CHECK(store_sbx_get(e.store, id, &row) == 0)) {
		CHECK(!strcmp(row.state, "running") && row.generation == 1 && row.qemu_pid > 0);
		store_sbx_release(&row);
	}
	CHECK(sbx_resume(e.m, id, err, sizeof(err)) == 0); /* running already */
	CHECK(fake_vm.pauses == 1 && fake_vm.starts == 2);
out:
	env_close(&e);
}

/* pausing -failed-> running: a VM that did not pause runs on. */
static void test_pause_fails(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	fake_vm.fail_pause = 1;
	CHECK(sbx_pause(e.m, id, err, sizeof(err)) == -EIO);
	CHECK(state_of(&e, id) == SBX_RUNNING && !strcmp(stored(&e, id), "running"));
	CHECK(exec_ok(&e, id, "echo still", "still\n"));
out:
	env_close(&e);
}

/* pausing -lost-> lost: QEMU gone and no whole pause. */
static void test_pause_loses(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	fake_vm.fail_pause = fake_vm.pause_kills = 1;
	CHECK(sbx_pause(e.m, id, err, sizeof(err)) == -EIO);
	CHECK(state_of(&e, id) == SBX_NSTATES && !strcmp(stored(&e, id), "lost"));
	struct sbx *s;
	CHECK(sbx_acquire(e.m, id, NULL, SBX_RESUME, &s, err, sizeof(err)) == -ESHUTDOWN);
	CHECK(strstr(err, "is not running (lost: lost)") != NULL);
out:
	env_close(&e);
}

/* resuming -failed-> paused: a pause that does not restore stays whole. */
static void test_resume_fails(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0) || !CHECK(pause_ok(&e, id)))
		goto out;
	fake_vm.fail_start = -EIO;
	CHECK(sbx_resume(e.m, id, err, sizeof(err)) == -EIO);
	CHECK(state_of(&e, id) == SBX_PAUSED && !strcmp(stored(&e, id), "paused"));
	CHECK(sbx_resume(e.m, id, err, sizeof(err)) == 0);
	CHECK(exec_ok(&e, id, "echo ok", "ok\n"));
out:
	env_close(&e);
}

/* running -snapshot-> snapshotting -done-> running, taken or not. */
static void test_snapshot(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct store_ckpt c;
	CHECK(sbx_checkpoint(e.m, id, "one", &c, err, sizeof(err)) == 0);
	store_ckpt_release(&c);
	CHECK(state_of(&e, id) == SBX_RUNNING);
	fake_vm.fail_snapshot = 1;
	CHECK(sbx_checkpoint(e.m, id, "two", &c, err, sizeof(err)) < 0);
	CHECK(state_of(&e, id) == SBX_RUNNING);
	CHECK(exec_ok(&e, id, "echo on", "on\n"));
	/* a fork's children are creates of their own */
	struct store_sbx kids[2];
	int r = sbx_fork(e.m, id, 2, kids, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("fork: %s", err);
	if (r == 0) {
		for (int i = 0; i < 2; i++) {
			CHECK(state_of(&e, kids[i].id) == SBX_RUNNING);
			CHECK(exec_ok(&e, kids[i].id, "echo kid", "kid\n"));
			store_sbx_release(&kids[i]);
		}
	}
	pause_ok(&e, id);
	CHECK(sbx_checkpoint(e.m, id, "three", &c, err, sizeof(err)) == -ESHUTDOWN);
out:
	env_close(&e);
}

/* running -kill-> stopping -stopped-> stopped, and the same from paused,
 * whose files go. */
static void test_kill(void)
{
	struct env e;
	char a[32], b[32];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", a) == 0) ||
	    !CHECK(create(&e, "alice", b) == 0))
		goto out;
	CHECK(sbx_kill(e.m, a, "killed") == 0);
	CHECK(state_of(&e, a) == SBX_NSTATES && !strcmp(stored(&e, a), "stopped"));
	CHECK(sbx_kill(e.m, a, "killed") == -ENOENT);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", run_dir(&e, b));
	CHECK(pause_ok(&e, b) && access(dir, F_OK) == 0);
	CHECK(sbx_kill(e.m, b, "retention") == 0);
	CHECK(access(dir, F_OK) < 0 && !strcmp(stored(&e, b), "stopped"));
	struct store_sbx row;
	if (CHECK(store_sbx_get(e.store, b, &row) == 0)) {
		CHECK(!strcmp(row.end_reason, "retention"));
		store_sbx_release(&row);
	}
	struct sbx *s;
	char err[256];
	CHECK(sbx_acquire(e.m, b, NULL, SBX_RESUME, &s, err, sizeof(err)) == -ESHUTDOWN);
out:
	env_close(&e);
}

/* running -ended-> stopping -stopped-> stopped: its VM ended by itself. */
static void test_vm_ends(void)
{
	struct env e;
	char id[32];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct sbx *s = sbx__get(e.m, id);
	CHECK(fake_vm_end(run_dir(&e, id), VM_POWEROFF) == 0);
	CHECK(s && sbx__wait_state(s, SBX_STOPPED, MS) == 0);
	sbx_put(s);
	struct store_sbx row;
	if (CHECK(store_sbx_get(e.store, id, &row) == 0)) {
		CHECK(!strcmp(row.state, "stopped") && !strcmp(row.end_reason, "poweroff"));
		store_sbx_release(&row);
	}
out:
	env_close(&e);
}

/* A daemon's restart: restoring -attached-> running (its QEMU runs),
 * -loaded-> paused, -sealed-> paused (QEMU gone after the pause was
 * whole), -lost-> lost (QEMU gone, nothing whole). */
static void test_restore(void)
{
	struct env e;
	char run[32], paused[32], sealed[32], lost[32];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", run) == 0) ||
	    !CHECK(create(&e, "alice", paused) == 0) || !CHECK(create(&e, "alice", sealed) == 0) ||
	    !CHECK(create(&e, "alice", lost) == 0) || !CHECK(pause_ok(&e, paused)))
		goto out;
	int pid_sealed = fake_vm_pid(run_dir(&e, sealed)), pid_lost = fake_vm_pid(run_dir(&e, lost));
	sbx_mgr_free(e.m); /* the VMs run on, for the next manager */
	e.m = NULL;
	CHECK(fake_vm.detaches == 3);
	kill(pid_sealed, SIGKILL);
	kill(pid_lost, SIGKILL);
	waitpid(pid_sealed, NULL, 0);
	waitpid(pid_lost, NULL, 0);
	CHECK(fake_vm_seal(run_dir(&e, sealed)) == 0);
	if (!CHECK(mgr_open(&e) == 0))
		goto out;
	sbx_mgr_restore(e.m);
	CHECK(state_of(&e, run) == SBX_RUNNING && fake_vm.attaches == 1);
	CHECK(exec_ok(&e, run, "echo again", "again\n"));
	CHECK(state_of(&e, paused) == SBX_PAUSED && !strcmp(stored(&e, paused), "paused"));
	CHECK(state_of(&e, sealed) == SBX_PAUSED && !strcmp(stored(&e, sealed), "paused"));
	CHECK(state_of(&e, lost) == SBX_NSTATES && !strcmp(stored(&e, lost), "lost"));
	CHECK(exec_ok(&e, sealed, "echo resumed", "resumed\n"));
out:
	env_close(&e);
}

/* ---- the machinery ---- */

/* An event the table has no row for is refused by name. */
static void test_illegal_event(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct sbx *s = sbx__get(e.m, id);
	if (CHECK(s != NULL)) {
		CHECK(sbx__fire(s, SBX_EV_RESUMED, NULL, 0, err, sizeof(err)) == -EPERM);
		CHECK(strstr(err, "cannot take 'resumed' while running") != NULL);
		enum sbx_state now;
		CHECK(sbx__begin(s, SBX_EV_RESUME, 0, &now) == -EPERM && now == SBX_RUNNING);
		CHECK(sbx__state(s) == SBX_RUNNING);
		sbx_put(s);
	}
out:
	env_close(&e);
}

/* A transition whose row moved meanwhile writes nothing and says so; a
 * forced one still takes the state it already is in. */
static void test_lost_race(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct sbx *s = sbx__get(e.m, id);
	if (!CHECK(s != NULL))
		goto out;
	enum sbx_state now;
	CHECK(sbx__begin(s, SBX_EV_PAUSE, MS, &now) == 0 && sbx__state(s) == SBX_PAUSING);
	/* someone else (another node, a person) stopped the row */
	struct store_sbx_move mv = { .id = id, .from = "running", .to = "stopped",
				     .end_reason = "killed", .net_slot = -1 };
	CHECK(store_sbx_move(e.store, &mv) == 0);
	struct sbx_facts f = { .paused_at = 1, .timeout_left_s = 1 };
	CHECK(sbx__fire(s, SBX_EV_PAUSED, &f, 0, err, sizeof(err)) == -ESTALE);
	CHECK(sbx__state(s) == SBX_PAUSING && !strcmp(stored(&e, id), "stopped"));
	CHECK(sbx__fire(s, SBX_EV_FAILED, NULL, 0, err, sizeof(err)) == 0);
	CHECK(sbx__state(s) == SBX_RUNNING);
	sbx_put(s);
out:
	env_close(&e);
}

/* A transition under way or a hold keeps the others waiting, then lets
 * them through. */
static void test_busy_and_hold(void)
{
	struct env e;
	char id[32];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct sbx *s = sbx__get(e.m, id);
	if (!CHECK(s != NULL))
		goto out;
	enum sbx_state now;
	CHECK(sbx__hold(s, MS, &now) == 0 && now == SBX_RUNNING);
	CHECK(sbx__begin(s, SBX_EV_PAUSE, 100, &now) == -EBUSY);
	CHECK(sbx__hold(s, 100, &now) == -EBUSY);
	sbx__unhold(s);
	CHECK(sbx__begin(s, SBX_EV_SNAPSHOT, MS, &now) == 0);
	CHECK(sbx__begin(s, SBX_EV_KILL, 100, &now) == -EBUSY && now == SBX_SNAPSHOTTING);
	char err[256];
	CHECK(sbx__fire(s, SBX_EV_DONE, NULL, 0, err, sizeof(err)) == 0);
	CHECK(sbx__state(s) == SBX_RUNNING);
	sbx_put(s);
out:
	env_close(&e);
}

/* sbx_acquire: another account's sandbox is none. */
static void test_acquire_accounts(void)
{
	struct env e;
	char id[32], err[256];
	if (env_open(&e) < 0 || !CHECK(create(&e, "alice", id) == 0))
		goto out;
	struct sbx *s;
	CHECK(sbx_acquire(e.m, id, "bob", SBX_RESUME, &s, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "no sandbox") != NULL);
	CHECK(sbx_acquire(e.m, "sbx_nope", NULL, SBX_RESUME, &s, err, sizeof(err)) == -ENOENT);
	if (CHECK(sbx_acquire(e.m, id, "alice", 0, &s, err, sizeof(err)) == 0))
		sbx_put(s);
out:
	env_close(&e);
}

/* ---- moves between nodes ---- */

/* e's store writes as node n1 from now on. */
static int join_as_node(struct env *e)
{
	struct store_node n = { .name = "n1", .url = "http://n1.test:7070",
				.lease_until_ms = 4102444800000LL, .joined_at = 1, .vcpus = 2,
				.memory_mb = 4096 };
	long long epoch;
	return store_node_join(e->store, &n, &epoch);
}

/* Records paused id's pause as stored (the upload's record, with a made-up
 * manifest checksum) in rec: 0 or -errno. */
static int record_stored(struct env *e, const char *id, char *rec, size_t n)
{
	struct store_sbx row;
	if (store_sbx_get(e->store, id, &row) < 0)
		return -ENOENT;
	snprintf(rec, n, "%u %.64s", row.generation,
		 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	int r = store_sbx_set_stored(e->store, id, row.generation, rec);
	store_sbx_release(&row);
	return r;
}

static int let_go(struct env *e, const char *id)
{
	struct sbx *s = sbx__get(e->m, id);
	char err[256];
	int r = s ? sbx__let_go(e->m, s, err, sizeof(err)) : -ENOENT;
	sbx_put(s);
	return r;
}

/* paused -move-> moving -moved-> moved: a node lets go of a paused sandbox
 * whose pause is stored (out of its table, its files gone, the row paused
 * and no node's, which store_sbx_take then gives a node, and only that
 * pause); -failed-> paused when nothing is stored; a running one cannot
 * move. */
static void test_move(void)
{
	struct env e;
	char a[32], b[32], c[32], rec[128], dir[256], path[300];
	if (env_open(&e) < 0)
		return;
	if (!CHECK(join_as_node(&e) == 0) || !CHECK(create(&e, "alice", a) == 0) ||
	    !CHECK(create(&e, "alice", b) == 0) || !CHECK(create(&e, "alice", c) == 0) ||
	    !CHECK(pause_ok(&e, a)) || !CHECK(pause_ok(&e, b)))
		goto out;
	CHECK(let_go(&e, a) == -EAGAIN); /* not stored yet */
	CHECK(state_of(&e, a) == SBX_PAUSED);
	CHECK(let_go(&e, c) == -EBUSY && state_of(&e, c) == SBX_RUNNING);
	if (!CHECK(record_stored(&e, a, rec, sizeof(rec)) == 0))
		goto out;
	snprintf(dir, sizeof(dir), "%s", run_dir(&e, a));
	CHECK(let_go(&e, a) == 0);
	CHECK(state_of(&e, a) == SBX_NSTATES && !strcmp(stored(&e, a), "paused"));
	snprintf(path, sizeof(path), "%s/mem", dir);
	CHECK(access(path, F_OK) < 0 && errno == ENOENT);
	struct store_sbx row;
	if (CHECK(store_sbx_get(e.store, a, &row) == 0)) {
		CHECK(row.node[0] == '\0' && !strcmp(row.stored, rec));
		store_sbx_release(&row);
	}
	CHECK(let_go(&e, a) == -ENOENT); /* gone from here */
	/* the row taken, as any node would (sbx_take, which needs an object
	 * store, is run by the cluster's tests) */
	CHECK(store_sbx_take(e.store, b, rec, dir) == -ESTALE); /* n1's, alive */
	CHECK(store_sbx_take(e.store, a, "1 x", dir) == -ESTALE); /* not that pause */
	CHECK(store_sbx_take(e.store, a, rec, dir) == 0);
	if (CHECK(store_sbx_get(e.store, a, &row) == 0)) {
		CHECK(!strcmp(row.node, "n1") && !strcmp(row.run_dir, dir));
		store_sbx_release(&row);
	}
out:
	env_close(&e);
}

/* One process takes every row of the table (the cases above each take
 * some, in processes of their own). */
static void test_every_row_is_taken(void)
{
	struct env e;
	char a[32], b[32], c[32], d[32], err[256];
	memset(sbx__taken, 0, sbx__ntable * sizeof(sbx__taken[0]));
	if (env_open(&e) < 0)
		goto out;
	fake_vm.fail_start = -EIO;
	create(&e, "alice", a); /* boot fails before any object */
	if (!CHECK(join_as_node(&e) == 0))
		goto out;
	struct store_sbx row = { .id = "sbx_taken", .account = "alice", .template = "base",
				 .state = "stopped", .vcpus = 1, .memory_mb = 512,
				 .net_slot = NET_NO_SLOT };
	store_sbx_insert(e.store, &row, NULL);
	snprintf(row.run_dir, sizeof(row.run_dir), "%s/vms/sbx_taken", e.state);
	struct vm_config vc = { .run_dir = row.run_dir };
	struct vm *vm;
	if (vm_start(&vc, &vm, err, sizeof(err)) == 0)
		sbx__publish(e.m, &row, vm, err, sizeof(err)); /* creating -failed-> */
	if (!CHECK(create(&e, "alice", a) == 0) || !CHECK(create(&e, "alice", b) == 0) ||
	    !CHECK(create(&e, "alice", c) == 0) || !CHECK(create(&e, "alice", d) == 0))
		goto out;
	fake_vm.fail_pause = 1;
	sbx_pause(e.m, a, err, sizeof(err));
	fake_vm.fail_pause = fake_vm.pause_kills = 1;
	sbx_pause(e.m, d, err, sizeof(err));
	pause_ok(&e, a);
	fake_vm.fail_start = -EIO;
	sbx_resume(e.m, a, err, sizeof(err));
	sbx_resume(e.m, a, err, sizeof(err));
	struct store_ckpt ck;
	if (sbx_checkpoint(e.m, a, "x", &ck, err, sizeof(err)) == 0)
		store_ckpt_release(&ck);
	sbx_kill(e.m, a, "killed");
	pause_ok(&e, b);
	sbx_kill(e.m, b, "killed");
	struct sbx *s = sbx__get(e.m, c);
	fake_vm_end(run_dir(&e, c), VM_PANIC);
	if (s)
		sbx__wait_state(s, SBX_STOPPED, MS);
	sbx_put(s);
	char r1[32], r2[32], r3[32], r4[32];
	if (!CHECK(create(&e, "alice", r1) == 0) || !CHECK(create(&e, "alice", r2) == 0) ||
	    !CHECK(create(&e, "alice", r3) == 0) || !CHECK(create(&e, "alice", r4) == 0))
		goto out;
	pause_ok(&e, r2);
	char m1[32], m2[32], rec[128];
	if (CHECK(create(&e, "alice", m1) == 0) && CHECK(create(&e, "alice", m2) == 0) &&
	    pause_ok(&e, m1) && pause_ok(&e, m2)) {
		let_go(&e, m1); /* paused -move-> moving -failed-> */
		if (record_stored(&e, m2, rec, sizeof(rec)) == 0)
			let_go(&e, m2); /* -moved-> */
	}
	int p3 = fake_vm_pid(run_dir(&e, r3)), p4 = fake_vm_pid(run_dir(&e, r4));
	sbx_mgr_free(e.m);
	e.m = NULL;
	kill(p3, SIGKILL);
	kill(p4, SIGKILL);
	waitpid(p3, NULL, 0);
	waitpid(p4, NULL, 0);
	fake_vm_seal(run_dir(&e, r3));
	if (!CHECK(mgr_open(&e) == 0))
		goto out;
	sbx_mgr_restore(e.m);
	for (size_t i = 0; i < sbx__ntable; i++)
		if (!CHECK(sbx__taken[i] > 0))
			t_note("not taken: %s -%s-> %s", sbx_state_name(sbx__table[i].from),
			       sbx__event_name(sbx__table[i].ev), sbx_state_name(sbx__table[i].to));
out:
	env_close(&e);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	log_set_level(LOG_WARN); /* the manager's info lines would bury the cases' */
	static const struct t_case cases[] = {
		{ "sbx_table_is_whole", test_table_is_whole },
		{ "sbx_table_is_documented", test_table_is_documented },
		{ "sbx_create", test_create },
		{ "sbx_create_fails", test_create_fails },
		{ "sbx_pause_resume", test_pause_resume },
		{ "sbx_pause_fails", test_pause_fails },
		{ "sbx_pause_loses", test_pause_loses },
		{ "sbx_resume_fails", test_resume_fails },
		{ "sbx_snapshot", test_snapshot },
		{ "sbx_kill", test_kill },
		{ "sbx_vm_ends", test_vm_ends },
		{ "sbx_restore", test_restore },
		{ "sbx_illegal_event", test_illegal_event },
		{ "sbx_lost_race", test_lost_race },
		{ "sbx_busy_and_hold", test_busy_and_hold },
		{ "sbx_acquire_accounts", test_acquire_accounts },
		{ "sbx_move", test_move },
		{ "sbx_every_row_is_taken", test_every_row_is_taken },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
