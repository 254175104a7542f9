/*
 * sys: the agent's log line on the console, and the requests about the guest
 * as a whole (SETTIME, ENTROPY, POWEROFF), which outside PID 1 answer without
 * touching the host machine.
 */
#ifndef CPUOS_AGENT_SYS_H
#define CPUOS_AGENT_SYS_H

struct conn;
struct proto_frame;

/* One short line on stderr (the console as PID 1), prefixed "cpuos-agent: ". */
void sys_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Request handlers: each sends a terminal frame. */
void sys_settime(struct conn *c, const struct proto_frame *f);
void sys_entropy(struct conn *c, const struct proto_frame *f);
/* Answers, then asks the loop to stop (a shutdown as PID 1). */
void sys_poweroff(struct conn *c, const struct proto_frame *f);

#endif
