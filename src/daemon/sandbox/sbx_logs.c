/*
 * sbx_logs: a sandbox's console log (the guest kernel's messages and its
 * agent's, which write to the serial console) while it runs and after. The
 * runner keeps it in the run directory (console.log, capped at 1 MiB);
 * when a sandbox stops, the run directory goes, so its log moves to
 * <state_dir>/logs/<id>.log first, where it stays SBX_LOG_KEEP_S, for
 * "why did my sandbox die".
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "runner/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void kept_path(const struct sbx_mgr *m, const char *id, char *out, size_t n)
{
	snprintf(out, n, "%s/logs/%s.log", m->cfg.state_dir, id);
}

void sbx__keep_log(struct sbx_mgr *m, const char *id, const char *run_dir)
{
	char from[512], dir[512], to[512];
	snprintf(from, sizeof(from), "%s/console.log", run_dir);
	snprintf(dir, sizeof(dir), "%s/logs", m->cfg.state_dir);
	kept_path(m, id, to, sizeof(to));
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return;
	/* The same file system as the run directories: a rename; its time
	 * is the stop's, from which it is kept (a long pause wrote nothing). */
	if (rename(from, to) < 0) {
		if (errno != ENOENT)
			log_warn("cannot keep the console log of %s: %s", id, strerror(errno));
		return;
	}
	utimensat(AT_FDCWD, to, NULL, 0);
}

void sbx__sweep_logs(struct sbx_mgr *m)
{
	char dir[512], path[1024];
	snprintf(dir, sizeof(dir), "%s/logs", m->cfg.state_dir);
	DIR *d = opendir(dir);
	if (!d)
		return;
	time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime > SBX_LOG_KEEP_S)
			unlink(path);
	}
	closedir(d);
}

int sbx_log_path(struct sbx_mgr *m, const struct store_sbx *row, char *out, size_t n)
{
	if (!strcmp(row->state, "running") || !strcmp(row->state, "paused")) {
		snprintf(out, n, "%s/console.log", row->run_dir);
		return 1;
	}
	kept_path(m, row->id, out, n);
	return 0;
}
