/* SPDX-License-Identifier: MIT */
/* The output options of every main, defined once: -o FILE and --json, an argp child parsed
 * into cli_output. The mains of tptrace (user/cli), tptrace report and tptrace-fr take it;
 * each says which of the two it has (cli_output.takes, before argp_parse) and, in its doc,
 * what they write there. An empty -o is refused. */
#ifndef TPTRACE_CLI_OUTPUT_H
#define TPTRACE_CLI_OUTPUT_H

#include <stdbool.h>

struct argp;

enum cli_output_opt {
	CLI_OUT_FILE	= 1 << 0,	/* -o FILE */
	CLI_OUT_JSON	= 1 << 1,	/* --json */
};

struct cli_output {
	unsigned int takes;	/* enum cli_output_opt; set by the main */
	const char *file;	/* -o, or the main's default */
	bool json;
};

extern struct cli_output cli_output;

/* the child with the options of cli_output.takes (built on the first call) */
const struct argp *cli_output__argp(void);

#endif
