// SPDX-License-Identifier: MIT
/* user/core/ustack_native.c: the frame-pointer prologue recogniser on byte sequences, then the
 * resolver from outside on stacks a live workload captured the way the BPF walker does
 * (tests/workloads/native_fp_lib.c says how the probe's entry state is reproduced): exact
 * function names of the frames kept, the stop line naming the function without a frame
 * pointer, module offsets, synthetic stops (no mapping, depth limit, left the stack), the
 * live stack compared with eu-stack, and the cached cost per frame.
 * Needs no root: the workload is our child (eu-stack's part is skipped, saying why, where
 * ptrace is refused). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ustacks.h"	/* bpf/ustacks.h: the walker's flags */
#include "check.h"
#include "elfsym.h"
#include "ustack_native.h"

#define NFP_DIR		UNIT_OUT_DIR "/../tests/nfp"
#define MAX_PCS		32

struct workload {
	pid_t pid;
	FILE *in, *out;		/* its stdin, its stdout */
};

struct capture {
	uint32_t flags;
	int n;
	uint64_t pcs[MAX_PCS];
};

static int spawn(struct workload *w, const char *path)
{
	int to[2], from[2];

	if (pipe(to) || pipe(from))
		return -errno;
	w->pid = fork();
	if (w->pid < 0)
		return -errno;
	if (!w->pid) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execl(path, path, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	w->in = fdopen(to[1], "w");
	w->out = fdopen(from[0], "r");
	return w->in && w->out ? 0 : -ENOMEM;
}

static bool read_line(struct workload *w, char *buf, size_t size)
{
	while (fgets(buf, size, w->out)) {
		if (strncmp(buf, "# ", 2) || !strncmp(buf, "# PCS ", 6))
			return true;
	}
	return false;
}

static void say(struct workload *w, const char *line)
{
	fprintf(w->in, "%s\n", line);
	fflush(w->in);
}

static bool read_capture(struct workload *w, struct capture *c)
{
	char line[2048], *p;
	int used;

	if (!read_line(w, line, sizeof(line)))
		return false;
	if (sscanf(line, "# PCS %x %d%n", &c->flags, &c->n, &used) != 2 || c->n < 1 || c->n > MAX_PCS)
		return false;
	p = line + used;
	for (int i = 0; i < c->n; i++)
		c->pcs[i] = strtoull(p, &p, 16);
	return true;
}

static const char *base(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;

	return slash ? slash + 1 : path;
}

static void check_names(const struct ustack_frame *f, int got, const char *const *want, int nr_want)
{
	CHECK(got >= nr_want, "kept %d frames, want at least %d", got, nr_want);
	for (int i = 0; i < nr_want && i < got; i++)
		CHECK_STR(f[i].func, want[i]);
}

/* ---- the prologue recogniser --------------------------------------------------------------- */

struct prologue_case {
	const char *what;
	const char *bytes;
	size_t len;
	bool fp;
};

#define PC(what, b, fp) { what, b, sizeof(b) - 1, fp }

static const struct prologue_case prologues[] = {
	PC("push; mov", "\x55\x48\x89\xe5\x53", true),
	PC("endbr64; push; mov", "\xf3\x0f\x1e\xfa\x55\x48\x89\xe5", true),
	PC("push; mov (8b ec encoding)", "\x55\x48\x8b\xec", true),
	/* GCC -O2 fp_vla: movslq, lea, mov, and scheduled before mov %rsp,%rbp */
	PC("GCC scheduled (vla)", "\x55\x48\x63\xd7\x48\x8d\x42\x0f\x89\xd6\x48\x83\xe0\xf0\x48\x89\xe5",
	   true),
	/* GCC -O2 wl_inner: rip-relative load and add before mov */
	PC("GCC scheduled (rip load)", "\xf3\x0f\x1e\xfa\x55\x8b\x35\xc1\x2d\x00\x00\x83\xc6\x08\x48\x89\xe5",
	   true),
	PC("GCC scheduled (mov $1,%esi)", "\x55\xbe\x01\x00\x00\x00\x48\x89\xe5", true),
	PC("GCC scheduled (xor)", "\x55\x31\xf6\x48\x89\xe5", true),
	PC("stack protector load", "\x55\x64\x48\x8b\x04\x25\x28\x00\x00\x00\x48\x89\xe5", true),
	PC("no push (omit-frame-pointer)", "\x48\x83\xec\x08\x89\xf8", false),
	PC("shrink-wrapped (test; je first)", "\x48\x85\xff\x74\x2b\x55\x48\x89\xe5", false),
	PC("push %rbx between", "\x55\x53\x48\x89\xe5", false),
	PC("sub $8,%rsp between", "\x55\x48\x83\xec\x08\x48\x89\xe5", false),
	PC("rbp as a register (mov %rdi,%rbp)", "\x55\x48\x89\xfd\x53", false),
	PC("rbp written between (mov %rdi,%rbp)", "\x55\x48\x89\xfd\x48\x89\xe5", false),
	PC("ebp written between (xor %ebp,%ebp)", "\x55\x31\xed\x48\x89\xe5", false),
	PC("rsp written between (lea (%rsp),%rsp)", "\x55\x48\x8d\x24\x24\x48\x89\xe5", false),
	PC("mov %r13,%rbp (4c 89 ed), not %rsp", "\x55\x4c\x89\xed", false),
	PC("cut after push", "\x55", false),
	PC("cut inside mov", "\x55\x48\x89", false),
	PC("cut inside a scheduled lea", "\x55\x48\x8d\x42", false),
	PC("endbr64 only", "\xf3\x0f\x1e\xfa", false),
	PC("a call between", "\x55\xe8\x00\x00\x00\x00\x48\x89\xe5", false),
};

static void test_prologues(void)
{
	for (size_t i = 0; i < sizeof(prologues) / sizeof(prologues[0]); i++) {
		const struct prologue_case *c = &prologues[i];

		CHECK(native_prologue_sets_fp((const uint8_t *)c->bytes, c->len) == c->fp,
		      "%s: want %s", c->what, c->fp ? "frame pointer" : "none");
	}
}

/* The fixture must exercise what it claims: GCC put instructions between push %rbp and
 * mov %rsp,%rbp in fp_vla; nofp_b has no push %rbp at all; fp_shrink tests its argument before
 * pushing rbp, so only the CFI can vouch for its frame pointer. */
static void check_fixture_shapes(void)
{
	static const struct { const char *lib, *func; bool scheduled, fp; } want[] = {
		{ "libnfp_fp.so", "fp_vla", true, true },
		{ "libnfp_nofp.so", "nofp_b", false, false },
		{ "libnfp_fp.so", "fp_shrink", false, false },	/* shrink-wrapped: the CFI tells */
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char path[512];
		uint8_t code[32];
		struct elfsym *es;
		const struct elfsym_sym *sym;
		uint64_t off;
		int fd;

		snprintf(path, sizeof(path), "%s/%s", NFP_DIR, want[i].lib);
		es = elfsym__open(path);
		CHECK(es, "open %s: %s", path, strerror(errno));
		if (!es)
			continue;
		sym = elfsym__find_func(es, want[i].func);
		CHECK(sym && !elfsym__vaddr_to_off(es, sym->vaddr, &off), "%s in %s", want[i].func,
		      path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (sym && fd >= 0 && pread(fd, code, sizeof(code), off) == (ssize_t)sizeof(code)) {
			CHECK(native_prologue_sets_fp(code, sizeof(code)) == want[i].fp,
			      "%s: frame pointer %d", want[i].func, want[i].fp);
			if (want[i].scheduled)
				CHECK(code[0] == 0x55 && memcmp(code + 1, "\x48\x89\xe5", 3),
				      "%s: GCC scheduled nothing between push and mov: the fixture "
				      "no longer tests that (%02x %02x)", want[i].func, code[0], code[1]);
		}
		if (fd >= 0)
			close(fd);
		elfsym__free(es);
	}
}

/* ---- the live workload --------------------------------------------------------------------- */

/* eu-stack (CFI unwinding) sees fp_a between nofp_b and wl_inner: the raw frame-pointer walk
 * skips it, which is why the resolver must stop at nofp_b. */
static void compare_eu_stack(pid_t pid)
{
	char cmd[128], line[1024];
	int at_nofp = -1, at_fp_a = -1, at_inner = -1, i = 0;
	FILE *f;

	if (access("/usr/bin/eu-stack", X_OK)) {
		SKIP("no /usr/bin/eu-stack: the live stack is not compared");
		return;
	}
	snprintf(cmd, sizeof(cmd), "/usr/bin/eu-stack -p %d 2>&1", (int)pid);
	f = popen(cmd, "r");
	if (!f) {
		SKIP("eu-stack: %s", strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, " nofp_b"))
			at_nofp = i;
		else if (strstr(line, " fp_a"))
			at_fp_a = i;
		else if (strstr(line, " wl_inner"))
			at_inner = i;
		i++;
	}
	if (pclose(f) && at_nofp < 0) {
		SKIP("eu-stack could not attach (ptrace refused?): the live stack is not compared");
		return;
	}
	CHECK(at_nofp >= 0 && at_fp_a > at_nofp && at_inner > at_fp_a,
	      "eu-stack: nofp_b at %d, fp_a at %d, wl_inner at %d", at_nofp, at_fp_a, at_inner);
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void via_nofp(struct native_resolver *r, pid_t pid, const struct capture *c)
{
	static const char *const want[] = { "nfp_probed", "fp_c", "nofp_b" };
	struct ustack_frame f[MAX_PCS];
	const char *stop;
	uint64_t two[2];
	int kept;

	kept = native_resolver__resolve(r, pid, c->pcs, c->n, c->flags, f, &stop);
	CHECK(kept == 3, "via nofp_b: kept %d frames, want 3", kept);
	check_names(f, kept, want, 3);
	/* the prologue says no, and the CFI confirms it at the call */
	CHECK_STR(stop, "no frame pointer in libnfp_nofp.so (nofp_b)");
	CHECK_STR(base(f[0].file), "libnfp_fp.so");
	CHECK_STR(base(kept > 2 ? f[2].file : NULL), "libnfp_nofp.so");
	CHECK_U64(f[1].pc, c->pcs[1]);
	/* the hazard the rule guards against: the walk's next address skips fp_a (frame 1 of a
	 * two-address stack is always kept, which resolves pcs[3] alone) */
	CHECK(c->n > 3, "the walk gave only %d addresses", c->n);
	two[0] = c->pcs[0];
	two[1] = c->n > 3 ? c->pcs[3] : 0;
	kept = native_resolver__resolve(r, pid, two, 2, 0, f, &stop);
	CHECK(kept == 2, "raw pcs[3]: kept %d", kept);
	if (kept == 2)
		CHECK_STR(f[1].func, "wl_inner");

	/* synthetic stops on the same process */
	two[1] = 0x10;
	kept = native_resolver__resolve(r, pid, two, 2, 0, f, &stop);
	CHECK(kept == 1, "pc 0x10: kept %d, want 1", kept);
	CHECK_STR(stop, "return address 0x10 outside any executable mapping");
	kept = native_resolver__resolve(r, pid, c->pcs, 0, TP_USTACK_NATIVE_FAULT, f, &stop);
	CHECK(kept == 0, "no frames: kept %d", kept);
	CHECK_STR(stop, "the thread's stack could not be read");
	compare_eu_stack(pid);
}

/* main returns into glibc's __libc_start_call_main, which keeps no frame pointer (its CFI
 * says so): nameless in a stripped libc.so.6, named where libc has a .symtab. */
static void check_libc_stop(const struct ustack_frame *f, const char *stop)
{
	char want[128];

	CHECK(f, "no libc frame");
	if (!f)
		return;
	CHECK_STR(base(f->file), "libc.so.6");
	if (f->func)
		snprintf(want, sizeof(want), "no frame pointer in libc.so.6 (%s)", f->func);
	else
		snprintf(want, sizeof(want), "no frame pointer in libc.so.6+0x%llx (no symbol)",
			 (unsigned long long)f->module_off);
	CHECK_STR(stop, want);
}

static void all_fp(struct native_resolver *r, pid_t pid, const struct capture *c)
{
	static const char *const want[] = { "nfp_probed", "fp_c", "fp_vla", "fp_shrink", "fp_a",
					    "wl_inner", "wl_outer", "main" };
	struct ustack_frame f[MAX_PCS];
	const struct elfsym_sym *sym;
	const char *stop;
	struct elfsym *es;
	double t0, ns;
	int kept, iters = 200000;
	char path[512];

	t0 = now_ns();
	kept = native_resolver__resolve(r, pid, c->pcs, c->n, c->flags, f, &stop);
	printf("# first sight: %.1f us for a stack of %d addresses (new: the executable and "
	       "libc.so.6, 6 prologues, 2 CFI reads)\n", (now_ns() - t0) / 1e3, c->n);
	CHECK(kept == 9, "all frame pointers: kept %d frames, want 9 (to libc)", kept);
	check_names(f, kept, want, 8);
	CHECK_STR(base(kept > 7 ? f[7].file : NULL), "native_fp_app");
	check_libc_stop(kept > 8 ? &f[8] : NULL, stop);
	/* module_off is the ELF address: fp_c's return address lies inside fp_c */
	snprintf(path, sizeof(path), "%s/libnfp_fp.so", NFP_DIR);
	es = elfsym__open(path);
	sym = es ? elfsym__find_func(es, "fp_c") : NULL;
	CHECK(sym && f[1].module_off > sym->vaddr && f[1].module_off <= sym->vaddr + sym->size,
	      "fp_c's return address at 0x%llx", (unsigned long long)f[1].module_off);
	/* a return address equal to a function's start (after a call to a noreturn function
	 * that ends the previous one) belongs to the call before it: fp_vla's first byte as a
	 * return address is not fp_vla */
	sym = es && kept > 2 ? elfsym__find_func(es, "fp_vla") : NULL;
	CHECK(sym, "fp_vla in %s", path);
	if (sym) {
		uint64_t two[2] = { c->pcs[0], f[2].pc - f[2].module_off + sym->vaddr };
		struct ustack_frame g[2];

		CHECK(native_resolver__resolve(r, pid, two, 2, 0, g, &stop) == 2, "fp_vla's start");
		CHECK(!g[1].func || strcmp(g[1].func, "fp_vla"), "a return address at fp_vla's "
		      "first byte resolved to fp_vla");
	}
	elfsym__free(es);

	/* a chain that ends in _start (the walker found rbp = 0 above it): the real end, which
	 * _start's CFI marks by leaving the return address undefined */
	snprintf(path, sizeof(path), "%s/native_fp_app", NFP_DIR);
	es = kept > 7 ? elfsym__open(path) : NULL;
	sym = es ? elfsym__find_func(es, "_start") : NULL;
	CHECK(sym, "_start in %s", path);
	if (sym) {
		uint64_t end[3] = { c->pcs[0], c->pcs[1], 0 }, off;
		struct ustack_frame g[3];
		uint8_t code[64];
		int fd = open(path, O_RDONLY | O_CLOEXEC), got = 0;

		/* the return address of _start's call *__libc_start_main@GOTPCREL(%rip) */
		if (fd >= 0 && !elfsym__vaddr_to_off(es, sym->vaddr, &off))
			got = pread(fd, code, sizeof(code), off);
		for (int i = 0; i + 6 <= got && !end[2]; i++)
			if (code[i] == 0xff && code[i + 1] == 0x15)
				end[2] = f[7].pc - f[7].module_off + sym->vaddr + i + 6;
		CHECK(end[2], "no call in _start");
		if (fd >= 0)
			close(fd);
		/* fp_c, the frame before it, keeps a frame pointer */
		kept = native_resolver__resolve(r, pid, end, 3, TP_USTACK_NATIVE_LEFT_STACK, g, &stop);
		CHECK(kept == 3, "to _start: kept %d", kept);
		CHECK_STR(kept == 3 ? g[2].func : NULL, "_start");
		CHECK(!stop, "to _start: stop %s", stop ? stop : "(null)");
	}
	elfsym__free(es);

	/* the walker's flags on a chain cut in wl_inner (frame 5) */
	kept = native_resolver__resolve(r, pid, c->pcs, 6, TP_USTACK_NATIVE_TRUNCATED, f, &stop);
	CHECK(kept == 6, "truncated: kept %d", kept);
	CHECK_STR(stop, "more than 32 native frames: cut at the depth limit");
	kept = native_resolver__resolve(r, pid, c->pcs, 6, TP_USTACK_NATIVE_LEFT_STACK, f, &stop);
	CHECK(kept == 6, "left the stack: kept %d", kept);
	CHECK_STR(stop, "the frame-pointer chain left the thread's stack");
	kept = native_resolver__resolve(r, pid, c->pcs, 6, 0, f, &stop);
	CHECK(kept == 6 && !stop, "no flag: kept %d, stop %s", kept, stop ? stop : "(null)");

	/* cached cost: every address seen, every prologue read */
	t0 = now_ns();
	for (int i = 0; i < iters; i++)
		native_resolver__resolve(r, pid, c->pcs, c->n, c->flags, f, &stop);
	ns = (now_ns() - t0) / iters;
	printf("# cached resolution: %.1f ns per stack of %d addresses (9 kept), %.1f ns per frame\n",
	       ns, c->n, ns / 9);
	CHECK(ns / 9 < 1000, "cached resolution %.0f ns per frame", ns / 9);
}

/* A stripped library that keeps its .eh_frame: strip_hidden has no name, but its CFI says
 * rbp is the frame pointer at the call, so the chain goes on to main. */
static void via_stripped(struct native_resolver *r, pid_t pid, const struct capture *c)
{
	static const char *const want[] = { "nfp_probed", NULL, "strip_entry", "fp_a", "wl_inner",
					    "wl_outer", "main" };
	struct ustack_frame f[MAX_PCS];
	const char *stop;
	int kept;

	kept = native_resolver__resolve(r, pid, c->pcs, c->n, c->flags, f, &stop);
	CHECK(kept == 8, "stripped: kept %d frames, want 8 (to libc)", kept);
	check_names(f, kept, want, 7);
	CHECK_STR(base(kept > 1 ? f[1].file : NULL), "libnfp_strip.so");
	CHECK_STR(base(kept > 2 ? f[2].file : NULL), "libnfp_strip.so");
	check_libc_stop(kept > 7 ? &f[7] : NULL, stop);
}

/* Stripped and without unwind tables: nothing tells whether the nameless function keeps a
 * frame pointer, so the chain stops after it, saying so. */
static void via_bare(struct native_resolver *r, pid_t pid, const struct capture *c)
{
	struct ustack_frame f[MAX_PCS];
	char want_stop[160];
	const char *stop;
	int kept;

	kept = native_resolver__resolve(r, pid, c->pcs, c->n, c->flags, f, &stop);
	CHECK(kept == 2, "bare: kept %d frames, want 2", kept);
	CHECK_STR(kept > 0 ? f[0].func : NULL, "nfp_probed");
	CHECK(kept > 1 && !f[1].func, "bare frame named %s", kept > 1 ? f[1].func : "-");
	CHECK_STR(base(kept > 1 ? f[1].file : NULL), "libnfp_bare.so");
	snprintf(want_stop, sizeof(want_stop), "no symbol covers libnfp_bare.so+0x%llx: cannot "
		 "tell whether it keeps a frame pointer",
		 (unsigned long long)(kept > 1 ? f[1].module_off : 0));
	CHECK_STR(stop, want_stop);
}

static void test_workload(void)
{
	const struct native_resolver_stats *st;
	struct native_resolver *r;
	struct capture c[4];
	struct workload w;
	char line[256];
	int status;

	if (spawn(&w, NFP_DIR "/native_fp_app")) {
		CHECK(0, "spawn %s", NFP_DIR "/native_fp_app");
		return;
	}
	r = native_resolver__new(NULL);
	CHECK(r, "native_resolver__new");
	CHECK(read_line(&w, line, sizeof(line)) && !strncmp(line, "READY ", 6), "READY: %s", line);
	say(&w, "GO");
	for (int i = 0; i < 4 && r; i++) {
		if (!read_capture(&w, &c[i])) {
			CHECK(0, "capture %d", i + 1);
			break;
		}
		if (i == 0)
			via_nofp(r, w.pid, &c[i]);
		else if (i == 1)
			all_fp(r, w.pid, &c[i]);
		else if (i == 2)
			via_stripped(r, w.pid, &c[i]);
		else
			via_bare(r, w.pid, &c[i]);
		say(&w, "NEXT");
	}
	CHECK(read_line(&w, line, sizeof(line)) && !strcmp(line, "DONE\n"), "DONE");
	fclose(w.in);
	fclose(w.out);
	CHECK(waitpid(w.pid, &status, 0) == w.pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "workload exit status 0x%x", status);
	if (!r)
		return;
	st = native_resolver__stats(r);
	/* prologues: nfp_probed is never judged (frame 0); fp_c, fp_vla, fp_a, wl_inner,
	 * wl_outer, main, strip_entry with a frame pointer; fp_shrink, nofp_b (and libc's
	 * function where it has a name) without. The CFI was read where a prologue said no or
	 * there was no name: fp_shrink's and strip_hidden's calls have rbp as the frame
	 * pointer; nofp_b's and libc's do not; bare_hidden has no CFI. The last frame's CFI is
	 * read too, for the end mark _start has (and wl_inner's, the last of a cut chain, has
	 * rbp as the frame pointer). */
	CHECK_U64(st->functions_with_fp, 7);
	CHECK(st->functions_checked == 9 || st->functions_checked == 10, "%llu prologues read",
	      (unsigned long long)st->functions_checked);
	CHECK_U64(st->cfi_with_fp, 3);
	CHECK_U64(st->cfi_ends, 1);	/* _start */
	CHECK(st->cfi_checked >= 5, "%llu CFI reads", (unsigned long long)st->cfi_checked);
	printf("# %llu prologues read, %llu with a frame pointer; %llu call sites' CFI read, %llu "
	       "with a frame pointer; %llu maps reads\n",
	       (unsigned long long)st->functions_checked, (unsigned long long)st->functions_with_fp,
	       (unsigned long long)st->cfi_checked, (unsigned long long)st->cfi_with_fp,
	       (unsigned long long)st->maps_reads);

	/* after forget, the (gone) pid's mappings cannot be read again: one clear errno */
	native_resolver__forget(r, w.pid);
	{
		struct ustack_frame f[2];
		const char *stop;

		CHECK(native_resolver__resolve(r, w.pid, c[0].pcs, 2, 0, f, &stop) == -ESRCH,
		      "resolve for an exited, forgotten pid");
	}
	native_resolver__free(r);
}

int main(void)
{
	test_prologues();
	check_fixture_shapes();
	test_workload();
	native_resolver__free(NULL);
	return check_done();
}
