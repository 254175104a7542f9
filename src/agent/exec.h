/*
 * exec: the process requests (EXEC, ATTACH, WAIT, SIGNAL, PS) and the
 * delivery of a process's output and exit to the operations subscribed to
 * it. The process table itself is proc's.
 */
#ifndef CPUOS_AGENT_EXEC_H
#define CPUOS_AGENT_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"

struct conn;
struct proc;
struct proto_frame;
struct user;

/* Caps on what a (hostile) host can make us hold. */
#define MAX_TERM_SIZE 10000 /* A_ROWS, A_COLS */
#define MAX_ARGS 1024 /* A_ARG, and A_ENV separately */
#define CMD_MAX	 4096 /* A_CMD */

/* The environment every process starts from (docs/agent-protocol.md): PATH,
 * HOME, USER, LOGNAME, LANG, TERM for user u, NULL-terminated in v. */
struct exec_env {
	char home[PROTO_MAX_STR + 8], user[300], logname[300];
	char *v[7];
};
void exec_base_env(struct exec_env *e, const struct user *u);
/* The directories of that PATH, ':'-separated. */
const char *exec_base_path(void);

/* Request handlers: each sends a terminal frame or opens an operation. */
void exec_run(struct conn *c, const struct proto_frame *f);
void exec_attach(struct conn *c, const struct proto_frame *f);
void exec_wait(struct conn *c, const struct proto_frame *f);
void exec_signal(struct conn *c, const struct proto_frame *f);
void exec_ps(struct conn *c, const struct proto_frame *f);
void exec_resize(struct conn *c, const struct proto_frame *f);

/* New output of p read from a pipe (stream 0 stdout, 1 stderr). */
void exec_output(struct proc *p, int stream, const uint8_t *buf, size_t n);
/* p has ended: P_EXIT to every subscriber, then collect if any. */
void exec_ended(struct proc *p);
/* Whether every operation streaming p's output has credit: else its pipes
 * are not read, so the process waits for that reader alone. */
bool exec_can_send(const struct proc *p);

#endif
