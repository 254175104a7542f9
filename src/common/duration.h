/* duration: "90s", "30m", "2h", "1h30m" or plain seconds, as the API takes them. */
#ifndef CPUOS_DURATION_H
#define CPUOS_DURATION_H

/* Parses s into seconds: 0, or -EINVAL for anything else (empty, negative,
 * unknown unit, overflow past ten years). */
int duration_parse(const char *s, long long *seconds);

#endif
