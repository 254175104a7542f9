/*
 * fuzz_gateway: libFuzzer target for what cpuos-gateway reads from its
 * peers: the bytes after the first are read as the upstream's event stream
 * (fed in pieces of the first byte's size, 1..16, each event a chunk of a
 * turn whose tool calls are then parsed as the code tool's), as a whole
 * chat.completion, and as cpuosd's execution object made into the model's
 * tool message.
 */
#include "gateway/sse.h"
#include "gateway/tool.h"
#include "gateway/turn.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_event(void *arg, const char *data, size_t n)
{
	struct turn *t = arg;
	json_t *chunk = json_loadb(data, n, 0, NULL);
	const char *text;
	size_t len;
	char why[128];
	int r = chunk ? turn_add_chunk(t, chunk, &text, &len, why, sizeof(why)) : 0;
	json_decref(chunk);
	return r;
}

/* The code of each call, as the gateway takes it from a turn. */
static void calls(struct turn *t)
{
	size_t i;
	json_t *c;
	json_array_foreach(turn_tool_calls(t), i, c) {
		json_t *args;
		const char *code;
		char why[128];
		if (tool_is_ours(c, "run_python") && tool_code(c, &args, &code, why, sizeof(why)) == 0)
			json_decref(args);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = data[0] % 16 + 1;
	const char *p = (const char *)data + 1;
	size_t n = size - 1;

	struct sse s;
	struct turn t;
	sse_init(&s, 4096);
	turn_init(&t);
	int r = 0;
	for (size_t at = 0; at < n && r == 0; at += step)
		r = sse_feed(&s, p + at, at + step > n ? n - at : step, on_event, &t);
	sse_end(&s);
	sse_release(&s);
	if (r == 0 && turn_finish(&t) == 0)
		calls(&t);
	turn_release(&t);

	json_t *j = json_loadb(p, n, 0, NULL);
	char why[128];
	turn_init(&t);
	if (turn_from_completion(&t, j, why, sizeof(why)) == 0)
		calls(&t);
	turn_release(&t);
	struct tool_arts arts = { .list = json_array() };
	free(tool_output(j, "call_1", &arts));
	json_decref(arts.list);
	json_decref(j);
	return 0;
}
