/*
 * files: file metadata requests (STAT, LIST, MKDIR, REMOVE, RENAME) and the
 * path and user attribute helpers that xfer's transfers share with them.
 */
#ifndef CPUOS_AGENT_FILES_H
#define CPUOS_AGENT_FILES_H

#include <stdbool.h>
#include <stdint.h>

struct conn;
struct proto_frame;
struct user;

/* Caps on what a (hostile) host can make us hold. */
#define MAX_LIST       100000 /* P_LIST entries */
#define MAX_LIST_DEPTH 64

/* Request handlers: each sends a terminal frame. */
void files_stat(struct conn *c, const struct proto_frame *f);
void files_list(struct conn *c, const struct proto_frame *f);
void files_mkdir(struct conn *c, const struct proto_frame *f);
void files_remove(struct conn *c, const struct proto_frame *f);
void files_rename(struct conn *c, const struct proto_frame *f);

/* Gets absolute path attribute tag into buf[PROTO_MAX_STR + 1]: 0, or -1
 * after sending P_ERROR. */
int files_get_path(struct conn *c, const struct proto_frame *f, uint16_t tag, char *buf,
		   const char *what);
/* Optional A_USER: fills *u (root when absent) and *given: 0, or -1 after
 * sending P_ERROR. */
int files_get_user(struct conn *c, const struct proto_frame *f, struct user *u, bool *given);

#endif
