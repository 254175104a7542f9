/*
 * ramdiff against this process's own memory as a VM's: a private mapping
 * of a file stands for the RAM over a snapshot's file, an anonymous one
 * for a firmware block, /proc/self/pagemap and /proc/self/mem for what
 * the helper opens of a QEMU. A diff saved of one mapping and loaded into
 * a fresh mapping of the same file gives back the same bytes; files that
 * lie are refused before a byte is written.
 */
#include "runner/ramdiff.h"

#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PG 4096
#define RAM_PAGES 64
#define BIOS_PAGES 4

static char base_path[] = "/tmp/cpuos-ramdiff-base-XXXXXX";
static char diff_path[] = "/tmp/cpuos-ramdiff-diff-XXXXXX";

/* A "VM": the file mapped private (RAM) and an anonymous block (BIOS). */
struct fake {
	uint8_t *ram, *bios;
	struct ramdiff_block b[2];
};

static int fake_map(struct fake *f)
{
	int fd = open(base_path, O_RDONLY);
	if (fd < 0)
		return -1;
	f->ram = mmap(NULL, RAM_PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	close(fd);
	f->bios = mmap(NULL, BIOS_PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (f->ram == MAP_FAILED || f->bios == MAP_FAILED)
		return -1;
	f->b[0] = (struct ramdiff_block){ "mem", (uintptr_t)f->ram, RAM_PAGES * PG };
	f->b[1] = (struct ramdiff_block){ "pc.bios", (uintptr_t)f->bios, BIOS_PAGES * PG };
	return 0;
}

static void fake_unmap(struct fake *f)
{
	munmap(f->ram, RAM_PAGES * PG);
	munmap(f->bios, BIOS_PAGES * PG);
}

static int setup(void)
{
	int fd = mkstemp(base_path);
	if (fd < 0)
		return -1;
	uint8_t page[PG];
	for (int i = 0; i < RAM_PAGES; i++) {
		memset(page, 'a' + i % 26, sizeof(page));
		if (write(fd, page, sizeof(page)) != PG)
			return -1;
	}
	close(fd);
	fd = mkstemp(diff_path);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static void teardown(void)
{
	unlink(base_path);
	unlink(diff_path);
}

/* Saves f's diff into diff_path: 0 with *pages. */
static int save(struct fake *f, uint64_t *pages)
{
	char err[256];
	int pm = open("/proc/self/pagemap", O_RDONLY), mem = open("/proc/self/mem", O_RDONLY);
	int out = open(diff_path, O_WRONLY | O_TRUNC);
	int r = pm < 0 || mem < 0 || out < 0 ? -EIO
		: ramdiff_save(pm, mem, f->b, 2, "mem", out, pages, err, sizeof(err));
	if (r < 0)
		t_note("save: %s", err);
	close(pm);
	close(mem);
	close(out);
	return r;
}

static int load(struct fake *f, uint64_t *pages, char *err, size_t errlen)
{
	int mem = open("/proc/self/mem", O_RDWR), in = open(diff_path, O_RDONLY);
	int r = mem < 0 || in < 0 ? -EIO : ramdiff_load(mem, f->b, 2, in, pages, err, errlen);
	close(mem);
	close(in);
	return r;
}

static void test_round_trip(void)
{
	struct fake a, b;
	CHECK(fake_map(&a) == 0);
	volatile uint8_t sink = 0;
	for (int i = 0; i < RAM_PAGES; i += 2) /* read: still the file's */
		sink ^= a.ram[i * PG];
	(void)sink;
	memset(a.ram + 3 * PG, 'X', PG);    /* written: a run of one */
	memset(a.ram + 10 * PG, 'Y', 3 * PG); /* and one of three */
	a.ram[63 * PG + 100] = 'Z';         /* the last page */
	memset(a.bios, 'B', PG);
	uint64_t pages = 0, back = 0;
	CHECK(save(&a, &pages) == 0);
	CHECK(pages == 5 + BIOS_PAGES); /* the written pages, the BIOS whole */
	struct stat st;
	CHECK(stat(diff_path, &st) == 0 && st.st_size < (off_t)(pages + 1) * PG);

	CHECK(fake_map(&b) == 0);
	char err[256];
	CHECK(load(&b, &back, err, sizeof(err)) == 0 && back == pages);
	CHECK(memcmp(a.ram, b.ram, RAM_PAGES * PG) == 0);
	CHECK(memcmp(a.bios, b.bios, BIOS_PAGES * PG) == 0);
	/* what b did not get written is still the file's pages */
	uint64_t e;
	int pm = open("/proc/self/pagemap", O_RDONLY);
	CHECK(pread(pm, &e, 8, (off_t)((uintptr_t)b.ram / PG + 20) * 8) == 8);
	CHECK(!(e & (1ull << 63)) || (e & (1ull << 61)));
	close(pm);
	fake_unmap(&a);
	fake_unmap(&b);
}

/* Rewrites the diff file's bytes [off, off+n) with p, or its size. */
static void poke(off_t off, const void *p, size_t n)
{
	int fd = open(diff_path, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, p, n, off) == (ssize_t)n);
	close(fd);
}

static void test_lies_are_refused(void)
{
	struct fake a, b;
	CHECK(fake_map(&a) == 0 && fake_map(&b) == 0);
	memset(a.ram + 5 * PG, 'X', 2 * PG);
	uint64_t pages;
	char err[256];
	const off_t head = 16, bh = 64 + 16, run0 = head + bh; /* first block's first run */
	struct { const char *what; off_t off; uint64_t v; } lies[] = {
		{ "a run past its block", run0, RAM_PAGES },
		{ "a run of no pages", run0 + 8, 0 },
		{ "more runs than pages", head + 64 + 8, RAM_PAGES + 1 },
		{ "another length", head + 64, (RAM_PAGES + 1) * PG },
	};
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		CHECK(save(&a, &pages) == 0);
		poke(lies[i].off, &lies[i].v, 8);
		memset(b.ram + 5 * PG, 'b', 1); /* what a refused load must leave */
		int r = load(&b, &pages, err, sizeof(err));
		if (!CHECK(r == -EBADMSG))
			t_note("%s: %d %s", lies[i].what, r, err);
		CHECK(b.ram[5 * PG] == 'b');
	}
	CHECK(save(&a, &pages) == 0);
	poke(head, "bogus", 6); /* a block this VM lacks */
	CHECK(load(&b, &pages, err, sizeof(err)) == -EBADMSG && strstr(err, "block"));
	CHECK(save(&a, &pages) == 0);
	poke(0, "CPUOSRD9", 8);
	CHECK(load(&b, &pages, err, sizeof(err)) == -EBADMSG);
	CHECK(save(&a, &pages) == 0);
	CHECK(truncate(diff_path, 208 + PG) == 0); /* cut short */
	CHECK(load(&b, &pages, err, sizeof(err)) == -EBADMSG && strstr(err, "size"));
	CHECK(b.ram[5 * PG] == 'b');
	fake_unmap(&a);
	fake_unmap(&b);
}

static void test_parse_blocks(void)
{
	const char *ok = "              Block Name    PSize              Offset               Used"
			 "              Total                HVA  RO\r\n"
			 "                     mem    4 KiB  0x0000000000000000 0x0000000020000000 "
			 "0x0000000020000000 0x00007face3fff000  rw\r\n"
			 "                 pc.bios    4 KiB  0x0000000020000000 0x0000000000020000 "
			 "0x0000000000020000 0x00007fad49c00000  rw\r\n";
	struct ramdiff_block b[RAMDIFF_MAX_BLOCKS];
	int n = 0;
	CHECK(ramdiff_parse_blocks(ok, b, &n, 600u << 20) == 0 && n == 2);
	CHECK(!strcmp(b[0].name, "mem") && b[0].length == 512u << 20 && b[0].hva == 0x7face3fff000);
	CHECK(!strcmp(b[1].name, "pc.bios") && b[1].length == 128u << 10);
	CHECK(ramdiff_parse_blocks(ok, b, &n, 256u << 20) == -EPROTO); /* more than the VM's */
	const char *twice = "mem 4 KiB 0x0 0x1000 0x1000 0x7f0000000000 rw\n"
			    "mem 4 KiB 0x0 0x1000 0x1000 0x7f0000010000 rw\n";
	CHECK(ramdiff_parse_blocks(twice, b, &n, 1u << 20) == -EPROTO);
	const char *huge = "mem 2048 KiB 0x0 0x200000 0x200000 0x7f0000000000 rw\n";
	CHECK(ramdiff_parse_blocks(huge, b, &n, 8u << 20) == -EPROTO);
	const char *odd = "mem 4 KiB 0x0 0x1001 0x2000 0x7f0000000000 rw\n";
	CHECK(ramdiff_parse_blocks(odd, b, &n, 8u << 20) == -EPROTO);
	CHECK(ramdiff_parse_blocks("", b, &n, 8u << 20) == -EPROTO);
	/* a line that is no block, a name too long to take: not left out */
	char lng[300];
	snprintf(lng, sizeof(lng), "mem 4 KiB 0x0 0x1000 0x1000 0x7f0000000000 rw\n"
				   "%080d 4 KiB 0x0 0x1000 0x1000 0x7f0000010000 rw\n", 7);
	CHECK(ramdiff_parse_blocks(lng, b, &n, 8u << 20) == -EPROTO);
	CHECK(ramdiff_parse_blocks("mem 4 KiB 0x0 0x1000\n", b, &n, 8u << 20) == -EPROTO);
	CHECK(ramdiff_parse_blocks("mem 4 KiB 0x0 0x1000 0x1000 0x7f0000000000 rw extra\n", b, &n,
				   8u << 20) == -EPROTO);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "ramdiff_round_trip", test_round_trip },
		{ "ramdiff_lies_are_refused", test_lies_are_refused },
		{ "ramdiff_parse_blocks", test_parse_blocks },
		{ 0, 0 },
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
