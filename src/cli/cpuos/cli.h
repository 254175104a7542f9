/*
 * cli: what the cpuos commands share: the connection to cpuosd (--url,
 * --key, the environment, the default socket), one-line error reporting,
 * and parsers for K=V, durations and SANDBOX:/path arguments.
 */
#ifndef CPUOS_CLI_CLI_H
#define CPUOS_CLI_CLI_H

#include <jansson.h>
#include <stddef.h>

#ifndef CPUOS_VERSION
#define CPUOS_VERSION "0.1.0"
#endif

#define EXIT_API   1 /* cpuosd refused or could not be reached */
#define EXIT_USAGE 2 /* bad command line */

#define CLI_DEFAULT_SOCKET "/run/cpuos/cpuosd.sock"
#define CLI_DEFAULT_URL	   "http://127.0.0.1:7070"

struct api;

/* Global options; commands connect through cli_api. */
struct cli {
	const char *url; /* --url, else NULL */
	const char *key; /* --key, else NULL */
	struct api *api; /* opened by cli_api, freed by main */
};

/* The daemon's handle: --url or $CPUOS_API_URL; else, with no key, the
 * Unix socket ($CPUOS_SOCKET or the default) when it exists; else the
 * default TCP address with the key (--key or $CPUOS_API_KEY). NULL after
 * printing why (a malformed url). */
struct api *cli_api(struct cli *c);
/* The Unix socket path: $CPUOS_SOCKET or CLI_DEFAULT_SOCKET. */
const char *cli_socket_path(void);

/* Prints "cpuos: MESSAGE" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the api's last error as one line; returns EXIT_API. */
int cli_api_fail(struct api *a);
/* Prints "cpuos: MESSAGE" and a pointer to help; returns EXIT_USAGE. */
int cli_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Adds "K=V" (as given to option opt) to obj as a string; 0, or -EINVAL
 * after printing why. */
int cli_kv(json_t *obj, const char *arg, const char *opt);
/* A duration for the API: an integer for plain seconds ("90"), else the
 * string as given ("1h30m"; the daemon judges it). NULL for "" (ENOMEM). */
json_t *cli_duration(const char *s);
/* Parses a non-negative integer of at most max; 0 or -EINVAL. */
int cli_uint(const char *s, unsigned long max, unsigned long *out);

/* Splits "SANDBOX:/path" (the part before the first ':' holds no '/'):
 * returns 1 and fills id (NUL-terminated, truncated at idlen) and *path;
 * 0 when arg is a local path. */
int cli_remote(const char *arg, char *id, size_t idlen, const char **path);

/* Prints j indented on stdout, with a newline. */
void cli_print_json(const json_t *j);
/* "563 MB", "1.2 GB", "812 B": decimal units as the template build prints. */
void cli_human_size(double bytes, char *out, size_t n);
/* Prints rows (an array of arrays of strings) under the ncol headers hdr
 * as left-aligned columns, two spaces apart. */
void cli_table(const char *const *hdr, size_t ncol, const json_t *rows);
/* A string member of obj, or "-" when missing or null. */
const char *cli_str(const json_t *obj, const char *key);
/* The directory of this binary (from /proc/self/exe); 0 or -errno. */
int cli_bindir(char *out, size_t n);

#endif
