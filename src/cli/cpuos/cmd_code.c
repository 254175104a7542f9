/*
 * cmd_code: "cpuos code SANDBOX [CODE]": one call of a sandbox's stateful interpreter
 * (docs/api.md, "Code"). Its stdout and stderr go to ours, the value of its last line to
 * stdout, its error's traceback to stderr, and its figures into --save's directory.
 */
#include "cli/cpuos/cmd_code.h"

#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <errno.h>
#include <getopt.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CODE (128 << 10) /* the API's cap */

static const char code_usage[] =
    "usage: cpuos code SANDBOX [-c CONTEXT] [-l python|bash] [-t TIMEOUT] [--save DIR] [--json]\n"
    "                  [--] [CODE | -]\n"
    "Runs CODE (or stdin) in the sandbox's stateful interpreter: variables, imports and the\n"
    "working directory stay for the next call in the same context (default: python's\n"
    "\"default\", bash's \"bash\"). Prints stdout and stderr, then the value of the last line;\n"
    "an error's traceback goes to stderr. Exits 0, or 1 when the code raised (or bash's last\n"
    "command failed), as when cpuosd refused.\n"
    "  -c, --context ID    the context (made on first use)\n"
    "  -l, --language L    python or bash\n"
    "  -t, --timeout D     interrupt the call past D (\"2m\"; default 5m)\n"
    "      --save DIR      write each figure there as figure-N.png (N from 1)\n"
    "      --json          print the daemon's answer as it is\n";

/* The code from the argument, or from stdin for "-" or none: malloc'd, or NULL after
 * printing why. */
static char *read_code(const char *arg)
{
	if (arg && strcmp(arg, "-"))
		return strdup(arg);
	char *buf = malloc(MAX_CODE + 1);
	size_t n = 0;
	ssize_t k;
	while (buf && n <= MAX_CODE && (k = read(0, buf + n, MAX_CODE + 1 - n)) != 0) {
		if (k < 0) {
			cli_err("cannot read the code from stdin: %s", strerror(errno));
			free(buf);
			return NULL;
		}
		n += (size_t)k;
	}
	if (buf && n > MAX_CODE) {
		cli_err("the code is longer than %d bytes", MAX_CODE);
		free(buf);
		return NULL;
	}
	if (buf)
		buf[n] = '\0';
	return buf;
}

/* Writes a result's base64 PNG to dir/figure-N.png: 0 or -1 after printing why. */
static int save_png(const char *dir, int n, const char *b64)
{
	size_t len = strlen(b64);
	unsigned char *raw = malloc(len / 4 * 3 + 3);
	int k = raw ? EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)len) : -1;
	if (k < 0) {
		cli_err("figure %d is not base64", n);
		free(raw);
		return -1;
	}
	k -= (len > 0 && b64[len - 1] == '=') + (len > 1 && b64[len - 2] == '=');
	char path[4200];
	snprintf(path, sizeof(path), "%s/figure-%d.png", dir, n);
	FILE *f = fopen(path, "wb");
	int r = f && fwrite(raw, 1, (size_t)k, f) == (size_t)k ? 0 : -1;
	if (f && fclose(f) != 0)
		r = -1;
	if (r < 0)
		cli_err("cannot write '%s': %s", path, strerror(errno));
	else
		fprintf(stderr, "cpuos: figure saved: %s\n", path);
	free(raw);
	return r;
}

/* Prints an execution as the usage says: the exit status. */
static int show(const json_t *x, const char *save)
{
	fputs(cli_str(x, "stdout"), stdout);
	fputs(cli_str(x, "stderr"), stderr);
	json_t *res;
	size_t i;
	int figures = 0, ret = 0;
	json_array_foreach(json_object_get(x, "results"), i, res) {
		const char *png = json_string_value(json_object_get(res, "png"));
		if (png && save)
			ret |= save_png(save, ++figures, png) < 0;
		else if (png)
			fprintf(stderr, "cpuos: a figure (%zu bytes of PNG; --save DIR keeps it)\n",
				strlen(png) / 4 * 3);
		else if (json_is_true(json_object_get(res, "is_main_result")))
			printf("%s\n", cli_str(res, "text"));
	}
	json_t *err = json_object_get(x, "error");
	if (json_is_object(err)) {
		const char *tb = cli_str(err, "traceback");
		if (*tb)
			fputs(tb, stderr);
		else
			fprintf(stderr, "%s: %s\n", cli_str(err, "name"), cli_str(err, "value"));
		ret = 1;
	}
	if (json_is_true(json_object_get(x, "kernel_restarted")))
		fprintf(stderr, "cpuos: a new kernel: %s\n", cli_str(x, "restart_reason"));
	return ret;
}

int cmd_code(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"context", required_argument, NULL, 'c'}, {"language", required_argument, NULL, 'l'},
	    {"timeout", required_argument, NULL, 't'}, {"save", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, 'j'},	       {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	json_t *body = json_object(), *x = NULL;
	const char *save = NULL;
	int json = 0, o, ret = EXIT_USAGE;
	char *code = NULL;
	optind = 0; /* 0: GNU getopt starts afresh (main parsed with "+") */
	while ((o = getopt_long(argc, argv, "c:l:t:h", opts, NULL)) != -1) {
		if (o == 'c')
			json_object_set_new(body, "context", json_string(optarg));
		else if (o == 'l')
			json_object_set_new(body, "language", json_string(optarg));
		else if (o == 't')
			json_object_set_new(body, "timeout", cli_duration(optarg));
		else if (o == 's')
			save = optarg;
		else if (o == 'j')
			json = 1;
		else if (o == 'h') {
			fputs(code_usage, stdout);
			ret = 0;
			goto out;
		} else {
			fputs(code_usage, stderr);
			goto out;
		}
	}
	if (optind >= argc || argc - optind > 2) {
		ret = cli_usage_err("code", "give a sandbox and at most one CODE argument");
		goto out;
	}
	ret = EXIT_API;
	const char *id = argv[optind];
	if (!(code = read_code(optind + 1 < argc ? argv[optind + 1] : NULL)))
		goto out;
	json_object_set_new(body, "code", json_string(code));
	struct api *a = cli_api(c);
	if (!a)
		goto out;
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/code");
	if (!json_object_get(body, "code")) {
		cli_err("the code is not UTF-8");
	} else if (api_json(a, "POST", &p, body, &x) < 0) {
		cli_api_fail(a);
	} else if (json) {
		cli_print_json(x);
		ret = json_is_object(json_object_get(x, "error")) ? 1 : 0;
	} else {
		ret = show(x, save);
	}
out:
	free(code);
	json_decref(body);
	json_decref(x);
	return ret;
}
