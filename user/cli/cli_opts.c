// SPDX-License-Identifier: MIT
/* The options the mains share, defined once (cli_opts.h). Each option's doc string is the
 * same for every main: it is written to be true for each, and what the option does there in
 * particular is said in that main's doc. */
#include <argp.h>
#include <stddef.h>
#include "cli_opts.h"
#include "cli_output.h"
#include "session.h"
#include "torchprof.h"

struct cli_opts cli_opts = { .ring_mb = 4, .torch_timeout = 5 };

enum { CLI_KEY_RING_MB = 2000, CLI_KEY_PY_STACKS, CLI_KEY_NO_STACKS, CLI_KEY_TORCH_TIMEOUT };

/* an option and the cli_opt bit a main takes it by */
struct cli_def {
	unsigned int bit;
	struct argp_option opt;
};

static const struct cli_def target_defs[] = {
	{ CLI_PID, { "pid", 'p', "PID", 0, "A target process (repeatable where the usage above "
		     "shows -p PID ...)", 0 } },
	{ CLI_ALL, { "all", 'a', NULL, 0, "The host's CUDA/NCCL processes (which ones, and when: "
		     "see above)", 0 } },
	{ CLI_WAIT, { "wait", 'w', NULL, 0, "Wait for a target to load what is traced instead of "
		      "failing", 0 } },
	{ CLI_DURATION, { "duration", 'd', "SEC", 0, "Stop SEC seconds after attaching (default: "
			  "at Ctrl-C, or once every -p process exited)", 0 } },
	{ CLI_RING_MB, { "ring-mb", CLI_KEY_RING_MB, "MB", 0, "BPF ring buffer MiB, power of two "
			 "(default 4)", 0 } },
};

static const struct cli_def python_defs[] = {
	{ CLI_PY_STACKS, { "py-stacks", CLI_KEY_PY_STACKS, NULL, 0, "Python frames of each call "
			   "recorded (CPython 3.9-3.13; see above)", 0 } },
	{ CLI_NO_STACKS, { "no-stacks", CLI_KEY_NO_STACKS, NULL, 0, "No stacks (cheaper; what is lost: "
			   "see above)", 0 } },
	{ CLI_TORCH_TIMEOUT, { "torch-timeout", CLI_KEY_TORCH_TIMEOUT, "SEC", 0, "How long a "
			       "process's main thread has to reach a safe point for the --torch* "
			       "options (default 5)", 0 } },
};

static void add_pid(struct argp_state *state, const char *arg)
{
	struct cli_opts *o = &cli_opts;
	int pid;

	if (o->max_pids == 1 && o->nr_pids)
		argp_error(state, "one pid at a time");
	if (session__parse_pid(arg, &pid))
		argp_error(state, "invalid pid '%s'", arg);
	if (o->nr_pids == o->max_pids)
		argp_error(state, "at most %d pids%s", o->max_pids,
			   o->takes & CLI_ALL ? "; use -a" : "");
	for (int i = 0; o->unique_pids && i < o->nr_pids; i++)
		if (o->pids[i] == pid)
			return;
	o->pids[o->nr_pids++] = pid;
}

/* the parser of every child */
static error_t cli_parse(int key, char *arg, struct argp_state *state)
{
	struct cli_opts *o = &cli_opts;

	switch (key) {
	case 'p':
		add_pid(state, arg);
		break;
	case 'a':
		o->all = true;
		break;
	case 'w':
		o->wait = true;
		break;
	case 'd':
		if (session__parse_seconds(arg, &o->duration))
			argp_error(state, "invalid duration '%s' (seconds > 0)", arg);
		break;
	case CLI_KEY_RING_MB:
		if (session__parse_ring_mb(arg, &o->ring_mb))
			argp_error(state, "invalid --ring-mb '%s' (a power of two, 1..4096)", arg);
		break;
	case CLI_KEY_PY_STACKS:
		o->py_stacks = true;
		break;
	case CLI_KEY_NO_STACKS:
		o->no_stacks = true;
		break;
	case CLI_KEY_TORCH_TIMEOUT:
		if (torch__parse_timeout(arg, &o->torch_timeout))
			argp_error(state, TORCH_TIMEOUT_INVALID, arg);
		break;
	case ARGP_KEY_ARG:	/* the mains that share these take no arguments */
		argp_error(state, "unexpected argument '%s'", arg);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

void cli_opts__check(struct argp_state *state)
{
	const struct cli_opts *o = &cli_opts;

	if (!o->nr_pids && !o->all)
		argp_error(state, "no process given: use -p PID%s", o->takes & CLI_ALL ? " or -a" : "");
	if (o->nr_pids && o->all)
		argp_error(state, "-p and -a exclude each other");
	if (o->py_needs_stacks && o->py_stacks && o->no_stacks)
		argp_error(state, "--py-stacks and --no-stacks exclude each other");
}

#define NR_DEFS(a) (sizeof(a) / sizeof(a[0]))
#define MAX_CHILDREN 8

/* a child with the options of defs the main takes; false when it takes none */
static bool child_of(const struct cli_def *defs, size_t n, struct argp_option *opts,
		     struct argp *argp)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (cli_opts.takes & defs[i].bit)
			opts[k++] = defs[i].opt;
	opts[k] = (struct argp_option){};
	*argp = (struct argp){ .options = opts, .parser = cli_parse };
	return k > 0;
}

const struct argp_child *cli_opts__children(const struct argp_child *extra)
{
	static struct argp_option target[NR_DEFS(target_defs) + 1],
				  python[NR_DEFS(python_defs) + 1];
	static struct argp argps[2];
	static struct argp_child children[MAX_CHILDREN];
	int n = 0;

	if (child_of(target_defs, NR_DEFS(target_defs), target, &argps[0]))
		children[n++] = (struct argp_child){ &argps[0], 0, NULL, 0 };
	if (cli_output.takes)
		children[n++] = (struct argp_child){ cli_output__argp(), 0, NULL, 0 };
	if (child_of(python_defs, NR_DEFS(python_defs), python, &argps[1]))
		children[n++] = (struct argp_child){ &argps[1], 0, NULL, 0 };
	children[n++] = (struct argp_child){ &session_common_argp, 0, NULL, 0 };
	for (; extra && extra->argp && n < MAX_CHILDREN - 1; extra++)
		children[n++] = *extra;
	children[n] = (struct argp_child){};
	return children;
}
