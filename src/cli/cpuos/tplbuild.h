/*
 * tplbuild: "cpuos templates build": runs guest/templates/build.sh and turns
 * its output into a progress bar on a terminal, or its phase lines
 * elsewhere. Needs no daemon.
 */
#ifndef CPUOS_CLI_TPLBUILD_H
#define CPUOS_CLI_TPLBUILD_H

/* Builds template name; returns the script's exit status (128+N when a
 * signal N ended it), or EXIT_API when it could not be started. */
int tpl_build(const char *name);

#endif
