/*
 * objstore: a real S3-compatible store for a test binary, started once
 * before its cases (scripts/objstore.sh: Swift's s3api on loopback, on
 * free ports) and stopped at exit. The cases, each in a child process,
 * read the store's settings from the environment objstore_up sets:
 * CPUOS_S3_ENDPOINT, _REGION, _ACCESS_KEY, _SECRET_KEY, and _BUCKET, a
 * bucket made for this binary.
 */
#ifndef CPUOS_TESTS_OBJSTORE_H
#define CPUOS_TESTS_OBJSTORE_H

/* Starts the store under dir and makes the bucket: 0, or -1 after one
 * line on stderr saying why (the binary then fails every case). */
int objstore_up(const char *dir, const char *bucket);
/* Stops the store objstore_up started (also run at exit). */
void objstore_down(void);

#endif
