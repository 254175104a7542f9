/*
 * hooks: the restore hooks, executable files in /etc/cpuos/restore.d that
 * the agent runs after P_RESTORED (docs/agent-protocol.md, After a restore),
 * one after the other, each bounded in time, reaped here by pid.
 */
#ifndef CPUOS_AGENT_HOOKS_H
#define CPUOS_AGENT_HOOKS_H

#include <stdint.h>

#define HOOKS_DIR     "/etc/cpuos/restore.d"
#define HOOKS_MAX     32   /* hooks run per restore; the others are skipped */
#define HOOKS_WAIT_MS 2000 /* per hook, then it is killed */

/* Runs the executable regular files of dir (symlinks followed, names
 * starting with '.' skipped), the first HOOKS_MAX in byte order of their
 * names, one at a time, each with only its path as argv, stdin and stdout
 * on /dev/null, stderr on ours (the console), and an environment of PATH
 * and, each unless NULL, CPUOS_HOSTNAME=hostname and
 * CPUOS_GENERATION=generation. Each is waited for up to HOOKS_WAIT_MS,
 * and all of them together until end (monotonic ms): a hook still running
 * then is killed with its process group, hooks not started by then are
 * skipped. Returns once every hook it started is reaped or given up on
 * (100 ms after its SIGKILL; the agent's reaper then takes its zombie as
 * an orphan). A hook that fails, or is killed, is logged, not returned:
 * 0, or -errno when dir cannot be read (-ENOENT: no hooks). */
int hooks_run(const char *dir, const char *generation, const char *hostname, int64_t end);

#endif
