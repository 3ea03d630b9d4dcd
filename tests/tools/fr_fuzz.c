// SPDX-License-Identifier: MIT
/* libFuzzer target for the flight-recorder dump parser and the analysis behind it.
 *
 * Each input is parsed as one dump; a dump that parses is folded twice (as two "ranks", the
 * second with its comm ranks shifted by the parser's own data) and analysed, and the reports
 * are rendered, so the fuzzer reaches the verdict code with whatever the parser lets through.
 * The same bytes also go through tail mode (header, then the entries and what follows them:
 * version 2's stacks may sit on either side of the entries). Seeds with stacks: the
 * tests/tools/data sets hung_missing, no_progress_unknown, killed_stacks. Inputs that start as
 * a pickle go through the PyTorch reader (fr_pickle.c, fr_torch.c) instead: seeds are the
 * corpus files written by tests/tools/test_fr_torch.py --corpus (dumps and hostile pickles).
 *   make fr-fuzz-run FUZZ_SECONDS=120     # seeds in tests/tools/corpus
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze.h"
#include "fr_parse.h"
#include "fr_torch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct fr_opts opts = { .skew_ns = 1000000000LL, .stuck_ns = 10000000000LL };
	struct fr_analysis *a;
	struct fr_dump d;
	FILE *sink;
	int err;

	fr_dump__init(&d);
	if (fr_torch_is_dump(data, size))
		err = fr_dump__parse_torch(&d, (const char *)data, size, size % 4);
	else
		err = fr_dump__parse(&d, (const char *)data, size);
	a = fr_analysis__new(&opts);
	if (!a)
		goto out;
	if (err) {
		fr_analysis__add_corrupt(a, "fuzz.json", &d, d.err);
	} else {
		fr_analysis__add_dump(a, &d, "fuzz.json");
		/* a second rank: same dump with every comm rank moved, so comms have peers */
		for (size_t i = 0; i < d.nr_comms; i++)
			if (d.comms[i].rank != FR_UNK && d.comms[i].nranks != FR_UNK)
				d.comms[i].rank = (d.comms[i].rank + 1) % d.comms[i].nranks;
		if (d.global_rank != FR_UNK)
			d.global_rank++;
		fr_analysis__add_dump(a, &d, "fuzz2.json");
	}
	if (fr_analysis__finish(a) == 0) {
		sink = fopen("/dev/null", "w");
		if (sink) {
			fr_analysis__print_json(a, sink);
			fr_analysis__print_human(a, sink);
			fclose(sink);
		}
	}
	fr_analysis__free(a);
out:
	fr_dump__release(&d);
	{
		struct fr_dump t;
		size_t off = 0;

		fr_dump__init(&t);
		if (fr_dump__parse_head(&t, (const char *)data, size, &off) == 0 && off <= size)
			fr_dump__parse_tail(&t, (const char *)data + off, size - off, off, 4);
		fr_dump__release(&t);
	}
	return 0;
}
