// SPDX-License-Identifier: MIT
/* Fuzz target for the trigger-record parser (user/fr/fr_trigger.c): trigger files come from
 * other hosts through a shared directory, so they are untrusted input. Each input is parsed
 * with and without an id expected from the file name; a record that parses holds only valid
 * fields, and one that does not is refused with -EINVAL and a one-line reason. Built two ways:
 *   .output/unit/fr_trigger_fuzz        libFuzzer + ASan/UBSan (clang's runtime, where present)
 *   .output/unit/test_fr_trigger_fuzz   the same target under a seeded mutation loop, always
 * Seeds: tests/unit/trigger_corpus. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_trigger.h"

#ifdef TPTRACE_FUZZ_VERBOSITY
int tptrace_verbosity = -1;	/* the libFuzzer build links fr_trigger.c alone: quiet */
#endif

#define FUZZ_ID "0123456789abcdef0123456789abcdef"

/* aborts (a crash to both drivers) on a contract violation */
#define FUZZ_ASSERT(c)                                                                   \
	do {                                                                             \
		if (!(c)) {                                                              \
			fprintf(stderr, "fr_trigger_fuzz: %s:%d: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                         \
		}                                                                        \
	} while (0)

static bool hex32(const char *s)
{
	if (strlen(s) != 32)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const expect[] = { NULL, FUZZ_ID };

	for (int i = 0; i < 2; i++) {
		struct fr_trigger_rec t;
		char err[128];
		int rc;

		memset(&t, 0x5a, sizeof(t));
		memset(err, 0, sizeof(err));
		rc = fr_trigger__parse((const char *)data, size, expect[i], &t, err, sizeof(err));
		if (rc) {
			FUZZ_ASSERT(rc == -EINVAL);
			FUZZ_ASSERT(err[0] && !strchr(err, '\n') && strlen(err) < sizeof(err));
			continue;
		}
		FUZZ_ASSERT(size <= FR_TRIGGER_MAX_BYTES);
		FUZZ_ASSERT(hex32(t.id) && (!expect[i] || !strcmp(t.id, expect[i])));
		FUZZ_ASSERT(fr_job_valid(t.job) && fr_host_valid(t.origin_host));
		FUZZ_ASSERT(!strcmp(t.reason, "stall") || !strcmp(t.reason, "signal") ||
			    !strcmp(t.reason, "command"));
		FUZZ_ASSERT(t.time_ns >= 0);
	}
	return 0;
}
