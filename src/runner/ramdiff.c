/*
 * ramdiff: see ramdiff.h. Pagemap is read a chunk of entries at a time
 * (512 MiB of RAM is 1 MiB of it); pages go through a 1 MiB buffer.
 */
#include "runner/ramdiff.h"

#include "runner/qmp.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096u
#define MAGIC "CPUOSRD1"
#define BUF (1u << 20)
#define PM_CHUNK 8192 /* pagemap entries read at once */

/* Pagemap's bits (Documentation/admin-guide/mm/pagemap.rst). */
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE    (1ull << 61)

struct head {
	char magic[8];
	uint32_t blocks, page;
};

struct block_head {
	char name[RAMDIFF_NAME];
	uint64_t length, runs;
};

struct run {
	uint64_t first, pages;
};

int ramdiff_parse_blocks(const char *text, struct ramdiff_block *b, int *n, uint64_t max_bytes)
{
	uint64_t total = 0;
	*n = 0;
	/* "name  4 KiB  0xOFFSET 0xUSED 0xTOTAL 0xHVA  rw", after a header. */
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char l[512], name[RAMDIFF_NAME], unit[8];
		unsigned psize;
		uint64_t off, used, cap, hva;
		if (len >= sizeof(l))
			return -EPROTO;
		memcpy(l, line, len);
		l[len] = '\0';
		line = end ? end + 1 : NULL;
		const char *first = l + strspn(l, " \t\r");
		if (!*first || !strncmp(first, "Block Name ", 11))
			continue; /* an empty line, the header */
		char tail;
		if (strcspn(first, " \t") >= sizeof(name))
			return -EPROTO;
		if (sscanf(l, "%63s %u %7s %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %*s %c",
			   name, &psize, unit, &off, &used, &cap, &hva, &tail) != 7)
			return -EPROTO; /* a block left out would be a page lost */
		if (*n == RAMDIFF_MAX_BLOCKS || psize != 4 || strcmp(unit, "KiB") || used % PAGE ||
		    hva % PAGE || used > max_bytes || (total += used) > max_bytes ||
		    hva > UINT64_MAX / 2 - used)
			return -EPROTO;
		for (int i = 0; i < *n; i++)
			if (!strcmp(b[i].name, name))
				return -EPROTO;
		snprintf(b[*n].name, sizeof(b[*n].name), "%s", name);
		b[*n].hva = hva;
		b[*n].length = used;
		(*n)++;
	}
	return *n ? 0 : -EPROTO;
}

int ramdiff_blocks(struct qmp *q, struct ramdiff_block *b, int *n, uint64_t max_bytes, char *err,
		   size_t errlen)
{
	json_t *ret = NULL;
	int r = qmp_command(q, "human-monitor-command",
			    json_pack("{s:s}", "command-line", "info ramblock"), 5000, &ret, err,
			    errlen);
	if (r < 0)
		return r;
	const char *text = json_string_value(ret);
	r = text ? ramdiff_parse_blocks(text, b, n, max_bytes) : -EPROTO;
	json_decref(ret);
	if (r < 0)
		snprintf(err, errlen, "QEMU's RAM blocks are not what a VM of this size has");
	return r;
}

static int read_full(int fd, void *buf, size_t n, off_t at)
{
	for (size_t done = 0; done < n;) {
		ssize_t got = at >= 0 ? pread(fd, (char *)buf + done, n - done, at + (off_t)done)
				      : read(fd, (char *)buf + done, n - done);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		done += (size_t)got;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t n, off_t at)
{
	for (size_t done = 0; done < n;) {
		ssize_t w = at >= 0 ? pwrite(fd, (const char *)buf + done, n - done, at + (off_t)done)
				    : write(fd, (const char *)buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

/* The runs of written pages of block b, from pagemap; whole: one run. */
static int runs_of(int pagemap_fd, const struct ramdiff_block *b, int whole, struct run **out,
		   uint64_t *nruns)
{
	uint64_t pages = b->length / PAGE, cap = 64, n = 0;
	struct run *runs = malloc(cap * sizeof(*runs));
	uint64_t *pm = whole ? NULL : malloc(PM_CHUNK * sizeof(*pm));
	if (!runs || (!whole && !pm)) {
		free(runs);
		free(pm);
		return -ENOMEM;
	}
	if (whole && pages) {
		runs[n++] = (struct run){ 0, pages };
		pages = 0;
	}
	int r = 0;
	for (uint64_t at = 0; r == 0 && at < pages; at += PM_CHUNK) {
		uint64_t k = pages - at < PM_CHUNK ? pages - at : PM_CHUNK;
		r = read_full(pagemap_fd, pm, k * sizeof(*pm),
			      (off_t)((b->hva / PAGE + at) * sizeof(*pm)));
		for (uint64_t i = 0; r == 0 && i < k; i++) {
			if (!(pm[i] & (PM_PRESENT | PM_SWAPPED)) || (pm[i] & PM_FILE))
				continue;
			uint64_t page = at + i;
			if (n && runs[n - 1].first + runs[n - 1].pages == page) {
				runs[n - 1].pages++;
				continue;
			}
			if (n == cap) {
				struct run *more = realloc(runs, 2 * cap * sizeof(*runs));
				if (!more) {
					r = -ENOMEM;
					break;
				}
				runs = more;
				cap *= 2;
			}
			runs[n++] = (struct run){ page, 1 };
		}
	}
	free(pm);
	if (r < 0) {
		free(runs);
		return r;
	}
	*out = runs;
	*nruns = n;
	return 0;
}

int ramdiff_save(int pagemap_fd, int mem_fd, const struct ramdiff_block *b, int n,
		 const char *diffed, int out, uint64_t *pages, char *err, size_t errlen)
{
	struct run *runs[RAMDIFF_MAX_BLOCKS] = { 0 };
	uint64_t nruns[RAMDIFF_MAX_BLOCKS] = { 0 };
	char *buf = malloc(BUF);
	int r = buf ? 0 : -ENOMEM, found = 0;
	const char *what = "cannot read QEMU's page map";
	for (int i = 0; r == 0 && i < n; i++) {
		int whole = strcmp(b[i].name, diffed) != 0;
		found |= !whole;
		r = runs_of(pagemap_fd, &b[i], whole, &runs[i], &nruns[i]);
	}
	if (r == 0 && !found) {
		r = -ENOENT;
		what = "QEMU has no RAM block of that name";
	}
	struct head h = { .blocks = (uint32_t)n, .page = PAGE };
	memcpy(h.magic, MAGIC, 8);
	if (r == 0 && (r = write_full(out, &h, sizeof(h), -1)) < 0)
		what = "cannot write the pages";
	for (int i = 0; r == 0 && i < n; i++) {
		struct block_head bh = { .length = b[i].length, .runs = nruns[i] };
		snprintf(bh.name, sizeof(bh.name), "%s", b[i].name);
		if ((r = write_full(out, &bh, sizeof(bh), -1)) == 0)
			r = write_full(out, runs[i], nruns[i] * sizeof(struct run), -1);
		if (r < 0)
			what = "cannot write the pages";
	}
	*pages = 0;
	for (int i = 0; r == 0 && i < n; i++) {
		for (uint64_t k = 0; r == 0 && k < nruns[i]; k++) {
			uint64_t at = b[i].hva + runs[i][k].first * PAGE, left = runs[i][k].pages * PAGE;
			*pages += runs[i][k].pages;
			while (r == 0 && left) {
				size_t len = left < BUF ? (size_t)left : BUF;
				if ((r = read_full(mem_fd, buf, len, (off_t)at)) < 0)
					what = "cannot read QEMU's memory";
				else if ((r = write_full(out, buf, len, -1)) < 0)
					what = "cannot write the pages";
				at += len;
				left -= len;
			}
		}
	}
	for (int i = 0; i < n; i++)
		free(runs[i]);
	free(buf);
	if (r < 0)
		snprintf(err, errlen, "%s: %s", what, strerror(-r));
	return r;
}

static int bad(char *err, size_t errlen, const char *why)
{
	snprintf(err, errlen, "the saved pages do not fit this VM: %s", why);
	return -EBADMSG;
}

int ramdiff_load(int mem_fd, const struct ramdiff_block *b, int n, int in, uint64_t *pages,
		 char *err, size_t errlen)
{
	struct stat st;
	struct head h;
	if (fstat(in, &st) < 0 || read_full(in, &h, sizeof(h), -1) < 0)
		return bad(err, errlen, "its header cannot be read");
	if (memcmp(h.magic, MAGIC, 8) || h.page != PAGE || h.blocks == 0 ||
	    h.blocks > RAMDIFF_MAX_BLOCKS || (int)h.blocks != n)
		return bad(err, errlen, "its header is not one of a VM like this");
	struct run *runs[RAMDIFF_MAX_BLOCKS] = { 0 };
	uint64_t nruns[RAMDIFF_MAX_BLOCKS] = { 0 };
	int which[RAMDIFF_MAX_BLOCKS], used[RAMDIFF_MAX_BLOCKS] = { 0 };
	uint64_t total = 0, bytes = sizeof(h);
	const char *why = NULL;
	for (uint32_t i = 0; !why && i < h.blocks; i++) {
		struct block_head bh;
		if (read_full(in, &bh, sizeof(bh), -1) < 0) {
			why = "it ends in a block's header";
			break;
		}
		bytes += sizeof(bh);
		which[i] = -1;
		if (memchr(bh.name, '\0', sizeof(bh.name)))
			for (int k = 0; k < n; k++)
				if (!strcmp(b[k].name, bh.name) && !used[k])
					which[i] = k;
		if (which[i] < 0 || bh.length != b[which[i]].length) {
			why = "a block is not one of this VM's, or not of its size";
			break;
		}
		used[which[i]] = 1;
		uint64_t limit = bh.length / PAGE;
		if (bh.runs > limit || bh.runs * sizeof(struct run) > (uint64_t)st.st_size) {
			why = "a block has more runs than pages";
			break;
		}
		nruns[i] = bh.runs;
		runs[i] = malloc(bh.runs ? bh.runs * sizeof(struct run) : 1);
		if (!runs[i]) {
			why = "out of memory";
			break;
		}
		if (read_full(in, runs[i], bh.runs * sizeof(struct run), -1) < 0) {
			why = "it ends in a block's runs";
			break;
		}
		bytes += bh.runs * sizeof(struct run);
		uint64_t next = 0;
		for (uint64_t k = 0; !why && k < bh.runs; k++) {
			struct run *ru = &runs[i][k];
			if (ru->pages == 0 || ru->first < next || ru->first >= limit ||
			    ru->pages > limit - ru->first)
				why = "a run is out of order or out of its block";
			else {
				next = ru->first + ru->pages;
				total += ru->pages;
			}
		}
	}
	if (!why && bytes + total * PAGE != (uint64_t)st.st_size)
		why = "its size is not what its runs add up to";
	char *buf = why ? NULL : malloc(BUF);
	if (!why && !buf)
		why = "out of memory";
	int r = why ? -EBADMSG : 0;
	for (uint32_t i = 0; r == 0 && i < h.blocks; i++) {
		const struct ramdiff_block *blk = &b[which[i]];
		for (uint64_t k = 0; r == 0 && k < nruns[i]; k++) {
			uint64_t at = blk->hva + runs[i][k].first * PAGE, left = runs[i][k].pages * PAGE;
			while (r == 0 && left) {
				size_t len = left < BUF ? (size_t)left : BUF;
				if ((r = read_full(in, buf, len, -1)) < 0)
					snprintf(err, errlen, "cannot read the saved pages: %s",
						 strerror(-r));
				else if ((r = write_full(mem_fd, buf, len, (off_t)at)) < 0)
					snprintf(err, errlen, "cannot write QEMU's memory: %s",
						 strerror(-r));
				at += len;
				left -= len;
			}
		}
	}
	for (int i = 0; i < RAMDIFF_MAX_BLOCKS; i++)
		free(runs[i]);
	free(buf);
	if (why)
		return bad(err, errlen, why);
	*pages = total;
	return r;
}
