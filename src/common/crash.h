/*
 * crash: named crash points, for the tests of crash safety. Each durable
 * step of a transition (a pause's manifest written, its QEMU gone, the
 * store's row moved) has a name such as "pause.before_store"; with
 * CPUOS_CRASH_AT=NAME in its environment a process that reaches that step
 * logs it and dies by SIGKILL there, as a power cut or the OOM killer
 * would end it. docs/testing.md lists the names and the tests that hit
 * each one.
 */
#ifndef CPUOS_CRASH_H
#define CPUOS_CRASH_H

/* Dies here if CPUOS_CRASH_AT names this point; else returns at once. */
void crash_point(const char *name);

#endif
