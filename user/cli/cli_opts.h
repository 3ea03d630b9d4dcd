/* SPDX-License-Identifier: MIT */
/* The options the mains share (tptrace, fr, mem, stacks), defined once: argp children for
 * the targets (-p, -a, -w, -d, --ring-mb) and Python (--py-stacks, --no-stacks,
 * --torch-timeout), parsed into one struct; plus the output's (-o, --json: cli_output.h,
 * shared with tptrace report and tptrace-fr) and the session's -v/-q.
 *
 * A main says before argp_parse which of them it takes and how (the "set by the main"
 * fields of cli_opts), takes its children from cli_opts__children(), and calls
 * cli_opts__check() from its ARGP_KEY_END for the checks across them. What a shared option
 * means for that main (what -o writes, which processes -a finds) its doc string says. The
 * children also refuse any argument ("unexpected argument 'X'"): these mains take none. */
#ifndef TPTRACE_CLI_OPTS_H
#define TPTRACE_CLI_OPTS_H

#include <stdbool.h>

struct argp_child;
struct argp_state;

enum cli_opt {
	CLI_PID		= 1 << 0,	/* -p PID */
	CLI_ALL		= 1 << 1,	/* -a: -p and -a exclude each other; "use -p PID or -a" */
	CLI_WAIT	= 1 << 2,	/* -w */
	CLI_DURATION	= 1 << 3,	/* -d SEC */
	CLI_RING_MB	= 1 << 4,	/* --ring-mb MB */
	CLI_PY_STACKS	= 1 << 5,	/* --py-stacks */
	CLI_NO_STACKS	= 1 << 6,	/* --no-stacks */
	CLI_TORCH_TIMEOUT = 1 << 7,	/* --torch-timeout SEC */
};

struct cli_opts {
	/* set by the main before parsing */
	unsigned int takes;	/* enum cli_opt */
	int *pids;		/* room for max_pids */
	int max_pids;		/* 1: a second -p is "one pid at a time" */
	bool unique_pids;	/* a pid given twice counts once */
	bool py_needs_stacks;	/* --py-stacks and --no-stacks exclude each other */
	/* parsed (defaults: the main may set them before parsing) */
	int nr_pids;
	bool all;
	bool wait;
	double duration;	/* seconds; 0: none */
	int ring_mb;
	bool py_stacks;
	bool no_stacks;
	double torch_timeout;
};

/* the one parsed set: ring_mb 4 and torch_timeout 5 until the main or a option says */
extern struct cli_opts cli_opts;

/* The children for a main's struct argp: those holding an option of cli_opts.takes or
 * cli_output.takes, the session's -v/-q, then extra (may be NULL; ends with an empty
 * child). Built once. */
const struct argp_child *cli_opts__children(const struct argp_child *extra);

/* The checks across the shared options (call from ARGP_KEY_END; argp_error on the first) */
void cli_opts__check(struct argp_state *state);

#endif
