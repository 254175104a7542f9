/* process: envd's process.Process RPCs (process.c), each a handler of
 * envd's route table: each answers exactly once, with a stream (a pump)
 * or an error, and returns 0. */
#ifndef CPUOS_E2B_PROCESS_H
#define CPUOS_E2B_PROCESS_H

#include "lib/httpd.h"

int proc_start(struct httpd_req *r);
int proc_connect(struct httpd_req *r);
int proc_list(struct httpd_req *r);
int proc_send_input(struct httpd_req *r);
int proc_send_signal(struct httpd_req *r);
int proc_close_stdin(struct httpd_req *r);
int proc_update(struct httpd_req *r);

/* StreamInput, a client stream: its body as it comes (an HTTPD_UPLOAD
 * route's phases, after the credentials were checked), and what its
 * request held once it is over. */
int proc_stream_input_up(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n);
void proc_stream_input_drop(struct httpd_req *r);

#endif
