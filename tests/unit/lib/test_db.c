/* Unit tests for the SQLite basics (lib/db): opening and migrating, the
 * statement helpers, tokens and key hashes. */
#include "common/buf.h"
#include "lib/db.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const steps[] = {
	"CREATE TABLE keys (id TEXT PRIMARY KEY NOT NULL, sha256 TEXT NOT NULL UNIQUE);",
	"ALTER TABLE keys ADD COLUMN name TEXT NOT NULL DEFAULT '';",
};

static char dir[64], path[128];

static int fresh(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test_db.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/t.db", dir);
	return 0;
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

static int user_version(sqlite3 *db)
{
	sqlite3_stmt *st;
	int v = -1;
	if (db_prep(db, "PRAGMA user_version", &st) == 0 && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void test_open(void)
{
	char err[256] = "";
	sqlite3 *db;
	if (!CHECK(fresh() == 0))
		return;
	mode_t old = umask(0);
	int r = db_open(path, steps, 1, "test", NULL, &db, err, sizeof(err));
	umask(old);
	if (!CHECK(r == 0)) {
		t_note("%s", err);
		return;
	}
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600); /* whatever the umask */
	CHECK(user_version(db) == 1);
	db_close(NULL, db);
	/* a newer program migrates the file on; a lock comes with it */
	pthread_mutex_t lock;
	CHECK(db_open(path, steps, 2, "test", &lock, &db, err, sizeof(err)) == 0);
	CHECK(user_version(db) == 2 && pthread_mutex_trylock(&lock) == 0);
	CHECK(db_exec(db, "INSERT INTO keys (id, sha256, name) VALUES ('a', 'h', 'n')") == 0);
	pthread_mutex_unlock(&lock);
	db_close(&lock, db);
	/* an older one refuses it, naming itself */
	CHECK(db_open(path, steps, 1, "old-test", NULL, &db, err, sizeof(err)) == -EPROTO && !db);
	CHECK(strstr(err, "unknown schema version 2 (this old-test knows up to 1)") != NULL);
	CHECK(db_open("", steps, 1, "test", NULL, &db, err, sizeof(err)) == -EINVAL);
	CHECK(db_open("/nonexistent/t.db", steps, 1, "test", NULL, &db, err, sizeof(err)) ==
	      -ENOENT);
	cleanup();
}

static int row(sqlite3_stmt *st, void *rec)
{
	return db_col_copy(st, 0, rec, 8);
}

static void test_statements(void)
{
	char err[256] = "";
	sqlite3 *db;
	if (!CHECK(fresh() == 0) ||
	    !CHECK(db_open(path, steps, 2, "test", NULL, &db, err, sizeof(err)) == 0))
		return;
	sqlite3_stmt *st;
	CHECK(db_begin(db) == 0);
	CHECK(db_prep(db, "INSERT INTO keys (id, sha256) VALUES (?1, ?2)", &st) == 0);
	CHECK(db_bind_text(st, 1, "k1") == SQLITE_OK && db_bind_text(st, 2, "h1") == SQLITE_OK);
	CHECK(db_step_done(st) == 0);
	sqlite3_reset(st);
	CHECK(db_bind_text(st, 2, "h2") == SQLITE_OK);
	CHECK(db_step_done(st) == -EEXIST); /* the same id again */
	sqlite3_reset(st);
	CHECK(db_bind_text(st, 1, "k2") == SQLITE_OK && db_bind_text(st, 2, "h1") == SQLITE_OK);
	CHECK(db_step_done(st) == -EIO); /* another constraint (sha256 UNIQUE) */
	sqlite3_finalize(st);
	CHECK(db_commit(db) == 0);
	CHECK(db_begin(db) == 0);
	CHECK(db_exec(db, "INSERT INTO keys (id, sha256) VALUES ('k3', 'h3')") == 0);
	db_rollback(db);
	db_rollback(db); /* nothing open: nothing done */
	CHECK(db_prep(db, "SELEKT", &st) == -EIO && st == NULL);
	struct buf rows;
	buf_init(&rows, 0);
	CHECK(db_exec(db, "INSERT INTO keys (id, sha256) VALUES ('longer-than-8', 'h4')") == 0);
	CHECK(db_prep(db, "SELECT id FROM keys ORDER BY id", &st) == 0);
	/* k1 fits, the second does not: the rows before stay */
	CHECK(db_rows(st, &rows, 8, row) == -EIO && rows.len == 8 && !strcmp(rows.p, "k1"));
	sqlite3_finalize(st);
	buf_release(&rows);
	db_close(NULL, db);
	cleanup();
}

static void test_keys(void)
{
	char hash[DB_HASH_LEN], tok[80], err[256];
	CHECK(db_key_hash("abc", hash) == 0);
	CHECK(!strcmp(hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
	CHECK(db_key_hash(NULL, hash) == -ENOENT && db_key_hash("", hash) == -ENOENT);
	char big[DB_SECRET_MAX + 2];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(db_key_hash(big, hash) == -ENOENT);
	big[DB_SECRET_MAX] = '\0';
	CHECK(db_key_hash(big, hash) == 0);
	CHECK(db_token("cpuos_", 32, tok, sizeof(tok)) == 0 && strlen(tok) == 70);
	CHECK(!strncmp(tok, "cpuos_", 6) && db_text_ok(tok, sizeof(tok), 70, 0));
	char tok2[80];
	CHECK(db_token("cpuos_", 32, tok2, sizeof(tok2)) == 0 && strcmp(tok, tok2));
	CHECK(db_token("key_", 8, tok, 21) == 0 && strlen(tok) == 20);
	CHECK(db_token("key_", 8, tok, 20) == -ERANGE);
	CHECK(db_token("x", 65, tok, sizeof(tok)) == -ERANGE);

	sqlite3 *db;
	if (!CHECK(fresh() == 0) ||
	    !CHECK(db_open(path, steps, 2, "test", NULL, &db, err, sizeof(err)) == 0))
		return;
	CHECK(db_key_hash(tok2, hash) == 0);
	char sql[200];
	snprintf(sql, sizeof(sql), "INSERT INTO keys (id, sha256, name) VALUES ('k', '%s', 'n')",
		 hash);
	CHECK(db_exec(db, sql) == 0);
	sqlite3_stmt *st;
	CHECK(db_key_find(db, "SELECT name FROM keys WHERE sha256 = ?1", tok2, &st) == 0 &&
	      !strcmp((const char *)sqlite3_column_text(st, 0), "n"));
	sqlite3_finalize(st);
	CHECK(db_key_find(db, "SELECT name FROM keys WHERE sha256 = ?1", tok, &st) == -ENOENT);
	sqlite3_finalize(st);
	CHECK(db_key_find(db, "SELECT name FROM keys WHERE sha256 = ?1", "", &st) == -ENOENT &&
	      !st);
	db_close(NULL, db);
	cleanup();
}

static void test_text(void)
{
	CHECK(db_text_ok("alice", 128, 1, 0));
	CHECK(!db_text_ok("", 128, 1, 0) && !db_text_ok(NULL, 128, 1, 0));
	CHECK(!db_text_ok("a b", 128, 1, 0) && db_text_ok("a b", 128, 1, 1));
	CHECK(!db_text_ok("tab\there", 128, 1, 1) && !db_text_ok("caf\xc3\xa9", 128, 1, 1));
	CHECK(!db_text_ok("12345678", 8, 1, 0) && db_text_ok("1234567", 8, 1, 0));
	char hex[9];
	db_hex(hex, (const unsigned char *)"\x00\x0f\xa0\xff", 4);
	CHECK(!strcmp(hex, "000fa0ff"));
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "open", test_open },	 { "statements", test_statements },
		{ "keys", test_keys },	 { "text", test_text },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
