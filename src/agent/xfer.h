/*
 * xfer: file content over the channel, FWRITE (P_DATA into a temporary file
 * renamed into place) and FREAD (P_DATA chunks paced by the out queue and the
 * operation's credit). The loop pumps the open reads.
 */
#ifndef CPUOS_AGENT_XFER_H
#define CPUOS_AGENT_XFER_H

#include <stdbool.h>

struct conn;
struct conn_op;
struct proto_frame;

#define MAX_FWRITES 64 /* concurrent P_FWRITE, a cap on the host */

/* Request handlers: each sends a terminal frame or opens an operation. */
void xfer_fwrite(struct conn *c, const struct proto_frame *f);
void xfer_fread(struct conn *c, const struct proto_frame *f);

/* P_DATA on an fwrite operation. */
void xfer_fwrite_data(struct conn *c, struct conn_op *op, const struct proto_frame *f);
/* Releases an fwrite: closes and removes the temporary file. */
void xfer_fwrite_release(struct conn_op *op);
/* Reads the next chunks of open freads while the out queue has room. */
void xfer_fread_pump(struct conn *c);
/* Whether an fread has credit to send (the loop must not sleep then). */
bool xfer_fread_ready(const struct conn *c);

#endif
