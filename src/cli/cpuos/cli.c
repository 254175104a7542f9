/*
 * cli: connection selection and the small parsers every cpuos command uses.
 * Messages follow git's form: lowercase, subject in quotes, no full stop.
 */
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_socket_path(void)
{
	const char *s = getenv("CPUOS_SOCKET");
	return s && *s ? s : CLI_DEFAULT_SOCKET;
}

struct api *cli_api(struct cli *c)
{
	if (c->api)
		return c->api;
	const char *url = c->url ? c->url : getenv("CPUOS_API_URL");
	const char *key = c->key ? c->key : getenv("CPUOS_API_KEY");
	char sock_url[PATH_MAX + 8];
	struct stat st;
	if (key && !*key)
		key = NULL;
	if (!url || !*url) {
		/* Whoever can open the socket is the administrator and needs no
		 * key; a key says the caller means to act as its account. */
		const char *sock = cli_socket_path();
		if (!key && stat(sock, &st) == 0 && S_ISSOCK(st.st_mode)) {
			snprintf(sock_url, sizeof(sock_url), "unix://%s", sock);
			url = sock_url;
		} else {
			url = CLI_DEFAULT_URL;
		}
	}
	int r = api_new(url, key, &c->api);
	if (r == -EINVAL)
		cli_err("invalid url '%s' (http://HOST:PORT or unix:///PATH)", url);
	else if (r < 0)
		cli_err("cannot set up libcurl: %s", strerror(-r));
	return r < 0 ? NULL : c->api;
}

void cli_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cpuos: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int cli_api_fail(struct api *a)
{
	cli_err("%s", api_error(a));
	return EXIT_API;
}

int cli_usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cpuos: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see cpuos %s%s--help)\n", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

int cli_kv(json_t *obj, const char *arg, const char *opt)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg) {
		cli_err("invalid %s '%s' (KEY=VALUE)", opt, arg);
		return -EINVAL;
	}
	char *k = strndup(arg, (size_t)(eq - arg));
	if (!k || json_object_set_new(obj, k, json_string(eq + 1)) < 0) {
		free(k);
		cli_err("invalid %s '%s' (not UTF-8?)", opt, arg);
		return -EINVAL;
	}
	free(k);
	return 0;
}

int cli_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

json_t *cli_duration(const char *s)
{
	unsigned long v;
	if (!*s)
		return NULL;
	/* The API takes a bare number only as a JSON number, not as "90". */
	if (cli_uint(s, 1ul << 40, &v) == 0)
		return json_integer((json_int_t)v);
	return json_string(s);
}

int cli_remote(const char *arg, char *id, size_t idlen, const char **path)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg || memchr(arg, '/', (size_t)(colon - arg)))
		return 0;
	snprintf(id, idlen, "%.*s", (int)(colon - arg), arg);
	*path = colon + 1;
	return 1;
}

void cli_print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
}

void cli_human_size(double bytes, char *out, size_t n)
{
	static const char *units[] = {"B", "kB", "MB", "GB", "TB"};
	int u = 0;
	while (bytes >= 1000 && u < 4) {
		bytes /= 1000;
		u++;
	}
	if (u == 0 || bytes >= 10)
		snprintf(out, n, "%.0f %s", bytes, units[u]);
	else
		snprintf(out, n, "%.1f %s", bytes, units[u]);
}

static void print_cell(const char *v, int width, int last)
{
	if (last)
		printf("%s\n", v ? v : "");
	else
		printf("%-*s  ", width, v ? v : "");
}

void cli_table(const char *const *hdr, size_t ncol, const json_t *rows)
{
	size_t w[16] = {0}, i, c;
	json_t *row;
	if (ncol > 16)
		ncol = 16;
	for (c = 0; c < ncol; c++)
		w[c] = strlen(hdr[c]);
	json_array_foreach(rows, i,
			   row) for (c = 0; c < ncol;
				     c++) if (json_string_length(json_array_get(row, c)) > w[c])
	    w[c] = json_string_length(json_array_get(row, c));
	for (c = 0; c < ncol; c++)
		print_cell(hdr[c], (int)w[c], c + 1 == ncol);
	json_array_foreach(rows, i, row) for (c = 0; c < ncol; c++)
	    print_cell(json_string_value(json_array_get(row, c)), (int)w[c], c + 1 == ncol);
}

const char *cli_str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

int cli_bindir(char *out, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0)
		return -errno;
	exe[len] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if ((size_t)snprintf(out, n, "%s", exe) >= n)
		return -ENAMETOOLONG;
	return 0;
}
