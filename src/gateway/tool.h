/*
 * tool: the code-interpreter tool the gateway offers the model (seed 003's
 * run_python, run by cpuosd's stateful interpreter): its definition, which
 * tool calls are its, their code, and what the model is told of a run.
 * Pure JSON work; what cpuosd and the model send is checked, never trusted.
 */
#ifndef CPUOS_GW_TOOL_H
#define CPUOS_GW_TOOL_H

#include <jansson.h>
#include <stddef.h>

/* What the model sees of a run, as seed 003 cuts it: the last characters
 * (code points, as Python's out[-4000:]) of each stream. */
#define TOOL_STDOUT_TAIL 4000
#define TOOL_STDERR_TAIL 2000
#define TOOL_TRACE_TAIL	 2000 /* of an error's traceback */
#define TOOL_RESULT_TAIL 1000 /* of a result's text */
#define TOOL_MAX_RESULTS 16   /* result lines; the rest are counted */
#define TOOL_MAX_TOOLS	 128  /* tools a request may bring */
/* What one answer carries of figures, as data URLs. */
#define TOOL_MAX_ARTIFACTS	 32
#define TOOL_MAX_ARTIFACT_BYTES (24u << 20)

/* The tools to send upstream: the caller's (NULL or an array of function
 * tools) and the code tool, named name, unless the caller defines a
 * function of that name (their definition is kept; the gateway still runs
 * its calls). A new array, or NULL with a reason in why (a bad tools). */
json_t *tool_list(json_t *callers, const char *name, char *why, size_t whylen);

/* 1 when call (an element of a message's tool_calls) calls the function
 * name, else 0. */
int tool_is_ours(json_t *call, const char *name);

/* The code of one of our calls: 0 with *code pointing into *args (a new
 * reference the caller frees), or -EINVAL with what is wrong in why (the
 * arguments are not a JSON object with a string "code"). */
int tool_code(json_t *call, json_t **args, const char **code, char *why, size_t whylen);

/* Figures collected over one answer: artifacts is an array the caller owns. */
struct tool_arts {
	json_t *list;  /* [{"name", "mime_type", "url", "tool_call_id"}] */
	size_t bytes;  /* the data URLs' bytes so far */
	int figures;   /* figures seen, kept or not: their numbers */
	int left_out;  /* figures past the caps */
};

/* The tool message content for an execution (cpuosd's POST .../code
 * answer): JSON text with exit_code (0, or 1 when the code raised or timed
 * out), the tails of stdout and stderr, the error (name, value, the tail
 * of its traceback) or null, and a line per result (text only: a figure is
 * its name and caption, its image goes to arts). malloc'd, NULL: no memory. */
char *tool_output(json_t *exec, const char *call_id, struct tool_arts *arts);

/* The same shape for a run that could not happen (bad arguments, code
 * refused): exit_code null, error {name, value}. */
char *tool_error_output(const char *name, const char *value);

/* Where the last chars code points of the UTF-8 text s[0..n) begin. */
size_t tool_tail(const char *s, size_t n, size_t chars);

#endif
