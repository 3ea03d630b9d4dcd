/* SPDX-License-Identifier: MIT */
/* ELF symbol tables of one file (.symtab and .dynsym), read once with libelf and cached by
 * build-id (or dev/inode/size/mtime when there is none): libraries can be >1 GB and must not
 * be re-read per event or per process. */
#ifndef TPTRACE_ELFSYM_H
#define TPTRACE_ELFSYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elfsym;

enum elfsym_kind { ELFSYM_FUNC = 1, ELFSYM_OBJECT = 2 };

struct elfsym_sym {
	const char *name;	/* version suffix ("@@VER", "@VER") stripped */
	uint64_t vaddr;		/* st_value */
	uint64_t size;		/* st_size */
	uint8_t kind;		/* enum elfsym_kind */
	bool global;		/* STB_GLOBAL or STB_WEAK; false for STB_LOCAL */
	bool dynamic;		/* came from .dynsym */
};

/* Read an ELF file. NULL and errno (ENOENT, ENOEXEC for non-ELF, ...). Keeps FUNC and OBJECT
 * symbols with a nonzero value from both tables (deduplicated by name+vaddr). */
struct elfsym *elfsym__open(const char *path);
void elfsym__free(struct elfsym *es);

/* Hex build-id ("" when the file has none). */
const char *elfsym__build_id(const struct elfsym *es);
bool elfsym__is_exec(const struct elfsym *es);	/* ET_EXEC (non-PIE: vaddr are absolute) */

/* Exact-name lookup of a FUNC. Prefers a global definition over a local one; among several
 * locals with the same name takes the first. NULL when absent. */
const struct elfsym_sym *elfsym__find_func(const struct elfsym *es, const char *name);
/* Any kind by exact name. */
const struct elfsym_sym *elfsym__find(const struct elfsym *es, const char *name);

/* The FUNC containing vaddr (vaddr in [sym.vaddr, sym.vaddr + max(size,1))), or when no sized
 * symbol contains it, NULL. Binary search over a sorted array. */
const struct elfsym_sym *elfsym__func_at(const struct elfsym *es, uint64_t vaddr);

/* Whether the file has USDT probes (.note.stapsdt) of this provider, e.g. "pytorch". */
bool elfsym__has_usdt_provider(const struct elfsym *es, const char *provider);

/* Every symbol whose name starts with prefix (e.g. "_ZZ" for function-local statics), in no
 * particular order. Returns the count visited; cb returning nonzero stops the walk. */
size_t elfsym__each_prefix(const struct elfsym *es, const char *prefix,
			   int (*cb)(const struct elfsym_sym *sym, void *ctx), void *ctx);

/* Virtual address <-> file offset through the PT_LOAD program headers.
 * Return 0 or -ENOENT when no segment covers the value. */
int elfsym__vaddr_to_off(const struct elfsym *es, uint64_t vaddr, uint64_t *off);
int elfsym__off_to_vaddr(const struct elfsym *es, uint64_t off, uint64_t *vaddr);

/* Cache of opened files. Key: build-id when present, else st_dev/st_ino/st_size/st_mtime of
 * the path. The cache owns the entries. */
struct elfsym_cache;
struct elfsym_cache *elfsym_cache__new(void);
void elfsym_cache__free(struct elfsym_cache *cache);
/* Opened (or found) entry for path; NULL and errno when the file cannot be read as ELF.
 * Failures are cached too (by dev/ino) so a bad file is not re-read. */
struct elfsym *elfsym_cache__get(struct elfsym_cache *cache, const char *path);
size_t elfsym_cache__nr_opened(const struct elfsym_cache *cache);	/* files actually parsed */

#endif
