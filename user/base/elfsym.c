// SPDX-License-Identifier: MIT
/* ELF symbol tables, read once per file with libelf.
 *
 * Loading: symbols of .symtab and .dynsym are collected with their names still pointing into the
 * mmap'ed string tables, sorted by (vaddr, name) (radix on vaddr), deduplicated, and only then are the surviving
 * names copied into one arena, so a library whose .symtab repeats its .dynsym pays for each name
 * once. After loading the file is unmapped and closed; an elfsym holds no fd.
 *
 * Lookups: syms[] sorted by vaddr serves func_at() through funcs[] (the FUNC subset) and
 * funcs_max_end[] (running maximum of the ends, so the backwards walk for a containing symbol
 * stops as soon as nothing earlier can reach the address). Names go through an open-addressing
 * table of distinct names, each slot heading a chain of the symbols with that name in syms[]
 * order: repeated local names ("deregister_tm_clones" in every object of a static link) cost
 * one slot, not a long probe sequence.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfsym.h"
#include "growbuf.h"

#define BUILD_ID_MAX	64	/* bytes; GNU ld emits 20 (sha1), 16 (md5/uuid) or 8 (xxhash) */
#define NO_SYM		UINT32_MAX

struct elfsym_seg {
	uint64_t vaddr, off, filesz;
};

struct name_slot {
	uint32_t hash;
	uint32_t head;	/* first index into syms[] with this name, NO_SYM when empty */
};

struct elfsym {
	char build_id[2 * BUILD_ID_MAX + 1];
	bool is_exec;

	struct elfsym_seg *segs;	/* PT_LOAD */
	size_t nr_segs;

	struct elfsym_sym *syms;	/* sorted by (vaddr, name), unique */
	size_t nr_syms;
	char *names;			/* arena every syms[].name points into */

	uint32_t *funcs;		/* indices of FUNC syms, ascending vaddr */
	uint64_t *funcs_max_end;	/* max end over funcs[0..i] */
	size_t nr_funcs;

	struct name_slot *slots;	/* power-of-two sized */
	size_t slots_mask;
	uint32_t *next_same_name;	/* per sym: next index with the same name, or NO_SYM */

	char **usdt_providers;		/* distinct providers in .note.stapsdt */
	size_t nr_usdt_providers;

	/* only while loading */
	int fd;
	Elf *elf;
};

/* Names read from the string table still carry "@VER"/"@@VER"; '@' ends them. */
static size_t name_len(const char *name)
{
	return strchrnul(name, '@') - name;
}

static int name_cmp(const char *a, const char *b)
{
	size_t len_a = name_len(a), len_b = name_len(b);
	int ret = memcmp(a, b, len_a < len_b ? len_a : len_b);

	if (ret || len_a == len_b)
		return ret;
	return len_a < len_b ? -1 : 1;
}

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h;
}

static void es_end(struct elfsym *es)
{
	if (es->elf)
		elf_end(es->elf);
	es->elf = NULL;
	if (es->fd >= 0)
		close(es->fd);
	es->fd = -1;
}

void elfsym__free(struct elfsym *es)
{
	if (!es)
		return;
	es_end(es);
	free(es->segs);
	free(es->syms);
	free(es->names);
	free(es->funcs);
	free(es->funcs_max_end);
	free(es->slots);
	free(es->next_same_name);
	for (size_t i = 0; i < es->nr_usdt_providers; i++)
		free(es->usdt_providers[i]);
	free(es->usdt_providers);
	free(es);
}

static void hex(char *out, const unsigned char *in, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < len; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0xf];
	}
	out[2 * len] = '\0';
}

/* NT_GNU_BUILD_ID in one note block; true when found. */
static bool build_id_from_notes(struct elfsym *es, Elf_Data *data)
{
	GElf_Nhdr nhdr;
	size_t off = 0, next, name_off, desc_off;

	while ((next = gelf_getnote(data, off, &nhdr, &name_off, &desc_off)) > 0) {
		if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == sizeof("GNU") &&
		    memcmp((char *)data->d_buf + name_off, "GNU", sizeof("GNU")) == 0 &&
		    nhdr.n_descsz > 0 && nhdr.n_descsz <= BUILD_ID_MAX) {
			hex(es->build_id, (unsigned char *)data->d_buf + desc_off, nhdr.n_descsz);
			return true;
		}
		off = next;
	}
	return false;
}

/* Build-id from PT_NOTE segments (what the loader maps), else from SHT_NOTE sections. */
static void read_build_id(struct elfsym *es, size_t nr_phdrs)
{
	Elf_Scn *scn = NULL;
	GElf_Phdr phdr;
	GElf_Shdr shdr;
	size_t i;

	for (i = 0; i < nr_phdrs; i++) {
		Elf_Data *data;

		if (!gelf_getphdr(es->elf, i, &phdr) || phdr.p_type != PT_NOTE)
			continue;
		data = elf_getdata_rawchunk(es->elf, phdr.p_offset, phdr.p_filesz,
					    phdr.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
		if (data && build_id_from_notes(es, data))
			return;
	}
	while ((scn = elf_nextscn(es->elf, scn))) {
		Elf_Data *data;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_NOTE)
			continue;
		data = elf_getdata(scn, NULL);
		if (data && build_id_from_notes(es, data))
			return;
	}
}

/* Open path, check it is an executable or shared object, read its build-id and PT_LOADs.
 * Cheap: the symbol tables are not touched. The fd and Elf stay open for es_load_syms(). */
static struct elfsym *es_begin(const char *path, struct stat *st)
{
	struct elfsym *es;
	GElf_Ehdr ehdr;
	GElf_Phdr phdr;
	size_t nr_phdrs, i;
	int err = 0;

	es = calloc(1, sizeof(*es));
	if (!es)
		return NULL;
	es->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (es->fd < 0) {
		err = -errno;
		goto cleanup;
	}
	if (fstat(es->fd, st)) {
		err = -errno;
		goto cleanup;
	}
	if (!S_ISREG(st->st_mode)) {
		err = S_ISDIR(st->st_mode) ? -EISDIR : -ENOEXEC;
		goto cleanup;
	}

	elf_version(EV_CURRENT);
	es->elf = elf_begin(es->fd, ELF_C_READ_MMAP, NULL);
	if (!es->elf || elf_kind(es->elf) != ELF_K_ELF || !gelf_getehdr(es->elf, &ehdr)) {
		err = -ENOEXEC;
		goto cleanup;
	}
	/* relocatable objects and core files have no load addresses to probe */
	if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN) {
		err = -ENOEXEC;
		goto cleanup;
	}
	es->is_exec = ehdr.e_type == ET_EXEC;

	if (elf_getphdrnum(es->elf, &nr_phdrs)) {
		err = -EINVAL;
		goto cleanup;
	}
	es->segs = calloc(nr_phdrs ? nr_phdrs : 1, sizeof(*es->segs));
	if (!es->segs) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < nr_phdrs; i++) {
		if (!gelf_getphdr(es->elf, i, &phdr)) {
			err = -EINVAL;
			goto cleanup;
		}
		if (phdr.p_type != PT_LOAD)
			continue;
		es->segs[es->nr_segs++] = (struct elfsym_seg){
			.vaddr = phdr.p_vaddr, .off = phdr.p_offset, .filesz = phdr.p_filesz,
		};
	}
	read_build_id(es, nr_phdrs);

cleanup:
	if (err) {
		elfsym__free(es);
		errno = -err;
		return NULL;
	}
	return es;
}

/* Append the FUNC and OBJECT definitions of one symbol table to es->syms, names pointing into
 * the string table (still mapped). */
static int collect_table(struct elfsym *es, Elf_Scn *scn, const GElf_Shdr *shdr, bool dynamic)
{
	Elf_Data *sym_data, *str_data;
	Elf_Scn *str_scn;
	size_t entsize, nr, i;

	sym_data = elf_getdata(scn, NULL);
	str_scn = elf_getscn(es->elf, shdr->sh_link);
	str_data = str_scn ? elf_getdata(str_scn, NULL) : NULL;
	if (!sym_data || !str_data || !str_data->d_buf || str_data->d_size == 0)
		return -EINVAL;
	/* names are bounded by the table's final NUL */
	if (((const char *)str_data->d_buf)[str_data->d_size - 1] != '\0')
		return -EINVAL;

	/* es->syms was sized from sh_size */
	entsize = gelf_fsize(es->elf, ELF_T_SYM, 1, EV_CURRENT);
	nr = sym_data->d_size / entsize;
	if (nr > shdr->sh_size / entsize)
		nr = shdr->sh_size / entsize;
	for (i = 1; i < nr; i++) {	/* entry 0 is the null symbol */
		struct elfsym_sym *out;
		GElf_Sym sym;
		const char *name;
		int type, bind;

		if (!gelf_getsym(sym_data, (int)i, &sym))
			return -EINVAL;
		if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0 || sym.st_name >= str_data->d_size)
			continue;
		type = GELF_ST_TYPE(sym.st_info);
		bind = GELF_ST_BIND(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_OBJECT)
			continue;
		name = (const char *)str_data->d_buf + sym.st_name;
		if (name_len(name) == 0)
			continue;

		out = &es->syms[es->nr_syms++];
		*out = (struct elfsym_sym){
			.name = name,
			.vaddr = sym.st_value,
			.size = sym.st_size,
			.kind = type == STT_OBJECT ? ELFSYM_OBJECT : ELFSYM_FUNC,
			.global = bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE,
			.dynamic = dynamic,
		};
	}
	return 0;
}

static int sym_name_cmp(const void *pa, const void *pb)
{
	const struct elfsym_sym *a = pa, *b = pb;

	return name_cmp(a->name, b->name);
}

struct sort_key {
	uint64_t vaddr;
	uint64_t idx;
};

/* Sort syms by (vaddr, name). qsort() of millions of 32-byte entries through a comparison
 * callback takes seconds; an LSD radix sort of (vaddr, index) keys, skipping the 16-bit digits
 * all keys share, is linear, and only runs of equal vaddr (aliases) are then sorted by name. */
static int sort_syms(struct elfsym *es)
{
	struct sort_key *keys, *tmp, *swap;
	struct elfsym_sym *sorted;
	size_t n = es->nr_syms, i, start, *counts;
	uint64_t differ = 0;
	int shift, err = 0;

	if (n < 2)
		return 0;
	keys = malloc(n * sizeof(*keys));
	tmp = malloc(n * sizeof(*tmp));
	counts = malloc(65536 * sizeof(*counts));
	sorted = malloc(n * sizeof(*sorted));
	if (!keys || !tmp || !counts || !sorted) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		keys[i] = (struct sort_key){ .vaddr = es->syms[i].vaddr, .idx = i };
		differ |= keys[i].vaddr ^ keys[0].vaddr;
	}
	for (shift = 0; shift < 64; shift += 16) {
		size_t sum = 0;

		if (!((differ >> shift) & 0xffff))
			continue;
		memset(counts, 0, 65536 * sizeof(*counts));
		for (i = 0; i < n; i++)
			counts[(keys[i].vaddr >> shift) & 0xffff]++;
		for (i = 0; i < 65536; i++) {
			size_t c = counts[i];

			counts[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
			tmp[counts[(keys[i].vaddr >> shift) & 0xffff]++] = keys[i];
		swap = keys;
		keys = tmp;
		tmp = swap;
	}
	for (i = 0; i < n; i++)
		sorted[i] = es->syms[keys[i].idx];
	for (start = 0; start < n; start = i) {
		for (i = start + 1; i < n && sorted[i].vaddr == sorted[start].vaddr; i++)
			;
		if (i - start == 2) {	/* the usual run: a .symtab entry and its .dynsym copy */
			if (name_cmp(sorted[start].name, sorted[start + 1].name) > 0) {
				struct elfsym_sym sym = sorted[start];

				sorted[start] = sorted[start + 1];
				sorted[start + 1] = sym;
			}
		} else if (i - start > 2) {
			qsort(&sorted[start], i - start, sizeof(*sorted), sym_name_cmp);
		}
	}
	free(es->syms);
	es->syms = sorted;
	sorted = NULL;

cleanup:
	free(keys);
	free(tmp);
	free(counts);
	free(sorted);
	return err;
}

/* Collapse entries with the same name and vaddr (the .dynsym copy of a .symtab entry). */
static void dedup_syms(struct elfsym *es)
{
	size_t i, n = 0;

	for (i = 0; i < es->nr_syms; i++) {
		struct elfsym_sym *sym = &es->syms[i];

		if (n > 0 && es->syms[n - 1].vaddr == sym->vaddr &&
		    name_cmp(es->syms[n - 1].name, sym->name) == 0) {
			struct elfsym_sym *kept = &es->syms[n - 1];

			kept->dynamic |= sym->dynamic;
			kept->global |= sym->global;
			if (sym->size > kept->size)
				kept->size = sym->size;
			continue;
		}
		es->syms[n++] = *sym;
	}
	es->nr_syms = n;
}

/* Copy surviving names (version suffix dropped) into the arena and repoint syms at it. */
static int copy_names(struct elfsym *es)
{
	size_t i, total = 0;
	char *pos;

	for (i = 0; i < es->nr_syms; i++)
		total += name_len(es->syms[i].name) + 1;
	es->names = malloc(total ? total : 1);
	if (!es->names)
		return -ENOMEM;
	pos = es->names;
	for (i = 0; i < es->nr_syms; i++) {
		size_t len = name_len(es->syms[i].name);

		memcpy(pos, es->syms[i].name, len);
		pos[len] = '\0';
		es->syms[i].name = pos;
		pos += len + 1;
	}
	return 0;
}

static int build_func_index(struct elfsym *es)
{
	uint64_t max_end = 0;
	size_t i, n = 0;

	for (i = 0; i < es->nr_syms; i++)
		n += es->syms[i].kind == ELFSYM_FUNC;
	es->funcs = malloc((n ? n : 1) * sizeof(*es->funcs));
	es->funcs_max_end = malloc((n ? n : 1) * sizeof(*es->funcs_max_end));
	if (!es->funcs || !es->funcs_max_end)
		return -ENOMEM;
	for (i = 0; i < es->nr_syms; i++) {
		const struct elfsym_sym *sym = &es->syms[i];
		uint64_t end;

		if (sym->kind != ELFSYM_FUNC)
			continue;
		end = sym->vaddr + (sym->size ? sym->size : 1);
		if (end < sym->vaddr)
			end = UINT64_MAX;
		if (end > max_end)
			max_end = end;
		es->funcs[es->nr_funcs] = (uint32_t)i;
		es->funcs_max_end[es->nr_funcs] = max_end;
		es->nr_funcs++;
	}
	return 0;
}

static int build_name_index(struct elfsym *es)
{
	size_t cap = 16, i;

	while (cap < 2 * es->nr_syms)
		cap *= 2;
	es->slots = malloc(cap * sizeof(*es->slots));
	es->next_same_name = malloc((es->nr_syms ? es->nr_syms : 1) * sizeof(*es->next_same_name));
	if (!es->slots || !es->next_same_name)
		return -ENOMEM;
	for (i = 0; i < cap; i++)
		es->slots[i].head = NO_SYM;
	es->slots_mask = cap - 1;

	/* inserting from the back and prepending keeps each chain in syms[] order */
	for (i = es->nr_syms; i-- > 0;) {
		const char *name = es->syms[i].name;
		uint32_t hash = name_hash(name);
		size_t pos = hash & es->slots_mask;
		struct name_slot *slot;

		for (;; pos = (pos + 1) & es->slots_mask) {
			slot = &es->slots[pos];
			if (slot->head == NO_SYM ||
			    (slot->hash == hash && strcmp(es->syms[slot->head].name, name) == 0))
				break;
		}
		es->next_same_name[i] = slot->head;
		slot->hash = hash;
		slot->head = (uint32_t)i;
	}
	return 0;
}

/* Read both symbol tables and build the indexes; closes the file. */
#define NT_STAPSDT 3

/* .note.stapsdt: each note's descriptor holds the probe's pc, the base and the semaphore
 * addresses (three words), then "provider\0name\0args\0". Only providers are kept: whether
 * a library has a provider's probes decides attaching; libbpf reads the rest then. */
static int read_usdt_providers(struct elfsym *es, Elf_Scn *scn)
{
	size_t words = 3 * (gelf_getclass(es->elf) == ELFCLASS32 ? 4 : 8);
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;

	if (!data)
		return 0;
	while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
		const char *provider = (const char *)data->d_buf + desc_off + words;
		bool known = false;
		char **n;

		if (nh.n_type != NT_STAPSDT || nh.n_descsz <= words ||
		    strnlen(provider, nh.n_descsz - words) == nh.n_descsz - words)
			continue;
		for (size_t i = 0; i < es->nr_usdt_providers && !known; i++)
			known = !strcmp(es->usdt_providers[i], provider);
		if (known)
			continue;
		n = realloc(es->usdt_providers, (es->nr_usdt_providers + 1) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		es->usdt_providers = n;
		n[es->nr_usdt_providers] = strdup(provider);
		if (!n[es->nr_usdt_providers])
			return -ENOMEM;
		es->nr_usdt_providers++;
	}
	return 0;
}

bool elfsym__has_usdt_provider(const struct elfsym *es, const char *provider)
{
	for (size_t i = 0; i < es->nr_usdt_providers; i++)
		if (!strcmp(es->usdt_providers[i], provider))
			return true;
	return false;
}

static int es_load_syms(struct elfsym *es)
{
	Elf_Scn *scn = NULL, *symtab = NULL, *dynsym = NULL;
	GElf_Shdr shdr, symtab_shdr, dynsym_shdr;
	size_t entsize, max_syms = 0, shstrndx;
	struct elfsym_sym *shrunk;
	int err = 0;

	entsize = gelf_fsize(es->elf, ELF_T_SYM, 1, EV_CURRENT);
	if (elf_getshdrstrndx(es->elf, &shstrndx))
		shstrndx = 0;
	while ((scn = elf_nextscn(es->elf, scn))) {
		if (!gelf_getshdr(scn, &shdr))
			return -EINVAL;
		if (shdr.sh_type == SHT_NOTE && shstrndx) {
			const char *name = elf_strptr(es->elf, shstrndx, shdr.sh_name);

			if (name && !strcmp(name, ".note.stapsdt") && (err = read_usdt_providers(es, scn)))
				return err;
		} else if (shdr.sh_type == SHT_SYMTAB && !symtab) {
			symtab = scn;
			symtab_shdr = shdr;
			max_syms += shdr.sh_size / entsize;
		} else if (shdr.sh_type == SHT_DYNSYM && !dynsym) {
			dynsym = scn;
			dynsym_shdr = shdr;
			max_syms += shdr.sh_size / entsize;
		}
	}
	if (max_syms >= INT_MAX)	/* gelf_getsym() takes an int */
		return -EFBIG;

	es->syms = malloc((max_syms ? max_syms : 1) * sizeof(*es->syms));
	if (!es->syms)
		return -ENOMEM;
	if (symtab)
		err = collect_table(es, symtab, &symtab_shdr, false);
	if (!err && dynsym)
		err = collect_table(es, dynsym, &dynsym_shdr, true);
	if (err)
		return err;

	err = sort_syms(es);
	if (err)
		return err;
	dedup_syms(es);
	err = copy_names(es);
	if (err)
		return err;
	es_end(es);	/* names are copied: the mapping can go */

	shrunk = realloc(es->syms, (es->nr_syms ? es->nr_syms : 1) * sizeof(*es->syms));
	if (shrunk)
		es->syms = shrunk;
	err = build_func_index(es);
	if (!err)
		err = build_name_index(es);
	return err;
}

struct elfsym *elfsym__open(const char *path)
{
	struct elfsym *es;
	struct stat st;
	int err;

	es = es_begin(path, &st);
	if (!es)
		return NULL;
	err = es_load_syms(es);
	if (err) {
		elfsym__free(es);
		errno = -err;
		return NULL;
	}
	return es;
}

const char *elfsym__build_id(const struct elfsym *es)
{
	return es->build_id;
}

bool elfsym__is_exec(const struct elfsym *es)
{
	return es->is_exec;
}

/* Global over local; otherwise the first in syms[] order. kind 0 takes any. */
static const struct elfsym_sym *lookup(const struct elfsym *es, const char *name, int kind)
{
	const struct elfsym_sym *best = NULL;
	uint32_t hash = name_hash(name), idx;
	size_t pos = hash & es->slots_mask;
	const struct name_slot *slot;

	for (;; pos = (pos + 1) & es->slots_mask) {
		slot = &es->slots[pos];
		if (slot->head == NO_SYM)
			return NULL;
		if (slot->hash == hash && strcmp(es->syms[slot->head].name, name) == 0)
			break;
	}
	for (idx = slot->head; idx != NO_SYM; idx = es->next_same_name[idx]) {
		const struct elfsym_sym *sym = &es->syms[idx];

		if (kind && sym->kind != kind)
			continue;
		if (sym->global)
			return sym;
		if (!best)
			best = sym;
	}
	return best;
}

const struct elfsym_sym *elfsym__find_func(const struct elfsym *es, const char *name)
{
	return lookup(es, name, ELFSYM_FUNC);
}

const struct elfsym_sym *elfsym__find(const struct elfsym *es, const char *name)
{
	return lookup(es, name, 0);
}

const struct elfsym_sym *elfsym__func_at(const struct elfsym *es, uint64_t vaddr)
{
	const struct elfsym_sym *best = NULL;
	size_t lo = 0, hi = es->nr_funcs, i;

	/* hi = number of funcs starting at or before vaddr */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (es->syms[es->funcs[mid]].vaddr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* walk back while something at or before i can still reach vaddr; the nearest start
	 * wins, and among aliases at that start a global one */
	for (i = lo; i-- > 0 && es->funcs_max_end[i] > vaddr;) {
		const struct elfsym_sym *sym = &es->syms[es->funcs[i]];
		uint64_t len = sym->size ? sym->size : 1;

		if (best && sym->vaddr != best->vaddr)
			break;
		if (vaddr - sym->vaddr >= len)
			continue;
		if (!best || sym->global >= best->global)
			best = sym;
	}
	return best;
}

size_t elfsym__each_prefix(const struct elfsym *es, const char *prefix,
			   int (*cb)(const struct elfsym_sym *sym, void *ctx), void *ctx)
{
	size_t prefix_len = strlen(prefix), i, visited = 0;

	for (i = 0; i < es->nr_syms; i++) {
		if (strncmp(es->syms[i].name, prefix, prefix_len) != 0)
			continue;
		visited++;
		if (cb(&es->syms[i], ctx))
			break;
	}
	return visited;
}

int elfsym__vaddr_to_off(const struct elfsym *es, uint64_t vaddr, uint64_t *off)
{
	size_t i;

	/* only the file-backed part of a segment has an offset; .bss has none */
	for (i = 0; i < es->nr_segs; i++) {
		const struct elfsym_seg *seg = &es->segs[i];

		if (vaddr >= seg->vaddr && vaddr - seg->vaddr < seg->filesz) {
			*off = vaddr - seg->vaddr + seg->off;
			return 0;
		}
	}
	return -ENOENT;
}

int elfsym__off_to_vaddr(const struct elfsym *es, uint64_t off, uint64_t *vaddr)
{
	size_t i;

	for (i = 0; i < es->nr_segs; i++) {
		const struct elfsym_seg *seg = &es->segs[i];

		if (off >= seg->off && off - seg->off < seg->filesz) {
			*vaddr = off - seg->off + seg->vaddr;
			return 0;
		}
	}
	return -ENOENT;
}

/* ---- cache ---- */

struct cache_file {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct elfsym *es;	/* NULL: failed with err */
	int err;
};

struct elfsym_cache {
	struct cache_file *files;	/* one per distinct file seen; several may share an es */
	size_t nr_files, cap_files;
	struct elfsym **owned;		/* each parsed elfsym once */
	size_t nr_owned, cap_owned;
	size_t nr_opened;
};

struct elfsym_cache *elfsym_cache__new(void)
{
	return calloc(1, sizeof(struct elfsym_cache));
}

void elfsym_cache__free(struct elfsym_cache *cache)
{
	size_t i;

	if (!cache)
		return;
	for (i = 0; i < cache->nr_owned; i++)
		elfsym__free(cache->owned[i]);
	free(cache->owned);
	free(cache->files);
	free(cache);
}

size_t elfsym_cache__nr_opened(const struct elfsym_cache *cache)
{
	return cache->nr_opened;
}

static bool same_file(const struct cache_file *f, const struct stat *st)
{
	return f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size &&
	       f->mtime.tv_sec == st->st_mtim.tv_sec && f->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static int remember_file(struct elfsym_cache *cache, const struct stat *st, struct elfsym *es,
			 int err)
{
	if (ARRAY_RESERVE(cache->files, cache->cap_files, cache->nr_files + 1, 16))
		return -ENOMEM;
	cache->files[cache->nr_files++] = (struct cache_file){
		.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size, .mtime = st->st_mtim,
		.es = es, .err = err,
	};
	return 0;
}

static int own(struct elfsym_cache *cache, struct elfsym *es)
{
	if (ARRAY_RESERVE(cache->owned, cache->cap_owned, cache->nr_owned + 1, 16))
		return -ENOMEM;
	cache->owned[cache->nr_owned++] = es;
	return 0;
}

/* A lookup is a stat() and a scan of the files seen so far: a traced job maps a few hundred
 * distinct files at most, and callers resolve once per (process, mapping), not per event. */
struct elfsym *elfsym_cache__get(struct elfsym_cache *cache, const char *path)
{
	struct elfsym *es = NULL, *shared = NULL;
	struct stat st;
	size_t i;
	int err = 0;

	if (stat(path, &st))
		return NULL;
	for (i = 0; i < cache->nr_files; i++) {
		if (!same_file(&cache->files[i], &st))
			continue;
		if (!cache->files[i].es)
			errno = -cache->files[i].err;
		return cache->files[i].es;
	}

	es = es_begin(path, &st);
	if (!es) {
		err = -errno;
		cache->nr_opened++;
		goto cleanup;
	}
	/* the same library reached through another path or another mount namespace: only its
	 * headers and notes were read */
	for (i = 0; es->build_id[0] && i < cache->nr_owned; i++) {
		if (strcmp(cache->owned[i]->build_id, es->build_id) == 0) {
			shared = cache->owned[i];
			break;
		}
	}
	if (shared) {
		elfsym__free(es);
		es = shared;
	} else {
		cache->nr_opened++;
		err = es_load_syms(es);
		if (!err)
			err = own(cache, es);
	}

cleanup:
	if (err) {
		elfsym__free(es);
		/* a file that is not ELF stays that way until it changes; memory pressure does not */
		if (err != -ENOMEM && err != -EMFILE && err != -ENFILE)
			remember_file(cache, &st, NULL, err);
		errno = -err;
		return NULL;
	}
	/* es is owned by now; on ENOMEM only this path's key is lost */
	remember_file(cache, &st, es, 0);
	return es;
}
