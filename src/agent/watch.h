/*
 * watch: P_WATCH, file system events of a directory (and, recursively, of
 * the directories under it) over inotify, streamed as P_FSEVENT frames
 * within the operation's credit. A watch lives as long as its operation.
 */
#ifndef CPUOS_AGENT_WATCH_H
#define CPUOS_AGENT_WATCH_H

#include <stdbool.h>

struct conn;
struct conn_op;
struct pollfd;
struct proto_frame;

#define MAX_WATCHES    64   /* watch operations at once */
#define MAX_WATCH_DIRS 8192 /* directories one recursive watch follows */

struct watch_tag {
	int slot;
};

void watch_start(struct conn *c, const struct proto_frame *f);
/* The operation of a watch ends (cancel, disconnect): its inotify goes. */
void watch_op_closed(struct conn_op *op);
/* Whether a watch with credit has events read but not sent (the loop then
 * must not block), and sending them. */
bool watch_pending(bool throttled);
void watch_pump(bool throttled);
/* Poll entries of the watches with credit: the number added. */
int watch_poll_fill(struct pollfd *pfd, struct watch_tag *tag, int max, bool throttled);
void watch_poll_event(const struct watch_tag *t, short revents);

#endif
