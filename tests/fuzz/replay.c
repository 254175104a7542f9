/*
 * replay: runs a fuzz target over every file of the corpus directories
 * given, so `make test` replays the committed corpus (and every past
 * crash kept there) with gcc and the sanitizers it has.
 */
#include "tests/lib/tap.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char **dirs;
static int ndirs;

static void test_corpus(void)
{
	int files = 0;
	for (int i = 0; i < ndirs; i++) {
		DIR *d = opendir(dirs[i]);
		if (!CHECK(d != NULL))
			continue;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", dirs[i], e->d_name);
			FILE *f = fopen(path, "rb");
			if (!CHECK(f != NULL))
				continue;
			static uint8_t buf[1 << 20];
			size_t n = fread(buf, 1, sizeof(buf), f);
			fclose(f);
			LLVMFuzzerTestOneInput(buf, n);
			files++;
		}
		closedir(d);
	}
	t_note("%d inputs replayed", files);
	CHECK(files > 0);
}

int main(int argc, char **argv)
{
	dirs = argv + 1;
	ndirs = argc - 1;
	static const struct t_case cases[] = { { "fuzz_corpus_replay", test_corpus }, { 0, 0 } };
	char *none[] = { argv[0] };
	return t_main(1, none, cases);
}
