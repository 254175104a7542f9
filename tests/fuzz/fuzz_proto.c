/*
 * fuzz_proto: libFuzzer target for the agent protocol codec: every byte
 * string goes through frame parsing and every attribute getter, as the
 * agent and the host do with what the other side sends. Built with clang
 * -fsanitize=fuzzer by `make fuzz`; replay.c runs the committed corpus
 * under `make test` without clang.
 */
#include "common/proto.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_frame f;
	ssize_t n;
	while (size && (n = proto_parse(data, size, &f)) > 0) {
		if (proto_check_attrs(&f) == 0) {
			char s[256];
			uint32_t v;
			uint64_t w;
			size_t off = 0;
			struct proto_attr a;
			while (proto_next(&f, &off, &a) == 1)
				proto_check_str(&a);
			proto_get_str(&f, A_PATH, s, sizeof(s));
			proto_get_u32(&f, A_MODE, &v);
			proto_get_u64(&f, A_SIZE, &w);
		}
		proto_type_name(f.type);
		data += n;
		size -= (size_t)n;
	}
	return 0;
}
