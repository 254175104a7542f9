/* watch: envd's watch RPCs (watch.c), handlers of envd's route table:
 * each answers exactly once (a stream, a JSON message or an error) and
 * returns 0. */
#ifndef CPUOS_E2B_WATCH_H
#define CPUOS_E2B_WATCH_H

struct httpd_req;

int watch_dir(struct httpd_req *r);    /* WatchDir: a stream */
int watch_create(struct httpd_req *r); /* CreateWatcher */
int watch_events(struct httpd_req *r); /* GetWatcherEvents */
int watch_remove(struct httpd_req *r); /* RemoveWatcher */

#endif
