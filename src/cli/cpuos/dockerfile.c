/*
 * dockerfile: the Dockerfile's text for cpuos templates build (build.c):
 * its instructions, the expansion of variables in them, and the forms
 * their arguments take.
 */
#include "cli/cpuos/dockerfile.h"
#include "cli/cpuos/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lines joined at a trailing backslash, comments and blank lines dropped,
 * each instruction's keyword upper-cased. */
int df_parse(char *text, struct df_instr *steps, int max, int *nsteps)
{
	int line = 0;
	char *p = text;
	while (*p) {
		char *end = strchr(p, '\n');
		line++;
		if (end)
			*end = '\0';
		char *s = p;
		p = end ? end + 1 : p + strlen(p);
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || *s == '#' || *s == '\r')
			continue;
		int at = line;
		/* continuation: the rest of the instruction on the lines after
		 * (a comment line among them is skipped, as docker does) */
		char *joined = strdup(s);
		size_t len = joined ? strlen(joined) : 0;
		if (len && joined[len - 1] == '\r')
			joined[--len] = '\0';
		while (joined && len && joined[len - 1] == '\\' && *p) {
			char *e2 = strchr(p, '\n');
			line++;
			if (e2)
				*e2 = '\0';
			char *t = p;
			p = e2 ? e2 + 1 : p + strlen(p);
			while (*t == ' ' || *t == '\t')
				t++;
			size_t tl = strlen(t);
			if (tl && t[tl - 1] == '\r')
				t[--tl] = '\0';
			if (*t == '#')
				continue;
			joined[--len] = '\0'; /* the backslash */
			char *nj = realloc(joined, len + tl + 2);
			if (!nj) {
				free(joined);
				joined = NULL;
				break;
			}
			joined = nj;
			joined[len++] = ' ';
			memcpy(joined + len, t, tl + 1);
			len += tl;
		}
		if (joined && len && joined[len - 1] == '\\')
			joined[--len] = '\0'; /* a continuation at the file's end */
		if (!joined)
			return cli_err("out of memory"), -1;
		if (*nsteps == max) {
			free(joined);
			cli_err("the Dockerfile has more than %d instructions", max);
			return -1;
		}
		struct df_instr *in = &steps[*nsteps];
		size_t k = strcspn(joined, " \t");
		if (k >= sizeof(in->kw)) {
			cli_err("Dockerfile line %d: unknown instruction '%.20s'", at, joined);
			free(joined);
			return -1;
		}
		for (size_t i = 0; i < k; i++)
			in->kw[i] = (char)(joined[i] >= 'a' && joined[i] <= 'z' ? joined[i] - 32 : joined[i]);
		in->kw[k] = '\0';
		char *args = joined + k;
		while (*args == ' ' || *args == '\t')
			args++;
		size_t al = strlen(args);
		while (al && (args[al - 1] == ' ' || args[al - 1] == '\t' || args[al - 1] == '\r'))
			args[--al] = '\0';
		memmove(joined, args, al + 1);
		in->args = joined;
		in->line = at;
		(*nsteps)++;
	}
	return 0;
}

/* $NAME, ${NAME} and ${NAME:-default} from ENV, then ARG; "\$" is a '$'. */
int df_expand(const json_t *env, const json_t *args, const char *in, char *out, size_t n)
{
	size_t o = 0;
	for (const char *p = in; *p;) {
		if (p[0] == '\\' && p[1] == '$') {
			if (o + 1 >= n)
				return -1;
			out[o++] = '$';
			p += 2;
			continue;
		}
		if (*p != '$' || !(p[1] == '{' || p[1] == '_' || (p[1] >= 'A' && p[1] <= 'Z') ||
				   (p[1] >= 'a' && p[1] <= 'z'))) {
			if (o + 1 >= n)
				return -1;
			out[o++] = *p++;
			continue;
		}
		char name[256], def[1024] = "";
		int has_def = 0;
		if (p[1] == '{') {
			const char *close = strchr(p, '}');
			if (!close || close - p - 2 >= (long)sizeof(name))
				return -1;
			snprintf(name, sizeof(name), "%.*s", (int)(close - p - 2), p + 2);
			char *d = strstr(name, ":-");
			if (d) {
				snprintf(def, sizeof(def), "%s", d + 2);
				*d = '\0';
				has_def = 1;
			}
			p = close + 1;
		} else {
			size_t k = 1;
			while (p[k] == '_' || (p[k] >= 'A' && p[k] <= 'Z') || (p[k] >= 'a' && p[k] <= 'z') ||
			       (p[k] >= '0' && p[k] <= '9'))
				k++;
			if (k - 1 >= sizeof(name))
				return -1;
			snprintf(name, sizeof(name), "%.*s", (int)(k - 1), p + 1);
			p += k;
		}
		const char *v = json_string_value(json_object_get(env, name));
		if (!v)
			v = json_string_value(json_object_get(args, name));
		if ((!v || !*v) && has_def)
			v = def;
		size_t vl = v ? strlen(v) : 0;
		if (o + vl >= n)
			return -1;
		memcpy(out + o, v ? v : "", vl);
		o += vl;
	}
	out[o] = '\0';
	return 0;
}

/* The exec form (a JSON array of strings), or the shell form as /bin/sh -c. */
json_t *df_argv(const char *args)
{
	if (args[0] == '[') {
		json_t *a = json_loads(args, 0, NULL);
		size_t i;
		json_t *v;
		int ok = json_is_array(a) && json_array_size(a);
		json_array_foreach(a, i, v) ok = ok && json_is_string(v);
		if (ok)
			return a;
		json_decref(a);
	}
	return json_pack("[sss]", "/bin/sh", "-c", args);
}

/* "K=V K2=V2" or "K V" into obj, values unquoted. */
int df_pairs(const char *s, json_t *obj)
{
	const char *sp = s + strcspn(s, " \t="), *p = s;
	if (*sp != '=') { /* the old form: ENV K the rest */
		if (!*sp || sp == s)
			return -1;
		char k[256];
		snprintf(k, sizeof(k), "%.*s", (int)(sp - s), s);
		while (*sp == ' ' || *sp == '\t')
			sp++;
		json_object_set_new(obj, k, json_string(sp));
		return 0;
	}
	while (*p) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		const char *eq = strchr(p, '=');
		if (!eq || eq == p || eq - p > 255)
			return -1;
		char k[256], v[8192];
		size_t o = 0;
		snprintf(k, sizeof(k), "%.*s", (int)(eq - p), p);
		p = eq + 1;
		char q = (*p == '"' || *p == '\'') ? *p++ : 0;
		while (*p && (q ? *p != q : (*p != ' ' && *p != '\t')) && o + 1 < sizeof(v)) {
			if (*p == '\\' && p[1] && q != '\'')
				p++;
			v[o++] = *p++;
		}
		if (q && *p == q)
			p++;
		v[o] = '\0';
		json_object_set_new(obj, k, json_string(v));
	}
	return 0;
}
