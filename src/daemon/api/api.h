/*
 * api: the /v1 handlers (docs/api.md) and the helpers they share: finding
 * the caller's sandbox, validating JSON fields and paths, mapping agent
 * errors to HTTP. Handlers live in api_sbx.c (sandboxes, templates, keys,
 * service), api_exec.c (commands, processes), api_code.c (code contexts)
 * and api_files.c (files), and the files named below.
 */
#ifndef CPUOS_API_H
#define CPUOS_API_H

#include "daemon/http/http.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/store/store.h"

/* The running sandbox named in the path if the caller may see it, with a
 * reference (sbx_put it); otherwise NULL after answering 404 (unknown or
 * another account's) or 409 (not running). */
struct sbx *api_sbx(struct req *r);
/* The stored sandbox if the caller may see it: 0, or -ENOENT after 404. */
int api_row(struct req *r, struct store_sbx *row);
json_t *api_sandbox_json(struct req *r, const struct store_sbx *row);
/* Answers a failed sbx_resume/sbx_pause/sbx_fork (e its -errno, err its
 * reason): 404, 409 not running, 429 quota, 503. */
int api_resume_error(struct req *r, int e, const char *err);

/* Field helpers: each answers 422 and returns -1 when the field is there
 * but wrong; 0 when absent (out keeps its default) or fine. */
int api_uint(struct req *r, const char *key, long long min, long long max, long long *out);
int api_duration(struct req *r, json_t *v, const char *what, long long max_s, long long *out);
int api_str(struct req *r, const char *key, size_t max, const char **out);
/* An upload's next n bytes appended to the file fd, *size counted against
 * max: 0, or -1 answered (413 past max, what naming the body; 507 when it
 * cannot be kept). */
int api_upload_append(struct req *r, int fd, unsigned long long *size, unsigned long long max,
		      const char *what, const char *data, size_t n);
int api_bool(struct req *r, const char *key, int *out);
/* An object of string values, at most max entries: its JSON text (malloc'd)
 * in *out, or NULL when absent. With env set, the names must be variable
 * names: not empty, no '='. */
int api_str_map(struct req *r, const char *key, size_t max, int env, char **out);

/* A guest path from query parameter name or a JSON string: absolute, no
 * ".." component, no NUL, at most 4096 bytes. NULL after answering 400. */
const char *api_query_path(struct req *r, const char *name);
int api_check_path(struct req *r, const char *what, const char *p);

/* Waits for op as sbx_wait does, in slices, while the client stays: 0 once
 * it ended (or started, with want_start), -ETIMEDOUT after timeout_ms (-1:
 * no limit but the client's), -ECONNABORTED when the client left. Fills
 * *st either way. */
int api_wait(struct req *r, struct sbx *s, struct sop *op, int want_start, int timeout_ms,
	     struct sop_state *st);
/* Answers a failed api_wait: 504 after a timeout; after the client left,
 * an answer nobody reads, so the handler can return. */
int api_wait_error(struct req *r, int e);
/* Sends q on op (NULL: it could not be made): 0, or -1 after answering
 * 409 not running, 429 too many operations, 413 with too_large, 500. */
int api_send(struct req *r, struct sbx *s, struct sop *op, const struct sbx_request *q,
	     const char *too_large);

/* Answers 200 with what op gathers as the body, streamed as it comes;
 * takes over op and the reference on s. API_STREAM_RAW: a SOP_QUEUE's
 * bytes (a download); the others an NDJSON stream of a SOP_NDJSON's
 * output and events (docs/api.md), closed by a command's exit line (with
 * its duration for an exec, without for a process's stream) or a code
 * call's end line. A stream the agent ends with P_ERROR is cut, so the
 * client sees it incomplete; a client that leaves ends the stream (and
 * op). */
enum api_stream { API_STREAM_RAW, API_STREAM_TAR, API_STREAM_EXEC, API_STREAM_ATTACH,
		  API_STREAM_CODE, API_STREAM_WATCH };
int api_reply_sop(struct req *r, struct sbx *s, struct sop *op, enum api_stream kind);
/* Answers 200 with a started watch's events (op, SBX_WATCH of path) as
 * NDJSON until the client leaves or the path is gone; when the sandbox
 * pauses, it waits for it to run again, watches anew and says events may
 * have been lost (an overflow line). Takes over op and the reference on s. */
int api_reply_watch(struct req *r, struct sbx *s, struct sop *op, const char *path, int recursive);
/* A code call's result or error as the API shows it (with_type: with its
 * "type", as a stream's line has it); the execution once the call ended
 * (with_results: its results and error, as a whole answer has them, else
 * without, as a stream's end line); the error of a kernel that died under
 * the call. New references (api_code.c). */
json_t *api_code_event_json(const struct sbx_code_event *e, int with_type);
json_t *api_code_execution(struct sop *op, int with_results);
json_t *api_code_died_error(const struct sbx_code_info *ci);

/* Answers an operation that ended in P_ERROR with the matching status. */
int api_agent_error(struct req *r, const struct sop_state *st);
/* "NAME=value" for every pair of a JSON object text (NULL: none), for a
 * request's env: 0 with *out (api_env_free it) and *n, or -ENOMEM. */
int api_env(const char *json, char ***out, size_t *n);
void api_env_free(char **v, size_t n);
/* A file, process or code context as the API shows it (docs/api.md); the
 * items op gathered as an array of those. New references. */
json_t *api_item_json(const struct sbx_item *it);
json_t *api_items_json(struct sop *op);
/* Kept output as a JSON string: UTF-8, invalid bytes as U+FFFD, not
 * starting inside a character when cut (its front was dropped). */
json_t *api_text(const struct pbuf *b, int cut);

int api_sbx_create(struct req *r);
int api_sbx_list(struct req *r);
int api_sbx_get(struct req *r);
int api_sbx_kill(struct req *r);
int api_sbx_timeout(struct req *r);
int api_sbx_pause(struct req *r);
int api_sbx_resume(struct req *r);
int api_sbx_fork(struct req *r);
int api_net_get(struct req *r);
int api_net_put(struct req *r);
int api_rules_get(struct req *r);
int api_rules_put(struct req *r);
int api_rules_post(struct req *r);
int api_ckpt_create(struct req *r);
int api_ckpt_list(struct req *r);
int api_ckpt_get(struct req *r);
int api_ckpt_delete(struct req *r);
/* Egress secrets (api_secret.c). */
int api_secret_list(struct req *r);
int api_secret_get(struct req *r);
int api_secret_put(struct req *r);
int api_secret_delete(struct req *r);
/* Usage and metering (api_usage.c). */
int api_usage(struct req *r);
int api_mcp(struct req *r);
int api_metrics(struct req *r);
int api_sbx_metrics(struct req *r);
int api_sbx_logs(struct req *r);
int api_events(struct req *r);
int api_webhook_create(struct req *r);
int api_webhook_list(struct req *r);
int api_webhook_delete(struct req *r);
int api_webhook_deliveries(struct req *r);
int api_sbxs_metrics(struct req *r);
int api_templates(struct req *r);
int api_tpl_get(struct req *r);
int api_tpl_delete(struct req *r);
int api_tpl_create(struct req *r, enum up_phase phase, const char *data, size_t n);
/* api_build.c: Dockerfile builds the node runs */
int api_build_create(struct req *r, enum up_phase phase, const char *data, size_t n);
int api_build_get(struct req *r);
int api_build_logs(struct req *r);
int api_build_cancel(struct req *r);
int api_health(struct req *r);
int api_openapi(struct req *r);
int api_keys_create(struct req *r);
int api_keys_list(struct req *r);
/* api_node.c: the nodes sharing the database (administrator only). */
int api_nodes_list(struct req *r);
int api_node_drain(struct req *r);
int api_node_undrain(struct req *r);
/* The cluster's own calls (ROUTE_INTERNAL): this node's sandboxes moved to
 * the others; a sandbox let go of by another node taken here. */
int api_node_move(struct req *r);
int api_sbx_take(struct req *r);
int api_keys_delete(struct req *r);

int api_exec(struct req *r);
int api_procs(struct req *r);
int api_proc_get(struct req *r);
int api_proc_stream(struct req *r);
int api_proc_stdin(struct req *r, enum up_phase phase, const char *data, size_t n);
int api_proc_signal(struct req *r);
int api_proc_resize(struct req *r);
int api_proc_ws(struct req *r);
int api_proc_wait(struct req *r);
int api_proc_kill(struct req *r);

/* Code (api_code.c). */
int api_code_run(struct req *r);
int api_code_ctx_create(struct req *r);
int api_code_ctx_list(struct req *r);
int api_code_ctx_restart(struct req *r);
int api_code_ctx_delete(struct req *r);

int api_file_put(struct req *r, enum up_phase phase, const char *data, size_t n);
int api_file_get(struct req *r);
int api_file_stat(struct req *r);
int api_file_archive_get(struct req *r);
int api_file_archive_put(struct req *r, enum up_phase phase, const char *data, size_t n);
int api_file_watch(struct req *r);
int api_file_list(struct req *r);
int api_file_mkdir(struct req *r);
int api_file_rename(struct req *r);
int api_file_delete(struct req *r);

/* The OpenAPI document, compiled in from docs/openapi.json. */
extern const char api_openapi_json[];

#endif
