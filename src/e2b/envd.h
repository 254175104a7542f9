/* envd: a sandbox's envd plane (port 49983): /health, /files, and the
 * filesystem.Filesystem RPCs (envd.c), with process.Process's
 * (process.c) in its route table. */
#ifndef CPUOS_E2B_ENVD_H
#define CPUOS_E2B_ENVD_H

#include "lib/httpd.h"

#include <stddef.h>

/* POST /files's body as it streams (httpd's upload hook, after the
 * credentials were checked at HTTPD_UP_BEGIN). */
int envd_upload(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n);
struct apath;
/* p = "/v1/sandboxes/sbx_<id>" and sub after it, for cpuosd. */
void envd_sbx_path(struct apath *p, const char *id, const char *sub);
/* GET /files: the file's bytes (a route of envd's, and of the control
 * plane's for signed URLs on E2B_SANDBOX_URL's one address). */
int envd_files_get(struct httpd_req *r);
/* The request is over: what its upload held goes. */
void envd_upload_drop(struct httpd_req *r);

/* The table for a port cpuos-e2b does not serve itself. */
extern const struct httpd_route e2b_port_routes[];

#endif
