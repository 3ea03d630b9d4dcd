/* SPDX-License-Identifier: MIT */
/* fr_pickle: a bounded, restricted reader and a small writer of Python pickles, for PyTorch's
 * flight-recorder dumps (docs/fr-torch.md).
 *
 * The reader is a data-only pickle machine: it builds dicts, lists, tuples, str, bytes, int,
 * float, bool and None, and refuses every opcode that would import or call something (GLOBAL,
 * STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT*, the
 * out-of-band buffers). PyTorch writes its dumps with the TorchScript Pickler and type tags
 * off (FlightRecorder's pickle_str passes tag_aggregates = false), so a real dump holds no
 * global at all: there is nothing to allow-list. Every length is checked against the input,
 * and the stack, memo, object count and nesting depth are capped: a truncated or hostile file
 * gives one error (pk_doc.err), never a crash. Fuzzed by tests/tools/fr_fuzz.c.
 *
 * Values live in one array and refer to their children by index; strings and bytes point into
 * the input buffer (not NUL-terminated), which must outlive the document.
 */
#ifndef TPTRACE_FR_PICKLE_H
#define TPTRACE_FR_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "growbuf.h"

enum pk_type { PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_LIST, PK_TUPLE, PK_DICT };

#define PK_MAX_DEPTH	64		/* containers inside containers */
#define PK_MAX_STACK	(1u << 20)	/* values on the machine's stack */
#define PK_MAX_MARKS	PK_MAX_DEPTH	/* open MARKs */
#define PK_MAX_MEMO	(1u << 22)	/* memo slots */
#define PK_MAX_OBJECTS	(1u << 24)	/* values in one document */

struct pk_val {
	uint8_t type;		/* enum pk_type */
	uint8_t depth;		/* 1 + the deepest child (scalars: 0) */
	uint32_t n;		/* str/bytes: length; list/tuple: items; dict: pairs */
	uint32_t cap;		/* of kids */
	union {
		int64_t i;	/* PK_INT, PK_BOOL */
		double f;
		const char *s;	/* PK_STR (UTF-8), PK_BYTES */
		uint32_t *kids;	/* list/tuple: n items; dict: 2n (key, value) */
	};
};

struct pk_doc {
	struct pk_val *vals;
	uint32_t nr_vals, cap_vals;
	uint32_t root;		/* index of the value STOP returned */
	/* containers' kids come from big chunks (a malloc per dict of a 16k-rank job's entries
	 * costs more than the parse): freed all at once */
	void **chunks;
	size_t nr_chunks, cap_chunks;
	uint32_t *bump;
	size_t bump_left;
	int proto;
	char err[160];
};

/* 0x80, then a protocol 2..5: what Python (protocol >= 2) and TorchScript write first */
bool pk_is_pickle(const void *buf, size_t len);
/* Parses buf[0..len) into doc (initialised here). 0, -EINVAL (doc->err says why, one line)
 * or -ENOMEM. pk_doc__free releases it either way. */
int pk_doc__parse(struct pk_doc *doc, const void *buf, size_t len);
void pk_doc__free(struct pk_doc *doc);

static inline const struct pk_val *pk_at(const struct pk_doc *doc, uint32_t i)
{
	return &doc->vals[i];
}
/* dict lookup by str key (NULL: not a dict or no such key); the first match wins */
const struct pk_val *pk_get(const struct pk_doc *doc, const struct pk_val *dict, const char *key);
const struct pk_val *pk_item(const struct pk_doc *doc, const struct pk_val *seq, uint32_t i);
bool pk_str_eq(const struct pk_val *v, const char *s);
/* copies a str into out (truncated, NUL-terminated); false if v is not a str */
bool pk_str_copy(const struct pk_val *v, char *out, size_t cap);

/* ---- writer: protocol 2, what Python's pickle.load and PyTorch's readers take ---- */
struct pk_out {
	struct growbuf b;	/* b.failed: out of memory, the pickle is incomplete */
};

void pk_out_begin(struct pk_out *o);	/* PROTO 2 */
void pk_out_end(struct pk_out *o);	/* STOP */
void pk_out_none(struct pk_out *o);
void pk_out_bool(struct pk_out *o, bool b);
void pk_out_int(struct pk_out *o, int64_t v);
void pk_out_str(struct pk_out *o, const char *s);
/* containers: open, the items (dict: key then value), close */
void pk_out_dict(struct pk_out *o);
void pk_out_list(struct pk_out *o);
void pk_out_mark(struct pk_out *o);	/* before the items of a list or dict */
void pk_out_setitems(struct pk_out *o);	/* after a dict's items */
void pk_out_appends(struct pk_out *o);	/* after a list's items */
void pk_out_tuple2(struct pk_out *o);	/* the two values before it become a tuple */
void pk_out_free(struct pk_out *o);

#endif
