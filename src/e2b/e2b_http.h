/* e2b_http: cpuos-e2b's hooks into lib/httpd: which plane a request is
 * for, who it acts as, and E2B's error shape. */
#ifndef CPUOS_E2B_HTTP_H
#define CPUOS_E2B_HTTP_H

#include <stddef.h>

struct e2b;
struct httpd;

/* Serves g's planes on g->cfg->listen: 0, or -errno with a reason in err. */
int e2b_http_start(struct e2b *g, struct httpd **out, char *err, size_t errlen);

#endif
