/*
 * fuzz_ramdiff: libFuzzer target for what a resume reads of a pause's
 * written pages (runner/ramdiff.h), as hostile as anything in a run
 * directory: the bytes after the first are the file's head, followed by
 * as many 4 KiB pages of data as the first byte says (0-7), so a whole
 * file fits in the fuzzer's 4 KiB inputs; it is loaded into a "VM" of two
 * blocks ("mem", 16 pages, and "pc.bios", 2) that lie in a memory file
 * standing for QEMU's memory. All the bytes, NUL-terminated, are also
 * `info ramblock` text. A load that is refused must not have written a
 * byte.
 */
#include "runner/ramdiff.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PG 4096
#define VM_PAGES (16 + 2)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int vm = -1, in = -1;
	static uint8_t page[PG];
	if (vm < 0) {
		vm = memfd_create("fuzz-vm", MFD_CLOEXEC);
		in = memfd_create("fuzz-pages", MFD_CLOEXEC);
		if (vm < 0 || in < 0 || ftruncate(vm, VM_PAGES * PG) < 0)
			abort();
		memset(page, 0xee, sizeof(page));
	}
	for (int i = 0; i < VM_PAGES; i++)
		if (pwrite(vm, page, PG, (off_t)i * PG) != PG)
			abort();
	size_t head = size ? size - 1 : 0, appended = size ? data[0] % 8u : 0;
	uint8_t filler[PG];
	memset(filler, 0xab, sizeof(filler));
	if (ftruncate(in, 0) < 0 || (head && pwrite(in, data + 1, head, 0) != (ssize_t)head))
		abort();
	for (size_t i = 0; i < appended; i++)
		if (pwrite(in, filler, PG, (off_t)(head + i * PG)) != PG)
			abort();
	if (lseek(in, 0, SEEK_SET) != 0)
		abort();
	const struct ramdiff_block b[2] = { { "mem", 0, 16 * PG }, { "pc.bios", 16 * PG, 2 * PG } };
	char err[256];
	uint64_t pages = 0;
	if (ramdiff_load(vm, b, 2, in, &pages, err, sizeof(err)) < 0) {
		uint8_t got[PG];
		for (int i = 0; i < VM_PAGES; i++)
			if (pread(vm, got, PG, (off_t)i * PG) != PG || memcmp(got, page, PG))
				abort(); /* refused, yet written */
	} else if (pages > VM_PAGES) {
		abort();
	}
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct ramdiff_block blocks[RAMDIFF_MAX_BLOCKS];
	int n = 0;
	if (ramdiff_parse_blocks(text, blocks, &n, 1u << 30) == 0 &&
	    (n < 1 || n > RAMDIFF_MAX_BLOCKS))
		abort();
	free(text);
	return 0;
}
