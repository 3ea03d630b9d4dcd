/* SPDX-License-Identifier: MIT */
/* fr_analyze: fold flight-recorder dumps of all ranks into per-(comm, seq) aggregates and
 * derive verdicts (who hung the job, and why).
 *
 * Memory is bounded by ranks × comms plus the distinct (comm, seq) pairs, never by the number
 * of entries: each dump is folded as soon as it is parsed and then forgotten.
 */
#ifndef TPTRACE_FR_ANALYZE_H
#define TPTRACE_FR_ANALYZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "fr_parse.h"

struct fr_opts {
	int64_t skew_ns;	/* late_arrival threshold */
	int64_t stuck_ns;	/* stuck_in_call threshold */
};

struct fr_analysis;

/* How the reader read the dumps, for the report: every entry, or only the newest `tail` of
 * each (asked for, or because the dumps together exceed the full-read limit). */
struct fr_read {
	long tail;		/* 0: every entry */
	bool forced;		/* --tail N given; else the size decided */
	int64_t total_bytes;	/* the dumps' sizes summed */
	int64_t max_bytes;	/* the full-read limit the size was held against */
};

/* Which cross-host trigger's dumps were analysed (docs/fr-schema.md "Triggers"); fr.c picks
 * it before folding. */
struct fr_trigger_sel {
	bool present;		/* some dump answered a trigger */
	bool consistent;	/* id names a trigger every host answered */
	char id[40], origin[64], reason[16];
	int nr_triggers;	/* distinct trigger ids in the dumps */
	int nr_hosts;		/* hosts with trigger dumps */
	int nr_skipped;		/* dumps of other triggers left out */
};

struct fr_analysis *fr_analysis__new(const struct fr_opts *opts);
/* Folds one parsed dump. Not thread-safe: callers serialise. 0 or -ENOMEM. */
int fr_analysis__add_dump(struct fr_analysis *a, const struct fr_dump *d, const char *path);
/* Records a dump that failed to parse; d holds what was read before the error (may be NULL). */
int fr_analysis__add_corrupt(struct fr_analysis *a, const char *path, const struct fr_dump *d,
			     const char *why);
void fr_analysis__set_read(struct fr_analysis *a, const struct fr_read *r);
/* Entries of one dump the reader left out: >= 0, or FR_UNK (the dump does not say how many
 * it held). Not thread-safe: callers serialise. */
void fr_analysis__note_skipped(struct fr_analysis *a, int64_t skipped);
/* Derives the verdicts; call once, after the last add. */
int fr_analysis__finish(struct fr_analysis *a);
int fr_analysis__nr_verdicts(const struct fr_analysis *a);
/* Why the dumps cannot be judged together (one line), NULL when they can: after finish. */
const char *fr_analysis__bad_input(const struct fr_analysis *a);
int fr_analysis__print_json(const struct fr_analysis *a, FILE *out);
int fr_analysis__print_human(const struct fr_analysis *a, FILE *out);
void fr_analysis__set_trigger(struct fr_analysis *a, const struct fr_trigger_sel *t);
void fr_analysis__free(struct fr_analysis *a);

#endif
