// SPDX-License-Identifier: MIT
/* -o FILE and --json for every main (cli_output.h). Their doc strings are true for each main;
 * what a main writes there its own doc says. */
#include <argp.h>
#include "cli_output.h"

struct cli_output cli_output;

enum { CLI_KEY_JSON = 2100 };

static const struct {
	unsigned int bit;
	struct argp_option opt;
} defs[] = {
	{ CLI_OUT_JSON, { "json", CLI_KEY_JSON, NULL, 0, "JSON instead of text (see above)", 0 } },
	{ CLI_OUT_FILE, { "output", 'o', "FILE", 0, "Where to write (see above)", 0 } },
};

static error_t parse(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'o':
		if (!*arg)
			argp_error(state, "empty output file name");
		cli_output.file = arg;
		break;
	case CLI_KEY_JSON:
		cli_output.json = true;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

const struct argp *cli_output__argp(void)
{
	static struct argp_option opts[sizeof(defs) / sizeof(defs[0]) + 1];
	static struct argp argp = { .options = opts, .parser = parse };
	size_t k = 0;

	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
		if (cli_output.takes & defs[i].bit)
			opts[k++] = defs[i].opt;
	opts[k] = (struct argp_option){};
	return &argp;
}
