/*
 * cpuos-e2b: E2B's wire protocol in front of cpuosd, so that E2B's own
 * SDKs (and whatever takes an "E2B-compatible server") drive cpuos
 * sandboxes. One listener serves E2B's control plane (api.<domain>) and
 * each sandbox's data plane: envd on port 49983 (its HTTP file routes and
 * Connect RPC with the JSON codec), the code interpreter on 49999. It is a
 * client of cpuosd's API, unprivileged; the E2B API key a client sends is
 * a cpuos API key, passed on as is.
 */
#ifndef CPUOS_E2B_H
#define CPUOS_E2B_H

#include "lib/httpd.h"
#include "lib/workers.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>

struct api;
struct httpd_req;

#define E2B_ENVD_PORT	 49983u
#define E2B_INTERP_PORT	 49999u
#define E2B_ID_LEN	 16    /* an E2B sandbox id: the 16 hex of cpuos's "sbx_" id */
#define E2B_KEY_MAX	 256   /* a cpuos API key's bytes, NUL included, with room */
#define E2B_USER_MAX	 33
/* The envd version cpuos-e2b speaks as: the SDKs gate features on it
 * (0.3.0 stdin, 0.4.0 default user, 0.5.7 octet-stream uploads, 0.6.x
 * file metadata and event entries). */
#define E2B_ENVD_VERSION "0.6.4"

struct e2b_config {
	char listen[256];
	char cpuos_url[1024];
	char domain[256];      /* "<port>-<id>.<domain>" names its data plane */
	char state_dir[1024];  /* its secret, which seals access tokens */
	char template_[128];   /* an E2B create without templateID gets it */
	char interp_template[128]; /* "code-interpreter-v1" maps to it */
	char port_urls[512];   /* cpuosd's port URL of {id} and {port}, for the other ports */
	char log_level[16];
	long long max_body_bytes, max_file_bytes;
	char **args;
	int nargs;
};

struct tokens;

/* Set once a stop began: streams and watchers end at their next tick. */
extern atomic_int e2b_stopping;

struct e2b {
	const struct e2b_config *cfg;
	unsigned char secret[32];
	struct tokens *tokens;  /* sandbox -> its envd access token, for signed URLs */
	struct workers pumps;   /* threads that relay cpuosd's streams */
};

/* Which plane a request is for. */
enum e2b_plane { E2B_CONTROL, E2B_ENVD, E2B_INTERP, E2B_PORT };

/* A request's state (httpd's r->app). */
struct e2b_req {
	enum e2b_plane plane;
	unsigned port;
	char id[E2B_ID_LEN + 1];      /* the data plane's sandbox */
	char key[E2B_KEY_MAX];        /* the cpuos key it acts with */
	/* envd: the guest user: "Authorization: Basic base64(user:)", else
	 * ?username=, else "user"; on a signed URL, the signed username only */
	char user[E2B_USER_MAX];
	int signed_url;               /* authorised by a signed URL: its path alone */
	void *up;                     /* an upload's state */
};

/* cpuosd's sandbox id of an E2B id into out[24]: "sbx_" + id. -EINVAL
 * unless id is 16 lowercase hex digits. */
int e2b_cpuos_id(const char *id, char out[24]);

/* A client of cpuosd with r's key: 0 or -errno; api_free it. */
int e2b_api(struct httpd_req *r, struct api **out);

/* Answers an error in E2B's control-plane and envd HTTP shape:
 * {"code": status, "message": "..."}. */
int e2b_reply_error(struct httpd_req *r, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Answers cpuosd's failure of a request made through a: its status and
 * message passed on (a cpuosd that cannot be reached is 502). */
int e2b_reply_api_error(struct httpd_req *r, struct api *a);
/* A JSON answer; steals body. */
int e2b_reply_json(struct httpd_req *r, unsigned status, json_t *body);

/* Every route is HTTPD_OPEN to lib/httpd: cpuos-e2b checks its own
 * credentials. A route's data says which: NULL a key (or an access
 * token), e2b_auth_none nothing, e2b_auth_signed a token or a signed URL. */
extern const char e2b_auth_none[], e2b_auth_signed[];

/* Route tables (control.c, envd.c, interp.c). */
extern const struct httpd_route e2b_control_routes[];
extern const struct httpd_route e2b_envd_routes[];
extern const struct httpd_route e2b_interp_routes[];

#endif
