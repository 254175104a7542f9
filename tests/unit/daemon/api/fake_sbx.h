/*
 * fake_sbx: the sandbox layer (sbx.h), faked for the API's unit tests
 * (linked instead of src/daemon/sandbox/). It records the typed calls the
 * handlers make, and answers as the test sets it: a sandbox that runs, or
 * an error for sbx_acquire; the end state and output of every operation.
 */
#ifndef CPUOS_TESTS_FAKE_SBX_H
#define CPUOS_TESTS_FAKE_SBX_H

#include "daemon/sandbox/sbx.h"

#define FAKE_MAX 16

struct fake_sbx {
	/* What the next calls answer. */
	int acquire_err;        /* sbx_acquire: 0, or this -errno with "fake: why" */
	int seal_err;           /* sbx_secret_seal: 0, or this -errno */
	int create_err;
	struct sop_state st;    /* every operation ends so */
	char out[2][256];       /* and printed this on stdout and stderr */
	/* What the handlers asked. */
	unsigned requests, acquires, creates, kills, seals;
	struct sbx_request req; /* the last request, its strings copied below */
	char strs[24][512];     /* cmd, argv, env, cwd, user, path, path2, context, ... */
	char acquired_id[64], acquired_account[128];
	int acquired_flags;
	struct sbx_params create;
	char create_strs[8][512];
	char killed[64], kill_reason[32];
	char data[1024];        /* bytes sent with sbx_data (stdin, an upload) */
	size_t ndata;
};
extern struct fake_sbx fake;

#endif
