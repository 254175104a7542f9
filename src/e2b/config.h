/* config: cpuos-e2b's options. */
#ifndef CPUOS_E2B_CONFIG_H
#define CPUOS_E2B_CONFIG_H

struct e2b_config;

/* Fills o from its defaults, the --config files and argv: 0 to serve, 1
 * after --help, -1 after saying what is wrong on stderr. */
int e2b_config_parse(struct e2b_config *o, int argc, char **argv);

#endif
