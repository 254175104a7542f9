/*
 * http: the cpuos CLI's client for the cpuosd API (docs/api.md) over libcurl,
 * on TCP or on the daemon's Unix socket: JSON requests, streamed uploads and
 * downloads, and an NDJSON line reader. One handle is one kept-alive
 * connection and is not thread-safe: a second thread takes its own (api_dup).
 */
#ifndef CPUOS_CLI_HTTP_H
#define CPUOS_CLI_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

struct api;

/* A request path with its query, percent-encoded as it is built. Caller
 * memory (on the stack); an overflow is remembered and fails the request. */
#define APATH_MAX 16384 /* a 4096-byte guest path, encoded, and room to spare */
struct apath {
	char s[APATH_MAX];
	size_t len;
	int nquery;
	int err;
};

/* Starts p with raw (a literal such as "/v1/sandboxes", not encoded). */
void apath_init(struct apath *p, const char *raw);
/* Appends raw as is. */
void apath_add(struct apath *p, const char *raw);
/* Appends "/" and seg percent-encoded (a sandbox id, a key id). */
void apath_seg(struct apath *p, const char *seg);
/* Appends "?key=value" or "&key=value", both percent-encoded. */
void apath_query(struct apath *p, const char *key, const char *value);

/* Body sink of a download: 0, or -errno to abort the transfer (that -errno
 * is then what the request returns). Called only for a 2xx answer. */
typedef int (*api_sink_fn)(void *arg, const char *p, size_t n);
/* One NDJSON line without its newline: 0 to go on, 1 to stop reading (the
 * request then succeeds), -errno to fail. */
typedef int (*api_line_fn)(void *arg, const char *line, size_t n);
/* Called about once a second while a stream waits: 0, or -errno to abort. */
typedef int (*api_tick_fn)(void *arg);

/* Opens a handle for url: "http://host:port" or "unix:///path.sock"; key
 * (may be NULL) is sent as a bearer token. Both strings are copied.
 * 0, -EINVAL for a url of another form, -ENOMEM. Needs curl_global_init. */
int api_new(const char *url, const char *key, struct api **out);
/* A new handle to the same daemon with the same key, for another thread. */
int api_dup(const struct api *a, struct api **out);
void api_free(struct api *a);

/* Caps each later request at ms milliseconds in all (0: no cap, the
 * default; commands and streams may take as long as they take). */
void api_set_timeout(struct api *a, long ms);
/* The url as given, for messages. */
const char *api_url(const struct api *a);
int api_is_unix(const struct api *a);

/* Every request returns 0 for a 2xx answer; -EPROTO for another status (the
 * daemon's error is then in api_error and api_status); -ECONNREFUSED when
 * cpuosd cannot be reached; -EIO when the connection broke or the answer
 * was not what the API promises; -ENOMEM. path starts with "/v1/" and
 * carries its query. */

/* method path with body (a JSON object or NULL, not stolen); *resp (if
 * resp) gets the parsed answer, NULL for an empty one (204); caller frees. */
int api_json(struct api *a, const char *method, const struct apath *path, json_t *body,
	     json_t **resp);
/* POST path with n raw bytes as application/octet-stream; no answer body. */
int api_post_raw(struct api *a, const struct apath *path, const void *p, size_t n);
/* method path with the rest of fd as the body, streamed (chunked when fd is
 * not a regular file); *resp as in api_json. */
int api_upload(struct api *a, const char *method, const struct apath *path, int fd, json_t **resp);
/* Where an upload's bytes come from: up to max into p, 0 at the end, or
 * -errno to abort the transfer (the request then fails with it). */
typedef ssize_t (*api_source_fn)(void *arg, char *p, size_t max);
/* As api_upload, the body read from src (chunked). */
int api_upload_from(struct api *a, const char *method, const struct apath *path, api_source_fn src,
		    void *arg, json_t **resp);
/* GET path, handing the body to sink as it arrives. */
int api_download(struct api *a, const struct apath *path, api_sink_fn sink, void *arg);
/* GET path as NDJSON: fn gets each line (at most 16 MiB) as it arrives;
 * tick (may be NULL) is called while the stream is idle. */
int api_lines(struct api *a, const struct apath *path, api_line_fn fn, api_tick_fn tick, void *arg);
/* POST path with the JSON body, its answer read as api_lines_open does. */
int api_post_lines(struct api *a, const struct apath *path, json_t *body, api_line_fn fn,
		   api_tick_fn tick, void *arg);
/* As api_lines, and fn(arg, NULL, 0) first, once the daemon answered 2xx
 * (a watch is then in place). */
int api_lines_open(struct api *a, const struct apath *path, api_line_fn fn, api_tick_fn tick,
		   void *arg);

/* HTTP status of the last answer, 0 when there was none. */
long api_status(const struct api *a);
/* The API's "code" of the last error answer ("not_found"), else "". */
const char *api_code(const struct api *a);
/* One readable line on the last failure: "no such sandbox (HTTP 404
 * not_found)" or "cannot connect to cpuosd at URL: ...". */
const char *api_error(const struct api *a);
/* The daemon's message of its last error answer alone ("no such
 * sandbox"), else what api_error says. */
const char *api_message(const struct api *a);

#endif
