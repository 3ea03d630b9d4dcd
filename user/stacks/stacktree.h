/* SPDX-License-Identifier: MIT */
/* The cross-process view of a hang snapshot (LLNL STAT's prefix tree): the issuing thread's
 * stack of every process, merged root-first into one tree whose nodes carry the set of ranks
 * that passed through them; processes are grouped by rank (RANK in their environment, else
 * pid) into equivalence classes of identical stacks, and the classes with the fewest ranks are
 * named as outliers. Printed by `tptrace stacks` (text). */
#ifndef TPTRACE_STACKTREE_H
#define TPTRACE_STACKTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct stack_proc;

struct stacktree_opts {
	int max_depth;		/* frames per path printed from the root; 0: all */
	bool all_threads;	/* every thread, not only the issuing one */
};

/* Writes the merged tree, the equivalence classes ("ranks 0-5,7" / "rank 6") and the outlier
 * classes of procs[0..n) to f. 0, or a negative errno (-ENOMEM, -EIO). */
int stacktree__print(FILE *f, struct stack_proc *const *procs, int n,
		     const struct stacktree_opts *opts);

/* "0-5,7,9-12" for a sorted, deduplicated set of ranks; the string is cut with "..." at size. */
void stacktree__format_ranks(const int *ranks, int n, char *buf, size_t size);

#endif
