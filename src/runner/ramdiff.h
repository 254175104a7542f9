/*
 * ramdiff: a stopped VM's RAM as the pages it changed over the snapshot
 * file it maps copy-on-write (docs/diff-pauses.md). QEMU names its RAM
 * blocks and where each lies in its address space (HMP `info ramblock`);
 * for the block that maps the file, /proc/PID/pagemap tells a page the VM
 * wrote (anonymous: present or swapped, not a file page) from one still
 * the file's, and only those are kept; the other blocks (firmware, ROMs)
 * are a few hundred KB and kept whole. They are read and written through
 * /proc/PID/mem, whose descriptor and pagemap's the caller opens (the
 * launch ops: a jailed QEMU runs as another uid).
 *
 * The file, native byte order (it is read back on the same architecture):
 *   "CPUOSRD1", u32 blocks, u32 page size (4096)
 *   per block: name[64] (NUL-padded), u64 length, u64 runs,
 *              then runs x { u64 first page, u64 pages }
 *   then every run's pages, block after block, run after run.
 * A restore writes the pages into a QEMU waiting for its device state
 * (`-incoming defer`), whose blocks must have the same names and lengths.
 * The file is as hostile as anything in a run directory: every length,
 * run and count is checked against the blocks and the file's size.
 */
#ifndef CPUOS_RAMDIFF_H
#define CPUOS_RAMDIFF_H

#include <stddef.h>
#include <stdint.h>

struct qmp;

#define RAMDIFF_MAX_BLOCKS 16
#define RAMDIFF_NAME 64

struct ramdiff_block {
	char name[RAMDIFF_NAME];
	uint64_t hva;    /* where QEMU maps it */
	uint64_t length; /* bytes in use, a multiple of the page */
};

/* The blocks of the QEMU behind q: 0 with *n set, or -errno with a reason.
 * Their lengths together are at most max_bytes (QEMU is not believed). */
int ramdiff_blocks(struct qmp *q, struct ramdiff_block *b, int *n, uint64_t max_bytes, char *err,
		   size_t errlen);

/* The same from the text of `info ramblock`: 0, or -EPROTO for text that
 * is not a list of at most RAMDIFF_MAX_BLOCKS distinct page-aligned
 * blocks of 4 KiB pages within max_bytes. */
int ramdiff_parse_blocks(const char *text, struct ramdiff_block *b, int *n, uint64_t max_bytes);

/* Writes the diff of the stopped VM to out (a new file, written from its
 * start): the pages of block `diffed` that pagemap shows written, every
 * page of the others. *pages gets how many went in. 0 or -errno. */
int ramdiff_save(int pagemap_fd, int mem_fd, const struct ramdiff_block *b, int n,
		 const char *diffed, int out, uint64_t *pages, char *err, size_t errlen);

/* Writes the pages of the diff in `in` into the QEMU whose blocks are b
 * (through mem_fd). 0, or -EBADMSG (a file that does not fit those blocks)
 * or -errno, with a reason. */
int ramdiff_load(int mem_fd, const struct ramdiff_block *b, int n, int in, uint64_t *pages,
		 char *err, size_t errlen);

#endif
