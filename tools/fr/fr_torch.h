/* SPDX-License-Identifier: MIT */
/* fr_torch: PyTorch flight-recorder dumps (pickles; docs/fr-torch.md) read into struct
 * fr_dump, and tptrace dumps written in that format for PyTorch's fr_trace. */
#ifndef TPTRACE_FR_TORCH_H
#define TPTRACE_FR_TORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "fr_parse.h"

/* PyTorch names its dumps <prefix><global rank> (nccl_trace_rank_3): the rank is the
 * number that ends the file name; FR_UNK when none does */
int64_t fr_torch_rank_from_name(const char *name);
/* by content: a pickle (0x80, protocol 2..5) */
bool fr_torch_is_dump(const void *buf, size_t len);
/* Parses a PyTorch dump of the given global rank (FR_UNK: unknown) into d: pg -> comm (the
 * pg name is the comm id), entries, pg_status. 0, -EINVAL (d->err: one line) or -ENOMEM. */
int fr_dump__parse_torch(struct fr_dump *d, const char *buf, size_t len, int64_t global_rank);

/* --export-torch: two passes over the tptrace dumps of one job. add() learns every comm's
 * members (comm rank -> global rank) from each dump; write() then writes one dump as
 * <outdir>/nccl_trace_rank_<global rank> (atomically). */
struct fr_torch_export;
struct fr_torch_export *fr_torch_export__new(void);
int fr_torch_export__add(struct fr_torch_export *x, const struct fr_dump *d);
/* 0, -EINVAL (no global rank: one line on stderr, nothing written) or -errno */
int fr_torch_export__write(struct fr_torch_export *x, const struct fr_dump *d,
			   const char *outdir, char *path_out, size_t path_cap);
void fr_torch_export__free(struct fr_torch_export *x);
/* the entries written: collectives and send/recv PyTorch's fr_trace knows by name */
bool fr_torch_exportable(const struct fr_entry *e);

#define FR_TORCH_PREFIX "nccl_trace_rank_"
#define FR_TORCH_VERSION "2.10"	/* the format version written */

#endif
