/*
 * qmp: a small client for QEMU's machine protocol (one JSON object per line
 * over a Unix socket). Commands are synchronous; events that arrive meanwhile
 * are remembered (the VM runner needs SHUTDOWN and its reason, the
 * snapshot code MIGRATION's status).
 */
#ifndef CPUOS_QMP_H
#define CPUOS_QMP_H

#include <jansson.h>
#include <stddef.h>

struct qmp;

#define QMP_MAX_LINE (1024 * 1024) /* a longer line is a protocol error */

/* Connects to the QMP socket at path, retrying until it exists or timeout_ms
 * passes, reads the greeting and leaves negotiation mode. 0 or -errno; on
 * failure err (if non-NULL) says why. */
int qmp_connect(const char *path, int timeout_ms, struct qmp **out, char *err, size_t errlen);
/* Same over an already connected descriptor, which the qmp then owns. */
int qmp_open_fd(int fd, int timeout_ms, struct qmp **out, char *err, size_t errlen);
void qmp_close(struct qmp *q);
int qmp_fd(const struct qmp *q);

/* Runs one command. args may be NULL; its reference is stolen. On success
 * *ret (if non-NULL) gets a new reference to the "return" value. A QMP error
 * reply gives -EREMOTEIO with its description in err. */
int qmp_command(struct qmp *q, const char *cmd, json_t *args, int timeout_ms,
		json_t **ret, char *err, size_t errlen);

/* Hands QEMU a copy of fd under name (QMP's getfd, the descriptor sent
 * with the command over the Unix socket); a later "fd:name" takes it. */
int qmp_getfd(struct qmp *q, const char *name, int fd, char *err, size_t errlen);

/* Reads what the socket holds without blocking and records events: 0, or
 * -EPIPE once QEMU has closed the connection (it exited). */
int qmp_poll_events(struct qmp *q);

/* The last SHUTDOWN event: its reason ("guest-reset", "host-qmp-quit",
 * "guest-shutdown", ...) or NULL if none came. */
const char *qmp_shutdown_reason(const struct qmp *q);

/* Waits up to timeout_ms for QEMU's next event and records it: 0,
 * -ETIMEDOUT, or -EPIPE once QEMU has closed the connection. */
int qmp_wait_event(struct qmp *q, int timeout_ms);
/* The last MIGRATION event (QEMU sends them with the "events" migration
 * capability on): its status ("setup", "active", "completed", "failed",
 * "cancelling", "cancelled", ...), or NULL if none came since
 * qmp_migration_forget. */
const char *qmp_migration_status(const struct qmp *q);
void qmp_migration_forget(struct qmp *q);

#endif
