/*
 * sys: the agent's log line on the console, and the requests about the guest
 * as a whole (SETTIME, ENTROPY, RESTORED, POWEROFF), which outside PID 1
 * check their input and answer without touching the host machine.
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
/* After a restore or a fork: checks every attribute first (P_ERROR EINVAL
 * naming the bad one, nothing changed), then as PID 1 sets the clock,
 * credits the entropy and reseeds the kernel's CRNG, sets the hostname and
 * machine id, and runs the restore hooks (hooks.h); the loop is held at
 * most about 2.5 s. P_OK with A_GENERATION echoed when given. */
void sys_restored(struct conn *c, const struct proto_frame *f);
/* Answers, then asks the loop to stop (a shutdown as PID 1). */
void sys_poweroff(struct conn *c, const struct proto_frame *f);
/* P_STATS: memory, root file system, network and CPU use, as the guest
 * counts them. */
void sys_stats(struct conn *c, const struct proto_frame *f);
/* P_TRUST: a CA certificate (PEM) added to each CA bundle the image has
 * (one made where it has none) and kept in /usr/local/share/ca-certificates
 * for update-ca-certificates; no shell needed, so images without one trust
 * it too. */
void sys_trust(struct conn *c, const struct proto_frame *f);

#endif
