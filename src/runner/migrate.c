/*
 * migrate: QMP choreography of a save and a load. The state goes through
 * a descriptor the runner opens and hands QEMU (getfd, then `fd:`): QEMU
 * writes the file itself, so "completed" means every byte is in it, which
 * `exec:cat` never promised (the cat could still be writing, or be killed
 * by QEMU's close), and QEMU needs neither a shell nor the path.
 */
#include "runner/migrate.h"

#include "common/clock.h"
#include "common/fs.h"
#include "runner/qmp.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FDNAME "cpuos-migration"
#define CANCEL_MS 6000   /* a cancelled save's end */
#define FINALIZE_MS 5000 /* a completed save's last step */

/* x-ignore-shared as asked; events on, so that QEMU says when a
 * migration's status changes (MIGRATION) and its end is waited for, not
 * polled. Only x-ignore-shared goes into the state: QEMU checks no other
 * capability against the saving side's. */
static int set_caps(struct qmp *q, int ignore_shared, char *err, size_t errlen)
{
	json_t *args = json_pack("{s:[{s:s, s:b}, {s:s, s:b}]}", "capabilities", "capability",
				 "x-ignore-shared", "state", ignore_shared, "capability", "events",
				 "state", 1);
	return qmp_command(q, "migrate-set-capabilities", args, 2000, NULL, err, errlen);
}

static int over(const char *status)
{
	return status && (!strcmp(status, "completed") || !strcmp(status, "failed") ||
			  !strcmp(status, "cancelled"));
}

/* Waits until a MIGRATION event says the migration is over (completed,
 * failed or cancelled) or deadline passes: 0 with that status, or
 * -ETIMEDOUT with the last one seen ("" for none), or -EPIPE once QEMU
 * is gone. */
static int wait_over(struct qmp *q, int64_t deadline, char *status, size_t len)
{
	for (;;) {
		const char *st = qmp_migration_status(q);
		snprintf(status, len, "%s", st ? st : "");
		if (over(st))
			return 0;
		int64_t left = deadline - clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		int r = qmp_wait_event(q, (int)left);
		if (r < 0 && r != -ETIMEDOUT)
			return r;
	}
}

/* Waits until the migration completed or failed. The state of a microVM
 * is tens of KB when its RAM is a file of its own, the whole RAM when it
 * is not. A load reads a file, which never makes QEMU's loading
 * coroutine wait, so QEMU sends nothing, events included, until the load
 * is over. */
static int wait_done(struct qmp *q, int timeout_ms, char *err, size_t errlen)
{
	char status[32];
	int r = wait_over(q, clock_ms() + timeout_ms, status, sizeof(status));
	if (r == -ETIMEDOUT) {
		snprintf(err, errlen, "migration still '%s' after %d ms", status, timeout_ms);
		return r;
	}
	if (r < 0) {
		snprintf(err, errlen, "QEMU went away during the migration");
		return r;
	}
	if (!strcmp(status, "completed"))
		return 0;
	json_t *ret = NULL;
	const char *why = NULL;
	if (qmp_command(q, "query-migrate", NULL, 2000, &ret, NULL, 0) == 0)
		why = json_string_value(json_object_get(ret, "error-desc"));
	snprintf(err, errlen, "migration %s: %s", status, why ? why : "no reason given");
	json_decref(ret);
	return -EIO;
}

/* A save's "completed" comes a moment before QEMU leaves finish-migrate
 * (its migration thread still has to take the main loop's lock), and a
 * cont in between is refused ("Migration is not finalized yet"). No
 * event marks that step, so it is asked for: one round trip, as a rule. */
static int wait_finalized(struct qmp *q, char *err, size_t errlen)
{
	int64_t deadline = clock_ms() + FINALIZE_MS;
	for (;;) {
		json_t *ret = NULL;
		int r = qmp_command(q, "query-status", NULL, 2000, &ret, err, errlen);
		if (r < 0)
			return r;
		const char *st = json_string_value(json_object_get(ret, "status"));
		int finishing = st && !strcmp(st, "finish-migrate");
		json_decref(ret);
		if (!finishing)
			return 0;
		if (clock_ms() >= deadline) {
			snprintf(err, errlen, "QEMU still finishing the migration after %d ms",
				 FINALIZE_MS);
			return -ETIMEDOUT;
		}
	}
}

/* Opens path with flags and hands it to QEMU as FDNAME. */
static int pass_file(struct qmp *q, const char *path, int flags, char *err, size_t errlen)
{
	int fd = fs_open_file(path, flags, 0600); /* see snap.c */
	if (fd < 0) {
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(-fd));
		return fd;
	}
	int r = qmp_getfd(q, FDNAME, fd, err, errlen);
	close(fd); /* QEMU holds its own copy */
	return r;
}

int migrate_save(struct qmp *q, const char *path, int ignore_shared, int timeout_ms, char *err,
		 size_t errlen)
{
	int r = qmp_command(q, "stop", NULL, 5000, NULL, err, errlen);
	if (r == 0)
		r = set_caps(q, ignore_shared, err, errlen);
	if (r == 0) {
		unlink(path); /* whatever the jail left in its place */
		r = pass_file(q, path, O_WRONLY | O_CREAT | O_EXCL, err, errlen);
	}
	if (r < 0)
		return r;
	qmp_migration_forget(q);
	r = qmp_command(q, "migrate", json_pack("{s:s}", "uri", "fd:" FDNAME), 5000, NULL, err,
			errlen);
	if (r == 0 && (r = wait_done(q, timeout_ms, err, errlen)) == -ETIMEDOUT) {
		/* Cancelled and over before the caller lets the VM go on: a
		 * save that ended later would stop the VM for good. */
		char e2[128];
		if (qmp_command(q, "migrate_cancel", NULL, 5000, NULL, e2, sizeof(e2)) == 0)
			wait_over(q, clock_ms() + CANCEL_MS, e2, sizeof(e2));
	}
	if (r == 0)
		r = wait_finalized(q, err, errlen);
	return r;
}

int migrate_save_devices(struct qmp *q, const char *path, char *err, size_t errlen)
{
	/* live false: the stopped VM's disks stay active, for the cont of a
	 * pause that fails later. */
	return qmp_command(q, "xen-save-devices-state",
			   json_pack("{s:s, s:b}", "filename", path, "live", 0), 30000, NULL, err,
			   errlen);
}

int migrate_load(struct qmp *q, const char *path, int ignore_shared, int timeout_ms, char *err,
		 size_t errlen)
{
	int r = set_caps(q, ignore_shared, err, errlen);
	if (r == 0)
		r = pass_file(q, path, O_RDONLY, err, errlen);
	if (r < 0)
		return r;
	qmp_migration_forget(q);
	r = qmp_command(q, "migrate-incoming", json_pack("{s:s}", "uri", "fd:" FDNAME), 5000, NULL,
			err, errlen);
	if (r == 0)
		r = wait_done(q, timeout_ms, err, errlen);
	/* The state says the VM was stopped (saves stop it first), so QEMU
	 * leaves it stopped. */
	if (r == 0)
		r = qmp_command(q, "cont", NULL, 5000, NULL, err, errlen);
	return r;
}

int migrate_qemu_version(struct qmp *q, char *out, size_t outlen, char *err, size_t errlen)
{
	json_t *ret = NULL;
	int r = qmp_command(q, "query-version", NULL, 2000, &ret, err, errlen);
	if (r < 0)
		return r;
	int major = 0, minor = 0, micro = 0;
	const char *pkg = "";
	if (json_unpack(ret, "{s:{s:i, s:i, s:i}, s?s}", "qemu", "major", &major, "minor", &minor,
			"micro", &micro, "package", &pkg) < 0) {
		snprintf(err, errlen, "query-version: unexpected answer");
		r = -EPROTO;
	} else {
		snprintf(out, outlen, "%d.%d.%d%s%s", major, minor, micro, *pkg ? " " : "", pkg);
	}
	json_decref(ret);
	return r;
}
